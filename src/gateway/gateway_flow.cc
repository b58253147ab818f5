#include "gateway/gateway_flow.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "gateway/gateway_admin.h"
#include "gateway/routes.h"
#include "gateway/split.h"
#include "protocol/openai/request_fields.h"
#include "protocol/wire.h"

namespace strata::gateway {

using http::Exchange;
using http::HttpResponse;
using nlohmann::json;

// Prompt lengths are measured per pool tokenizer, lazily, at most once per tokenizer.
class PromptMeasure {
 public:
  PromptMeasure(const Snapshot& snap, Endpoint endpoint, const json& body)
      : snap_(snap), endpoint_(endpoint), body_(body) {}

  const PromptInfo& operator()(const PoolConfig& pool) {
    auto it = snap_.tokenizers.find(pool.name);
    const PoolTokenizer* tok = it == snap_.tokenizers.end() ? nullptr : it->second.get();
    auto m = measured_.find(tok);
    if (m == measured_.end())
      m = measured_
              .emplace(tok, tok ? tok->Measure(endpoint_, body_) : EstimatePrompt(endpoint_, body_))
              .first;
    return m->second;
  }

 private:
  const Snapshot& snap_;
  Endpoint endpoint_;
  const json& body_;
  std::map<const PoolTokenizer*, PromptInfo> measured_;
};

namespace {

constexpr int64_t kDefaultMaxTokens = 256;  // the token-bucket charge when max_tokens is absent

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

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
RequestFlow::Headers ForwardedHeaders(const http::HttpRequest& req, const std::string& tenant,
                                      Priority priority) {
  RequestFlow::Headers out;
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

// Whether a request is mirrored: a draw with probability `fraction`.
bool DrawShadow(double fraction) {
  if (fraction >= 1) return true;
  if (fraction <= 0) return false;
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0, 1)(rng) < fraction;
}

}  // namespace

const TenantConfig* TenantOf(const GatewayConfig& cfg, const http::HttpRequest& req) {
  std::string_view auth = req.Header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.size() <= kBearer.size() || auth.substr(0, kBearer.size()) != kBearer) return nullptr;
  return cfg.TenantForKey(auth.substr(kBearer.size()));
}

RequestFlow::RequestFlow(RequestServices* sv, std::shared_ptr<const Snapshot> snap,
                         std::shared_ptr<http::Responder> out, Clock::time_point start)
    : sv_(sv), snap_(std::move(snap)), out_(std::move(out)), start_(start) {}

HttpResponse RequestFlow::Start(RequestServices* sv, const Snapshots& snaps, Exchange& ex,
                                Clock::time_point handle_start) {
  const Clock::time_point start = Clock::now();
  auto flow = std::make_shared<RequestFlow>(sv, snaps.current(), ex.out, start);
  flow->path_ = ex.request.path;
  flow->endpoint_ = EndpointOf(ex.request.path);
  if (auto e = flow->ReadFacts(ex)) return std::move(*e);
  PromptMeasure measure(*flow->snap_, flow->endpoint_, ex.body);
  if (auto e = flow->Route(ex, handle_start, &measure)) return std::move(*e);

  flow->body_ = std::move(ex.request.body);  // forwarded as sent
  std::weak_ptr<Cancel> weak = flow->cancel_;
  flow->out_->OnClose([weak] {
    if (auto c = weak.lock()) c->Fire();
  });
  sv->in_flight.fetch_add(1);
  flow->Admit();
  return HttpResponse{http::kDeferred, {}, {}, {}};
}

