// The replica's spans: a server with a tracer pointed at the shared OTLP test receiver
// (tests/testing/otlp_receiver.h) exports the span tree of request_spans.h — one trace id, every
// phase a child of the SERVER span, nested in it, sequential and adding up to it — continues a
// client's traceparent, honours its sampled flag, and exports nothing without a tracer. Plus the
// span builder alone over a hand-made timeline (tier fetch, preemption, batch).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "server/request_spans.h"
#include "server/server_test_util.h"
#include "testing/otlp_receiver.h"
#include "trace/tracer.h"

namespace strata::server::test {
namespace {

using std::chrono::milliseconds;
using strata::testing::OtlpReceiver;
using strata::testing::ReceivedSpan;

class TracedServerTest : public ServerTest {
 protected:
  void SetUp() override {
    auto rx = OtlpReceiver::Start();
    ASSERT_TRUE(rx.ok()) << rx.status().ToString();
    receiver_ = std::move(*rx);
    trace::TracerOptions o;
    o.endpoint = receiver_->endpoint();
    o.service_name = "strata-serve";
    o.flush_interval = milliseconds(20);
    auto t = trace::Tracer::Start(o);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tracer_owned_ = std::move(*t);
    tracer_ = tracer_owned_.get();
    Boot(1024, {});
  }
  void TearDown() override {
    Shutdown();
    tracer_owned_.reset();
    receiver_.reset();
  }

