// ReplicaSet against fake replicas on 127.0.0.1 (tests/gateway/fake_replica_test_util.h): active
// health, draining, passive ejection with backoff and readmission, metrics polling feeding the
// cost, KV events feeding affinity (with resets), DNS membership.
#include "gateway/replica_set.h"

#include <gtest/gtest.h>

// clang-format off
#include <utility>  // before Boost 1.74's awaitable.hpp (see http/client.h)
// clang-format on

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <thread>

#include "cachekey/block_hash.h"
#include "gateway/fake_replica_test_util.h"
#include "http/client.h"

namespace strata::gateway {
namespace {

using std::chrono::milliseconds;
using testing::FakeReplica;

// Runs the upstream io_context on its own thread for the test's lifetime.
class Upstream {
 public:
  Upstream() : guard_(io_.get_executor()), thread_([this] { io_.run(); }) {}
  ~Upstream() {
    guard_.reset();
    io_.stop();
    thread_.join();
  }
  boost::asio::io_context& io() { return io_; }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::thread thread_;
};

bool WaitFor(const std::function<bool()>& pred, milliseconds timeout = milliseconds(5000)) {
  auto end = Clock::now() + timeout;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return pred();
}

ReplicaView ViewOf(const ReplicaSet& set, const std::string& url) {
  for (const ReplicaView& v : set.Snapshot())
    if (v.url == url) return v;
  return {};
}

HealthConfig FastHealth() {
  HealthConfig h;
  h.interval = milliseconds(30);
  h.timeout = milliseconds(500);
  h.eject_after_failures = 3;
  h.ejection_base = milliseconds(300);
  h.ejection_max = milliseconds(2000);
  return h;
}
BalancerConfig FastBalancer() {
  BalancerConfig b;
  b.metrics_interval = milliseconds(30);
  b.kv_events_interval = milliseconds(30);
  return b;
}
PoolConfig Pool(std::vector<std::string> urls) {
  PoolConfig p;
  p.name = "general";
  p.replicas = std::move(urls);
  return p;
}

class ReplicaSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(a_.ok() && b_.ok());
    set_ = std::make_unique<ReplicaSet>(up_.io(), Pool({a_.url(), b_.url()}), FastBalancer(),
                                        FastHealth());
  }
  void TearDown() override {
    set_->Stop();
    set_.reset();
  }
  bool Eligible(const std::string& url) { return ViewOf(*set_, url).eligible; }
  Result<Pick> Choose(int64_t prompt = 100) {
    PickRequest r;
    r.prompt_tokens = prompt;
    r.max_tokens = 16;
    return set_->Choose(r, Clock::now());
  }

  Upstream up_;
  FakeReplica a_, b_;
  std::unique_ptr<ReplicaSet> set_;
};

TEST_F(ReplicaSetTest, NotEligibleBeforeTheFirstReadyThenFollowsReady) {
  EXPECT_FALSE(set_->any_eligible());
  EXPECT_FALSE(Choose().ok());
  set_->Start();
  ASSERT_TRUE(WaitFor([&] { return Eligible(a_.url()) && Eligible(b_.url()); }));
  a_.SetReady(503, R"({"error":{"message":"loading"}})");
  ASSERT_TRUE(WaitFor([&] { return !Eligible(a_.url()); }, milliseconds(1000)));
  EXPECT_FALSE(ViewOf(*set_, a_.url()).draining);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Choose()->url, b_.url());
  a_.SetReady(200, R"({"status":"ready"})");
  ASSERT_TRUE(WaitFor([&] { return Eligible(a_.url()); }, milliseconds(1000)));
  // A dead replica (connection refused) is out within a few intervals.
  b_.Stop();
  ASSERT_TRUE(WaitFor([&] { return !Eligible(b_.url()); }, milliseconds(1000)));
  EXPECT_TRUE(set_->any_eligible());
}

