#include "gateway/gateway.h"

#include <fmt/format.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <utility>

#include "gateway/gateway_metrics.h"
#include "gateway/gateway_trace.h"
#include "gateway/routes.h"
#include "gateway/split.h"
#include "http/auth.h"
#include "http/client.h"
#include "http/json_fields.h"
#include "http/openai_error.h"
#include "protocol/openai/request_fields.h"
#include "protocol/wire.h"

namespace strata::gateway {

namespace asio = boost::asio;
using http::Exchange;
using http::HttpResponse;
using nlohmann::json;

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// When Handle() took the current request on this I/O thread (Proxy runs inside it, synchronously):
// the start of the request's SERVER span, which so covers the body parse too.
thread_local Clock::time_point tls_handle_start;

}  // namespace

// One proxied request, from admission to its last byte. Shared by the callbacks of admission and
// of the upstream call; fields after `admitted` are touched by one callback at a time (admission's
// done, then the upstream's done callbacks, which run one after another).
struct Gateway::Job {
  std::shared_ptr<const Snapshot> snap;
  std::shared_ptr<http::Responder> out;
  std::shared_ptr<Cancel> cancel = std::make_shared<Cancel>();
  Clock::time_point start;
  Endpoint endpoint = Endpoint::kCompletions;
  std::string path, body;
  std::string tenant, route, pool, model;
  std::string adapter;  // body `lora` if a string, else `model` (the balancer's adapter term)
  std::string arm;      // a split route: the chosen arm's pool ("" otherwise)
  Priority priority = Priority::kSilver;
  std::vector<std::pair<std::string, std::string>> headers;  // forwarded upstream
  PromptInfo prompt;
  std::string text_key;  // without token ids: the prompt bytes, for history affinity
  int64_t max_tokens = 0;
  std::shared_ptr<ReplicaSet> replicas;
  std::string api_key;
  Admission::Ticket ticket = 0;
  bool admitted = false;
  std::vector<std::string> tried;
  int attempts = 0;
  Pick pick;
  Clock::time_point admitted_at, dispatched_at;
  std::atomic<bool> finished{false};
  // Cascade: the stage running (kOnly on other routes), what the client asked of the fields the
  // first stage rewrites, that stage's body, the second pool's prompt, and the tokens the first
  // stage used (settled with the answer's).
  enum class Stage { kOnly, kFirst, kThen };
  const CascadeConfig* cascade = nullptr;  // into snap->cfg
  Stage stage = Stage::kOnly;
  CascadeAsk ask;
  std::string first_body;
  PromptInfo then_prompt;
  int stage_attempts = 0;  // upstream calls of the current stage (retries count per stage)
  int64_t first_tokens = 0;
  // Shadow: the route's mirror, the shadow copy's body, and the tee that keeps the primary's
  // answer (greedy requests only).
  const ShadowConfig* shadow = nullptr;  // into snap->cfg
  std::string shadow_body;
  std::shared_ptr<TeeResponder> tee;
  bool cascade_skipped = false;  // embeddings or echo: straight to `then`
  // Tracing (gateway_trace.h): null when the gateway has no tracer (headers pass through).
  std::unique_ptr<RequestTrace> trace;
  std::optional<int64_t> asked_max_tokens;  // gen_ai.request.max_tokens, as the client sent it

  RequestRecord Record(int status, const UpstreamResult* r, Clock::time_point now) const {
    RequestRecord rec;
    rec.tenant = tenant;
    rec.route = route;
    rec.pool = pool;
    rec.replica = pick.url;
    rec.path = path;
    rec.model = model;
    rec.priority = priority;
    rec.reason = attempts > 0 ? RouteReasonName(pick.reason) : "";
    rec.status = status;
    rec.attempts = attempts;
    rec.prompt_tokens = prompt.tokens;
    rec.prompt_estimated = prompt.estimated;
    rec.cached_tokens = pick.cached_tokens;
    rec.cost_s = pick.cost_s;
    rec.total_s = Seconds(now - start);
    rec.admission_s = admitted ? Seconds(admitted_at - start) : Seconds(now - start);
    if (r && attempts > 0) rec.ttft_s = Seconds(dispatched_at - start) + r->first_chunk_s;
    rec.upstream = r;
    return rec;
  }
};

namespace {

constexpr int64_t kDefaultMaxTokens = 256;  // the token-bucket charge when max_tokens is absent

HttpResponse JsonResponse(int status, const json& j) {
  HttpResponse r;
  r.status = status;
  r.body = j.dump();
  return r;
}

// The tenant of a request: the one whose key the Authorization header carries ("" when keys are
// not required and none matched).
const TenantConfig* TenantOf(const GatewayConfig& cfg, const http::HttpRequest& req) {
  std::string_view auth = req.Header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.size() <= kBearer.size() || auth.substr(0, kBearer.size()) != kBearer) return nullptr;
  return cfg.TenantForKey(auth.substr(kBearer.size()));
}

// The request's priority: the body's `priority` or the x-strata-tier header as the replicas read
// them (protocol::ReadPriority), else the tenant's default, else silver.
http::ApiResult<Priority> PriorityOf(const json& body, const http::HttpRequest& req,
                                     const TenantConfig* tenant) {
  ASSIGN_OR_RETURN_API(std::optional<Priority> p,
                       protocol::ReadPriority(body, req.Header(protocol::kHeaderTier)));
  if (p) return *p;
  if (tenant && tenant->default_priority) return *tenant->default_priority;
  return protocol::kDefaultPriority;
}

