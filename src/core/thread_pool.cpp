// ThreadPool implementation: one job at a time, workers wake on a generation counter.
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "core/cpu.h"
namespace canvas {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = usable_cpus();
  claimed_ = std::make_unique<std::atomic<uint64_t>[]>(size_t(threads));
  for (int i = 0; i < threads; ++i) claimed_[size_t(i)].store(0);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

constexpr int kSpinIterations = 1 << 11;  // tens of microseconds: long enough to bridge a loop, short enough
                                          // not to starve other processes when cores are oversubscribed
constexpr int kBusySpinIterations = 1 << 11;  // inside a Busy scope: pauses between two yields (a yield is a
                                              // syscall, costly in a VM)
// Contention: loop time judged per window, and how long loops stay on the caller once it is seen.
constexpr int64_t kWindowNs = 2'000'000;
constexpr int64_t kMinBackoffNs = 10'000'000;
constexpr int64_t kMaxBackoffNs = 500'000'000;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_acquire)) {
      if (++spins < kSpinIterations) {
        cpu_relax();
        continue;
      }
      if (busy_.load(std::memory_order_relaxed) > 0 && !serial_now()) {
        // A forward pass is under way: the next loop is microseconds away. A yield, not a futex sleep,
        // hands the core over only when another thread wants it.
        std::this_thread::yield();
        spins = kSpinIterations - kBusySpinIterations;
        continue;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    // job_ is read only after the claim: an index the caller took is never touched here.
    if (!claim(index, seen)) continue;
    (*job_)(index, size());
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

bool ThreadPool::claim(int index, uint64_t generation) {
  std::atomic<uint64_t>& slot = claimed_[size_t(index)];
  uint64_t previous = slot.load(std::memory_order_acquire);
  while (previous < generation)
    if (slot.compare_exchange_weak(previous, generation, std::memory_order_acq_rel, std::memory_order_acquire))
      return true;
  return false;
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (workers_.empty()) {
    fn(0, 1);
    return;
  }
  // One loop at a time: a second thread calling in (e.g. a server's engine and another caller sharing the
  // pool) waits here instead of overwriting the running loop's job and counter.
  const std::lock_guard<std::mutex> one_caller(run_mutex_);
  if (adaptive_ && serial_now()) {
    for (int index = 0; index < size(); ++index) fn(index, size());
    return;
  }
  const int64_t publish = now_ns();
  job_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  uint64_t generation = 0;
  {
    // Taking the lock orders the increment against a worker that is about to sleep, so no wake-up is lost.
    std::lock_guard<std::mutex> lock(mutex_);
    generation = generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  start_cv_.notify_all();
  const int64_t start = now_ns();
  fn(0, size());
  // Indices whose worker has not started them yet run here, rather than waiting for that thread.
  int taken = 0;
  for (int index = 1; index < size(); ++index)
    if (claim(index, generation)) {
      fn(index, size());
      ++taken;
    }
  const int64_t own_end = now_ns();
  const int by_workers = size() - 1 - taken;
  int spins = 0;
  while (done_.load(std::memory_order_acquire) != by_workers) {
    if (++spins < kSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
  if (adaptive_) {
    // What the loop took, against what the caller alone would have taken: its indices' average time
    // times their number.
    const int64_t end = now_ns();
    note_loop(end - publish, (own_end - start) * size() / (1 + taken), end);
  }
}

bool ThreadPool::serial_now() const { return now_ns() < serial_until_ns_.load(std::memory_order_relaxed); }

void ThreadPool::note_loop(int64_t elapsed_ns, int64_t serial_ns, int64_t now) {
  window_elapsed_ns_ += elapsed_ns;
  window_serial_ns_ += serial_ns;
  if (window_elapsed_ns_ < kWindowNs) return;
  // The loops took longer than the caller alone would have (workers descheduled by another process, or
  // loops too short to repay waking and waiting for them): run them on the caller for a while.
  if (window_elapsed_ns_ > window_serial_ns_) {
    backoff_ns_ = backoff_ns_ == 0 ? kMinBackoffNs : std::min(2 * backoff_ns_, kMaxBackoffNs);
    serial_until_ns_.store(now + backoff_ns_, std::memory_order_relaxed);
  } else {
    backoff_ns_ = 0;
  }
  window_elapsed_ns_ = window_serial_ns_ = 0;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = std::min<int64_t>(size(), (n + grain - 1) / grain);
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  run([&](int index, int) {
    if (index >= chunks) return;
    // Chunk boundaries are multiples of grain so SIMD kernels see aligned tiles.
    const int64_t units = (n + grain - 1) / grain;
    const int64_t begin = std::min(n, units * index / chunks * grain);
    const int64_t end = std::min(n, units * (index + 1) / chunks * grain);
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::parallel_for_dynamic(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  if (n <= chunk || workers_.empty()) {
    fn(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  run([&](int, int) {
    for (;;) {
      const int64_t begin = next.fetch_add(chunk, std::memory_order_relaxed);
      if (begin >= n) return;
      fn(begin, std::min(n, begin + chunk));
    }
  });
}

void parallel_for_dynamic(ThreadPool* pool, int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool) {
    pool->parallel_for_dynamic(n, chunk, fn);
  } else if (n > 0) {
    fn(0, n);
  }
}

void parallel_for(ThreadPool* pool, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool) {
    pool->parallel_for(n, grain, fn);
  } else if (n > 0) {
    fn(0, n);
  }
}

}  // namespace canvas