TEST_F(ReplicaSetTest, DrainingReplicaGetsNoNewWork) {
  set_->Start();
  ASSERT_TRUE(WaitFor([&] { return Eligible(a_.url()) && Eligible(b_.url()); }));
  b_.SetReady(503, R"({"error":{"message":"draining","type":"server_error"}})");
  ASSERT_TRUE(WaitFor([&] { return ViewOf(*set_, b_.url()).draining; }, milliseconds(1000)));
  EXPECT_FALSE(Eligible(b_.url()));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Choose()->url, a_.url());
  a_.SetReady(503, R"({"error":{"message":"draining"}})");
  ASSERT_TRUE(WaitFor([&] { return !set_->any_eligible(); }, milliseconds(1000)));
  auto none = Choose();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find("general"), std::string::npos);
}

TEST_F(ReplicaSetTest, PassiveEjectionBacksOffExponentiallyAndReadmitsOnReady) {
  set_->Start();
  ASSERT_TRUE(WaitFor([&] { return Eligible(a_.url()) && Eligible(b_.url()); }));
  // Two failures, then a success: the count starts again.
  set_->OnFinished(a_.url(), false, 0, Clock::now());
  set_->OnFinished(a_.url(), true, 502, Clock::now());
  set_->OnFinished(a_.url(), true, 200, Clock::now());
  set_->OnFinished(a_.url(), true, 503, Clock::now());
  EXPECT_TRUE(Eligible(a_.url()));
  set_->OnFinished(a_.url(), true, 404, Clock::now());  // a 4xx is not the replica's fault
  EXPECT_EQ(ViewOf(*set_, a_.url()).consecutive_failures, 0);
  // Three in a row: ejected for ejection_base (300 ms), though /ready keeps answering 200.
  auto t1 = Clock::now();
  for (int i = 0; i < 3; ++i) set_->OnFinished(a_.url(), false, 0, Clock::now());
  EXPECT_TRUE(ViewOf(*set_, a_.url()).ejected);
  EXPECT_EQ(ViewOf(*set_, a_.url()).ejections, 1);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Choose()->url, b_.url());
  ASSERT_TRUE(WaitFor([&] { return Eligible(a_.url()); }, milliseconds(2000)));
  EXPECT_GE(Clock::now() - t1, milliseconds(300));
  // Ejected again before serving successfully: twice as long (600 ms).
  auto t2 = Clock::now();
  for (int i = 0; i < 3; ++i) set_->OnFinished(a_.url(), true, 500, Clock::now());
  EXPECT_EQ(ViewOf(*set_, a_.url()).ejections, 2);
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_FALSE(Eligible(a_.url()));
  ASSERT_TRUE(WaitFor([&] { return Eligible(a_.url()); }, milliseconds(2000)));
  EXPECT_GE(Clock::now() - t2, milliseconds(600));
  // Not readmitted while /ready fails, even after the ejection time.
  set_->OnFinished(a_.url(), true, 200, Clock::now());  // served: the backoff starts over
  for (int i = 0; i < 3; ++i) set_->OnFinished(a_.url(), false, 0, Clock::now());
  a_.SetReady(503, "{}");
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_FALSE(Eligible(a_.url()));
  EXPECT_TRUE(ViewOf(*set_, a_.url()).ejected);
  a_.SetReady(200, "{}");
  ASSERT_TRUE(WaitFor([&] { return Eligible(a_.url()); }, milliseconds(1000)));
}

TEST_F(ReplicaSetTest, PolledMetricsFeedTheCost) {
  a_.SetMetrics(FakeReplica::MetricsText(/*waiting=*/12, /*running=*/4, 1000));
  set_->Start();
  ASSERT_TRUE(WaitFor([&] {
    auto v = ViewOf(*set_, a_.url());
    return v.eligible && v.metrics.valid && v.metrics.waiting == 12 && Eligible(b_.url()) &&
           ViewOf(*set_, b_.url()).metrics.valid;
  }));
  EXPECT_EQ(ViewOf(*set_, a_.url()).metrics.running, 4);
  for (int i = 0; i < 5; ++i) {
    auto p = Choose();
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->url, b_.url());
    EXPECT_EQ(p->reason, RouteReason::kLoad);
  }
  // The prompt-token counter moving while the replica has a queue gives its prefill rate.
  a_.SetMetrics(FakeReplica::MetricsText(12, 4, 1e6));
  ASSERT_TRUE(WaitFor([&] { return ViewOf(*set_, a_.url()).metrics.prefill_tokens_per_s > 0; }));
  // Garbage metrics: invalid, and the cost falls back to the gateway's own in_flight.
  b_.SetMetrics("this is { not prometheus");
  ASSERT_TRUE(WaitFor([&] { return !ViewOf(*set_, b_.url()).metrics.valid; }));
  EXPECT_TRUE(Eligible(b_.url()));
}