// The headers a replica gets from the client's request (identity, tracing, tenant).
std::vector<std::pair<std::string, std::string>> ForwardedHeaders(const http::HttpRequest& req,
                                                                  const std::string& tenant,
                                                                  Priority priority) {
  std::vector<std::pair<std::string, std::string>> out;
  for (std::string_view name : {"traceparent", "tracestate", "x-request-id"})
    if (std::string_view v = req.Header(name); !v.empty()) out.emplace_back(name, v);
  if (!tenant.empty()) out.emplace_back(protocol::kHeaderTenant, tenant);
  // The body's `priority` wins there.
  out.emplace_back(protocol::kHeaderTier, PriorityName(priority));
  return out;
}

Endpoint EndpointOf(std::string_view path) {
  if (path == "/v1/chat/completions") return Endpoint::kChat;
  if (path == "/v1/embeddings") return Endpoint::kEmbeddings;
  return Endpoint::kCompletions;
}

}  // namespace

Gateway::~Gateway() {
  Stop();
  // The pools' polling state lives on the upstream io_context: drop them before it goes.
  {
    MutexLock lock(&mu_);
    snap_.reset();
  }
  upstreams_.reset();
  MutexLock lock(&log_mu_);
  if (log_owned_ && log_) std::fclose(log_);
}

Result<std::unique_ptr<Gateway>> Gateway::Create(std::shared_ptr<const GatewayConfig> cfg) {
  std::unique_ptr<Gateway> g(new Gateway());
  g->upstreams_ = std::make_unique<Upstreams>();
  g->admission_ = std::make_unique<Admission>(cfg);
  DeclareGatewayMetrics(&g->metrics_);
  g->splits_.Reconfigure(*cfg);
  g->canary_ = std::make_unique<CanaryController>(&g->splits_, Clock::now());
  g->canary_->Reconfigure(*cfg, Clock::now());
  ASSIGN_OR_RETURN(auto snap, g->Build(cfg, nullptr));
  {
    MutexLock lock(&g->mu_);
    g->snap_ = std::move(snap);
  }
  {
    MutexLock lock(&g->log_mu_);
    if (cfg->access_log == "stderr") {
      g->log_ = stderr;
    } else if (cfg->access_log != "off" && !cfg->access_log.empty()) {
      g->log_ = std::fopen(cfg->access_log.c_str(), "a");
      if (!g->log_) return Status::IoError("access_log: cannot open " + cfg->access_log);
      g->log_owned_ = true;
    }
  }
  if (!cfg->tracing.otlp_endpoint.empty()) {
    trace::TracerOptions to;
    to.endpoint = cfg->tracing.otlp_endpoint;
    to.service_name = cfg->tracing.service_name;
    to.sample_ratio = cfg->tracing.sample_ratio;
    to.queue_capacity = static_cast<size_t>(cfg->tracing.queue_capacity);
    auto tracer = trace::Tracer::Start(std::move(to));
    if (!tracer.ok()) return Status::InvalidArgument("tracing: " + tracer.status().message());
    g->tracer_ = std::move(*tracer);
    DeclareTraceMetrics(&g->metrics_);
  }
  g->chain_ = std::make_unique<http::Chain>(g->MakeChain());
  g->readiness_.SetReady(true);
  return g;
}

Result<std::shared_ptr<const Snapshot>> Gateway::Build(std::shared_ptr<const GatewayConfig> cfg,
                                                       const Snapshot* previous) {
  auto s = std::make_shared<Snapshot>();
  s->cfg = cfg;
  s->generation = previous ? previous->generation + 1 : 1;
  ASSIGN_OR_RETURN(s->tokenizers,
                   LoadPoolTokenizers(*cfg, previous ? &previous->tokenizers : nullptr));
  for (const PoolConfig& p : cfg->pools) {
    std::shared_ptr<ReplicaSet> set;
    if (previous) {
      auto it = previous->pools.find(p.name);
      if (it != previous->pools.end()) {
        set = it->second;
        set->Update(p, cfg->balancer, cfg->health);
      }
    }
    if (!set) {
      set = std::make_shared<ReplicaSet>(upstreams_->io(), p, cfg->balancer, cfg->health);
      if (started_) set->Start();
    }
    s->pools.emplace(p.name, std::move(set));
  }
  return std::shared_ptr<const Snapshot>(std::move(s));
}

Status Gateway::Reload(std::shared_ptr<const GatewayConfig> cfg) {
  auto old = snapshot();
  ASSIGN_OR_RETURN(auto next, Build(cfg, old.get()));
  for (const auto& [name, set] : old->pools)
    if (!next->pools.contains(name)) set->Stop();  // in-flight requests keep the object alive
  admission_->Reconfigure(cfg);
  splits_.Reconfigure(*cfg);  // before the swap: new requests find their routes' weights
  canary_->Reconfigure(*cfg, Clock::now());
  {
    MutexLock lock(&mu_);
    snap_ = std::move(next);
  }
  metrics_.Add(std::string(kReloadsTotal), http::Labels({{"result", "ok"}}), 1);
  return Status::Ok();
}

std::shared_ptr<const Snapshot> Gateway::snapshot() const {
  MutexLock lock(&mu_);
  return snap_;
}

uint64_t Gateway::generation() const { return snapshot()->generation; }

