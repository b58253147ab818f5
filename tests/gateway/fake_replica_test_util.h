// A fake `strata serve` replica for deterministic gateway tests: an in-process http::HttpServer on
// 127.0.0.1, port 0, that serves what the test chooses —
//   GET  /ready           the chosen status and body (200 {"status":"ready"} by default);
//   GET  /metrics         the chosen Prometheus text (MetricsText() builds the gauges we read);
//   GET  /v1/kv/events    a model of the replica's event ring (AddBlocks/RemoveBlocks, Restart),
//                         or a chosen status (404: "does not publish");
//   POST /v1/completions, /v1/chat/completions, /v1/embeddings
//                         the chosen status, body and latency (a delayed answer waits on its own
//                         thread, never on an I/O thread); SetStream(n) answers SSE with n chunks.
//                         SetLatency / SetStatus change one of them; SetAnswer builds the body
//                         per request (e.g. LogprobAnswer with logprobs the test draws).
// Counts the requests per path and keeps the last POST body and headers. Thread contract: every
// method is thread-safe; an answer function runs under the fake's lock (it must not call back into
// it).
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cachekey/block_hash.h"
#include "http/server.h"

namespace strata::gateway::testing {

class FakeReplica {
 public:
  FakeReplica() {
    http::HttpServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.io_threads = 2;
    auto s = http::HttpServer::Start(
        o, [this](const http::HttpRequest& req, std::shared_ptr<http::Responder> out) {
          Handle(req, std::move(out));
        });
    if (s.ok()) server_ = std::move(*s);
  }
  ~FakeReplica() {
    std::vector<std::thread> delayed;
    {
      std::lock_guard<std::mutex> l(mu_);
      delayed.swap(delayed_);
    }
    for (std::thread& t : delayed) t.join();  // answered before the server goes away
    Stop();
  }
  FakeReplica(const FakeReplica&) = delete;
  FakeReplica& operator=(const FakeReplica&) = delete;

  bool ok() const { return server_ != nullptr; }
  uint16_t port() const { return port_ ? port_ : (server_ ? server_->port() : 0); }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", port()); }
  // Closes the listener and every connection (a dead replica: connections are refused).
  void Stop() {
    if (server_) port_ = server_->port();
    if (server_) server_->Stop();
  }

  void SetReady(int status, std::string body) {
    std::lock_guard<std::mutex> l(mu_);
    ready_status_ = status;
    ready_body_ = std::move(body);
  }
  void SetMetrics(std::string text) {
    std::lock_guard<std::mutex> l(mu_);
    metrics_ = std::move(text);
  }
  static std::string MetricsText(double waiting, double running, double prompt_tokens_total,
                                 double kv_usage = 0) {
    return fmt::format(
        "# HELP strata:num_requests_waiting Requests waiting.\n"
        "# TYPE strata:num_requests_waiting gauge\n"
        "strata:num_requests_waiting{{model_name=\"m\"}} {}\n"
        "strata:num_requests_running{{model_name=\"m\"}} {}\n"
        "strata:kv_cache_usage_perc{{model_name=\"m\"}} {}\n"
        "strata:prompt_tokens_total{{model_name=\"m\",tier=\"silver\"}} {}\n",
        waiting, running, kv_usage, prompt_tokens_total);
  }
  void SetCompletion(int status, std::string body, std::chrono::milliseconds latency) {
    std::lock_guard<std::mutex> l(mu_);
    completion_status_ = status;
    completion_body_ = std::move(body);
    latency_ = latency;
  }
  void SetLatency(std::chrono::milliseconds latency) {
    std::lock_guard<std::mutex> l(mu_);
    latency_ = latency;
  }
  void SetStatus(int status) {
    std::lock_guard<std::mutex> l(mu_);
    completion_status_ = status;
  }
  // The body of each POST answer, built from the request's body (empty function: the fixed body
  // of SetCompletion).
  void SetAnswer(std::function<std::string(const std::string& request_body)> fn) {
    std::lock_guard<std::mutex> l(mu_);
    answer_fn_ = std::move(fn);
  }
  // An OpenAI answer (chat: `chat.completion`, else `text_completion`) with one choice of
  // `logprobs.size()` tokens "t0".."tN": each token's logprob, and two alternatives — the token
  // itself and a runner-up `margin` below it. `model` names the answering model.
  static std::string LogprobAnswer(bool chat, const std::vector<double>& logprobs, double margin,
                                   const std::string& model = "fake") {
    using nlohmann::json;
    std::string text;
    json content = json::array(), tokens = json::array(), values = json::array(),
         tops = json::array(), offsets = json::array();
    for (size_t i = 0; i < logprobs.size(); ++i) {
      const std::string tok = fmt::format("t{} ", i);
      const double lp = logprobs[i];
      offsets.push_back(text.size());
      text += tok;
      content.push_back(
          {{"token", tok},
           {"logprob", lp},
           {"bytes", json::array()},
           {"top_logprobs",
            json::array(
                {{{"token", tok}, {"logprob", lp}, {"bytes", json::array()}},
                 {{"token", "alt"}, {"logprob", lp - margin}, {"bytes", json::array()}}})}});
      tokens.push_back(tok);
      values.push_back(lp);
      tops.push_back({{tok, lp}, {"alt", lp - margin}});
    }
    json choice = {{"index", 0}, {"finish_reason", "length"}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
      choice["logprobs"] = {{"content", content}};
    } else {
      choice["text"] = text;
      choice["logprobs"] = {{"tokens", tokens},
                            {"token_logprobs", values},
                            {"top_logprobs", tops},
                            {"text_offset", offsets}};
    }
    const auto n = static_cast<int64_t>(logprobs.size());
    json j = {{"id", chat ? "chatcmpl-fake" : "cmpl-fake"},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", 1},
              {"model", model},
              {"choices", json::array({choice})},
              {"usage", {{"prompt_tokens", 1}, {"completion_tokens", n}, {"total_tokens", n + 1}}}};
    return j.dump();
  }
  void SetStream(int chunks) {
    std::lock_guard<std::mutex> l(mu_);
    stream_chunks_ = chunks;
  }

