// Tests of gateway/proxy: Cancel, and Upstreams::Call against real servers on 127.0.0.1:0 — an
// upstream http::HttpServer (the replica), a front http::HttpServer whose handler proxies to it
// (the gateway), a raw socket client, and a raw TCP upstream that answers scripted bytes
// (malformed responses, silence).
#include "gateway/proxy.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "http/server.h"
#include "http/sse.h"
#include "integration/http_test_client.h"

namespace strata::gateway {
namespace {

using namespace std::chrono_literals;
using Headers = std::vector<std::pair<std::string, std::string>>;
using Kind = UpstreamResult::Kind;

std::string HeaderOf(const Headers& h, std::string_view name) {
  for (const auto& [k, v] : h)
    if (k == name) return v;
  return "";
}

// The result of one call, handed over from the upstream thread.
class ResultBox {
 public:
  void Set(UpstreamResult r) {
    std::lock_guard lk(mu_);
    r_ = std::move(r);
    cv_.notify_all();
  }
  std::optional<UpstreamResult> Wait(std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, timeout, [&] { return r_.has_value(); });
    return r_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<UpstreamResult> r_;
};

// A Responder that records what the call sent to the client.
class RecordingResponder final : public http::Responder {
 public:
  void Respond(http::HttpResponse r) override {
    std::lock_guard lk(mu_);
    log_ += "respond " + std::to_string(r.status) + " " + r.content_type + ";";
    response_ = std::move(r);
  }
  void Begin(std::string ct, Headers h) override {
    std::lock_guard lk(mu_);
    log_ += "begin " + ct + ";";
    begin_headers_ = std::move(h);
  }
  void Write(std::string chunk) override {
    std::lock_guard lk(mu_);
    log_ += "write " + chunk + ";";
  }
  void End() override {
    std::lock_guard lk(mu_);
    log_ += "end;";
  }
  void OnClose(std::function<void()>) override {}
  bool closed() const override { return false; }
  void Post(std::function<void()> fn) override { fn(); }
  std::string log() {
    std::lock_guard lk(mu_);
    return log_;
  }
  http::HttpResponse response() {
    std::lock_guard lk(mu_);
    return response_;
  }

 private:
  std::mutex mu_;
  std::string log_;
  http::HttpResponse response_;
  Headers begin_headers_;
};

// The replica: an HttpServer whose handler each test sets; threads a handler starts are joined at
// the end; Responders a handler keeps are dropped before the server.
struct FakeReplica {
  std::function<void(const http::HttpRequest&, std::shared_ptr<http::Responder>)> handler;
  std::mutex mu;
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<http::Responder>> kept;
  std::unique_ptr<http::HttpServer> server;

  FakeReplica() {
    http::HttpServerOptions so;
    so.port = 0;
    auto s = http::HttpServer::Start(
        so, [this](const http::HttpRequest& req, std::shared_ptr<http::Responder> out) {
          handler(req, std::move(out));
        });
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) server = std::move(*s);
  }
  ~FakeReplica() {
    for (auto& t : threads) t.join();
    {
      std::lock_guard lk(mu);
      kept.clear();
    }
    if (server) server->Stop();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server->port()); }
  void Spawn(std::function<void()> fn) {
    std::lock_guard lk(mu);
    threads.emplace_back(std::move(fn));
  }
  void Keep(std::shared_ptr<http::Responder> out) {
    std::lock_guard lk(mu);
    kept.push_back(std::move(out));
  }
};

// The gateway: a front HttpServer whose handler proxies every request to `upstream_url`. A
// retryable result is answered 502 with the result's status message (what the service would do
// after its retries).
struct Front {
  Upstreams ups;
  std::string upstream_url;
  std::chrono::milliseconds timeout{10000};
  ResultBox box;
  std::unique_ptr<http::HttpServer> server;

  explicit Front(std::string url) : upstream_url(std::move(url)) {
    ups.Start();
    http::HttpServerOptions so;
    so.port = 0;
    auto s = http::HttpServer::Start(
        so, [this](http::HttpRequest req, std::shared_ptr<http::Responder> out) {
          auto cancel = std::make_shared<Cancel>();
          out->OnClose([cancel] { cancel->Fire(); });
          UpstreamCall c;
          c.url = upstream_url;
          c.method = std::move(req.method);
          c.path = std::move(req.path);
          c.body = std::move(req.body);
          c.headers = {{"x-strata-tenant", "acme"}, {"connection", "close"}};
          c.api_key = "replica-key";
          c.deadline = Clock::now() + timeout;
          ups.Call(std::move(c), out, {{"x-strata-route", "general"}, {"x-strata-replica", "r0"}},
                   cancel, [this, out](UpstreamResult r) {
                     if (r.kind == Kind::kRetryable) {
                       http::HttpResponse resp;
                       resp.status = 502;
                       resp.body = "retryable: " + r.status.message();
                       out->Respond(std::move(resp));
                     }
                     box.Set(std::move(r));
                   });
        });
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) server = std::move(*s);
  }
  ~Front() {
    ups.Stop();
    if (server) server->Stop();
  }
  int port() const { return server->port(); }
};

