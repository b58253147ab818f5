// gateway/split: sticky points, arm intervals, ≥ 99.9 % of 100k sessions keep their arm across a
// weight change that need not move them, sticky keys of requests, and the runtime weight table.
#include "gateway/split.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace strata::gateway {
namespace {

using nlohmann::json;

TEST(StickyPoint, IsInTheUnitIntervalDeterministicAndSaltedByRoute) {
  for (int i = 0; i < 1000; ++i) {
    const std::string key = "k" + std::to_string(i);
    const double u = StickyPoint("chat", key);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
    EXPECT_EQ(u, StickyPoint("chat", key));
  }
  EXPECT_NE(StickyPoint("chat", "alice"), StickyPoint("other", "alice"));
  EXPECT_NE(StickyPoint("ab", "c"), StickyPoint("a", "bc"));  // the separator counts
}

TEST(ArmForPoint, CumulativeIntervalsInConfigOrder) {
  const std::vector<double> w = {90, 10};
  EXPECT_EQ(ArmForPoint(w, 0.0), 0u);
  EXPECT_EQ(ArmForPoint(w, 0.8999), 0u);
  EXPECT_EQ(ArmForPoint(w, 0.9), 1u);
  EXPECT_EQ(ArmForPoint(w, 0.999999), 1u);
  const std::vector<double> three = {1, 0, 3};  // weights are relative; 0 never chosen
  EXPECT_EQ(ArmForPoint(three, 0.2), 0u);
  EXPECT_EQ(ArmForPoint(three, 0.25), 2u);
  EXPECT_EQ(ArmForPoint(three, 0.99), 2u);
  EXPECT_EQ(ArmForPoint({0, 5}, 0.0), 1u);
  EXPECT_EQ(ArmForPoint({5, 0}, std::nextafter(1.0, 0.0)), 0u);  // top of the range
}

// The proof: a weight change from 10 % to 20 % for arm 2 must move about 10 % of the
// sessions (arm 1 → arm 2); every other session keeps its arm.
TEST(ChooseArm, HundredThousandSessionsKeepTheirArmAcrossAWeightChange) {
  constexpr int kKeys = 100000;
  int before_on_2 = 0, after_on_2 = 0, moved = 0, moved_back = 0;
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = "user:session-" + std::to_string(i);
    const ArmChoice a = ChooseArm("chat", {90, 10}, key, 0.5);
    const ArmChoice b = ChooseArm("chat", {80, 20}, key, 0.5);
    ASSERT_TRUE(a.sticky);
    before_on_2 += a.index == 1;
    after_on_2 += b.index == 1;
    moved += a.index != b.index;
    moved_back += a.index == 1 && b.index == 0;  // a session that had no reason to move
  }
  // The split follows the weights (binomial noise on 100k keys: σ ≈ 0.1 %).
  EXPECT_NEAR(before_on_2 / double(kKeys), 0.10, 0.005);
  EXPECT_NEAR(after_on_2 / double(kKeys), 0.20, 0.005);
  // The sessions that had to move: arm 2 grew by (after − before). Any other move is unneeded.
  const int needed = after_on_2 - before_on_2;
  const int unneeded = moved - needed;
  EXPECT_EQ(moved_back, 0);
  EXPECT_GE(1.0 - unneeded / double(kKeys - needed), 0.999);
  EXPECT_EQ(unneeded, 0);  // the interval design moves nothing else at all
  // And back again: the same sessions return.
  int returned = 0;
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = "user:session-" + std::to_string(i);
    returned +=
        ChooseArm("chat", {90, 10}, key, 0.5).index == ChooseArm("chat", {90, 10}, key, 0.1).index;
  }
  EXPECT_EQ(returned, kKeys);  // the random draw is not used for keyed requests
}

TEST(ChooseArm, NeighboursInConfigOrderTradeOnlyBetweenThemselves) {
  constexpr int kKeys = 20000;
  int third_changed = 0;
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = "k" + std::to_string(i);
    const size_t a = ChooseArm("r", {50, 30, 20}, key, 0).index;
    const size_t b = ChooseArm("r", {40, 40, 20}, key, 0).index;  // arm 1 → arm 2
    if (a != b) {
      EXPECT_EQ(a, 0u);
      EXPECT_EQ(b, 1u);
    }
    third_changed += (a == 2) != (b == 2);
  }
  EXPECT_EQ(third_changed, 0);
}

TEST(ChooseArm, WithoutAKeyTheDrawFollowsTheWeights) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  int on_2 = 0;
  for (int i = 0; i < 20000; ++i) {
    const ArmChoice c = ChooseArm("chat", {75, 25}, "", uni(rng));
    EXPECT_FALSE(c.sticky);
    on_2 += c.index == 1;
  }
  EXPECT_NEAR(on_2 / 20000.0, 0.25, 0.015);
}

http::HttpRequest WithHeader(std::string name, std::string value) {
  http::HttpRequest r;
  r.headers.emplace_back(std::move(name), std::move(value));
  return r;
}