void Gateway::Start() {
  if (started_) return;
  started_ = true;
  upstreams_->Start();
  for (const auto& [name, set] : snapshot()->pools) set->Start();
  StartTicker();
}

void Gateway::Stop() {
  if (!started_ || stopped_.exchange(true)) return;
  holds_.Clear();
  for (const auto& [name, set] : snapshot()->pools) set->Stop();
  upstreams_->Stop();
  if (tracer_) tracer_->Shutdown(kTracerFlushTimeout);  // the last requests' spans
}

void Gateway::StartDraining() { readiness_.StartDraining(); }

// Every 50 ms: admission's waiters past their bound are rejected and due canary analyses run;
// every 2 s: /v1/models refresh.
void Gateway::StartTicker() {
  asio::co_spawn(
      upstreams_->io(),
      [this]() -> asio::awaitable<void> {
        asio::steady_timer timer(co_await asio::this_coro::executor);
        int ticks = 0;
        while (!stopped_.load()) {
          admission_->Tick(Clock::now());
          TickHolds();
          NoteCanary(canary_->Tick(Clock::now()));
          if (ticks % 40 == 0) RefreshControlStatus();
          if (ticks++ % 40 == 0) RefreshModels();
          timer.expires_after(std::chrono::milliseconds(50));
          boost::system::error_code ec;
          co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        }
      },
      asio::detached);
}