  // KV events model.
  void SetKvEventsStatus(int status) {  // 200 = the event ring below; 404 = does not publish
    std::lock_guard<std::mutex> l(mu_);
    kv_status_ = status;
  }
  void SetKvIdentity(int block_size, std::vector<uint8_t> model_salt) {
    std::lock_guard<std::mutex> l(mu_);
    block_size_ = block_size;
    model_salt_ = std::move(model_salt);
  }
  void AddBlocks(const std::vector<cachekey::BlockHash>& hashes, const std::string& tier = "pool") {
    Log("add", tier, hashes);
  }
  void RemoveBlocks(const std::vector<cachekey::BlockHash>& hashes,
                    const std::string& tier = "pool") {
    Log("remove", tier, hashes);
  }
  // A new process: a new instance id, nothing held, the cursor numbering starts again.
  void Restart() {
    std::lock_guard<std::mutex> l(mu_);
    ++instance_;
    log_.clear();
    held_.clear();
    cursor_ = 0;
  }
  int64_t resets_served() const { return resets_.load(); }

  std::string last_body() const {  // the body of the last POST
    std::lock_guard<std::mutex> l(mu_);
    return last_body_;
  }
  // Header `lower_name` of the last POST ("" when absent), e.g. traceparent.
  std::string last_header(const std::string& lower_name) const {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [name, value] : last_headers_)
      if (name == lower_name) return value;
    return "";
  }
  // How many times the last POST carried header `lower_name`.
  int last_header_count(const std::string& lower_name) const {
    std::lock_guard<std::mutex> l(mu_);
    int n = 0;
    for (const auto& h : last_headers_) n += h.first == lower_name ? 1 : 0;
    return n;
  }
  std::string last_auth() const {  // the Authorization header of the last request
    std::lock_guard<std::mutex> l(mu_);
    return last_auth_;
  }
  int64_t count(const std::string& path) const {
    std::lock_guard<std::mutex> l(mu_);
    auto it = counts_.find(path);
    return it == counts_.end() ? 0 : it->second;
  }

 private:
  struct Event {
    int64_t seq;
    std::string op, tier, hash;
  };

