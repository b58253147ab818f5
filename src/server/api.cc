// Api (api.h): the router — the route table and chain over the parts that answer the routes.
#include "server/api.h"

#include <string>
#include <utility>

#include "server/api_internal.h"
#include "server/api_metrics.h"
#include "server/embedding_route.h"
#include "server/generate.h"
#include "server/info_routes.h"
#include "server/lora_routes.h"

namespace strata::server {

using http::Exchange;
using http::HttpResponse;

HttpResponse LoadingResponse(const http::HttpRequest& req) {
  if (req.path == "/health") return JsonResponse(200, {{"status", "loading"}});
  return Error(503, "the server is loading the model");
}

Api::Api(ModelInfo model, engine::sched::Engine* engine, ApiOptions options)
    : ctx_(std::move(model), engine, std::move(options)),
      metrics_(std::make_unique<ApiMetrics>(&ctx_)),
      lora_(std::make_unique<LoraRoutes>(&ctx_)),
      info_(std::make_unique<InfoRoutes>(&ctx_, &readiness_)),
      generation_(std::make_unique<GenerationJobs>(&ctx_, lora_.get())),
      embeddings_(std::make_unique<EmbeddingRoute>(&ctx_, lora_.get())),
      chain_(Routes(), {http::RequireBearer(ctx_.options.api_keys), http::RequireReady(&readiness_),
                        http::ParseJsonBody(),
                        [lora = lora_.get()](Exchange& ex) { return lora->CheckModel(ex); }}) {}

Api::~Api() {
  lora_.reset();        // runs the adapter load in progress to its end, drops the queued ones
  embeddings_.reset();  // joins its worker; cancels embeddings in flight
  generation_.reset();  // detaches and cancels the generations in flight
}

std::vector<http::Route> Api::Routes() {
  using E = Exchange;
  // A handler of part `part` (borrowed; the part outlives the chain's use of it).
  auto on = []<typename Part>(Part* part, HttpResponse (Part::*fn)(E&)) {
    return [part, fn](E& ex) { return (part->*fn)(ex); };
  };
  auto gen = [this](Endpoint ep) {
    return [jobs = generation_.get(), ep](E& ex) { return jobs->Handle(ep, ex); };
  };
  InfoRoutes* info = info_.get();
  LoraRoutes* lora = lora_.get();
  // method, path, label, prefix, auth, ready, json_body, handler
  return {
      {"GET", "/health", "/health", false, false, false, false, on(info, &InfoRoutes::Health)},
      {"GET", "/ready", "/ready", false, false, false, false, on(info, &InfoRoutes::Ready)},
      {"GET", "/metrics", "/metrics", false, true, false, false, on(this, &Api::Metrics)},
      {"GET", "/v1/kv/events", "/v1/kv/events", false, true, false, false,
       on(info, &InfoRoutes::KvEvents)},
      {"GET", "/v1/models", "/v1/models", false, true, true, false, on(info, &InfoRoutes::Models)},
      {"GET", "/v1/models/", "/v1/models/{id}", true, true, true, false,
       on(info, &InfoRoutes::Model)},
      {"POST", "/v1/completions", "/v1/completions", false, true, true, true,
       gen(Endpoint::kCompletions)},
      {"POST", "/v1/chat/completions", "/v1/chat/completions", false, true, true, true,
       gen(Endpoint::kChat)},
      {"POST", "/v1/embeddings", "/v1/embeddings", false, true, true, true,
       on(embeddings_.get(), &EmbeddingRoute::Handle)},
      {"POST", "/tokenize", "/tokenize", false, true, true, true, on(info, &InfoRoutes::Tokenize)},
      {"POST", "/detokenize", "/detokenize", false, true, true, true,
       on(info, &InfoRoutes::Detokenize)},
      {"POST", "/apply-template", "/apply-template", false, true, true, true,
       on(info, &InfoRoutes::ApplyTemplate)},
      {"POST", "/v1/load_lora_adapter", "/v1/load_lora_adapter", false, true, true, true,
       on(lora, &LoraRoutes::Load)},
      {"POST", "/v1/unload_lora_adapter", "/v1/unload_lora_adapter", false, true, true, true,
       on(lora, &LoraRoutes::Unload)},
  };
}

int Api::live_jobs() const {
  const int embeddings = embeddings_->live();
  return generation_->live() + embeddings;
}

int Api::CutAtShutdown(std::chrono::milliseconds wait) { return generation_->CutAtShutdown(wait); }

void Api::Handle(http::HttpRequest req, std::shared_ptr<http::Responder> out) {
  Exchange ex{std::move(req), std::move(out), nullptr, nullptr};
  HttpResponse r = chain_.Run(ex);
  if (r.status == http::kDeferred) return;
  const std::string route = ex.route ? ex.route->label : "other";
  ctx_.CountHttp(route, r.status);
  ex.out->Respond(std::move(r));
}

void Api::OnInternalError(std::string_view method, std::string_view path) {
  (void)method;
  const http::Route* r = chain_.Find(path);
  ctx_.CountInternalError(r ? r->label : "other");
}

// At scrape time: the engine's gauges, the LoRA gauges, the tiers' and the tracer's, then the text.
HttpResponse Api::Metrics(Exchange&) {
  const engine::sched::EngineStats s = ctx_.engine->Stats();
  metrics_->RefreshEngineGauges(s);
  lora_->RefreshGauges(s);
  metrics_->RefreshTierGauges(s);
  metrics_->RefreshTracerCounters();
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = ctx_.metrics.Render();
  return r;
}

}  // namespace strata::server
