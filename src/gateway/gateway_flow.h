// gateway_flow: one proxied request, from its parsed body to its last byte — the Gateway's request
// path as a small state machine:
//
//   Start: facts (tenant, model/adapter, priority, max_tokens) → route (MatchRoute; a split's arm)
//     → pool and prompt → shadow / cascade set-up (PrepareTraffic) → Admission::Admit
//   Admitted → Dispatch: ReplicaSet::Choose → Upstreams::Call (relayed) or, for a cascade's first
//     stage, Upstreams::Fetch (buffered); no replica → the cold-start hold, or 503
//   OnUpstreamDone: retry (Dispatch again) | relay done | the kept 5xx / 502
//   OnFirstStageDone: retry | accept the buffered answer | Escalate → Dispatch to the second pool
//   Finish (once): settle and release admission, metrics, access log, canary feed, spans, shadow
//
// Ownership: a RequestFlow is shared by the callbacks of admission, the hold and the upstream call
// (each holds a shared_ptr); the RequestServices and the Snapshot it points at outlive it.
// Thread contract: Start runs on the front's I/O thread; from then on one callback at a time
// touches the flow (admission's done, then the upstream's done callbacks, which run one after
// another on the upstream thread); `finished_` makes Finish run once.
// Errors: Start returns the client's error response (400 bad body, 404 no route, 503 no pool), or
// kDeferred when the answer comes later.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/balancer.h"
#include "gateway/cascade.h"
#include "gateway/config.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_services.h"
#include "gateway/gateway_trace.h"
#include "gateway/prompt.h"
#include "gateway/proxy.h"
#include "gateway/shadow.h"
#include "http/chain.h"
#include "http/openai_error.h"

namespace strata::gateway {

class PromptMeasure;

// The tenant of a request: the one whose key the Authorization header carries (null when keys are
// not required and none matched).
const TenantConfig* TenantOf(const GatewayConfig& cfg, const http::HttpRequest& req);

class RequestFlow : public std::enable_shared_from_this<RequestFlow> {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;

  RequestFlow(RequestServices* sv, std::shared_ptr<const Snapshot> snap,
              std::shared_ptr<http::Responder> out, Clock::time_point start);

  // The request of `ex` (a json_body route) under the current snapshot, which it keeps to its end;
  // `handle_start` is when the front took it (the start of its SERVER span).
  static http::HttpResponse Start(RequestServices* sv, const Snapshots& snaps, http::Exchange& ex,
                                  Clock::time_point handle_start);

 private:
  enum class Stage { kOnly, kFirst, kThen };  // a cascade's stage (kOnly on other routes)

  // Start's steps: the facts of the body, the route and its pool, and admission.
  std::optional<http::HttpResponse> ReadFacts(const http::Exchange& ex);
  std::optional<http::HttpResponse> Route(const http::Exchange& ex, Clock::time_point handle_start,
                                          PromptMeasure* measure);
  const std::string& PoolOf(const RouteConfig& route, const http::Exchange& ex);
  void Admit();
  void Admitted();
  void Dispatch();
  bool HoldForReplica();
  void NoteUpstream(const UpstreamResult& r);
  void OnUpstreamDone(const UpstreamResult& r);
  void RespondError(http::HttpResponse resp);
  void Finish(int status, const UpstreamResult* r);
  RequestRecord Record(int status, const UpstreamResult* r, Clock::time_point now) const;
  // Response headers: x-strata-arm of a split route; the route, replica, version and cascade ones.
  void AddArmHeader(Headers* h) const;
  Headers ClientHeaders() const;
  // Shadow and cascade (README.md "Shadow", "Cascade"): set up at routing, run from Dispatch /
  // the upstream callbacks, on the upstream thread.
  http::ApiError PrepareTraffic(const RouteConfig& route, const nlohmann::json& body,
                                PromptMeasure* measure);
  void ToSecondPool();  // the cascade's `then`: its pool, prompt and a fresh attempt count
  void CountCascadeTokens(std::string_view stage, int64_t prompt, int64_t completion);
  void OnFirstStageDone(const UpstreamResult& r);
  void AcceptFirstStage(const UpstreamResult& r, nlohmann::json answer);
  void Escalate(std::string_view result);
  void StartShadow(int status);

  RequestServices* sv_;
  std::shared_ptr<const Snapshot> snap_;
  std::shared_ptr<http::Responder> out_;
  std::shared_ptr<Cancel> cancel_ = std::make_shared<Cancel>();
  Clock::time_point start_;
  Endpoint endpoint_ = Endpoint::kCompletions;
  std::string path_, body_;
  std::string tenant_, route_, pool_, model_;
  std::string adapter_;  // body `lora` if a string, else `model` (the balancer's adapter term)
  std::string arm_;      // a split route: the chosen arm's pool ("" otherwise)
  Priority priority_ = Priority::kSilver;
  Headers headers_;  // forwarded upstream
  PromptInfo prompt_;
  std::string text_key_;  // without token ids: the prompt bytes, for history affinity
  int64_t max_tokens_ = 0;
  std::shared_ptr<ReplicaSet> replicas_;
  std::string api_key_;
  Admission::Ticket ticket_ = 0;
  bool admitted_ = false;
  std::vector<std::string> tried_;
  int attempts_ = 0;
  Pick pick_;
  Clock::time_point admitted_at_, dispatched_at_;
  std::atomic<bool> finished_{false};
  // Cascade: what the client asked of the fields the first stage rewrites, that stage's body, the
  // second pool's prompt, and the tokens the first stage used (settled with the answer's).
  const CascadeConfig* cascade_ = nullptr;  // into snap_->cfg
  Stage stage_ = Stage::kOnly;
  CascadeAsk ask_;
  std::string first_body_;
  PromptInfo then_prompt_;
  int stage_attempts_ = 0;  // upstream calls of the current stage (retries count per stage)
  int64_t first_tokens_ = 0;
  // Shadow: the route's mirror, the shadow copy's body, and the tee that keeps the primary's
  // answer (greedy requests only).
  const ShadowConfig* shadow_ = nullptr;  // into snap_->cfg
  std::string shadow_body_;
  std::shared_ptr<TeeResponder> tee_;
  bool cascade_skipped_ = false;  // embeddings or echo: straight to `then`
  // Tracing (gateway_trace.h): null when the gateway has no tracer (headers pass through).
  std::unique_ptr<RequestTrace> trace_;
  std::optional<int64_t> asked_max_tokens_;  // gen_ai.request.max_tokens, as the client sent it
};

}  // namespace strata::gateway
