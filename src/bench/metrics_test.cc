#include "bench/metrics.h"

#include <gtest/gtest.h>

namespace strata::bench {
namespace {

// Expected values computed by hand with numpy's linear method: rank = p/100 * (n-1).
TEST(Percentile, LinearInterpolationLikeNumpy) {
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 90), 3.7);           // rank 2.7: 3 + 0.7 * 1
  EXPECT_DOUBLE_EQ(Percentile({40, 15, 50, 35, 20}, 40), 29.0);  // sorted 15 20 35 40 50, rank 1.6
  EXPECT_DOUBLE_EQ(Percentile({3, 1, 2}, 50), 2.0);
  EXPECT_DOUBLE_EQ(Percentile({1, 2}, 50), 1.5);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7.0);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0.0);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_NEAR(Percentile(hundred, 99), 99.01, 1e-9);  // rank 98.01
  EXPECT_DOUBLE_EQ(Percentile(hundred, 0), 1.0);
  EXPECT_DOUBLE_EQ(Percentile(hundred, 100), 100.0);
}

RequestRecord Ok(double ttft, double e2el, int64_t out, int64_t in = 10,
                 std::vector<double> itl = {}) {
  RequestRecord r;
  r.success = true;
  r.ttft_s = ttft;
  r.e2el_s = e2el;
  r.output_tokens = out;
  r.prompt_tokens = in;
  r.itl_s = std::move(itl);
  return r;
}

std::vector<RequestRecord> HandMade() {
  RequestRecord failed;
  failed.error = "HTTP 500: boom";
  return {
      Ok(0.10, 1.10, 11, 100, {0.1, 0.1}),  // TPOT (1.10-0.10)/10 = 100 ms
      Ok(0.30, 0.80, 6, 50),                // TPOT 100 ms, TTFT 300 ms
      Ok(0.05, 0.55, 3, 20),                // TPOT 250 ms
      Ok(0.19, 0.19, 1, 30),                // one token: TPOT undefined (counts as 0 for goodput)
      failed,
  };
}

TEST(Aggregate, SplitsFailuresBeforeAndAfterTheFirstToken) {
  RequestRecord cut;  // failed mid-stream: it had its first token
  cut.error = "reading the response body: end of stream";
  cut.ttft_s = 0.2;
  RequestRecord refused;
  refused.error = "connect: refused";
  Aggregate a = ComputeAggregate({cut, refused, refused}, 1.0, {});
  EXPECT_EQ(a.failed, 3);
  EXPECT_EQ(a.failed_before_first_token, 2);
}

TEST(Summarize, StdIsThePopulationStandardDeviationLikeNumpy) {
  Summary s = Summarize({2, 4, 4, 4, 5, 5, 7, 9});  // np.std(...) == 2.0
  EXPECT_DOUBLE_EQ(s.mean, 5.0);
  EXPECT_DOUBLE_EQ(s.std, 2.0);
  EXPECT_EQ(Summarize({3}).std, 0.0);
  EXPECT_EQ(Summarize({}).std, 0.0);
}

TEST(Aggregate, CountsThroughputAndSummaries) {
  Aggregate a = ComputeAggregate(HandMade(), 2.0, {});
  EXPECT_EQ(a.num_requests, 5);
  EXPECT_EQ(a.completed, 4);
  EXPECT_EQ(a.failed, 1);
  EXPECT_EQ(a.first_error, "HTTP 500: boom");
  EXPECT_EQ(a.failed_before_first_token, 1);  // it never got a token
  EXPECT_EQ(a.total_output_tokens, 21);
  EXPECT_EQ(a.total_input_tokens, 200);
  EXPECT_DOUBLE_EQ(a.request_throughput, 2.0);
  EXPECT_DOUBLE_EQ(a.output_throughput, 10.5);
  EXPECT_DOUBLE_EQ(a.input_throughput, 100.0);
  // TPOT over the three multi-token requests: 100, 100, 250.
  EXPECT_EQ(a.tpot_ms.count, 3);
  EXPECT_NEAR(a.tpot_ms.mean, 150.0, 1e-9);
  EXPECT_NEAR(a.tpot_ms.median, 100.0, 1e-9);
  EXPECT_NEAR(a.tpot_ms.p90, 220.0, 1e-9);  // rank 1.8: 100 + 0.8 * 150
  // TTFT 50 100 190 300 ms.
  EXPECT_NEAR(a.ttft_ms.mean, 160.0, 1e-9);
  EXPECT_NEAR(a.ttft_ms.median, 145.0, 1e-9);
  EXPECT_NEAR(a.ttft_ms.max, 300.0, 1e-9);
  EXPECT_EQ(a.itl_ms.count, 2);
  EXPECT_NEAR(a.itl_ms.mean, 100.0, 1e-9);
  EXPECT_FALSE(a.goodput.has_value());
}

TEST(Goodput, EverySloMustHold) {
  Slo slo;
  slo.ttft_ms = 200;
  slo.tpot_ms = 150;
  // Good: #1 (100/100) and #4 (190, TPOT 0). #2 fails TTFT, #3 fails TPOT, #5 failed.
  Aggregate a = ComputeAggregate(HandMade(), 2.0, slo);
  EXPECT_EQ(a.good_requests, 2);
  ASSERT_TRUE(a.goodput.has_value());
  EXPECT_DOUBLE_EQ(*a.goodput, 1.0);
}

TEST(Goodput, SingleSloAndE2el) {
  Slo ttft_only;
  ttft_only.ttft_ms = 250;  // #1, #3, #4
  EXPECT_DOUBLE_EQ(*ComputeAggregate(HandMade(), 2.0, ttft_only).goodput, 1.5);
  Slo tpot_only;
  tpot_only.tpot_ms = 100.5;  // #1, #2, #4
  EXPECT_EQ(ComputeAggregate(HandMade(), 4.0, tpot_only).good_requests, 3);
  EXPECT_DOUBLE_EQ(*ComputeAggregate(HandMade(), 4.0, tpot_only).goodput, 0.75);
  Slo e2el;
  e2el.e2el_ms = 600;  // #3 (550), #4 (190)
  EXPECT_EQ(ComputeAggregate(HandMade(), 1.0, e2el).good_requests, 2);
  Slo none_meet;
  none_meet.ttft_ms = 1;
  EXPECT_DOUBLE_EQ(*ComputeAggregate(HandMade(), 1.0, none_meet).goodput, 0.0);
}

TEST(Tpot, DefinedOnlyForMoreThanOneToken) {
  EXPECT_FALSE(TpotMs(Ok(0.1, 0.1, 1)).has_value());
  EXPECT_FALSE(TpotMs(Ok(0.1, 0.1, 0)).has_value());
  EXPECT_NEAR(*TpotMs(Ok(0.5, 1.5, 5)), 250.0, 1e-9);
}

}  // namespace
}  // namespace strata::bench
