// Where canvas keeps what it measures or computes once per machine (cost models, tokenized datastores), and
// the bound on that folder's size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace canvas {

// $XDG_CACHE_HOME/canvas when XDG_CACHE_HOME is an absolute path (a relative one is ignored, as the XDG spec
// says), else ~/.cache/canvas; "" when neither applies.
std::string user_cache_dir();

// What canvas's cache folder may hold: 2 GiB and 128 files (a datastore's ids take 4 bytes a token, a
// cost model a few KiB). Every new version of a changing corpus writes a file of its own.
constexpr uint64_t kCacheDirMaxBytes = uint64_t(2) << 30;
constexpr size_t kCacheDirMaxFiles = 128;

// Keeps the cache folder `dir` within `max_bytes` and `max_files`: its regular files are removed oldest
// first (by modification time; readers refresh it on use, so this is least recently used) until both
// hold. `keep` (the file just written) stays whatever its size; temporaries being written (*.tmp) are
// neither counted nor removed; links and other entries are left alone. Failures are ignored.
void bound_cache_dir(const std::string& dir, uint64_t max_bytes, size_t max_files, const std::string& keep);

}  // namespace canvas