// A raw TCP upstream: accepts one connection, reads the request header (and a Content-Length
// body), writes `script`, then closes — or, with `hold`, keeps the socket open until destroyed.
class RawUpstream {
 public:
  RawUpstream(std::string script, bool hold) : script_(std::move(script)), hold_(hold) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~RawUpstream() {
    stop_.store(true);
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  bool got_request() const { return got_request_.load(); }

 private:
  void Serve() {
    int c = -1;
    while (!stop_.load() && c < 0) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0) c = ::accept(fd_, nullptr, nullptr);
    }
    if (c < 0) return;
    std::string in;
    while (!stop_.load() && in.find("\r\n\r\n") == std::string::npos) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      in.append(buf, static_cast<size_t>(n));
    }
    got_request_.store(true);
    size_t off = 0;
    while (off < script_.size()) {
      ssize_t n = ::send(c, script_.data() + off, script_.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    while (hold_ && !stop_.load()) std::this_thread::sleep_for(5ms);
    ::close(c);
  }

  std::string script_;
  bool hold_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false}, got_request_{false};
  std::thread thread_;
};

// A port nothing listens on.
std::string RefusedUrl() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
}

// One direct call (no front) into a RecordingResponder.
std::optional<UpstreamResult> CallDirect(Upstreams& ups, const std::string& url,
                                         std::shared_ptr<RecordingResponder> out,
                                         std::chrono::milliseconds timeout = 5000ms,
                                         std::shared_ptr<Cancel> cancel = nullptr) {
  UpstreamCall c;
  c.url = url;
  c.path = "/v1/completions";
  c.body = R"({"prompt":"hi"})";
  c.deadline = Clock::now() + timeout;
  auto box = std::make_shared<ResultBox>();
  ups.Call(std::move(c), std::move(out), {{"x-strata-route", "general"}}, std::move(cancel),
           [box](UpstreamResult r) { box->Set(std::move(r)); });
  return box->Wait(timeout + 5s);
}

std::string Chunked(std::string_view piece) {
  return fmt::format("{:x}\r\n{}\r\n", piece.size(), piece);
}

// ------------------------------------------------------------------------------------------------

TEST(Cancel, SubscribersRunOnceAtFireOrAtOnce) {
  Cancel c;
  int a = 0, b = 0, late = 0;
  c.Subscribe([&] { ++a; });
  uint64_t id = c.Subscribe([&] { ++b; });
  EXPECT_NE(id, 0u);
  c.Unsubscribe(id);
  EXPECT_FALSE(c.fired());
  c.Fire();
  c.Fire();
  EXPECT_TRUE(c.fired());
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 0);
  EXPECT_EQ(c.Subscribe([&] { ++late; }), 0u);
  EXPECT_EQ(late, 1);
}

TEST(Proxy, SseChunksReachTheClientBeforeTheUpstreamEnds) {
  FakeReplica replica;
  std::atomic<bool> saw_first{false};
  std::string seen_auth, seen_tenant, seen_connection;
  replica.handler = [&](const http::HttpRequest& req, std::shared_ptr<http::Responder> out) {
    seen_auth = std::string(req.Header("authorization"));
    seen_tenant = std::string(req.Header("x-strata-tenant"));
    seen_connection = std::string(req.Header("connection"));
    out->Begin("text/event-stream", {{"Cache-Control", "no-cache"}, {"X-Secret", "s"}});
    out->Write(http::SseEvent(R"({"choices":[{"text":"chunk-1"}],"usage":null})"));
    replica.Spawn([out, &saw_first] {
      for (int i = 0; i < 1000 && !saw_first.load(); ++i) std::this_thread::sleep_for(5ms);
      out->Write(http::SseEvent(
          R"({"choices":[{"text":"chunk-2"}],"usage":{"prompt_tokens":5,"completion_tokens":2}})"));
      out->Write(std::string(http::kSseDone));
      out->End();
    });
  };
  Front front(replica.url());
  testing::HttpConn conn(front.port());
  ASSERT_TRUE(conn.Send("POST", "/v1/completions", R"({"stream":true})"));
  // Chunk 1 arrives while the replica still waits for us: nothing is buffered.
  ASSERT_TRUE(conn.ReadUntil(
      [](const std::string& b) { return b.find("chunk-1") != std::string::npos; }, 5));
  EXPECT_EQ(conn.buffer().find("chunk-2"), std::string::npos);
  saw_first.store(true);
  testing::HttpReply reply = conn.ReadResponse(10);
  ASSERT_TRUE(reply.ok);
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.headers["content-type"], "text/event-stream");
  EXPECT_EQ(reply.headers["cache-control"], "no-cache");
  EXPECT_EQ(reply.headers["x-strata-route"], "general");
  EXPECT_EQ(reply.headers["x-strata-replica"], "r0");
  EXPECT_EQ(reply.headers.count("x-secret"), 0u);
  auto events = testing::SseData(reply.body);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2], "[DONE]");
  auto r = front.box.Wait();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kDone) << r->status.ToString();
  EXPECT_EQ(r->http_status, 200);
  EXPECT_EQ(r->stream_chunks, 2);
  EXPECT_EQ(r->prompt_tokens, 5);
  EXPECT_EQ(r->completion_tokens, 2);
  EXPECT_GT(r->first_chunk_s, 0);
  EXPECT_GE(r->total_s, r->first_chunk_s);
  EXPECT_GE(r->first_chunk_s, r->header_s);
  // What the replica saw: the forwarded header, the upstream key, never the caller's hop header.
  EXPECT_EQ(seen_auth, "Bearer replica-key");
  EXPECT_EQ(seen_tenant, "acme");
  EXPECT_EQ(seen_connection, "");  // HTTP/1.1 keep-alive (implied); the caller's "close" dropped
}

