// Unit tests of src/http: constant-time compare, Prometheus text, request parsing and limits,
// the OpenAI error body, the route chain (match -> auth -> readiness -> body -> model -> handler),
// and Responder::Post on a real HttpServer on 127.0.0.1:0.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "http/auth.h"
#include "http/chain.h"
#include "http/openai_error.h"
#include "http/prometheus.h"
#include "http/server.h"
#include "http/sse.h"
#include "integration/http_test_client.h"

namespace strata::http {
namespace {

using nlohmann::json;

TEST(ConstantTime, Equality) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret2"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(Metrics, RendersPrometheusText) {
  MetricsRegistry r;
  r.Declare("strata:x_total", MetricsRegistry::Type::kCounter, "X.");
  r.Declare("strata:h", MetricsRegistry::Type::kHistogram, "H.", {1, 2});
  r.Add("strata:x_total", Labels({{"model_name", "m\"q"}}), 2);
  r.Observe("strata:h", Labels({{"model_name", "m"}}), 1.5);
  r.Observe("strata:h", Labels({{"model_name", "m"}}), 5);
  std::string t = r.Render();
  EXPECT_NE(t.find("# TYPE strata:x_total counter\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata:x_total{model_name=\"m\\\"q\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata:h_bucket{model_name=\"m\",le=\"1\"} 0\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata:h_bucket{model_name=\"m\",le=\"2\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata:h_bucket{model_name=\"m\",le=\"+Inf\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata:h_sum{model_name=\"m\"} 6.5\n"), std::string::npos) << t;
}

TEST(Metrics, FamiliesWithoutSamplesAreNotRendered) {
  MetricsRegistry r;
  r.Declare("strata:absent_total", MetricsRegistry::Type::kCounter, "Never written.");
  r.Declare("strata:h", MetricsRegistry::Type::kHistogram, "H.", {1});
  EXPECT_EQ(r.Render(), "");
  r.Touch("strata:h", Labels({{"model_name", "m"}}));
  const std::string t = r.Render();
  EXPECT_EQ(t.find("strata:absent_total"), std::string::npos) << t;
  EXPECT_NE(t.find("# TYPE strata:h histogram\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata:h_bucket{model_name=\"m\",le=\"1\"} 0\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata:h_count{model_name=\"m\"} 0\n"), std::string::npos) << t;
}

TEST(Metrics, ReplaceDropsSeriesThatNoLongerApplyAlsoInMirrors) {
  MetricsRegistry r;
  r.Declare("strata:info", MetricsRegistry::Type::kGauge, "I.");
  r.Mirror("strata:info", "vllm:info", "VI.", {}, {"a"}, "");
  r.Set("strata:info", Labels({{"a", "x"}}), 1);
  r.Replace("strata:info", {{Labels({{"a", "y"}}), 2}, {Labels({{"a", "z"}}), 3}});
  std::string t = r.Render();
  EXPECT_EQ(t.find("a=\"x\""), std::string::npos) << t;
  EXPECT_NE(t.find("strata:info{a=\"y\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata:info{a=\"z\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("vllm:info{a=\"z\"} 3\n"), std::string::npos) << t;
  r.Replace("strata:info", {});
  t = r.Render();
  EXPECT_EQ(t.find("info"), std::string::npos) << t;  // no series: the family is not rendered
}

TEST(Metrics, MirrorsFilterLabelsAddUpAndUseTheirOwnBuckets) {
  MetricsRegistry r;
  r.Declare("strata:x_total", MetricsRegistry::Type::kCounter, "X.");
  r.Declare("strata:lat", MetricsRegistry::Type::kHistogram, "L.", {1, 2});
  r.Declare("strata:g", MetricsRegistry::Type::kGauge, "G.");
  r.Mirror("strata:x_total", "vllm:x_total", "VX.", {}, {"model_name", "reason"},
           Labels({{"engine", "0"}}));
  r.Mirror("strata:lat", "vllm:lat", "VL.", {0.5, 10}, {"model_name"}, Labels({{"engine", "0"}}));
  r.Mirror("strata:g", "vllm:g", "VG.", {}, {"model_name"}, "");
  r.Add("strata:x_total", Labels({{"model_name", "m\"q"}, {"tier", "gold"}, {"reason", "stop"}}),
        2);
  r.Add("strata:x_total", Labels({{"model_name", "m\"q"}, {"tier", "bronze"}, {"reason", "stop"}}),
        3);
  r.Observe("strata:lat", Labels({{"model_name", "m"}, {"tier", "gold"}}), 0.25);
  r.Observe("strata:lat", Labels({{"model_name", "m"}, {"tier", "silver"}}), 5);
  r.Set("strata:g", Labels({{"model_name", "m"}}), 7);
  r.Set("strata:g", Labels({{"model_name", "m"}}), 4);
  const std::string t = r.Render();
  // The source families are unchanged.
  EXPECT_NE(t.find("strata:x_total{model_name=\"m\\\"q\",tier=\"gold\",reason=\"stop\"} 2\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("# HELP vllm:x_total VX.\n# TYPE vllm:x_total counter\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("vllm:x_total{model_name=\"m\\\"q\",reason=\"stop\",engine=\"0\"} 5\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("vllm:lat_bucket{model_name=\"m\",engine=\"0\",le=\"0.5\"} 1\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("vllm:lat_bucket{model_name=\"m\",engine=\"0\",le=\"10\"} 2\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("vllm:lat_sum{model_name=\"m\",engine=\"0\"} 5.25\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata:lat_bucket{model_name=\"m\",tier=\"gold\",le=\"1\"} 1\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("vllm:g{model_name=\"m\"} 4\n"), std::string::npos) << t;
}

TEST(ParseHttpRequest, LimitsAndFields) {
  HttpServerOptions o;
  o.max_body_bytes = 10;
  auto r = ParseHttpRequest(
      "POST /v1/x?a=b HTTP/1.1\r\nHost: h\r\nX-Strata-Tier: Gold\r\nContent-Length: 2\r\n\r\n{}",
      o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->method, "POST");
  EXPECT_EQ(r->path, "/v1/x");
  EXPECT_EQ(r->query, "a=b");
  EXPECT_EQ(r->Header("x-strata-tier"), "Gold");
  EXPECT_EQ(r->body, "{}");
  auto big = ParseHttpRequest("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n01234567890", o);
  EXPECT_EQ(big.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ParseHttpRequest("NOT HTTP\r\n\r\n", o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(
      ParseHttpRequest("GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab", o).ok());  // incomplete
  o.max_header_bytes = 64;
  auto hdr = ParseHttpRequest("GET / HTTP/1.1\r\nX: " + std::string(200, 'a') + "\r\n\r\n", o);
  EXPECT_EQ(hdr.status().code(), StatusCode::kOutOfRange);
}

TEST(OpenAiError, BodyShapeAndStatusTable) {
  json e = json::parse(ErrorBody("bad \"x\"", "invalid_request_error", "", ""));
  EXPECT_EQ(e["error"]["message"], "bad \"x\"");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(e["error"]["param"].is_null());
  EXPECT_TRUE(e["error"]["code"].is_null());
  HttpResponse r = ErrorResponse(401, "no key");
  EXPECT_EQ(r.status, 401);
  json a = json::parse(r.body);
  EXPECT_EQ(a["error"]["type"], "authentication_error");
  EXPECT_EQ(a["error"]["code"], "invalid_api_key");
  json t = json::parse(ErrorResponse(429, "full").body);
  EXPECT_EQ(t["error"]["type"], "rate_limit_error");
  json p = json::parse(ErrorResponse(400, "n: too big", "n").body);
  EXPECT_EQ(p["error"]["param"], "n");
  EXPECT_TRUE(p["error"]["code"].is_null());
}

TEST(OpenAiError, ApiErrorCarriesTheParamAsAField) {
  ApiError e = ApiError::Param("max_tokens", "must be in [1, 16], got 0");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.param(), "max_tokens");
  EXPECT_EQ(e.message(), "max_tokens: must be in [1, 16], got 0");
  // The param is not taken from the message text: a message shaped like "x: y" without a param
  // stays without one.
  ApiError plain(Status::InvalidArgument("looks_like: a param"));
  json b = json::parse(ErrorResponse(plain).body);
  EXPECT_TRUE(b["error"]["param"].is_null());
  EXPECT_EQ(ErrorResponse(plain).status, 400);
  EXPECT_EQ(ErrorResponse(ApiError(Status::ResourceExhausted("q"))).status, 429);
  EXPECT_EQ(ErrorResponse(ApiError(Status::Unavailable("q"))).status, 503);
  EXPECT_EQ(ErrorResponse(ApiError(Status::Unimplemented("q"))).status, 501);
  EXPECT_EQ(ErrorResponse(ApiError(Status::IoError("q"))).status, 500);
  EXPECT_TRUE(ApiError().ok());
}

TEST(Auth, BearerKeys) {
  EXPECT_TRUE(BearerKeyAccepted("", {}));
  EXPECT_TRUE(BearerKeyAccepted("Bearer k2", {"k1", "k2"}));
  EXPECT_FALSE(BearerKeyAccepted("Bearer k3", {"k1", "k2"}));
  EXPECT_FALSE(BearerKeyAccepted("bearer k1", {"k1"}));
  EXPECT_FALSE(BearerKeyAccepted("k1", {"k1"}));
  EXPECT_FALSE(BearerKeyAccepted("", {"k1"}));
}

TEST(Sse, EventFramingRoundTripsThroughTheParser) {
  EXPECT_EQ(SseEvent(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(SseEvent("two\nlines"), "data: two\ndata: lines\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  SseParser p;
  std::vector<std::string> ev;
  ASSERT_TRUE(p.Feed(SseEvent("x") + SseEvent("two\nlines") + std::string(kSseDone), &ev).ok());
  EXPECT_EQ(ev, (std::vector<std::string>{"x", "two\nlines", "[DONE]"}));
}

// A Responder that records what it was asked to send.
class RecordingResponder final : public Responder {
 public:
  void Respond(HttpResponse r) override { log += "respond " + std::to_string(r.status) + ";"; }
  void Begin(std::string ct, std::vector<std::pair<std::string, std::string>> h) override {
    log += "begin " + ct;
    for (auto& [k, v] : h) log += " " + k + "=" + v;
    log += ";";
  }
  void Write(std::string chunk) override { log += "write " + chunk + ";"; }
  void End() override { log += "end;"; }
  void OnClose(std::function<void()>) override {}
  bool closed() const override { return false; }
  void Post(std::function<void()> fn) override { fn(); }
  std::string log;
};

TEST(Sse, WriterSendsEventStreamThenDone) {
  auto out = std::make_shared<RecordingResponder>();
  SseWriter w(out);
  w.Begin();
  w.Event("{}");
  w.Done();
  EXPECT_EQ(out->log,
            "begin text/event-stream Cache-Control=no-cache;write data: {}\n\n;write data: "
            "[DONE]\n\n;end;");
}

// ---------------------------------------------------------------------------------------------
// The route chain.

struct ChainFixture {
  Readiness ready;
  int handled = 0;
  std::string seen_body_text;
  Chain chain;

  ChainFixture()
      : chain(
            {
                {"GET", "/health", "/health", false, false, false, false,
                 [this](Exchange&) { return Ok(); }},
                {"GET", "/metrics", "/metrics", false, true, false, false,
                 [this](Exchange&) { return Ok(); }},
                {"GET", "/items/", "/items/{id}", true, true, true, false,
                 [this](Exchange& ex) {
                   seen_body_text = ex.request.path.substr(ex.route->path.size());
                   return Ok();
                 }},
                {"POST", "/echo", "/echo", false, true, true, true,
                 [this](Exchange& ex) {
                   seen_body_text = ex.body.dump();
                   return Ok();
                 }},
            },
            {RequireBearer({"key"}), RequireReady(&ready), ParseJsonBody(), RequireModel("m")}) {}

  HttpResponse Ok() {
    ++handled;
    HttpResponse r;
    r.body = "ok";
    return r;
  }
  HttpResponse Run(std::string method, std::string path, std::string body = "",
                   bool with_key = true, std::string* label = nullptr) {
    Exchange ex;
    ex.request.method = std::move(method);
    ex.request.path = std::move(path);
    ex.request.body = std::move(body);
    if (with_key) ex.request.headers.emplace_back("authorization", "Bearer key");
    HttpResponse r = chain.Run(ex);
    if (label) *label = ex.route ? ex.route->label : "other";
    return r;
  }
  static std::string Param(const HttpResponse& r) {
    json e = json::parse(r.body);
    return e["error"]["param"].is_null() ? "" : e["error"]["param"].get<std::string>();
  }
};

TEST(Chain, MatchAuthReadinessBodyModelThenHandler) {
  ChainFixture f;
  std::string label;
  EXPECT_EQ(f.Run("GET", "/nope", "", true, &label).status, 404);
  EXPECT_EQ(label, "other");
  EXPECT_EQ(f.Run("POST", "/health", "", true, &label).status, 405);
  EXPECT_EQ(label, "/health");
  // Public route: no key needed, answered while loading.
  EXPECT_EQ(f.Run("GET", "/health", "", false).status, 200);
  // Auth before readiness; /metrics needs a key but not readiness.
  EXPECT_EQ(f.Run("GET", "/metrics", "", false).status, 401);
  EXPECT_EQ(f.Run("GET", "/metrics").status, 200);
  EXPECT_EQ(f.Run("POST", "/echo", "{}", false).status, 401);
  EXPECT_EQ(f.Run("POST", "/echo", "{}").status, 503);  // loading
  f.ready.SetReady(true);
  EXPECT_EQ(f.Run("POST", "/echo", "{not json").status, 400);
  EXPECT_EQ(ChainFixture::Param(f.Run("POST", "/echo", "[1]")), "body");
  EXPECT_EQ(f.Run("POST", "/echo", R"({"model":"other"})").status, 404);
  EXPECT_EQ(ChainFixture::Param(f.Run("POST", "/echo", R"({"model":5})")), "model");
  const int before = f.handled;
  EXPECT_EQ(f.Run("POST", "/echo", R"({"model":"m","x":[1,2]})").status, 200);
  EXPECT_EQ(f.handled, before + 1);
  EXPECT_EQ(json::parse(f.seen_body_text),
            json::parse(R"({"model":"m","x":[1,2]})"));  // parsed once, handed over
  EXPECT_EQ(f.Run("POST", "/echo", R"({"model":""})").status, 200);
  // Prefix route: the rest of the path is the id; the bare prefix is not a match.
  EXPECT_EQ(f.Run("GET", "/items/abc", "", true, &label).status, 200);
  EXPECT_EQ(f.seen_body_text, "abc");
  EXPECT_EQ(label, "/items/{id}");
  EXPECT_EQ(f.Run("GET", "/items/").status, 404);
  // Draining: readiness-gated routes 503, the probe says so, public routes still answer.
  f.ready.StartDraining();
  EXPECT_EQ(f.Run("POST", "/echo", "{}").status, 503);
  EXPECT_EQ(f.ready.Probe().status, 503);
  EXPECT_EQ(f.Run("GET", "/health").status, 200);
}

TEST(Chain, ReadinessProbe) {
  Readiness r;
  EXPECT_EQ(r.Probe().status, 503);
  EXPECT_EQ(json::parse(r.Probe().body)["error"]["message"], "loading");
  r.SetReady(true);
  EXPECT_EQ(r.Probe().status, 200);
  EXPECT_EQ(json::parse(r.Probe().body)["status"], "ready");
  r.StartDraining();
  EXPECT_EQ(json::parse(r.Probe().body)["error"]["message"], "draining");
}

// ---------------------------------------------------------------------------------------------
// Responder::Post: work handed over from another thread runs on the connection's strand, in order.

TEST(HttpServer, PostFromAnotherThreadStreamsInOrder) {
  std::vector<std::thread> producers;
  std::mutex mu;
  HttpServerOptions so;
  so.port = 0;
  auto s = HttpServer::Start(so, [&](const HttpRequest&, std::shared_ptr<Responder> out) {
    out->Begin("text/plain", {});
    std::lock_guard lk(mu);
    producers.emplace_back([out] {
      for (int i = 0; i < 50; ++i) out->Post([out, i] { out->Write(std::to_string(i) + ","); });
      out->Post([out] { out->End(); });
    });
  });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto r = testing::HttpCall((*s)->port(), "GET", "/x");
  EXPECT_EQ(r.status, 200);
  std::string want;
  for (int i = 0; i < 50; ++i) want += std::to_string(i) + ",";
  EXPECT_EQ(r.body, want);
  (*s)->Stop();
  for (auto& t : producers) t.join();
}

// ---------------------------------------------------------------------------------------------
// The last-resort guard: an exception from a handler or from Post()ed work is a 500, reported to
// the observer, and the connection and the server keep serving.

struct GuardedServer {
  std::mutex mu;
  std::vector<std::string> seen;  // "METHOD PATH: what" per observer call
  std::unique_ptr<HttpServer> server;

  GuardedServer() {
    HttpServerOptions so;
    so.port = 0;
    so.on_internal_error = [this](std::string_view m, std::string_view p, std::string_view w) {
      std::lock_guard lk(mu);
      seen.push_back(std::string(m) + " " + std::string(p) + ": " + std::string(w));
    };
    auto s = HttpServer::Start(so, [](const HttpRequest& req, std::shared_ptr<Responder> out) {
      if (req.path == "/throw") throw std::runtime_error("boom");
      if (req.path == "/throw-int") throw 7;
      if (req.path == "/post-throw")
        return out->Post([] { throw std::logic_error("posted boom"); });
      if (req.path == "/stream-throw") {
        out->Begin("text/plain", {});
        out->Write("partial");
        return out->Post([] { throw std::logic_error("drain boom"); });
      }
      HttpResponse r;
      r.body = "ok";
      out->Respond(std::move(r));
    });
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) server = std::move(*s);
  }
  std::vector<std::string> Seen() {
    std::lock_guard lk(mu);
    return seen;
  }
};

void ExpectInternalErrorBody(const testing::HttpReply& r) {
  EXPECT_EQ(r.status, 500);
  json e = json::parse(r.body, nullptr, false);
  ASSERT_FALSE(e.is_discarded()) << r.body;
  EXPECT_EQ(e["error"]["message"], "internal error");
  EXPECT_EQ(e["error"]["type"], "server_error");
  EXPECT_EQ(e["error"]["code"], "internal_error");
}

TEST(HttpServer, HandlerExceptionIsA500AndTheConnectionKeepsServing) {
  GuardedServer g;
  ASSERT_TRUE(g.server);
  testing::HttpConn c(g.server->port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send("POST", "/throw", "{\"secret\":1}"));
  testing::HttpReply r = c.ReadResponse(10);
  ASSERT_TRUE(r.ok);
  ExpectInternalErrorBody(r);
  EXPECT_EQ(r.headers["connection"], "keep-alive");
  ASSERT_TRUE(c.Send("GET", "/throw-int"));  // not a std::exception
  r = c.ReadResponse(10);
  ASSERT_TRUE(r.ok);
  ExpectInternalErrorBody(r);
  ASSERT_TRUE(c.Send("GET", "/fine"));  // the same connection
  r = c.ReadResponse(10);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok");
  auto other = testing::HttpCall(g.server->port(), "GET", "/fine");  // another connection
  EXPECT_EQ(other.status, 200);
  auto seen = g.Seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], "POST /throw: boom");  // the route and the message, never the body
  EXPECT_EQ(seen[1], "GET /throw-int: unknown exception");
  g.server->Stop();
}

TEST(HttpServer, PostedWorkExceptionIsA500OrEndsTheStream) {
  GuardedServer g;
  ASSERT_TRUE(g.server);
  auto r = testing::HttpCall(g.server->port(), "POST", "/post-throw", "{}");
  ExpectInternalErrorBody(r);
  testing::HttpConn c(g.server->port());
  ASSERT_TRUE(c.Send("GET", "/stream-throw"));
  testing::HttpReply s = c.ReadResponse(10);
  ASSERT_TRUE(s.ok);  // the chunked stream was ended (its body cut short) ...
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(s.body, "partial");
  EXPECT_EQ(s.headers["connection"], "keep-alive");  // (sent before the failure)
  EXPECT_FALSE(c.ReadUntil([](const std::string&) { return false; }, 5));
  EXPECT_TRUE(c.eof());
  // ... and its connection closed, while the server keeps serving.
  EXPECT_EQ(testing::HttpCall(g.server->port(), "GET", "/fine").status, 200);
  auto seen = g.Seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], "POST /post-throw: posted boom");
  EXPECT_EQ(seen[1], "GET /stream-throw: drain boom");
  g.server->Stop();
}

TEST(HttpServer, TransportErrorsUseTheOpenAiBody) {
  HttpServerOptions so;
  so.port = 0;
  so.max_body_bytes = 8;
  auto s = HttpServer::Start(
      so, [](const HttpRequest&, std::shared_ptr<Responder> out) { out->Respond({}); });
  ASSERT_TRUE(s.ok());
  auto r = testing::HttpCall((*s)->port(), "POST", "/x", std::string(100, 'a'));
  EXPECT_EQ(r.status, 413);
  json e = json::parse(r.body, nullptr, false);
  ASSERT_FALSE(e.is_discarded()) << r.body;
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["code"], "request_too_large");
  EXPECT_TRUE(e["error"]["param"].is_null());
}

}  // namespace
}  // namespace strata::http
