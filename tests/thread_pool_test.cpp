// The thread pool under contention (a competing spinner on the cores) and the default thread count.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "core/cpu.h"
#include "core/tensor.h"
#include "ops/gemm.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "test_util.h"

namespace canvas {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Many short loops, as a decode step issues: each item a little arithmetic, results per item.
double run_loops(ThreadPool& pool, std::vector<double>& out, int loops) {
  const ThreadPool::Busy busy(&pool);
  const double t0 = now_ms();
  for (int l = 0; l < loops; ++l)
    pool.parallel_for(int64_t(out.size()), 64, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        double v = out[size_t(i)];
        for (int k = 0; k < 40; ++k) v = v * 0.999 + std::sqrt(double(i + k + l));
        out[size_t(i)] = v;
      }
    });
  return now_ms() - t0;
}

// A process's other work, busy on every core but one (the case of a user's machine running something
// else): one spinning thread per spare core.
class Spinners {
 public:
  explicit Spinners(int n) {
    for (int i = 0; i < n; ++i)
      threads_.emplace_back([this] {
        volatile uint64_t x = 0;
        while (!stop_.load(std::memory_order_relaxed)) x = x + 1;
      });
  }
  ~Spinners() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// With a core taken by a spinner, a pool of every usable CPU is within 1.5x of one thread's time under the
// same load (before: several times slower, every loop waiting for its descheduled worker), and its results
// are bit for bit one thread's.
TEST(ThreadPoolContention, ContendedPoolKeepsUpWithOneThread) {
  const int cpus = usable_cpus();
  if (cpus < 2) GTEST_SKIP() << "one usable CPU: no pool of two threads to contend";
  ThreadPool all(cpus), one(1);
  std::vector<double> a(4096, 1.0), b(4096, 1.0);
  const Spinners spinners(cpus - 1);
  std::vector<double> t_all, t_one, t_fixed, c(4096, 1.0);
  for (int rep = 0; rep < 5; ++rep) {  // alternating, medians
    t_one.push_back(run_loops(one, b, 400));
    t_all.push_back(run_loops(all, a, 400));
    const ThreadPool::AllThreads fixed(all);  // every loop on every thread, as before: for the record
    t_fixed.push_back(run_loops(all, c, 400));
  }
  std::sort(t_all.begin(), t_all.end());
  std::sort(t_one.begin(), t_one.end());
  std::sort(t_fixed.begin(), t_fixed.end());
  std::printf("median ms of 400 loops under a spinner: %.1f with %d threads (%.1f using every thread each loop), "
              "%.1f with one\n", t_all[2], cpus, t_fixed[2], t_one[2]);
  EXPECT_LE(t_all[2], 1.5 * t_one[2]) << "median ms: " << t_all[2] << " with " << cpus << " threads, " << t_one[2]
                                      << " with one";
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
}

// A quantised [n x k] weight of sin values (its float rows in w32, its blocks in bytes).
struct QuantWeight {
  std::vector<float> w32;
  std::vector<uint8_t> bytes;
  TensorView view;
};
QuantWeight quant_weight(DType type, int64_t n, int64_t k) {
  QuantWeight q;
  q.w32.resize(size_t(n * k));
  for (size_t i = 0; i < q.w32.size(); ++i) q.w32[i] = std::sin(0.37f * float(i));
  const int64_t rb = row_bytes(type, k);
  q.bytes.resize(size_t(n * rb));
  for (int64_t r = 0; r < n; ++r) quantize_row(type, q.w32.data() + r * k, q.bytes.data() + r * rb, k);
  q.view.type = type;
  q.view.n_dims = 2;
  q.view.ne[0] = k;
  q.view.ne[1] = n;
  q.view.data = q.bytes.data();
  return q;
}

// Serial fallback or not, every loop gives the same bits: a quantised matmul under a spinner (the pool
// switching between its workers and the caller alone as it measures) equals the single-thread product.
TEST(ThreadPoolContention, ResultsAreBitExactWhateverThePoolDoes) {
  const int cpus = std::max(2, usable_cpus());
  const int64_t k = 512, n = 384, m = 3;
  const QuantWeight q = quant_weight(DType::Q4_0, n, k);
  const TensorView& w = q.view;
  std::vector<float> x(size_t(m * k));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * float(i));
  std::vector<float> ref(size_t(m * n)), got(size_t(m * n));
  matmul(w, x.data(), m, ref.data(), nullptr);
  ThreadPool pool(cpus);
  const Spinners spinners(cpus - 1);
  const ThreadPool::Busy busy(&pool);
  for (int rep = 0; rep < 2000; ++rep) {
    matmul(w, x.data(), m, got.data(), &pool);
    ASSERT_EQ(got, ref) << "repeat " << rep;
  }
}

