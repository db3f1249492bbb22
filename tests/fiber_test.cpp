// Fibers (core/fiber.h): bodies interleaved on one thread pause and resume where they left off, keep their
// stack's state, hand exceptions to the resumer and may use deep stacks.
#include "core/fiber.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace canvas {
namespace {

TEST(Fiber, BodiesInterleaveAndResumeWhereTheyPaused) {
  std::vector<std::string> log;
  auto body = [&log](const std::string& name) {
    return [&log, name] {
      for (int i = 0; i < 3; ++i) {
        log.push_back(name + std::to_string(i));  // a local of the fiber's stack, kept across the pauses
        EXPECT_TRUE(Fiber::inside());
        Fiber::suspend();
      }
    };
  };
  Fiber a(body("a")), b(body("b"));
  EXPECT_FALSE(Fiber::inside());
  int resumes = 0;
  for (bool more_a = true, more_b = true; more_a || more_b;) {
    if (more_a) more_a = a.resume(), ++resumes;
    if (more_b) more_b = b.resume(), ++resumes;
  }
  EXPECT_EQ(log, (std::vector<std::string>{"a0", "b0", "a1", "b1", "a2", "b2"}));
  EXPECT_EQ(resumes, 8);  // three pauses and the end, each
  EXPECT_TRUE(a.finished());
  EXPECT_FALSE(a.resume());  // finished stays finished
  EXPECT_FALSE(Fiber::inside());
}

TEST(Fiber, AnExceptionReachesTheResumerOnce) {
  bool caught_inside = false;
  Fiber f([&] {
    try {
      throw std::runtime_error("inner");  // thrown and caught on the fiber's stack
    } catch (const std::runtime_error&) {
      caught_inside = true;
    }
    Fiber::suspend();
    throw std::runtime_error("escaped");
  });
  EXPECT_TRUE(f.resume());
  EXPECT_TRUE(caught_inside);
  try {
    f.resume();
    FAIL() << "the body's exception was not rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "escaped");
  }
  EXPECT_TRUE(f.finished());
  EXPECT_FALSE(f.resume());
}

int depth_sum(int n) {
  volatile char frame[1024];  // about 1 KiB of stack per level
  frame[0] = char(n);
  if (n == 0) return frame[0];
  if (n % 512 == 0) Fiber::suspend();  // pauses deep in the recursion
  return depth_sum(n - 1) + 1 + frame[0] - char(n);
}

TEST(Fiber, DeepStacksAndPausesInsideTheRecursion) {
  int result = -1;
  Fiber f([&] { result = depth_sum(2000); }, size_t(4) << 20);  // about 2 MiB used of 4
  int pauses = 0;
  while (f.resume()) ++pauses;
  EXPECT_EQ(result, 2000);
  EXPECT_EQ(pauses, 3);  // at 1536, 1024 and 512
}

TEST(Fiber, ManyLiveFibersCostAddressSpaceNotMemory) {
  // 64 fibers of 8 MiB each are 512 MiB reserved; the pages touched are a few per fiber.
  std::vector<std::unique_ptr<Fiber>> fibers;
  int64_t sum = 0;
  for (int i = 0; i < 64; ++i)
    fibers.push_back(std::make_unique<Fiber>([&sum, i] {
      sum += i;
      Fiber::suspend();
      sum += i;
    }));
  for (auto& f : fibers) EXPECT_TRUE(f->resume());
  for (auto& f : fibers) EXPECT_FALSE(f->resume());
  EXPECT_EQ(sum, 2 * (63 * 64 / 2));
}

TEST(Fiber, AFiberThatNeverRanIsDestroyedQuietly) {
  bool ran = false;
  { Fiber f([&] { ran = true; }); }
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace canvas
