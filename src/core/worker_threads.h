// Threads started on demand up to a bound, each leaving after it has idled for a while: a server's
// request handlers and generation slots cost no thread at rest and never more than the bound under load.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace canvas {

class WorkerThreads {
 public:
  // name: the threads' name as the OS shows it (at most 15 characters); max_threads >= 1.
  WorkerThreads(std::string name, size_t max_threads,
                std::chrono::milliseconds idle_exit = std::chrono::seconds(10));
  ~WorkerThreads();  // runs the tasks already posted, then joins every thread
  WorkerThreads(const WorkerThreads&) = delete;
  WorkerThreads& operator=(const WorkerThreads&) = delete;

  // Runs task on an idle thread, on a new one while fewer than max_threads exist, else after the tasks
  // posted before it (first in, first out).
  void post(std::function<void()> task);

  size_t max_threads() const { return max_threads_; }
  size_t threads() const;  // alive now
  size_t busy() const;     // running a task now
  size_t waiting() const;  // posted, not started

 private:
  void loop();
  void reap();  // joins threads that have left (mutex_ held)

  const std::string name_;
  const size_t max_threads_;
  const std::chrono::milliseconds idle_exit_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  std::map<std::thread::id, std::thread> threads_;
  std::vector<std::thread::id> left_;  // exited, not yet joined
  size_t idle_ = 0, busy_ = 0;
  bool stopping_ = false;
};

}  // namespace canvas
