// The thread pool under contention (a competing spinner on the cores) and the default thread count.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

#include "core/cpu.h"
#include "core/tensor.h"
#include "ops/matmul.h"
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

// Serial fallback or not, every loop gives the same bits: a quantised matmul under a spinner (the pool
// switching between its workers and the caller alone as it measures) equals the single-thread product.
TEST(ThreadPoolContention, ResultsAreBitExactWhateverThePoolDoes) {
  const int cpus = std::max(2, usable_cpus());
  const int64_t k = 512, n = 384, m = 3;
  std::vector<float> w32(size_t(n * k)), x(size_t(m * k));
  for (size_t i = 0; i < w32.size(); ++i) w32[i] = std::sin(0.37f * float(i));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * float(i));
  const int64_t rb = row_bytes(DType::Q4_0, k);
  std::vector<uint8_t> q(size_t(n * rb));
  for (int64_t r = 0; r < n; ++r) quantize_row(DType::Q4_0, w32.data() + r * k, q.data() + r * rb, k);
  TensorView w;
  w.type = DType::Q4_0;
  w.n_dims = 2;
  w.ne[0] = k;
  w.ne[1] = n;
  w.data = q.data();
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
