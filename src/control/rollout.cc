// The canary rollout's state machine (see rollout.h) and the admin API answer it reads.
#include "control/rollout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

#include "base/enum_names.h"
#include "http/json_fields.h"

namespace strata::control {
namespace {

using nlohmann::json;

double Seconds(CanaryRollout::Time a, CanaryRollout::Time b) {
  return std::chrono::duration<double>(b - a).count();
}

// One entry of the admin API's list; the fields read are typed-checked, a wrong one is an error.
Status ParseEntry(const json& c, size_t i, CanaryRouteState* out) {
  const http::Fields f(c, fmt::format("canaries[{}].", i));
  if (!f.IsObject()) return Status::InvalidArgument(fmt::format("canaries[{}]: not an object", i));
  for (auto [key, dst] : {std::pair{"route", &out->route}, std::pair{"baseline", &out->baseline},
                          std::pair{"canary", &out->canary}, std::pair{"state", &out->state}}) {
    if (auto e = f.String(key, dst); !e.ok()) return Status::InvalidArgument(e.message());
  }
  if (auto e = f.Int("step", 0, 1000, &out->step); !e.ok())
    return Status::InvalidArgument(e.message());
  if (auto e = f.Double("weight", http::Range{0, 100}, &out->weight); !e.ok())
    return Status::InvalidArgument(e.message());
  const json* steps = nullptr;
  if (auto e = f.Array("steps", &steps); !e.ok()) return Status::InvalidArgument(e.message());
  if (steps)
    for (const json& s : *steps)
      if (s.is_number()) out->steps.push_back(s.get<double>());
  const json* window = nullptr;
  if (auto e = f.Object("window", &window); !e.ok()) return Status::InvalidArgument(e.message());
  if (window) {
    const http::Fields w(*window);
    for (auto [arm, dst] : {std::pair{"baseline", &out->baseline_requests},
                            std::pair{"canary", &out->canary_requests}}) {
      const json* figures = nullptr;
      if (w.Object(arm, &figures).ok() && figures)
        (void)http::Fields(*figures).Int("requests", 0, INT64_MAX, dst);
    }
  }
  const json* decisions = nullptr;
  if (auto e = f.Array("decisions", &decisions); !e.ok())
    return Status::InvalidArgument(e.message());
  if (decisions && !decisions->empty()) {
    const http::Fields d(decisions->back());
    (void)d.String("decision", &out->last_decision);
    (void)d.String("reason", &out->last_reason);
  }
  return Status::Ok();
}

json RouteJson(const CanaryRouteState& r) {
  return {{"route", r.route},
          {"state", r.state},
          {"step", r.step},
          {"steps", r.steps},
          {"weight", r.weight},
          {"last_decision", r.last_decision},
          {"last_reason", r.last_reason},
          {"baseline_requests", r.baseline_requests},
          {"canary_requests", r.canary_requests}};
}

}  // namespace

std::string_view RolloutPhaseName(RolloutPhase p) {
  static constexpr auto kNames =
      EnumNames<RolloutPhase::kFailed>("starting", "canary", "promoted", "rolled_back", "failed");
  return EnumName(kNames, p);
}

Result<std::vector<CanaryRouteState>> ParseCanaryList(std::string_view body,
                                                      std::string_view canary_pool) {
  const json j = json::parse(body, nullptr, false);
  const json* list = nullptr;
  if (!j.is_object() || !http::Fields(j).Array("canaries", &list).ok() || !list)
    return Status::InvalidArgument("the admin API's answer has no canaries list");
  std::vector<CanaryRouteState> out;
  for (size_t i = 0; i < list->size(); ++i) {
    CanaryRouteState s;
    RETURN_IF_ERROR(ParseEntry((*list)[i], i, &s));
    if (s.canary == canary_pool) out.push_back(std::move(s));
  }
  return out;
}

CanaryRollout::CanaryRollout(std::string pool, std::string from, std::string to,
                             std::string canary_pool, std::vector<std::string> routes,
                             std::chrono::milliseconds gateway_timeout, Time now)
    : pool_(std::move(pool)),
      from_(std::move(from)),
      to_(std::move(to)),
      canary_pool_(std::move(canary_pool)),
      routes_(std::move(routes)),
      gateway_timeout_(gateway_timeout),
      started_(now),
      phase_since_(now),
      last_seen_(now) {}

void CanaryRollout::Finish(RolloutPhase phase, std::string reason, Time now) {
  phase_ = phase;
  reason_ = std::move(reason);
  phase_since_ = now;
  finished_s_ = Seconds(started_, now);
}

void CanaryRollout::ObserveReplicas(const NewSetState& s, Time now) {
  if (phase_ != RolloutPhase::kStarting) return;
  new_ready_ = s.ready;
  new_wanted_ = s.wanted;
  if (!s.failed.empty()) {
    Finish(RolloutPhase::kFailed, "a replica of " + to_ + " failed: " + s.failed, now);
    return;
  }
  if (s.wanted > 0 && s.ready >= s.wanted) {
    phase_ = RolloutPhase::kCanary;
    phase_since_ = last_seen_ = now;
  }
}

void CanaryRollout::ObserveGateway(const Result<std::vector<CanaryRouteState>>& canaries,
                                   Time now) {
  if (phase_ != RolloutPhase::kCanary) return;
  std::vector<CanaryRouteState> ours;
  if (canaries.ok()) {
    gateway_error_.clear();
    for (const CanaryRouteState& c : *canaries)
      if (std::find(routes_.begin(), routes_.end(), c.route) != routes_.end()) ours.push_back(c);
  } else {
    gateway_error_ = canaries.status().ToString();
  }
  if (canaries.ok() && ours.size() == routes_.size()) {
    seen_ = std::move(ours);
    last_seen_ = now;
  } else if (now - last_seen_ >= gateway_timeout_) {
    Finish(RolloutPhase::kFailed,
           fmt::format("the gateway did not show the canary of {} on route(s) {} for {} s{}",
                       canary_pool_, fmt::join(routes_, ", "), gateway_timeout_.count() / 1000,
                       gateway_error_.empty() ? "" : " (" + gateway_error_ + ")"),
           now);
    return;
  } else {
    return;  // the gateway has not reloaded yet (or restarted): wait
  }
  for (const CanaryRouteState& c : seen_) {
    if (c.state != "rolled_back") continue;
    Finish(RolloutPhase::kRolledBack,
           fmt::format("route {}: canary {}: {}", c.route,
                       c.last_decision.empty() ? "rollback" : c.last_decision, c.last_reason),
           now);
    return;
  }
  const bool all_promoted = std::all_of(
      seen_.begin(), seen_.end(), [](const CanaryRouteState& c) { return c.state == "promoted"; });
  if (all_promoted && !seen_.empty()) {
    const CanaryRouteState& c = seen_.front();
    Finish(RolloutPhase::kPromoted,
           fmt::format("route {}: canary {}: {}", c.route,
                       c.last_decision.empty() ? "promote" : c.last_decision, c.last_reason),
           now);
  }
}

nlohmann::json CanaryRollout::ToJson(Time now) const {
  json routes = json::array();
  for (const CanaryRouteState& r : seen_) routes.push_back(RouteJson(r));
  json j = {{"strategy", "canary"},
            {"pool", pool_},
            {"from", from_},
            {"to", to_},
            {"canary_pool", canary_pool_},
            {"phase", RolloutPhaseName(phase_)},
            {"reason", reason_},
            {"new_ready", new_ready_},
            {"new_wanted", new_wanted_},
            {"routes", routes},
            {"elapsed_s", finished_s_ >= 0 ? finished_s_ : Seconds(started_, now)},
            {"phase_age_s", Seconds(phase_since_, now)}};
  if (!gateway_error_.empty()) j["last_gateway_error"] = gateway_error_;
  if (!seen_.empty()) {  // the first route's canary stands for the rollout's progress
    const CanaryRouteState& c = seen_.front();
    j["state"] = c.state;
    j["step"] = c.step + 1;  // 1-based for people
    j["steps"] = c.steps;
    j["weight"] = c.weight;
    j["last_decision"] = {
        {"route", c.route}, {"decision", c.last_decision}, {"reason", c.last_reason}};
  }
  return j;
}

std::string CanaryRollout::Summary() const {
  std::string out = fmt::format("{} -> {} canary: ", from_, to_);
  switch (phase_) {
    case RolloutPhase::kStarting:
      return out + fmt::format("starting {} ({}/{} ready)", canary_pool_, new_ready_, new_wanted_);
    case RolloutPhase::kCanary:
      if (seen_.empty()) return out + "waiting for the gateway's canary";
      return out + fmt::format("step {}/{}, canary {:g} % ({})", seen_.front().step + 1,
                               seen_.front().steps.size(), seen_.front().weight,
                               seen_.front().state);
    default:
      return out + fmt::format("{}: {}", RolloutPhaseName(phase_), reason_);
  }
}

}  // namespace strata::control
