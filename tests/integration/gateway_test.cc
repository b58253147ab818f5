// `strata gateway` end to end: real `strata serve` replicas (the bundled tiny model, one thread)
// behind a real gateway process, all on 127.0.0.1. Covers proxying (JSON and SSE, answers equal
// to the replica's own), the x-strata-route / x-strata-replica headers, routing rules, tenants
// (401, 429 + Retry-After), failover after kill -9 with ejection and readmission, SIGHUP reload,
// /v1/models, /metrics and prefix affinity.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "integration/http_test_client.h"
#include "integration/run_strata.h"
#include "integration/serve_process.h"

namespace strata::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// A port that was free a moment ago (for a replica that must come back on the same address).
int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 0;
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::unique_ptr<ServeProcess> StartReplica(int port = 0) {
  return std::make_unique<ServeProcess>(
      std::vector<std::string>{STRATA_BIN, "serve", "--port", std::to_string(port), "--model",
                               STRATA_DEFAULT_MODEL, "--threads", "1", "--kv-cache-memory",
                               "32MiB"},
      std::vector<std::string>{});
}

std::string Url(int port) { return "http://127.0.0.1:" + std::to_string(port); }

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata-gw-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    gateway_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string WriteConfig(const std::string& yaml) {
    std::string path = (dir_ / "gateway.yaml").string();
    std::ofstream(path) << yaml;
    return path;
  }
  void StartGateway(const std::string& yaml) {
    const std::string path = WriteConfig(yaml);
    gateway_ = std::make_unique<ServeProcess>(
        std::vector<std::string>{STRATA_BIN, "gateway", "--config", path, "--port", "0"},
        std::vector<std::string>{}, "strata gateway: ready");
    ASSERT_GT(gateway_->port(), 0) << gateway_->startup_output();
  }
  // Waits until the gateway's /ready is 200 (its health checks saw a replica).
  void WaitReady() {
    for (int i = 0; i < 200; ++i) {
      if (HttpCall(gateway_->port(), "GET", "/ready").status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    FAIL() << "gateway never became ready";
  }
  HttpReply Complete(const json& body, const std::vector<std::string>& headers = {}) {
    return HttpCall(gateway_->port(), "POST", "/v1/completions", body.dump(), headers);
  }
  std::string Metrics() { return HttpCall(gateway_->port(), "GET", "/metrics").body; }

  fs::path dir_;
  std::unique_ptr<ServeProcess> gateway_;
};

std::string OnePool(const std::vector<int>& ports, const std::string& extra = "") {
  std::string yaml = "pools:\n  - name: general\n    replicas:\n";
  for (int p : ports) yaml += "      - " + Url(p) + "\n";
  yaml += "routes:\n  - name: default\n    to: general\n";
  yaml +=
      "health:\n  interval_ms: 100\n  timeout_ms: 500\n  eject_after_failures: 1\n"
      "  ejection_base_ms: 200\n  ejection_max_ms: 1000\n";
  yaml += "access_log: off\n" + extra;
  return yaml;
}

TEST(GatewayCli, RefusesABadConfigNamingTheKey) {
  const fs::path path = fs::temp_directory_path() / ("strata-gw-bad-" + std::to_string(getpid()));
  std::ofstream(path) << "pools:\n  - name: a\n    replicas: [ftp://x]\nroutes:\n  - name: r\n"
                         "    to: a\n";
  const std::string cmd =
      std::string(STRATA_BIN) + " gateway --port 0 --config " + path.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = pclose(p);
  fs::remove(path);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("pools[0].replicas[0]"), std::string::npos) << out;
}