http::Chain Gateway::MakeChain() {
  auto on = [this](HttpResponse (Gateway::*fn)(Exchange&)) {
    return [this, fn](Exchange& ex) { return (this->*fn)(ex); };
  };
  auto proxy = on(&Gateway::Proxy);
  std::vector<http::Route> routes = {
      // method, path, label, prefix, auth, ready, json_body, handler
      {"GET", "/health", "/health", false, false, false, false, on(&Gateway::Health)},
      {"GET", "/ready", "/ready", false, false, false, false, on(&Gateway::Ready)},
      {"GET", "/metrics", "/metrics", false, false, false, false, on(&Gateway::Metrics)},
      {"GET", "/v1/models", "/v1/models", false, true, false, false, on(&Gateway::Models)},
      // The status page (gateway_ui.h): read-only, no key, works while draining.
      {"GET", "/ui", "/ui", false, false, false, false, on(&Gateway::UiPage)},
      {"GET", "/ui/data", "/ui/data", false, false, false, false, on(&Gateway::UiData)},
      {"POST", "/v1/completions", "/v1/completions", false, true, true, true, proxy},
      {"POST", "/v1/chat/completions", "/v1/chat/completions", false, true, true, true, proxy},
      {"POST", "/v1/embeddings", "/v1/embeddings", false, true, true, true, proxy},
      // The admin API checks its own key (AdminAuth) and works while draining.
      {"GET", "/admin/routes", "/admin/routes", false, false, false, false,
       on(&Gateway::AdminRoutes)},
      {"PUT", "/admin/routes/", "/admin/routes/weights", true, false, false, true,
       on(&Gateway::AdminSetWeights)},
      {"GET", "/admin/canary", "/admin/canary", false, false, false, false,
       on(&Gateway::AdminCanary)},
      {"POST", "/admin/canary/", "/admin/canary/action", true, false, false, false,
       on(&Gateway::AdminCanaryAction)},
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
  metrics_.Add(std::string(kHttpRequestsTotal),
               http::Labels({{"path", route}, {"status", std::to_string(r.status)}}), 1);
  ex.out->Respond(std::move(r));
}

void Gateway::OnInternalError(std::string_view method, std::string_view path) {
  (void)method;
  const http::Route* r = chain_->Find(path);
  metrics_.Add(std::string(kInternalErrorsTotal), http::Labels({{"path", r ? r->label : "other"}}),
               1);
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
  RefreshPoolGauges(*snapshot(), *admission_, &metrics_);
  RefreshHoldGauges();
  RefreshCanaryGauges();
  if (tracer_) RefreshTraceMetrics(tracer_->stats(), &metrics_);
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.Render();
  return r;
}

HttpResponse Gateway::Models(Exchange&) {
  MutexLock lock(&models_mu_);
  HttpResponse r;
  r.body = models_body_.empty() ? R"({"object":"list","data":[]})" : models_body_;
  return r;
}

// Asks one replica of every pool for its models and keeps the union (id → first object seen,
// with the pool added as `strata_pool`). Runs on the upstream thread.
void Gateway::RefreshModels() {
  auto snap = snapshot();
  asio::co_spawn(
      upstreams_->io(),
      [this, snap]() -> asio::awaitable<void> {
        json data = json::array();
        std::set<std::string> seen;
        for (const auto& [pool, set] : snap->pools) {
          const PoolConfig* pc = snap->cfg->FindPool(pool);
          for (const ReplicaView& v : set->Snapshot()) {
            if (!v.eligible) continue;
            auto url = http::ParseUrl(v.url);
            if (!url.ok()) continue;
            http::HttpClient client(upstreams_->io(), *url, pc ? pc->api_key : "");
            std::string body;
            auto res = co_await client.Request(
                "GET", "/v1/models", "", Clock::now() + std::chrono::seconds(2),
                [&body](std::string_view piece) {
                  if (body.size() + piece.size() > (1u << 20))
                    return Status::OutOfRange("models list too large");
                  body.append(piece);
                  return Status::Ok();
                });
            if (!res.status.ok() || res.http_status != 200) continue;
            json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
            const json* list = http::Fields(j).Find("data");
            if (!list || !list->is_array()) continue;
            for (const json& m : *list) {
              const json* id = http::Fields(m).Find("id");
              if (!m.is_object() || !id || !id->is_string()) continue;
              const std::string& name =
                  id->get_ref<const std::string&>();  // json-access: is_string
              if (!seen.insert(name).second) continue;
              json copy = m;
              copy["strata_pool"] = pool;
              data.push_back(std::move(copy));
            }
            break;  // one replica answers for its pool
          }
        }
        MutexLock lock(&models_mu_);
        models_body_ = json{{"object", "list"}, {"data", std::move(data)}}.dump();
      },
      asio::detached);
}

HttpResponse Gateway::Proxy(Exchange& ex) {
  auto job = std::make_shared<Job>();
  job->start = Clock::now();
  job->snap = snapshot();
  job->out = ex.out;
  job->path = ex.request.path;
  job->endpoint = EndpointOf(ex.request.path);
  const GatewayConfig& cfg = *job->snap->cfg;
  const TenantConfig* tenant = TenantOf(cfg, ex.request);
  if (tenant) job->tenant = tenant->name;
  auto names = protocol::ReadModelFields(ex.body);
  if (!names.ok()) return http::ErrorResponse(names.error());
  const std::string model = names->model;
  const std::string lora = names->lora;
  job->model = model;
  auto prio = PriorityOf(ex.body, ex.request, tenant);
  if (!prio.ok()) return http::ErrorResponse(prio.error());
  job->priority = *prio;
  // The wire's bounds; the replica applies its own limit (0 is echo's, which the replica checks).
  auto max_tokens = protocol::ReadMaxTokens(ex.body, job->endpoint == Endpoint::kChat,
                                            {.lo = 0, .hi = protocol::kMaxTokensOnWire});
  if (!max_tokens.ok()) return http::ErrorResponse(max_tokens.error());
  job->asked_max_tokens = *max_tokens;
  job->max_tokens =
      job->endpoint == Endpoint::kEmbeddings ? 0 : max_tokens->value_or(kDefaultMaxTokens);

  // Prompt lengths are measured per pool tokenizer, lazily, at most once per tokenizer.
  std::map<const PoolTokenizer*, PromptInfo> measured;
  auto measure = [&](const PoolConfig& pool) -> const PromptInfo& {
    auto it = job->snap->tokenizers.find(pool.name);
    const PoolTokenizer* tok = it == job->snap->tokenizers.end() ? nullptr : it->second.get();
    auto m = measured.find(tok);
    if (m == measured.end())
      m = measured
              .emplace(tok, tok ? tok->Measure(job->endpoint, ex.body)
                                : EstimatePrompt(job->endpoint, ex.body))
              .first;
    return m->second;
  };
  RequestFacts facts{model, lora.empty() ? model : lora, job->tenant, job->priority, &ex.request};
  job->adapter = facts.adapter;
  const RouteConfig* route =
      MatchRoute(cfg, facts, [&](const PoolConfig& p) { return measure(p).tokens; });
  if (!route) return http::ErrorResponse(404, "no route matches this request", "model");
  const std::string& pool_name = PoolOf(*route, ex, job.get());  // a split: the chosen arm
  const PoolConfig* pool = cfg.FindPool(pool_name);
  auto set = job->snap->pools.find(pool_name);
  if (!pool || set == job->snap->pools.end())
    return http::ErrorResponse(503, "route '" + route->name + "' has no pool");
  job->route = route->name;
  job->pool = pool->name;
  job->replicas = set->second;
  job->api_key = pool->api_key;
  job->prompt = measure(*pool);
  if (job->prompt.ids.empty()) job->text_key = job->prompt.text;
  job->headers = ForwardedHeaders(ex.request, job->tenant, job->priority);
  if (tracer_) job->trace = StartRequestTrace(*tracer_, ex.request, tls_handle_start);
  if (auto e = PrepareTraffic(job, *route, ex.body, measure); !e.ok())
    return http::ErrorResponse(e);

  job->body = std::move(ex.request.body);  // forwarded as sent
  std::weak_ptr<Cancel> weak = job->cancel;
  job->out->OnClose([weak] {
    if (auto c = weak.lock()) c->Fire();
  });
  in_flight_.fetch_add(1);

  const AdmitRequest ar{job->tenant, job->pool, job->priority, job->prompt.tokens + job->max_tokens,
                        job->start};
  admission_->Admit(ar, [this, job](Result<Admission::Ticket> t, std::optional<Rejection> rej) {
    if (!t.ok() || rej) {
      HttpResponse r =
          http::ErrorResponse(429, rej ? rej->message : std::string(t.status().message()));
      const double after = rej ? std::max(1.0, std::ceil(rej->retry_after_s)) : 1.0;
      r.headers.emplace_back("Retry-After", fmt::format("{:.0f}", after));
      metrics_.Add(std::string(kRejectionsTotal),
                   http::Labels({{"route", job->route},
                                 {"pool", job->pool},
                                 {"reason", rej ? rej->reason : "admission"}}),
                   1);
      RespondError(job, std::move(r));
      return;
    }
    job->ticket = *t;
    job->admitted = true;
    job->admitted_at = Clock::now();
    Admitted(job);
  });
  return HttpResponse{http::kDeferred, {}, {}, {}};
}

// The pool of the request on `route`: its primary pool, or for a split the arm chosen by the
// sticky key (split.h) under the current weights (counted in split_requests_total).
const std::string& Gateway::PoolOf(const RouteConfig& route, const Exchange& ex, Job* job) {
  if (route.arms.empty()) return route.primary_pool();
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const double u = std::uniform_real_distribution<double>(0, 1)(rng);
  const std::string key = StickyKeyOf(route.sticky, ex.body, ex.request, job->tenant);
  const ArmChoice c = ChooseArm(route.name, splits_.Weights(route), key, u);
  job->arm = route.arms[c.index].pool;
  metrics_.Add(std::string(kSplitRequestsTotal),
               http::Labels({{"route", route.name}, {"pool", job->arm}}), 1);
  return route.arms[c.index].pool;
}

// Response headers naming the arm of a split route (x-strata-arm).
void Gateway::AddArmHeader(const Job& job, std::vector<std::pair<std::string, std::string>>* h) {
  if (!job.arm.empty()) h->emplace_back(protocol::kHeaderArm, job.arm);
}

void Gateway::Admitted(const std::shared_ptr<Job>& job) {
  if (job->cancel->fired()) {
    Finish(job, 499, nullptr);
    return;
  }
  Dispatch(job);
}

void Gateway::Dispatch(const std::shared_ptr<Job>& job) {
  PickRequest pr{job->prompt.ids, job->text_key, job->prompt.tokens, job->max_tokens,
                 job->tenant,     job->tried,    job->adapter};
  auto pick = job->replicas->Choose(pr, Clock::now());
  if (!pick.ok() && job->stage == Job::Stage::kFirst) {  // the second pool may still answer
    Escalate(job, "first_error");
    return;
  }
  if (!pick.ok() && HoldForReplica(job)) return;
  if (!pick.ok()) {
    RespondError(job, http::ErrorResponse(
                          503, fmt::format("pool '{}': {}", job->pool, pick.status().message())));
    return;
  }
  if (job->attempts > 0) pick->reason = RouteReason::kRetry;
  job->pick = *pick;
  job->dispatched_at = Clock::now();
  job->tried.push_back(pick->url);
  ++job->attempts;
  ++job->stage_attempts;
  job->replicas->OnSent(pick->url, *pick, pr);
  metrics_.Add(std::string(kRoutingDecisionsTotal),
               http::Labels({{"route", job->route},
                             {"pool", job->pool},
                             {"reason", std::string(RouteReasonName(pick->reason))}}),
               1);
  UpstreamCall call;
  call.url = pick->url;
  call.path = job->path;
  call.body = job->body;
  call.headers = job->headers;
  if (job->trace)
    BeginUpstream(job->trace.get(), job->pick, job->attempts, job->route, job->pool,
                  job->dispatched_at, &call.headers);
  call.api_key = job->api_key;
  call.deadline = Clock::now() + job->snap->cfg->upstream.timeout;
  if (job->stage == Job::Stage::kFirst) {  // buffered: the answer is decided on before relaying
    call.body = job->first_body;
    upstreams_->Fetch(std::move(call), job->cancel,
                      [this, job](const UpstreamResult& r) { OnFirstStageDone(job, r); });
    return;
  }
  upstreams_->Call(std::move(call), job->out, ClientHeaders(*job), job->cancel,
                   [this, job](const UpstreamResult& r) { OnUpstreamDone(job, r); });
}

// A pool with cold_start_hold_ms and no eligible replica: the request waits in holds_ (bounded)
// until one is eligible (dispatched again), its client goes away (499) or the bound passes (503).
// False when the pool does not hold (or the job is a retry or a shadow/cascade stage).
bool Gateway::HoldForReplica(const std::shared_ptr<Job>& job) {
  const PoolConfig* pool = job->snap->cfg->FindPool(job->pool);
  if (!pool || pool->cold_start_hold.count() == 0 || job->attempts > 0 ||
      job->stage != Job::Stage::kOnly || job->replicas->any_eligible() || stopped_.load())
    return false;
  const std::string pool_name = job->pool;
  auto resume = [this, job, pool_name](HoldOutcome o) {
    metrics_.Add(std::string(kPoolHoldsTotal),
                 http::Labels({{"pool", pool_name}, {"result", HoldOutcomeName(o)}}), 1);
    if (o == HoldOutcome::kReady) return Dispatch(job);
    if (o == HoldOutcome::kCancelled) return Finish(job, 499, nullptr);
    RespondError(
        job, http::ErrorResponse(
                 503, fmt::format("pool '{}': no replica became ready within "
                                  "cold_start_hold_ms {}",
                                  pool_name,
                                  job->snap->cfg->FindPool(pool_name)->cold_start_hold.count())));
  };
  std::weak_ptr<Cancel> weak = job->cancel;
  auto cancelled = [weak] {
    auto c = weak.lock();
    return !c || c->fired();
  };
  if (holds_.Hold(pool_name, pool->cold_start_max_held, Clock::now() + pool->cold_start_hold,
                  resume, cancelled))
    return true;
  metrics_.Add(std::string(kPoolHoldsTotal),
               http::Labels({{"pool", pool_name}, {"result", "full"}}), 1);
  return false;
}

// On the ticker: held requests whose pool now has an eligible replica (in the current snapshot:
// a reload may have added it) are dispatched.
void Gateway::TickHolds() {
  auto snap = snapshot();
  holds_.Tick(Clock::now(), [&snap](const std::string& pool) {
    auto it = snap->pools.find(pool);
    return it != snap->pools.end() && it->second->any_eligible();
  });
}

void Gateway::RefreshHoldGauges() {
  for (const auto& [pool, n] : holds_.Counts())
    metrics_.Set(kPoolHeldRequests, http::Labels({{"pool", pool}}), static_cast<double>(n));
  for (const PoolConfig& p : snapshot()->cfg->pools)  // 0 before the first hold
    if (p.cold_start_hold.count() > 0)
      metrics_.Touch(kPoolHeldRequests, http::Labels({{"pool", p.name}}));
}

// Passive health: a client that went away says nothing about the replica; a stream the replica
// broke off does.
void Gateway::NoteUpstream(const std::shared_ptr<Job>& job, const UpstreamResult& r) {
  using Kind = UpstreamResult::Kind;
  if (job->trace) EndUpstream(job->trace.get(), r, Clock::now());
  const bool transport_ok = r.kind == Kind::kClientGone || (r.kind != Kind::kFailedMidStream &&
                                                            (r.status.ok() || r.http_status > 0));
  job->replicas->OnFinished(job->pick.url, transport_ok, r.http_status, Clock::now());
  ObserveUpstream(job->pool, job->pick.url, r, &metrics_);
}

void Gateway::OnUpstreamDone(const std::shared_ptr<Job>& job, const UpstreamResult& r) {
  NoteUpstream(job, r);
  if (job->stage == Job::Stage::kThen) {
    const std::string rs = http::Labels({{"route", job->route}, {"stage", "then"}});
    metrics_.Observe(std::string(kCascadeStageSeconds), rs, r.total_s);
  }
  if (r.kind == UpstreamResult::Kind::kRetryable && !job->cancel->fired() &&
      job->stage_attempts <= job->snap->cfg->upstream.retries) {
    metrics_.Add(std::string(kRetriesTotal),
                 http::Labels({{"route", job->route}, {"pool", job->pool}}), 1);
    Dispatch(job);
    return;
  }
  if (r.kind == UpstreamResult::Kind::kRetryable) {
    // Out of retries, nothing was written: the upstream's 5xx as it sent it, or a 502/504.
    HttpResponse resp = KeptResponse(r, ClientHeaders(*job));
    const int status = resp.status;
    job->out->Respond(std::move(resp));
    Finish(job, status, &r);
    return;
  }
  const int status = r.kind == UpstreamResult::Kind::kClientGone        ? 499
                     : r.kind == UpstreamResult::Kind::kFailedMidStream ? 502
                                                                        : r.http_status;
  Finish(job, status, &r);
}

void Gateway::RespondError(const std::shared_ptr<Job>& job, HttpResponse resp) {
  if (!job->route.empty()) resp.headers.emplace_back(protocol::kHeaderRoute, job->route);
  AddArmHeader(*job, &resp.headers);
  const int status = resp.status;
  job->out->Respond(std::move(resp));
  Finish(job, status, nullptr);
}

void Gateway::Finish(const std::shared_ptr<Job>& job, int status, const UpstreamResult* r) {
  if (job->finished.exchange(true)) return;
  const Clock::time_point now = Clock::now();
  if (job->admitted) {
    if (r && r->prompt_tokens >= 0)
      admission_->Settle(job->ticket, job->first_tokens + r->prompt_tokens +
                                          std::max<int64_t>(0, r->completion_tokens));
    else if (r && r->stream_chunks > 0)
      admission_->Settle(job->ticket, job->first_tokens + job->prompt.tokens + r->stream_chunks);
    admission_->Release(job->ticket, now);
  }
  const RequestRecord rec = job->Record(status, r, now);
  ObserveRequest(rec, &metrics_);
  AccessLog(rec);
  if (!job->arm.empty()) ObserveCanary(rec);
  if (job->stage == Job::Stage::kThen && r) {
    const int64_t prompt = r->prompt_tokens >= 0 ? r->prompt_tokens : job->prompt.tokens;
    const int64_t completion = r->completion_tokens >= 0 ? r->completion_tokens : r->stream_chunks;
    for (const auto& [kind, n] : {std::pair{"prompt", prompt}, std::pair{"completion", completion}})
      metrics_.Add(
          std::string(kCascadeTokensTotal),
          http::Labels(
              {{"route", job->route}, {"stage", "then"}, {"pool", job->pool}, {"kind", kind}}),
          static_cast<double>(n));
  }
  if (job->trace) {
    const TraceFacts facts{
        job->endpoint,         job->model,   job->route, job->pool, job->tenant, job->priority,
        job->asked_max_tokens, job->attempts};
    std::vector<trace::Span> spans = FinishRequestTrace(job->trace.get(), facts, status, r, now);
    if (!spans.empty()) {
      StartShadow(job, status);
      // Encoded after the response's last write, which is posted to the connection ahead of
      // this; still in flight until then, so a drain waits for the spans to be queued.
      job->out->Post([this, spans = std::move(spans)]() mutable {
        tracer_->Export(std::move(spans));
        in_flight_.fetch_sub(1);
      });
      return;
    }
  }
  StartShadow(job, status);
  in_flight_.fetch_sub(1);
}

void Gateway::AccessLog(const RequestRecord& rec) {
  MutexLock lock(&log_mu_);
  if (!log_) return;
  std::fputs(AccessLogLine(rec, std::chrono::system_clock::now()).c_str(), log_);
  std::fflush(log_);
}

// ------------------------------------------------------------------------------------------------
// Shadow and cascade (README.md "Shadow", "Cascade").

namespace {

// Whether a request is mirrored: a draw with probability `fraction`.
bool DrawShadow(double fraction) {
  if (fraction >= 1) return true;
  if (fraction <= 0) return false;
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0, 1)(rng) < fraction;
}

std::string_view StageHeader(const Gateway::Job& job, bool skipped);

}  // namespace

