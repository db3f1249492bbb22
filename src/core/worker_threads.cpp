// Threads on demand, bounded, leaving when idle.
#include "core/worker_threads.h"

#include <pthread.h>

#include "core/error.h"

namespace canvas {

WorkerThreads::WorkerThreads(std::string name, size_t max_threads, std::chrono::milliseconds idle_exit)
    : name_(name.substr(0, 15)), max_threads_(max_threads), idle_exit_(idle_exit) {
  check(max_threads_ >= 1, "WorkerThreads '" + name_ + "' needs at least one thread");
}

WorkerThreads::~WorkerThreads() {
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  wake_.notify_all();
  // A thread leaves only once the queue is empty, so every posted task runs.
  while (!threads_.empty()) {
    std::vector<std::thread> all;
    for (auto& [id, t] : threads_) all.push_back(std::move(t));
    threads_.clear();
    left_.clear();
    lock.unlock();
    for (std::thread& t : all) t.join();
    lock.lock();
  }
}

void WorkerThreads::reap() {
  for (const std::thread::id& id : left_) {
    auto it = threads_.find(id);
    if (it == threads_.end()) continue;
    it->second.join();  // it has left its loop: only its return remains
    threads_.erase(it);
  }
  left_.clear();
}

void WorkerThreads::post(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mutex_);
  reap();
  tasks_.push_back(std::move(task));
  if (idle_ >= tasks_.size() || threads_.size() - left_.size() >= max_threads_) {
    wake_.notify_one();
    return;
  }
  std::thread t([this] { loop(); });
  const std::thread::id id = t.get_id();
  pthread_setname_np(t.native_handle(), name_.c_str());
  threads_.emplace(id, std::move(t));
}

void WorkerThreads::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (tasks_.empty()) {
      if (stopping_) break;
      ++idle_;
      const bool woken = wake_.wait_for(lock, idle_exit_, [&] { return stopping_ || !tasks_.empty(); });
      --idle_;
      if (!woken) break;  // idled long enough: leave
      continue;
    }
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    ++busy_;
    lock.unlock();
    task();
    task = nullptr;  // what the task captured goes before the thread counts as idle
    lock.lock();
    --busy_;
  }
  if (!stopping_) left_.push_back(std::this_thread::get_id());
}

size_t WorkerThreads::threads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return threads_.size() - left_.size();
}

size_t WorkerThreads::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return busy_;
}

size_t WorkerThreads::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tasks_.size();
}

}  // namespace canvas