TEST_F(GatewayTest, ProxiesJsonAndSseWithRouteAndReplicaHeaders) {
  auto r1 = StartReplica(), r2 = StartReplica();
  ASSERT_GT(r1->port(), 0);
  ASSERT_GT(r2->port(), 0);
  StartGateway(OnePool({r1->port(), r2->port()}));
  WaitReady();
  const json req = {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}};
  HttpReply direct = HttpCall(r1->port(), "POST", "/v1/completions", req.dump());
  ASSERT_EQ(direct.status, 200) << direct.body;
  const std::string want = json::parse(direct.body)["choices"][0]["text"];
  std::set<std::string> replicas;
  for (int i = 0; i < 6; ++i) {
    HttpReply r = Complete(req);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["x-strata-route"], "default");
    replicas.insert(r.headers["x-strata-replica"]);
    EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], want);
  }
  for (const std::string& u : replicas)
    EXPECT_TRUE(u == Url(r1->port()) || u == Url(r2->port())) << u;

  // SSE: the same events as the replica sends, ending in [DONE].
  json sreq = req;
  sreq["stream"] = true;
  HttpReply ds = HttpCall(r2->port(), "POST", "/v1/completions", sreq.dump());
  HttpReply gs = Complete(sreq);
  ASSERT_EQ(gs.status, 200) << gs.body;
  EXPECT_NE(gs.headers["content-type"].find("text/event-stream"), std::string::npos);
  EXPECT_EQ(gs.headers["x-strata-route"], "default");
  auto dev = SseData(ds.body), gev = SseData(gs.body);
  ASSERT_FALSE(gev.empty());
  EXPECT_EQ(gev.back(), "[DONE]");
  EXPECT_EQ(gev.size(), dev.size());

  // /v1/models is the union of the pool's models; /metrics has the gateway's families.
  std::string models;
  for (int i = 0; i < 100 && models.find("strata-tiny") == std::string::npos; ++i) {
    models = HttpCall(gateway_->port(), "GET", "/v1/models").body;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(models.find("strata-tiny"), std::string::npos) << models;
  const std::string m = Metrics();
  EXPECT_NE(m.find("strata_gateway:requests_total{route=\"default\",pool=\"general\""),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("strata_gateway:time_to_first_token_seconds_bucket"), std::string::npos);
  EXPECT_NE(m.find("strata_gateway:routing_decisions_total"), std::string::npos);
}

TEST_F(GatewayTest, RoutesByPriorityHeaderAndModel) {
  auto a = StartReplica(), b = StartReplica();
  ASSERT_GT(a->port(), 0);
  ASSERT_GT(b->port(), 0);
  StartGateway("pools:\n  - name: a\n    labels: {gpu: l4, tier.class: x}\n    replicas: [" +
               Url(a->port()) +
               "]\n  - name: b\n"
               "    replicas: [" +
               Url(b->port()) +
               "]\n"
               "routes:\n"
               "  - name: gold\n    match: {priority: gold}\n    to: b\n"
               "  - name: blue\n    match: {header: {x-team: blue}}\n    to: b\n"
               "  - name: legal\n    match: {adapter_prefix: finetune-legal-}\n    to: b\n"
               "  - name: rest\n    to: a\n"
               "access_log: off\n");
  WaitReady();
  const json base = {{"prompt", "Hi"}, {"max_tokens", 2}};
  HttpReply r = Complete(base);
  EXPECT_EQ(r.headers["x-strata-route"], "rest");
  EXPECT_EQ(r.headers["x-strata-replica"], Url(a->port()));
  json gold = base;
  gold["priority"] = "gold";
  r = Complete(gold);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["x-strata-route"], "gold");
  EXPECT_EQ(r.headers["x-strata-replica"], Url(b->port()));
  r = Complete(base, {"X-Team: blue"});
  EXPECT_EQ(r.headers["x-strata-route"], "blue");
  EXPECT_NE(Metrics().find("strata_gateway:pool_info{pool=\"a\",label_gpu=\"l4\","
                           "label_tier_class=\"x\"} 1"),
            std::string::npos)
      << Metrics();
  // The adapter (`model` here) picks the route; the replica does not serve it: its 404 is relayed.
  json legal = base;
  legal["model"] = "finetune-legal-v2";
  r = Complete(legal);
  EXPECT_EQ(r.headers["x-strata-route"], "legal");
  EXPECT_EQ(r.status, 404) << r.body;
  // A bad priority is the gateway's own 400, naming the field.
  json bad = base;
  bad["priority"] = "platinum";
  r = Complete(bad);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("priority"), std::string::npos);
}

TEST_F(GatewayTest, TenantsNeedAKeyAndGet429WithRetryAfter) {
  auto a = StartReplica();
  ASSERT_GT(a->port(), 0);
  StartGateway(OnePool({a->port()},
                       "tenants:\n  - name: acme\n    api_keys: [k-acme]\n"
                       "    requests_per_minute: 2\n"));
  WaitReady();
  const json req = {{"prompt", "Hi"}, {"max_tokens", 2}};
  EXPECT_EQ(Complete(req).status, 401);
  EXPECT_EQ(Complete(req, {"Authorization: Bearer wrong"}).status, 401);
  EXPECT_EQ(Complete(req, {"Authorization: Bearer k-acme"}).status, 200);
  EXPECT_EQ(Complete(req, {"Authorization: Bearer k-acme"}).status, 200);
  HttpReply r = Complete(req, {"Authorization: Bearer k-acme"});
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_FALSE(r.headers["retry-after"].empty());
  EXPECT_GE(std::atoi(r.headers["retry-after"].c_str()), 1);
  EXPECT_NE(r.body.find("requests_per_minute"), std::string::npos) << r.body;
  EXPECT_NE(Metrics().find("strata_gateway:rejections_total"), std::string::npos);
}