// The tenant, model / adapter names, priority and max_tokens of the request.
std::optional<HttpResponse> RequestFlow::ReadFacts(const Exchange& ex) {
  const TenantConfig* tenant = TenantOf(*snap_->cfg, ex.request);
  if (tenant) tenant_ = tenant->name;
  auto names = protocol::ReadModelFields(ex.body);
  if (!names.ok()) return http::ErrorResponse(names.error());
  model_ = names->model;
  adapter_ = names->lora.empty() ? names->model : names->lora;
  auto prio = PriorityOf(ex.body, ex.request, tenant);
  if (!prio.ok()) return http::ErrorResponse(prio.error());
  priority_ = *prio;
  // The wire's bounds; the replica applies its own limit (0 is echo's, which the replica checks).
  auto max_tokens = protocol::ReadMaxTokens(ex.body, endpoint_ == Endpoint::kChat,
                                            {.lo = 0, .hi = protocol::kMaxTokensOnWire});
  if (!max_tokens.ok()) return http::ErrorResponse(max_tokens.error());
  asked_max_tokens_ = *max_tokens;
  max_tokens_ = endpoint_ == Endpoint::kEmbeddings ? 0 : max_tokens->value_or(kDefaultMaxTokens);
  return std::nullopt;
}

// The route (the config's ordered decision list), its pool, the prompt as that pool measures it,
// the forwarded headers, the trace, and the route's shadow / cascade.
std::optional<HttpResponse> RequestFlow::Route(const Exchange& ex, Clock::time_point handle_start,
                                               PromptMeasure* measure) {
  const GatewayConfig& cfg = *snap_->cfg;
  RequestFacts facts{model_, adapter_, tenant_, priority_, &ex.request};
  const RouteConfig* route =
      MatchRoute(cfg, facts, [&](const PoolConfig& p) { return (*measure)(p).tokens; });
  if (!route) return http::ErrorResponse(404, "no route matches this request", "model");
  const std::string& pool_name = PoolOf(*route, ex);  // a split: the chosen arm
  const PoolConfig* pool = cfg.FindPool(pool_name);
  auto set = snap_->pools.find(pool_name);
  if (!pool || set == snap_->pools.end())
    return http::ErrorResponse(503, "route '" + route->name + "' has no pool");
  route_ = route->name;
  pool_ = pool->name;
  replicas_ = set->second;
  api_key_ = pool->api_key;
  prompt_ = (*measure)(*pool);
  if (prompt_.ids.empty()) text_key_ = prompt_.text;
  headers_ = ForwardedHeaders(ex.request, tenant_, priority_);
  if (sv_->tracer) trace_ = StartRequestTrace(*sv_->tracer, ex.request, handle_start);
  if (auto e = PrepareTraffic(*route, ex.body, measure); !e.ok()) return http::ErrorResponse(e);
  return std::nullopt;
}

// The pool of the request on `route`: its primary pool, or for a split the arm chosen by the
// sticky key (split.h) under the current weights (counted in split_requests_total).
const std::string& RequestFlow::PoolOf(const RouteConfig& route, const Exchange& ex) {
  if (route.arms.empty()) return route.primary_pool();
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const double u = std::uniform_real_distribution<double>(0, 1)(rng);
  const std::string key = StickyKeyOf(route.sticky, ex.body, ex.request, tenant_);
  const ArmChoice c = ChooseArm(route.name, sv_->splits.Weights(route), key, u);
  arm_ = route.arms[c.index].pool;
  sv_->metrics.Add(std::string(kSplitRequestsTotal),
                   http::Labels({{"route", route.name}, {"pool", arm_}}), 1);
  return route.arms[c.index].pool;
}

void RequestFlow::Admit() {
  const AdmitRequest ar{tenant_, pool_, priority_, prompt_.tokens + max_tokens_, start_};
  sv_->admission->Admit(
      ar, [self = shared_from_this()](Result<Admission::Ticket> t, std::optional<Rejection> rej) {
        if (!t.ok() || rej) {
          HttpResponse r =
              http::ErrorResponse(429, rej ? rej->message : std::string(t.status().message()));
          const double after = rej ? std::max(1.0, std::ceil(rej->retry_after_s)) : 1.0;
          r.headers.emplace_back("Retry-After", fmt::format("{:.0f}", after));
          self->sv_->metrics.Add(std::string(kRejectionsTotal),
                                 http::Labels({{"route", self->route_},
                                               {"pool", self->pool_},
                                               {"reason", rej ? rej->reason : "admission"}}),
                                 1);
          self->RespondError(std::move(r));
          return;
        }
        self->ticket_ = *t;
        self->admitted_ = true;
        self->admitted_at_ = Clock::now();
        self->Admitted();
      });
}

