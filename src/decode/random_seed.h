// A fresh random seed for a request that names none (the CLI without -s or with -s -1, an API request
// without "seed"): the result reports it, so that the run can be repeated with it.
#pragma once
#include <cstdint>
#include <random>

namespace canvas {

// From std::random_device; kept below 2^53 so that JSON readers that hold numbers as doubles read it back
// exactly.
inline uint64_t random_seed() {
  std::random_device device;
  return ((uint64_t(device()) << 32) | device()) & ((uint64_t(1) << 53) - 1);
}

}  // namespace canvas
