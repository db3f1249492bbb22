// WorkerThreads: threads start on demand, never exceed the bound, leave when idle, and run every task.
#include "core/worker_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

using namespace canvas;
using namespace std::chrono_literals;

TEST(WorkerThreads, BoundedStartedOnDemandAndLeaveWhenIdle) {
  WorkerThreads pool("test", 3, 200ms);
  EXPECT_EQ(pool.threads(), 0u);  // none at rest
  std::mutex gate;
  std::unique_lock<std::mutex> hold(gate);
  std::atomic<int> done{0};
  for (int i = 0; i < 10; ++i)
    pool.post([&] {
      std::lock_guard<std::mutex> wait_for_gate(gate);
      ++done;
    });
  for (int i = 0; i < 200 && pool.busy() < 3; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(pool.threads(), 3u);  // the bound, though 10 tasks wait
  EXPECT_EQ(pool.busy(), 3u);
  EXPECT_EQ(pool.waiting(), 7u);
  hold.unlock();
  for (int i = 0; i < 400 && done < 10; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(done, 10);
  for (int i = 0; i < 400 && pool.threads() > 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(pool.threads(), 0u);  // idle threads left
  pool.post([&] { ++done; });     // and new ones start again
  for (int i = 0; i < 400 && done < 11; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(done, 11);
}

TEST(WorkerThreads, OneThreadRunsTasksInOrderAndTheDestructorRunsWhatIsPosted) {
  std::vector<int> order;
  {
    WorkerThreads pool("test", 1);
    for (int i = 0; i < 50; ++i) pool.post([&order, i] { order.push_back(i); });
  }
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[size_t(i)], i);
}
