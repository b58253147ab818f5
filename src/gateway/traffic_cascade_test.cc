// Tests of the gateway's shadow and cascade routes end to end: a real Gateway behind a front
// HttpServer, in front of fake replicas (tests/gateway/fake_replica_test_util.h) whose latency,
// errors and logprobs each test controls.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gateway/config.h"
#include "gateway/fake_replica_test_util.h"
#include "gateway/gateway.h"
#include "gateway/gateway_front_test_util.h"
#include "http/server.h"
#include "integration/http_test_client.h"

namespace strata::gateway {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::FakeReplica;

// A gateway on 127.0.0.1:0 over `yaml`, started, with every pool's replicas eligible.
class Harness : public testing::GatewayFront {
 public:
  explicit Harness(const std::string& yaml) : GatewayFront(yaml) {
    if (ok()) Eligible();
  }

  void Reload(const std::string& yaml) {
    auto cfg = ParseGatewayConfig(yaml);
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    ASSERT_TRUE(gw().Reload(*cfg).ok());
    Eligible();
  }
  strata::testing::HttpReply Post(const std::string& path, const json& body) {
    return strata::testing::HttpCall(port(), "POST", path, body.dump(),
                                     {"Content-Type: application/json"});
  }
  // The sum of the samples of `name` whose labels contain every one of `labels`.
  double Metric(std::string_view name, const std::vector<std::string>& labels) {
    const std::string text = gw().metrics().Render();
    double total = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string_view line(text.data() + pos, end - pos);
      pos = end + 1;
      if (line.substr(0, name.size()) != name || line.size() <= name.size() ||
          (line[name.size()] != '{' && line[name.size()] != ' '))
        continue;
      bool all = true;
      for (const std::string& l : labels) all = all && line.find(l) != std::string_view::npos;
      if (all) total += std::stod(std::string(line.substr(line.rfind(' ') + 1)));
    }
    return total;
  }
  // Waits until Metric(name, labels) reaches `want` (shadow calls end after their primary).
  bool WaitMetric(std::string_view name, const std::vector<std::string>& labels, double want,
                  std::chrono::milliseconds timeout = 10s) {
    const auto until = Clock::now() + timeout;
    while (Clock::now() < until) {
      if (Metric(name, labels) >= want) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

 private:
  void Eligible() {
    if (!WaitEligible(10, true)) ADD_FAILURE() << "replicas never became eligible";
  }
};

constexpr const char* kTail = R"(
health: {interval_ms: 50, timeout_ms: 500}
upstream: {retries: 1}
access_log: off
)";

std::string CascadeYaml(const FakeReplica& small, const FakeReplica& large, std::string_view signal,
                        double threshold) {
  return fmt::format(R"(pools:
  - name: small
    replicas: [{}]
  - name: large
    replicas: [{}]
routes:
  - name: ask
    to:
      cascade: {{first: small, then: large, signal: {}, threshold: {}}}
)",
                     small.url(), large.url(), signal, threshold) +
         kTail;
}

// The first stage's answers: request i has token logprobs spread around v_i (their mean is v_i,
// their min v_i − 0.1) and a top-1 − top-2 margin of 2 + v_i; v_i runs over a shuffled grid of
// the uniform distribution on [-2, 0], so exactly the share (t + 2) / 2 of any 200 consecutive
// requests has a mean below t.
class LogprobDraws {
 public:
  explicit LogprobDraws(int n) : values_(static_cast<size_t>(n)) {
    for (int i = 0; i < n; ++i) values_[static_cast<size_t>(i)] = -2.0 + 2.0 * (i + 0.5) / n;
    std::mt19937 rng(17);
    std::shuffle(values_.begin(), values_.end(), rng);
  }
  // The answer of the next request (called by the fake under its lock, one at a time).
  std::string Next(bool chat) {
    std::lock_guard lk(mu_);
    const double v = values_[next_++ % values_.size()];
    return FakeReplica::LogprobAnswer(chat, {v - 0.1, v + 0.1, v - 0.05, v + 0.05}, 2.0 + v,
                                      "small");
  }
  double value(size_t i) const { return values_[i % values_.size()]; }
  void Reset() {
    std::lock_guard lk(mu_);
    next_ = 0;
  }