// The replica holds the request without answering (a long prefill); the client goes away.
TEST(Proxy, ClientDisconnectCancelsTheUpstreamBeforeItsHeader) {
  FakeReplica replica;
  std::atomic<bool> got{false}, upstream_closed{false};
  replica.handler = [&](const http::HttpRequest&, std::shared_ptr<http::Responder> out) {
    out->OnClose([&] { upstream_closed.store(true); });
    replica.Keep(out);
    got.store(true);
  };
  Front front(replica.url());
  auto conn = std::make_unique<testing::HttpConn>(front.port());
  ASSERT_TRUE(conn->Send("POST", "/v1/completions", "{}"));
  for (int i = 0; i < 500 && !got.load(); ++i) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(got.load());
  std::this_thread::sleep_for(50ms);  // OnClose is registered on the replica's strand
  const auto t0 = Clock::now();
  conn.reset();
  while (!upstream_closed.load() && Clock::now() - t0 < 2s) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(upstream_closed.load());
  EXPECT_LT(Clock::now() - t0, 1s);
  auto r = front.box.Wait();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kClientGone);
  EXPECT_EQ(r->http_status, 0);
}

TEST(Proxy, ClientDisconnectMidStreamCancelsTheUpstream) {
  FakeReplica replica;
  std::atomic<bool> upstream_closed{false};
  replica.handler = [&](const http::HttpRequest&, std::shared_ptr<http::Responder> out) {
    out->OnClose([&] { upstream_closed.store(true); });
    out->Begin("text/event-stream", {});
    out->Write(http::SseEvent(R"({"choices":[{"text":"first"}]})"));
    replica.Keep(out);
  };
  Front front(replica.url());
  auto conn = std::make_unique<testing::HttpConn>(front.port());
  ASSERT_TRUE(conn->Send("POST", "/v1/completions", "{}"));
  ASSERT_TRUE(conn->ReadUntil(
      [](const std::string& b) { return b.find("first") != std::string::npos; }, 5));
  const auto t0 = Clock::now();
  conn.reset();
  while (!upstream_closed.load() && Clock::now() - t0 < 2s) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(upstream_closed.load());
  EXPECT_LT(Clock::now() - t0, 1s);
  auto r = front.box.Wait();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kClientGone);
  EXPECT_EQ(r->stream_chunks, 1);
}

TEST(Proxy, CancelledBeforeTheCallNeverReachesTheReplica) {
  RawUpstream raw("", true);
  Upstreams ups;
  ups.Start();
  auto cancel = std::make_shared<Cancel>();
  cancel->Fire();
  auto out = std::make_shared<RecordingResponder>();
  auto r = CallDirect(ups, raw.url(), out, 5000ms, cancel);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kClientGone);
  EXPECT_EQ(out->log(), "");
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(raw.got_request());
}

TEST(Proxy, ConnectRefusedIsRetryableAndWritesNothing) {
  Upstreams ups;
  ups.Start();
  auto out = std::make_shared<RecordingResponder>();
  auto r = CallDirect(ups, RefusedUrl(), out);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kRetryable);
  EXPECT_EQ(r->http_status, 0);
  EXPECT_EQ(r->status.code(), StatusCode::kUnavailable);
  EXPECT_NE(r->status.message().find("connect"), std::string::npos) << r->status.ToString();
  EXPECT_EQ(out->log(), "");
  http::HttpResponse kept = KeptResponse(*r, {{"x-strata-replica", "r0"}});
  EXPECT_EQ(kept.status, 502);
  auto err = nlohmann::json::parse(kept.body, nullptr, false);
  ASSERT_TRUE(err.is_object()) << kept.body;
  EXPECT_NE(err["error"]["message"].dump().find("connect"), std::string::npos) << kept.body;
  EXPECT_EQ(HeaderOf(kept.headers, "x-strata-replica"), "r0");
  // A malformed URL is a clean result too.
  auto bad = CallDirect(ups, "ftp://x", out);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->kind, Kind::kRetryable);
  EXPECT_EQ(bad->status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out->log(), "");
}

