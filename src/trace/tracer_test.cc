// Tracer: head sampling, and the exporter against the shared test OTLP receiver on 127.0.0.1
// (batching, retry on 503/429 with Retry-After, no retry on 400, collector down or stalled, queue
// bounds, shutdown flush). Timing bounds are generous on purpose (loaded CI machines); the
// latency figures live in the benchmark (docs/benchmarks.md).
#include "trace/tracer.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "testing/otlp_receiver.h"

namespace strata::trace {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::unique_ptr<Tracer> MustStart(TracerOptions o) {
  auto t = Tracer::Start(std::move(o));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

TracerOptions Options(const std::string& endpoint) {
  TracerOptions o;
  o.endpoint = endpoint;
  o.service_name = "strata-test";
  o.flush_interval = milliseconds(50);
  o.export_timeout = milliseconds(1000);
  return o;
}

Span MakeSpan(int i) {
  Span s = ChildOf(TraceContext{}, "span " + std::to_string(i), SpanKind::kInternal);
  s.start_unix_ns = 1000;
  s.end_unix_ns = 2000;
  s.AddAttribute("i", int64_t{i});
  return s;
}

// Polls `pred` until it holds or `timeout` passes.
template <typename Pred>
bool Eventually(Pred pred, milliseconds timeout = milliseconds(10000)) {
  const auto end = Clock::now() + timeout;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return pred();
}

// A port nothing listens on (a receiver that was started and stopped).
std::string DeadEndpoint() {
  auto r = testing::OtlpReceiver::Start();
  EXPECT_TRUE(r.ok());
  std::string endpoint = (*r)->endpoint();
  (*r)->Stop();
  return endpoint;
}

TEST(TracerStart, RejectsBadOptions) {
  EXPECT_EQ(Tracer::Start(Options("https://collector:4318")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Tracer::Start(Options("collector")).status().code(), StatusCode::kInvalidArgument);
  for (double ratio : {-0.1, 1.5}) {
    TracerOptions o = Options("http://127.0.0.1:4318");
    o.sample_ratio = ratio;
    EXPECT_EQ(Tracer::Start(o).status().code(), StatusCode::kInvalidArgument) << ratio;
  }
  TracerOptions o = Options("http://127.0.0.1:4318");
  o.queue_capacity = 0;
  EXPECT_EQ(Tracer::Start(o).status().code(), StatusCode::kInvalidArgument);
  o = Options("http://127.0.0.1:4318");
  o.max_retries = -1;
  EXPECT_EQ(Tracer::Start(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(Sampling, ParentBasedFollowsTheSampledFlag) {
  for (double ratio : {0.0, 0.5, 1.0}) {
    TracerOptions o = Options("http://127.0.0.1:9");
    o.sample_ratio = ratio;
    auto t = MustStart(o);
    ASSERT_NE(t, nullptr);
    TraceContext parent{NewTraceId(), NewSpanId(), true, ""};
    EXPECT_TRUE(t->ShouldSample(parent, parent.trace_id)) << ratio;
    parent.sampled = false;
    EXPECT_FALSE(t->ShouldSample(parent, parent.trace_id)) << ratio;
  }
}

TEST(Sampling, RatioByTraceIdIsDeterministicAndProportional) {
  auto make = [](double ratio) {
    TracerOptions o = Options("http://127.0.0.1:9");
    o.sample_ratio = ratio;
    return MustStart(o);
  };
  auto none = make(0.0), all = make(1.0), half = make(0.5), half2 = make(0.5);
  constexpr int kIds = 20000;
  int sampled = 0;
  for (int i = 0; i < kIds; ++i) {
    const TraceId id = NewTraceId();
    EXPECT_FALSE(none->ShouldSample(std::nullopt, id));
    EXPECT_TRUE(all->ShouldSample(std::nullopt, id));
    const bool h = half->ShouldSample(std::nullopt, id);
    EXPECT_EQ(h, half2->ShouldSample(std::nullopt, id));  // every service with 0.5 agrees
    EXPECT_EQ(h, half->ShouldSample(std::nullopt, id));   // and again
    sampled += h ? 1 : 0;
  }
  EXPECT_GT(sampled, kIds * 47 / 100);
  EXPECT_LT(sampled, kIds * 53 / 100);
  // The low 8 bytes decide: 0x00.. is below any positive ratio, 0xff.. above any ratio < 1.
  TraceId low, high;
  low.bytes[0] = 0xff;
  low.bytes[15] = 1;
  for (size_t i = 8; i < 16; ++i) high.bytes[i] = 0xff;
  EXPECT_TRUE(half->ShouldSample(std::nullopt, low));
  EXPECT_FALSE(half->ShouldSample(std::nullopt, high));
}

TEST(Exporter, DeliversSpansInBatches) {
  auto rx = testing::OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  TracerOptions o = Options((*rx)->endpoint());
  o.max_batch = 10;
  auto t = MustStart(o);
  std::vector<Span> many;
  many.reserve(24);
  for (int i = 0; i < 24; ++i) many.push_back(MakeSpan(i));
  t->Export(std::move(many));
  t->Export(MakeSpan(24));
  ASSERT_TRUE((*rx)->WaitForSpans(25, milliseconds(10000)));
  const auto sizes = (*rx)->batch_sizes();
  EXPECT_LE(sizes.size(), 5u);
  for (size_t n : sizes) EXPECT_LE(n, 10u);
  EXPECT_TRUE(Eventually([&] { return t->stats().spans_exported == 25; }));
  const auto spans = (*rx)->spans();
  EXPECT_EQ(spans[0].service, "strata-test");
  std::set<int64_t> seen;
  for (const auto& s : spans) seen.insert(s.Int("i").value_or(-1));
  EXPECT_EQ(seen.size(), 25u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(t->stats().dropped_export_failed + t->stats().dropped_queue_full, 0u);
}

// Request threads append to one open batch under the queue's lock, and sent batches' buffers are
// written again: many producers, many small batches, every span exactly once, none over max_batch.
TEST(Exporter, ConcurrentProducersFillRecycledBatchesExactlyOnce) {
  auto rx = testing::OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  TracerOptions o = Options((*rx)->endpoint());
  o.max_batch = 7;  // request-sized exports (3 spans) straddle batch ends
  o.flush_interval = milliseconds(20);
  auto t = MustStart(o);
  constexpr int kThreads = 4, kRequests = 60, kSpansPerRequest = 3;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&t, th] {
      for (int r = 0; r < kRequests; ++r) {
        std::vector<Span> req;
        req.reserve(kSpansPerRequest);
        for (int k = 0; k < kSpansPerRequest; ++k)
          req.push_back(MakeSpan((th * kRequests + r) * kSpansPerRequest + k));
        t->Export(std::move(req));
      }
    });
  }
  for (auto& th : threads) th.join();
  constexpr int kTotal = kThreads * kRequests * kSpansPerRequest;
  ASSERT_TRUE((*rx)->WaitForSpans(kTotal, milliseconds(20000)));
  EXPECT_TRUE(Eventually([&] { return t->stats().spans_exported == kTotal; }));
  for (size_t n : (*rx)->batch_sizes()) EXPECT_LE(n, 7u);
  EXPECT_GE((*rx)->batch_sizes().size(), size_t{kTotal / 7});
  std::set<int64_t> seen;
  for (const auto& s : (*rx)->spans()) EXPECT_TRUE(seen.insert(s.Int("i").value_or(-1)).second);
  EXPECT_EQ(seen.size(), size_t{kTotal});
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), kTotal - 1);
  EXPECT_EQ(t->stats().dropped_export_failed + t->stats().dropped_queue_full, 0u);
  EXPECT_EQ(t->stats().queued, 0u);
}

TEST(Exporter, RetriesA503ThenDelivers) {
  auto rx = testing::OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  (*rx)->AnswerStatuses({503, 502});
  auto t = MustStart(Options((*rx)->endpoint()));
  t->Export(MakeSpan(1));
  ASSERT_TRUE((*rx)->WaitForSpans(1, milliseconds(10000)));
  EXPECT_TRUE(Eventually([&] { return t->stats().spans_exported == 1; }));
  const TracerStats s = t->stats();
  EXPECT_EQ(s.export_requests, 3u);
  EXPECT_EQ(s.export_retries, 2u);
  EXPECT_EQ(s.dropped_export_failed, 0u);
  EXPECT_EQ((*rx)->requests(), 3);
}

TEST(Exporter, HonoursRetryAfterOn429) {
  auto rx = testing::OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  (*rx)->AnswerStatuses({429}, "1");
  auto t = MustStart(Options((*rx)->endpoint()));
  const auto start = Clock::now();
  t->Export(MakeSpan(1));
  ASSERT_TRUE((*rx)->WaitForSpans(1, milliseconds(10000)));
  // The backoff alone would be 100 ms; Retry-After: 1 makes it a second.
  EXPECT_GE(Clock::now() - start, milliseconds(900));
  EXPECT_EQ((*rx)->requests(), 2);
}

TEST(Exporter, A400IsDroppedAndCountedNotRetried) {
  for (int status : {400, 500, 404}) {
    auto rx = testing::OtlpReceiver::Start();
    ASSERT_TRUE(rx.ok());
    (*rx)->SetDefaultStatus(status);
    auto t = MustStart(Options((*rx)->endpoint()));
    t->Export({MakeSpan(1), MakeSpan(2), MakeSpan(3)});
    ASSERT_TRUE(Eventually([&] { return t->stats().dropped_export_failed == 3; })) << status;
    std::this_thread::sleep_for(milliseconds(300));  // room for a (wrong) retry to show
    EXPECT_EQ((*rx)->requests(), 1) << status;
    EXPECT_EQ(t->stats().export_retries, 0u) << status;
    EXPECT_EQ(t->stats().spans_exported, 0u) << status;
  }
}

TEST(Exporter, CollectorDownDropsCountsAndNeverBlocks) {
  TracerOptions o = Options(DeadEndpoint());
  o.queue_capacity = 1000;
  o.max_batch = 500;
  o.max_retries = 1;
  auto t = MustStart(o);
  constexpr int kSpans = 10000;
  const auto start = Clock::now();
  uint64_t max_queued = 0;
  for (int i = 0; i < kSpans; ++i) {
    t->Export(MakeSpan(i));
    if (i % 500 == 0) max_queued = std::max(max_queued, t->stats().queued);
  }
  EXPECT_LT(Clock::now() - start, milliseconds(1000));  // 10k calls; each is a queue push
  EXPECT_LE(max_queued, o.queue_capacity);
  EXPECT_GT(t->stats().dropped_queue_full, 0u);
  ASSERT_TRUE(Eventually([&] {
    const TracerStats s = t->stats();
    return s.dropped_queue_full + s.dropped_export_failed == kSpans;
  }));
  const TracerStats s = t->stats();
  EXPECT_GT(s.dropped_export_failed, 0u);
  EXPECT_EQ(s.spans_exported, 0u);
  EXPECT_GT(s.export_retries, 0u);  // connection refused is retryable
  EXPECT_EQ(s.queued, 0u);
}

TEST(Exporter, QueueFullDropsWhenCapacityIsTiny) {
  auto rx = testing::OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  (*rx)->Stall(true);
  TracerOptions o = Options((*rx)->endpoint());
  o.queue_capacity = 4;
  o.max_batch = 2;
  auto t = MustStart(o);
  for (int i = 0; i < 100; ++i) {
    t->Export(MakeSpan(i));
    EXPECT_LE(t->stats().queued, 4u);
  }
  // At most the queue (4) and one batch in flight (2) escaped the drop.
  EXPECT_GE(t->stats().dropped_queue_full, 94u);
  (*rx)->Stall(false);
}

TEST(Exporter, QueueBytesBoundDropsWhateverTheSpanCount) {
  auto rx = testing::OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  (*rx)->Stall(true);
  TracerOptions o = Options((*rx)->endpoint());
  o.queue_bytes = 1;  // one span list fits, then the bytes bound is reached
  o.max_batch = 1;
  auto t = MustStart(o);
  for (int i = 0; i < 100; ++i) {
    t->Export(MakeSpan(i));
    EXPECT_LE(t->stats().queued, 1u);
  }
  // At most the queue (1) and one batch in flight (1) escaped the drop.
  EXPECT_GE(t->stats().dropped_queue_full, 98u);
  (*rx)->Stall(false);
}

TEST(Exporter, StalledCollectorTimesOutAndDrops) {
  auto rx = testing::OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  (*rx)->Stall(true);
  TracerOptions o = Options((*rx)->endpoint());
  o.export_timeout = milliseconds(200);
  o.max_retries = 1;
  auto t = MustStart(o);
  const auto start = Clock::now();
  for (int i = 0; i < 50; ++i) t->Export(MakeSpan(i));
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  ASSERT_TRUE(Eventually([&] { return t->stats().dropped_export_failed == 50; }));
  EXPECT_GE((*rx)->requests(), 2);  // the first POST and its retry
  EXPECT_EQ(t->stats().spans_exported, 0u);
}

TEST(Exporter, ShutdownFlushesWhatIsQueued) {
  auto rx = testing::OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  TracerOptions o = Options((*rx)->endpoint());
  o.flush_interval = milliseconds(60000);  // only the shutdown sends
  auto t = MustStart(o);
  for (int i = 0; i < 5; ++i) t->Export(MakeSpan(i));
  t->Shutdown(milliseconds(5000));
  EXPECT_EQ((*rx)->spans().size(), 5u);
  EXPECT_EQ(t->stats().spans_exported, 5u);
  t->Export(MakeSpan(6));  // after shutdown: dropped, counted
  EXPECT_EQ(t->stats().dropped_queue_full, 1u);
}

TEST(Exporter, ShutdownIsBoundedByItsTimeoutWhenTheCollectorStalls) {
  auto rx = testing::OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok());
  (*rx)->Stall(true);
  TracerOptions o = Options((*rx)->endpoint());
  o.export_timeout = milliseconds(30000);
  auto t = MustStart(o);
  for (int i = 0; i < 5; ++i) t->Export(MakeSpan(i));
  ASSERT_TRUE((*rx)->WaitForRequests(1, milliseconds(10000)));
  const auto start = Clock::now();
  t->Shutdown(milliseconds(200));
  EXPECT_LT(Clock::now() - start, milliseconds(5000));  // not the 30 s export timeout
  EXPECT_EQ(t->stats().dropped_export_failed, 5u);
}

}  // namespace
}  // namespace strata::trace
