// Tracing end to end with the real binaries: `strata gateway` in front of a `strata serve` replica
// (the bundled tiny model) on 127.0.0.1, spans exported to the shared test OTLP receiver
// (tests/testing/otlp_receiver.h) running in this process.
//   - Collector down (connection refused) or stalled (never answers): every request still
//     succeeds, the gateway's drop counter on /metrics rises, and the exporter's queue never holds
//     more than tracing.queue_capacity spans.
//   - A working collector: the gateway's spans arrive with the client's trace id, and the replica
//     is handed a traceparent naming the gateway's upstream span.
//   - The whole trace (the issue's proof): client -> gateway -> replica, both exporting to one
//     receiver: one trace id; gateway SERVER -> gateway.route / gateway.upstream; the replica's
//     SERVER span a child of gateway.upstream; the replica's phases children of its SERVER span;
//     gen_ai.* attributes on both SERVER spans; every span inside its parent; the replica's
//     sequential phases add up to its SERVER span within 5 %, and the gateway's SERVER span is the
//     client-measured latency within 5 %.
// Latency under a bad collector is measured by the benchmark (docs/benchmarks.md, "Tracing"),
// not asserted here.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "integration/http_test_client.h"
#include "integration/serve_process.h"
#include "testing/otlp_receiver.h"

namespace strata::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kClientTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr const char* kClientSpan = "00f067aa0ba902b7";

// The value of one series of a Prometheus text ("name{labels} value"), or -1 when absent.
double Series(const std::string& text, const std::string& series) {
  const size_t p = text.find("\n" + series + " ");
  if (p == std::string::npos) return -1;
  return std::stod(text.substr(p + series.size() + 2));
}