http::ApiError Gateway::PrepareTraffic(
    const std::shared_ptr<Job>& job, const RouteConfig& route, const json& body,
    const std::function<const PromptInfo&(const PoolConfig&)>& measure) {
  if (route.shadow && route.shadow->fraction > 0 && job->endpoint != Endpoint::kEmbeddings) {
    ASSIGN_OR_RETURN_API(job->shadow_body, ShadowBody(body));
    job->shadow = &*route.shadow;
    if (IsGreedy(body)) {  // the primary's answer is compared: keep a copy of it
      job->tee = std::make_shared<TeeResponder>(job->out, kMaxShadowCopy);
      job->out = job->tee;
    }
  }
  if (!route.cascade) return {};
  const CascadeConfig& c = *route.cascade;
  job->cascade = &c;
  const PoolConfig* then = job->snap->cfg->FindPool(c.then);
  if (!then || !job->snap->pools.contains(c.then))
    return http::ApiError(Status::Unavailable("route '" + route.name + "' has no pool " + c.then));
  job->then_prompt = measure(*then);
  bool skip = job->endpoint == Endpoint::kEmbeddings;  // no logprobs to judge by
  if (!skip) {
    ASSIGN_OR_RETURN_API(CascadeFirstStage fs, FirstStageRequest(job->endpoint, body));
    job->ask = fs.ask;
    job->first_body = std::move(fs.body);
    skip = job->ask.echo;  // the signal would include the prompt's logprobs
  }
  if (!skip) {
    job->stage = Job::Stage::kFirst;
    return {};
  }
  metrics_.Add(std::string(kCascadeRequestsTotal),
               http::Labels({{"route", job->route}, {"result", "skipped"}}), 1);
  job->cascade_skipped = true;
  job->stage = Job::Stage::kThen;
  job->pool = then->name;
  job->replicas = job->snap->pools.find(c.then)->second;
  job->api_key = then->api_key;
  job->prompt = job->then_prompt;
  job->text_key = job->prompt.ids.empty() ? job->prompt.text : std::string();
  return {};
}

