// Tracing through the gateway, against in-process fake replicas and the shared test OTLP receiver:
// the replica gets a traceparent naming the gateway's upstream span; the spans reach the receiver
// with the right parents, kinds, attributes and nesting; sampling (ratio 0, an unsampled parent)
// still propagates; with tracing off the client's headers pass through unchanged; a retry is one
// upstream span per attempt; the exporter's counters are on /metrics.
#include "gateway/gateway_trace.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gateway/fake_replica_test_util.h"
#include "gateway/gateway.h"
#include "gateway/gateway_front_test_util.h"
#include "integration/http_test_client.h"
#include "testing/otlp_receiver.h"

namespace strata::gateway {
namespace {

using nlohmann::json;
using strata::testing::HttpCall;
using strata::testing::HttpReply;
using strata::testing::OtlpReceiver;
using strata::testing::ReceivedSpan;
using testing::FakeReplica;

constexpr const char* kClientTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr const char* kClientSpan = "00f067aa0ba902b7";
const std::string kClientParent = std::string("00-") + kClientTrace + "-" + kClientSpan + "-01";

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
  return s;
}

// One pool of `replicas`, one route; `tracing` is the YAML of the tracing block ("" = none).
std::string Yaml(const std::vector<const FakeReplica*>& replicas, const std::string& tracing) {
  std::string urls;
  for (const FakeReplica* r : replicas) urls += (urls.empty() ? "" : ", ") + r->url();
  std::string y = R"(
pools:
  - {name: p, replicas: [{urls}]}
routes:
  - {name: r, to: p}
health: {interval_ms: 20}
balancer: {policy: round_robin}
upstream: {retries: 1}
access_log: "off"
{tracing}
)";
  return Replace(Replace(y, "{urls}", urls), "{tracing}", tracing);
}

std::string TracingYaml(const OtlpReceiver& rx, double ratio = 1.0) {
  return "tracing: {otlp_endpoint: \"" + rx.endpoint() +
         "\", sample_ratio: " + std::to_string(ratio) + "}";
}

using Front = testing::GatewayFront;

std::map<std::string, ReceivedSpan> ByName(const std::vector<ReceivedSpan>& spans) {
  std::map<std::string, ReceivedSpan> out;
  for (const auto& s : spans) out.emplace(s.name, s);
  return out;
}

// traceparent "00-<trace>-<span>-<flags>" split into its fields.
struct Parent {
  std::string trace, span, flags;
};
Parent Split(const std::string& tp) {
  if (tp.size() != 55) return {};
  return {tp.substr(3, 32), tp.substr(36, 16), tp.substr(53, 2)};
}

const json kBody = {{"model", "m"}, {"prompt", "hello"}, {"max_tokens", 5}};

