#include "control/prom_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>

#include "http/server.h"

namespace strata::control {
namespace {

// A stand-in for Prometheus: answers /api/v1/query with `body` (and `status`), remembering the
// query string it was sent.
struct FakeProm {
  std::mutex mu;
  std::string last_query;
  int status = 200;
  std::string body;
  std::unique_ptr<http::HttpServer> server;

  void Start() {
    http::HttpServerOptions o;
    o.port = 0;
    o.io_threads = 1;
    auto s = http::HttpServer::Start(
        o, [this](const http::HttpRequest& req, const std::shared_ptr<http::Responder>& out) {
          std::lock_guard<std::mutex> lock(mu);
          last_query = req.path + "?" + req.query;
          http::HttpResponse r;
          r.status = status;
          r.body = body;
          out->Respond(std::move(r));
        });
    ASSERT_TRUE(s.ok()) << s.status().message();
    server = std::move(*s);
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(server->port()); }
};

TEST(UrlEncode, KeepsUnreservedEncodesTheRest) {
  EXPECT_EQ(UrlEncode("a-b_c.d~9"), "a-b_c.d~9");
  EXPECT_EQ(UrlEncode(R"(up{role="replica"} == 1)"), "up%7Brole%3D%22replica%22%7D%20%3D%3D%201");
}

TEST(ParseQueryResponse, VectorScalarAndErrors) {
  auto v = ParseQueryResponse(R"({"status":"success","data":{"resultType":"vector","result":[)"
                              R"({"metric":{"pool":"a"},"value":[1700000000.1,"2.5"]},)"
                              R"({"metric":{"pool":"b"},"value":[1700000000.1,"NaN"]},)"
                              R"({"metric":{},"value":[1700000000.1,"+Inf"]}]}})");
  ASSERT_TRUE(v.ok()) << v.status().message();
  ASSERT_EQ(v->size(), 3u);
  EXPECT_EQ((*v)[0].labels.at("pool"), "a");
  EXPECT_EQ((*v)[0].value, 2.5);
  EXPECT_TRUE(std::isnan((*v)[1].value));
  EXPECT_TRUE(std::isinf((*v)[2].value));
  auto s =
      ParseQueryResponse(R"({"status":"success","data":{"resultType":"scalar","result":[1,"4"]}})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)[0].value, 4);
  auto e = ParseQueryResponse(
      R"({"status":"error","errorType":"bad_data","error":"parse error at char 3"})");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("bad_data: parse error"), std::string::npos);
  for (
      const char* bad :
      {"", "[]", "{\"status\":1}", R"({"status":"success"})",
       R"({"status":"success","data":{"resultType":"matrix","result":[]}})",
       R"({"status":"success","data":{"resultType":"vector","result":[{"value":[1,2]}]}})",
       R"({"status":"success","data":{"resultType":"vector","result":[{"value":[1,"x"]}]}})",
       R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":1},"value":[1,"2"]}]}})"}) {
    EXPECT_FALSE(ParseQueryResponse(bad).ok()) << bad;
  }
}

TEST(PromClient, QueriesAndGroupsByLabel) {
  FakeProm prom;
  prom.body = R"({"status":"success","data":{"resultType":"vector","result":[)"
              R"({"metric":{"pool":"general"},"value":[1,"3"]},)"
              R"({"metric":{"pool":"gold"},"value":[1,"0.25"]},)"
              R"({"metric":{"other":"x"},"value":[1,"9"]}]}})";
  prom.Start();
  auto client = PromClient::Create(prom.Url());
  ASSERT_TRUE(client.ok());
  auto by = client->QueryBy(R"(count by (pool) (up{role="replica"} == 1))", "pool");
  ASSERT_TRUE(by.ok()) << by.status().message();
  EXPECT_EQ(by->size(), 2u);
  EXPECT_EQ(by->at("general"), 3);
  EXPECT_EQ(by->at("gold"), 0.25);
  std::lock_guard<std::mutex> lock(prom.mu);
  EXPECT_EQ(
      prom.last_query,
      "/api/v1/"
      "query?query=count%20by%20%28pool%29%20%28up%7Brole%3D%22replica%22%7D%20%3D%3D%201%29");
}

TEST(PromClient, PrometheusErrorsAndTransportErrors) {
  FakeProm prom;
  prom.status = 400;
  prom.body = R"({"status":"error","errorType":"bad_data","error":"unexpected end of input"})";
  prom.Start();
  auto client = PromClient::Create(prom.Url());
  ASSERT_TRUE(client.ok());
  auto r = client->Query("sum(");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("unexpected end of input"), std::string::npos)
      << r.status().message();
  prom.status = 503;
  prom.body = "overloaded";
  r = client->Query("up");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  const std::string url = prom.Url();
  prom.server->Stop();
  auto gone = PromClient::Create(url);
  ASSERT_TRUE(gone.ok());
  r = gone->Query("up", std::chrono::milliseconds(500));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(PromClient::Create("https://x").ok());
}

}  // namespace
}  // namespace strata::control