class TraceE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata-trace-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    gateway_.reset();
    replica_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void StartReplica(std::vector<std::string> extra = {}) {
    std::vector<std::string> base = {STRATA_BIN,  "serve",   "--port",
                                     "0",         "--model", STRATA_DEFAULT_MODEL,
                                     "--threads", "1",       "--kv-cache-memory",
                                     "32MiB"};
    replica_ = std::make_unique<ServeProcess>(base, std::move(extra));
    ASSERT_GT(replica_->port(), 0) << replica_->startup_output();
  }
  // The gateway in front of the replica with `tracing` (a YAML block) and extra flags.
  void StartGateway(const std::string& tracing, std::vector<std::string> flags = {}) {
    const std::string path = (dir_ / "gateway.yaml").string();
    std::ofstream(path) << "pools:\n  - name: general\n    replicas: [http://127.0.0.1:"
                        << replica_->port()
                        << "]\nroutes:\n  - name: default\n    to: general\n"
                           "health: {interval_ms: 100}\naccess_log: \"off\"\n"
                        << tracing;
    std::vector<std::string> base = {STRATA_BIN, "gateway", "--config", path, "--port", "0"};
    gateway_ = std::make_unique<ServeProcess>(base, std::move(flags), "strata gateway: ready");
    ASSERT_GT(gateway_->port(), 0) << gateway_->startup_output();
    for (int i = 0; i < 400; ++i) {
      if (HttpCall(gateway_->port(), "GET", "/ready").status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    FAIL() << "gateway never became ready";
  }
  HttpReply Complete(const std::vector<std::string>& headers = {}) {
    const json body = {{"model", "strata-tiny"},
                       {"prompt", "Hello there"},
                       {"max_tokens", 4},
                       {"temperature", 0},
                       {"ignore_eos", true}};
    return HttpCall(gateway_->port(), "POST", "/v1/completions", body.dump(), headers);
  }
  std::string Metrics() { return HttpCall(gateway_->port(), "GET", "/metrics").body; }
  // Polls the gateway's /metrics until `series` reaches `at_least`; its last value.
  double WaitSeries(const std::string& series, double at_least, int timeout_s = 30) {
    double v = -1;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < until) {
      v = Series(Metrics(), series);
      if (v >= at_least) return v;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return v;
  }

  fs::path dir_;
  std::unique_ptr<ServeProcess> replica_, gateway_;
};

constexpr const char* kExported = "strata_gateway:trace_spans_exported_total";
constexpr const char* kFailed =
    R"(strata_gateway:trace_spans_dropped_total{reason="export_failed"})";
constexpr const char* kQueueFull =
    R"(strata_gateway:trace_spans_dropped_total{reason="queue_full"})";
constexpr const char* kQueued = "strata_gateway:trace_spans_queued";

TEST_F(TraceE2e, CollectorRefusingConnectionsDropsAndCountsRequestsSucceed) {
  std::string dead;
  {
    auto rx = OtlpReceiver::Start();
    ASSERT_TRUE(rx.ok());
    dead = (*rx)->endpoint();
  }  // stopped: its port refuses connections
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  ASSERT_NO_FATAL_FAILURE(StartGateway("", {"--otlp-endpoint", dead}));
  constexpr int kRequests = 10;
  for (int i = 0; i < kRequests; ++i) {
    HttpReply r = Complete();
    ASSERT_EQ(r.status, 200) << r.body;
  }
  // Three spans per request (server, route, upstream), all dropped after the retries.
  EXPECT_EQ(WaitSeries(kFailed, 3 * kRequests), 3 * kRequests);
  const std::string m = Metrics();
  EXPECT_EQ(Series(m, kExported), 0);
  EXPECT_EQ(Series(m, kQueued), 0);
}

TEST_F(TraceE2e, StalledCollectorKeepsTheQueueBoundedAndRequestsSucceed) {
  auto rx = OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  (*rx)->Stall(true);  // accepts the POST, never answers
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  constexpr int kCapacity = 8;
  ASSERT_NO_FATAL_FAILURE(StartGateway("tracing: {otlp_endpoint: \"" + (*rx)->endpoint() +
                                       "\", queue_capacity: " + std::to_string(kCapacity) + "}\n"));
  constexpr int kRequests = 30;
  double max_queued = 0;
  for (int i = 0; i < kRequests; ++i) {
    HttpReply r = Complete();
    ASSERT_EQ(r.status, 200) << r.body;
    max_queued = std::max(max_queued, Series(Metrics(), kQueued));
  }
  EXPECT_LE(max_queued, kCapacity);
  EXPECT_GT(WaitSeries(kQueueFull, 1), 0);  // 90 spans into 8 places while a POST hangs
  EXPECT_TRUE((*rx)->WaitForRequests(1, std::chrono::seconds(10)));  // the exporter did try
  const std::string m = Metrics();
  EXPECT_EQ(Series(m, kExported), 0);
  EXPECT_LE(Series(m, kQueued), kCapacity);
  (*rx)->Stall(false);
}

TEST_F(TraceE2e, GatewaySpansArriveAndTheReplicaIsHandedTheUpstreamSpan) {
  auto rx = OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  ASSERT_NO_FATAL_FAILURE(
      StartGateway("", {"--otlp-endpoint", (*rx)->endpoint(), "--otlp-service-name", "gw-test"}));
  const std::string parent = std::string("00-") + kClientTrace + "-" + kClientSpan + "-01";
  HttpReply r = Complete({"traceparent: " + parent});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE((*rx)->WaitForSpans(3, std::chrono::seconds(20)));
  std::map<std::string, ReceivedSpan> gw;
  for (const auto& s : (*rx)->spans())
    if (s.service == "gw-test") gw.emplace(s.name, s);
  ASSERT_TRUE(gw.count("text_completion strata-tiny")) << (*rx)->spans().size();
  const ReceivedSpan& server = gw["text_completion strata-tiny"];
  EXPECT_EQ(server.trace_id, kClientTrace);
  EXPECT_EQ(server.parent_span_id, kClientSpan);
  EXPECT_EQ(gw["gateway.route"].parent_span_id, server.span_id);
  EXPECT_EQ(gw["gateway.upstream"].parent_span_id, server.span_id);
  EXPECT_EQ(server.Int("gen_ai.usage.output_tokens"), 4);
  EXPECT_TRUE(server.Int("gen_ai.usage.input_tokens").value_or(0) > 0);
  EXPECT_EQ(server.StrArray("gen_ai.response.finish_reasons"), std::vector<std::string>{"length"});
  EXPECT_EQ(WaitSeries(kExported, 3), 3);

  // A stream: usage from its usage chunk, the finish reason from its last choice event.
  const json stream = {{"model", "strata-tiny"},
                       {"prompt", "Hello there"},
                       {"max_tokens", 4},
                       {"temperature", 0},
                       {"ignore_eos", true},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}}};
  const std::string parent2 = "00-5bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  HttpReply sr = HttpCall(gateway_->port(), "POST", "/v1/completions", stream.dump(),
                          {"traceparent: " + parent2});
  ASSERT_EQ(sr.status, 200) << sr.body;
  ASSERT_TRUE((*rx)->WaitForSpans(6, std::chrono::seconds(20)));
  const ReceivedSpan* streamed = nullptr;
  const auto spans = (*rx)->spans();
  for (const auto& s : spans)
    if (s.trace_id == "5bf92f3577b34da6a3ce929d0e0e4736" && s.kind == 2) streamed = &s;
  ASSERT_NE(streamed, nullptr);
  EXPECT_EQ(streamed->Int("gen_ai.usage.output_tokens"), 4);
  EXPECT_EQ(streamed->StrArray("gen_ai.response.finish_reasons"),
            std::vector<std::string>{"length"});
}