TEST_F(GatewayTest, PoolCapacityGoldWaitsBronzeGets429) {
  auto a = StartReplica();
  ASSERT_GT(a->port(), 0);
  std::string yaml = OnePool({a->port()});
  yaml.replace(yaml.find("    replicas:"), 0, "    max_in_flight: 1\n");
  yaml += "admission:\n  gold_max_wait_ms: 30000\n";
  StartGateway(yaml);
  WaitReady();
  // One long request holds the pool's only slot (4 choices x 1900 tokens).
  const json slow = {{"prompt", "Hi"}, {"max_tokens", 1900}, {"n", 4}, {"ignore_eos", true}};
  HttpReply first;
  std::thread t([&] { first = Complete(slow); });
  bool busy = false;
  for (int i = 0; i < 400 && !busy; ++i) {
    busy = Metrics().find("strata_gateway:pool_in_flight{pool=\"general\"} 1") != std::string::npos;
    if (!busy) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(busy);
  json bronze = {{"prompt", "Hi"}, {"max_tokens", 2}, {"priority", "bronze"}};
  HttpReply b = Complete(bronze);
  json gold = bronze;
  gold["priority"] = "gold";
  HttpReply g = Complete(gold);  // waits (gold_max_wait_ms 2000) for the slot
  t.join();
  EXPECT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(b.status, 429) << b.body;
  EXPECT_NE(b.body.find("max_in_flight"), std::string::npos) << b.body;
  EXPECT_FALSE(b.headers["retry-after"].empty());
  EXPECT_EQ(g.status, 200) << g.body;
  EXPECT_NE(Metrics().find("reason=\"pool_capacity\""), std::string::npos);
}

TEST_F(GatewayTest, Kill9FailsOverEjectsAndReadmits) {
  const int p1 = FreePort();
  auto r1 = StartReplica(p1);
  auto r2 = StartReplica();
  ASSERT_GT(r1->port(), 0);
  ASSERT_GT(r2->port(), 0);
  StartGateway(OnePool({r1->port(), r2->port()}));
  WaitReady();
  const json req = {{"prompt", "Hello"}, {"max_tokens", 2}};
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Complete(req).status, 200);
  r1->Signal(SIGKILL);
  r1->Wait(5);
  const auto killed = std::chrono::steady_clock::now();
  // The ejection is timed from the kill by a watcher of its own, while the requests below run:
  // their duration (10 completions on a loaded machine can take seconds) is not the gateway's.
  const std::string down =
      "strata_gateway:replica_eligible{pool=\"general\",replica=\"" + Url(p1) + "\"} 0";
  std::chrono::steady_clock::time_point ejected_at{};
  bool ejected = false;
  std::string last_metrics;
  std::thread watcher([&] {
    while (!ejected && std::chrono::steady_clock::now() - killed < std::chrono::seconds(3)) {
      last_metrics = HttpCall(gateway_->port(), "GET", "/metrics").body;
      ejected = last_metrics.find(down) != std::string::npos;
      if (ejected) ejected_at = std::chrono::steady_clock::now();
      if (!ejected) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  for (int i = 0; i < 10; ++i) {
    HttpReply r = Complete(req);
    EXPECT_EQ(r.status, 200) << r.body;  // a connect failure is retried on the other replica
    EXPECT_EQ(r.headers["x-strata-replica"], Url(r2->port()));
  }
  watcher.join();
  EXPECT_TRUE(ejected) << last_metrics;
  if (ejected) {
    EXPECT_LT(ejected_at - killed, std::chrono::seconds(1) + std::chrono::milliseconds(500));
  }
  EXPECT_NE(Metrics().find("strata_gateway:retries_total"), std::string::npos);

  // Back on the same address: readmitted by the health checks.
  r1 = StartReplica(p1);
  ASSERT_EQ(r1->port(), p1);
  const std::string up =
      "strata_gateway:replica_eligible{pool=\"general\",replica=\"" + Url(p1) + "\"} 1";
  bool back = false;
  for (int i = 0; i < 200 && !back; ++i) {
    back = Metrics().find(up) != std::string::npos;
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(back) << Metrics();
}

TEST_F(GatewayTest, SighupReloadsAndKeepsTheOldConfigOnError) {
  auto a = StartReplica();
  ASSERT_GT(a->port(), 0);
  StartGateway(OnePool({a->port()}));
  WaitReady();
  const json req = {{"prompt", "Hi"}, {"max_tokens", 2}};
  EXPECT_EQ(Complete(req).headers["x-strata-route"], "default");
  std::string next = OnePool({a->port()});
  next.replace(next.find("name: default"), 13, "name: renamed");
  WriteConfig(next);
  gateway_->Signal(SIGHUP);
  std::string route;
  for (int i = 0; i < 100 && route != "renamed"; ++i) {
    route = Complete(req).headers["x-strata-route"];
    if (route != "renamed") std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(route, "renamed");
  WriteConfig("pools: [oops");  // invalid: the running config stays
  gateway_->Signal(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  HttpReply r = Complete(req);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["x-strata-route"], "renamed");
  EXPECT_NE(Metrics().find("strata_gateway:config_reloads_total{result=\"error\"} 1"),
            std::string::npos);
  // SIGTERM drains and exits 0.
  gateway_->Signal(SIGTERM);
  EXPECT_EQ(gateway_->Wait(10), 0);
}

TEST_F(GatewayTest, ClientDisconnectCancelsTheUpstreamRequest) {
  auto a = StartReplica();
  ASSERT_GT(a->port(), 0);
  StartGateway(OnePool({a->port()}));
  WaitReady();
  const json req = {{"prompt", "Tell me a long story"},
                    {"max_tokens", 4000},
                    {"stream", true},
                    {"ignore_eos", true}};
  {
    HttpConn c(gateway_->port());
    ASSERT_TRUE(c.Send("POST", "/v1/completions", req.dump()));
    ASSERT_TRUE(
        c.ReadUntil([](const std::string& b) { return b.find("data: ") != std::string::npos; }));
  }  // closed mid-stream
  // The replica saw the disconnect: the request ended as `abort`, not by running to its length.
  bool aborted = false;
  std::string m;
  for (int i = 0; i < 200 && !aborted; ++i) {
    m = HttpCall(a->port(), "GET", "/metrics").body;
    aborted =
        m.find("finished_reason=\"abort\"} 1") != std::string::npos &&
        m.find("strata:num_requests_running{model_name=\"strata-tiny\"} 0") != std::string::npos;
    if (!aborted) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(aborted) << m;
}

TEST_F(GatewayTest, RepeatedPrefixGoesWhereItIsCached) {
  auto r1 = StartReplica(), r2 = StartReplica();
  ASSERT_GT(r1->port(), 0);
  ASSERT_GT(r2->port(), 0);
  StartGateway(OnePool({r1->port(), r2->port()}));
  WaitReady();
  // A 256-token id prompt (16 blocks of 16): after the first request, its blocks are on one
  // replica, which the balancer learns from the replica's KV events.
  std::vector<int> ids;
  ids.reserve(256);
  for (int i = 0; i < 256; ++i) ids.push_back(100 + (i * 37) % 400);
  const json req = {{"prompt", ids}, {"max_tokens", 1}};
  HttpReply first = Complete(req);
  ASSERT_EQ(first.status, 200) << first.body;
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // a KV-event poll or two
  for (int i = 0; i < 4; ++i) {
    HttpReply r = Complete(req);
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.headers["x-strata-replica"], first.headers["x-strata-replica"]);
  }
  const std::string m = Metrics();
  EXPECT_NE(m.find("strata_gateway:routing_decisions_total{route=\"default\",pool=\"general\","
                   "reason=\"affinity\"}"),
            std::string::npos)
      << m;
}

// Metric value of the one sample whose line starts with `series` (-1 when absent).
double Sample(const std::string& text, const std::string& series) {
  size_t at = text.find(series + " ");
  if (at == std::string::npos) return -1;
  return std::atof(text.c_str() + at + series.size() + 1);
}

// The value of `series` in what `scrape` returns once it is `want`, or the last value seen after
// a deadline of 20 s (metrics are recorded as a request ends, which may be just after its client
// has the answer).
template <typename Scrape>
double SampleOnce(Scrape scrape, const std::string& series, double want) {
  double v = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((v = Sample(scrape(), series)) != want && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return v;
}

// Waits until the gateway has applied what the replica's /v1/kv/events says now (it holds the
// blocks of a request just answered): the replica serves two more event polls — the first was
// answered after the blocks were there, the gateway's poller issues the second only after it
// applied the first. False after a deadline of 20 s.
bool WaitKvEventsApplied(int replica_port) {
  const std::string polls =
      "strata:http_requests_total{model_name=\"strata-tiny\",route=\"/v1/kv/events\","
      "status=\"200\"}";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool held = false;
  while (!held && std::chrono::steady_clock::now() < deadline) {
    const json ev = json::parse(HttpCall(replica_port, "GET", "/v1/kv/events").body, nullptr,
                                /*allow_exceptions=*/false);
    if (ev.is_object() && ev.contains("events") && ev["events"].is_array())
      for (const json& e : ev["events"])
        held = held || (e.is_object() && e.contains("op") && e["op"] == "add");
    if (!held) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double seen = Sample(HttpCall(replica_port, "GET", "/metrics").body, polls);
  if (!held || seen < 0) return false;
  while (Sample(HttpCall(replica_port, "GET", "/metrics").body, polls) < seen + 2) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// With the pool's tokenizer, the gateway counts a text prompt's tokens exactly as the replica
// does, and predicts from the replica's KV events exactly the prefix the replica then reuses.
TEST_F(GatewayTest, TextPromptsAreTokenizedAndHashedLikeTheReplica) {
  auto a = StartReplica();
  ASSERT_GT(a->port(), 0);
  std::string yaml = OnePool({a->port()});
  yaml.replace(yaml.find("    replicas:"), 0,
               std::string("    tokenizer: ") + STRATA_DEFAULT_MODEL + "\n");
  StartGateway(yaml);
  WaitReady();
  std::string text;
  for (int i = 0; i < 40; ++i) text += "The quick brown fox " + std::to_string(i) + " jumps. ";
  const json req = {{"prompt", text}, {"max_tokens", 1}};
  HttpReply r = Complete(req);
  ASSERT_EQ(r.status, 200) << r.body;
  const int64_t replica_tokens = json::parse(r.body)["usage"]["prompt_tokens"];
  const std::string labels = "{route=\"default\",pool=\"general\"}";
  const auto gateway_metrics = [this] { return Metrics(); };
  // The gateway records the predicted cached tokens before the prompt tokens (gateway_metrics.cc
  // ObserveRequest): once the prompt tokens count the request, so do the predicted ones.
  EXPECT_EQ(SampleOnce(gateway_metrics, "strata_gateway:prompt_tokens_total" + labels,
                       static_cast<double>(replica_tokens)),
            replica_tokens);
  EXPECT_EQ(Sample(Metrics(), "strata_gateway:predicted_cached_tokens_total" + labels), 0);

  ASSERT_TRUE(WaitKvEventsApplied(a->port())) << "the gateway never polled the KV events";
  const std::string hits = "strata:prefix_cache_hits_total{model_name=\"strata-tiny\"}";
  const std::string queries = "strata:prefix_cache_queries_total{model_name=\"strata-tiny\"}";
  const std::string before = HttpCall(a->port(), "GET", "/metrics").body;
  const double hits_before = Sample(before, hits), queries_before = Sample(before, queries);
  ASSERT_GE(queries_before, 0) << before;
  ASSERT_EQ(Complete(req).status, 200);
  // The replica's engine publishes its counters at the end of the step that answered (the client
  // may have the answer first): read the hits from the first scrape whose prefix queries count the
  // request (both are published together, at once), within a deadline of 20 s.
  std::string after;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (Sample(after = HttpCall(a->port(), "GET", "/metrics").body, queries) <= queries_before &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GT(Sample(after, queries), queries_before) << "the replica never counted the request";
  const double reused = Sample(after, hits) - hits_before;
  ASSERT_EQ(SampleOnce(gateway_metrics, "strata_gateway:prompt_tokens_total" + labels,
                       2.0 * static_cast<double>(replica_tokens)),
            2 * replica_tokens);
  const double predicted =
      Sample(Metrics(), "strata_gateway:predicted_cached_tokens_total" + labels);
  EXPECT_GT(reused, 0);
  EXPECT_EQ(predicted, reused) << "the gateway's block keys differ from the replica's";
}

// The server's hostile-request battery through the gateway: random invalid requests of every
// route, relayed or refused, never a 5xx, and the gateway alive at the end.
TEST_F(GatewayTest, FloodOfInvalidRequestsNo5xxAndTheGatewaySurvives) {
  auto a = StartReplica();
  ASSERT_GT(a->port(), 0);
  StartGateway(OnePool({a->port()}));
  WaitReady();
  RunResult r = RunStrata("bench flood --port " + std::to_string(gateway_->port()) +
                          " --server-pid " + std::to_string(gateway_->pid()) +
                          " --requests 5000 --connections 8 --timeout 20 --seed 5");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(" 5xx 0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("server alive and answering; ok"), std::string::npos) << r.out;
  EXPECT_EQ(Complete({{"prompt", "Hi"}, {"max_tokens", 2}}).status, 200);
}

}  // namespace
}  // namespace strata::testing
