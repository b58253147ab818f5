#include "engine/kvtier/ram_tier.h"

#include <gtest/gtest.h>

namespace strata::engine::kvtier {
namespace {

BlockKey K(int i) {
  BlockKey k{};
  k[0] = static_cast<uint8_t>(i);
  k[1] = static_cast<uint8_t>(i >> 8);
  k[31] = 0x5a;
  return k;
}

std::vector<uint8_t> Bytes(size_t n, uint8_t fill) { return std::vector<uint8_t>(n, fill); }

struct FakeClock {
  double now = 1000;
  Clock fn() {
    return [this] { return now; };
  }
};

TEST(RamTierTest, EvictsLeastRecentlyUsedAtCapacity) {
  FakeClock clock;
  TierLimits limits;
  limits.capacity_bytes = 300;
  RamTier ram(limits, clock.fn());
  EXPECT_TRUE(ram.Put(K(1), "", Bytes(100, 1)).empty());
  EXPECT_TRUE(ram.Put(K(2), "", Bytes(100, 2)).empty());
  EXPECT_TRUE(ram.Put(K(3), "", Bytes(100, 3)).empty());
  ASSERT_TRUE(ram.Get(K(1)).has_value());  // K(1) becomes most recently used
  auto out = ram.Put(K(4), "", Bytes(100, 4));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].key, K(2));
  EXPECT_EQ(out[0].bytes, Bytes(100, 2)) << "evicted bytes are handed back for demotion";
  EXPECT_FALSE(ram.Get(K(2)).has_value());
  EXPECT_EQ(*ram.Get(K(1)), Bytes(100, 1));
  EXPECT_TRUE(ram.Get(K(3)).has_value());
  EXPECT_TRUE(ram.Get(K(4)).has_value());
  TierStats s = ram.Stats();
  EXPECT_EQ(s.entries, 3);
  EXPECT_EQ(s.bytes_used, 300);
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(s.misses, 1);
  // Two evictions when a bigger entry arrives.
  out = ram.Put(K(5), "", Bytes(200, 5));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].key, K(1));
  EXPECT_EQ(out[1].key, K(3));
}

TEST(RamTierTest, ReplacingAKeyDoesNotDoubleCount) {
  FakeClock clock;
  TierLimits limits;
  limits.capacity_bytes = 300;
  RamTier ram(limits, clock.fn());
  for (int i = 0; i < 10; ++i)
    EXPECT_TRUE(ram.Put(K(1), "", Bytes(100, static_cast<uint8_t>(i))).empty());
  EXPECT_EQ(ram.Stats().bytes_used, 100);
  EXPECT_EQ(*ram.Get(K(1)), Bytes(100, 9));
}

TEST(RamTierTest, EntryLargerThanCapacityIsHandedBack) {
  FakeClock clock;
  TierLimits limits;
  limits.capacity_bytes = 100;
  RamTier ram(limits, clock.fn());
  EXPECT_TRUE(ram.Put(K(1), "", Bytes(50, 1)).empty());
  auto out = ram.Put(K(2), "", Bytes(101, 2));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].key, K(2));
  EXPECT_TRUE(ram.Get(K(1)).has_value()) << "a too-large entry must not evict others";
  EXPECT_EQ(ram.Stats().evictions, 0);
}

TEST(RamTierTest, TtlExpiresEntries) {
  FakeClock clock;
  TierLimits limits;
  limits.capacity_bytes = 1000;
  limits.ttl_s = 10;
  RamTier ram(limits, clock.fn());
  ram.Put(K(1), "", Bytes(10, 1));
  clock.now += 5;
  ram.Put(K(2), "", Bytes(10, 2));
  clock.now += 4.5;  // K(1) is 9.5 s old
  EXPECT_TRUE(ram.Get(K(1)).has_value());
  clock.now += 0.5;  // K(1) is 10 s old: expired, even though it was just read
  EXPECT_FALSE(ram.Get(K(1)).has_value());
  EXPECT_EQ(ram.Stats().expirations, 1);
  EXPECT_EQ(ram.Stats().entries, 1);
  clock.now += 5;
  ram.SweepExpired();  // K(2) expires through the sweep without being read
  EXPECT_EQ(ram.Stats().expirations, 2);
  EXPECT_EQ(ram.Stats().entries, 0);
  EXPECT_EQ(ram.Stats().bytes_used, 0);
}

TEST(RamTierTest, TenantOverQuotaEvictsOnlyItsOwnEntries) {
  FakeClock clock;
  TierLimits limits;
  limits.capacity_bytes = 1000;
  limits.tenant_quota_bytes = {{"acme", 200}};
  limits.default_tenant_quota_bytes = 300;
  RamTier ram(limits, clock.fn());
  ram.Put(K(1), "acme", Bytes(100, 1));
  ram.Put(K(10), "bob", Bytes(100, 10));  // older than acme's later entries
  ram.Put(K(2), "acme", Bytes(100, 2));
  auto out = ram.Put(K(3), "acme", Bytes(100, 3));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].key, K(1)) << "acme's own LRU entry goes, not bob's older one";
  EXPECT_EQ(out[0].tenant, "acme");
  EXPECT_TRUE(ram.Contains(K(10)));
  EXPECT_EQ(ram.tenant_bytes("acme"), 200u);
  // Default quota for unlisted tenants: bob may hold 300.
  EXPECT_TRUE(ram.Put(K(11), "bob", Bytes(100, 11)).empty());
  EXPECT_TRUE(ram.Put(K(12), "bob", Bytes(100, 12)).empty());
  out = ram.Put(K(13), "bob", Bytes(100, 13));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].key, K(10));
  EXPECT_EQ(ram.tenant_bytes("bob"), 300u);
  EXPECT_TRUE(ram.Contains(K(2)));
  EXPECT_TRUE(ram.Contains(K(3)));
  // An entry larger than the tenant's quota is refused without touching its other entries.
  out = ram.Put(K(4), "acme", Bytes(201, 4));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].key, K(4));
  EXPECT_EQ(ram.tenant_bytes("acme"), 200u);
}

TEST(RamTierTest, CapacityEvictionCrossesTenants) {
  FakeClock clock;
  TierLimits limits;
  limits.capacity_bytes = 200;
  limits.default_tenant_quota_bytes = 200;
  RamTier ram(limits, clock.fn());
  ram.Put(K(1), "a", Bytes(100, 1));
  ram.Put(K(2), "b", Bytes(100, 2));
  auto out = ram.Put(K(3), "c", Bytes(100, 3));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].key, K(1));
}

TEST(RamTierTest, TakeAllReturnsLeastRecentlyUsedFirst) {
  FakeClock clock;
  TierLimits limits;
  limits.capacity_bytes = 1000;
  RamTier ram(limits, clock.fn());
  ram.Put(K(1), "", Bytes(10, 1));
  ram.Put(K(2), "", Bytes(10, 2));
  ram.Put(K(3), "", Bytes(10, 3));
  ASSERT_TRUE(ram.Get(K(1)).has_value());
  auto all = ram.TakeAll();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].key, K(2));
  EXPECT_EQ(all[1].key, K(3));
  EXPECT_EQ(all[2].key, K(1));
  EXPECT_EQ(ram.Stats().entries, 0);
}

}  // namespace
}  // namespace strata::engine::kvtier