// Spans of another process's clock: its steady->Unix offset is taken separately, so a child can
// appear that far outside its parent.
constexpr int64_t kCrossProcessSlackNs = 2'000'000;

void ExpectInside(const ReceivedSpan& child, const ReceivedSpan& parent, int64_t slack_ns = 0) {
  EXPECT_GE(child.start_unix_ns + slack_ns, parent.start_unix_ns)
      << child.name << " in " << parent.name;
  EXPECT_LE(child.end_unix_ns, parent.end_unix_ns + slack_ns)
      << child.name << " in " << parent.name;
  EXPECT_LE(child.start_unix_ns, child.end_unix_ns) << child.name;
}

void ExpectGenAi(const ReceivedSpan& s, int64_t max_tokens) {
  EXPECT_EQ(s.Str("gen_ai.operation.name"), "text_completion") << s.service;
  EXPECT_EQ(s.Str("gen_ai.request.model"), "strata-tiny") << s.service;
  EXPECT_EQ(s.Int("gen_ai.request.max_tokens"), max_tokens) << s.service;
  EXPECT_GT(s.Int("gen_ai.usage.input_tokens").value_or(0), 0) << s.service;
  EXPECT_EQ(s.Int("gen_ai.usage.output_tokens"), max_tokens) << s.service;
  EXPECT_EQ(s.StrArray("gen_ai.response.finish_reasons"), std::vector<std::string>{"length"})
      << s.service;
}

