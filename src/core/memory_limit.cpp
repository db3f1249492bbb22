// usable_memory_bytes: physical memory, resource limits and the cgroup's limit.
#include "core/memory_limit.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <string>

namespace canvas {

uint64_t usable_memory_bytes() {
  uint64_t bytes = uint64_t(std::max(0L, sysconf(_SC_PHYS_PAGES))) * uint64_t(std::max(0L, sysconf(_SC_PAGESIZE)));
  if (bytes == 0) bytes = UINT64_MAX;
  for (const int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    rlimit limit{};
    if (getrlimit(resource, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
      bytes = std::min<uint64_t>(bytes, limit.rlim_cur);
  }
  // "max" (v2) or a number past any machine's memory (v1's unlimited) leave it as it is.
  for (const char* cgroup : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::string text;
    std::ifstream(cgroup) >> text;
    if (!text.empty() && std::isdigit(static_cast<unsigned char>(text[0])))
      bytes = std::min<uint64_t>(bytes, std::strtoull(text.c_str(), nullptr, 10));
  }
  return bytes;
}

}  // namespace canvas
