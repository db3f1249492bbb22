// Seeded random numbers: a small, fast, reproducible generator (xoshiro256** seeded by splitmix64).
#pragma once
#include <cmath>
#include <cstdint>

namespace canvas {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) {
    for (auto& s : state_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  // Uniform in (0, 1): safe to take the log of.
  double uniform_open() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return uint64_t(uniform() * double(n)) % n; }
  // Standard Gumbel sample: -log(-log(u)).
  double gumbel() { return -std::log(-std::log(uniform_open())); }
  // Standard normal (Box-Muller).
  double normal() {
    const double u1 = uniform_open(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t state_[4];
};

}  // namespace canvas
