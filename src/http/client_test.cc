// Tests of http/client against a real HttpServer on 127.0.0.1:0: the proxying options (extra
// request headers, the head callback, non-2xx bodies, RequestAbort) and the retry of a reused
// connection the server closed while idle.
#include "http/client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "http/server.h"

namespace strata::http {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Runs one awaitable to completion on `io` (the test thread).
template <typename T>
T RunOn(asio::io_context& io, asio::awaitable<T> aw) {
  std::optional<T> out;
  asio::co_spawn(io, std::move(aw), [&](const std::exception_ptr&, T v) { out = std::move(v); });
  io.restart();
  io.run();
  return std::move(*out);
}

struct TestServer {
  std::mutex mu;
  std::vector<std::shared_ptr<Responder>> kept;
  std::atomic<int> handled{0};
  std::atomic<bool> closed{false};
  std::unique_ptr<HttpServer> server;

  explicit TestServer(std::chrono::milliseconds idle_timeout = 60s) {
    HttpServerOptions so;
    so.port = 0;
    so.idle_timeout = idle_timeout;
    auto s = HttpServer::Start(so, [this](const HttpRequest& req, std::shared_ptr<Responder> out) {
      ++handled;
      HttpResponse r;
      if (req.path == "/hold") {  // never answers: a long prefill
        out->OnClose([this] { closed.store(true); });
        std::lock_guard lk(mu);
        kept.push_back(out);
        return;
      }
      if (req.path == "/err") {
        r.status = 404;
        r.headers = {{"X-Why", "gone"}};
        r.body = "nope";
      } else {  // echo what arrived
        nlohmann::json h = nlohmann::json::object();
        for (const auto& [k, v] : req.headers) h[k] = v;
        h[":body"] = req.body;  // not a header name: no clash
        r.body = h.dump();
      }
      out->Respond(std::move(r));
    });
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) server = std::move(*s);
  }
  ~TestServer() {
    {
      std::lock_guard lk(mu);
      kept.clear();
    }
    server->Stop();
  }
  Url url() const {
    Url u;
    u.host = "127.0.0.1";
    u.port = std::to_string(server->port());
    return u;
  }
};

TEST(HttpClient, ExtraHeadersAndTheHeadCallback) {
  TestServer ts;
  asio::io_context io;
  HttpClient client(io, ts.url(), "");
  HttpClient::RequestOptions o;
  o.headers = {{"X-A", "1"},
               {"Host", "evil"},
               {"Content-Length", "999"},
               {"Connection", "close"},
               {"X-Bad", "a\r\nb: c"},
               {"authorization", "Bearer k"}};
  std::optional<ResponseHead> head;
  std::string body;
  bool body_before_head = false;
  o.on_head = [&](const ResponseHead& h) {
    head = h;
    return Status::Ok();
  };
  auto r = RunOn(io, client.Request(
                         "POST", "/echo", "{}", Clock::now() + 5s,
                         [&](std::string_view p) {
                           body_before_head = body_before_head || !head;
                           body.append(p);
                           return Status::Ok();
                         },
                         o));
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.http_status, 200);
  ASSERT_TRUE(head);
  EXPECT_FALSE(body_before_head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->Header("content-type"), "application/json");
  EXPECT_FALSE(head->chunked);
  ASSERT_TRUE(head->content_length);
  EXPECT_EQ(*head->content_length, body.size());
  nlohmann::json seen = nlohmann::json::parse(body);
  EXPECT_EQ(seen["x-a"], "1");
  EXPECT_EQ(seen["authorization"], "Bearer k");
  EXPECT_EQ(seen["host"], "127.0.0.1:" + ts.url().port);  // transport headers are the client's
  EXPECT_EQ(seen["content-length"], "2");
  EXPECT_FALSE(seen.contains("connection"));
  EXPECT_FALSE(seen.contains("x-bad"));
  EXPECT_FALSE(seen.contains("b"));
  // The head callback can refuse the response.
  o.on_head = [](const ResponseHead&) { return Status::ResourceExhausted("no thanks"); };
  auto refused = RunOn(io, client.Request(
                               "GET", "/echo", "", Clock::now() + 5s,
                               [](std::string_view) { return Status::Ok(); }, o));
  EXPECT_EQ(refused.status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.http_status, 200);
  auto unknown = RunOn(io, client.Request("BREW", "/echo", "", Clock::now() + 5s,
                                          [](std::string_view) { return Status::Ok(); }));
  EXPECT_EQ(unknown.status.code(), StatusCode::kInvalidArgument);
}

