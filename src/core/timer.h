// Wall-clock timing.
#pragma once
#include <chrono>

namespace canvas {

inline double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace canvas