TEST(Proxy, ServerErrorIsRetryableWithItsBodyKept) {
  FakeReplica replica;
  replica.handler = [&](const http::HttpRequest& req, std::shared_ptr<http::Responder> out) {
    http::HttpResponse resp;
    resp.status = req.path == "/big" ? 500 : 503;
    resp.headers = {{"Retry-After", "2"}, {"X-Request-Id", "rq-1"}, {"X-Other", "o"}};
    resp.body = req.path == "/big" ? std::string(200 << 10, 'e') : R"({"error":"draining"})";
    out->Respond(std::move(resp));
  };
  Upstreams ups;
  ups.Start();
  auto out = std::make_shared<RecordingResponder>();
  auto r = CallDirect(ups, replica.url(), out);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kRetryable);
  EXPECT_EQ(r->http_status, 503);
  EXPECT_EQ(r->body, R"({"error":"draining"})");
  EXPECT_EQ(r->content_type, "application/json");
  EXPECT_EQ(HeaderOf(r->headers, "retry-after"), "2");
  EXPECT_EQ(HeaderOf(r->headers, "x-request-id"), "rq-1");
  EXPECT_EQ(HeaderOf(r->headers, "x-other"), "");
  EXPECT_GT(r->header_s, 0);
  EXPECT_EQ(out->log(), "");
  // Not retried: the kept response is what the client gets.
  http::HttpResponse kept = KeptResponse(*r, {{"x-strata-route", "general"}});
  EXPECT_EQ(kept.status, 503);
  EXPECT_EQ(kept.body, R"({"error":"draining"})");
  EXPECT_EQ(HeaderOf(kept.headers, "retry-after"), "2");
  EXPECT_EQ(HeaderOf(kept.headers, "x-strata-route"), "general");
  // A large 5xx body is captured up to the bound.
  UpstreamCall c;
  c.url = replica.url();
  c.path = "/big";
  c.deadline = Clock::now() + 5s;
  ResultBox box;
  ups.Call(c, out, {}, nullptr, [&](UpstreamResult res) { box.Set(std::move(res)); });
  auto big = box.Wait();
  ASSERT_TRUE(big);
  EXPECT_EQ(big->kind, Kind::kRetryable);
  EXPECT_EQ(big->http_status, 500);
  EXPECT_EQ(big->body, std::string(64 << 10, 'e'));
  EXPECT_EQ(out->log(), "");
}

TEST(Proxy, ClientErrorIsRelayedWithRetryAfter) {
  FakeReplica replica;
  const std::string body = R"({"error":{"message":"slow down","type":"rate_limit_error"}})";
  replica.handler = [&](const http::HttpRequest&, std::shared_ptr<http::Responder> out) {
    http::HttpResponse resp;
    resp.status = 429;
    resp.headers = {{"Retry-After", "3"}, {"X-Request-Id", "rq-9"}, {"Set-Cookie", "c=1"}};
    resp.body = body;
    out->Respond(std::move(resp));
  };
  Front front(replica.url());
  auto reply = testing::HttpCall(front.port(), "POST", "/v1/completions", "{}");
  ASSERT_TRUE(reply.ok);
  EXPECT_EQ(reply.status, 429);
  EXPECT_EQ(reply.body, body);
  EXPECT_EQ(reply.headers["retry-after"], "3");
  EXPECT_EQ(reply.headers["x-request-id"], "rq-9");
  EXPECT_EQ(reply.headers["x-strata-route"], "general");
  EXPECT_EQ(reply.headers.count("set-cookie"), 0u);
  auto r = front.box.Wait();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kDone);
  EXPECT_EQ(r->http_status, 429);
}