TEST(HttpClient, ErrorBodiesGoToOnBodyWhenAsked) {
  TestServer ts;
  asio::io_context io;
  HttpClient client(io, ts.url(), "");
  std::string body;
  auto sink = [&](std::string_view p) {
    body.append(p);
    return Status::Ok();
  };
  // Default: the first 4 KiB in error_body, on_body never called.
  auto plain = RunOn(io, client.Request("GET", "/err", "", Clock::now() + 5s, sink));
  EXPECT_TRUE(plain.status.ok());
  EXPECT_EQ(plain.http_status, 404);
  EXPECT_EQ(plain.error_body, "nope");
  EXPECT_EQ(body, "");
  HttpClient::RequestOptions o;
  o.deliver_error_body = true;
  std::string why;
  o.on_head = [&](const ResponseHead& h) {
    why = std::string(h.Header("x-why"));
    return Status::Ok();
  };
  auto delivered = RunOn(io, client.Request("GET", "/err", "", Clock::now() + 5s, sink, o));
  EXPECT_TRUE(delivered.status.ok());
  EXPECT_EQ(delivered.http_status, 404);
  EXPECT_EQ(body, "nope");
  EXPECT_EQ(delivered.error_body, "");
  EXPECT_EQ(why, "gone");
}

TEST(HttpClient, AbortClosesTheSocketWhileWaitingForTheHeader) {
  TestServer ts;
  asio::io_context io;
  HttpClient client(io, ts.url(), "");
  RequestAbort abort;
  HttpClient::RequestOptions o;
  o.abort = &abort;
  asio::steady_timer timer(io);
  timer.expires_after(100ms);
  timer.async_wait([&](const boost::system::error_code&) { abort.Abort(); });
  const auto t0 = Clock::now();
  auto r = RunOn(io, client.Request(
                         "POST", "/hold", "{}", Clock::now() + 30s,
                         [](std::string_view) { return Status::Ok(); }, o));
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_TRUE(r.aborted);
  EXPECT_FALSE(r.status.ok());
  EXPECT_EQ(r.http_status, 0);
  for (int i = 0; i < 200 && !ts.closed.load(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(ts.closed.load());  // the server saw the disconnect
  // Aborted before it starts: no request is sent.
  const int before = ts.handled.load();
  RequestAbort early;
  early.Abort();
  o.abort = &early;
  auto e = RunOn(io, client.Request(
                         "GET", "/echo", "", Clock::now() + 5s,
                         [](std::string_view) { return Status::Ok(); }, o));
  EXPECT_TRUE(e.aborted);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(ts.handled.load(), before);
}

asio::awaitable<std::pair<HttpResult, HttpResult>> TwoRequestsWithAPause(HttpClient& client) {
  auto sink = [](std::string_view) { return Status::Ok(); };
  HttpResult a = co_await client.Request("GET", "/echo", "", Clock::now() + 5s, sink);
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_after(300ms);
  co_await timer.async_wait(asio::use_awaitable);
  HttpResult b = co_await client.Request("GET", "/echo", "", Clock::now() + 5s, sink);
  co_return std::make_pair(std::move(a), std::move(b));
}

// The server closes the kept-alive connection while it is idle: the next request is retried once
// on a fresh connection, not failed.
TEST(HttpClient, ReusedConnectionClosedWhileIdleIsRetried) {
  TestServer ts(100ms);
  asio::io_context io;
  HttpClient client(io, ts.url(), "");
  auto [a, b] = RunOn(io, TwoRequestsWithAPause(client));
  EXPECT_TRUE(a.status.ok()) << a.status.ToString();
  EXPECT_TRUE(b.status.ok()) << b.status.ToString();
  EXPECT_EQ(b.http_status, 200);
  EXPECT_EQ(ts.handled.load(), 2);
}

// A lent body is sent as it is, sent again on the retry of a kept-alive connection that the server
// closed while idle, and given back unchanged after each request.
TEST(HttpClient, LentBodyIsSentOnEveryAttemptAndGivenBack) {
  TestServer ts(100ms);
  asio::io_context io;
  HttpClient client(io, ts.url(), "");
  const std::string original = "{\"batch\":\"" + std::string(100000, 'x') + "\"}";
  std::string lent = original;
  for (int i = 0; i < 2; ++i) {
    if (i == 1) std::this_thread::sleep_for(300ms);  // the server closes the idle connection
    std::string echoed;
    auto r = RunOn(io, client.Request("POST", "/echo", &lent, Clock::now() + 5s,
                                      [&](std::string_view p) {
                                        echoed.append(p);
                                        return Status::Ok();
                                      },
                                      {}));
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(lent, original) << "request " << i;
    EXPECT_EQ(nlohmann::json::parse(echoed).at(":body"), original) << "request " << i;
  }
  EXPECT_EQ(ts.handled.load(), 2);
}

}  // namespace
}  // namespace strata::http
