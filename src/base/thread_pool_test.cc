#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

namespace strata {
namespace {

TEST(ThreadPoolTest, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
      for (size_t grain : {size_t{1}, size_t{16}}) {
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(
            n,
            [&](size_t b, size_t e, int) {
              for (size_t i = b; i < e; ++i) hits[i]++;
            },
            grain);
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << i;
      }
    }
  }
}

TEST(ThreadPoolTest, ManyRoundsNoDeadlock) {
  ThreadPool pool(2);
  std::atomic<long> sum{0};
  for (int r = 0; r < 2000; ++r) {
    pool.ParallelFor(10, [&](size_t b, size_t e, int) { sum += static_cast<long>(e - b); });
  }
  EXPECT_EQ(sum.load(), 20000);
}

// Both waiting paths: idle gaps longer than the spin (workers go to sleep and must be woken) and
// chunks slower than the spin (the owner goes to sleep and must be woken), mixed with back-to-back
// jobs (everyone spinning).
TEST(ThreadPoolTest, SleepingWorkersAndOwnerAreWoken) {
  for (int threads : {2, 3, 5}) {
    ThreadPool pool(threads);
    std::atomic<long> sum{0};
    for (int r = 0; r < 60; ++r) {
      if (r % 7 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      pool.ParallelFor(100, [&](size_t b, size_t e, int t) {
        if (r % 5 == 0 && t == threads - 1)
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        sum += static_cast<long>(e - b);
      });
    }
    EXPECT_EQ(sum.load(), 60L * 100) << threads << " threads";
  }
}

}  // namespace
}  // namespace strata

// Counting global allocations (tests/testing/alloc_counter.cc replaces operator new in this
// binary, in its own translation unit): ParallelFor must not allocate (the decode loop calls it
// dozens of times per token).
namespace strata::testing {
extern std::atomic<bool> g_count_allocs;
extern std::atomic<size_t> g_allocs;
}  // namespace strata::testing

namespace strata {
namespace {

TEST(ThreadPoolTest, ParallelForDoesNotAllocate) {
  ThreadPool pool(2);
  double a = 1, b = 2, c = 3, d = 4, e = 5;  // a capture list larger than any small buffer
  std::atomic<long> sink{0};
  auto body = [&](size_t lo, size_t hi, int) {
    sink += static_cast<long>((a + b + c + d + e) * static_cast<double>(hi - lo));
  };
  pool.ParallelFor(100, body);
  testing::g_allocs = 0;
  testing::g_count_allocs = true;
  for (int i = 0; i < 100; ++i) pool.ParallelFor(100, body);
  testing::g_count_allocs = false;
  EXPECT_EQ(testing::g_allocs.load(), 0u);
  EXPECT_EQ(sink.load(), 101L * 100 * 15);
}

}  // namespace
}  // namespace strata