TEST(Proxy, JsonUsageIsParsedAndTheBodyRelayedExactly) {
  FakeReplica replica;
  const std::string body =
      R"({"id":"c1","choices":[{"text":"hi"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}})";
  replica.handler = [&](const http::HttpRequest&, std::shared_ptr<http::Responder> out) {
    http::HttpResponse resp;
    resp.body = body;
    out->Respond(std::move(resp));
  };
  Front front(replica.url());
  auto reply = testing::HttpCall(front.port(), "POST", "/v1/completions", "{}");
  ASSERT_TRUE(reply.ok);
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, body);
  EXPECT_EQ(reply.headers["content-type"], "application/json");
  EXPECT_EQ(reply.headers["content-length"], std::to_string(body.size()));
  EXPECT_EQ(reply.headers["x-strata-replica"], "r0");
  auto r = front.box.Wait();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kDone);
  EXPECT_EQ(r->prompt_tokens, 7);
  EXPECT_EQ(r->completion_tokens, 3);
  EXPECT_EQ(r->stream_chunks, 0);
  EXPECT_EQ(r->body_bytes, static_cast<int64_t>(body.size()));
  // A body whose usage has the wrong types leaves the counts unknown.
  replica.handler = [&](const http::HttpRequest&, std::shared_ptr<http::Responder> out) {
    http::HttpResponse resp;
    resp.body = R"({"usage":{"prompt_tokens":"7","completion_tokens":-1}})";
    out->Respond(std::move(resp));
  };
  Front front2(replica.url());
  EXPECT_EQ(testing::HttpCall(front2.port(), "POST", "/v1/completions", "{}").status, 200);
  auto r2 = front2.box.Wait();
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->prompt_tokens, -1);
  EXPECT_EQ(r2->completion_tokens, -1);
}

TEST(Proxy, ForgottenReplicaGetsAFreshClient) {
  FakeReplica replica;
  std::atomic<int> n{0};
  replica.handler = [&](const http::HttpRequest&, std::shared_ptr<http::Responder> out) {
    http::HttpResponse resp;
    resp.body = "{\"n\":" + std::to_string(++n) + "}";
    out->Respond(std::move(resp));
  };
  Upstreams ups;
  ups.Start();
  for (int i = 0; i < 3; ++i) {
    auto out = std::make_shared<RecordingResponder>();
    auto r = CallDirect(ups, replica.url(), out);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->kind, Kind::kDone);
    EXPECT_EQ(out->response().body, "{\"n\":" + std::to_string(i + 1) + "}");
    if (i == 1) ups.Forget(replica.url());
  }
  EXPECT_EQ(n.load(), 3);
}

TEST(Proxy, BodiesOverTheBufferBoundAreStreamedOrKeptBack) {
  FakeReplica replica;
  const std::string big(100, 'b');
  replica.handler = [&](const http::HttpRequest& req, std::shared_ptr<http::Responder> out) {
    http::HttpResponse resp;
    resp.status = req.path == "/bad" ? 400 : 200;
    resp.body = big;
    out->Respond(std::move(resp));
  };
  UpstreamOptions o;
  o.max_buffered_body = 16;
  Upstreams ups(o);
  ups.Start();
  auto out = std::make_shared<RecordingResponder>();
  auto r = CallDirect(ups, replica.url(), out);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kDone);
  EXPECT_EQ(out->log(), "begin application/json;write " + big + ";end;");
  auto bad_out = std::make_shared<RecordingResponder>();
  UpstreamCall c;
  c.url = replica.url();
  c.path = "/bad";
  c.deadline = Clock::now() + 5s;
  ResultBox box;
  ups.Call(c, bad_out, {}, nullptr, [&](UpstreamResult res) { box.Set(std::move(res)); });
  auto bad = box.Wait();
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->kind, Kind::kRetryable);
  EXPECT_EQ(bad->status.code(), StatusCode::kResourceExhausted) << bad->status.ToString();
  EXPECT_EQ(bad_out->log(), "");
}

// Malformed upstream responses: each gives a clean result, and nothing reaches the client unless
// the response had started.
TEST(Proxy, MalformedUpstreamResponsesGiveCleanResults) {
  const std::string sse_head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
  struct Case {
    std::string name, script;
    Kind kind;
  };
  const std::vector<Case> cases = {
      {"garbage", "hello there\r\n\r\n", Kind::kRetryable},
      {"not http", "SSH-2.0-OpenSSH_9.2\r\n", Kind::kRetryable},
      {"closed at once", "", Kind::kRetryable},
      {"huge header", "HTTP/1.1 200 OK\r\nX-Big: " + std::string(100 << 10, 'a') + "\r\n\r\n",
       Kind::kRetryable},
      {"bad content-length", "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n{}", Kind::kRetryable},
      {"short body",
       "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":",
       Kind::kRetryable},
      {"bad chunk size", sse_head + "zz\r\ndata: x\n\n\r\n", Kind::kRetryable},
      {"truncated chunked", sse_head + Chunked("data: {\"a\":1}\n\n") + "40\r\ndata: {",
       Kind::kFailedMidStream},
      {"bad chunk after data", sse_head + Chunked("data: {\"a\":1}\n\n") + "q\r\n\r\n",
       Kind::kFailedMidStream},
      {"4xx truncated", "HTTP/1.1 400 Bad Request\r\nContent-Length: 50\r\n\r\n{\"error\"",
       Kind::kRetryable},
  };
  Upstreams ups;
  ups.Start();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RawUpstream raw(c.script, false);
    auto out = std::make_shared<RecordingResponder>();
    const auto t0 = Clock::now();
    auto r = CallDirect(ups, raw.url(), out);
    ASSERT_TRUE(r);
    EXPECT_LT(Clock::now() - t0, 3s);
    EXPECT_EQ(r->kind, c.kind) << UpstreamKindName(r->kind) << " " << r->status.ToString();
    EXPECT_FALSE(r->status.ok());
    if (c.kind == Kind::kRetryable) {
      EXPECT_EQ(out->log(), "");
    } else {
      // The first event was relayed, then an error event, then the end.
      const std::string log = out->log();
      EXPECT_EQ(log.rfind("begin text/event-stream;write data: {\"a\":1}\n\n;", 0), 0u) << log;
      EXPECT_NE(log.find("upstream_error"), std::string::npos) << log;
      EXPECT_EQ(log.find("write data: {;"), std::string::npos) << log;  // no half event
      EXPECT_EQ(log.substr(log.size() - 4), "end;") << log;
      EXPECT_EQ(r->stream_chunks, 1);
    }
  }
}

