#include "engine/sampler/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace strata::engine::sampler {
namespace {

TEST(SamplerTest, GreedyPicksArgmaxTiesToLowerId) {
  Sampler s(SamplingParams::Greedy(), 5);
  std::vector<float> l = {0.1f, 2.0f, 2.0f, -1.0f, 1.9f};
  EXPECT_EQ(s.Sample(l, {}), 1);
  std::vector<int32_t> banned = {1};
  EXPECT_EQ(s.Sample(l, {}, banned), 2);
}

TEST(SamplerTest, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 42;
  std::vector<float> l(100);
  for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(static_cast<float>(i)) * 2;
  Sampler a(p, l.size()), b(p, l.size());
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 50; ++i) {
    ta.push_back(a.Sample(l, {}));
    tb.push_back(b.Sample(l, {}));
  }
  EXPECT_EQ(ta, tb);
  p.seed = 43;
  Sampler c(p, l.size());
  std::vector<int32_t> tc;
  tc.reserve(50);
  for (int i = 0; i < 50; ++i) tc.push_back(c.Sample(l, {}));
  EXPECT_NE(ta, tc);
}

TEST(SamplerTest, DistributionMatchesSoftmaxAtTemperature) {
  SamplingParams p;
  p.temperature = 0.5f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  std::vector<float> l = {1.0f, 0.5f, 0.0f};
  Sampler s(p, 3);
  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[s.Sample(l, {})]++;
  double z = std::exp(2.0) + std::exp(1.0) + 1.0;
  EXPECT_NEAR(counts[0] / double(n), std::exp(2.0) / z, 0.02);
  EXPECT_NEAR(counts[1] / double(n), std::exp(1.0) / z, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 1.0 / z, 0.02);
}

TEST(SamplerTest, TopKTopPMinPTruncate) {
  std::vector<float> l = {3.0f, 2.9f, 0.0f, -5.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.0f;
  p.top_p = 1.0f;
  p.top_k = 2;
  Sampler k(p, 4);
  for (int i = 0; i < 500; ++i) EXPECT_LT(k.Sample(l, {}), 2);
  p.top_k = 0;
  p.top_p = 0.5f;  // token 0 alone has p ~ 0.50+, so only it survives
  Sampler tp(p, 4);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(tp.Sample(l, {}), 0);
  p.top_p = 1.0f;
  p.min_p = 0.5f;  // tokens with p >= 0.5 p_max: 0 and 1 (e^-0.1 = 0.905)
  Sampler mp(p, 4);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 500; ++i) seen[mp.Sample(l, {})]++;
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_EQ(seen.count(2) + seen.count(3), 0u);
}

TEST(SamplerTest, PenaltiesChangeTheChoice) {
  std::vector<float> l = {2.0f, 1.5f, 1.0f};
  std::vector<int32_t> hist = {0, 0, 0};
  SamplingParams p = SamplingParams::Greedy();
  p.frequency_penalty = 0.3f;  // 2.0 - 0.9 = 1.1 < 1.5
  Sampler f(p, 3);
  EXPECT_EQ(f.Sample(l, hist), 1);
  p = SamplingParams::Greedy();
  p.presence_penalty = 0.4f;  // 2.0 - 0.4 = 1.6 > 1.5: still 0
  Sampler pr(p, 3);
  EXPECT_EQ(pr.Sample(l, hist), 0);
  p.presence_penalty = 0.6f;  // 1.4 < 1.5
  Sampler pr2(p, 3);
  EXPECT_EQ(pr2.Sample(l, hist), 1);
  p = SamplingParams::Greedy();
  p.repetition_penalty = 1.5f;  // 2.0 / 1.5 = 1.33 < 1.5
  Sampler rp(p, 3);
  EXPECT_EQ(rp.Sample(l, hist), 1);
  // Outside the window the penalty does not apply.
  p.penalty_last_n = 1;
  Sampler w(p, 3);
  std::vector<int32_t> hist2 = {0, 2};
  EXPECT_EQ(w.Sample(l, hist2), 0);
}

TEST(SamplerTest, LogprobsAreLogSoftmax) {
  Sampler s(SamplingParams::Greedy(), 3);
  std::vector<float> l = {1.0f, 2.0f, 3.0f};
  s.Sample(l, {});
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(s.LastLogprob(2), 3.0 - std::log(z), 1e-5);
  EXPECT_NEAR(s.LastLogprob(0), 1.0 - std::log(z), 1e-5);
}

TEST(SamplerTest, ValidateNamesTheParameter) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_NE(p.Validate().message().find("top_p"), std::string::npos);
  p = SamplingParams();
  p.temperature = NAN;
  EXPECT_NE(p.Validate().message().find("temperature"), std::string::npos);
  p = SamplingParams();
  p.min_p = 2.0f;
  EXPECT_FALSE(p.Validate().ok());
  EXPECT_TRUE(SamplingParams().Validate().ok());
}

// Logits like a model's: a spread of a few units over a small vocabulary.
std::vector<float> SpreadLogits(size_t n) {
  std::vector<float> l(n);
  for (size_t i = 0; i < n; ++i) l[i] = std::sin(static_cast<float>(i) * 1.7f) * 3;
  return l;
}

SamplingParams Random(uint64_t seed) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

