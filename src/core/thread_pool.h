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
  // between), idle workers keep spinning between loops instead of sleeping, yielding the core every few
  // microseconds so a process sharing the cores is not starved, as long as loops were handed to them in the
  // last few milliseconds. Outside any scope they spin only briefly, then sleep: an idle server burns no
  // core. Scopes nest; a null pool is accepted.
  //
  // A scope given a `pass` key (the kind of pass: its model and row count, say; 0: none) is also judged
  // whole: passes of one key are timed with their loops shared out loop by loop as parallel_for decides,
  // and with every loop on the caller, and run the faster way, the other way timed now and then. What the
  // loop-by-loop timing cannot see (the workers' results read from their caches, the caller's cache lines
  // they took, the spinning's cost to the caller's core) is in a pass's time, so a pass is never slower for
  // the workers than without them. Only the outermost scope of a thread judges.
  class Busy {
   public:
    explicit Busy(ThreadPool* pool, uint64_t pass = 0);
    ~Busy();
    Busy(const Busy&) = delete;
    Busy& operator=(const Busy&) = delete;

   private:
    ThreadPool* pool_;
    int64_t start_ns_ = 0;  // timed: the pass's start
    uint64_t pass_ = 0;     // the judged pass's key (0: not judged)
    bool alone_ = false;    // its loops run on the caller
  };

  // Runs fn(index, size()) once for every index in [0, size()) and waits; the indices are shared out among
  // the caller and the workers (whoever is free first takes the next). Callers on several threads take
  // turns; fn must not call back into the same pool. While the pool judges its cores taken (see
  // parallel_for) the caller runs every index itself; results must not depend on which thread runs which.
  void run(const std::function<void(int, int)>& fn);

  // While open, every loop is handed to every thread, contended or not, however short (the bandwidth and
  // FLOP roofs measure with it).
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
  // True while every loop runs on the caller alone (another process holds the cores the workers need).
  bool serial_now() const;

  // Splits [0, n) into contiguous chunks of at least `grain` items, one per thread, and runs fn(begin, end)
  // on each; or runs fn(0, n) on the caller alone. Results must not depend on the split (no cross-chunk
  // reductions), which is what makes output identical for every thread count and for either choice.
  //
  // Which of the two, loop by loop: loops are grouped in classes by where they are written (the type of
  // fn's target), n within 2x, and `shape`, anything else that sets a loop's cost (a matmul's rows and
  // width, an attention's queries and keys). The pool times each class both ways now and then and hands a
  // loop to the workers only when that took under 70% of its time alone and the loop is long against a
  // hand-out's cost (a loop of a few microseconds does not repay waking the workers, waiting for them and
  // reading their results from their caches). And none is handed out while other processes' runnable
  // threads leave fewer than two of the machine's cores free (/proc/loadavg, sampled every 2 ms, two samples
  // in a row), or, as a fallback for what that cannot see, while loops handed out lately took longer than
  // their classes take alone (10 ms, doubling to 0.5 s).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn, uint64_t shape = 0);

  // Like parallel_for, but threads claim chunks of `chunk` items (the last may be shorter) from a shared
  // counter until none is left: a thread slowed by another process on its core takes fewer chunks instead
  // of holding up the loop. Only for loops whose results do not depend on the split.
  void parallel_for_dynamic(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn,
                            uint64_t shape = 0);

  // What the pool decided, for tests and benchmarks: loops handed to the workers and loops the caller ran
  // alone (in parallel_for and parallel_for_dynamic since the pool was made).
  struct Counts {
    int64_t handed_out = 0, on_caller = 0;
  };
  Counts counts() const { return counts_; }

 private:
  // Loops of one class: the EMAs of their time on the caller alone and handed out (ns; 0: not yet timed).
  struct LoopClass {
    uint64_t key = 0;
    float serial_ns = 0, parallel_ns = 0;
    uint32_t runs = 0;    // since the mode not chosen was last timed
    uint8_t warm = 0;     // loops of the warm-up done (handed out, alone, handed out, alone)
    bool large = false;   // far longer than a hand-out costs: always handed out, never timed alone
  };
  // Passes of one key (Busy): their time with the loops shared out and alone (EMAs, ns; 0: not yet).
  struct PassClass {
    uint64_t key = 0;
    float shared_ns = 0, alone_ns = 0;
    uint32_t runs = 0;  // since the way not chosen was last timed
    uint8_t warm = 0;   // passes of the warm-up done (shared, alone, shared, alone)
  };
  // Opens and closes a judged pass: whether its loops run alone (the mode is recorded in the thread's
  // state), then its time.
  bool open_pass(uint64_t key);
  void close_pass(uint64_t key, bool alone, int64_t elapsed_ns);
  bool pass_alone() const;  // the calling thread is inside a pass judged faster alone

  // n_chunks chunks, chunk(c) each, claimed by whichever thread is free; or serial() on the caller.
  void run_loop(uint64_t key, int64_t n_chunks, const std::function<void(int64_t)>& chunk,
                const std::function<void()>& serial);
  // Hands chunks [0, n_chunks) out and takes part until every one is done.
  void fan_out(int64_t n_chunks, const std::function<void(int64_t)>& chunk);
  // Claims and runs chunks of loop `generation` until none is left; returns how many this thread ran.
  int64_t claim_chunks(uint64_t generation);
  void worker_loop(int index);
  // The load sample: true when other processes' runnable threads leave fewer than two cores free.
  bool cores_taken();
  // Called before a loop: refreshes the load sample when it is due.
  void refresh_load(int64_t now);
  // One handed-out loop of `elapsed_ns` whose class runs alone in `serial_ns`: the fallback judgement.
  void note_fan_out(int64_t elapsed_ns, int64_t serial_ns, int64_t now);

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // held by the thread whose loop is running (one caller at a time)

  // The loop being handed out: word_ holds its number (generation, high bits) and its next unclaimed chunk
  // (low bits), so a worker that wakes late claims with a compare-and-swap that fails once the loop has
  // moved on; the job and chunk count sit in two slots by the loop number's parity, so the caller sets up
  // the next loop without touching what a late reader of this one may still look at.
  static constexpr int kChunkBits = 24;
  std::atomic<uint64_t> word_{0};
  std::atomic<const std::function<void(int64_t)>*> job_[2] = {nullptr, nullptr};
  std::atomic<int64_t> chunks_[2] = {0, 0};
  std::atomic<int64_t> completed_{0};  // chunks finished by workers in the current loop

  // Sleeping: workers spin briefly, then (inside a Busy scope, while loops were handed out lately) yield,
  // then sleep on the condition variable; the caller takes the mutex to notify only when one sleeps.
  std::mutex sleep_mutex_;
  std::condition_variable wake_cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<int64_t> spin_until_ns_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> busy_{0};  // open Busy scopes

  std::mutex pass_mutex_;  // the pass classes (passes of several callers may overlap)
  std::unique_ptr<PassClass[]> passes_;

  // Decisions, all written by the caller holding run_mutex_.
  bool adaptive_ = true;
  std::unique_ptr<LoopClass[]> classes_;
  float fan_out_floor_ns_ = 0;  // the cheapest hand-out so far (its cost beyond the loop's own work)
  int system_cpus_ = 1;
  int load_fd_ = -1;  // /proc/loadavg, kept open
  uint32_t loops_since_clock_ = 0;
  int64_t next_load_sample_ns_ = 0;
  int64_t clock_ns_ = 0;  // the clock at its last reading
  std::atomic<bool> cores_taken_{false};
  bool last_sample_taken_ = false;  // the previous load sample's verdict
  std::atomic<int64_t> serial_until_ns_{0};  // the fallback's back-off
  int64_t window_elapsed_ns_ = 0, window_serial_ns_ = 0, backoff_ns_ = 0;
  Counts counts_;
};

// Single-threaded fallbacks usable where a pool pointer may be null.
void parallel_for(ThreadPool* pool, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
                  uint64_t shape = 0);
void parallel_for_dynamic(ThreadPool* pool, int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn,
                          uint64_t shape = 0);

}  // namespace canvas
