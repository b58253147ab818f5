#include "protocol/wire.h"

#include <gtest/gtest.h>

namespace strata::protocol {
namespace {

TEST(ProtocolWire, PriorityNamesRoundTrip) {
  for (Priority p : {Priority::kGold, Priority::kSilver, Priority::kBronze}) {
    auto parsed = ParsePriorityName(PriorityName(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
    EXPECT_EQ(PriorityFromInt(PriorityToInt(p)), p);
  }
  EXPECT_FALSE(ParsePriorityName("Gold").ok());
  EXPECT_FALSE(ParsePriorityName("").ok());
  EXPECT_FALSE(ParsePriorityName("platinum").ok());
  EXPECT_EQ(PriorityFromInt(-7), Priority::kGold);
  EXPECT_EQ(PriorityFromInt(0), Priority::kSilver);
  EXPECT_EQ(PriorityFromInt(3), Priority::kBronze);
  EXPECT_EQ(PriorityToInt(Priority::kGold), -1);
  EXPECT_EQ(PriorityToInt(Priority::kSilver), 0);
  EXPECT_EQ(PriorityToInt(Priority::kBronze), 1);
  EXPECT_EQ(PriorityName(Priority::kSilver), "silver");
}

TEST(ProtocolWire, PriorityErrorListsTheNamesAndQuotesTheValue) {
  auto bad = ParsePriorityName("platinum");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("gold, silver or bronze"), std::string::npos);
  EXPECT_NE(bad.status().message().find("'platinum'"), std::string::npos);
  // A long value is cut in the message (it is client data).
  auto longer = ParsePriorityName(std::string(10000, 'x'));
  ASSERT_FALSE(longer.ok());
  EXPECT_LT(longer.status().message().size(), 200u);
}

TEST(ProtocolWire, TierNamesRoundTrip) {
  for (KvTier t : {KvTier::kPool, KvTier::kRam, KvTier::kDisk, KvTier::kRedis}) {
    auto parsed = ParseKvTierName(KvTierName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_EQ(KvTierName(KvTier::kRam), "ram");
  EXPECT_FALSE(ParseKvTierName("gpu").ok());
  EXPECT_FALSE(ParseKvTierName("Pool").ok());
}

TEST(ProtocolWire, HeaderNamesAreLowerCaseStrataHeaders) {
  for (std::string_view h :
       {kHeaderTier, kHeaderTenant, kHeaderDeadlineMs, kHeaderTiming, kHeaderRoute, kHeaderArm,
        kHeaderPool, kHeaderReplica, kHeaderCascade, kHeaderModelVersion}) {
    EXPECT_EQ(h.substr(0, 9), "x-strata-") << h;
    for (char c : h) EXPECT_FALSE(c >= 'A' && c <= 'Z') << h;
  }
}

}  // namespace
}  // namespace strata::protocol
