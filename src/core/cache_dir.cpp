// The user's cache directory for canvas.
#include "core/cache_dir.h"

#include <cstdlib>
#include <filesystem>

namespace canvas {

std::string user_cache_dir() {
  // The XDG spec: a relative path in XDG_CACHE_HOME is invalid and ignored (it would put the cache under
  // whatever directory canvas happens to run in).
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache == '/')
    return (std::filesystem::path(cache) / "canvas").string();
  if (const char* home = std::getenv("HOME"); home && *home)
    return (std::filesystem::path(home) / ".cache" / "canvas").string();
  return "";
}

}  // namespace canvas
