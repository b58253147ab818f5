// Api: the routes of `strata serve` on top of http::HttpServer and the serving Engine.
//
//   GET  /health /ready /metrics /v1/models /v1/models/{id} /v1/kv/events
//   POST /v1/completions /v1/chat/completions /v1/embeddings /tokenize /detokenize /apply-template
//   POST /v1/load_lora_adapter /v1/unload_lora_adapter
//
// Routing is an http::Chain: match -> auth (Bearer) -> readiness -> JSON body (parsed once) ->
// model -> the route's handler, which reads the parsed body from the http::Exchange.
// Generation: the handler parses the body into a GenRequest (openai_request.h), submits it to the
// Engine and installs a notification on the request's stream (RequestStream::SetNotify). The engine
// thread's push posts one drain per batch of events to the response's work strand
// (http::Responder::Post, an I/O thread, kept apart from the socket's strand); the drain
// detokenizes incrementally, applies stop strings and hands SSE events (or, at the end, the whole
// response) to the connection's Responder. Nothing polls: an idle server blocks. A client
// disconnect cancels the request in the engine at once (Responder::OnClose -> Engine::Cancel).
// Embeddings: each input is an engine embedding request (pooled final hidden state); the I/O thread
// submits them and returns, and EmbeddingJobs (embeddings.h) answers when the engine has computed
// them all, so concurrent requests are batched by the engine. 501 when the engine's runner has no
// hidden-state output.
// LoRA (ApiOptions::adapters): a request names a registered adapter in `model` or `lora`; the
// Api looks it up (AdapterStore::Get) and the engine request holds it (SubmitRequest::lora); an
// unknown one is a 404 (model_not_found). /v1/load_lora_adapter reads the file on the
// AdapterLoader's thread and answers from there; unload takes the name away (requests holding the
// adapter finish with it).
//
// Ownership: borrows the engine, tokenizer and template (they must outlive the Api). The HttpServer
// calling Handle() must be Stop()ped before the Api is destroyed (disconnect callbacks and drains
// run on its I/O threads and call into the Api), and destroyed after it (jobs hold Responders of
// its connections).
// Thread contract: Handle() is called concurrently by the I/O threads; everything it touches is
// either immutable, thread-safe (Engine, MetricsRegistry, Readiness) or guarded by mu_. One job's
// drains run on its response's work strand, so a job is never processed by two threads at once.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "engine/kvtier/tiered_cache.h"
#include "engine/sched/engine.h"
#include "http/chain.h"
#include "http/prometheus.h"
#include "http/server.h"
#include "server/embeddings.h"
#include "server/lora_adapters.h"
#include "server/openai_request.h"
#include "trace/tracer.h"

namespace strata::server {

struct RequestBreakdown;  // request_timing.h
struct RequestTrace;      // request_spans.h

struct ApiOptions {
  std::vector<std::string> api_keys;  // empty: no auth
  int retry_after_s = 1;              // Retry-After on 429
  // Statistics of the KV tiers below the engine's pool, for /metrics (empty function or nullopt:
  // no tiers configured).
  std::function<std::optional<engine::kvtier::TieredKvStats>()> tier_stats;
  // "vllm": /metrics also exports the vLLM-named families (api.cc kVllmMetrics); "": only strata:.
  std::string metrics_compat;
  // The replica's LoRA adapters (borrowed; must outlive the Api). Null: no adapters (a request
  // naming one is a 404, load/unload are 501).
  AdapterStore* adapters = nullptr;
  // The replica's span exporter (borrowed; must outlive the Api). Null: no tracing at all — no
  // traceparent is read, no stamp is taken. Set: a generation request whose head-sampling decision
  // (Tracer::ShouldSample: the client's traceparent sampled flag, else the ratio) says yes gets
  // the span tree of request_spans.h, exported when it ends; /metrics exports the tracer's
  // counters (strata:trace_spans_exported_total, strata:trace_spans_dropped_total{reason}).
  trace::Tracer* tracer = nullptr;
};

class Api {
 public:
  using SteadyTimePoint = std::chrono::steady_clock::time_point;
  Api(ModelInfo model, engine::sched::Engine* engine, ApiOptions options);
  ~Api();  // detaches every live job from its stream and cancels it

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
  http::MetricsRegistry& metrics() { return metrics_; }

  struct Job;

