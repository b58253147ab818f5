#include "gateway/prefix_index.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace strata::gateway {
namespace {

std::vector<BlockHash> Chain(int n, uint8_t seed) {
  std::vector<BlockHash> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)].fill(seed);
    out[static_cast<size_t>(i)][0] = static_cast<uint8_t>(i);
    out[static_cast<size_t>(i)][1] = static_cast<uint8_t>(i >> 8);
  }
  return out;
}

const Clock::time_point kT0{std::chrono::seconds(1000)};

TEST(PrefixIndex, LookupCountsLeadingBlocksAndStopsAtTheFirstMiss) {
  PrefixIndex idx;
  auto c = Chain(6, 7);
  std::vector<BlockHash> held = {c[0], c[1], c[2], c[4], c[5]};  // c[3] missing
  idx.Apply("r", KvTier::kPool, true, held);
  PrefixMatch m = idx.Lookup("r", c, kT0);
  EXPECT_EQ(m.blocks, 3);
  EXPECT_EQ(m.by_tier[0], 3);
  EXPECT_EQ(idx.Lookup("other", c, kT0).blocks, 0);
  // The first block missing: nothing counts, even if later blocks are held.
  EXPECT_EQ(idx.Lookup("r", std::vector<BlockHash>(c.begin() + 3, c.end()), kT0).blocks, 0);
}

TEST(PrefixIndex, FastestTierOfEachBlockAndRemovePerTier) {
  PrefixIndex idx;
  auto c = Chain(4, 1);
  idx.Apply("r", KvTier::kDisk, true, c);
  idx.Apply("r", KvTier::kRam, true, std::vector<BlockHash>{c[1]});
  idx.Apply("r", KvTier::kPool, true, std::vector<BlockHash>{c[0]});
  PrefixMatch m = idx.Lookup("r", c, kT0);
  EXPECT_EQ(m.blocks, 4);
  EXPECT_EQ(m.by_tier[static_cast<size_t>(KvTier::kPool)], 1);
  EXPECT_EQ(m.by_tier[static_cast<size_t>(KvTier::kRam)], 1);
  EXPECT_EQ(m.by_tier[static_cast<size_t>(KvTier::kDisk)], 2);
  // Evicted from the pool but still on disk: held, in the slower tier.
  idx.Apply("r", KvTier::kPool, false, std::vector<BlockHash>{c[0]});
  m = idx.Lookup("r", c, kT0);
  EXPECT_EQ(m.blocks, 4);
  EXPECT_EQ(m.by_tier[static_cast<size_t>(KvTier::kDisk)], 3);
  // Gone from every tier: the chain stops there.
  idx.Apply("r", KvTier::kDisk, false, std::vector<BlockHash>{c[2]});
  EXPECT_EQ(idx.Lookup("r", c, kT0).blocks, 2);
  EXPECT_EQ(idx.size("r"), 3u);
}

TEST(PrefixIndex, ResetForgetsEventsButKeepsHistory) {
  PrefixIndex idx;
  auto a = Chain(3, 1), b = Chain(2, 2);
  idx.Apply("r", KvTier::kPool, true, a);
  idx.RecordHistory("r", b, kT0, kT0 + std::chrono::seconds(10));
  idx.ResetEvents("r");
  EXPECT_EQ(idx.Lookup("r", a, kT0).blocks, 0);
  PrefixMatch m = idx.Lookup("r", b, kT0);
  EXPECT_EQ(m.blocks, 2);
  EXPECT_EQ(m.from_history, 2);
  idx.Remove("r");
  EXPECT_EQ(idx.size("r"), 0u);
}

TEST(PrefixIndex, HistoryExpiresAndARecordExtendsIt) {
  PrefixIndex idx;
  auto a = Chain(4, 3);
  idx.RecordHistory("r", a, kT0, kT0 + std::chrono::seconds(10));
  EXPECT_EQ(idx.Lookup("r", a, kT0 + std::chrono::seconds(9)).blocks, 4);
  // The first two are sent again later: they live on, the rest expire.
  idx.RecordHistory("r", std::vector<BlockHash>(a.begin(), a.begin() + 2),
                    kT0 + std::chrono::seconds(5), kT0 + std::chrono::seconds(15));
  EXPECT_EQ(idx.Lookup("r", a, kT0 + std::chrono::seconds(11)).blocks, 2);
  EXPECT_EQ(idx.size("r"), 2u);
  EXPECT_EQ(idx.Lookup("r", a, kT0 + std::chrono::seconds(16)).blocks, 0);
  EXPECT_EQ(idx.size("r"), 0u);
  // A hash known from events outlives its history.
  idx.Apply("r", KvTier::kRam, true, std::vector<BlockHash>{a[0]});
  idx.RecordHistory("r", std::vector<BlockHash>{a[0]}, kT0, kT0 + std::chrono::seconds(1));
  PrefixMatch m = idx.Lookup("r", a, kT0 + std::chrono::seconds(100));
  EXPECT_EQ(m.blocks, 1);
  EXPECT_EQ(m.by_tier[static_cast<size_t>(KvTier::kRam)], 1);
}

TEST(PrefixIndex, BoundedPerReplicaOldestHistoryFirst) {
  PrefixIndex idx(8);
  auto ev = Chain(4, 1), old_hist = Chain(4, 2), new_hist = Chain(4, 3);
  idx.Apply("r", KvTier::kPool, true, ev);
  idx.RecordHistory("r", old_hist, kT0, kT0 + std::chrono::seconds(100));
  idx.RecordHistory("r", new_hist, kT0, kT0 + std::chrono::seconds(100));
  EXPECT_EQ(idx.size("r"), 8u);
  EXPECT_EQ(idx.Lookup("r", ev, kT0).blocks, 4);        // events kept
  EXPECT_EQ(idx.Lookup("r", old_hist, kT0).blocks, 0);  // oldest history went
  EXPECT_EQ(idx.Lookup("r", new_hist, kT0).blocks, 4);
  // Without history left, the oldest event-learned hash goes.
  auto more = Chain(6, 4);
  idx.Apply("r", KvTier::kPool, true, more);
  EXPECT_EQ(idx.size("r"), 8u);
  EXPECT_EQ(idx.Lookup("r", more, kT0).blocks, 6);
  EXPECT_EQ(idx.Lookup("other", more, kT0).blocks, 0);
}

TEST(PrefixIndex, ConcurrentUseIsSafe) {
  PrefixIndex idx(1000);
  auto c = Chain(64, 9);
  std::vector<std::thread> ts;
  ts.reserve(4);
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        idx.Apply("r", KvTier::kPool, (i + t) % 2 == 0, c);
        idx.RecordHistory("r", c, kT0, kT0 + std::chrono::seconds(i));
        (void)idx.Lookup("r", c, kT0 + std::chrono::seconds(i / 2));
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_LE(idx.size("r"), 64u);
}

}  // namespace
}  // namespace strata::gateway