  // The spans of `trace_id` once at least `n` arrived (bounded wait).
  std::vector<ReceivedSpan> SpansOf(const std::string& trace_id, size_t n) {
    std::vector<ReceivedSpan> out;
    for (int i = 0; i < 300; ++i) {
      out.clear();
      for (auto& s : receiver_->spans())
        if (s.trace_id == trace_id) out.push_back(s);
      if (out.size() >= n) break;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return out;
  }
  // The trace id of the (only) SERVER span named `name` received so far ("" when none).
  std::string ServerTraceId(const std::string& name, size_t n_servers = 1) {
    for (int i = 0; i < 300; ++i) {
      std::vector<std::string> ids;
      for (auto& s : receiver_->spans())
        if (s.kind == 2 && s.name == name) ids.push_back(s.trace_id);
      if (ids.size() >= n_servers) return ids.back();
      std::this_thread::sleep_for(milliseconds(10));
    }
    return "";
  }

  std::unique_ptr<OtlpReceiver> receiver_;
  std::unique_ptr<trace::Tracer> tracer_owned_;
};

const ReceivedSpan* Find(const std::vector<ReceivedSpan>& spans, const std::string& name) {
  for (const auto& s : spans)
    if (s.name == name) return &s;
  return nullptr;
}

int Count(const std::vector<ReceivedSpan>& spans, const std::string& name) {
  return static_cast<int>(std::count_if(spans.begin(), spans.end(),
                                        [&](const ReceivedSpan& s) { return s.name == name; }));
}

// Every span but the root is a direct child of it (the tier fetches: of strata.queue), nested in
// it; the top-level phases are sequential and add up to the root within 5 %.
void ExpectTree(const std::vector<ReceivedSpan>& spans, const ReceivedSpan& root) {
  std::map<std::string, const ReceivedSpan*> by_id;
  for (const auto& s : spans) by_id[s.span_id] = &s;
  std::vector<const ReceivedSpan*> phases;
  for (const auto& s : spans) {
    EXPECT_EQ(s.trace_id, root.trace_id);
    EXPECT_EQ(s.service, "strata-serve");
    if (&s == &root) continue;
    ASSERT_TRUE(by_id.count(s.parent_span_id)) << s.name << " has no parent in the trace";
    const ReceivedSpan& parent = *by_id[s.parent_span_id];
    EXPECT_EQ(parent.span_id, s.name == "strata.kv_tier.fetch"
                                  ? Find(spans, "strata.queue")->span_id
                                  : root.span_id)
        << s.name;
    EXPECT_GE(s.start_unix_ns, parent.start_unix_ns) << s.name;
    EXPECT_LE(s.end_unix_ns, parent.end_unix_ns) << s.name;
    EXPECT_LE(s.start_unix_ns, s.end_unix_ns) << s.name;
    EXPECT_EQ(s.kind, 1) << s.name;  // internal
    if (&parent == &root) phases.push_back(&s);
  }
  std::sort(phases.begin(), phases.end(), [](const ReceivedSpan* a, const ReceivedSpan* b) {
    return a->start_unix_ns < b->start_unix_ns;
  });
  int64_t sum = 0;
  for (size_t i = 0; i < phases.size(); ++i) {
    sum += phases[i]->end_unix_ns - phases[i]->start_unix_ns;
    if (i > 0) {
      EXPECT_GE(phases[i]->start_unix_ns, phases[i - 1]->end_unix_ns)
          << phases[i - 1]->name << " overlaps " << phases[i]->name;
    }
  }
  const double total = static_cast<double>(root.end_unix_ns - root.start_unix_ns);
  EXPECT_NEAR(static_cast<double>(sum), total, 0.05 * total);
  EXPECT_EQ(phases.front()->name, "strata.parse");
  EXPECT_EQ(phases.front()->start_unix_ns, root.start_unix_ns);
  EXPECT_EQ(phases.back()->name, "strata.stream");
  EXPECT_EQ(phases.back()->end_unix_ns, root.end_unix_ns);
}

TEST_F(TracedServerTest, ChatRequestExportsTheWholeTreeUnderOneTrace) {
  StartEngine();
  int st = 0;
  json r = Post("/v1/chat/completions",
                {{"messages", {{{"role", "user"}, {"content", "hello"}}}},
                 {"max_tokens", 40},
                 {"temperature", 0},
                 {"ignore_eos", true}},
                &st);
  ASSERT_EQ(st, 200) << r;
  const std::string id = ServerTraceId("chat fake");
  ASSERT_FALSE(id.empty());
  const auto spans = SpansOf(id, 8);
  const ReceivedSpan* root = Find(spans, "chat fake");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->parent_span_id, "");  // no traceparent: a root
  EXPECT_EQ(root->kind, 2);             // server
  for (const char* name : {"strata.parse", "strata.template", "strata.tokenize", "strata.queue",
                           "strata.decode", "strata.stream"})
    EXPECT_EQ(Count(spans, name), 1) << name;
  EXPECT_GE(Count(spans, "strata.prefill"), 1);
  ExpectTree(spans, *root);
  EXPECT_EQ(root->Str("gen_ai.operation.name"), "chat");
  EXPECT_EQ(root->Str("gen_ai.request.model"), "fake");
  EXPECT_EQ(root->Int("gen_ai.request.max_tokens"), 40);
  EXPECT_EQ(root->Int("gen_ai.usage.input_tokens"), r["usage"]["prompt_tokens"].get<int64_t>());
  EXPECT_EQ(root->Int("gen_ai.usage.output_tokens"), 40);
  EXPECT_EQ(root->StrArray("gen_ai.response.finish_reasons"), std::vector<std::string>{"length"});
  EXPECT_EQ(root->Str("gen_ai.response.id"), r["id"].get<std::string>());
  EXPECT_EQ(root->Str("strata.priority"), "silver");
  EXPECT_EQ(root->Str("strata.tenant"), "");
  EXPECT_EQ(root->Int("strata.cached_tokens"), 0);
  EXPECT_EQ(root->Int("strata.preemptions"), 0);
  EXPECT_EQ(root->Int("http.response.status_code"), 200);
  const ReceivedSpan* prefill = Find(spans, "strata.prefill");
  EXPECT_EQ(prefill->Int("strata.chunk_tokens"), r["usage"]["prompt_tokens"].get<int64_t>());
  // Decode: a first_token event and a "tokens" event per 16 tokens (40 -> at 16 and 32).
  const ReceivedSpan* decode = Find(spans, "strata.decode");
  int first = 0, tokens = 0;
  for (const auto& e : decode->events) {
    first += e.name == "first_token";
    tokens += e.name == "tokens";
    EXPECT_GE(e.time_unix_ns, root->start_unix_ns);
    EXPECT_LE(e.time_unix_ns, root->end_unix_ns);
  }
  EXPECT_EQ(first, 1);
  EXPECT_EQ(tokens, 2);
  EXPECT_TRUE(Find(spans, "strata.stream")->Double("strata.detokenize_ms").has_value());
  // The exporter's counters on /metrics.
  std::string m;
  for (int i = 0; i < 100; ++i) {
    m = HttpCall(port_, "GET", "/metrics").body;
    if (m.find("strata:trace_spans_exported_total 0\n") == std::string::npos) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_NE(m.find("# TYPE strata:trace_spans_exported_total counter"), std::string::npos);
  EXPECT_EQ(m.find("strata:trace_spans_exported_total 0\n"), std::string::npos) << m;
  EXPECT_NE(m.find("strata:trace_spans_dropped_total{reason=\"queue_full\"} 0"), std::string::npos);
  EXPECT_NE(m.find("strata:trace_spans_dropped_total{reason=\"export_failed\"} 0"),
            std::string::npos);
}

TEST_F(TracedServerTest, TraceparentIsContinuedAndItsSampledFlagHonoured) {
  StartEngine();
  const std::string client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  const std::string client_span = "00f067aa0ba902b7";
  json body = {{"prompt", "hello"}, {"max_tokens", 4}, {"ignore_eos", true}, {"stream", true}};
  // Not sampled (flags 00): no span at all.
  const std::string unsampled = "1bf92f3577b34da6a3ce929d0e0e4736";
  auto r0 = HttpCall(port_, "POST", "/v1/completions", body.dump(),
                     {"traceparent: 00-" + unsampled + "-" + client_span + "-00"});
  ASSERT_EQ(r0.status, 200);
  auto r = HttpCall(
      port_, "POST", "/v1/completions", body.dump(),
      {"traceparent: 00-" + client_trace + "-" + client_span + "-01", "tracestate: vendor=abc"});
  ASSERT_EQ(r.status, 200);
  const auto spans = SpansOf(client_trace, 7);
  const ReceivedSpan* root = Find(spans, "text_completion fake");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->parent_span_id, client_span);
  EXPECT_EQ(root->trace_state, "vendor=abc");
  EXPECT_EQ(root->Bool("strata.stream"), true);
  EXPECT_EQ(Count(spans, "strata.template"), 0);  // completions: no template
  ExpectTree(spans, *root);
  // The unsampled request was handled first; the exporter is FIFO, so its spans would be here.
  for (const auto& s : receiver_->spans()) EXPECT_NE(s.trace_id, unsampled) << s.name;
}

TEST_F(ServerTest, WithoutATracerNothingIsTracedOrExported) {
  StartEngine();
  auto r = HttpCall(port_, "POST", "/v1/completions",
                    json({{"prompt", "hello"}, {"max_tokens", 4}}).dump(),
                    {"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"});
  ASSERT_EQ(r.status, 200);
  const std::string m = HttpCall(port_, "GET", "/metrics").body;
  EXPECT_EQ(m.find("strata:trace_spans"), std::string::npos);
}

// --- The builder alone, over a hand-made timeline. ---

using engine::sched::RequestTimeline;

TEST(RequestSpans, TierFetchNestsInTheQueueAndPreemptionsBecomeDecodeEvents) {
  const auto t0 = std::chrono::steady_clock::now();
  auto at = [t0](int ms) { return t0 + milliseconds(ms); };
  RequestTrace t;
  t.trace_id = trace::NewTraceId();
  t.span_id = trace::NewSpanId();
  t.stamps = {at(0), at(1), {}, at(2), {}, 0};
  t.stamps.token_marks = {{at(30), 16}};
  auto tl = std::make_shared<RequestTimeline>();
  tl->submitted = at(2);
  tl->StartFetch(at(3), 4);
  tl->EndFetch(0, at(5), 3, false);
  tl->first_scheduled = at(6);
  tl->cached_tokens = 48;
  tl->AddChunk(at(6), at(8), 10);
  tl->AddChunk(at(8), at(10), 10);
  tl->first_token = at(10);
  tl->Preempted(at(20));
  tl->Ran(at(25));
  tl->finished = at(40);
  SpanFacts f;
  f.model = "m";
  f.output_tokens = 17;
  std::vector<std::shared_ptr<const RequestTimeline>> tls = {tl};
  const auto spans = BuildRequestSpans(t, f, tls, at(39), at(42));
  std::map<std::string, std::vector<const trace::Span*>> by;
  for (const auto& s : spans) by[s.name].push_back(&s);
  ASSERT_EQ(spans.front().name, "text_completion m");
  EXPECT_EQ(spans.front().end_unix_ns - spans.front().start_unix_ns, 42'000'000);
  ASSERT_EQ(by["strata.queue"].size(), 1u);
  ASSERT_EQ(by["strata.kv_tier.fetch"].size(), 1u);
  EXPECT_EQ(by["strata.kv_tier.fetch"][0]->parent_span_id, by["strata.queue"][0]->span_id);
  EXPECT_EQ(
      by["strata.kv_tier.fetch"][0]->end_unix_ns - by["strata.kv_tier.fetch"][0]->start_unix_ns,
      2'000'000);
  EXPECT_EQ(by["strata.queue"][0]->end_unix_ns - by["strata.queue"][0]->start_unix_ns, 4'000'000);
  EXPECT_EQ(by["strata.prefill"].size(), 2u);
  ASSERT_EQ(by["strata.decode"].size(), 1u);
  const trace::Span& d = *by["strata.decode"][0];
  EXPECT_EQ(d.end_unix_ns - d.start_unix_ns, 30'000'000);
  std::vector<std::string> events;
  for (const auto& e : d.events) events.push_back(e.name);
  EXPECT_EQ(events, (std::vector<std::string>{"first_token", "preempted", "resumed", "tokens"}));
  ASSERT_EQ(by["strata.stream"].size(), 1u);
  EXPECT_EQ(by["strata.stream"][0]->end_unix_ns - by["strata.stream"][0]->start_unix_ns, 2'000'000);
  EXPECT_EQ(by["strata.template"].size(), 0u);
}

TEST(RequestSpans, ErrorBeforeSchedulingHasAQueueAndAnErrorStatusButNoEnginePhases) {
  const auto t0 = std::chrono::steady_clock::now();
  RequestTrace t;
  t.trace_id = trace::NewTraceId();
  t.span_id = trace::NewSpanId();
  t.stamps.arrival = t0;
  t.stamps.prompt_start = t0 + milliseconds(1);
  t.stamps.tokenize_end = t0 + milliseconds(2);
  auto tl = std::make_shared<RequestTimeline>();
  tl->submitted = t0 + milliseconds(2);
  tl->finished = t0 + milliseconds(50);  // deadline passed while queued
  SpanFacts f;
  f.model = "m";
  f.http_status = 504;
  f.error = "deadline_ms: ...";
  std::vector<std::shared_ptr<const RequestTimeline>> tls = {tl};
  const auto spans = BuildRequestSpans(t, f, tls, {}, t0 + milliseconds(51));
  EXPECT_EQ(spans.front().status, trace::SpanStatus::kError);
  std::vector<std::string> names;
  for (const auto& s : spans) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"text_completion m", "strata.parse", "strata.tokenize",
                                             "strata.queue", "strata.stream"}));
  EXPECT_EQ(spans[3].end_unix_ns - spans[3].start_unix_ns, 48'000'000);
}

}  // namespace
}  // namespace strata::server::test
