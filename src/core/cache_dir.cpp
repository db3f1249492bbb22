// The user's cache directory for canvas.
#include "core/cache_dir.h"

#include <cstdlib>
#include <filesystem>

namespace canvas {

std::string user_cache_dir() {
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache)
    return (std::filesystem::path(cache) / "canvas").string();
  if (const char* home = std::getenv("HOME"); home && *home)
    return (std::filesystem::path(home) / ".cache" / "canvas").string();
  return "";
}

}  // namespace canvas
