// The user's cache directory for canvas, and its eviction.
#include "core/cache_dir.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <tuple>
#include <vector>

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

void bound_cache_dir(const std::string& dir, uint64_t max_bytes, size_t max_files, const std::string& keep) {
  namespace fs = std::filesystem;
  std::error_code ec;
  struct CacheFile {
    fs::file_time_type used;
    fs::path path;
    uint64_t bytes;
  };
  std::vector<CacheFile> files;
  uint64_t total = 0;
  size_t count = 0;
  const fs::path kept = fs::path(keep).lexically_normal();
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    std::error_code entry_ec;
    if (entry.symlink_status(entry_ec).type() != fs::file_type::regular) continue;
    if (entry.path().extension() == ".tmp") continue;  // being written (or a dead writer's, removed by write_file)
    const uint64_t bytes = entry.file_size(entry_ec);
    const fs::file_time_type used = entry.last_write_time(entry_ec);
    if (entry_ec) continue;
    total += bytes;
    ++count;
    if (entry.path().lexically_normal() != kept) files.push_back({used, entry.path(), bytes});
  }
  std::sort(files.begin(), files.end(),
            [](const CacheFile& a, const CacheFile& b) { return std::tie(a.used, a.path) < std::tie(b.used, b.path); });
  for (const CacheFile& file : files) {
    if (total <= max_bytes && count <= max_files) break;
    std::error_code remove_ec;
    if (fs::remove(file.path, remove_ec)) total -= file.bytes, --count;
  }
}

}  // namespace canvas
