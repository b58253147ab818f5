#include "engine/kv/kv_event_log.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace strata::engine::kv {
namespace {

using cachekey::BlockHash;
using Pair = std::pair<int, BlockHash>;  // (tier, hash)

BlockHash H(uint32_t i) {
  BlockHash h{};
  for (size_t k = 0; k < h.size(); ++k)
    h[k] = static_cast<uint8_t>((i * 2654435761u) >> (k % 4 * 8));
  h[0] = static_cast<uint8_t>(i);
  h[1] = static_cast<uint8_t>(i >> 8);
  h[2] = static_cast<uint8_t>(i >> 16);
  return h;
}

// A reader that follows the log as a gateway does: a reset replaces what it knew.
struct Follower {
  uint64_t cursor = 0;
  std::set<Pair> held;
  int resets = 0;
  // One poll; returns the number of hashes received.
  size_t Poll(const KvEventLog& log, size_t max) {
    KvEventPage p = log.Read(cursor, max);
    if (p.reset) {
      held.clear();
      ++resets;
    }
    for (const KvEventGroup& g : p.events)
      for (const BlockHash& h : g.hashes) {
        if (g.op == KvEventOp::kAdd)
          held.insert({static_cast<int>(g.tier), h});
        else
          held.erase({static_cast<int>(g.tier), h});
      }
    cursor = p.cursor;
    return p.num_hashes();
  }
};

std::set<Pair> SnapshotOf(const KvEventLog& log) {
  Follower f;
  f.Poll(log, 1);
  EXPECT_EQ(f.resets, 1);
  return f.held;
}

TEST(KvEventLog, InstanceIsRandomHexAndCursorsDiffer) {
  KvEventLog a, b;
  ASSERT_EQ(a.instance().size(), 32u);
  for (char c : a.instance()) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << c;
  EXPECT_NE(a.instance(), b.instance());
  EXPECT_NE(a.head(), b.head());  // random starts: a cursor of one is not valid in the other
  EXPECT_GT(a.head(), 0u);
  EXPECT_LT(a.head(), uint64_t{1} << 53);  // exact as a JSON number anywhere
}

TEST(KvEventLog, EmptyLogAnswersAnEmptySnapshot) {
  KvEventLog log;
  KvEventPage p = log.Read(0, 100);
  EXPECT_TRUE(p.reset);
  EXPECT_TRUE(p.events.empty());
  EXPECT_EQ(p.cursor, log.head());
  // With that cursor: no reset, nothing new.
  KvEventPage q = log.Read(p.cursor, 100);
  EXPECT_FALSE(q.reset);
  EXPECT_TRUE(q.events.empty());
  EXPECT_EQ(q.cursor, p.cursor);
}

TEST(KvEventLog, AddRemoveGroupsAndCursor) {
  KvEventLog log;
  const uint64_t c0 = log.head();
  log.Add(protocol::KvTier::kPool, H(1));
  log.Add(protocol::KvTier::kPool, H(2));
  log.Remove(protocol::KvTier::kPool, H(1));
  log.Add(protocol::KvTier::kRam, H(1));
  KvEventPage p = log.Read(c0, 100);
  EXPECT_FALSE(p.reset);
  EXPECT_EQ(p.cursor, c0 + 4);
  EXPECT_EQ(p.cursor, log.head());
  ASSERT_EQ(p.events.size(), 3u);
  EXPECT_EQ(p.events[0].op, KvEventOp::kAdd);
  EXPECT_EQ(p.events[0].tier, protocol::KvTier::kPool);
  EXPECT_EQ(p.events[0].hashes, (std::vector<BlockHash>{H(1), H(2)}));
  EXPECT_EQ(p.events[1].op, KvEventOp::kRemove);
  EXPECT_EQ(p.events[1].hashes, (std::vector<BlockHash>{H(1)}));
  EXPECT_EQ(p.events[2].op, KvEventOp::kAdd);
  EXPECT_EQ(p.events[2].tier, protocol::KvTier::kRam);
  // From the middle: only what came after.
  KvEventPage q = log.Read(c0 + 2, 100);
  EXPECT_FALSE(q.reset);
  ASSERT_EQ(q.events.size(), 2u);
  EXPECT_EQ(q.events[0].op, KvEventOp::kRemove);
  EXPECT_EQ(protocol::KvTierName(q.events[1].tier), "ram");
  EXPECT_EQ(KvEventOpName(q.events[0].op), "remove");
}

TEST(KvEventLog, OnlyChangesAreLogged) {
  KvEventLog log;
  const uint64_t c0 = log.head();
  log.Add(protocol::KvTier::kPool, H(1));
  log.Add(protocol::KvTier::kPool, H(1));     // already held
  log.Remove(protocol::KvTier::kDisk, H(1));  // not held in disk
  log.Remove(protocol::KvTier::kPool, H(9));  // never held
  EXPECT_EQ(log.head(), c0 + 1);
  log.Add(protocol::KvTier::kDisk, H(1));  // another tier: its own pair
  EXPECT_EQ(log.head(), c0 + 2);
  EXPECT_EQ(log.held(protocol::KvTier::kPool), 1u);
  EXPECT_EQ(log.held(protocol::KvTier::kDisk), 1u);
  EXPECT_EQ(log.held(protocol::KvTier::kRam), 0u);
}

TEST(KvEventLog, MaxCapsOneAnswerAndPagesContinue) {
  KvEventLog log;
  uint64_t c = log.head();
  for (uint32_t i = 0; i < 10; ++i) log.Add(protocol::KvTier::kPool, H(i));
  std::vector<BlockHash> got;
  for (int page = 0; page < 4; ++page) {
    KvEventPage p = log.Read(c, 3);
    EXPECT_FALSE(p.reset);
    EXPECT_LE(p.num_hashes(), 3u);
    EXPECT_EQ(p.cursor, c + p.num_hashes());
    for (const auto& g : p.events) got.insert(got.end(), g.hashes.begin(), g.hashes.end());
    c = p.cursor;
  }
  ASSERT_EQ(got.size(), 10u);
  for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(got[i], H(i));
  EXPECT_EQ(log.Read(c, 3).num_hashes(), 0u);
  EXPECT_EQ(log.Read(c, 0).cursor, c);  // max 0 is treated as 1 (and there is nothing)
}

TEST(KvEventLog, RingOverflowGivesAResetSnapshot) {
  KvEventLog log({.capacity = 8});
  const uint64_t c0 = log.head();
  for (uint32_t i = 0; i < 12; ++i) log.Add(protocol::KvTier::kPool, H(i));
  for (uint32_t i = 0; i < 4; ++i) log.Remove(protocol::KvTier::kPool, H(i));
  log.Add(protocol::KvTier::kRedis, H(100));
  const uint64_t head = log.head();
  ASSERT_EQ(head, c0 + 17);
  // The oldest cursor still served is head - capacity.
  KvEventPage ok = log.Read(head - 8, 100);
  EXPECT_FALSE(ok.reset);
  EXPECT_EQ(ok.num_hashes(), 8u);
  KvEventPage lost = log.Read(head - 9, 100);
  EXPECT_TRUE(lost.reset);
  EXPECT_EQ(log.Read(c0, 100).reset, true);
  EXPECT_EQ(lost.cursor, head);
  // The snapshot is the held set, one add group per tier, not capped by max.
  KvEventPage snap = log.Read(c0, 2);
  EXPECT_TRUE(snap.reset);
  ASSERT_EQ(snap.events.size(), 2u);
  EXPECT_EQ(snap.events[0].tier, protocol::KvTier::kPool);
  EXPECT_EQ(snap.events[0].op, KvEventOp::kAdd);
  EXPECT_EQ(std::set<BlockHash>(snap.events[0].hashes.begin(), snap.events[0].hashes.end()),
            (std::set<BlockHash>{H(4), H(5), H(6), H(7), H(8), H(9), H(10), H(11)}));
  EXPECT_EQ(snap.events[1].tier, protocol::KvTier::kRedis);
  EXPECT_EQ(snap.events[1].hashes, (std::vector<BlockHash>{H(100)}));
}

TEST(KvEventLog, ZeroSizesAreTakenAsOne) {
  KvEventLog log({.capacity = 0, .max_held_per_tier = 0});
  log.Add(protocol::KvTier::kPool, H(1));
  log.Add(protocol::KvTier::kPool, H(2));  // over the bound of 1: dropped
  EXPECT_EQ(log.held(protocol::KvTier::kPool), 1u);
  EXPECT_FALSE(log.Read(log.head() - 1, 10).reset);
  EXPECT_EQ(log.Read(log.head() - 1, 10).num_hashes(), 1u);
  log.Remove(protocol::KvTier::kPool, H(1));
  EXPECT_TRUE(log.Read(log.head() - 2, 10).reset);  // the ring keeps one event
}

TEST(KvEventLog, ForeignAndFutureCursorsReset) {
  KvEventLog a, b;
  a.Add(protocol::KvTier::kPool, H(1));
  b.Add(protocol::KvTier::kPool, H(2));
  EXPECT_TRUE(a.Read(a.head() + 1, 10).reset);
  EXPECT_TRUE(a.Read(b.head(), 10).reset);  // another instance's cursor
  EXPECT_TRUE(a.Read(~uint64_t{0}, 10).reset);
  EXPECT_FALSE(a.Read(a.head(), 10).reset);
}

TEST(KvEventLog, HeldSetIsBoundedPerTier) {
  KvEventLog log({.capacity = 16, .max_held_per_tier = 4});
  const uint64_t c0 = log.head();
  for (uint32_t i = 0; i < 10; ++i) log.Add(protocol::KvTier::kPool, H(i));
  EXPECT_EQ(log.held(protocol::KvTier::kPool), 4u);
  EXPECT_EQ(log.dropped_adds(), 6u);
  EXPECT_EQ(log.head(), c0 + 4);  // dropped adds are not published...
  log.Remove(protocol::KvTier::kPool, H(7));
  EXPECT_EQ(log.head(), c0 + 4);          // ...nor their removes
  log.Add(protocol::KvTier::kRam, H(7));  // other tiers have their own bound
  EXPECT_EQ(log.held(protocol::KvTier::kRam), 1u);
  log.Remove(protocol::KvTier::kPool, H(0));
  log.Add(protocol::KvTier::kPool, H(8));  // room again
  EXPECT_EQ(log.held(protocol::KvTier::kPool), 4u);
  // A long stream keeps the ring at its capacity: still exactly the last 16 events served.
  for (int round = 0; round < 1000; ++round) {
    log.Add(protocol::KvTier::kDisk, H(5000));
    log.Remove(protocol::KvTier::kDisk, H(5000));
  }
  EXPECT_FALSE(log.Read(log.head() - 16, 100).reset);
  EXPECT_TRUE(log.Read(log.head() - 17, 100).reset);
  EXPECT_EQ(log.Read(log.head() - 16, 100).num_hashes(), 16u);
  EXPECT_EQ(SnapshotOf(log).size(), 5u);
}

TEST(KvEventLog, FollowingTheStreamReproducesTheHeldSet) {
  KvEventLog log({.capacity = 64});
  Follower f;
  std::mt19937 rng(7);
  std::set<Pair> truth;
  for (int step = 0; step < 5000; ++step) {
    const int tier = static_cast<int>(rng() % protocol::kNumKvTiers);
    const BlockHash h = H(rng() % 50);
    if (rng() % 2) {
      log.Add(static_cast<protocol::KvTier>(tier), h);
      truth.insert({tier, h});
    } else {
      log.Remove(static_cast<protocol::KvTier>(tier), h);
      truth.erase({tier, h});
    }
    if (step % 37 == 0) f.Poll(log, 16);  // sometimes falls behind the ring: resets
  }
  while (f.Poll(log, 16) > 0 || f.cursor != log.head()) {
  }
  EXPECT_GT(f.resets, 1);
  EXPECT_EQ(f.held, truth);
  EXPECT_EQ(SnapshotOf(log), truth);
}

TEST(KvEventLog, ConcurrentProducersAndReaders) {
  KvEventLog log({.capacity = 1024});
  constexpr int kThreads = 4, kOps = 20000;
  std::atomic<bool> done{false};
  std::vector<std::thread> producers;
  producers.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&log, t] {
      std::mt19937 rng(static_cast<uint32_t>(t));
      const auto tier = static_cast<protocol::KvTier>(t % protocol::kNumKvTiers);
      for (int i = 0; i < kOps; ++i) {
        const BlockHash h = H(static_cast<uint32_t>(t * 1000 + rng() % 200));
        if (rng() % 3 != 0)
          log.Add(tier, h);
        else
          log.Remove(tier, h);
      }
    });
  }
  std::vector<Follower> followers(2);
  std::vector<std::thread> readers;
  readers.reserve(followers.size());
  for (Follower& f : followers) {
    readers.emplace_back([&log, &f, &done] {
      while (!done.load()) f.Poll(log, 100);
    });
  }
  for (auto& t : producers) t.join();
  done.store(true);
  for (auto& t : readers) t.join();
  const std::set<Pair> truth = SnapshotOf(log);
  size_t total = 0;
  for (int t = 0; t < protocol::kNumKvTiers; ++t)
    total += log.held(static_cast<protocol::KvTier>(t));
  EXPECT_EQ(truth.size(), total);
  for (Follower& f : followers) {
    while (f.Poll(log, 100) > 0) {
    }
    EXPECT_EQ(f.cursor, log.head());
    EXPECT_EQ(f.held, truth);
  }
}

}  // namespace
}  // namespace strata::engine::kv