void RequestFlow::AddArmHeader(Headers* h) const {
  if (!arm_.empty()) h->emplace_back(protocol::kHeaderArm, arm_);
}

void RequestFlow::Admitted() {
  if (cancel_->fired()) {
    Finish(499, nullptr);
    return;
  }
  Dispatch();
}

void RequestFlow::Dispatch() {
  PickRequest pr{prompt_.ids, text_key_, prompt_.tokens, max_tokens_, tenant_, tried_, adapter_};
  auto pick = replicas_->Choose(pr, Clock::now());
  if (!pick.ok() && stage_ == Stage::kFirst) {  // the second pool may still answer
    Escalate("first_error");
    return;
  }
  if (!pick.ok() && HoldForReplica()) return;
  if (!pick.ok()) {
    RespondError(
        http::ErrorResponse(503, fmt::format("pool '{}': {}", pool_, pick.status().message())));
    return;
  }
  if (attempts_ > 0) pick->reason = RouteReason::kRetry;
  pick_ = *pick;
  dispatched_at_ = Clock::now();
  tried_.push_back(pick->url);
  ++attempts_;
  ++stage_attempts_;
  replicas_->OnSent(pick->url, *pick, pr);
  sv_->metrics.Add(std::string(kRoutingDecisionsTotal),
                   http::Labels({{"route", route_},
                                 {"pool", pool_},
                                 {"reason", std::string(RouteReasonName(pick->reason))}}),
                   1);
  UpstreamCall call;
  call.url = pick->url;
  call.path = path_;
  call.body = body_;
  call.headers = headers_;
  if (trace_)
    BeginUpstream(trace_.get(), pick_, attempts_, route_, pool_, dispatched_at_, &call.headers);
  call.api_key = api_key_;
  call.deadline = Clock::now() + snap_->cfg->upstream.timeout;
  if (stage_ == Stage::kFirst) {  // buffered: the answer is decided on before relaying
    call.body = first_body_;
    sv_->upstreams->Fetch(
        std::move(call), cancel_,
        [self = shared_from_this()](const UpstreamResult& r) { self->OnFirstStageDone(r); });
    return;
  }
  sv_->upstreams->Call(
      std::move(call), out_, ClientHeaders(), cancel_,
      [self = shared_from_this()](const UpstreamResult& r) { self->OnUpstreamDone(r); });
}

// A pool with cold_start_hold_ms and no eligible replica: the request waits in the holds (bounded)
// until one is eligible (dispatched again), its client goes away (499) or the bound passes (503).
// False when the pool does not hold (or the flow is a retry or a shadow/cascade stage).
bool RequestFlow::HoldForReplica() {
  const PoolConfig* pool = snap_->cfg->FindPool(pool_);
  if (!pool || pool->cold_start_hold.count() == 0 || attempts_ > 0 || stage_ != Stage::kOnly ||
      replicas_->any_eligible() || sv_->stopped.load())
    return false;
  const std::string pool_name = pool_;
  auto resume = [self = shared_from_this(), pool_name](HoldOutcome o) {
    self->sv_->metrics.Add(std::string(kPoolHoldsTotal),
                           http::Labels({{"pool", pool_name}, {"result", HoldOutcomeName(o)}}), 1);
    if (o == HoldOutcome::kReady) return self->Dispatch();
    if (o == HoldOutcome::kCancelled) return self->Finish(499, nullptr);
    self->RespondError(http::ErrorResponse(
        503,
        fmt::format("pool '{}': no replica became ready within "
                    "cold_start_hold_ms {}",
                    pool_name, self->snap_->cfg->FindPool(pool_name)->cold_start_hold.count())));
  };
  std::weak_ptr<Cancel> weak = cancel_;
  auto cancelled = [weak] {
    auto c = weak.lock();
    return !c || c->fired();
  };
  if (sv_->holds.Hold(pool_name, pool->cold_start_max_held, Clock::now() + pool->cold_start_hold,
                      resume, cancelled))
    return true;
  sv_->metrics.Add(std::string(kPoolHoldsTotal),
                   http::Labels({{"pool", pool_name}, {"result", "full"}}), 1);
  return false;
}

