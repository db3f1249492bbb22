// A fixed pool of worker threads running parallel-for loops; the calling thread takes part.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace canvas {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads <= 0: usable_cpus() (affinity and cgroup quota)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // While a Busy scope is open (one forward pass: dozens of short parallel loops with serial work in
  // between), idle workers keep spinning between loops instead of sleeping on the condition variable,
  // yielding the core every few microseconds so a process sharing the cores is not starved. Outside any
  // scope they spin only briefly, then sleep: an idle server burns no core. Scopes nest; a null pool
  // is accepted.
  class Busy {
   public:
    explicit Busy(ThreadPool* pool) : pool_(pool) {
      if (pool_) pool_->busy_.fetch_add(1, std::memory_order_relaxed);
    }
    ~Busy() {
      if (pool_) pool_->busy_.fetch_sub(1, std::memory_order_relaxed);
    }
    Busy(const Busy&) = delete;
    Busy& operator=(const Busy&) = delete;

   private:
    ThreadPool* pool_;
  };

  // Runs fn(thread_index, n_threads) once for every thread index (the caller is index 0) and waits.
  // Callers on several threads take turns; fn must not call back into the same pool.
  //
  // When the workers do not pay (another process holds a core a worker needs, or the loops are too short
  // to repay waking and waiting for them) the caller runs every index itself, one after another, with the
  // same arguments: after each loop the pool compares how long it took with the caller's estimate of
  // running it alone (its own index's time times the index count), and when over a window of loops
  // (~2 ms) the loops took longer, they stay on the caller for a back-off period (10 ms, doubling to
  // 0.5 s while that lasts) before the workers are tried again. Results are bit for bit the same either way (each index does the same work). Measurements that
  // must use every thread (the bandwidth and FLOP roofs) open an AllThreads scope.
  void run(const std::function<void(int, int)>& fn);

  // While open, every loop uses every thread, contended or not.
  class AllThreads {
   public:
    explicit AllThreads(ThreadPool& pool) : pool_(pool), was_(pool.adaptive_) { pool_.adaptive_ = false; }
    ~AllThreads() { pool_.adaptive_ = was_; }
    AllThreads(const AllThreads&) = delete;
    AllThreads& operator=(const AllThreads&) = delete;

   private:
    ThreadPool& pool_;
    bool was_;
  };
  // True while loops run on the caller alone (the back-off period of a detected contention).
  bool serial_now() const;

  // Splits [0, n) into contiguous chunks of at least `grain` items, one per thread, and runs
  // fn(begin, end) on each. Results must not depend on the split (no cross-chunk reductions),
  // which is what makes output identical for every thread count.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Like parallel_for, but threads claim chunks of `chunk` items (the last may be shorter) from a
  // shared counter until none is left: a thread slowed by another process on its core takes fewer
  // chunks instead of holding up the loop. Only for loops whose results do not depend on the split.
  void parallel_for_dynamic(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);
  // One loop ending at `now_ns`: how long it took, and the caller's estimate of running all of it alone.
  void note_loop(int64_t elapsed_ns, int64_t serial_ns, int64_t now_ns);

  // Index i of loop number g is claimed once (claimed_[i] moves from below g to g), by worker i or, once
  // its own index is done, by the caller: a worker that has not started by then (descheduled, or still
  // waking) costs the loop nothing, and its late arrival finds the index taken. The caller waits only for
  // indices a worker claimed (done_). Workers spin briefly on the generation counter before sleeping on
  // the condition variable: a forward pass issues dozens of short parallel loops per token, and a futex
  // sleep/wake per loop would cost more than the loop itself.
  bool claim(int index, uint64_t generation);
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::mutex run_mutex_;  // held by the thread whose loop is running (run() serves one caller at a time)
  std::condition_variable start_cv_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> claimed_;  // [size()]: the last loop number that claimed index i
  std::atomic<int> done_{0};                            // indices 1.. finished in the current loop
  std::atomic<bool> stop_{false};
  std::atomic<int> busy_{0};  // open Busy scopes
  // Contention state, written by the caller holding run_mutex_; serial_until_ns_ is read by workers too.
  bool adaptive_ = true;
  std::atomic<int64_t> serial_until_ns_{0};
  int64_t window_elapsed_ns_ = 0, window_serial_ns_ = 0;
  int64_t backoff_ns_ = 0;
};

// Single-threaded fallbacks usable where a pool pointer may be null.
void parallel_for(ThreadPool* pool, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
void parallel_for_dynamic(ThreadPool* pool, int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace canvas
