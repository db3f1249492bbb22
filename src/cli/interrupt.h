// Ctrl-C for long loops that write as they go: while an InterruptRequest lives, SIGINT and SIGTERM set a
// flag the loop polls instead of ending the process.
#pragma once
#include <signal.h>

#include <atomic>
#include <csignal>

namespace canvas::cli {

// While alive, SIGINT and SIGTERM ask a long loop to stop (requested()) instead of ending the process, so
// that it can keep what it has written whole and say how far it got.
class InterruptRequest {
 public:
  // sigterm_too false: SIGTERM keeps ending the process (a chat's Ctrl-C ends one reply only).
  explicit InterruptRequest(bool sigterm_too = true) : sigterm_too_(sigterm_too) {
    struct sigaction action {};
    action.sa_handler = [](int) { requested_ = 1; };
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // writes in progress are not cut short
    requested_ = 0;
    sigaction(SIGINT, &action, &old_int_);
    if (sigterm_too_) sigaction(SIGTERM, &action, &old_term_);
  }
  ~InterruptRequest() {
    sigaction(SIGINT, &old_int_, nullptr);
    if (sigterm_too_) sigaction(SIGTERM, &old_term_, nullptr);
  }
  InterruptRequest(const InterruptRequest&) = delete;
  InterruptRequest& operator=(const InterruptRequest&) = delete;
  static bool requested() { return requested_.load() != 0; }

 private:
  static inline std::atomic<int> requested_{0};  // lock-free: set by a handler, read by any thread
  static_assert(std::atomic<int>::is_always_lock_free);
  bool sigterm_too_;
  struct sigaction old_int_ {}, old_term_ {};
};

}  // namespace canvas::cli