std::vector<std::pair<std::string, std::string>> Gateway::ClientHeaders(const Job& job) const {
  std::vector<std::pair<std::string, std::string>> h = {
      {std::string(protocol::kHeaderRoute), job.route},
      {std::string(protocol::kHeaderReplica), job.pick.url}};
  AddArmHeader(job, &h);
  // The answering pool's model version (its `version` label; the control plane sets it).
  if (const PoolConfig* pool = job.snap->cfg->FindPool(job.pool); pool != nullptr)
    if (auto v = pool->labels.find("version"); v != pool->labels.end())
      h.emplace_back(protocol::kHeaderModelVersion, v->second);
  if (job.cascade) {
    h.emplace_back(protocol::kHeaderCascade, StageHeader(job, job.cascade_skipped));
    h.emplace_back(protocol::kHeaderPool, job.pool);
  }
  return h;
}

namespace {

std::string_view StageHeader(const Gateway::Job& job, bool skipped) {
  if (skipped) return "skipped";
  return job.stage == Gateway::Job::Stage::kFirst ? "first" : "escalated";
}

}  // namespace

void Gateway::OnFirstStageDone(const std::shared_ptr<Job>& job, const UpstreamResult& r) {
  using Kind = UpstreamResult::Kind;
  NoteUpstream(job, r);
  metrics_.Observe(std::string(kCascadeStageSeconds),
                   http::Labels({{"route", job->route}, {"stage", "first"}}), r.total_s);
  if (r.kind == Kind::kClientGone || job->cancel->fired()) {
    Finish(job, 499, &r);
    return;
  }
  if (r.kind == Kind::kRetryable && job->stage_attempts <= job->snap->cfg->upstream.retries) {
    metrics_.Add(std::string(kRetriesTotal),
                 http::Labels({{"route", job->route}, {"pool", job->pool}}), 1);
    Dispatch(job);
    return;
  }
  if (r.kind != Kind::kDone || r.http_status != 200) {
    Escalate(job, "first_error");
    return;
  }
  json answer = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  Result<CascadeSignals> signals = ComputeSignals(job->endpoint, answer);
  if (!signals.ok()) {
    Escalate(job, "first_error");
    return;
  }
  const int64_t prompt = r.prompt_tokens >= 0 ? r.prompt_tokens : job->prompt.tokens;
  const int64_t completion = r.completion_tokens >= 0 ? r.completion_tokens : signals->tokens;
  for (const auto& [kind, n] : {std::pair{"prompt", prompt}, std::pair{"completion", completion}})
    metrics_.Add(
        std::string(kCascadeTokensTotal),
        http::Labels(
            {{"route", job->route}, {"stage", "first"}, {"pool", job->pool}, {"kind", kind}}),
        static_cast<double>(n));
  const std::optional<double> value = SignalValue(*signals, job->cascade->signal);
  if (!value || *value < job->cascade->threshold) {
    job->first_tokens = prompt + completion;  // charged with the second stage's usage
    Escalate(job, "escalated");
    return;
  }
  AcceptFirstStage(job, r, std::move(answer));
}