TEST_F(TraceE2e, OneTraceFromTheClientThroughTheGatewayToTheReplicaAddsUp) {
  auto rx = OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  ASSERT_NO_FATAL_FAILURE(StartReplica({"--otlp-endpoint", (*rx)->endpoint()}));
  ASSERT_NO_FATAL_FAILURE(StartGateway("", {"--otlp-endpoint", (*rx)->endpoint()}));
  // Long enough (ignore_eos, 1,500 tokens of the tiny model's 2,048) that the client's own fixed
  // costs (connect, send, read) are far below 5 %.
  constexpr int64_t kMaxTokens = 1500;
  const json body = {{"model", "strata-tiny"},
                     {"prompt", "Once upon a time"},
                     {"max_tokens", kMaxTokens},
                     {"temperature", 0},
                     {"ignore_eos", true}};
  HttpCall(gateway_->port(), "POST", "/v1/completions", body.dump());  // warm-up (own trace)
  ASSERT_TRUE((*rx)->WaitForSpans(3, std::chrono::seconds(20)));
  const std::string parent = std::string("00-") + kClientTrace + "-" + kClientSpan + "-01";
  const auto t0 = std::chrono::steady_clock::now();
  HttpReply r = HttpCall(gateway_->port(), "POST", "/v1/completions", body.dump(),
                         {"traceparent: " + parent});
  const double client_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.status, 200) << r.body;

  // Gateway: 3 spans; replica: SERVER + parse, tokenize, queue, >= 1 prefill, decode, stream.
  std::vector<ReceivedSpan> spans;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    spans.clear();
    for (const auto& s : (*rx)->spans())
      if (s.trace_id == kClientTrace) spans.push_back(s);
    if (spans.size() >= 10) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // anything late (a flush)
  spans.clear();
  for (const auto& s : (*rx)->spans())
    if (s.trace_id == kClientTrace) spans.push_back(s);
  ASSERT_GE(spans.size(), 10u);

  std::map<std::string, const ReceivedSpan*> by_id;
  const ReceivedSpan *gw_server = nullptr, *gw_route = nullptr, *gw_up = nullptr,
                     *rep_server = nullptr;
  for (const auto& s : spans) {
    by_id[s.span_id] = &s;
    if (s.service == "strata-gateway" && s.kind == 2) gw_server = &s;
    if (s.service == "strata-gateway" && s.name == "gateway.route") gw_route = &s;
    if (s.service == "strata-gateway" && s.name == "gateway.upstream") gw_up = &s;
    if (s.service == "strata-serve" && s.kind == 2) rep_server = &s;
  }
  ASSERT_NE(gw_server, nullptr);
  ASSERT_NE(gw_route, nullptr);
  ASSERT_NE(gw_up, nullptr);
  ASSERT_NE(rep_server, nullptr);

  // Parent links.
  EXPECT_EQ(gw_server->parent_span_id, kClientSpan);
  EXPECT_EQ(gw_server->name, "text_completion strata-tiny");
  EXPECT_EQ(gw_route->parent_span_id, gw_server->span_id);
  EXPECT_EQ(gw_up->parent_span_id, gw_server->span_id);
  EXPECT_EQ(rep_server->parent_span_id, gw_up->span_id);
  EXPECT_EQ(rep_server->name, "text_completion strata-tiny");
  std::vector<const ReceivedSpan*> phases;
  for (const auto& s : spans) {
    if (s.service != "strata-serve" || &s == rep_server) continue;
    ASSERT_TRUE(by_id.count(s.parent_span_id)) << s.name << ": parent not in the trace";
    const ReceivedSpan& p = *by_id[s.parent_span_id];
    if (s.name == "strata.kv_tier.fetch") {
      EXPECT_EQ(p.name, "strata.queue");
    } else {
      EXPECT_EQ(&p, rep_server) << s.name;
      phases.push_back(&s);
    }
    ExpectInside(s, p);
  }
  std::set<std::string> names;
  for (const auto* p : phases) names.insert(p->name);
  for (const char* n : {"strata.parse", "strata.tokenize", "strata.queue", "strata.prefill",
                        "strata.decode", "strata.stream"})
    EXPECT_TRUE(names.count(n)) << n;

  // Nesting: within the gateway exactly; the replica inside the upstream call up to the clocks'
  // offset difference.
  ExpectInside(*gw_route, *gw_server);
  ExpectInside(*gw_up, *gw_server);
  ExpectInside(*rep_server, *gw_up, kCrossProcessSlackNs);

  // Attributes.
  ExpectGenAi(*gw_server, kMaxTokens);
  ExpectGenAi(*rep_server, kMaxTokens);
  EXPECT_EQ(gw_route->Str("strata.replica"),
            "http://127.0.0.1:" + std::to_string(replica_->port()));
  EXPECT_TRUE(gw_route->Str("strata.decision").has_value());
  EXPECT_EQ(gw_up->Int("http.response.status_code"), 200);

  // The replica's phases are sequential and add up to its SERVER span within 5 %.
  std::sort(phases.begin(), phases.end(), [](const ReceivedSpan* a, const ReceivedSpan* b) {
    return a->start_unix_ns < b->start_unix_ns;
  });
  double sum_ms = 0;
  for (size_t i = 0; i < phases.size(); ++i) {
    sum_ms += phases[i]->duration_ms();
    if (i > 0) {
      EXPECT_GE(phases[i]->start_unix_ns, phases[i - 1]->end_unix_ns) << phases[i]->name;
    }
  }
  const double replica_ms = rep_server->duration_ms();
  EXPECT_NEAR(sum_ms, replica_ms, 0.05 * replica_ms);
  // The gateway's SERVER span is what the client measured, within 5 %.
  const double gateway_ms = gw_server->duration_ms();
  EXPECT_NEAR(gateway_ms, client_ms, 0.05 * client_ms);
  std::printf("client %.2f ms, gateway span %.2f ms, replica span %.2f ms, phases %.2f ms\n",
              client_ms, gateway_ms, replica_ms, sum_ms);
}

}  // namespace
}  // namespace strata::testing