// Every chunk of every loop runs exactly once, whichever thread claims it, loop after loop: late workers
// (woken after their loop ended, or descheduled by the spinner) never run a chunk of the next loop twice or
// with the previous job.
TEST(ThreadPoolContention, EveryChunkRunsOnceLoopAfterLoop) {
  const int cpus = std::max(2, usable_cpus());
  for (bool spinner : {false, true}) {
    ThreadPool pool(cpus + 1);  // more threads than cores: workers are descheduled mid-loop
    std::unique_ptr<Spinners> spin = spinner ? std::make_unique<Spinners>(1) : nullptr;
    const ThreadPool::AllThreads every_loop(pool);  // every loop handed out, however short
    std::vector<std::atomic<int>> hits(257);
    for (int loop = 0; loop < 1000; ++loop) {
      const int64_t n = 1 + loop % 257;
      for (int64_t i = 0; i < n; ++i) hits[size_t(i)].store(0, std::memory_order_relaxed);
      pool.parallel_for_dynamic(n, 1 + loop % 5, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "loop " << loop << " item " << i;
    }
    std::vector<std::atomic<int>> indices(size_t(pool.size()));
    for (int loop = 0; loop < 200; ++loop) {
      for (auto& h : indices) h.store(0);
      pool.run([&](int index, int threads) {
        EXPECT_EQ(threads, pool.size());
        indices[size_t(index)].fetch_add(1);
      });
      for (auto& h : indices) ASSERT_EQ(h.load(), 1) << "loop " << loop;
    }
  }
}

// What runs a loop never changes its bits: quantised matmuls of several row counts, an f32 gemm, attention
// and elementwise loops, each run many times by pools of 1 to 4 threads beside a spinning thread (the pool
// handing loops out, keeping them on the caller, probing and backing off as it measures), equal the
// single-thread results bit for bit.
TEST(ThreadPoolContention, OpsBitExactAcrossThreadCountsUnderASpinner) {
  const int64_t k = 256, n = 384;
  const QuantWeight q = quant_weight(DType::Q8_0, n, k);
  const TensorView& w = q.view;
  const std::vector<float>& w32 = q.w32;
  const int64_t max_m = 40;
  std::vector<float> x(size_t(max_m * k));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * float(i));
  // Attention: 4 query heads over 2 kv heads of 32, 24 queries over 64 keys, causal by group.
  const int heads = 4, kv_heads = 2, hd = 32;
  const int64_t n_q = 24, n_keys = 64;
  std::vector<float> aq(size_t(n_q * heads * hd)), ak(size_t(kv_heads * n_keys * hd)), av(ak.size());
  for (size_t i = 0; i < aq.size(); ++i) aq[i] = std::sin(0.013f * float(i));
  for (size_t i = 0; i < ak.size(); ++i) ak[i] = std::cos(0.007f * float(i)), av[i] = std::sin(0.021f * float(i));
  std::vector<int32_t> key_group(n_keys), query_group(n_q);
  for (int64_t j = 0; j < n_keys; ++j) key_group[size_t(j)] = int32_t(j);
  for (int64_t i = 0; i < n_q; ++i) query_group[size_t(i)] = int32_t(n_keys - n_q + i);
  const AttentionMask mask{key_group.data(), query_group.data(), nullptr};
  const AttentionShape shape{heads, kv_heads, hd, 1.f / std::sqrt(float(hd)), 0.f};

  auto run_all = [&](ThreadPool* pool, int rep) {
    std::vector<float> out;
    const int64_t m = 1 + (rep * 7) % max_m;
    std::vector<float> y(size_t(m * n));
    matmul(w, x.data(), m, y.data(), pool);
    out.insert(out.end(), y.begin(), y.end());
    const int64_t gm = 32 + rep % 32, gn = 128, gk = 128;  // over the gemm's threading threshold
    std::vector<float> c(size_t(gm * gn));
    gemm(gm, gn, gk, x.data(), gk, 1, w32.data(), gn, c.data(), gn, false, pool);
    out.insert(out.end(), c.begin(), c.end());
    std::vector<float> att(size_t(n_q * heads * hd));
    attention(aq.data(), n_q, heads * hd, ak.data(), av.data(), n_keys, n_keys * hd, mask, shape, att.data(),
              heads * hd, pool);
    out.insert(out.end(), att.begin(), att.end());
    std::vector<double> loops(size_t(64 + rep * 13), 1.0);
    canvas::parallel_for(pool, int64_t(loops.size()), 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) loops[size_t(i)] = std::sqrt(double(i) + 0.5 * double(rep));
    });
    for (double v : loops) out.push_back(float(v));
    return out;
  };
  constexpr int kReps = 300;
  std::vector<std::vector<float>> reference;
  for (int rep = 0; rep < kReps; ++rep) reference.push_back(run_all(nullptr, rep));
  const Spinners spinners(1);
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    const ThreadPool::Busy busy(&pool);
    for (int rep = 0; rep < kReps; ++rep) {
      // Every third repeat hands every loop out, whatever the load sample says.
      std::unique_ptr<ThreadPool::AllThreads> every_loop =
          rep % 3 == 0 ? std::make_unique<ThreadPool::AllThreads>(pool) : nullptr;
      const std::vector<float> got = run_all(&pool, rep);
      ASSERT_EQ(got.size(), reference[size_t(rep)].size());
      ASSERT_EQ(0, std::memcmp(got.data(), reference[size_t(rep)].data(), got.size() * sizeof(float)))
          << threads << " threads, repeat " << rep;
    }
  }
}

