// The live view on stderr's alternate screen (see live_screen.h).
#include "cli/live_screen.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

namespace canvas::cli {
namespace {
// The alternate screen is left on SIGINT / SIGTERM too, so that no frame stays on the user's terminal.
std::atomic<bool> on_alternate_screen{false};
constexpr char kEnterScreen[] = "\x1b[?1049h\x1b[H";
constexpr char kLeaveScreen[] = "\x1b[?1049l";
void leave_screen_and_die(int sig) {
  if (on_alternate_screen.exchange(false)) {
    const ssize_t ignored = write(STDERR_FILENO, kLeaveScreen, sizeof kLeaveScreen - 1);
    (void)ignored;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}
}  // namespace

void LiveScreen::show(const std::string& frame) {
  if (!on_alternate_screen.exchange(true)) {
    std::fputs(kEnterScreen, stderr);
    signal(SIGINT, leave_screen_and_die);
    signal(SIGTERM, leave_screen_and_die);
  }
  if (std::chrono::steady_clock::now() < next_frame_) std::this_thread::sleep_until(next_frame_);
  std::fputs(("\x1b[H\x1b[J" + frame).c_str(), stderr);
  std::fflush(stderr);
  next_frame_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms_);
}

void LiveScreen::close() {
  if (on_alternate_screen.exchange(false)) {
    if (std::chrono::steady_clock::now() < next_frame_) std::this_thread::sleep_until(next_frame_);  // the last one too
    std::fputs(kLeaveScreen, stderr);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
  }
  std::fflush(stderr);
}

}  // namespace canvas::cli