// The adapters of strata:lora_adapter_active reach the replica's view (via ObserveMetrics, as the
// poller feeds it) and steer a request for an adapter.
TEST_F(ReplicaSetTest, PolledLoraAdaptersReachTheViewAndTheChoice) {
  set_->Start();
  ASSERT_TRUE(WaitFor([&] { return Eligible(a_.url()) && Eligible(b_.url()); }));
  set_->Stop();  // from here on only the metrics fed below
  const std::string base = FakeReplica::MetricsText(0, 0, 0);
  ASSERT_TRUE(set_->ObserveMetrics(a_.url(),
                                   base + "strata:lora_requests_info{max_lora=\"1\"} 1\n"
                                          "strata:lora_adapter_active{adapter=\"sql\"} 1\n"
                                          "strata:lora_adapter_active{adapter=\"chat\"} 0\n",
                                   Clock::now())
                  .ok());
  ASSERT_TRUE(set_->ObserveMetrics(b_.url(),
                                   base + "strata:lora_requests_info{max_lora=\"1\"} 1\n"
                                          "strata:lora_adapter_active{adapter=\"chat\"} 1\n",
                                   Clock::now())
                  .ok());
  ReplicaView a = ViewOf(*set_, a_.url());
  EXPECT_TRUE(a.metrics.lora_published);
  EXPECT_EQ(a.metrics.lora_registered, (std::vector<std::string>{"chat", "sql"}));
  EXPECT_EQ(a.metrics.lora_active, (std::vector<std::string>{"sql"}));
  PickRequest r;
  r.prompt_tokens = 100;
  r.max_tokens = 16;
  r.adapter = "sql";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(set_->Choose(r, Clock::now())->url, a_.url());
  r.adapter = "chat";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(set_->Choose(r, Clock::now())->url, b_.url());
  // A later poll without the families: no list any more.
  ASSERT_TRUE(set_->ObserveMetrics(a_.url(), base, Clock::now()).ok());
  EXPECT_FALSE(ViewOf(*set_, a_.url()).metrics.lora_published);
  EXPECT_TRUE(ViewOf(*set_, a_.url()).metrics.lora_registered.empty());
}

// An adapter's blocks are salted with its content digest on the replica; the gateway finds them
// only with the digest the replica's /metrics publish for that adapter name.
TEST_F(ReplicaSetTest, AdapterRequestsMatchBlocksSaltedWithThePublishedDigest) {
  const std::vector<uint8_t> salt = {0x12, 0x34};
  a_.SetKvIdentity(16, salt);
  b_.SetKvIdentity(16, salt);
  std::vector<int32_t> tokens(48);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 17 % 3000);
  auto hashes = cachekey::ComputeBlockHashes(
      tokens, 16, cachekey::RequestSalt(salt, {.adapter = "d1gest", .tenant = ""}));
  ASSERT_EQ(hashes.size(), 3u);
  b_.AddBlocks(hashes);
  set_->Start();
  PickRequest r;
  r.tokens = tokens;
  r.prompt_tokens = static_cast<int64_t>(tokens.size());
  r.max_tokens = 8;
  r.adapter = "sql";
  const std::string base = FakeReplica::MetricsText(0, 0, 0);
  const std::string lora = "strata:lora_adapter_active{adapter=\"sql\",digest=\"d1gest\"} 1\n";
  ASSERT_TRUE(WaitFor([&] { return Eligible(a_.url()) && Eligible(b_.url()); }));
  // Until b publishes the digest, its blocks (salted with it) cannot be matched.
  ASSERT_TRUE(WaitFor([&] { return ViewOf(*set_, b_.url()).publishes_events; }));
  EXPECT_EQ(set_->Choose(r, Clock::now())->cached_tokens, 0);
  ASSERT_TRUE(set_->ObserveMetrics(a_.url(), base + lora, Clock::now()).ok());
  ASSERT_TRUE(set_->ObserveMetrics(b_.url(), base + lora, Clock::now()).ok());
  auto p = set_->Choose(r, Clock::now());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->url, b_.url());
  EXPECT_EQ(p->cached_tokens, 48);
  // The base model's keys for the same tokens are other keys: no match.
  PickRequest base_req = r;
  base_req.adapter = "";
  EXPECT_EQ(set_->Choose(base_req, Clock::now())->cached_tokens, 0);
}

