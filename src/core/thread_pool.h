// A fixed pool of worker threads running parallel-for loops; the calling thread takes part.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace canvas {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Runs fn(thread_index, n_threads) once on every thread (the caller is index 0) and waits.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into contiguous chunks of at least `grain` items, one per thread, and runs
  // fn(begin, end) on each. Results must not depend on the split (no cross-chunk reductions),
  // which is what makes output identical for every thread count.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  // Workers spin briefly on the generation counter before sleeping on the condition variable, and the
  // caller spins on `pending_`: a forward pass issues dozens of short parallel loops per token, and a
  // futex sleep/wake per loop would cost more than the loop itself.
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_cv_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

// Single-threaded fallback usable where a pool pointer may be null.
void parallel_for(ThreadPool* pool, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace canvas