// Whether `w` ends with an empty line (LF, CR or CRLF line ends).
bool EndsAnEvent(std::string_view w) {
  size_t n = w.ends_with("\r\n") ? 2 : (w.ends_with("\n") || w.ends_with("\r")) ? 1 : 0;
  if (n == 0 || w.size() <= n) return false;
  const char before = w[w.size() - n - 1];
  return before == '\n' || before == '\r';
}

// SSE is relayed event by event: an event split across upstream chunks reaches the client whole
// (whatever the line ends), and a stream that dies before its first complete event is retryable.
TEST(Proxy, SseIsRelayedInWholeEvents) {
  const std::string head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
  Upstreams ups;
  ups.Start();
  {
    RawUpstream raw(head + Chunked("data: {\"x\":") + Chunked("1}\r") + Chunked("\n\r") +
                        Chunked("\ndata: {\"y\":2}\r\rdata: [DO") + Chunked("NE]\n\n") +
                        "0\r\n\r\n",
                    false);
    auto out = std::make_shared<RecordingResponder>();
    auto r = CallDirect(ups, raw.url(), out);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->kind, Kind::kDone) << r->status.ToString();
    EXPECT_EQ(r->stream_chunks, 2);
    std::string log = out->log(), joined;
    ASSERT_EQ(log.rfind("begin text/event-stream;", 0), 0u) << log;
    ASSERT_EQ(log.substr(log.size() - 4), "end;") << log;
    log = log.substr(24, log.size() - 28);
    for (size_t pos = 0; pos < log.size();) {  // every write ends an event
      ASSERT_EQ(log.compare(pos, 6, "write "), 0) << log;
      const size_t semi = log.find(';', pos);
      const std::string w = log.substr(pos + 6, semi - pos - 6);
      EXPECT_TRUE(EndsAnEvent(w)) << w;
      joined += w;
      pos = semi + 1;
    }
    EXPECT_EQ(joined, "data: {\"x\":1}\r\n\r\ndata: {\"y\":2}\r\rdata: [DONE]\n\n");
  }
  {
    RawUpstream raw(head + Chunked("data: {\"x\":"), false);  // dies inside its first event
    auto out = std::make_shared<RecordingResponder>();
    auto r = CallDirect(ups, raw.url(), out);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->kind, Kind::kRetryable);
    EXPECT_EQ(r->http_status, 200);
    EXPECT_EQ(out->log(), "");
  }
}

TEST(Proxy, SilentUpstreamEndsAtTheDeadline) {
  RawUpstream raw("", true);
  Upstreams ups;
  ups.Start();
  auto out = std::make_shared<RecordingResponder>();
  const auto t0 = Clock::now();
  auto r = CallDirect(ups, raw.url(), out, 300ms);
  ASSERT_TRUE(r);
  EXPECT_GE(Clock::now() - t0, 250ms);
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_EQ(r->kind, Kind::kRetryable);
  EXPECT_EQ(r->status.code(), StatusCode::kDeadlineExceeded) << r->status.ToString();
  EXPECT_EQ(out->log(), "");
  EXPECT_EQ(KeptResponse(*r, {}).status, 504);
  // A 5xx that never ends its body is cut at the capture bound, not at the deadline.
  RawUpstream endless(
      "HTTP/1.1 500 Oops\r\nContent-Length: 1000000\r\n\r\n" + std::string(70 << 10, 'x'), true);
  const auto t1 = Clock::now();
  auto e = CallDirect(ups, endless.url(), out, 10s);
  ASSERT_TRUE(e);
  EXPECT_LT(Clock::now() - t1, 3s);
  EXPECT_EQ(e->kind, Kind::kRetryable);
  EXPECT_EQ(e->http_status, 500);
  EXPECT_EQ(e->body.size(), 64u << 10);
}

