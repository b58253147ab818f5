#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace strata {
namespace {

TEST(ThreadPoolTest, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
      for (size_t grain : {size_t{1}, size_t{16}}) {
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(n, [&](size_t b, size_t e, int) {
          for (size_t i = b; i < e; ++i) hits[i]++;
        }, grain);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << i;
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

}  // namespace
}  // namespace strata