  void Log(const std::string& op, const std::string& tier,
           const std::vector<cachekey::BlockHash>& hashes) {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& h : hashes) {
      std::string hex = cachekey::HashToHex(h);
      if (op == "add")
        held_[tier].insert(hex);
      else
        held_[tier].erase(hex);
      log_.push_back({++cursor_, op, tier, hex});
    }
  }

  std::string EventsBody(const std::string& query) {
    int64_t since = 0;
    size_t p = query.find("since=");
    if (p != std::string::npos) since = std::atoll(query.c_str() + p + 6);
    nlohmann::json events = nlohmann::json::array();
    const bool reset = since <= 0 || since > cursor_;
    if (reset) {
      ++resets_;
      for (const auto& [tier, set] : held_)
        events.push_back(
            {{"op", "add"}, {"tier", tier}, {"hashes", std::vector(set.begin(), set.end())}});
    } else {
      for (const Event& e : log_)
        if (e.seq > since) events.push_back({{"op", e.op}, {"tier", e.tier}, {"hashes", {e.hash}}});
    }
    std::string salt_hex;
    for (uint8_t b : model_salt_) salt_hex += fmt::format("{:02x}", b);
    nlohmann::json j = {{"instance", fmt::format("inst{}", instance_)},
                        {"block_size", block_size_},
                        {"model_salt", salt_hex},
                        {"cursor", cursor_},
                        {"reset", reset},
                        {"events", events}};
    return j.dump();
  }

  void Handle(const http::HttpRequest& req, std::shared_ptr<http::Responder> out) {
    std::unique_lock<std::mutex> l(mu_);
    ++counts_[req.path];
    last_auth_ = std::string(req.Header("authorization"));
    http::HttpResponse r;
    if (req.path == "/ready") {
      r.status = ready_status_;
      r.body = ready_body_;
    } else if (req.path == "/metrics") {
      r.content_type = "text/plain; version=0.0.4";
      r.body = metrics_;
    } else if (req.path == "/v1/kv/events") {
      r.status = kv_status_;
      r.body = kv_status_ == 200 ? EventsBody(req.query) : R"({"error":{"message":"not found"}})";
    } else if (req.method == "POST") {
      last_body_ = req.body;
      last_headers_ = req.headers;
      Generate(std::move(out), l);
      return;
    } else {
      r.status = 404;
      r.body = R"({"error":{"message":"not found"}})";
    }
    l.unlock();
    out->Respond(std::move(r));
  }

  void Generate(std::shared_ptr<http::Responder> out, std::unique_lock<std::mutex>& l) {
    const int status = completion_status_, chunks = stream_chunks_;
    const std::string body = answer_fn_ ? answer_fn_(last_body_) : completion_body_;
    const auto latency = latency_;
    auto answer = [out, status, chunks, body] {
      if (chunks > 0 && status == 200) {
        out->Begin("text/event-stream", {});
        for (int i = 0; i < chunks; ++i) out->Write("data: " + body + "\n\n");
        out->Write("data: [DONE]\n\n");
        out->End();
        return;
      }
      http::HttpResponse r;
      r.status = status;
      r.body = body;
      out->Respond(std::move(r));
    };
    if (latency.count() <= 0) {
      l.unlock();
      answer();
      return;
    }
    delayed_.emplace_back([answer, latency] {
      std::this_thread::sleep_for(latency);
      answer();
    });
  }

  std::unique_ptr<http::HttpServer> server_;
  uint16_t port_ = 0;
  mutable std::mutex mu_;
  int ready_status_ = 200;
  std::string ready_body_ = R"({"status":"ready"})";
  std::string metrics_ = MetricsText(0, 0, 0);
  int completion_status_ = 200;
  std::string completion_body_ =
      R"({"id":"cmpl-fake","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}})";
  std::chrono::milliseconds latency_{0};
  int stream_chunks_ = 0;
  int kv_status_ = 200;
  int block_size_ = 16;
  std::vector<uint8_t> model_salt_ = {0x01, 0x02};
  int instance_ = 1;
  int64_t cursor_ = 0;
  std::vector<Event> log_;
  std::map<std::string, std::set<std::string>> held_;
  std::atomic<int64_t> resets_{0};
  std::map<std::string, int64_t> counts_;
  std::string last_auth_;
  std::string last_body_;
  std::vector<std::pair<std::string, std::string>> last_headers_;
  std::function<std::string(const std::string&)> answer_fn_;
  std::vector<std::thread> delayed_;
};

}  // namespace strata::gateway::testing