// Passive health: a client that went away says nothing about the replica; a stream the replica
// broke off does.
void RequestFlow::NoteUpstream(const UpstreamResult& r) {
  using Kind = UpstreamResult::Kind;
  if (trace_) EndUpstream(trace_.get(), r, Clock::now());
  const bool transport_ok = r.kind == Kind::kClientGone || (r.kind != Kind::kFailedMidStream &&
                                                            (r.status.ok() || r.http_status > 0));
  replicas_->OnFinished(pick_.url, transport_ok, r.http_status, Clock::now());
  ObserveUpstream(pool_, pick_.url, r, &sv_->metrics);
}

void RequestFlow::OnUpstreamDone(const UpstreamResult& r) {
  NoteUpstream(r);
  if (stage_ == Stage::kThen) {
    const std::string rs = http::Labels({{"route", route_}, {"stage", "then"}});
    sv_->metrics.Observe(std::string(kCascadeStageSeconds), rs, r.total_s);
  }
  if (r.kind == UpstreamResult::Kind::kRetryable && !cancel_->fired() &&
      stage_attempts_ <= snap_->cfg->upstream.retries) {
    sv_->metrics.Add(std::string(kRetriesTotal), http::Labels({{"route", route_}, {"pool", pool_}}),
                     1);
    Dispatch();
    return;
  }
  if (r.kind == UpstreamResult::Kind::kRetryable) {
    // Out of retries, nothing was written: the upstream's 5xx as it sent it, or a 502/504.
    HttpResponse resp = KeptResponse(r, ClientHeaders());
    const int status = resp.status;
    out_->Respond(std::move(resp));
    Finish(status, &r);
    return;
  }
  const int status = r.kind == UpstreamResult::Kind::kClientGone        ? 499
                     : r.kind == UpstreamResult::Kind::kFailedMidStream ? 502
                                                                        : r.http_status;
  Finish(status, &r);
}

void RequestFlow::RespondError(HttpResponse resp) {
  if (!route_.empty()) resp.headers.emplace_back(protocol::kHeaderRoute, route_);
  AddArmHeader(&resp.headers);
  const int status = resp.status;
  out_->Respond(std::move(resp));
  Finish(status, nullptr);
}

void RequestFlow::Finish(int status, const UpstreamResult* r) {
  if (finished_.exchange(true)) return;
  const Clock::time_point now = Clock::now();
  if (admitted_) {
    if (r && r->prompt_tokens >= 0)
      sv_->admission->Settle(
          ticket_, first_tokens_ + r->prompt_tokens + std::max<int64_t>(0, r->completion_tokens));
    else if (r && r->stream_chunks > 0)
      sv_->admission->Settle(ticket_, first_tokens_ + prompt_.tokens + r->stream_chunks);
    sv_->admission->Release(ticket_, now);
  }
  const RequestRecord rec = Record(status, r, now);
  ObserveRequest(rec, &sv_->metrics);
  sv_->access_log.Write(rec);
  if (!arm_.empty()) ObserveCanary(rec, sv_->canary.get());
  if (stage_ == Stage::kThen && r)
    CountCascadeTokens("then", r->prompt_tokens >= 0 ? r->prompt_tokens : prompt_.tokens,
                       r->completion_tokens >= 0 ? r->completion_tokens : r->stream_chunks);
  if (trace_) {
    const TraceFacts facts{endpoint_,         model_,   route_, pool_, tenant_, priority_,
                           asked_max_tokens_, attempts_};
    std::vector<trace::Span> spans = FinishRequestTrace(trace_.get(), facts, status, r, now);
    if (!spans.empty()) {
      StartShadow(status);
      // Encoded after the response's last write, which is posted to the connection ahead of
      // this; still in flight until then, so a drain waits for the spans to be queued.
      out_->Post([sv = sv_, spans = std::move(spans)]() mutable {
        sv->tracer->Export(std::move(spans));
        sv->in_flight.fetch_sub(1);
      });
      return;
    }
  }
  StartShadow(status);
  sv_->in_flight.fetch_sub(1);
}