TEST(Proxy, StopFinishesCallsInFlight) {
  RawUpstream raw("", true);
  auto ups = std::make_unique<Upstreams>();
  ups->Start();
  auto out = std::make_shared<RecordingResponder>();
  UpstreamCall c;
  c.url = raw.url();
  c.path = "/v1/completions";
  c.deadline = Clock::now() + 60s;
  ResultBox box;
  ups->Call(c, out, {}, nullptr, [&](UpstreamResult r) { box.Set(std::move(r)); });
  for (int i = 0; i < 400 && !raw.got_request(); ++i) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(raw.got_request());
  const auto t0 = Clock::now();
  ups->Stop();
  EXPECT_LT(Clock::now() - t0, 2s);
  auto r = box.Wait(1s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kRetryable);
  EXPECT_EQ(r->status.message(), "gateway stopping");
  // After Stop, a call is answered at once.
  ResultBox late;
  ups->Call(c, out, {}, nullptr, [&](UpstreamResult res) { late.Set(std::move(res)); });
  auto l = late.Wait(1s);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->kind, Kind::kRetryable);
  EXPECT_EQ(out->log(), "");
}

// ------------------------------------------------------------------------------------------------
// Fetch: the whole response comes back in the result; nothing is relayed.

std::optional<UpstreamResult> FetchDirect(Upstreams& ups, const std::string& url,
                                          std::string path = "/v1/completions",
                                          std::shared_ptr<Cancel> cancel = nullptr,
                                          std::chrono::milliseconds timeout = 5000ms) {
  UpstreamCall c;
  c.url = url;
  c.path = std::move(path);
  c.body = R"({"prompt":"hi"})";
  c.headers = {{"x-strata-tenant", "acme"}};
  c.api_key = "k";
  c.deadline = Clock::now() + timeout;
  auto box = std::make_shared<ResultBox>();
  ups.Fetch(std::move(c), std::move(cancel), [box](UpstreamResult r) { box->Set(std::move(r)); });
  return box->Wait(timeout + 5s);
}

TEST(Fetch, JsonAnswerIsReturnedWhole) {
  FakeReplica replica;
  std::string seen_body, seen_auth, seen_tenant;
  const std::string answer =
      R"({"choices":[{"text":"ok"}],"usage":{"prompt_tokens":3,"completion_tokens":4}})";
  replica.handler = [&](const http::HttpRequest& req, std::shared_ptr<http::Responder> out) {
    seen_body = req.body;
    seen_auth = std::string(req.Header("authorization"));
    seen_tenant = std::string(req.Header("x-strata-tenant"));
    http::HttpResponse resp;
    resp.body = answer;
    resp.headers = {{"x-request-id", "abc"}, {"x-secret", "s"}};
    out->Respond(std::move(resp));
  };
  Upstreams ups;
  ups.Start();
  auto r = FetchDirect(ups, replica.url());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kDone) << r->status.ToString();
  EXPECT_EQ(r->http_status, 200);
  EXPECT_EQ(r->body, answer);
  EXPECT_EQ(r->content_type, "application/json");
  EXPECT_EQ(HeaderOf(r->headers, "x-request-id"), "abc");
  EXPECT_EQ(HeaderOf(r->headers, "x-secret"), "");
  EXPECT_EQ(r->prompt_tokens, 3);
  EXPECT_EQ(r->completion_tokens, 4);
  EXPECT_GT(r->total_s, 0);
  EXPECT_EQ(seen_body, R"({"prompt":"hi"})");
  EXPECT_EQ(seen_auth, "Bearer k");
  EXPECT_EQ(seen_tenant, "acme");
}

TEST(Fetch, ClientErrorIsDoneWithItsBody) {
  FakeReplica replica;
  replica.handler = [&](const http::HttpRequest&, std::shared_ptr<http::Responder> out) {
    http::HttpResponse resp;
    resp.status = 400;
    resp.body = R"({"error":{"message":"bad"}})";
    out->Respond(std::move(resp));
  };
  Upstreams ups;
  ups.Start();
  auto r = FetchDirect(ups, replica.url());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kDone);
  EXPECT_EQ(r->http_status, 400);
  EXPECT_EQ(r->body, R"({"error":{"message":"bad"}})");
}

