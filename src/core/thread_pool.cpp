// ThreadPool implementation: chunks claimed from a counter stamped with the loop's number; per-class timing
// decides which loops are handed out.
#include "core/thread_pool.h"

#include <fcntl.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/cpu.h"
namespace canvas {

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
// Workers keep spinning inside a Busy scope only while loops were handed to them this recently: a pass
// whose loops all run on the caller leaves the other cores alone.
constexpr int64_t kSpinAfterFanOutNs = 2'000'000;
// The load sample's period, and how many loops may pass between two readings of the clock.
constexpr int64_t kLoadSampleNs = 2'000'000;
constexpr uint32_t kLoopsPerClock = 16;
// The fallback: handed-out loops judged per window, and how long loops stay on the caller once they lose.
constexpr int64_t kWindowNs = 2'000'000;
constexpr int64_t kMinBackoffNs = 10'000'000;
constexpr int64_t kMaxBackoffNs = 500'000'000;
// Loop classes: a direct-mapped table. A class warms up over kWarmRuns loops; then the way it does not go
// is timed every kExploreRuns x (the slower / faster ratio) loops. A class whose time alone is over
// kLargeLoopFloors cheapest hand-out costs is always handed out.
constexpr size_t kClasses = 1024;
constexpr uint8_t kWarmRuns = 4;
constexpr uint32_t kExploreRuns = 32;
constexpr float kMaxExploreRatio = 32.f;
constexpr float kLargeLoopFloors = 64.f;
constexpr float kHandOutGain = 0.7f;        // handed out when it takes under 70% of the time alone
constexpr float kMinHandOutFloors = 16.f;  // and its time alone is over 16 cheapest hand-out costs
constexpr uint32_t kTimeSerialEvery = 4;  // a class run alone is timed every 4th loop (two clock readings)
// Judged passes: a direct-mapped table, warmed up and explored as the loop classes.
constexpr size_t kPassClasses = 64;

// The judged pass each thread is inside (its pool), when that pass runs every loop alone.
thread_local const void* alone_in_pool = nullptr;
thread_local int busy_depth = 0;  // Busy scopes open on this thread

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// A loop's class: the lambda's type stands for where the loop is written (each lambda has its own).
template <typename Fn>
uint64_t class_key(const Fn& fn, int64_t n, uint64_t shape, int kind) {
  uint64_t h = mix(0, reinterpret_cast<uintptr_t>(&fn.target_type()));
  h = mix(h, uint64_t(std::bit_width(uint64_t(n))));  // sizes within 2x share a class (and its timings)
  h = mix(h, shape);
  h = mix(h, uint64_t(kind));
  return h | 1;  // never 0, the empty slot
}

// Counts a run of a class that went the faster of two ways (a_ns, b_ns: their times); true when the other
// way is due to be timed again, every kExploreRuns x (the slower / faster ratio, at most kMaxExploreRatio)
// runs, the count then starting over.
bool explore_due(uint32_t& runs, float a_ns, float b_ns) {
  const float ratio = std::max(a_ns, b_ns) / std::min(a_ns, b_ns);
  if (++runs < uint32_t(float(kExploreRuns) * std::min(ratio, kMaxExploreRatio))) return false;
  runs = 0;
  return true;
}

// The estimate moves a quarter of the way to each sample; a sample is clamped to 4x the estimate, so one
// loop caught by an interrupt or a descheduled worker cannot flip a class by itself.
// During a class's warm-up the estimate is the fastest sample.
void update(float& estimate, int64_t sample_ns, bool warming) {
  const float s = float(std::max<int64_t>(sample_ns, 1));
  if (estimate == 0 || (warming && s < estimate)) {
    estimate = s;
    return;
  }
  if (!warming) estimate += (std::min(s, 4 * estimate) - estimate) / 4;
}

}  // namespace