TEST_F(ReplicaSetTest, KvEventsFeedAffinityAndResetsForgetThem) {
  const std::vector<uint8_t> salt = {0xab, 0xcd, 0xef};
  a_.SetKvIdentity(16, salt);
  b_.SetKvIdentity(16, salt);
  std::vector<int32_t> tokens(64 + 8);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 31 % 5000);
  auto hashes = cachekey::ComputeBlockHashes(
      tokens, 16, cachekey::RequestSalt(salt, {.adapter = "", .tenant = "acme"}));
  ASSERT_EQ(hashes.size(), 4u);
  b_.AddBlocks(hashes);
  set_->Start();
  PickRequest r;
  r.tokens = tokens;
  r.prompt_tokens = static_cast<int64_t>(tokens.size());
  r.max_tokens = 16;
  r.tenant = "acme";
  ASSERT_TRUE(WaitFor([&] {
    auto p = set_->Choose(r, Clock::now());
    return p.ok() && p->url == b_.url() && p->cached_tokens == 64;
  }));
  EXPECT_TRUE(ViewOf(*set_, b_.url()).publishes_events);
  EXPECT_EQ(ViewOf(*set_, b_.url()).block_size, 16);
  auto p = set_->Choose(r, Clock::now());
  EXPECT_EQ(p->reason, RouteReason::kAffinity);
  ASSERT_NE(p->block_hashes, nullptr);
  EXPECT_EQ(*p->block_hashes, hashes);
  // Another tenant's keys differ: no affinity.
  PickRequest other = r;
  other.tenant = "";
  EXPECT_EQ(set_->Choose(other, Clock::now())->cached_tokens, 0);
  // Incremental events: the last two blocks evicted.
  b_.RemoveBlocks({hashes[2], hashes[3]});
  ASSERT_TRUE(WaitFor([&] { return set_->Choose(r, Clock::now())->cached_tokens == 32; }));
  // The replica restarts (new instance, an empty cache): what we knew is forgotten.
  const int64_t resets = b_.resets_served();
  b_.Restart();
  ASSERT_TRUE(WaitFor([&] { return set_->Choose(r, Clock::now())->cached_tokens == 0; }));
  EXPECT_GT(b_.resets_served(), resets);
  // Blocks in a slower tier are held, priced at their transfer time.
  a_.AddBlocks(hashes, "disk");
  ASSERT_TRUE(WaitFor([&] {
    auto q = set_->Choose(r, Clock::now());
    return q->url == a_.url() && q->cached_tokens == 64;
  }));
  EXPECT_NE(set_->Choose(r, Clock::now())->detail.find("tier=0.0040"), std::string::npos)
      << set_->Choose(r, Clock::now())->detail;
  // A replica that answers 404 does not publish; its knowledge is dropped.
  a_.SetKvEventsStatus(404);
  ASSERT_TRUE(WaitFor([&] { return !ViewOf(*set_, a_.url()).publishes_events; }));
  EXPECT_EQ(set_->Choose(r, Clock::now())->cached_tokens, 0);
}