// A loop of a few hundred nanoseconds never repays a hand-out: after its class is timed, it stays on the
// caller but for a rare probe. AllThreads hands every loop out.
TEST(ThreadPoolDecisions, ShortLoopsStayOnTheCaller) {
  ThreadPool pool(2);
  const ThreadPool::Busy busy(&pool);
  std::vector<float> v(64, 1.f);
  auto tiny = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) v[size_t(i)] += 1.f;
  };
  for (int i = 0; i < 4000; ++i) pool.parallel_for(64, 1, tiny);
  const ThreadPool::Counts counts = pool.counts();
  EXPECT_EQ(counts.handed_out + counts.on_caller, 4000);
  EXPECT_LE(counts.handed_out, 4000 / 16) << "handed out " << counts.handed_out << ", on the caller "
                                          << counts.on_caller;
  EXPECT_EQ(v[0], 4001.f);
  {
    const ThreadPool::AllThreads every_loop(pool);
    for (int i = 0; i < 100; ++i) pool.parallel_for(64, 1, tiny);
  }
  EXPECT_EQ(pool.counts().handed_out, counts.handed_out + 100);
}

// A pass whose loops are faster handed out one by one but which pays for it after them (here the caller
// busy for twice the loops' time whenever a loop was handed out: the cost a loop's own time does not show) is
// judged whole: once its key has warmed up, its loops stay on the caller but for the rare probe. Without a
// key, every loop goes out.
TEST(ThreadPoolDecisions, PassesSlowerWithTheWorkersRunAlone) {
  ThreadPool pool(2);
  std::vector<double> out(2, 1.0);
  auto pass = [&](uint64_t key) {
    const ThreadPool::Busy busy(&pool, key);
    const int64_t before = pool.counts().handed_out;
    const double t0 = now_ms();
    for (int l = 0; l < 4; ++l)
      pool.parallel_for(2, 1, [&](int64_t b, int64_t e) {  // a millisecond or so a chunk
        for (int64_t i = b; i < e; ++i) {
          double v = out[size_t(i)];
          for (int k = 0; k < 1000000; ++k) v = v * 0.999 + 1e-3;
          out[size_t(i)] = v;
        }
      });
    if (pool.counts().handed_out > before) {  // the caller busy for twice the loops' time
      const double until = now_ms() + 2 * (now_ms() - t0);
      while (now_ms() < until) {
      }
    }
  };
  for (int i = 0; i < 4; ++i) pass(0);  // the loop class learns that handing out is faster
  const int64_t unjudged = pool.counts().handed_out;
  for (int i = 0; i < 10; ++i) pass(0);
  // Other processes on the cores keep loops on the caller (the load sample): nothing to judge then.
  if (pool.counts().handed_out - unjudged < 30) GTEST_SKIP() << "loops stay on the caller: the cores are busy (" << pool.counts().handed_out - unjudged << " of 40 handed out)";
  const int64_t start = pool.counts().handed_out;
  for (int i = 0; i < 60; ++i) pass(7);
  if (pool.serial_now()) GTEST_SKIP() << "other processes hold the cores";
  // The warm-up's two shared passes (8 loops) and at most a probe or two after it.
  EXPECT_LE(pool.counts().handed_out - start, 16) << "loops handed out in 60 judged passes";
}

