#include "serve/shutdown.h"

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace canvas::serve {
namespace {

const char* signal_name(int signal) { return signal == SIGTERM ? "SIGTERM" : "SIGINT"; }

}  // namespace

SignalWaiter& SignalWaiter::start(std::function<void(const std::string&)> say) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  static SignalWaiter waiter;
  std::thread([signals, say = std::move(say)] {
    int received = 0;
    sigwait(&signals, &received);
    std::unique_lock<std::mutex> lock(waiter.mutex_);
    if (!waiter.ready_) {
      say(std::string(signal_name(received)) + " while loading: stopped");
      std::fflush(stderr);
      std::_Exit(0);
    }
    waiter.received_ = received;
    waiter.signalled_.notify_all();
  }).detach();
  return waiter;
}

std::string SignalWaiter::ready_then_wait(const std::function<void()>& announce) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_ = true;
  announce();
  signalled_.wait(lock, [this] { return received_ != 0; });
  return signal_name(received_);
}

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
