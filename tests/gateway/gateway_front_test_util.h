// A Gateway for deterministic gateway tests: built from YAML, started, behind a front
// http::HttpServer on 127.0.0.1, port 0 (two I/O threads), with helpers to call it. A YAML the
// gateway refuses fails the test (EXPECT) and leaves ok() false. Thread contract: the object is
// used from the test's thread; the gateway and the server run their own threads until the
// destructor stops them (server first, so no request is in flight when the gateway stops).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gateway/gateway.h"
#include "http/server.h"
#include "integration/http_test_client.h"

namespace strata::gateway::testing {

class GatewayFront {
 public:
  explicit GatewayFront(const std::string& yaml) {
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
  ~GatewayFront() {
    if (server_) server_->Stop();
    if (gw_) gw_->Stop();
  }
  GatewayFront(const GatewayFront&) = delete;
  GatewayFront& operator=(const GatewayFront&) = delete;

  bool ok() const { return gw_ && server_; }
  Gateway& gw() { return *gw_; }
  int port() const { return server_ ? server_->port() : 0; }

  // Waits until every pool has an eligible replica (the first /ready checks), or with
  // `every_replica` until every replica of every pool is eligible.
  bool WaitEligible(double timeout_s = 10, bool every_replica = false) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < until) {
      bool all = true;
      for (const auto& [name, set] : gw_->snapshot()->pools) {
        if (!every_replica) {
          all = all && set->any_eligible();
          continue;
        }
        for (const ReplicaView& v : set->Snapshot()) all = all && v.eligible;
      }
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  strata::testing::HttpReply Post(const nlohmann::json& body,
                                  const std::vector<std::string>& headers = {}) {
    return strata::testing::HttpCall(port(), "POST", "/v1/completions", body.dump(), headers);
  }
  strata::testing::HttpReply Call(const std::string& method, const std::string& path,
                                  const std::string& body = "",
                                  const std::vector<std::string>& headers = {}) {
    return strata::testing::HttpCall(port(), method, path, body, headers);
  }
  strata::testing::HttpReply Get(const std::string& path) { return Call("GET", path); }
  std::string Metrics() { return Get("/metrics").body; }

 private:
  std::unique_ptr<Gateway> gw_;
  std::unique_ptr<http::HttpServer> server_;
};

}  // namespace strata::gateway::testing
