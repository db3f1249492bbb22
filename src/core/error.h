// Error type of the engine: every failure carries a message naming the file, tensor or key at fault.
#pragma once
#include <stdexcept>
#include <string>

namespace canvas {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error(message) when the condition is false. For checks on input data, never for asserts.
inline void check(bool condition, const std::string& message) {
  if (!condition) throw Error(message);
}

}  // namespace canvas