RequestRecord RequestFlow::Record(int status, const UpstreamResult* r,
                                  Clock::time_point now) const {
  RequestRecord rec;
  rec.tenant = tenant_;
  rec.route = route_;
  rec.pool = pool_;
  rec.replica = pick_.url;
  rec.path = path_;
  rec.model = model_;
  rec.priority = priority_;
  rec.reason = attempts_ > 0 ? RouteReasonName(pick_.reason) : "";
  rec.status = status;
  rec.attempts = attempts_;
  rec.prompt_tokens = prompt_.tokens;
  rec.prompt_estimated = prompt_.estimated;
  rec.cached_tokens = pick_.cached_tokens;
  rec.cost_s = pick_.cost_s;
  rec.total_s = Seconds(now - start_);
  rec.admission_s = admitted_ ? Seconds(admitted_at_ - start_) : Seconds(now - start_);
  if (r && attempts_ > 0) rec.ttft_s = Seconds(dispatched_at_ - start_) + r->first_chunk_s;
  rec.upstream = r;
  return rec;
}

// ------------------------------------------------------------------------------------------------
// Shadow and cascade (README.md "Shadow", "Cascade").

http::ApiError RequestFlow::PrepareTraffic(const RouteConfig& route, const json& body,
                                           PromptMeasure* measure) {
  if (route.shadow && route.shadow->fraction > 0 && endpoint_ != Endpoint::kEmbeddings) {
    ASSIGN_OR_RETURN_API(shadow_body_, ShadowBody(body));
    shadow_ = &*route.shadow;
    if (IsGreedy(body)) {  // the primary's answer is compared: keep a copy of it
      tee_ = std::make_shared<TeeResponder>(out_, kMaxShadowCopy);
      out_ = tee_;
    }
  }
  if (!route.cascade) return {};
  const CascadeConfig& c = *route.cascade;
  cascade_ = &c;
  const PoolConfig* then = snap_->cfg->FindPool(c.then);
  if (!then || !snap_->pools.contains(c.then))
    return http::ApiError(Status::Unavailable("route '" + route.name + "' has no pool " + c.then));
  then_prompt_ = (*measure)(*then);
  bool skip = endpoint_ == Endpoint::kEmbeddings;  // no logprobs to judge by
  if (!skip) {
    ASSIGN_OR_RETURN_API(CascadeFirstStage fs, FirstStageRequest(endpoint_, body));
    ask_ = fs.ask;
    first_body_ = std::move(fs.body);
    skip = ask_.echo;  // the signal would include the prompt's logprobs
  }
  if (!skip) {
    stage_ = Stage::kFirst;
    return {};
  }
  sv_->metrics.Add(std::string(kCascadeRequestsTotal),
                   http::Labels({{"route", route_}, {"result", "skipped"}}), 1);
  cascade_skipped_ = true;
  ToSecondPool();
  return {};
}