ThreadPool::Busy::Busy(ThreadPool* pool, uint64_t pass) : pool_(pool) {
  if (!pool_) return;
  pool_->busy_.fetch_add(1, std::memory_order_relaxed);
  if (busy_depth++ > 0 || pass == 0 || pool_->workers_.empty() || !pool_->adaptive_) return;
  pass_ = mix(0, pass) | 1;  // spread over the table; never 0, the empty slot
  alone_ = pool_->open_pass(pass_);
  if (alone_) alone_in_pool = pool_;
  start_ns_ = now_ns();
}

ThreadPool::Busy::~Busy() {
  if (!pool_) return;
  --busy_depth;
  if (pass_ != 0) {
    if (alone_) alone_in_pool = nullptr;
    pool_->close_pass(pass_, alone_, now_ns() - start_ns_);
  }
  pool_->busy_.fetch_sub(1, std::memory_order_relaxed);
}

bool ThreadPool::open_pass(uint64_t key) {
  const std::lock_guard<std::mutex> lock(pass_mutex_);
  PassClass& c = passes_[key % kPassClasses];
  if (c.key != key) c = PassClass{key};
  if (c.warm < kWarmRuns) return c.warm % 2 == 1;  // shared, alone, shared, alone
  const bool alone_faster = c.alone_ns < c.shared_ns;
  return explore_due(c.runs, c.alone_ns, c.shared_ns) ? !alone_faster : alone_faster;
}

void ThreadPool::close_pass(uint64_t key, bool alone, int64_t elapsed_ns) {
  // A pass under load ran its loops alone either way: it says nothing about sharing them out.
  if (serial_now()) return;
  const std::lock_guard<std::mutex> lock(pass_mutex_);
  PassClass& c = passes_[key % kPassClasses];
  if (c.key != key) return;  // another key took the slot meanwhile
  update(alone ? c.alone_ns : c.shared_ns, elapsed_ns, c.warm < kWarmRuns);
  if (c.warm < kWarmRuns) ++c.warm;
}

bool ThreadPool::pass_alone() const { return alone_in_pool == this; }

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = usable_cpus();
  classes_ = std::make_unique<LoopClass[]>(kClasses);
  passes_ = std::make_unique<PassClass[]>(kPassClasses);
  system_cpus_ = std::max(1, get_nprocs());
  if (threads > 1) {
    load_fd_ = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    last_sample_taken_ = cores_taken();
    cores_taken_.store(last_sample_taken_);
    next_load_sample_ns_ = now_ns() + kLoadSampleNs;
  }
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    stop_.store(true);
  }
  wake_cv_.notify_all();
  for (auto& t : workers_) t.join();
  if (load_fd_ >= 0) ::close(load_fd_);
}

bool ThreadPool::cores_taken() {
  if (load_fd_ < 0) return false;
  char text[128];
  const ssize_t got = ::pread(load_fd_, text, sizeof text - 1, 0);
  if (got <= 0) return false;
  text[got] = '\0';
  // "0.52 0.58 0.59 3/467 12345": the fourth field's numerator counts runnable threads, this one included.
  const char* p = text;
  for (int field = 0; field < 3 && p; ++field) {
    p = std::strchr(p, ' ');
    if (p) ++p;
  }
  if (!p) return false;
  const long runnable = std::strtol(p, nullptr, 10);
  // This pool's runnable threads: the caller and its workers not asleep (none yet while it is being made).
  const long own = 1 + long(workers_.size()) - sleepers_.load(std::memory_order_relaxed);
  const long others = std::max(0L, runnable - own);
  return system_cpus_ - others < 2;
}