TEST(GatewayTrace, SpansReachTheCollectorAndTheReplicaGetsTheUpstreamSpan) {
  auto rx = OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  FakeReplica replica;
  ASSERT_TRUE(replica.ok());
  Front f(Yaml({&replica}, TracingYaml(**rx)));
  ASSERT_TRUE(f.WaitEligible(10, true));
  const auto before = std::chrono::system_clock::now();
  HttpReply r = f.Post(kBody, {"traceparent: " + kClientParent, "tracestate: congo=t61rcWkgMzE"});
  const auto after = std::chrono::system_clock::now();
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE((*rx)->WaitForSpans(3, std::chrono::seconds(10)));
  auto spans = ByName((*rx)->spans());
  ASSERT_EQ(spans.size(), 3u);
  ASSERT_TRUE(spans.count("text_completion m"));
  ASSERT_TRUE(spans.count("gateway.route"));
  ASSERT_TRUE(spans.count("gateway.upstream"));
  const ReceivedSpan& server = spans["text_completion m"];
  const ReceivedSpan& route = spans["gateway.route"];
  const ReceivedSpan& up = spans["gateway.upstream"];

  // One trace, the client's; the server span is the client span's child, the others its children.
  for (const auto* s : {&server, &route, &up}) {
    EXPECT_EQ(s->trace_id, kClientTrace) << s->name;
    EXPECT_EQ(s->service, "strata-gateway") << s->name;
    EXPECT_EQ(s->trace_state, "congo=t61rcWkgMzE") << s->name;
  }
  EXPECT_EQ(server.parent_span_id, kClientSpan);
  EXPECT_EQ(route.parent_span_id, server.span_id);
  EXPECT_EQ(up.parent_span_id, server.span_id);
  EXPECT_EQ(server.kind, 2);
  EXPECT_EQ(route.kind, 1);
  EXPECT_EQ(up.kind, 3);

  // The replica was told about the upstream span, sampled, with the client's tracestate.
  const Parent sent = Split(replica.last_header("traceparent"));
  EXPECT_EQ(sent.trace, kClientTrace);
  EXPECT_EQ(sent.span, up.span_id);
  EXPECT_EQ(sent.flags, "01");
  EXPECT_EQ(replica.last_header("tracestate"), "congo=t61rcWkgMzE");
  EXPECT_EQ(replica.last_header_count("traceparent"), 1);  // replaced, not added

  // Attributes.
  EXPECT_EQ(server.Str("gen_ai.operation.name"), "text_completion");
  EXPECT_EQ(server.Str("gen_ai.request.model"), "m");
  EXPECT_EQ(server.Int("gen_ai.request.max_tokens"), 5);
  EXPECT_EQ(server.Int("gen_ai.usage.input_tokens"), 1);
  EXPECT_EQ(server.Int("gen_ai.usage.output_tokens"), 1);
  EXPECT_EQ(server.StrArray("gen_ai.response.finish_reasons"), std::vector<std::string>{"stop"});
  EXPECT_EQ(server.Str("strata.route"), "r");
  EXPECT_EQ(server.Str("strata.pool"), "p");
  EXPECT_EQ(server.Str("strata.priority"), "silver");
  EXPECT_EQ(server.Int("http.response.status_code"), 200);
  EXPECT_EQ(route.Str("strata.route"), "r");
  EXPECT_EQ(route.Str("strata.pool"), "p");
  EXPECT_EQ(route.Str("strata.replica"), replica.url());
  const std::string decision = route.Str("strata.decision").value_or("");
  EXPECT_TRUE(decision == "affinity" || decision == "load" || decision == "fallback") << decision;
  EXPECT_TRUE(route.Int("strata.predicted_cached_tokens").has_value());
  EXPECT_EQ(up.Int("http.response.status_code"), 200);
  EXPECT_EQ(up.Str("server.address"), "127.0.0.1");
  EXPECT_EQ(up.Int("server.port"), replica.port());
  EXPECT_EQ(up.Str("strata.replica"), replica.url());
  EXPECT_EQ(up.status_code, 0);

  // Times: Unix nanoseconds of this request, children inside the server span, route before
  // upstream.
  const auto ns = [](std::chrono::system_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  };
  EXPECT_GE(server.start_unix_ns, ns(before) - 50'000'000);
  EXPECT_LE(server.end_unix_ns, ns(after) + 50'000'000);
  for (const auto* s : {&route, &up}) {
    EXPECT_LE(server.start_unix_ns, s->start_unix_ns) << s->name;
    EXPECT_LE(s->start_unix_ns, s->end_unix_ns) << s->name;
    EXPECT_LE(s->end_unix_ns, server.end_unix_ns) << s->name;
  }
  EXPECT_LE(route.end_unix_ns, up.start_unix_ns);
}

TEST(GatewayTrace, WithoutAClientTraceTheServerSpanIsARoot) {
  auto rx = OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  FakeReplica replica;
  Front f(Yaml({&replica}, TracingYaml(**rx)));
  ASSERT_TRUE(f.WaitEligible(10, true));
  ASSERT_EQ(f.Post(kBody).status, 200);
  ASSERT_TRUE((*rx)->WaitForSpans(3, std::chrono::seconds(10)));
  auto spans = ByName((*rx)->spans());
  const ReceivedSpan& server = spans["text_completion m"];
  EXPECT_EQ(server.parent_span_id, "");
  EXPECT_EQ(server.trace_state, "");
  const Parent sent = Split(replica.last_header("traceparent"));
  EXPECT_EQ(sent.trace, server.trace_id);
  EXPECT_EQ(sent.span, spans["gateway.upstream"].span_id);
  EXPECT_EQ(sent.flags, "01");
  EXPECT_EQ(replica.last_header_count("tracestate"), 0);
}

TEST(GatewayTrace, UnsampledRequestsArePropagatedButNotExported) {
  auto rx = OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  FakeReplica replica;
  Front f(Yaml({&replica}, TracingYaml(**rx, 0.0)));
  ASSERT_TRUE(f.WaitEligible(10, true));
  // Ratio 0, no client trace: a new trace id, flagged not sampled.
  ASSERT_EQ(f.Post(kBody).status, 200);
  Parent sent = Split(replica.last_header("traceparent"));
  EXPECT_EQ(sent.trace.size(), 32u);
  EXPECT_NE(sent.trace, std::string(32, '0'));
  EXPECT_EQ(sent.flags, "00");
  // A sampled client parent wins over the ratio (parent-based).
  ASSERT_EQ(f.Post(kBody, {"traceparent: " + kClientParent}).status, 200);
  sent = Split(replica.last_header("traceparent"));
  EXPECT_EQ(sent.trace, kClientTrace);
  EXPECT_EQ(sent.flags, "01");
  EXPECT_NE(sent.span, kClientSpan);  // the gateway's own span
  ASSERT_TRUE((*rx)->WaitForSpans(3, std::chrono::seconds(10)));
  // An unsampled client parent: propagated with its flag, nothing exported.
  const std::string unsampled = std::string("00-") + kClientTrace + "-" + kClientSpan + "-00";
  ASSERT_EQ(f.Post(kBody, {"traceparent: " + unsampled}).status, 200);
  sent = Split(replica.last_header("traceparent"));
  EXPECT_EQ(sent.trace, kClientTrace);
  EXPECT_EQ(sent.flags, "00");
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // > the flush interval
  EXPECT_EQ((*rx)->spans().size(), 3u);                          // only the sampled request's
}