// Threads of another process (here: of this one, outside the pool) runnable on every core but one: the
// load sample keeps loops on the caller, and a worker is not left spinning on the core they need.
TEST(ThreadPoolDecisions, LoopsStayOnTheCallerWhileOtherThreadsHoldTheCores) {
  const int cpus = usable_cpus();
  if (cpus < 2) GTEST_SKIP() << "one usable CPU";
  if (!std::ifstream("/proc/loadavg")) GTEST_SKIP() << "no /proc/loadavg";
  const Spinners spinners(cpus - 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ThreadPool pool(cpus);
  const ThreadPool::Busy busy(&pool);
  std::vector<double> out(4096, 1.0);
  run_loops(pool, out, 400);  // ~100 microseconds a loop alone: worth handing out on a quiet machine
  const ThreadPool::Counts counts = pool.counts();
  EXPECT_TRUE(pool.serial_now());
  EXPECT_LE(counts.handed_out, 400 / 20) << "handed out " << counts.handed_out << ", on the caller "
                                         << counts.on_caller;
}

// The CPUs a process may use: its affinity, lowered to a cgroup quota rounded up.
TEST(UsableCpus, AffinityAndCgroupQuota) {
  EXPECT_EQ(usable_cpus_from(8, "", "", ""), 8);
  EXPECT_EQ(usable_cpus_from(8, "max 100000\n", "", ""), 8);
  EXPECT_EQ(usable_cpus_from(8, "200000 100000\n", "", ""), 2);
  EXPECT_EQ(usable_cpus_from(8, "150000 100000\n", "", ""), 2);  // 1.5 CPUs: two threads
  EXPECT_EQ(usable_cpus_from(2, "400000 100000\n", "", ""), 2);  // the quota never raises the affinity
  EXPECT_EQ(usable_cpus_from(8, "", "50000\n", "100000\n"), 1);  // cgroup v1
  EXPECT_EQ(usable_cpus_from(8, "", "-1\n", "100000\n"), 8);     // v1 without a quota
  EXPECT_EQ(usable_cpus_from(0, "", "", ""), 1);
  EXPECT_GE(usable_cpus(), 1);
  EXPECT_EQ(ThreadPool(0).size(), usable_cpus());
}

}  // namespace
}  // namespace canvas