void ThreadPool::worker_loop(int) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    for (;;) {
      const uint64_t word = word_.load(std::memory_order_acquire);
      if ((word >> kChunkBits) != seen || stop_.load(std::memory_order_acquire)) break;
      if (++spins < kSpinIterations) {
        cpu_relax();
        continue;
      }
      if (busy_.load(std::memory_order_relaxed) > 0 && now_ns() < spin_until_ns_.load(std::memory_order_relaxed)) {
        // A forward pass is under way: the next loop is microseconds away. A yield, not a futex sleep,
        // hands the core over only when another thread wants it.
        std::this_thread::yield();
        spins = kSpinIterations - kBusySpinIterations;
        continue;
      }
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      // Counted before the loop number is read again: a caller publishing a loop after this reads the count
      // and notifies (both sequentially consistent), so no wake-up is lost.
      sleepers_.fetch_add(1);
      wake_cv_.wait(lock, [&] { return stop_.load() || (word_.load() >> kChunkBits) != seen; });
      sleepers_.fetch_sub(1);
      spins = 0;
    }
    if (stop_.load()) return;
    seen = word_.load(std::memory_order_acquire) >> kChunkBits;
    const int64_t ran = claim_chunks(seen);
    if (ran > 0) completed_.fetch_add(ran, std::memory_order_acq_rel);
  }
}

