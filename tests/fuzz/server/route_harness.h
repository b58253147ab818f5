// RouteHarness: the real `strata serve` route handler (server::Api over the real Engine driven by
// FakeModelRunner, the builtin byte-level tokenizer and a small chat template) called in process,
// without sockets: Send() hands one request to Api::Handle and waits for its whole response
// (complete or streamed). For the route fuzz target and the structure-aware mutant enumeration,
// which both require every answer to be 2xx or 4xx.
//
// Ownership: owns the engine, the Api and one worker thread that runs Responder::Post work.
// Thread contract: Send from one thread at a time.
// Errors: Send returns status 0 when no complete response came within the timeout (a hang).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/sched/engine.h"
#include "engine/sched/fake_runner.h"
#include "http/server.h"
#include "server/api.h"

namespace strata::fuzz {

// One response, captured in memory. Post() work runs on the harness's worker thread (never inline).
class CapturingResponder final : public http::Responder {
 public:
  using Poster = std::function<void(std::function<void()>)>;
  explicit CapturingResponder(Poster post) : post_(std::move(post)) {}
  void Respond(http::HttpResponse r) override {
    std::lock_guard lk(mu_);
    if (started_) return;
    started_ = done_ = true;
    status_ = r.status;
    body_ = std::move(r.body);
    cv_.notify_all();
  }
  void Begin(std::string, std::vector<std::pair<std::string, std::string>>) override {
    std::lock_guard lk(mu_);
    if (started_) return;
    started_ = true;
    status_ = 200;
  }
  void Write(std::string chunk) override {
    std::lock_guard lk(mu_);
    if (started_ && !done_ && body_.size() < (8u << 20)) body_ += chunk;
  }
  void End() override {
    std::lock_guard lk(mu_);
    if (!started_) return;
    done_ = true;
    cv_.notify_all();
  }
  void OnClose(std::function<void()>) override {}  // the client never goes away
  bool closed() const override { return false; }
  void Post(std::function<void()> fn) override { post_(std::move(fn)); }

  // The status once the response is complete, 0 after `timeout` without one.
  int Wait(std::chrono::milliseconds timeout, std::string* body) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return done_; })) return 0;
    if (body) *body = body_;
    return status_;
  }

 private:
  Poster post_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false, done_ = false;
  int status_ = 0;
  std::string body_;
};

class RouteHarness {
 public:
  static constexpr int kBlocks = 256, kBlockSize = 16, kMaxLen = 256;

  RouteHarness() {
    auto tok = tokenizer::Tokenizer::Create(tokenizer::BuiltinByteVocab());
    tok_ = std::move(*tok);
    engine::sched::FakeRunnerConfig rc;
    rc.n_vocab = static_cast<int>(tok_->n_vocab());
    rc.num_blocks = kBlocks;
    rc.block_size = kBlockSize;
    runner_ = std::make_unique<engine::sched::FakeModelRunner>(rc);
    engine::kv::KvManagerConfig kc;
    kc.num_blocks = kBlocks;
    kc.block_size = kBlockSize;
    engine::sched::SchedulerConfig sc;
    sc.max_model_len = kMaxLen;
    auto e = engine::sched::Engine::Create(
        runner_.get(), kc, sc, &clock_,
        [r = runner_.get()](std::span<const engine::sched::BlockCopy> c) { r->CopyBlocks(c); });
    engine_ = std::move(*e);
    auto tmpl = tokenizer::chat::ChatTemplate::Parse(
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}{% if "
        "add_generation_prompt %}<|assistant|>{% endif %}");
    tmpl_ = std::move(*tmpl);
    server::ModelInfo info;
    info.name = "fuzz";
    info.tok = tok_.get();
    info.chat_template = tmpl_.get();
    info.max_model_len = kMaxLen;
    api_ = std::make_unique<server::Api>(info, engine_.get(), server::ApiOptions{});
    api_->SetReady(true);
    engine_->Start();
    worker_ = std::thread([this] { WorkerLoop(); });
  }
  ~RouteHarness() {
    for (int i = 0; i < 1000 && api_->live_jobs() > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
    api_.reset();
    engine_->Stop();
  }
  RouteHarness(const RouteHarness&) = delete;
  RouteHarness& operator=(const RouteHarness&) = delete;

  // Status of the answer to `method path` with `body` (0: no answer within `timeout`).
  int Send(const std::string& method, const std::string& path, std::string body,
           std::string* response = nullptr,
           std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
    http::HttpRequest req;
    req.method = method;
    req.path = path;
    req.body = std::move(body);
    req.headers.emplace_back("content-type", "application/json");
    auto out = std::make_shared<CapturingResponder>(
        [this](std::function<void()> fn) { Enqueue(std::move(fn)); });
    api_->Handle(std::move(req), out);
    return out->Wait(timeout, response);
  }
  server::Api& api() { return *api_; }
  engine::sched::Engine& engine() { return *engine_; }

 private:
  void Enqueue(std::function<void()> fn) {
    {
      std::lock_guard lk(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }
  void WorkerLoop() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();  // an exception here ends the process: the fuzzer's finding
    }
  }

  engine::sched::SteadyClock clock_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<tokenizer::chat::ChatTemplate> tmpl_;
  std::unique_ptr<engine::sched::FakeModelRunner> runner_;
  std::unique_ptr<engine::sched::Engine> engine_;
  std::unique_ptr<server::Api> api_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace strata::fuzz