TEST_F(ReplicaSetTest, MalformedKvEventsAreErrorsAndChangeNothing) {
  const std::string url = a_.url();
  for (const char* body :
       {"", "[]", "{", R"({"instance":1})", R"({"cursor":-1})", R"({"block_size":0})",
        R"({"model_salt":"abc"})", R"({"events":[{"op":"add","tier":"gpu","hashes":[]}]})",
        R"({"events":[{"op":"upsert","tier":"pool","hashes":[]}]})",
        R"({"events":[{"op":"add","tier":"pool","hashes":["00"]}]})",
        R"({"events":[{"op":"add","tier":"pool","hashes":[7]}]})", R"({"events":{}})"}) {
    EXPECT_FALSE(set_->ObserveKvEvents(url, 200, body).ok()) << body;
  }
  EXPECT_FALSE(ViewOf(*set_, url).publishes_events);
  EXPECT_FALSE(set_->ObserveKvEvents(url, 500, "").ok());
  const std::string h(64, 'a');
  auto ok = set_->ObserveKvEvents(
      url, 200,
      R"({"instance":"i1","block_size":16,"model_salt":"00ff","cursor":3,"reset":true,"events":[{"op":"add","tier":"ram","hashes":[")" +
          h + R"("]}]})");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_FALSE(*ok);
  EXPECT_EQ(set_->prefix_index().size(url), 1u);
  // A different instance answering without reset: start over from cursor 0.
  auto again = set_->ObserveKvEvents(
      url, 200, R"({"instance":"i2","block_size":16,"model_salt":"00ff","cursor":9,"events":[]})");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*again);
  EXPECT_EQ(set_->prefix_index().size(url), 0u);
}

TEST_F(ReplicaSetTest, SentRequestsBecomeHistoryForReplicasWithoutEvents) {
  a_.SetKvEventsStatus(404);
  b_.SetKvEventsStatus(404);
  set_->Start();
  ASSERT_TRUE(WaitFor([&] { return Eligible(a_.url()) && Eligible(b_.url()); }));
  std::vector<int32_t> tokens(256);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i);
  PickRequest r;
  r.tokens = tokens;
  r.prompt_tokens = 256;
  r.max_tokens = 8;
  auto first = set_->Choose(r, Clock::now());
  ASSERT_TRUE(first.ok());
  set_->OnSent(first->url, *first, r);
  set_->OnFinished(first->url, true, 200, Clock::now());
  auto second = set_->Choose(r, Clock::now());
  EXPECT_EQ(second->url, first->url);
  EXPECT_EQ(second->reason, RouteReason::kAffinity);
  EXPECT_EQ(second->cached_tokens, 256);
  // Past the history TTL it is forgotten.
  auto later = set_->Choose(r, Clock::now() + std::chrono::seconds(121));
  EXPECT_EQ(later->cached_tokens, 0);
}

TEST(ReplicaSetDns, LocalhostResolvesToMembersAndLeavesWhenDnsIsRemoved) {
  Upstream up;
  FakeReplica fake;
  ASSERT_TRUE(fake.ok());
  PoolConfig pool = Pool({});
  pool.dns = DnsConfig{"localhost", fake.port(), milliseconds(50)};
  ReplicaSet set(up.io(), pool, FastBalancer(), FastHealth());
  set.Start();
  const std::string want = "http://127.0.0.1:" + std::to_string(fake.port());
  ASSERT_TRUE(WaitFor([&] { return ViewOf(set, want).eligible; }));
  PickRequest req;
  req.prompt_tokens = 10;
  auto p = set.Choose(req, Clock::now());
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->url == want || p->url.find("[::1]") != std::string::npos) << p->url;
  // A static URL that DNS also yields is one member; removing dns keeps the static one.
  PoolConfig both = pool;
  both.replicas = {want};
  set.Update(both, FastBalancer(), FastHealth());
  both.dns.reset();
  set.Update(both, FastBalancer(), FastHealth());
  EXPECT_EQ(set.members(), std::vector<std::string>{want});
  EXPECT_TRUE(ViewOf(set, want).eligible);  // its state was kept
  set.Update(Pool({}), FastBalancer(), FastHealth());
  EXPECT_TRUE(set.members().empty());
  set.Stop();
}

TEST(ReplicaSetAuth, PollsSendThePoolKeyAndFollowAReload) {
  Upstream up;
  FakeReplica fake;
  ASSERT_TRUE(fake.ok());
  PoolConfig pool = Pool({fake.url()});
  pool.api_key = "k1";
  ReplicaSet set(up.io(), pool, FastBalancer(), FastHealth());
  set.Start();
  ASSERT_TRUE(WaitFor([&] { return fake.last_auth() == "Bearer k1"; }));
  pool.api_key = "k2";
  set.Update(pool, FastBalancer(), FastHealth());
  ASSERT_TRUE(WaitFor([&] { return fake.last_auth() == "Bearer k2"; }));
  EXPECT_GT(fake.count("/ready"), 0);
  EXPECT_GT(fake.count("/metrics"), 0);
  EXPECT_GT(fake.count("/v1/kv/events"), 0);
  set.Stop();
}