TEST(Fetch, SseAndChunkedBodiesAreCollected) {
  FakeReplica replica;
  replica.handler = [&](const http::HttpRequest& req, std::shared_ptr<http::Responder> out) {
    const bool sse = req.path == "/sse";
    out->Begin(sse ? "text/event-stream" : "application/json", {});
    if (sse) {
      out->Write(http::SseEvent(R"({"choices":[{"text":"a"}]})"));
      out->Write(
          http::SseEvent(R"({"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}})"));
      out->Write(std::string(http::kSseDone));
    } else {
      out->Write(R"({"choices":)");
      out->Write(R"([]})");
    }
    out->End();
  };
  Upstreams ups;
  ups.Start();
  auto sse = FetchDirect(ups, replica.url(), "/sse");
  ASSERT_TRUE(sse);
  EXPECT_EQ(sse->kind, Kind::kDone);
  EXPECT_EQ(sse->content_type, "text/event-stream");
  auto events = testing::SseData(sse->body);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2], "[DONE]");
  EXPECT_EQ(sse->stream_chunks, 2);
  EXPECT_EQ(sse->completion_tokens, 2);
  auto chunked = FetchDirect(ups, replica.url(), "/chunked");
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->kind, Kind::kDone);
  EXPECT_EQ(chunked->body, R"({"choices":[]})");
}

TEST(Fetch, ServerErrorAndRefusedAreRetryable) {
  FakeReplica replica;
  replica.handler = [&](const http::HttpRequest&, std::shared_ptr<http::Responder> out) {
    http::HttpResponse resp;
    resp.status = 503;
    resp.body = "busy";
    out->Respond(std::move(resp));
  };
  Upstreams ups;
  ups.Start();
  auto r = FetchDirect(ups, replica.url());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kRetryable);
  EXPECT_EQ(r->http_status, 503);
  EXPECT_EQ(r->body, "busy");
  auto refused = FetchDirect(ups, RefusedUrl());
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->kind, Kind::kRetryable);
  EXPECT_EQ(refused->http_status, 0);
  EXPECT_FALSE(refused->status.ok());
}

TEST(Fetch, BodiesOverTheBoundAreRetryableNotTruncated) {
  FakeReplica replica;
  replica.handler = [&](const http::HttpRequest& req, std::shared_ptr<http::Responder> out) {
    if (req.path == "/stream") {
      out->Begin("application/json", {});
      for (int i = 0; i < 10; ++i) out->Write(std::string(10, 'x'));
      out->End();
      return;
    }
    http::HttpResponse resp;
    resp.body = std::string(100, 'b');
    out->Respond(std::move(resp));
  };
  UpstreamOptions o;
  o.max_buffered_body = 16;
  Upstreams ups(o);
  ups.Start();
  for (const char* path : {"/sized", "/stream"}) {
    auto r = FetchDirect(ups, replica.url(), path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->kind, Kind::kRetryable) << path;
    EXPECT_EQ(r->status.code(), StatusCode::kResourceExhausted) << r->status.ToString();
    EXPECT_EQ(r->body, "");
  }
}

TEST(Fetch, SseBrokenMidStreamIsRetryable) {
  RawUpstream raw(
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
          Chunked("data: {\"x\":1}\n\n"),
      false);
  Upstreams ups;
  ups.Start();
  auto r = FetchDirect(ups, raw.url());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kRetryable) << UpstreamKindName(r->kind);
  EXPECT_FALSE(r->status.ok());
  EXPECT_EQ(r->body, "");
}

TEST(Fetch, CancelEndsTheCallAndClosesTheUpstream) {
  FakeReplica replica;
  std::atomic<bool> got{false}, upstream_closed{false};
  replica.handler = [&](const http::HttpRequest&, std::shared_ptr<http::Responder> out) {
    out->OnClose([&] { upstream_closed.store(true); });
    replica.Keep(out);
    got.store(true);
  };
  Upstreams ups;
  ups.Start();
  auto cancel = std::make_shared<Cancel>();
  auto box = std::make_shared<ResultBox>();
  UpstreamCall c;
  c.url = replica.url();
  c.path = "/v1/completions";
  c.deadline = Clock::now() + 10s;
  ups.Fetch(c, cancel, [box](UpstreamResult r) { box->Set(std::move(r)); });
  for (int i = 0; i < 500 && !got.load(); ++i) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(got.load());
  std::this_thread::sleep_for(50ms);
  cancel->Fire();
  auto r = box->Wait(2s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Kind::kClientGone);
  for (int i = 0; i < 400 && !upstream_closed.load(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(upstream_closed.load());
}

TEST(Fetch, NotRunningAnswersAtOnce) {
  Upstreams ups;
  bool called = false;
  UpstreamResult got;
  ups.Fetch(UpstreamCall{}, nullptr, [&](UpstreamResult r) {
    called = true;
    got = std::move(r);
  });
  EXPECT_TRUE(called);
  EXPECT_EQ(got.kind, Kind::kRetryable);
  EXPECT_EQ(got.status.code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace strata::gateway
