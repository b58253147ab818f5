#include "control/up_status.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

namespace strata::control::up {
namespace {

using nlohmann::json;

json Number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// One objective: its target, the measured figure and whether it is met (null: no data yet).
json Objective(double target, double measured, double scale) {
  const double m = measured * scale;
  return {{"target", target},
          {"measured", Number(m)},
          {"met", std::isfinite(m) ? json(m <= target) : json(nullptr)}};
}

json Attainment(const SloSpec& slo, const PoolFigures& f) {
  json out = json::object();
  if (slo.e2e_p95_ms > 0) out["e2e_p95_ms"] = Objective(slo.e2e_p95_ms, f.e2e_p95_s, 1e3);
  if (slo.ttft_p95_ms > 0) out["ttft_p95_ms"] = Objective(slo.ttft_p95_ms, f.ttft_p95_s, 1e3);
  if (slo.tpot_p95_ms > 0) out["tpot_p95_ms"] = Objective(slo.tpot_p95_ms, f.tpot_p95_s, 1e3);
  out["error_rate"] = Objective(slo.error_rate, f.error_rate, 1);
  return out;
}

// Whether every objective is met; null while one has no data.
json SloMet(const json& attainment) {
  bool met = true, known = true;
  for (const auto& [k, o] : attainment.items()) {
    const json& m = o["met"];
    if (m.is_null())
      known = false;
    else
      met = met && m.is_boolean() && m.get<bool>();
  }
  return known ? json(met) : json(nullptr);
}

json FiguresJson(const PoolFigures& f) {
  return {{"e2e_p95_s", Number(f.e2e_p95_s)},
          {"ttft_p95_s", Number(f.ttft_p95_s)},
          {"tpot_p95_s", Number(f.tpot_p95_s)},
          {"error_rate", Number(f.error_rate)},
          {"request_rate", Number(f.request_rate)}};
}

json DecisionJson(const ScaleDecision& d) {
  return {{"desired", d.desired},
          {"rule", d.rule},
          {"reason", d.reason},
          {"predicted_penalty", Number(d.predicted_penalty)},
          {"predicted_e2e_p95_s", Number(d.predicted_e2e_p95_s)}};
}

json ChildJson(const ChildStatus& c) {
  json j = {{"name", c.name},
            {"state", ChildStateName(c.state)},
            {"healthy", c.healthy},
            {"url", c.url()},
            {"pid", c.pid},
            {"restarts", c.restarts},
            {"last_exit", c.last_exit},
            {"log", c.log_path},
            {"cold_start_s", c.cold_start_s >= 0 ? json(c.cold_start_s) : json(nullptr)}};
  if (auto v = c.labels.find("version"); v != c.labels.end()) j["version"] = v->second;
  return j;
}

// A family's HELP and TYPE lines.
std::string Header(std::string_view name, std::string_view type, std::string_view help) {
  return fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

StatusReport::StatusReport(const Context& ctx, const State& state, const Supervisor& sup,
                           const ControlLoop* loop)
    : ctx_(ctx), state_(state), loop_(loop), children_(ChildrenByName(sup)) {}

json StatusReport::ReplicasJson(const PoolSpec& p, const PoolRun& run, int* serving) const {
  json reps = json::array();
  for (const auto& [name, r] : state_.replicas) {
    auto it = children_.find(name);
    if (r.pool != p.name || it == children_.end()) continue;
    json j = ChildJson(it->second);
    if (r.leaving) j["state"] = "draining";
    const bool canary_set = run.InCanarySet(r.version);
    if (canary_set) j["canary"] = true;  // the new set of a canary rollout
    *serving += it->second.state == ChildState::kReady && !r.leaving && !canary_set;
    reps.push_back(std::move(j));
  }
  return reps;
}

json StatusReport::PoolJson(const PoolSpec& p,
                            const std::map<std::string, ScaleDecision>& latest) const {
  const PoolRun& run = state_.pools.at(p.name);
  int serving = 0;
  const json reps = ReplicasJson(p, run, &serving);
  const json attainment = Attainment(p.slo, run.figures);
  json pj = {{"name", p.name},
             {"model", p.model},
             {"version", run.version},
             {"min", p.replicas.min},
             {"max", p.replicas.max},
             {"desired", run.desired},
             {"ready", serving},
             {"replicas", reps},
             {"measured", FiguresJson(run.figures)},
             {"slo_met", SloMet(attainment)},
             {"slo", attainment},
             {"rollout", run.canary ? run.canary->Summary() : run.rollout},
             {"rollout_state", run.canary ? run.canary->ToJson(std::chrono::steady_clock::now())
                                          : run.last_rollout}};
  // The autoscaler's latest decision for the pool (a hold too), else the last one applied.
  const auto it = latest.find(p.name);
  const ScaleDecision* d = it != latest.end() ? &it->second
                           : run.decision     ? &*run.decision
                                              : nullptr;
  if (d) pj["decision"] = DecisionJson(*d);
  return pj;
}

json StatusReport::ColdStartsJson() const {
  json colds = json::array();
  for (const ColdStart& c : state_.cold_starts)
    colds.push_back({{"pool", c.pool},
                     {"replica", c.replica},
                     {"seconds", c.seconds},
                     {"from_zero_s", c.from_zero_s >= 0 ? json(c.from_zero_s) : json(nullptr)}});
  return colds;
}

json StatusReport::Json() const {
  const std::map<std::string, ScaleDecision> latest =
      loop_ ? loop_->LastDecisions() : std::map<std::string, ScaleDecision>{};
  MutexLock lock(&state_.mu);
  json pools = json::array();
  for (const PoolSpec& p : state_.spec.pools) pools.push_back(PoolJson(p, latest));
  json out = {{"name", state_.spec.name}, {"pools", pools}, {"cold_starts", ColdStartsJson()}};
  for (std::string_view n : {kGateway, kPrometheus}) {
    auto it = children_.find(std::string(n));
    if (it != children_.end()) out[std::string(n)] = ChildJson(it->second);
  }
  out["status_url"] = ctx_.StatusUrl();
  if (loop_) out["autoscaler"] = json::parse(loop_->StatusJson(), nullptr, false);
  return out;
}

std::string StatusReport::ColdStartMetrics() const {
  std::map<std::string, double> last, zero;
  std::map<std::string, int> starts;
  for (const ColdStart& c : state_.cold_starts) {
    last[c.pool] = c.seconds;
    if (c.from_zero_s >= 0) zero[c.pool] = c.from_zero_s;
    ++starts[c.pool];
  }
  std::string out = Header("strata_control_cold_start_seconds", "gauge",
                           "Replica start (fork) to its first /ready 200, the latest per pool.");
  for (const auto& [pool, s] : last)
    out += fmt::format("strata_control_cold_start_seconds{{pool=\"{}\"}} {}\n", pool, s);
  out += Header("strata_control_scale_from_zero_seconds", "gauge",
                "A held request's pool at 0 (activation) to its first replica ready, the latest "
                "per pool.");
  for (const auto& [pool, s] : zero)
    out += fmt::format("strata_control_scale_from_zero_seconds{{pool=\"{}\"}} {}\n", pool, s);
  out += Header("strata_control_cold_starts_total", "counter",
                "Replicas that became ready, per pool.");
  for (const PoolSpec& p : state_.spec.pools)
    out +=
        fmt::format("strata_control_cold_starts_total{{pool=\"{}\"}} {}\n", p.name, starts[p.name]);
  return out;
}

std::string StatusReport::ReplicaMetrics() const {
  std::string out = Header("strata_control_replicas", "gauge", "Replicas per pool by state.") +
                    Header("strata_control_replica_restarts_total", "counter",
                           "Restarts of replicas now running.");
  for (const PoolSpec& p : state_.spec.pools) {
    std::map<std::string, int> by_state = {{"ready", 0}, {"starting", 0}};
    int restarts = 0;
    for (const auto& [name, r] : state_.replicas) {
      auto it = children_.find(name);
      if (r.pool != p.name || it == children_.end()) continue;
      ++by_state[r.leaving ? "draining" : std::string(ChildStateName(it->second.state))];
      restarts += it->second.restarts;
    }
    for (const auto& [state, n] : by_state)
      out +=
          fmt::format("strata_control_replicas{{pool=\"{}\",state=\"{}\"}} {}\n", p.name, state, n);
    out +=
        fmt::format("strata_control_replica_restarts_total{{pool=\"{}\"}} {}\n", p.name, restarts);
  }
  return out;
}

std::string StatusReport::MetricsText() const {
  std::string out;
  {
    MutexLock lock(&state_.mu);
    out = ColdStartMetrics() + ReplicaMetrics();
  }
  if (loop_) out += loop_->MetricsText();  // strata_control_desired_replicas, penalty, ...
  return out;
}

}  // namespace strata::control::up

// ---- `strata status`: the text of that JSON ----

namespace strata::control {
namespace {

using nlohmann::json;

std::string Ms(const json& seconds) {
  return seconds.is_number() ? fmt::format("{:.1f} ms", seconds.get<double>() * 1e3) : "-";
}

std::string Str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number() || it->is_boolean()) return it->dump();
  return "";
}

std::string Objectives(const json& slo) {
  std::string out;
  if (!slo.is_object()) return out;
  for (const auto& [name, o] : slo.items()) {
    if (!o.is_object()) continue;
    const auto m = o.find("measured"), t = o.find("target"), met = o.find("met");
    const std::string measured =
        m != o.end() && m->is_number() ? fmt::format("{:.4g}", m->get<double>()) : "no data";
    const std::string target =
        t != o.end() && t->is_number() ? fmt::format("{:.4g}", t->get<double>()) : "?";
    const std::string verdict =
        met != o.end() && met->is_boolean() ? (met->get<bool>() ? "met" : "BREACHED") : "-";
    out += fmt::format("  {} {} <= {} {}", name, measured, target, verdict);
  }
  return out;
}

// "  rollout: canary v1 -> v2 canary, step 2/3, canary 50 % (progressing); last decision step:
// within bounds" — or "  last rollout: ..." once it ended (with the reason).
std::string RolloutLine(const json& r) {
  const std::string phase = Str(r, "phase");
  const bool ended = phase == "promoted" || phase == "rolled_back" || phase == "failed";
  std::string out = fmt::format("  {}: {} {} -> {} {}", ended ? "last rollout" : "rollout",
                                Str(r, "strategy"), Str(r, "from"), Str(r, "to"), phase);
  const auto steps = r.find("steps"), weight = r.find("weight");
  if (!ended && steps != r.end() && steps->is_array() && weight != r.end() && weight->is_number())
    out += fmt::format(", step {}/{}, canary {:g} % ({})", Str(r, "step"), steps->size(),
                       weight->get<double>(), Str(r, "state"));
  const auto d = r.find("last_decision");
  if (d != r.end() && d->is_object() && !Str(*d, "decision").empty())
    out += fmt::format("; last decision {}: {}", Str(*d, "decision"), Str(*d, "reason"));
  if (ended && !Str(r, "reason").empty()) out += " (" + Str(r, "reason") + ")";
  return out + "\n";
}

}  // namespace

std::string FormatStatus(const nlohmann::json& s) {
  if (!s.is_object()) return "status: not a JSON object\n";
  std::string out = fmt::format("deployment {}  status {}\n", Str(s, "name"), Str(s, "status_url"));
  for (const char* role : {"gateway", "prometheus"}) {
    auto it = s.find(role);
    if (it != s.end() && it->is_object())
      out += fmt::format("{:<10} {:<9} {}\n", role, Str(*it, "state"), Str(*it, "url"));
  }
  auto pools = s.find("pools");
  if (pools == s.end() || !pools->is_array()) return out;
  for (const json& p : *pools) {
    if (!p.is_object()) continue;
    const auto met = p.find("slo_met");
    const std::string slo = met != p.end() && met->is_boolean()
                                ? (met->get<bool>() ? "SLO met" : "SLO BREACHED")
                                : "SLO no data";
    out += fmt::format("pool {} ({}@{}): {}/{} ready, replicas {}..{}, {}{}\n", Str(p, "name"),
                       Str(p, "model"), Str(p, "version"), Str(p, "ready"), Str(p, "desired"),
                       Str(p, "min"), Str(p, "max"), slo,
                       Str(p, "rollout").empty() ? "" : ", rollout " + Str(p, "rollout"));
    const auto ro = p.find("rollout_state");
    if (ro != p.end() && ro->is_object()) out += RolloutLine(*ro);
    const auto slo_it = p.find("slo");
    if (slo_it != p.end()) out += "  slo:" + Objectives(*slo_it) + "\n";
    const auto d = p.find("decision");
    if (d != p.end() && d->is_object())
      out += fmt::format("  autoscaler: desired {} ({})\n", Str(*d, "desired"), Str(*d, "reason"));
    const auto reps = p.find("replicas");
    if (reps == p.end() || !reps->is_array()) continue;
    for (const json& r : *reps) {
      if (!r.is_object()) continue;
      const auto healthy = r.find("healthy");
      const bool h = healthy != r.end() && healthy->is_boolean() && healthy->get<bool>();
      const auto cold = r.find("cold_start_s");
      out += fmt::format(
          "  {:<16} {:<4} {:<9} {:<9} {:<24} restarts {} cold start {}{}\n", Str(r, "name"),
          Str(r, "version"), Str(r, "state"), h ? "healthy" : "unhealthy", Str(r, "url"),
          Str(r, "restarts"), cold != r.end() ? Ms(*cold) : "-",
          Str(r, "last_exit").empty()
              ? ""
              : "  last exit: " + Str(r, "last_exit") + " (log " + Str(r, "log") + ")");
    }
  }
  return out;
}

}  // namespace strata::control