TEST(StickyKeyOf, UserHeaderTenantAndTheFallbacks) {
  const StickyConfig user{StickyKey::kUser, ""};
  const StickyConfig header{StickyKey::kHeader, "x-session-id"};
  const StickyConfig tenant{StickyKey::kTenant, ""};
  const http::HttpRequest none;
  const http::HttpRequest with = WithHeader("x-session-id", "s-1");
  const json body = {{"user", "alice"}};
  EXPECT_EQ(StickyKeyOf(user, body, none, "acme"), "user:alice");
  EXPECT_EQ(StickyKeyOf(user, json::object(), none, "acme"), "tenant:acme");
  EXPECT_EQ(StickyKeyOf(user, json::object(), none, ""), "");
  EXPECT_EQ(StickyKeyOf(user, {{"user", 42}}, none, ""), "");  // not a string: absent
  EXPECT_EQ(StickyKeyOf(user, {{"user", ""}}, none, "t"), "tenant:t");
  EXPECT_EQ(StickyKeyOf(header, body, with, "acme"), "header:s-1");
  EXPECT_EQ(StickyKeyOf(header, body, none, "acme"), "tenant:acme");  // not the user
  EXPECT_EQ(StickyKeyOf(tenant, body, with, "acme"), "tenant:acme");
  EXPECT_EQ(StickyKeyOf(tenant, body, with, ""), "");
  // Kinds never collide: a user named like a tenant hashes differently.
  EXPECT_NE(StickyKeyOf(user, {{"user", "acme"}}, none, ""),
            StickyKeyOf(tenant, body, none, "acme"));
}

GatewayConfig Split(std::vector<ArmConfig> arms, std::string name = "chat") {
  GatewayConfig c;
  RouteConfig r;
  r.name = std::move(name);
  r.arms = std::move(arms);
  c.routes.push_back(r);
  RouteConfig plain;
  plain.name = "plain";
  plain.to = "x";
  c.routes.push_back(plain);
  return c;
}

TEST(SplitWeights, StartsFromTheConfigAndIsSetByPool) {
  SplitWeights t;
  const GatewayConfig c = Split({{"v1", 90}, {"v2", 10}});
  t.Reconfigure(c);
  EXPECT_EQ(t.Weights(c.routes[0]), (std::vector<double>{90, 10}));
  ASSERT_EQ(t.List().size(), 1u);  // the plain route is not a split
  EXPECT_FALSE(t.List()[0].overridden);
  ASSERT_TRUE(t.Set("chat", {{"v1", 80}, {"v2", 20}}).ok());
  EXPECT_EQ(t.Weights(c.routes[0]), (std::vector<double>{80, 20}));
  EXPECT_TRUE(t.List()[0].overridden);
  EXPECT_EQ(t.List()[0].config, (std::vector<double>{90, 10}));
  EXPECT_EQ(t.List()[0].pools, (std::vector<std::string>{"v1", "v2"}));
  EXPECT_EQ(t.Set("nope", {{"v1", 1}}).code(), StatusCode::kNotFound);
  EXPECT_EQ(t.Set("plain", {{"x", 1}}).code(), StatusCode::kNotFound);
  EXPECT_NE(t.Set("chat", {{"v1", 1}}).message().find("no weight for arm 'v2'"), std::string::npos);
  EXPECT_NE(t.Set("chat", {{"v1", 1}, {"v2", 1}, {"v3", 1}}).message().find("'v3' is not an arm"),
            std::string::npos);
  EXPECT_EQ(t.Set("chat", {{"v1", 0}, {"v2", 0}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Set("chat", {{"v1", -1}, {"v2", 2}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Set("chat", {{"v1", NAN}, {"v2", 2}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.SetByIndex("chat", {1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Weights(c.routes[0]), (std::vector<double>{80, 20}));  // failures changed nothing
}

TEST(SplitWeights, AReloadKeepsOverridesOnlyWhenTheArmsAreUnchanged) {
  SplitWeights t;
  const GatewayConfig c = Split({{"v1", 90}, {"v2", 10}});
  t.Reconfigure(c);
  ASSERT_TRUE(t.SetByIndex("chat", {50, 50}).ok());
  t.Reconfigure(c);  // same arms: kept
  EXPECT_EQ(t.Weights(c.routes[0]), (std::vector<double>{50, 50}));
  const GatewayConfig reweighted = Split({{"v1", 70}, {"v2", 30}});
  t.Reconfigure(reweighted);  // the config's weights changed: they apply
  EXPECT_EQ(t.Weights(reweighted.routes[0]), (std::vector<double>{70, 30}));
  EXPECT_FALSE(t.List()[0].overridden);
  ASSERT_TRUE(t.SetByIndex("chat", {1, 1}).ok());
  const GatewayConfig other = Split({{"v1", 70}, {"v3", 30}});
  t.Reconfigure(other);  // another pool: reset
  EXPECT_EQ(t.Weights(other.routes[0]), (std::vector<double>{70, 30}));
  // A request still on the older snapshot gets its own config's weights.
  EXPECT_EQ(t.Weights(reweighted.routes[0]), (std::vector<double>{70, 30}));
  EXPECT_EQ(t.Weights(c.routes[0]), (std::vector<double>{90, 10}));
  t.Reconfigure(Split({{"v1", 1}, {"v2", 1}}, "renamed"));  // gone routes are dropped
  ASSERT_EQ(t.List().size(), 1u);
  EXPECT_EQ(t.List()[0].route, "renamed");
}

}  // namespace
}  // namespace strata::gateway
