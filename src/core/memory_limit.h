// The memory this process may use: what a bound on one request's allocations is measured against.
#pragma once
#include <cstdint>

namespace canvas {

// In bytes: the machine's physical memory, lowered to the address-space and data limits (RLIMIT_AS,
// RLIMIT_DATA: `ulimit -v`) and the cgroup's memory.max (v2) or memory.limit_in_bytes (v1). Read at each
// call, so a limit set after start counts.
uint64_t usable_memory_bytes();

}  // namespace canvas
