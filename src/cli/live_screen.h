// A live view on stderr's alternate screen (the terminal's second buffer, as less and top use): frames
// drawn over each other, each at least a given time on screen, and nothing left on the normal screen
// afterwards, also when SIGINT or SIGTERM ends the process while a frame is shown.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace canvas::cli {

class LiveScreen {
 public:
  explicit LiveScreen(int64_t delay_ms) : delay_ms_(delay_ms) {}
  // Draws `frame` once the last one has had delay_ms on screen (the first enters the alternate screen).
  void show(const std::string& frame);
  // Leaves the alternate screen once the last frame has had its time (nothing to leave before a frame).
  void close();

 private:
  int64_t delay_ms_;
  std::chrono::steady_clock::time_point next_frame_{};  // when the next frame may be drawn
};

}  // namespace canvas::cli