 private:
  std::vector<double> values_;
  std::mutex mu_;
  size_t next_ = 0;
};

json CompletionRequest() {
  return {{"model", "ask"}, {"prompt", "hello"}, {"max_tokens", 4}, {"temperature", 0}};
}

TEST(CascadeGateway, EscalationRateFollowsTheThreshold) {
  FakeReplica small, large;
  ASSERT_TRUE(small.ok() && large.ok());
  constexpr int kN = 200;
  LogprobDraws draws(kN);
  small.SetAnswer([&draws](const std::string&) { return draws.Next(false); });
  large.SetCompletion(
      200,
      R"({"choices":[{"index":0,"text":"large","finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}})",
      0ms);
  Harness h(CascadeYaml(small, large, "mean_logprob", -3));
  ASSERT_TRUE(h.ok());
  struct Case {
    const char* signal;
    double threshold;
  };
  // mean_logprob = v; min_logprob = v − 0.1; margin = 2 + v (all uniform over a known range).
  const Case cases[] = {{"mean_logprob", -3},   {"mean_logprob", -1.5}, {"mean_logprob", -1.0},
                        {"mean_logprob", -0.5}, {"mean_logprob", 0.5},  {"min_logprob", -1.1},
                        {"margin", 1.5}};
  for (const Case& c : cases) {
    h.Reload(CascadeYaml(small, large, c.signal, c.threshold));
    draws.Reset();
    const int64_t large_before = large.count("/v1/completions");
    int escalated = 0, expected = 0;
    for (int i = 0; i < kN; ++i) {
      const double v = draws.value(static_cast<size_t>(i));
      const double signal = std::string_view(c.signal) == "mean_logprob"  ? v
                            : std::string_view(c.signal) == "min_logprob" ? v - 0.1
                                                                          : 2.0 + v;
      const bool escalate = signal < c.threshold - 1e-9;
      expected += escalate ? 1 : 0;
      auto reply = h.Post("/v1/completions", CompletionRequest());
      ASSERT_EQ(reply.status, 200) << reply.body;
      const std::string stage = reply.headers["x-strata-cascade"];
      ASSERT_EQ(stage, escalate ? "escalated" : "first")
          << c.signal << " " << c.threshold << " v=" << v;
      EXPECT_EQ(reply.headers["x-strata-pool"], escalate ? "large" : "small");
      escalated += stage == "escalated" ? 1 : 0;
    }
    const double rate = static_cast<double>(escalated) / kN;
    const double want = static_cast<double>(expected) / kN;
    EXPECT_DOUBLE_EQ(rate, want) << c.signal << " " << c.threshold;
    if (std::string_view(c.signal) == "mean_logprob") {  // the uniform CDF at the threshold
      EXPECT_NEAR(rate, std::clamp((c.threshold + 2) / 2, 0.0, 1.0), 0.5 / kN + 1e-9);
    }
    EXPECT_EQ(large.count("/v1/completions") - large_before, escalated);
  }
  EXPECT_EQ(small.count("/v1/completions"), kN * static_cast<int64_t>(std::size(cases)));
  const double accepted = h.Metric(kCascadeRequestsTotal, {"route=\"ask\"", "result=\"accepted\""});
  const double escalated =
      h.Metric(kCascadeRequestsTotal, {"route=\"ask\"", "result=\"escalated\""});
  EXPECT_EQ(accepted + escalated, kN * static_cast<double>(std::size(cases)));
  EXPECT_EQ(escalated, static_cast<double>(large.count("/v1/completions")));
  // Tokens per stage: every first stage served 4 completion tokens; each escalation 1.
  EXPECT_EQ(
      h.Metric(kCascadeTokensTotal, {"stage=\"first\"", "pool=\"small\"", "kind=\"completion\""}),
      4.0 * kN * static_cast<double>(std::size(cases)));
  EXPECT_EQ(
      h.Metric(kCascadeTokensTotal, {"stage=\"then\"", "pool=\"large\"", "kind=\"completion\""}),
      escalated);
  EXPECT_EQ(h.Metric(std::string(kCascadeStageSeconds) + "_count", {"stage=\"first\""}),
            kN * static_cast<double>(std::size(cases)));
}

