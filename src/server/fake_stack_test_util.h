// FakeStack: the one in-process replica of the server's tests and fuzz harnesses — the builtin
// byte-level tokenizer, a FakeModelRunner (deterministic logits and hidden states), the real
// sched::Engine over it, an optional chat template and the real server::Api; with StartHttp, a
// real HttpServer on 127.0.0.1:0 in front of the Api. The server tests' fixtures
// (server_test_util.h, embeddings_test.cc) and the route fuzz harness
// (tests/fuzz/server/route_harness.h) all build on it. A fake runner, not the model files: the
// server lies below replica/ (which assembles `strata serve` from real models), so its tests
// drive the real Api and Engine over the test-only runner; tests/integration start the real
// binary.
//
// Ownership: owns every part; the members are public so fixtures (and the tests written against
// them) reach the parts directly. Thread contract: built and shut down from one thread; the
// HTTP I/O threads call into the Api, the engine thread runs after engine_->Start().
// Shutdown() stops the HTTP server before the Api goes and the Api before the engine stops.
// Errors: Boot/StartHttp return a Status naming the part that failed.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "base/status.h"
#include "engine/sched/engine.h"
#include "engine/sched/fake_runner.h"
#include "http/server.h"
#include "server/api.h"
#include "tokenizer/chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace strata::server::test {

struct FakeStackConfig {
  int num_blocks = 64, block_size = 16, max_model_len = 256;
  engine::sched::SchedulerConfig scheduler;  // its max_model_len is set from max_model_len
  std::string model_name = "fake";
  std::string chat_template;  // Jinja text; "": none
  ApiOptions api;
  // Whether the engine copies KV blocks through the runner (copy-on-write of shared blocks).
  bool copy_blocks = true;
  // The runner the engine drives, given the fake one (e.g. a wrapper that slows it); null: it.
  std::function<engine::runner::ModelRunner*(engine::sched::FakeModelRunner*)> runner;
};

class FakeStack {
 public:
  FakeStack() = default;
  FakeStack(const FakeStack&) = delete;
  FakeStack& operator=(const FakeStack&) = delete;
  ~FakeStack() { Shutdown(); }

  // Builds tokenizer, runner, engine (not started), template and Api (ready).
  Status Boot(const FakeStackConfig& c) {
    ASSIGN_OR_RETURN(tok_, tokenizer::Tokenizer::Create(tokenizer::BuiltinByteVocab()));
    rc_.n_vocab = static_cast<int>(tok_->n_vocab());
    rc_.num_blocks = c.num_blocks;
    rc_.block_size = c.block_size;
    runner_ = std::make_unique<engine::sched::FakeModelRunner>(rc_);
    engine::kv::KvManagerConfig kc;
    kc.num_blocks = c.num_blocks;
    kc.block_size = c.block_size;
    engine::sched::SchedulerConfig sc = c.scheduler;
    sc.max_model_len = c.max_model_len;
    engine::runner::ModelRunner* runner = c.runner ? c.runner(runner_.get()) : runner_.get();
    engine::sched::BlockCopyFn copy;
    if (c.copy_blocks)
      copy = [r = runner_.get()](std::span<const engine::sched::BlockCopy> b) { r->CopyBlocks(b); };
    ASSIGN_OR_RETURN(engine_, engine::sched::Engine::Create(runner, kc, sc, &clock_, copy));
    ModelInfo info;
    info.name = c.model_name;
    info.tok = tok_.get();
    info.max_model_len = c.max_model_len;
    if (!c.chat_template.empty()) {
      ASSIGN_OR_RETURN(tmpl_, tokenizer::chat::ChatTemplate::Parse(c.chat_template));
      info.chat_template = tmpl_.get();
    }
    api_ = std::make_unique<Api>(info, engine_.get(), c.api);
    api_->SetReady(true);
    return Status::Ok();
  }

  // Starts an HttpServer (port 0 unless `o` says otherwise) whose handler is `wrap` around the
  // Api's (null: the Api's alone); the bound port is port_.
  using Handler = std::function<void(http::HttpRequest, std::shared_ptr<http::Responder>)>;
  Status StartHttp(const http::HttpServerOptions& o, std::function<Handler(Handler)> wrap = {}) {
    Handler h = [a = api_.get()](http::HttpRequest rq, std::shared_ptr<http::Responder> out) {
      a->Handle(std::move(rq), std::move(out));
    };
    ASSIGN_OR_RETURN(server_, http::HttpServer::Start(o, wrap ? wrap(std::move(h)) : h));
    port_ = server_->port();
    return Status::Ok();
  }

  // HTTP stopped (no I/O callback, so no Api call, after it), Api dropped, engine stopped. The
  // engine and runner objects stay for inspection.
  void Shutdown() {
    if (server_) server_->Stop();
    api_.reset();
    if (engine_) engine_->Stop();
    server_.reset();
  }

  // For a user that holds a FakeStack rather than deriving from it (the route fuzz harness).
  engine::sched::Engine* stack_engine() const { return engine_.get(); }
  Api* stack_api() const { return api_.get(); }

 protected:
  engine::sched::SteadyClock clock_;
  engine::sched::FakeRunnerConfig rc_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<tokenizer::chat::ChatTemplate> tmpl_;
  std::unique_ptr<engine::sched::FakeModelRunner> runner_;
  std::unique_ptr<engine::sched::Engine> engine_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<http::HttpServer> server_;
  int port_ = 0;
};

}  // namespace strata::server::test
