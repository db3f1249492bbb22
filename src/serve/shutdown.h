// Stopping `canvas serve` on SIGTERM / SIGINT: at once while the models load, else within a bounded time:
// new and queued requests are refused at once, running ones may finish for a while and are then cancelled,
// connections close, and a watchdog ends the process if a forward pass still holds it at the last deadline.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "serve/http_server.h"

namespace canvas::serve {

// The thread that takes SIGTERM and SIGINT from the start. While the models load (a model, a datastore's
// tokenization, a cost model's timing: none of which stops part-way; issue 61: 37 s for a 40 MB corpus,
// then `ready`), a signal ends the process at once, saying so: nothing is served yet, and every file being
// written goes through a temporary, so nothing is left half-written. Once ready, it hands the signal to
// the caller, which shuts down gracefully. One per process (detached: it outlives any error path).
class SignalWaiter {
 public:
  // Blocks both signals in the calling thread, so call it before any other thread starts (they inherit
  // the mask); `say` gets the line when a signal stops the loading.
  static SignalWaiter& start(std::function<void(const std::string&)> say);
  // Runs `announce` (the ready line) as loading ends, never after a signal ended it; then waits for a
  // signal and returns its name ("SIGTERM" or "SIGINT").
  std::string ready_then_wait(const std::function<void()>& announce);

 private:
  std::mutex mutex_;
  std::condition_variable signalled_;
  bool ready_ = false;
  int received_ = 0;
};

// Milliseconds after the signal: running requests may finish until finish_ms; every connection is closed
// by close_ms; the process is gone by exit_ms.
struct ShutdownDeadlines {
  int64_t finish_ms = 4000, close_ms = 4800, exit_ms = 5000;
};

// server.stop(finish, close), then joins `http` (the thread running server.serve()) and calls
// `stop_engines`. If that has not returned by exit_ms, `say` gets a line and the process exits with
// status 1 (std::_Exit: a forward pass in flight cannot be interrupted).
void shut_down(HttpServer& server, std::thread& http, const std::function<void()>& stop_engines,
               const ShutdownDeadlines& deadlines, const std::function<void(const std::string&)>& say);

}  // namespace canvas::serve
