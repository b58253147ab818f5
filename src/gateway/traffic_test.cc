// The gateway's traffic management end to end, against in-process fake replicas: the arm of a
// split (sticky, x-strata-arm, split_requests_total), the admin API (weights, canary control,
// its key), and a canary rolled back when its replica is slow.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gateway/fake_replica_test_util.h"
#include "gateway/gateway.h"
#include "gateway/split.h"
#include "integration/http_test_client.h"

namespace strata::gateway {
namespace {

using nlohmann::json;
using strata::testing::HttpCall;
using strata::testing::HttpReply;
using testing::FakeReplica;

// A Gateway from YAML (with {v1} {v2} replaced by the replicas' URLs) behind a front HttpServer.
class Front {
 public:
  explicit Front(const std::string& yaml) {
    auto cfg = ParseGatewayConfig(yaml);
    EXPECT_TRUE(cfg.ok()) << cfg.status().message();
    if (!cfg.ok()) return;
    auto gw = Gateway::Create(*cfg);
    EXPECT_TRUE(gw.ok()) << gw.status().message();
    if (!gw.ok()) return;
    gw_ = std::move(*gw);
    gw_->Start();
    http::HttpServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.io_threads = 2;
    Gateway* g = gw_.get();
    auto s = http::HttpServer::Start(
        o, [g](http::HttpRequest req, std::shared_ptr<http::Responder> out) {
          g->Handle(std::move(req), std::move(out));
        });
    EXPECT_TRUE(s.ok());
    if (s.ok()) server_ = std::move(*s);
  }
  ~Front() {
    if (server_) server_->Stop();
    if (gw_) gw_->Stop();
  }
  Gateway& gw() { return *gw_; }
  int port() const { return server_ ? server_->port() : 0; }
  // Waits until every pool has an eligible replica (the first /ready checks).
  bool WaitEligible(double timeout_s = 10) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < until) {
      bool all = true;
      for (const auto& [name, set] : gw_->snapshot()->pools) all = all && set->any_eligible();
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  HttpReply Post(const json& body, std::vector<std::string> headers = {}) {
    return HttpCall(port(), "POST", "/v1/completions", body.dump(), headers);
  }
  HttpReply Call(const std::string& method, const std::string& path, const std::string& body = "",
                 std::vector<std::string> headers = {}) {
    return HttpCall(port(), method, path, body, headers);
  }

 private:
  std::unique_ptr<Gateway> gw_;
  std::unique_ptr<http::HttpServer> server_;
};

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
  return s;
}

std::string SplitYaml(const FakeReplica& v1, const FakeReplica& v2, const std::string& extra) {
  std::string y = R"(
pools:
  - {name: v1, replicas: [{v1}]}
  - {name: v2, replicas: [{v2}]}
routes:
  - name: chat
    to: [{pool: v1, weight: 50}, {pool: v2, weight: 50}]
{extra}
health: {interval_ms: 20}
access_log: "off"
)";
  y = Replace(y, "{v1}", v1.url());
  y = Replace(y, "{v2}", v2.url());
  return Replace(y, "{extra}", extra);
}

double Counter(Gateway& g, const std::string& series) {
  const std::string text = g.metrics().Render();
  const size_t p = text.find(series + " ");
  if (p == std::string::npos) return 0;
  return std::stod(text.substr(p + series.size() + 1));
}

TEST(TrafficSplit, EachUserKeepsTheArmTheHashChoosesAndTheHeaderNamesIt) {
  FakeReplica v1, v2;
  ASSERT_TRUE(v1.ok() && v2.ok());
  Front f(SplitYaml(v1, v2, ""));
  ASSERT_TRUE(f.WaitEligible());
  const RouteConfig& route = f.gw().snapshot()->cfg->routes[0];
  int on_v1 = 0, on_v2 = 0;
  for (int i = 0; i < 40; ++i) {
    const std::string user = "user-" + std::to_string(i);
    const size_t want = ChooseArm("chat", {50, 50}, "user:" + user, 0).index;
    for (int rep = 0; rep < 2; ++rep) {  // twice: the same arm both times
      HttpReply r = f.Post({{"prompt", "hi"}, {"user", user}});
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(r.headers["x-strata-arm"], route.arms[want].pool) << user;
      EXPECT_EQ(r.headers["x-strata-route"], "chat");
    }
    (want == 0 ? on_v1 : on_v2) += 2;
  }
  EXPECT_EQ(v1.count("/v1/completions"), on_v1);
  EXPECT_EQ(v2.count("/v1/completions"), on_v2);
  EXPECT_GT(on_v1, 0);
  EXPECT_GT(on_v2, 0);
  EXPECT_EQ(Counter(f.gw(), R"(strata_gateway:split_requests_total{route="chat",pool="v1"})"),
            on_v1);
  EXPECT_EQ(Counter(f.gw(), R"(strata_gateway:split_requests_total{route="chat",pool="v2"})"),
            on_v2);
}

TEST(TrafficSplit, AHeaderKeyAndAZeroWeightArm) {
  FakeReplica v1, v2;
  ASSERT_TRUE(v1.ok() && v2.ok());
  std::string y = SplitYaml(v1, v2, "    sticky: {key: header, header: x-session-id}\n");
  y = Replace(y, "weight: 50}, {pool: v2, weight: 50}", "weight: 0}, {pool: v2, weight: 1}");
  Front f(y);
  ASSERT_TRUE(f.WaitEligible());
  for (int i = 0; i < 10; ++i) {
    HttpReply r = f.Post({{"prompt", "hi"}}, {"x-session-id: s" + std::to_string(i)});
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.headers["x-strata-arm"], "v2");
  }
  HttpReply r = f.Post({{"prompt", "hi"}});  // no key: the random draw, still by weight
  EXPECT_EQ(r.headers["x-strata-arm"], "v2");
  EXPECT_EQ(v1.count("/v1/completions"), 0);
}

TEST(TrafficSplit, ASinglePoolRouteHasNoArmHeader) {
  FakeReplica v1;
  ASSERT_TRUE(v1.ok());
  Front f(Replace(R"(
pools: [{name: v1, replicas: [{v1}]}]
routes: [{name: r, to: v1}]
health: {interval_ms: 20}
access_log: "off"
)",
                  "{v1}", v1.url()));
  ASSERT_TRUE(f.WaitEligible());
  HttpReply r = f.Post({{"prompt", "hi"}, {"user", "u"}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.count("x-strata-arm"), 0u);
}

}  // namespace
}  // namespace strata::gateway