TEST(GatewayTrace, TracingOffPassesTheClientHeadersThroughUnchanged) {
  FakeReplica replica;
  Front f(Yaml({&replica}, ""));
  ASSERT_TRUE(f.WaitEligible(10, true));
  EXPECT_EQ(f.gw().tracer(), nullptr);
  ASSERT_EQ(f.Post(kBody, {"traceparent: " + kClientParent, "tracestate: a=b"}).status, 200);
  EXPECT_EQ(replica.last_header("traceparent"), kClientParent);
  EXPECT_EQ(replica.last_header("tracestate"), "a=b");
  // Even one the gateway would not parse (it is not the gateway's to judge when off).
  ASSERT_EQ(f.Post(kBody, {"traceparent: garbage"}).status, 200);
  EXPECT_EQ(replica.last_header("traceparent"), "garbage");
  ASSERT_EQ(f.Post(kBody).status, 200);
  EXPECT_EQ(replica.last_header_count("traceparent"), 0);
  EXPECT_EQ(f.Get("/metrics").body.find("trace_spans"), std::string::npos);
}

TEST(GatewayTrace, AnInvalidClientTraceparentStartsANewTrace) {
  auto rx = OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  FakeReplica replica;
  Front f(Yaml({&replica}, TracingYaml(**rx)));
  ASSERT_TRUE(f.WaitEligible(10, true));
  const std::string upper =
      std::string("00-") + "4BF92F3577B34DA6A3CE929D0E0E4736" + "-" + kClientSpan + "-01";
  ASSERT_EQ(f.Post(kBody, {"traceparent: " + upper, "tracestate: a=b"}).status, 200);
  const Parent sent = Split(replica.last_header("traceparent"));
  EXPECT_NE(sent.trace, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(replica.last_header_count("tracestate"), 0);  // only with a valid traceparent
  ASSERT_TRUE((*rx)->WaitForSpans(3, std::chrono::seconds(10)));
  EXPECT_EQ(ByName((*rx)->spans())["text_completion m"].parent_span_id, "");
}

TEST(GatewayTrace, ARetryIsOneUpstreamSpanPerAttempt) {
  auto rx = OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  FakeReplica bad, good;
  bad.SetStatus(503);
  Front f(Yaml({&bad, &good}, TracingYaml(**rx)));
  ASSERT_TRUE(f.WaitEligible(10, true));
  // Round robin: one of two requests starts on the failing replica and is retried on the other.
  std::string bad_saw, good_saw;
  for (int i = 0; i < 2 && bad_saw.empty(); ++i) {
    const int64_t before = bad.count("/v1/completions");
    ASSERT_EQ(f.Post(kBody).status, 200);
    if (bad.count("/v1/completions") > before) {
      bad_saw = bad.last_header("traceparent");
      good_saw = good.last_header("traceparent");
    }
  }
  ASSERT_FALSE(bad_saw.empty());
  const std::string trace_id = Split(bad_saw).trace;
  ASSERT_EQ(Split(good_saw).trace, trace_id);  // the retry continues the same trace
  ASSERT_TRUE((*rx)->WaitForSpans(4, std::chrono::seconds(10)));
  std::vector<ReceivedSpan> spans;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::vector<ReceivedSpan> ups;
  while (ups.size() < 2 && std::chrono::steady_clock::now() < until) {
    spans = (*rx)->spans();
    ups.clear();
    for (const auto& s : spans)
      if (s.name == "gateway.upstream" && s.trace_id == trace_id) ups.push_back(s);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(ups.size(), 2u);
  const ReceivedSpan& first = ups[0].Int("strata.attempt") == 1 ? ups[0] : ups[1];
  const ReceivedSpan& second = &first == &ups[0] ? ups[1] : ups[0];
  EXPECT_EQ(first.Int("strata.attempt"), 1);
  EXPECT_EQ(second.Int("strata.attempt"), 2);
  EXPECT_EQ(first.Int("http.response.status_code"), 503);
  EXPECT_EQ(first.status_code, 2);  // error
  EXPECT_EQ(first.Str("strata.replica"), bad.url());
  EXPECT_EQ(second.Int("http.response.status_code"), 200);
  EXPECT_EQ(second.Str("strata.replica"), good.url());
  EXPECT_EQ(first.parent_span_id, second.parent_span_id);
  EXPECT_LE(first.end_unix_ns, second.start_unix_ns);
  EXPECT_EQ(Split(bad_saw).span, first.span_id);  // each attempt sends its own span
  EXPECT_EQ(Split(good_saw).span, second.span_id);
  for (const auto& s : spans) {
    if (s.trace_id == first.trace_id && s.name == "text_completion m") {
      EXPECT_EQ(s.Int("strata.attempts"), 2);
    }
  }
}

TEST(GatewayTrace, ExporterCountersAreOnMetrics) {
  auto rx = OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  FakeReplica replica;
  Front f(Yaml({&replica}, TracingYaml(**rx)));
  ASSERT_TRUE(f.WaitEligible(10, true));
  ASSERT_NE(f.gw().tracer(), nullptr);
  std::string text = f.Get("/metrics").body;
  EXPECT_NE(text.find("strata_gateway:trace_spans_exported_total 0"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(strata_gateway:trace_spans_dropped_total{reason="queue_full"} 0)"),
            std::string::npos);
  EXPECT_NE(text.find(R"(strata_gateway:trace_spans_dropped_total{reason="export_failed"} 0)"),
            std::string::npos);
  ASSERT_EQ(f.Post(kBody).status, 200);
  ASSERT_TRUE((*rx)->WaitForSpans(3, std::chrono::seconds(10)));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (f.gw().tracer()->stats().spans_exported < 3 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  text = f.Get("/metrics").body;
  EXPECT_NE(text.find("strata_gateway:trace_spans_exported_total 3"), std::string::npos) << text;
}

TEST(GatewayTrace, CollectorDownCountsDropsAndRequestsStillSucceed) {
  std::string dead;
  {
    auto rx = OtlpReceiver::Start();
    ASSERT_TRUE(rx.ok());
    dead = (*rx)->endpoint();
  }
  FakeReplica replica;
  Front f(Yaml({&replica}, "tracing: {otlp_endpoint: \"" + dead + "\"}"));
  ASSERT_TRUE(f.WaitEligible(10, true));
  for (int i = 0; i < 5; ++i) ASSERT_EQ(f.Post(kBody).status, 200);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (f.gw().tracer()->stats().dropped_export_failed < 15 &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(f.gw().tracer()->stats().dropped_export_failed, 15u);
  EXPECT_NE(
      f.Get("/metrics")
          .body.find(R"(strata_gateway:trace_spans_dropped_total{reason="export_failed"} 15)"),
      std::string::npos);
}

TEST(GatewayTraceConfig, TheTracingBlockParsesAndIsChecked) {
  const std::string base =
      "pools:\n  - {name: p, replicas: [http://127.0.0.1:1]}\n"
      "routes:\n  - {name: r, to: p}\n";
  auto c = ParseGatewayConfig(base +
                              "tracing: {otlp_endpoint: http://127.0.0.1:4318, "
                              "sample_ratio: 0.25, service_name: gw-eu, "
                              "queue_capacity: 16}\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ((*c)->tracing.otlp_endpoint, "http://127.0.0.1:4318");
  EXPECT_DOUBLE_EQ((*c)->tracing.sample_ratio, 0.25);
  EXPECT_EQ((*c)->tracing.service_name, "gw-eu");
  EXPECT_EQ((*c)->tracing.queue_capacity, 16);
  auto d = ParseGatewayConfig(base);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->tracing.otlp_endpoint, "");
  EXPECT_DOUBLE_EQ((*d)->tracing.sample_ratio, 1.0);
  EXPECT_EQ((*d)->tracing.service_name, "strata-gateway");
  for (const auto& [yaml, want] : std::vector<std::pair<std::string, std::string>>{
           {"tracing: {otlp_endpoint: https://x:4318}", "tracing.otlp_endpoint"},
           {"tracing: {sample_ratio: 1.5}", "tracing.sample_ratio"},
           {"tracing: {sample_ratio: -0.1}", "tracing.sample_ratio"},
           {"tracing: {service_name: \"\"}", "tracing.service_name"},
           {"tracing: {queue_capacity: 0}", "tracing.queue_capacity"},
           {"tracing: {endpoint: http://x}", "tracing.endpoint"}}) {
    auto bad = ParseGatewayConfig(base + yaml + "\n");
    ASSERT_FALSE(bad.ok()) << yaml;
    EXPECT_NE(bad.status().message().find(want), std::string::npos) << bad.status().message();
  }
}

}  // namespace
}  // namespace strata::gateway