void RequestFlow::ToSecondPool() {
  const CascadeConfig& c = *cascade_;
  stage_ = Stage::kThen;
  pool_ = c.then;
  replicas_ = snap_->pools.find(c.then)->second;  // checked in PrepareTraffic
  const PoolConfig* then = snap_->cfg->FindPool(c.then);
  api_key_ = then ? then->api_key : "";
  prompt_ = then_prompt_;
  text_key_ = prompt_.ids.empty() ? prompt_.text : std::string();
  tried_.clear();
  stage_attempts_ = 0;
}

RequestFlow::Headers RequestFlow::ClientHeaders() const {
  Headers h = {{std::string(protocol::kHeaderRoute), route_},
               {std::string(protocol::kHeaderReplica), pick_.url}};
  AddArmHeader(&h);
  // The answering pool's model version (its `version` label; the control plane sets it).
  if (const PoolConfig* pool = snap_->cfg->FindPool(pool_); pool != nullptr)
    if (auto v = pool->labels.find("version"); v != pool->labels.end())
      h.emplace_back(protocol::kHeaderModelVersion, v->second);
  if (cascade_) {
    const std::string_view stage = cascade_skipped_          ? "skipped"
                                   : stage_ == Stage::kFirst ? "first"
                                                             : "escalated";
    h.emplace_back(protocol::kHeaderCascade, stage);
    h.emplace_back(protocol::kHeaderPool, pool_);
  }
  return h;
}

void RequestFlow::CountCascadeTokens(std::string_view stage, int64_t prompt, int64_t completion) {
  for (const auto& [kind, n] : {std::pair{"prompt", prompt}, std::pair{"completion", completion}})
    sv_->metrics.Add(
        std::string(kCascadeTokensTotal),
        http::Labels({{"route", route_}, {"stage", stage}, {"pool", pool_}, {"kind", kind}}),
        static_cast<double>(n));
}

void RequestFlow::OnFirstStageDone(const UpstreamResult& r) {
  using Kind = UpstreamResult::Kind;
  NoteUpstream(r);
  sv_->metrics.Observe(std::string(kCascadeStageSeconds),
                       http::Labels({{"route", route_}, {"stage", "first"}}), r.total_s);
  if (r.kind == Kind::kClientGone || cancel_->fired()) {
    Finish(499, &r);
    return;
  }
  if (r.kind == Kind::kRetryable && stage_attempts_ <= snap_->cfg->upstream.retries) {
    sv_->metrics.Add(std::string(kRetriesTotal), http::Labels({{"route", route_}, {"pool", pool_}}),
                     1);
    Dispatch();
    return;
  }
  if (r.kind != Kind::kDone || r.http_status != 200) {
    Escalate("first_error");
    return;
  }
  json answer = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  Result<CascadeSignals> signals = ComputeSignals(endpoint_, answer);
  if (!signals.ok()) {
    Escalate("first_error");
    return;
  }
  const int64_t prompt = r.prompt_tokens >= 0 ? r.prompt_tokens : prompt_.tokens;
  const int64_t completion = r.completion_tokens >= 0 ? r.completion_tokens : signals->tokens;
  CountCascadeTokens("first", prompt, completion);
  const std::optional<double> value = SignalValue(*signals, cascade_->signal);
  if (!value || *value < cascade_->threshold) {
    first_tokens_ = prompt + completion;  // charged with the second stage's usage
    Escalate("escalated");
    return;
  }
  AcceptFirstStage(r, std::move(answer));
}

