#include "gateway/gateway.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <utility>

#include "gateway/gateway_flow.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_trace.h"
#include "http/openai_error.h"

namespace strata::gateway {

namespace asio = boost::asio;
using http::Exchange;
using http::HttpResponse;
using nlohmann::json;

namespace {

// When Handle() took the current request on this I/O thread (Proxy runs inside it, synchronously):
// the start of the request's SERVER span, which so covers the body parse too.
thread_local Clock::time_point tls_handle_start;

HttpResponse JsonResponse(int status, const json& j) {
  HttpResponse r;
  r.status = status;
  r.body = j.dump();
  return r;
}

// A route handler calling `fn` of `obj`.
template <typename T>
http::RouteHandler On(T* obj, HttpResponse (T::*fn)(Exchange&)) {
  return [obj, fn](Exchange& ex) { return (obj->*fn)(ex); };
}

}  // namespace

Gateway::~Gateway() {
  Stop();
  // The pools' polling state lives on the upstream io_context: drop them before it goes.
  snaps_.Reset();
  sv_.upstreams.reset();
}

Result<std::unique_ptr<Gateway>> Gateway::Create(std::shared_ptr<const GatewayConfig> cfg) {
  std::unique_ptr<Gateway> g(new Gateway());
  RequestServices& sv = g->sv_;
  sv.admission = std::make_unique<Admission>(cfg);
  DeclareGatewayMetrics(&sv.metrics);
  sv.splits.Reconfigure(*cfg);
  sv.canary = std::make_unique<CanaryController>(&sv.splits, Clock::now());
  sv.canary->Reconfigure(*cfg, Clock::now());
  ASSIGN_OR_RETURN(auto snap, g->snaps_.Build(cfg));
  g->snaps_.Publish(std::move(snap));
  RETURN_IF_ERROR(sv.access_log.Open(cfg->access_log));
  if (!cfg->tracing.otlp_endpoint.empty()) {
    trace::TracerOptions to;
    to.endpoint = cfg->tracing.otlp_endpoint;
    to.service_name = cfg->tracing.service_name;
    to.sample_ratio = cfg->tracing.sample_ratio;
    to.queue_capacity = static_cast<size_t>(cfg->tracing.queue_capacity);
    auto tracer = trace::Tracer::Start(std::move(to));
    if (!tracer.ok()) return Status::InvalidArgument("tracing: " + tracer.status().message());
    sv.tracer = std::move(*tracer);
    DeclareTraceMetrics(&sv.metrics);
  }
  g->chain_ = std::make_unique<http::Chain>(g->MakeChain());
  g->readiness_.SetReady(true);
  return g;
}

Status Gateway::Reload(std::shared_ptr<const GatewayConfig> cfg) {
  ASSIGN_OR_RETURN(auto next, snaps_.Build(cfg));
  snaps_.StopPoolsNotIn(*next);
  sv_.admission->Reconfigure(cfg);
  sv_.splits.Reconfigure(*cfg);  // before the swap: new requests find their routes' weights
  sv_.canary->Reconfigure(*cfg, Clock::now());
  snaps_.Publish(std::move(next));
  sv_.metrics.Add(std::string(kReloadsTotal), http::Labels({{"result", "ok"}}), 1);
  return Status::Ok();
}

uint64_t Gateway::generation() const { return snapshot()->generation; }

void Gateway::Start() {
  if (started_) return;
  started_ = true;
  sv_.upstreams->Start();
  snaps_.Start();
  StartTicker();
}

void Gateway::Stop() {
  if (!started_ || sv_.stopped.exchange(true)) return;
  sv_.holds.Clear();
  snaps_.Stop();
  sv_.upstreams->Stop();
  if (sv_.tracer) sv_.tracer->Shutdown(kTracerFlushTimeout);  // the last requests' spans
}

void Gateway::StartDraining() { readiness_.StartDraining(); }

// Every 50 ms: admission's waiters past their bound are rejected and due canary analyses run;
// every 2 s: /v1/models refresh.
void Gateway::StartTicker() {
  asio::co_spawn(
      sv_.upstreams->io(),
      [this]() -> asio::awaitable<void> {
        asio::steady_timer timer(co_await asio::this_coro::executor);
        int ticks = 0;
        while (!sv_.stopped.load()) {
          sv_.admission->Tick(Clock::now());
          TickHolds();
          NoteCanary(sv_.canary->Tick(Clock::now()), &sv_.metrics);
          if (ticks % 40 == 0) status_page_.RefreshControl();
          if (ticks++ % 40 == 0) models_.Refresh(snapshot());
          timer.expires_after(std::chrono::milliseconds(50));
          boost::system::error_code ec;
          co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        }
      },
      asio::detached);
}

http::Chain Gateway::MakeChain() {
  auto proxy = On(this, &Gateway::Proxy);
  std::vector<http::Route> routes = {
      // method, path, label, prefix, auth, ready, json_body, handler
      {"GET", "/health", "/health", false, false, false, false, On(this, &Gateway::Health)},
      {"GET", "/ready", "/ready", false, false, false, false, On(this, &Gateway::Ready)},
      {"GET", "/metrics", "/metrics", false, false, false, false, On(this, &Gateway::Metrics)},
      {"GET", "/v1/models", "/v1/models", false, true, false, false,
       [this](Exchange&) { return models_.Answer(); }},
      // The status page (gateway_ui.h): read-only, no key, works while draining.
      {"GET", "/ui", "/ui", false, false, false, false, On(&status_page_, &StatusPage::Page)},
      {"GET", "/ui/data", "/ui/data", false, false, false, false,
       On(&status_page_, &StatusPage::Data)},
      {"POST", "/v1/completions", "/v1/completions", false, true, true, true, proxy},
      {"POST", "/v1/chat/completions", "/v1/chat/completions", false, true, true, true, proxy},
      {"POST", "/v1/embeddings", "/v1/embeddings", false, true, true, true, proxy},
      // The admin API checks its own key (AdminApi) and works while draining.
      {"GET", "/admin/routes", "/admin/routes", false, false, false, false,
       On(&admin_, &AdminApi::Routes)},
      {"PUT", "/admin/routes/", "/admin/routes/weights", true, false, false, true,
       On(&admin_, &AdminApi::SetWeights)},
      {"GET", "/admin/canary", "/admin/canary", false, false, false, false,
       On(&admin_, &AdminApi::Canary)},
      {"POST", "/admin/canary/", "/admin/canary/action", true, false, false, false,
       On(&admin_, &AdminApi::CanaryAction)},
  };
  // Auth reads the current snapshot's tenants, so a reload changes keys without a new chain.
  http::Step auth = [this](Exchange& ex) -> std::optional<HttpResponse> {
    if (!ex.route || !ex.route->auth) return std::nullopt;
    auto snap = snapshot();
    if (!snap->cfg->keys_required() || TenantOf(*snap->cfg, ex.request)) return std::nullopt;
    HttpResponse r = http::ErrorResponse(401, "invalid or missing API key");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  };
  return http::Chain(std::move(routes),
                     {auth, http::RequireReady(&readiness_), http::ParseJsonBody()});
}

void Gateway::Handle(http::HttpRequest req, std::shared_ptr<http::Responder> out) {
  tls_handle_start = Clock::now();
  Exchange ex{std::move(req), std::move(out), nullptr, nullptr};
  HttpResponse r = chain_->Run(ex);
  if (r.status == http::kDeferred) return;
  const std::string route = ex.route ? ex.route->label : "other";
  sv_.metrics.Add(std::string(kHttpRequestsTotal),
                  http::Labels({{"path", route}, {"status", std::to_string(r.status)}}), 1);
  ex.out->Respond(std::move(r));
}

void Gateway::OnInternalError(std::string_view method, std::string_view path) {
  (void)method;
  const http::Route* r = chain_->Find(path);
  sv_.metrics.Add(std::string(kInternalErrorsTotal),
                  http::Labels({{"path", r ? r->label : "other"}}), 1);
}

HttpResponse Gateway::Health(Exchange&) { return JsonResponse(200, {{"status", "ok"}}); }

// Ready when not draining and at least one pool has a replica that can take work.
HttpResponse Gateway::Ready(Exchange&) {
  if (readiness_.draining()) return readiness_.Probe();
  auto snap = snapshot();
  for (const auto& [name, set] : snap->pools)
    if (set->any_eligible()) return JsonResponse(200, {{"status", "ready"}});
  for (const PoolConfig& p : snap->cfg->pools)  // it holds requests until a replica starts
    if (p.cold_start_hold.count() > 0) return JsonResponse(200, {{"status", "ready"}});
  return http::ErrorResponse(503, "no pool has a healthy replica");
}

HttpResponse Gateway::Metrics(Exchange&) {
  RefreshPoolGauges(*snapshot(), *sv_.admission, &sv_.metrics);
  RefreshHoldGauges();
  RefreshCanaryGauges(*sv_.canary, &sv_.metrics);
  if (sv_.tracer) RefreshTraceMetrics(sv_.tracer->stats(), &sv_.metrics);
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = sv_.metrics.Render();
  return r;
}

HttpResponse Gateway::Proxy(Exchange& ex) {
  return RequestFlow::Start(&sv_, snaps_, ex, tls_handle_start);
}

// On the ticker: held requests whose pool now has an eligible replica (in the current snapshot:
// a reload may have added it) are dispatched.
void Gateway::TickHolds() {
  auto snap = snapshot();
  sv_.holds.Tick(Clock::now(), [&snap](const std::string& pool) {
    auto it = snap->pools.find(pool);
    return it != snap->pools.end() && it->second->any_eligible();
  });
}

void Gateway::RefreshHoldGauges() {
  for (const auto& [pool, n] : sv_.holds.Counts())
    sv_.metrics.Set(kPoolHeldRequests, http::Labels({{"pool", pool}}), static_cast<double>(n));
  for (const PoolConfig& p : snapshot()->cfg->pools)  // 0 before the first hold
    if (p.cold_start_hold.count() > 0)
      sv_.metrics.Touch(kPoolHeldRequests, http::Labels({{"pool", p.name}}));
}

}  // namespace strata::gateway