TEST(CascadeGateway, FirstStageIsAskedForLogprobsAndTheClientGetsWhatItAsked) {
  FakeReplica small, large;
  small.SetAnswer([](const std::string&) {
    return FakeReplica::LogprobAnswer(false, {-0.1, -0.2}, 1.0, "small");
  });
  Harness h(CascadeYaml(small, large, "mean_logprob", -1.0));
  ASSERT_TRUE(h.ok());
  json req = CompletionRequest();
  req["stream_options"] = {{"include_usage", true}};
  auto plain = h.Post("/v1/completions", req);
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(plain.headers["x-strata-cascade"], "first");
  EXPECT_EQ(plain.headers["x-strata-route"], "ask");
  EXPECT_EQ(plain.headers["x-strata-replica"], small.url());
  EXPECT_EQ(plain.headers["content-type"], "application/json");
  json sent = json::parse(small.last_body());
  EXPECT_EQ(sent["logprobs"], 2);
  EXPECT_FALSE(sent.contains("stream"));
  EXPECT_FALSE(sent.contains("stream_options"));
  EXPECT_EQ(sent["prompt"], "hello");
  json body = json::parse(plain.body);
  EXPECT_EQ(body["choices"][0]["text"], "t0 t1 ");
  EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());  // the client did not ask
  EXPECT_EQ(body["usage"]["completion_tokens"], 2);
  // Asked for one alternative: it gets one.
  req["logprobs"] = 1;
  auto one = h.Post("/v1/completions", req);
  ASSERT_EQ(one.status, 200);
  json lp = json::parse(one.body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["top_logprobs"].size(), 2u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 1u);
  EXPECT_TRUE(lp["top_logprobs"][0].contains("t0 "));
  EXPECT_EQ(large.count("/v1/completions"), 0);
}

TEST(CascadeGateway, StreamingClientGetsAValidStreamBothWays) {
  FakeReplica small, large;
  std::atomic<bool> confident{true};
  small.SetAnswer([&confident](const std::string&) {
    const double v = confident.load() ? -0.1 : -3.0;
    return FakeReplica::LogprobAnswer(true, {v, v}, 1.0, "small");
  });
  large.SetCompletion(
      200,
      R"({"id":"l","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"big"}}]})",
      0ms);
  large.SetStream(3);
  Harness h(CascadeYaml(small, large, "mean_logprob", -1.0));
  ASSERT_TRUE(h.ok());
  json req = {{"model", "ask"},
              {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
              {"stream", true},
              {"stream_options", {{"include_usage", true}}}};
  for (bool first : {true, false}) {
    confident.store(first);
    auto reply = h.Post("/v1/chat/completions", req);
    ASSERT_TRUE(reply.ok);
    ASSERT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(reply.headers["content-type"], "text/event-stream");
    EXPECT_EQ(reply.headers["x-strata-cascade"], first ? "first" : "escalated");
    EXPECT_EQ(reply.headers["x-strata-pool"], first ? "small" : "large");
    auto events = strata::testing::SseData(reply.body);
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::string text;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      json e = json::parse(events[i], nullptr, false);
      ASSERT_FALSE(e.is_discarded()) << events[i];
      EXPECT_EQ(e["object"], "chat.completion.chunk");
      for (const json& c : e["choices"])
        if (c.contains("delta") && c["delta"].contains("content"))
          text += c["delta"]["content"].get<std::string>();
      if (first && e.contains("usage")) {
        EXPECT_EQ(e["usage"]["completion_tokens"], 2);
      }
    }
    EXPECT_EQ(text, first ? "t0 t1 " : "bigbigbig");
    if (!first) {  // the escalated request is the client's own: streaming
      json sent = json::parse(large.last_body());
      EXPECT_EQ(sent["stream"], true);
      EXPECT_FALSE(sent.contains("logprobs"));
    }
  }
  json sent = json::parse(small.last_body());
  EXPECT_EQ(sent["logprobs"], true);
  EXPECT_EQ(sent["top_logprobs"], 2);
  EXPECT_FALSE(sent.contains("stream"));
}

