#include "serve/shutdown.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>

namespace canvas::serve {

void shut_down(HttpServer& server, std::thread& http, const std::function<void()>& stop_engines,
               const ShutdownDeadlines& deadlines, const std::function<void(const std::string&)>& say) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadlines.exit_ms);
  std::mutex mutex;
  std::condition_variable cv;
  bool stopped = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mutex);
    if (!cv.wait_until(lock, deadline, [&] { return stopped; })) {
      say("still stopping after " + std::to_string(deadlines.exit_ms / 1000) +
          " s (a forward pass is running); exiting now");
      std::_Exit(1);
    }
  });
  // The watchdog is released however the stop ends (an exception included), so it is always joined.
  struct Release {
    std::mutex& mutex;
    std::condition_variable& cv;
    bool& stopped;
    std::thread& watchdog;
    ~Release() {
      {
        std::lock_guard<std::mutex> lock(mutex);
        stopped = true;
      }
      cv.notify_all();
      watchdog.join();
    }
  } release{mutex, cv, stopped, watchdog};
  server.stop(deadlines.finish_ms, deadlines.close_ms);
  http.join();
  stop_engines();
}

}  // namespace canvas::serve