TEST(SamplerTest, LogitBiasPlus100ForcesTheToken) {
  const auto l = SpreadLogits(64);
  SamplingParams p = Random(3);
  p.logit_bias = {{.id = 17, .bias = 100.0f}};
  Sampler s(p, l.size());
  for (int i = 0; i < 500; ++i) ASSERT_EQ(s.Sample(l, {}), 17);
  EXPECT_NEAR(s.LastLogprob(17), 0.0f, 1e-4) << "logprobs reflect the biased distribution";
  p = SamplingParams::Greedy();
  p.logit_bias = {{.id = 5, .bias = 100.0f}};
  Sampler g(p, l.size());
  EXPECT_EQ(g.Sample(l, {}), 5);
}

TEST(SamplerTest, LogitBiasMinus100BansTheToken) {
  const auto l = SpreadLogits(8);
  const int32_t argmax = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  SamplingParams p = SamplingParams::Greedy();
  Sampler plain(p, l.size());
  ASSERT_EQ(plain.Sample(l, {}), argmax);
  p.logit_bias = {{.id = argmax, .bias = -100.0f}};
  Sampler g(p, l.size());
  EXPECT_NE(g.Sample(l, {}), argmax);
  p = Random(9);
  p.logit_bias = {{.id = argmax, .bias = -100.0f}};
  Sampler s(p, l.size());
  for (int i = 0; i < 2000; ++i) ASSERT_NE(s.Sample(l, {}), argmax);
  EXPECT_LT(s.LastLogprob(argmax), -90.0f);
}

// The ends of the range are exact: on a peaky model (runner-up 300 nats below the top) +100 still
// forces the token and -100 still bans it; several +100 tokens share the selection.
TEST(SamplerTest, LogitBiasEndsHoldOnAnyLogitScale) {
  std::vector<float> l = {0.0f, 400.0f, 100.0f, 0.5f};
  SamplingParams p = Random(5);
  p.logit_bias = {{.id = 0, .bias = 100.0f}};
  Sampler force(p, l.size());
  for (int i = 0; i < 200; ++i) ASSERT_EQ(force.Sample(l, {}), 0);
  EXPECT_EQ(force.LastLogprob(0), 0.0f);
  p.logit_bias = {{.id = 1, .bias = -100.0f}};
  Sampler ban(p, l.size());
  for (int i = 0; i < 200; ++i) ASSERT_EQ(ban.Sample(l, {}), 2);
  EXPECT_EQ(ban.LastLogprob(1), -std::numeric_limits<float>::infinity());
  p = Random(6);
  p.logit_bias = {{.id = 0, .bias = 100.0f}, {.id = 3, .bias = 100.0f}};
  Sampler pair(p, l.size());
  std::map<int32_t, int> seen;
  for (int i = 0; i < 2000; ++i) seen[pair.Sample(l, {})]++;
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[3], seen[0]) << "the +100 tokens keep their own logits (0.5 > 0)";
  p = SamplingParams::Greedy();
  p.logit_bias = {{.id = 2, .bias = 99.0f}};  // inside the range: added, 199 < 400
  Sampler add(p, l.size());
  EXPECT_EQ(add.Sample(l, {}), 1);
}

TEST(SamplerTest, SmallLogitBiasShiftsTheLogit) {
  std::vector<float> l = {1.0f, 2.0f, 3.0f};
  SamplingParams p = SamplingParams::Greedy();
  p.logit_bias = {{.id = 0, .bias = 2.5f}, {.id = 99, .bias = 50.0f}};  // 99: outside, skipped
  Sampler s(p, 3);
  EXPECT_EQ(s.Sample(l, {}), 0);  // 3.5 > 3
  double z = std::exp(3.5) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(s.LastLogprob(0), 3.5 - std::log(z), 1e-5);
}

TEST(SamplerTest, NoLogitBiasSamplesAsBefore) {
  const auto l = SpreadLogits(100);
  SamplingParams p = Random(42);
  SamplingParams zero = p;
  zero.logit_bias = {{.id = 3, .bias = 0.0f}};
  Sampler a(p, l.size()), b(zero, l.size());
  for (int i = 0; i < 200; ++i) ASSERT_EQ(a.Sample(l, {}), b.Sample(l, {}));
}

TEST(SamplerTest, ValidateChecksLogitBias) {
  SamplingParams p;
  p.logit_bias = {{.id = 1, .bias = 100.5f}};
  EXPECT_NE(p.Validate().message().find("logit_bias"), std::string::npos);
  p.logit_bias = {{.id = -1, .bias = 1.0f}};
  EXPECT_NE(p.Validate().message().find("logit_bias"), std::string::npos);
  p.logit_bias = {{.id = 1, .bias = NAN}};
  EXPECT_FALSE(p.Validate().ok());
  p.logit_bias = {{.id = 1, .bias = -100.0f}, {.id = 2, .bias = 100.0f}};
  EXPECT_TRUE(p.Validate().ok());
}

TEST(ChoiceSeed, ZeroIsTheSeedAndNearbySeedsShareNoStream) {
  EXPECT_EQ(ChoiceSeed(7, 0), 7u);
  EXPECT_EQ(ChoiceSeed(0xC0FFEE, 0), 0xC0FFEEu);
  std::set<uint64_t> seven, eight;
  for (int i = 0; i < 64; ++i) {
    seven.insert(ChoiceSeed(7, i));
    eight.insert(ChoiceSeed(8, i));
  }
  EXPECT_EQ(seven.size(), 64u);
  EXPECT_EQ(eight.size(), 64u);
  for (uint64_t s : seven) EXPECT_EQ(eight.count(s), 0u) << s;
  // Before: seed + i, so seed 8's choice 0 was seed 7's choice 1.
  EXPECT_NE(ChoiceSeed(7, 1), 8u);
  EXPECT_EQ(ChoiceSeed(7, 3), ChoiceSeed(7, 3));
}

}  // namespace
}  // namespace strata::engine::sampler
