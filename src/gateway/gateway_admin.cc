#include "gateway/gateway_admin.h"

#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "http/auth.h"
#include "http/json_fields.h"
#include "http/openai_error.h"

namespace strata::gateway {

using http::Exchange;
using http::HttpResponse;
using nlohmann::json;

namespace {

HttpResponse Json(int status, const json& j) {
  HttpResponse r;
  r.status = status;
  r.body = j.dump();
  return r;
}

json OptionalNumber(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json FiguresJson(const ArmFigures& f) {
  return {{"requests", f.requests},
          {"errors", f.errors},
          {"error_rate", f.error_rate},
          {"ttft_p95_s", OptionalNumber(f.ttft_p95_s)},
          {"tpot_p95_s", OptionalNumber(f.tpot_p95_s)},
          {"mean_logprob", OptionalNumber(f.mean_logprob)}};
}

json DecisionJson(const CanaryDecision& d) {
  return {{"decision", d.decision},
          {"reason", d.reason},
          {"step", d.step},
          {"weight", d.weight},
          {"at_s", d.at_s},
          {"baseline", FiguresJson(d.baseline)},
          {"canary", FiguresJson(d.canary)}};
}

json RouteJson(const RouteConfig& r, const std::vector<RouteWeights>& weights) {
  json j = {{"name", r.name}};
  if (r.cascade) {
    j["kind"] = "cascade";
    j["cascade"] = {{"first", r.cascade->first},
                    {"then", r.cascade->then},
                    {"signal", CascadeSignalName(r.cascade->signal)},
                    {"threshold", r.cascade->threshold}};
  } else if (!r.arms.empty()) {
    j["kind"] = "split";
    j["sticky"] = StickyKeyName(r.sticky.key);
    json arms = json::array();
    for (const RouteWeights& w : weights) {
      if (w.route != r.name) continue;
      for (size_t i = 0; i < w.pools.size(); ++i)
        arms.push_back(
            {{"pool", w.pools[i]}, {"weight", w.current[i]}, {"config_weight", w.config[i]}});
      j["overridden"] = w.overridden;
    }
    j["arms"] = std::move(arms);
    j["canary"] = r.canary.has_value();
  } else {
    j["kind"] = "pool";
    j["to"] = r.to;
  }
  if (r.shadow) j["shadow"] = {{"pool", r.shadow->pool}, {"fraction", r.shadow->fraction}};
  return j;
}

// "<name>/<suffix>" → name ("" when the rest has another shape).
std::string NameBefore(std::string_view rest, std::string_view suffix) {
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0 || rest.substr(slash + 1) != suffix) return "";
  return std::string(rest.substr(0, slash));
}

}  // namespace

// The admin key: none configured → 403 naming the config key; a wrong or missing one → 401.
std::optional<HttpResponse> AdminApi::Auth(const Exchange& ex) const {
  const std::string key = snaps_->current()->cfg->admin.api_key;
  if (key.empty())
    return http::ErrorResponse(403,
                               "the admin API is off: set admin.api_key in the gateway config");
  std::string_view auth = ex.request.Header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  const bool bearer = auth.size() > kBearer.size() && auth.substr(0, kBearer.size()) == kBearer;
  if (bearer && http::ConstantTimeEquals(auth.substr(kBearer.size()), key)) return std::nullopt;
  HttpResponse r = http::ErrorResponse(401, "invalid or missing admin API key");
  r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

HttpResponse AdminApi::Routes(Exchange& ex) {
  if (auto denied = Auth(ex)) return std::move(*denied);
  auto snap = snaps_->current();
  const std::vector<RouteWeights> weights = sv_->splits.List();
  json routes = json::array();
  for (const RouteConfig& r : snap->cfg->routes) routes.push_back(RouteJson(r, weights));
  return Json(200, {{"routes", std::move(routes)}, {"generation", snap->generation}});
}

HttpResponse AdminApi::SetWeights(Exchange& ex) {
  if (auto denied = Auth(ex)) return std::move(*denied);
  const std::string name =
      NameBefore(std::string_view(ex.request.path).substr(ex.route->path.size()), "weights");
  if (name.empty()) return http::ErrorResponse(404, "use PUT /admin/routes/<name>/weights");
  auto snap = snaps_->current();
  const RouteConfig* route = nullptr;
  for (const RouteConfig& r : snap->cfg->routes)
    if (r.name == name) route = &r;
  if (!route) return http::ErrorResponse(404, "no route named '" + name + "'");
  if (route->arms.empty())
    return http::ErrorResponse(400, "route '" + name + "' is not a split (to: is not a list)");
  if (sv_->canary->Has(name))
    return http::ErrorResponse(409, "route '" + name + "' has a canary: use POST /admin/canary/" +
                                        name + "/{pause|resume|rollback|promote}");
  std::map<std::string, double, std::less<>> by_pool;
  const http::Fields f(ex.body);
  for (const auto& item : ex.body.items()) {
    double w = 0;
    if (!f.Has(item.key())) return http::ErrorResponse(f.Error(item.key(), "must be a number"));
    if (auto e = f.Double(item.key(), http::Range{0, 1e6}, &w); !e.ok())
      return http::ErrorResponse(e);
    by_pool[item.key()] = w;
  }
  if (Status s = sv_->splits.Set(name, by_pool); !s.ok())
    return http::ErrorResponse(s.code() == StatusCode::kNotFound ? 404 : 400, s.message());
  std::fprintf(stderr, "strata gateway: admin: route %s weights set to %s\n", name.c_str(),
               ex.body.dump().c_str());
  return Json(200, RouteJson(*route, sv_->splits.List()));
}

HttpResponse AdminApi::Canary(Exchange& ex) {
  if (auto denied = Auth(ex)) return std::move(*denied);
  json list = json::array();
  for (const CanaryView& v : sv_->canary->List(Clock::now())) {
    json decisions = json::array();
    for (const CanaryDecision& d : v.decisions) decisions.push_back(DecisionJson(d));
    list.push_back(
        {{"route", v.route},
         {"baseline", v.baseline},
         {"canary", v.canary},
         {"state", CanaryStateName(v.state)},
         {"step", v.step},
         {"steps", v.steps},
         {"weight", v.weight},
         {"step_age_s", v.step_age_s},
         {"window",
          {{"baseline", FiguresJson(v.baseline_now)}, {"canary", FiguresJson(v.canary_now)}}},
         {"decisions", std::move(decisions)}});
  }
  return Json(200, {{"canaries", std::move(list)}});
}

HttpResponse AdminApi::CanaryAction(Exchange& ex) {
  if (auto denied = Auth(ex)) return std::move(*denied);
  using A = CanaryController::Action;
  static constexpr std::pair<std::string_view, A> kActions[] = {{"pause", A::kPause},
                                                                {"resume", A::kResume},
                                                                {"rollback", A::kRollback},
                                                                {"promote", A::kPromote}};
  const std::string_view rest = std::string_view(ex.request.path).substr(ex.route->path.size());
  for (const auto& [verb, action] : kActions) {
    const std::string name = NameBefore(rest, verb);
    if (name.empty()) continue;
    auto d = sv_->canary->Act(name, action, Clock::now());
    if (!d.ok())
      return http::ErrorResponse(d.status().code() == StatusCode::kNotFound ? 404 : 409,
                                 d.status().message());
    NoteCanary({*d}, &sv_->metrics);
    return Json(200, DecisionJson(*d));
  }
  return http::ErrorResponse(404, "use POST /admin/canary/<route>/{pause|resume|rollback|promote}");
}

void ObserveCanary(const RequestRecord& rec, CanaryController* canary) {
  CanaryOutcome o;
  o.status = rec.status;
  o.ttft_s = rec.ttft_s;
  if (const UpstreamResult* r = rec.upstream; r && rec.ttft_s >= 0) {
    const int64_t tokens = r->completion_tokens >= 0 ? r->completion_tokens : r->stream_chunks;
    const double decode_s = rec.total_s - rec.ttft_s;
    if (tokens > 1 && decode_s >= 0) o.tpot_s = decode_s / static_cast<double>(tokens - 1);
  }
  canary->Observe(rec.route, rec.pool, o);
}

void NoteCanary(const std::vector<CanaryDecision>& decisions, http::MetricsRegistry* metrics) {
  for (const CanaryDecision& d : decisions) {
    std::fprintf(stderr,
                 "strata gateway: canary %s: %s (%s) step=%zu weight=%g baseline{n=%lld err=%g} "
                 "canary{n=%lld err=%g}\n",
                 d.route.c_str(), d.decision.c_str(), d.reason.c_str(), d.step + 1, d.weight,
                 static_cast<long long>(d.baseline.requests), d.baseline.error_rate,
                 static_cast<long long>(d.canary.requests), d.canary.error_rate);
    metrics->Add(std::string(kCanaryDecisionsTotal),
                 http::Labels({{"route", d.route}, {"decision", d.decision}}), 1);
  }
}

void RefreshCanaryGauges(const CanaryController& canary, http::MetricsRegistry* metrics) {
  for (const CanaryView& v : canary.List(Clock::now())) {
    metrics->Set(std::string(kCanaryWeight), http::Labels({{"route", v.route}, {"pool", v.canary}}),
                 v.weight);
    metrics->Set(std::string(kCanaryWeight),
                 http::Labels({{"route", v.route}, {"pool", v.baseline}}), 100 - v.weight);
  }
}

}  // namespace strata::gateway