TEST(CascadeGateway, FirstStageFailureEscalates) {
  FakeReplica small, large;
  small.SetStatus(500);
  Harness h(CascadeYaml(small, large, "mean_logprob", -1.0));
  ASSERT_TRUE(h.ok());
  auto reply = h.Post("/v1/completions", CompletionRequest());
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.headers["x-strata-cascade"], "escalated");
  EXPECT_EQ(small.count("/v1/completions"), 1);  // no other replica to retry on
  EXPECT_EQ(large.count("/v1/completions"), 1);
  EXPECT_EQ(h.Metric(kCascadeRequestsTotal, {"result=\"first_error\""}), 1);
  // An answer without logprobs cannot be judged: escalated.
  small.SetStatus(200);
  small.SetAnswer([](const std::string&) {
    return std::string(R"({"choices":[{"index":0,"text":"x","logprobs":null}]})");
  });
  auto no_lp = h.Post("/v1/completions", CompletionRequest());
  ASSERT_EQ(no_lp.status, 200);
  EXPECT_EQ(no_lp.headers["x-strata-cascade"], "escalated");
  EXPECT_EQ(h.Metric(kCascadeRequestsTotal, {"result=\"escalated\""}), 1);
  // Echo (its signal would include the prompt) and a wrongly typed field.
  json echo = CompletionRequest();
  echo["echo"] = true;
  auto skipped = h.Post("/v1/completions", echo);
  ASSERT_EQ(skipped.status, 200);
  EXPECT_EQ(skipped.headers["x-strata-cascade"], "skipped");
  EXPECT_EQ(skipped.headers["x-strata-pool"], "large");
  json bad = CompletionRequest();
  bad["logprobs"] = "two";
  EXPECT_EQ(h.Post("/v1/completions", bad).status, 400);
}

// ------------------------------------------------------------------------------------------------
// Shadow

std::string ShadowYaml(const FakeReplica& main, const FakeReplica& shadow, double fraction) {
  return fmt::format(R"(pools:
  - name: main
    replicas: [{}]
  - name: mirror
    replicas: [{}]
routes:
  - name: plain
    match: {{model: plain}}
    to: main
  - name: chat
    to: main
    shadow: {{pool: mirror, fraction: {}}}
)",
                     main.url(), shadow.url(), fraction) +
         kTail;
}