 private:
  using HttpResponse = http::HttpResponse;
  std::vector<http::Route> Routes();
  // Route handlers.
  HttpResponse Health(http::Exchange& ex);
  HttpResponse Ready(http::Exchange& ex);
  HttpResponse Metrics(http::Exchange& ex);
  HttpResponse KvEvents(http::Exchange& ex);
  HttpResponse Models(http::Exchange& ex);
  HttpResponse Model(http::Exchange& ex);
  HttpResponse Tokenize(http::Exchange& ex);
  HttpResponse Detokenize(http::Exchange& ex);
  HttpResponse ApplyTemplate(http::Exchange& ex);
  HttpResponse Embeddings(http::Exchange& ex);
  HttpResponse EmbeddingResponse(const std::vector<std::vector<float>>& vectors, bool base64,
                                 int64_t total, const std::string& model) const;
  HttpResponse Generate(Endpoint ep, http::Exchange& ex);
  // LoRA (api.cc).
  HttpResponse LoadLora(http::Exchange& ex);
  HttpResponse UnloadLora(http::Exchange& ex);
  // The adapter a request body names (`lora`, else `model` when it is not the base model): null
  // for the base model; a 404 (model_not_found) / 400 response when it cannot be used.
  std::optional<HttpResponse> ResolveAdapter(const nlohmann::json& body,
                                             std::shared_ptr<const lora::Adapter>* out);
  // `model` of a json_body route: the base model, a registered adapter, or absent (chain step).
  std::optional<HttpResponse> CheckModel(const http::Exchange& ex) const;
  void CountLoraRequest(const lora::Adapter& adapter);
  void RespondCounted(const std::shared_ptr<http::Responder>& out, std::string_view route,
                      HttpResponse r);
  void RefreshLoraGauges(const engine::sched::EngineStats& s);
  // Generation (generate.cc).
  std::optional<HttpResponse> ApplyHeaders(const http::HttpRequest& req, GenRequest& g);
  std::shared_ptr<Job> NewJob(Endpoint ep, GenRequest g,
                              std::vector<engine::sched::RequestHandle> handles);
  void StartStream(Job& job);
  void Watch(const std::shared_ptr<Job>& job);
  void Drain(const std::shared_ptr<Job>& job);  // on the response's work strand
  bool Process(Job& job);                       // returns true when the job is finished
  // An event of engine request `sub` (the batch's prompt); false: an error ended the job.
  bool OnEvent(Job& job, size_t sub, const engine::sched::TokenEvent& ev);
  // A choice's first event: its echo text (and prompt logprobs).
  std::string StartChoice(Job& job, size_t index, const engine::sched::TokenEvent& ev);
  void StreamDelta(Job& job, size_t index, const std::string& delta);
  void CountAbort(Job& job);
  void CutJob(Job& job);  // on the job's work strand
  void Finish(Job& job);
  void ObserveBreakdown(const Job& job, const RequestBreakdown& b);
  // Tracing (generate.cc): the sampled request's trace identity (null: not traced), and its spans
  // exported when the job ends (on its work strand).
  std::unique_ptr<RequestTrace> StartTrace(const http::HttpRequest& req, SteadyTimePoint arrival);
  void ExportTrace(const Job& job);
  void RefreshTracerCounters();
  void FinishStream(Job& job, const nlohmann::ordered_json& usage);
  nlohmann::ordered_json FinalChoices(const Job& job) const;
  void Forget(const Job& job);
  void DeclareVllmMetrics();  // --metrics-compat vllm (constructor only)
  void RefreshEngineGauges();
  void RefreshTierGauges(const engine::kvtier::TieredKvStats& stats);
  nlohmann::json ModelObject() const;
  nlohmann::json AdapterObject(const lora::AdapterInfo& a) const;

  ModelInfo model_;
  engine::sched::Engine* engine_;
  ApiOptions options_;
  http::MetricsRegistry metrics_;
  std::string model_labels_;
  http::Readiness readiness_;
  int64_t created_ = 0;  // the server's start: the model object's `created`
  http::Chain chain_;

  mutable Mutex mu_;
  std::vector<std::shared_ptr<Job>> jobs_ GUARDED_BY(mu_);  // live generation jobs
  std::unique_ptr<AdapterLoader> loader_;  // with options_.adapters; reset first by ~Api
  // Last member: destroyed first, so its worker (which uses metrics_) stops before anything else.
  std::unique_ptr<EmbeddingJobs> embeddings_;  // null: the runner has no hidden-state output
};

// The answer while the model is still loading: /health 200 {"status":"loading"}, anything else 503.
http::HttpResponse LoadingResponse(const http::HttpRequest& req);

}  // namespace strata::server