int64_t ThreadPool::claim_chunks(uint64_t generation) {
  // The chunk count is read before the claim: if the claim then succeeds the loop had not moved on, so the
  // count (written before the loop was published, in the slot the next loop leaves alone) was this loop's.
  const int64_t n_chunks = chunks_[generation & 1].load(std::memory_order_relaxed);
  int64_t ran = 0;
  uint64_t word = word_.load(std::memory_order_acquire);
  for (;;) {
    if ((word >> kChunkBits) != generation) break;
    const int64_t chunk = int64_t(word & ((uint64_t(1) << kChunkBits) - 1));
    if (chunk >= n_chunks) break;
    if (!word_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    // Claimed: the loop cannot finish, nor the slot be reused, before this chunk is counted done.
    (*job_[generation & 1].load(std::memory_order_relaxed))(chunk);
    ++ran;
    word = word_.load(std::memory_order_acquire);
  }
  return ran;
}

void ThreadPool::fan_out(int64_t n_chunks, const std::function<void(int64_t)>& chunk) {
  const uint64_t generation = (word_.load(std::memory_order_relaxed) >> kChunkBits) + 1;
  job_[generation & 1].store(&chunk, std::memory_order_relaxed);
  chunks_[generation & 1].store(n_chunks, std::memory_order_relaxed);
  completed_.store(0, std::memory_order_relaxed);
  word_.store(generation << kChunkBits);  // sequentially consistent: ordered before the read of sleepers_
  if (sleepers_.load() > 0) {
    { const std::lock_guard<std::mutex> lock(sleep_mutex_); }
    wake_cv_.notify_all();
  }
  const int64_t own = claim_chunks(generation);
  int spins = 0;
  while (completed_.load(std::memory_order_acquire) != n_chunks - own) {
    if (++spins < kSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  const int threads = size();
  if (workers_.empty()) {
    fn(0, 1);
    return;
  }
  const std::lock_guard<std::mutex> one_caller(run_mutex_);
  if (adaptive_ && (serial_now() || pass_alone())) {
    for (int index = 0; index < threads; ++index) fn(index, threads);
    return;
  }
  spin_until_ns_.store(now_ns() + kSpinAfterFanOutNs, std::memory_order_relaxed);
  fan_out(threads, [&](int64_t index) { fn(int(index), threads); });
}

bool ThreadPool::serial_now() const {
  return cores_taken_.load(std::memory_order_relaxed) || now_ns() < serial_until_ns_.load(std::memory_order_relaxed);
}

void ThreadPool::refresh_load(int64_t now) {
  clock_ns_ = now;
  loops_since_clock_ = 0;
  if (now < next_load_sample_ns_) return;
  next_load_sample_ns_ = now + kLoadSampleNs;
  // Two samples in a row: a thread runnable for an instant (a kernel worker, a timer) is no competitor, and
  // would otherwise keep the loops on the caller until the next sample.
  const bool sample = cores_taken();
  const bool taken = sample && last_sample_taken_;
  last_sample_taken_ = sample;
  cores_taken_.store(taken, std::memory_order_relaxed);
  if (taken) spin_until_ns_.store(0, std::memory_order_relaxed);  // the workers go to sleep
}

void ThreadPool::note_fan_out(int64_t elapsed_ns, int64_t serial_ns, int64_t now) {
  window_elapsed_ns_ += elapsed_ns;
  window_serial_ns_ += serial_ns;
  if (window_elapsed_ns_ < kWindowNs) return;
  // The loops handed out took longer than their classes take on the caller alone: another process holds
  // the workers' cores in a way the load sample does not show (another VM on the host, a cgroup's quota).
  if (window_elapsed_ns_ > window_serial_ns_) {
    backoff_ns_ = backoff_ns_ == 0 ? kMinBackoffNs : std::min(2 * backoff_ns_, kMaxBackoffNs);
    serial_until_ns_.store(now + backoff_ns_, std::memory_order_relaxed);
    spin_until_ns_.store(0, std::memory_order_relaxed);
  } else {
    backoff_ns_ = 0;
  }
  window_elapsed_ns_ = window_serial_ns_ = 0;
}

void ThreadPool::run_loop(uint64_t key, int64_t n_chunks, const std::function<void(int64_t)>& chunk,
                          const std::function<void()>& serial) {
  if (workers_.empty() || n_chunks <= 1 || (adaptive_ && pass_alone())) {
    serial();
    return;
  }
  const std::lock_guard<std::mutex> one_caller(run_mutex_);
  if (!adaptive_) {
    ++counts_.handed_out;
    fan_out(n_chunks, chunk);
    return;
  }
  if (++loops_since_clock_ >= kLoopsPerClock) refresh_load(now_ns());
  if (cores_taken_.load(std::memory_order_relaxed) || clock_ns_ < serial_until_ns_.load(std::memory_order_relaxed)) {
    ++counts_.on_caller;
    serial();
    return;
  }

  LoopClass& c = classes_[key % kClasses];
  if (c.key != key) c = LoopClass{key};
  // A class is handed out the first time, which also estimates its time alone from the caller's chunks: a
  // loop far longer than any hand-out costs is handed out from then on. Others warm up, alone and handed
  // out in turn (the faster of two samples each, the first loops being cold), then go the faster way, the
  // other way timed now and then (less often the more it loses) to follow what changes.
  bool hand_out = true, timed = true;
  if (c.warm >= kWarmRuns && !c.large) {
    // Handed out only when clearly faster, and long enough: a hand-out also costs after the loop (its
    // results sit in the workers' caches, where the caller's next step reads them), which its own time
    // does not show.
    const bool worth = c.serial_ns >= kMinHandOutFloors * fan_out_floor_ns_;
    const bool out_faster = worth && c.parallel_ns < kHandOutGain * c.serial_ns;
    const bool explore = explore_due(c.runs, c.parallel_ns, c.serial_ns);
    hand_out = explore && (out_faster || worth) ? !out_faster : out_faster;
    timed = hand_out || explore || c.runs % kTimeSerialEvery == 0;
  } else if (c.warm > 0 && !c.large) {
    hand_out = c.warm % 2 == 0;
  }
  if (!timed) {
    ++counts_.on_caller;
    serial();
    return;
  }
  const int64_t start = now_ns();
  if (!hand_out) {
    serial();
    const int64_t end = now_ns();
    ++counts_.on_caller;
    update(c.serial_ns, end - start, c.warm < kWarmRuns);
    if (c.warm < kWarmRuns) ++c.warm;
    refresh_load(end);
    return;
  }
  // The caller's own chunks, timed, give the class's time alone: their average times the chunk count.
  // (One captured pointer: the std::function holds it without allocating.)
  struct OwnChunks {
    const std::function<void(int64_t)>* chunk;
    std::thread::id caller;
    int64_t ns = 0, count = 0;
  } own{&chunk, std::this_thread::get_id()};
  const std::function<void(int64_t)> timed_chunk = [&own](int64_t index) {
    if (std::this_thread::get_id() != own.caller) {
      (*own.chunk)(index);
      return;
    }
    const int64_t t0 = now_ns();
    (*own.chunk)(index);
    own.ns += now_ns() - t0;
    ++own.count;
  };
  spin_until_ns_.store(start + kSpinAfterFanOutNs, std::memory_order_relaxed);
  fan_out(n_chunks, timed_chunk);
  const int64_t end = now_ns();
  ++counts_.handed_out;
  const int64_t elapsed = end - start;
  const int64_t alone_ns = own.count > 0 ? own.ns * n_chunks / own.count : 0;  // 0: the workers took every chunk
  // A hand-out's own cost: what the loop took beyond its time alone shared out evenly, at least a 16th of
  // the loop (one lucky loop must not make every loop look long). A loop whose time alone is unknown counts
  // whole.
  const float cost = alone_ns > 0 ? std::max(float(elapsed) - float(alone_ns) / float(size()), float(elapsed) / 16)
                                  : float(elapsed);
  fan_out_floor_ns_ = fan_out_floor_ns_ == 0 ? cost : std::min(fan_out_floor_ns_, cost);
  if (c.warm == 0) c.large = float(alone_ns) > kLargeLoopFloors * fan_out_floor_ns_;
  if (c.large && alone_ns > 0) update(c.serial_ns, alone_ns, false);
  update(c.parallel_ns, elapsed, c.warm < kWarmRuns);
  if (c.warm < kWarmRuns) ++c.warm;
  // The fallback compares with the class's time alone, or (not yet timed) the estimate from this loop.
  const int64_t reference_ns = c.serial_ns > 0 ? int64_t(c.serial_ns) : alone_ns;
  if (reference_ns > 0) note_fan_out(elapsed, reference_ns, end);
  refresh_load(end);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
                              uint64_t shape) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t units = (n + grain - 1) / grain;
  const int64_t chunks = std::min<int64_t>(size(), units);
  struct Split {
    int64_t n, units, chunks, grain;
    const std::function<void(int64_t, int64_t)>* fn;
  } split{n, units, chunks, grain, &fn};
  run_loop(
      class_key(fn, n, shape, 0), chunks,
      [&split](int64_t index) {
        // Chunk boundaries are multiples of grain so SIMD kernels see aligned tiles.
        const int64_t begin = std::min(split.n, split.units * index / split.chunks * split.grain);
        const int64_t end = std::min(split.n, split.units * (index + 1) / split.chunks * split.grain);
        if (begin < end) (*split.fn)(begin, end);
      },
      [&split] { (*split.fn)(0, split.n); });
}

void ThreadPool::parallel_for_dynamic(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn,
                                      uint64_t shape) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  // The chunk count fits the claim counter's bits (a split never changes results).
  const int64_t max_chunks = (int64_t(1) << kChunkBits) - 1;
  if ((n + chunk - 1) / chunk > max_chunks) chunk = (n + max_chunks - 1) / max_chunks;
  const int64_t chunks = (n + chunk - 1) / chunk;
  struct Split {
    int64_t n, chunk;
    const std::function<void(int64_t, int64_t)>* fn;
  } split{n, chunk, &fn};
  run_loop(
      class_key(fn, n, shape, 1), chunks,
      [&split](int64_t index) { (*split.fn)(index * split.chunk, std::min(split.n, (index + 1) * split.chunk)); },
      [&split] { (*split.fn)(0, split.n); });
}

void parallel_for_dynamic(ThreadPool* pool, int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn,
                          uint64_t shape) {
  if (pool) {
    pool->parallel_for_dynamic(n, chunk, fn, shape);
  } else if (n > 0) {
    fn(0, n);
  }
}

void parallel_for(ThreadPool* pool, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
                  uint64_t shape) {
  if (pool) {
    pool->parallel_for(n, grain, fn, shape);
  } else if (n > 0) {
    fn(0, n);
  }
}

}  // namespace canvas