void Gateway::AcceptFirstStage(const std::shared_ptr<Job>& job, const UpstreamResult& r,
                               json answer) {
  metrics_.Add(std::string(kCascadeRequestsTotal),
               http::Labels({{"route", job->route}, {"result", "accepted"}}), 1);
  StripLogprobs(job->ask, &answer);
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& h : r.headers)
    if (!job->ask.stream || h.first != "cache-control") headers.push_back(h);
  for (auto& h : ClientHeaders(*job)) headers.push_back(std::move(h));
  if (job->ask.stream) {  // the buffered answer as the stream the client asked for
    headers.emplace_back("cache-control", "no-cache");
    job->out->Begin("text/event-stream", std::move(headers));
    job->out->Write(AnswerAsSse(job->ask, answer));
    job->out->End();
  } else {
    HttpResponse resp;
    resp.status = 200;
    resp.content_type = "application/json";
    resp.headers = std::move(headers);
    resp.body = answer.dump(-1, ' ', false, json::error_handler_t::replace);
    job->out->Respond(std::move(resp));
  }
  Finish(job, 200, &r);
}

void Gateway::Escalate(const std::shared_ptr<Job>& job, std::string_view result) {
  metrics_.Add(std::string(kCascadeRequestsTotal),
               http::Labels({{"route", job->route}, {"result", result}}), 1);
  const CascadeConfig& c = *job->cascade;
  job->stage = Job::Stage::kThen;
  job->pool = c.then;
  job->replicas = job->snap->pools.find(c.then)->second;  // checked in PrepareTraffic
  const PoolConfig* then = job->snap->cfg->FindPool(c.then);
  job->api_key = then ? then->api_key : "";
  job->prompt = job->then_prompt;
  job->text_key = job->prompt.ids.empty() ? job->prompt.text : std::string();
  job->tried.clear();
  job->stage_attempts = 0;
  if (job->cancel->fired()) {
    Finish(job, 499, nullptr);
    return;
  }
  Dispatch(job);
}

