// The in-process server fixture of the server tests (over FakeStack, fake_stack_test_util.h): a
// real HttpServer on 127.0.0.1:0, the real Engine driven by FakeModelRunner, the builtin
// byte-level tokenizer and a tiny chat template; a
// request header `x-test-throw: respond|write` makes the Api's first Respond()/Write() throw, so
// the tests can fire the HttpServer's last-resort guard through the real route code.
// Thread contract: a fixture per test, used from the test's thread; the server's I/O threads call
// into the Api it owns. Shutdown() stops the server before the Api goes.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "http/server.h"
#include "integration/http_test_client.h"
#include "server/api.h"
#include "server/fake_stack_test_util.h"
#include "server/openai_request.h"

namespace strata::server::test {

using http::HttpRequest;
using http::HttpServer;
using http::HttpServerOptions;
using http::Responder;
using nlohmann::json;
using testing::HttpCall;
using testing::HttpConn;
using testing::SseData;

// A Responder that throws on purpose from inside the Api (header `x-test-throw: respond` or
// `write`: the first Respond() / Write() throws), so the tests can make the HttpServer's
// last-resort guard fire through the real route code. Everything else is passed on.
class ThrowingResponder final : public Responder {
 public:
  ThrowingResponder(std::shared_ptr<Responder> inner, std::string mode)
      : inner_(std::move(inner)), mode_(std::move(mode)) {}
  void Respond(http::HttpResponse r) override {
    if (mode_ == "respond" && !thrown_.exchange(true)) throw std::runtime_error("respond boom");
    inner_->Respond(std::move(r));
  }
  void Begin(std::string ct, std::vector<std::pair<std::string, std::string>> h) override {
    inner_->Begin(std::move(ct), std::move(h));
  }
  void Write(std::string chunk) override {
    if (mode_ == "write" && !thrown_.exchange(true)) throw std::runtime_error("write boom");
    inner_->Write(std::move(chunk));
  }
  void End() override { inner_->End(); }
  void OnClose(std::function<void()> cb) override { inner_->OnClose(std::move(cb)); }
  bool closed() const override { return inner_->closed(); }
  void Post(std::function<void()> fn) override { inner_->Post(std::move(fn)); }

 private:
  std::shared_ptr<Responder> inner_;
  std::string mode_;
  std::atomic<bool> thrown_{false};
};

constexpr int kBlocks = 64, kBlockSize = 16, kMaxLen = 256;

class ServerTest : public ::testing::Test, protected FakeStack {
 protected:
  void SetUp() override { Boot(1024, {}); }
  void TearDown() override { Shutdown(); }

  void Boot(int max_queued, std::vector<std::string> keys) {
    FakeStackConfig c;
    c.num_blocks = kBlocks;
    c.block_size = kBlockSize;
    c.max_model_len = kMaxLen;
    c.scheduler.max_queued_requests = max_queued;
    c.chat_template =
        "{% for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('role bad is not "
        "allowed') }}{% endif %}"
        "<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% "
        "endif %}";
    c.api.api_keys = std::move(keys);
    c.api.adapters = adapters_;
    c.api.tracer = tracer_;
    const Status booted = FakeStack::Boot(c);
    ASSERT_TRUE(booted.ok()) << booted.ToString();
    HttpServerOptions so;
    so.port = 0;
    so.max_body_bytes = 1 << 16;
    so.read_timeout = std::chrono::milliseconds(500);
    so.on_internal_error = [a = api_.get()](std::string_view m, std::string_view p,
                                            std::string_view) { a->OnInternalError(m, p); };
    // `x-test-throw: respond|write` wraps the responder in one that throws (ThrowingResponder).
    auto s = StartHttp(so, [](const Handler& api) -> Handler {
      return [api](HttpRequest rq, std::shared_ptr<Responder> out) {
        if (std::string mode(rq.Header("x-test-throw")); !mode.empty())
          out = std::make_shared<ThrowingResponder>(std::move(out), std::move(mode));
        api(std::move(rq), std::move(out));
      };
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void StartEngine() { engine_->Start(); }
  void Shutdown() {
    FakeStack::Shutdown();
    engine_.reset();
  }

  json Post(const std::string& path, const json& body, int* status = nullptr) {
    auto r = HttpCall(port_, "POST", path, body.dump());
    if (status) *status = r.status;
    return json::parse(r.body, nullptr, false);
  }

  AdapterStore* adapters_ = nullptr;  // set before Boot(): the Api's LoRA adapters
  trace::Tracer* tracer_ = nullptr;   // set before Boot(): the Api's span exporter
};

}  // namespace strata::server::test
