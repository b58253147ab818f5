// Api: the routes of `strata serve` on top of HttpServer and the serving Engine.
//
//   GET  /health /ready /metrics /v1/models /v1/models/{id}
//   POST /v1/completions /v1/chat/completions /v1/embeddings /tokenize /detokenize /apply-template
//
// Embeddings: each input is an engine embedding request (pooled final hidden state); the I/O thread
// submits them and returns, and EmbeddingJobs (embeddings.h) answers when the engine has computed
// them all, so concurrent requests are batched by the engine. 501 when the engine's runner has no
// hidden-state output.
// Generation: the I/O thread parses the body into a GenRequest (openai_request.h), submits it to
// the Engine and registers a job with the Api's pump thread. The pump pops TokenEvents from every
// live request's stream, detokenizes incrementally, applies stop strings and hands SSE chunks (or,
// at the end, the whole response) to the connection's Responder. A client disconnect cancels the
// request in the engine at once (Responder::OnClose -> Engine::Cancel).
//
// Ownership: borrows the engine, tokenizer and template (they must outlive the Api). The HttpServer
// calling Handle() must be Stop()ped before the Api is destroyed (disconnect callbacks call into it),
// and destroyed after it (jobs hold Responders of its connections).
// Thread contract: Handle() is called concurrently by the I/O threads; everything it touches is
// either immutable, thread-safe (Engine, MetricsRegistry) or guarded by mu_.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/kvtier/tiered_cache.h"
#include "engine/sched/engine.h"
#include "server/embeddings.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace strata::server {

struct ApiOptions {
  std::vector<std::string> api_keys;  // empty: no auth
  int retry_after_s = 1;             // Retry-After on 429
  // Statistics of the KV tiers below the engine's pool, for /metrics (empty function or nullopt:
  // no tiers configured).
  std::function<std::optional<engine::kvtier::TieredKvStats>()> tier_stats;
};

class Api {
 public:
  Api(ModelInfo model, engine::sched::Engine* engine, ApiOptions options);
  ~Api();  // stops the pump; jobs still open are cancelled

  // The HttpServer handler.
  void Handle(HttpRequest req, std::shared_ptr<Responder> out);

  void SetReady(bool ready) { ready_.store(ready); }
  // Drain: /ready -> 503 and new work -> 503; in-flight requests continue.
  void StartDraining() { draining_.store(true); }
  // Requests in flight: generations and /v1/embeddings requests (the drain waits for both).
  int live_jobs() const;
  MetricsRegistry& metrics() { return metrics_; }

  struct Job;

 private:
  HttpResponse Route(const HttpRequest& req, std::shared_ptr<Responder>& out, std::string* route);
  HttpResponse Generate(Endpoint ep, const HttpRequest& req, std::shared_ptr<Responder>& out);
  HttpResponse Embeddings(const HttpRequest& req, std::shared_ptr<Responder>& out);
  bool Authorized(const HttpRequest& req) const;
  void PumpLoop();
  bool Process(Job& job);  // returns true when the job is finished
  void Finish(Job& job);
  void RefreshEngineGauges();

  ModelInfo model_;
  engine::sched::Engine* engine_;
  ApiOptions options_;
  MetricsRegistry metrics_;
  std::string model_labels_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  int64_t created_ = 0;
  std::atomic<uint64_t> next_id_{1};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Job>> jobs_;  // guarded by mu_
  bool stop_ = false;
  std::thread pump_;
  // Last member: destroyed first, so its worker (which uses metrics_) stops before anything else.
  std::unique_ptr<EmbeddingJobs> embeddings_;  // null: the runner has no hidden-state output
};

// The answer while the model is still loading: /health 200 {"status":"loading"}, anything else 503.
HttpResponse LoadingResponse(const HttpRequest& req);
// OpenAI-style error body.
std::string ErrorBody(std::string_view message, std::string_view type, std::string_view param, std::string_view code);
// Constant-time string equality (time depends only on the lengths).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace strata::server
