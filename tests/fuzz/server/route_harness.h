// RouteHarness: the real `strata serve` route handler (server::Api over the real Engine driven by
// FakeModelRunner, the builtin byte-level tokenizer and a small chat template: server::test::
// FakeStack, src/server/fake_stack_test_util.h) called in process,
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
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "http/server.h"
#include "server/api.h"
#include "server/fake_stack_test_util.h"

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
    server::test::FakeStackConfig c;
    c.num_blocks = kBlocks;
    c.block_size = kBlockSize;
    c.max_model_len = kMaxLen;
    c.model_name = "fuzz";
    c.chat_template =
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}{% if "
        "add_generation_prompt %}<|assistant|>{% endif %}";
    if (!stack_.Boot(c).ok()) std::abort();  // a fixed config: cannot fail but by a bug
    stack_.stack_engine()->Start();
    worker_ = std::thread([this] { WorkerLoop(); });
  }
  ~RouteHarness() {
    for (int i = 0; i < 1000 && stack_.stack_api()->live_jobs() > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
    stack_.Shutdown();
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
    stack_.stack_api()->Handle(std::move(req), out);
    return out->Wait(timeout, response);
  }
  server::Api& api() { return *stack_.stack_api(); }
  engine::sched::Engine& engine() { return *stack_.stack_engine(); }

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

  server::test::FakeStack stack_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace strata::fuzz
