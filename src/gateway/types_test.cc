#include "gateway/types.h"

#include <gtest/gtest.h>

namespace strata::gateway {
namespace {

TEST(GatewayTypes, PriorityNamesRoundTrip) {
  for (Priority p : {Priority::kGold, Priority::kSilver, Priority::kBronze}) {
    auto parsed = ParsePriorityName(PriorityName(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
    EXPECT_EQ(PriorityFromInt(PriorityToInt(p)), p);
  }
  EXPECT_FALSE(ParsePriorityName("Gold").ok());
  EXPECT_FALSE(ParsePriorityName("").ok());
  EXPECT_EQ(PriorityFromInt(-7), Priority::kGold);
  EXPECT_EQ(PriorityFromInt(0), Priority::kSilver);
  EXPECT_EQ(PriorityFromInt(3), Priority::kBronze);
}

TEST(GatewayTypes, TierNamesRoundTrip) {
  for (KvTier t : {KvTier::kPool, KvTier::kRam, KvTier::kDisk, KvTier::kRedis}) {
    auto parsed = ParseKvTierName(KvTierName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_FALSE(ParseKvTierName("gpu").ok());
  EXPECT_EQ(RouteReasonName(RouteReason::kAffinity), "affinity");
  EXPECT_EQ(RouteReasonName(RouteReason::kRetry), "retry");
}

}  // namespace
}  // namespace strata::gateway