// The fake replica itself: chosen status, latency and SSE chunks on the generation routes.
TEST(FakeReplica, ServesChosenCompletionsLatencyAndStreams) {
  FakeReplica fake;
  ASSERT_TRUE(fake.ok());
  boost::asio::io_context io;
  auto url = http::ParseUrl(fake.url());
  ASSERT_TRUE(url.ok());
  http::HttpClient client(io, *url, "");
  auto call = [&](std::string* body) {
    http::HttpResult out;
    boost::asio::co_spawn(
        io,
        [&]() -> boost::asio::awaitable<void> {
          out = co_await client.Request("POST", "/v1/completions", R"({"prompt":"x"})",
                                        Clock::now() + std::chrono::seconds(5),
                                        [body](std::string_view p) {
                                          body->append(p);
                                          return Status::Ok();
                                        });
        },
        boost::asio::detached);
    io.restart();
    io.run();
    return out;
  };
  std::string body;
  EXPECT_EQ(call(&body).http_status, 200);
  EXPECT_NE(body.find("text_completion"), std::string::npos);
  fake.SetCompletion(503, R"({"error":{"message":"overloaded"}})", milliseconds(150));
  auto t0 = Clock::now();
  body.clear();
  http::HttpResult r = call(&body);
  EXPECT_EQ(r.http_status, 503);
  EXPECT_NE(r.error_body.find("overloaded"), std::string::npos);
  EXPECT_GE(Clock::now() - t0, milliseconds(150));
  fake.SetCompletion(200, R"({"choices":[{"text":"a"}]})", milliseconds(0));
  fake.SetStream(3);
  body.clear();
  EXPECT_EQ(call(&body).http_status, 200);
  size_t events = 0;
  for (size_t p = body.find("data: "); p != std::string::npos; p = body.find("data: ", p + 1))
    ++events;
  EXPECT_EQ(events, 4u);  // 3 chunks + [DONE]
  EXPECT_EQ(fake.count("/v1/completions"), 3);
}

TEST(ReplicaSetDns, SetDnsMembersAddsAndRemoves) {
  boost::asio::io_context io;
  ReplicaSet set(io, Pool({"http://10.0.0.9:80"}), BalancerConfig{}, HealthConfig{});
  set.SetDnsMembers({"http://10.1.0.1:80", "http://10.1.0.2:80", "http://10.0.0.9:80"});
  EXPECT_EQ(set.members().size(), 3u);
  set.SetDnsMembers({"http://10.1.0.2:80"});
  EXPECT_EQ(set.members(), (std::vector<std::string>{"http://10.0.0.9:80", "http://10.1.0.2:80"}));
  set.SetDnsMembers({});
  EXPECT_EQ(set.members(), std::vector<std::string>{"http://10.0.0.9:80"});
}

TEST(ReplicaSetUpdate, ReloadKeepsTheStateOfReplicasThatRemain) {
  boost::asio::io_context io;
  const std::string a = "http://10.0.0.1:80", b = "http://10.0.0.2:80", c = "http://10.0.0.3:80";
  ReplicaSet set(io, Pool({a, b}), BalancerConfig{}, HealthConfig{});
  const auto now = Clock::now();
  set.ObserveReady(a, true, 200, "", now);
  set.ObserveReady(b, true, 200, "", now);
  for (int i = 0; i < 3; ++i) set.OnFinished(b, false, 0, now);
  EXPECT_TRUE(ViewOf(set, b).ejected);
  set.Update(Pool({b, c}), BalancerConfig{}, HealthConfig{});
  EXPECT_EQ(set.members(), (std::vector<std::string>{b, c}));
  EXPECT_TRUE(ViewOf(set, b).ejected);
  EXPECT_FALSE(ViewOf(set, c).eligible);  // new: waits for its first /ready
  // The ejection time passed and /ready succeeds: readmitted.
  set.ObserveReady(b, true, 200, "", now + std::chrono::seconds(2));
  EXPECT_TRUE(ViewOf(set, b).eligible);
}

}  // namespace
}  // namespace strata::gateway
