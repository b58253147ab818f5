// ApiOptions (what `strata serve` configures of its routes) and ApiContext: what every part of the
// Api (api.h) shares — the served model, the engine, the options and the metrics registry — with
// the counting helpers each part uses the same way.
//
// Ownership: the Api owns its ApiContext, which borrows the engine (and the options' adapters and
// tracer); the parts (GenerationJobs, EmbeddingRoute, LoraRoutes, InfoRoutes, ApiMetrics) borrow
// the context, so it outlives them.
// Thread contract: immutable after construction except `metrics`, which is thread-safe; the
// helpers may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/kvtier/tiered_cache.h"
#include "engine/sched/engine.h"
#include "http/openai_error.h"
#include "http/prometheus.h"
#include "http/server.h"
#include "server/lora_adapters.h"
#include "server/openai_request.h"
#include "trace/tracer.h"

namespace strata::server {

struct ApiOptions {
  std::vector<std::string> api_keys;  // empty: no auth
  int retry_after_s = 1;              // Retry-After on 429
  // Statistics of the KV tiers below the engine's pool, for /metrics (empty function or nullopt:
  // no tiers configured).
  std::function<std::optional<engine::kvtier::TieredKvStats>()> tier_stats;
  // "vllm": /metrics also exports the vLLM-named families (api_metrics.cc kVllmMetrics); "": only
  // strata:.
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

struct ApiContext {
  ApiContext(ModelInfo m, engine::sched::Engine* e, ApiOptions o)
      : model(std::move(m)),
        engine(e),
        options(std::move(o)),
        model_labels(http::Labels({{"model_name", model.name}})),
        created(std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count()) {}

  // strata:http_requests_total{model_name, route, status} += 1.
  void CountHttp(std::string_view route, int status) {
    metrics.Add(
        "strata:http_requests_total",
        http::Labels(
            {{"model_name", model.name}, {"route", route}, {"status", std::to_string(status)}}),
        1);
  }
  // The last-resort guard caught an exception on `route` (a route label, or "other"): counted in
  // strata:internal_errors_total and as a 500 in strata:http_requests_total.
  void CountInternalError(std::string_view route) {
    metrics.Add("strata:internal_errors_total",
                http::Labels({{"model_name", model.name}, {"route", route}}), 1);
    CountHttp(route, 500);
  }
  // On a worker thread (not an I/O thread, so outside the HttpServer's guard): answers `out` with
  // make()'s response, counted under `route`; an exception from make() is a counted 500.
  template <typename MakeResponse>
  void RespondFromWorker(const std::shared_ptr<http::Responder>& out, std::string_view route,
                         MakeResponse make) {
    http::HttpResponse r;
    try {
      r = make();
    } catch (...) {  // the last-resort guard of the worker thread (never expected to fire)
      CountInternalError(route);
      out->Respond(http::ErrorResponse(500, "internal error"));
      return;
    }
    CountHttp(route, r.status);
    out->Respond(std::move(r));
  }
  // A 429 tells the client when to retry.
  void AddRetryAfter(http::HttpResponse& r) const {
    if (r.status == 429)
      r.headers.emplace_back("Retry-After", std::to_string(options.retry_after_s));
  }

  const ModelInfo model;
  engine::sched::Engine* const engine;
  const ApiOptions options;
  http::MetricsRegistry metrics;
  const std::string model_labels;  // {model_name="<served model>"}
  const int64_t created;           // the server's start: the model object's `created`
};

}  // namespace strata::server
