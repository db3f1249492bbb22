// Stopping `canvas serve` on SIGTERM / SIGINT within a bounded time: new and queued requests are refused at
// once, running ones may finish for a while and are then cancelled, connections close, and a watchdog ends
// the process if a forward pass still holds it at the last deadline.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "serve/http_server.h"

namespace canvas::serve {

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
