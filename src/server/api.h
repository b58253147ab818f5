// Api: the routes of `strata serve` on top of http::HttpServer and the serving Engine — the router
// that owns the parts which answer them.
//
//   GET  /health /ready /metrics /v1/models /v1/models/{id} /v1/kv/events
//   POST /v1/completions /v1/chat/completions /v1/embeddings /tokenize /detokenize /apply-template
//   POST /v1/load_lora_adapter /v1/unload_lora_adapter
//
// Routing is an http::Chain: match -> auth (Bearer) -> readiness -> JSON body (parsed once) ->
// model (LoraRoutes::CheckModel) -> the route's handler, which reads the parsed body from the
// http::Exchange. The parts (each header says more):
//   GenerationJobs (generate.h)         completions and chat: the jobs in flight, their push-driven
//                                       drains on the response's work strand, SSE, the shutdown cut
//   EmbeddingRoute (embedding_route.h)  /v1/embeddings over EmbeddingJobs (embeddings.h)
//   LoraRoutes     (lora_routes.h)      which adapter a request names, load/unload, LoRA gauges
//   InfoRoutes     (info_routes.h)      health, ready, models, KV events, tokenize, detokenize,
//                                       apply-template
//   ApiMetrics     (api_metrics.h)      the /metrics families and the gauges set at scrape time
// They share one ApiContext (api_context.h): the model, the engine, the options, the registry.
//
// Ownership: borrows the engine, tokenizer and template (they must outlive the Api). The HttpServer
// calling Handle() must be Stop()ped before the Api is destroyed (disconnect callbacks and drains
// run on its I/O threads and call into the Api), and destroyed after it (jobs hold Responders of
// its connections).
// Thread contract: Handle() is called concurrently by the I/O threads; everything it touches is
// either immutable or thread-safe (Engine, MetricsRegistry, Readiness, the parts' own locks). One
// job's drains run on its response's work strand, so a job is never processed by two threads at
// once.
#pragma once

#include <chrono>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/sched/engine.h"
#include "http/chain.h"
#include "http/prometheus.h"
#include "http/server.h"
#include "server/api_context.h"
#include "server/openai_request.h"

namespace strata::server {

class ApiMetrics;
class EmbeddingRoute;
class GenerationJobs;
class InfoRoutes;
class LoraRoutes;

class Api {
 public:
  Api(ModelInfo model, engine::sched::Engine* engine, ApiOptions options);
  // Stops the adapter loader, the embedding worker (cancelling embeddings in flight), then
  // detaches every live generation job from its stream and cancels it.
  ~Api();

  // The HttpServer handler.
  void Handle(http::HttpRequest req, std::shared_ptr<http::Responder> out);

  // The HttpServer's last-resort guard caught an exception on this request (HttpServerOptions::
  // on_internal_error): counts strata:internal_errors_total and the 500 in http_requests_total.
  void OnInternalError(std::string_view method, std::string_view path);

  void SetReady(bool ready) { readiness_.SetReady(ready); }
  // Drain: /ready -> 503 and new work -> 503; in-flight requests continue.
  void StartDraining() { readiness_.StartDraining(); }
  // Requests in flight: generations and /v1/embeddings requests (the drain waits for both).
  int live_jobs() const;
  // The end of the shutdown drain (--shutdown-timeout expired): ends every generation in flight —
  // streams with an SSE error event and [DONE], non-streamed requests with a 503 — counts them
  // (strata:requests_cut_at_shutdown_total), waits up to `wait` for those answers to be handed to
  // their connections, and returns how many were cut. Call before HttpServer::Stop().
  int CutAtShutdown(std::chrono::milliseconds wait);
  http::MetricsRegistry& metrics() { return ctx_.metrics; }

 private:
  std::vector<http::Route> Routes();
  http::HttpResponse Metrics(http::Exchange& ex);

  ApiContext ctx_;  // first member: every part borrows it
  http::Readiness readiness_;
  std::unique_ptr<ApiMetrics> metrics_;
  std::unique_ptr<LoraRoutes> lora_;
  std::unique_ptr<InfoRoutes> info_;
  std::unique_ptr<GenerationJobs> generation_;
  std::unique_ptr<EmbeddingRoute> embeddings_;
  http::Chain chain_;
};

// The answer while the model is still loading: /health 200 {"status":"loading"}, anything else 503.
http::HttpResponse LoadingResponse(const http::HttpRequest& req);

}  // namespace strata::server