// After the primary's answer: with probability `fraction`, the greedy copy goes to the shadow
// pool; its answer is compared with the primary's (when that was greedy, 200 and kept whole) and
// counted; nothing of it reaches the client.
void Gateway::StartShadow(const std::shared_ptr<Job>& job, int status) {
  if (!job->shadow || job->attempts == 0 || status == 499 || stopped_.load()) return;
  const ShadowConfig& sc = *job->shadow;
  if (!DrawShadow(sc.fraction)) return;
  auto count = [this, route = job->route, pool = sc.pool](ShadowOutcome o) {
    metrics_.Add(std::string(kShadowRequestsTotal),
                 http::Labels({{"route", route}, {"pool", pool}, {"result", ShadowOutcomeName(o)}}),
                 1);
  };
  if (!shadow_slots_.TryAcquire()) {
    count(ShadowOutcome::kDropped);
    return;
  }
  auto it = job->snap->pools.find(sc.pool);
  const PoolConfig* pc = job->snap->cfg->FindPool(sc.pool);
  PickRequest pr{job->prompt.ids, job->text_key, job->prompt.tokens,
                 job->max_tokens, job->tenant,   {},
                 job->adapter};
  Result<Pick> pick = it == job->snap->pools.end() || !pc
                          ? Result<Pick>(Status::Unavailable("no shadow pool"))
                          : it->second->Choose(pr, Clock::now());
  if (!pick.ok()) {
    count(ShadowOutcome::kError);
    shadow_slots_.Release();
    return;
  }
  std::shared_ptr<ReplicaSet> set = it->second;
  set->OnSent(pick->url, *pick, pr);
  std::optional<std::vector<std::string>> primary;
  if (job->tee && status == 200 && job->tee->complete())
    primary = job->tee->streamed() ? StreamTexts(job->endpoint, job->tee->body())
                                   : AnswerTexts(job->endpoint, job->tee->body());
  UpstreamCall call;
  call.url = pick->url;
  call.path = job->path;
  call.body = job->shadow_body;
  call.headers = job->headers;
  call.api_key = pc->api_key;
  call.deadline = Clock::now() + job->snap->cfg->upstream.timeout;
  upstreams_->Fetch(
      std::move(call), nullptr,
      [this, set, url = pick->url, route = job->route, pool = sc.pool, endpoint = job->endpoint,
       primary = std::move(primary), count](const UpstreamResult& r) {
        using Kind = UpstreamResult::Kind;
        set->OnFinished(url, r.kind == Kind::kDone || r.http_status > 0, r.http_status,
                        Clock::now());
        ObserveUpstream(pool, url, r, &metrics_);
        const bool ok = r.kind == Kind::kDone && r.http_status == 200;
        count(CompareShadow(ok, ok ? AnswerTexts(endpoint, r.body) : std::nullopt, primary));
        metrics_.Observe(std::string(kShadowSeconds),
                         http::Labels({{"route", route}, {"pool", pool}}), r.total_s);
        shadow_slots_.Release();
      });
}

}  // namespace strata::gateway