// The median of `n` sequential requests' latencies (ms) for `model`, and every status seen.
double MedianMs(Harness& h, const std::string& model, int n, std::vector<int>* statuses) {
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    auto r = h.Post("/v1/completions", {{"model", model}, {"prompt", "x"}, {"temperature", 0}});
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    statuses->push_back(r.status);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

TEST(ShadowGateway, SlowOrFailingShadowNeverChangesThePrimary) {
  FakeReplica main, shadow;
  main.SetLatency(20ms);
  Harness h(ShadowYaml(main, shadow, 1.0));
  ASSERT_TRUE(h.ok());
  std::vector<int> statuses;
  const double base = MedianMs(h, "plain", 15, &statuses);  // the same pool, no shadow
  shadow.SetLatency(400ms);                                 // slow
  const double slow = MedianMs(h, "chat", 15, &statuses);
  // Each shadow starts after its primary ended: let the last ones arrive before the switch.
  EXPECT_TRUE(h.WaitMetric(kShadowRequestsTotal, {"pool=\"mirror\"", "result=\"match\""}, 15));
  shadow.SetLatency(0ms);
  shadow.SetStatus(500);  // failing
  const double failing = MedianMs(h, "chat", 15, &statuses);
  for (int s : statuses) EXPECT_EQ(s, 200);
  EXPECT_LT(slow, base + 10) << "base " << base << " ms";
  EXPECT_LT(failing, base + 10) << "base " << base << " ms";
  EXPECT_TRUE(h.WaitMetric(kShadowRequestsTotal, {"pool=\"mirror\"", "result=\"error\""}, 15));
  EXPECT_EQ(h.Metric(kShadowRequestsTotal, {"route=\"plain\""}), 0);
  EXPECT_TRUE(h.WaitMetric(std::string(kShadowSeconds) + "_count", {"pool=\"mirror\""}, 18));
  // The primary's pool saw each request once; the mirror at most once per shadowed one (a
  // failing shadow is never retried; after eject_after_failures (3) 5xx its replica is ejected
  // and the rest count as errors without a call).
  EXPECT_EQ(main.count("/v1/completions"), 45);
  EXPECT_GE(shadow.count("/v1/completions"), 15 + 3);
  EXPECT_LE(shadow.count("/v1/completions"), 30);
}

TEST(ShadowGateway, OverTheBoundShadowsAreDroppedAndCounted) {
  FakeReplica main, shadow;
  shadow.SetLatency(4000ms);  // longer than sending every request takes
  Harness h(ShadowYaml(main, shadow, 1.0));
  ASSERT_TRUE(h.ok());
  const int n = kMaxShadowInFlight + 16;
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(h.Post("/v1/completions", {{"model", "chat"}, {"prompt", "x"}}).status, 200);
  // The shadow of a request starts after its response went out: the last may still be starting.
  EXPECT_TRUE(h.WaitMetric(kShadowRequestsTotal, {"result=\"dropped\""}, 16, 2s));
  EXPECT_EQ(h.Metric(kShadowRequestsTotal, {"result=\"dropped\""}), 16);
  EXPECT_TRUE(h.WaitMetric(kShadowRequestsTotal, {"result=\"uncompared\""}, kMaxShadowInFlight));
}

TEST(ShadowGateway, GreedyAnswersAreCompared) {
  FakeReplica main, shadow;
  const std::string a = R"({"choices":[{"index":0,"text":"same","finish_reason":"stop"}]})";
  const std::string b = R"({"choices":[{"index":0,"text":"other","finish_reason":"stop"}]})";
  main.SetCompletion(200, a, 0ms);
  shadow.SetCompletion(200, a, 0ms);
  Harness h(ShadowYaml(main, shadow, 1.0));
  ASSERT_TRUE(h.ok());
  json greedy = {{"model", "chat"}, {"prompt", "x"}, {"temperature", 0}, {"stream", true}};
  json sampled = {{"model", "chat"}, {"prompt", "x"}, {"temperature", 0.7}};
  greedy["stream"] = false;
  ASSERT_EQ(h.Post("/v1/completions", greedy).status, 200);
  ASSERT_TRUE(h.WaitMetric(kShadowRequestsTotal, {"result=\"match\""}, 1));
  json sent = json::parse(shadow.last_body());
  EXPECT_EQ(sent["temperature"], 0);
  shadow.SetCompletion(200, b, 0ms);
  ASSERT_EQ(h.Post("/v1/completions", greedy).status, 200);
  ASSERT_TRUE(h.WaitMetric(kShadowRequestsTotal, {"result=\"mismatch\""}, 1));
  ASSERT_EQ(h.Post("/v1/completions", sampled).status, 200);  // not greedy: not compared
  ASSERT_TRUE(h.WaitMetric(kShadowRequestsTotal, {"result=\"uncompared\""}, 1));
  sent = json::parse(shadow.last_body());
  EXPECT_EQ(sent["temperature"], 0);
  // A streamed greedy primary is reassembled from its chunks: "same" twice.
  main.SetStream(2);
  shadow.SetCompletion(200, R"({"choices":[{"index":0,"text":"samesame"}]})", 0ms);
  greedy["stream"] = true;
  auto streamed = h.Post("/v1/completions", greedy);
  ASSERT_EQ(streamed.status, 200);
  EXPECT_EQ(strata::testing::SseData(streamed.body).size(), 3u);
  ASSERT_TRUE(h.WaitMetric(kShadowRequestsTotal, {"result=\"match\""}, 2));
  sent = json::parse(shadow.last_body());
  EXPECT_FALSE(sent.contains("stream"));
  EXPECT_EQ(h.Metric(kShadowRequestsTotal, {"result=\"error\""}), 0);
}

}  // namespace
}  // namespace strata::gateway