void RequestFlow::AcceptFirstStage(const UpstreamResult& r, json answer) {
  sv_->metrics.Add(std::string(kCascadeRequestsTotal),
                   http::Labels({{"route", route_}, {"result", "accepted"}}), 1);
  StripLogprobs(ask_, &answer);
  Headers headers;
  for (const auto& h : r.headers)
    if (!ask_.stream || h.first != "cache-control") headers.push_back(h);
  for (auto& h : ClientHeaders()) headers.push_back(std::move(h));
  if (ask_.stream) {  // the buffered answer as the stream the client asked for
    headers.emplace_back("cache-control", "no-cache");
    out_->Begin("text/event-stream", std::move(headers));
    out_->Write(AnswerAsSse(ask_, answer));
    out_->End();
  } else {
    HttpResponse resp;
    resp.status = 200;
    resp.content_type = "application/json";
    resp.headers = std::move(headers);
    resp.body = answer.dump(-1, ' ', false, json::error_handler_t::replace);
    out_->Respond(std::move(resp));
  }
  Finish(200, &r);
}

void RequestFlow::Escalate(std::string_view result) {
  sv_->metrics.Add(std::string(kCascadeRequestsTotal),
                   http::Labels({{"route", route_}, {"result", result}}), 1);
  ToSecondPool();
  if (cancel_->fired()) {
    Finish(499, nullptr);
    return;
  }
  Dispatch();
}

// After the primary's answer: with probability `fraction`, the greedy copy goes to the shadow
// pool; its answer is compared with the primary's (when that was greedy, 200 and kept whole) and
// counted; nothing of it reaches the client.
void RequestFlow::StartShadow(int status) {
  if (!shadow_ || attempts_ == 0 || status == 499 || sv_->stopped.load()) return;
  const ShadowConfig& sc = *shadow_;
  if (!DrawShadow(sc.fraction)) return;
  auto count = [sv = sv_, route = route_, pool = sc.pool](ShadowOutcome o) {
    sv->metrics.Add(
        std::string(kShadowRequestsTotal),
        http::Labels({{"route", route}, {"pool", pool}, {"result", ShadowOutcomeName(o)}}), 1);
  };
  if (!sv_->shadow_slots.TryAcquire()) {
    count(ShadowOutcome::kDropped);
    return;
  }
  auto it = snap_->pools.find(sc.pool);
  const PoolConfig* pc = snap_->cfg->FindPool(sc.pool);
  PickRequest pr{prompt_.ids, text_key_, prompt_.tokens, max_tokens_, tenant_, {}, adapter_};
  Result<Pick> pick = it == snap_->pools.end() || !pc
                          ? Result<Pick>(Status::Unavailable("no shadow pool"))
                          : it->second->Choose(pr, Clock::now());
  if (!pick.ok()) {
    count(ShadowOutcome::kError);
    sv_->shadow_slots.Release();
    return;
  }
  std::shared_ptr<ReplicaSet> set = it->second;
  set->OnSent(pick->url, *pick, pr);
  std::optional<std::vector<std::string>> primary;
  if (tee_ && status == 200 && tee_->complete())
    primary = tee_->streamed() ? StreamTexts(endpoint_, tee_->body())
                               : AnswerTexts(endpoint_, tee_->body());
  UpstreamCall call;
  call.url = pick->url;
  call.path = path_;
  call.body = shadow_body_;
  call.headers = headers_;
  call.api_key = pc->api_key;
  call.deadline = Clock::now() + snap_->cfg->upstream.timeout;
  sv_->upstreams->Fetch(
      std::move(call), nullptr,
      [sv = sv_, set, url = pick->url, route = route_, pool = sc.pool, endpoint = endpoint_,
       primary = std::move(primary), count](const UpstreamResult& r) {
        using Kind = UpstreamResult::Kind;
        set->OnFinished(url, r.kind == Kind::kDone || r.http_status > 0, r.http_status,
                        Clock::now());
        ObserveUpstream(pool, url, r, &sv->metrics);
        const bool ok = r.kind == Kind::kDone && r.http_status == 200;
        count(CompareShadow(ok, ok ? AnswerTexts(endpoint, r.body) : std::nullopt, primary));
        sv->metrics.Observe(std::string(kShadowSeconds),
                            http::Labels({{"route", route}, {"pool", pool}}), r.total_s);
        sv->shadow_slots.Release();
      });
}

}  // namespace strata::gateway
