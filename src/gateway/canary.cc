// Canary analysis: windows per arm, guards, steps and the decision log (see canary.h).
#include "gateway/canary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/enum_names.h"

namespace strata::gateway {
namespace {

double Since(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool IsError(int status) { return status >= 500; }
bool Counts(int status) { return status >= 200 && (status < 400 || IsError(status)); }

ArmFigures Figures(const std::deque<CanaryOutcome>& w) {
  ArmFigures f;
  std::vector<double> ttft, tpot;
  double lp_sum = 0;
  int64_t lp_n = 0;
  for (const CanaryOutcome& o : w) {
    ++f.requests;
    if (IsError(o.status)) {
      ++f.errors;
      continue;  // a failure's latency says nothing about the model's speed
    }
    if (o.ttft_s >= 0) ttft.push_back(o.ttft_s);
    if (o.tpot_s >= 0) tpot.push_back(o.tpot_s);
    if (o.mean_logprob) lp_sum += *o.mean_logprob, ++lp_n;
  }
  f.error_rate = f.requests > 0 ? static_cast<double>(f.errors) / f.requests : 0;
  f.ttft_p95_s = Percentile(std::move(ttft), 95);
  f.tpot_p95_s = Percentile(std::move(tpot), 95);
  if (lp_n > 0) f.mean_logprob = lp_sum / lp_n;
  return f;
}

// The guard that the canary breaches, or "" when within bounds. A guard whose figure is missing
// on either arm (e.g. no logprobs, no multi-token answers) is not judged.
std::string Breach(const CanaryGuards& g, const ArmFigures& b, const ArmFigures& c) {
  auto ratio = [&g](const std::optional<double>& cv, const std::optional<double>& bv, double max,
                    std::string_view name) -> std::string {
    if (!cv || !bv || *cv <= max * *bv || *cv - *bv <= g.latency_min_delta_s) return "";
    return fmt::format("{} {:.4g}s > {} x baseline {:.4g}s", name, *cv, max, *bv);
  };
  if (auto r = ratio(c.ttft_p95_s, b.ttft_p95_s, g.ttft_p95_max_ratio, "ttft_p95"); !r.empty())
    return r;
  if (auto r = ratio(c.tpot_p95_s, b.tpot_p95_s, g.tpot_p95_max_ratio, "tpot_p95"); !r.empty())
    return r;
  if (c.error_rate - b.error_rate > g.error_rate_max_delta)
    return fmt::format("error_rate {:.4g} > baseline {:.4g} + {}", c.error_rate, b.error_rate,
                       g.error_rate_max_delta);
  if (g.mean_logprob_min_delta && c.mean_logprob && b.mean_logprob &&
      *c.mean_logprob - *b.mean_logprob < *g.mean_logprob_min_delta)
    return fmt::format("mean_logprob {:.4g} < baseline {:.4g} + ({})", *c.mean_logprob,
                       *b.mean_logprob, *g.mean_logprob_min_delta);
  return "";
}

bool SameCanary(const RouteConfig& a, const RouteConfig& b) {
  if (a.arms.size() != b.arms.size() || !a.canary || !b.canary) return false;
  for (size_t i = 0; i < a.arms.size(); ++i)
    if (a.arms[i].pool != b.arms[i].pool) return false;
  const CanaryConfig &x = *a.canary, &y = *b.canary;
  return x.baseline == y.baseline && x.canary == y.canary && x.steps == y.steps &&
         x.min_requests == y.min_requests && x.min_duration == y.min_duration &&
         x.interval == y.interval && x.guards.ttft_p95_max_ratio == y.guards.ttft_p95_max_ratio &&
         x.guards.tpot_p95_max_ratio == y.guards.tpot_p95_max_ratio &&
         x.guards.error_rate_max_delta == y.guards.error_rate_max_delta &&
         x.guards.latency_min_delta_s == y.guards.latency_min_delta_s &&
         x.guards.mean_logprob_min_delta == y.guards.mean_logprob_min_delta;
}

void Push(std::deque<CanaryOutcome>* w, const CanaryOutcome& o) {
  w->push_back(o);
  if (w->size() > kMaxWindow) w->pop_front();
}

}  // namespace

std::string_view CanaryStateName(CanaryState s) {
  static constexpr auto kNames =
      EnumNames<CanaryState::kRolledBack>("progressing", "paused", "promoted", "rolled_back");
  return EnumName(kNames, s);
}

std::optional<double> Percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(v.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(v.size()))) - 1;
  return v[i];
}

void CanaryController::Reconfigure(const GatewayConfig& cfg, Clock::time_point now) {
  MutexLock lock(&mu_);
  std::map<std::string, Run, std::less<>> next;
  for (const RouteConfig& r : cfg.routes) {
    if (!r.canary) continue;
    auto old = runs_.find(r.name);
    if (old != runs_.end() && SameCanary(old->second.route, r)) {
      Run kept = std::move(old->second);
      kept.route = r;
      // The weights table kept them too (same arms) unless the config's weights changed.
      Apply(kept, kept.state, kept.step, kept.weight, now);
      next.emplace(r.name, std::move(kept));
      continue;
    }
    Run run;
    run.route = r;
    run.step_start = run.last_analysis = now;
    Apply(run, CanaryState::kProgressing, 0, r.canary->steps.front(), now);
    next.emplace(r.name, std::move(run));
  }
  runs_ = std::move(next);
}

bool CanaryController::Has(std::string_view route) const {
  MutexLock lock(&mu_);
  return runs_.contains(route);
}

void CanaryController::Observe(std::string_view route, std::string_view pool,
                               const CanaryOutcome& o) {
  if (!Counts(o.status)) return;
  MutexLock lock(&mu_);
  auto it = runs_.find(route);
  if (it == runs_.end()) return;
  Run& run = it->second;
  if (pool == run.route.canary->baseline) Push(&run.baseline, o);
  if (pool == run.route.canary->canary) Push(&run.canary, o);
}

void CanaryController::Apply(Run& run, CanaryState state, size_t step, double weight,
                             Clock::time_point now) {
  if (step != run.step || weight != run.weight) {  // a new step: judged on its own traffic
    run.baseline.clear();
    run.canary.clear();
    run.step_start = now;
  }
  run.state = state;
  run.step = step;
  run.weight = weight;
  std::vector<double> w;
  for (const ArmConfig& a : run.route.arms)
    w.push_back(a.pool == run.route.canary->canary ? weight : 100 - weight);
  (void)weights_->SetByIndex(run.route.name, std::move(w));
}

CanaryDecision CanaryController::Decide(Run& run, std::string decision, std::string reason,
                                        Clock::time_point now) {
  CanaryDecision d;
  d.route = run.route.name;
  d.decision = std::move(decision);
  d.reason = std::move(reason);
  d.baseline = Figures(run.baseline);
  d.canary = Figures(run.canary);
  d.at_s = Since(t0_, now);
  return d;
}

std::optional<CanaryDecision> CanaryController::Analyse(Run& run, Clock::time_point now) {
  const CanaryConfig& c = *run.route.canary;
  if (run.state != CanaryState::kProgressing) return std::nullopt;
  if (static_cast<int64_t>(run.baseline.size()) < c.min_requests ||
      static_cast<int64_t>(run.canary.size()) < c.min_requests)
    return std::nullopt;
  CanaryDecision d = Decide(run, "", "", now);
  d.reason = Breach(c.guards, d.baseline, d.canary);
  if (!d.reason.empty()) {
    d.decision = "rollback";
    Apply(run, CanaryState::kRolledBack, run.step, 0, now);
  } else if (now - run.step_start >= c.min_duration) {
    d.reason = "within bounds";
    // A step of 100 % leaves the baseline no traffic to compare with: reaching it is promotion.
    if (run.step + 1 < c.steps.size() && c.steps[run.step + 1] < 100) {
      d.decision = "step";
      Apply(run, CanaryState::kProgressing, run.step + 1, c.steps[run.step + 1], now);
    } else {
      d.decision = "promote";
      Apply(run, CanaryState::kPromoted, run.step, 100, now);
    }
  } else {
    return std::nullopt;  // within bounds, the step is not over yet
  }
  d.step = run.step;
  d.weight = run.weight;
  return d;
}

std::vector<CanaryDecision> CanaryController::Tick(Clock::time_point now) {
  MutexLock lock(&mu_);
  std::vector<CanaryDecision> out;
  for (auto& [name, run] : runs_) {
    if (now - run.last_analysis < run.route.canary->interval) continue;
    run.last_analysis = now;
    if (auto d = Analyse(run, now)) {
      run.decisions.push_back(*d);
      if (run.decisions.size() > kMaxDecisions) run.decisions.pop_front();
      out.push_back(std::move(*d));
    }
  }
  return out;
}

Result<CanaryDecision> CanaryController::Act(std::string_view route, Action a,
                                             Clock::time_point now) {
  MutexLock lock(&mu_);
  auto it = runs_.find(route);
  if (it == runs_.end()) return Status::NotFound("no canary on route '" + std::string(route) + "'");
  Run& run = it->second;
  const std::string state(CanaryStateName(run.state));
  auto refuse = [&](std::string_view what) {
    return Status::InvalidArgument(fmt::format("cannot {} a canary that is {}", what, state));
  };
  CanaryDecision d = Decide(run, "", "operator", now);
  switch (a) {
    case Action::kPause:
      if (run.state != CanaryState::kProgressing) return refuse("pause");
      d.decision = "pause";
      Apply(run, CanaryState::kPaused, run.step, run.weight, now);
      break;
    case Action::kResume:
      if (run.state == CanaryState::kPaused) {
        Apply(run, CanaryState::kProgressing, run.step, run.weight, now);
      } else if (run.state == CanaryState::kRolledBack) {  // a new attempt from step 1
        Apply(run, CanaryState::kProgressing, 0, run.route.canary->steps.front(), now);
      } else {
        return refuse("resume");
      }
      d.decision = "resume";
      run.last_analysis = now;
      break;
    case Action::kRollback:
      if (run.state == CanaryState::kRolledBack) return refuse("roll back");
      d.decision = "manual_rollback";
      Apply(run, CanaryState::kRolledBack, run.step, 0, now);
      break;
    case Action::kPromote:
      if (run.state == CanaryState::kPromoted) return refuse("promote");
      d.decision = "manual_promote";
      Apply(run, CanaryState::kPromoted, run.route.canary->steps.size() - 1, 100, now);
      break;
  }
  d.step = run.step;
  d.weight = run.weight;
  run.decisions.push_back(d);
  if (run.decisions.size() > kMaxDecisions) run.decisions.pop_front();
  return d;
}

std::vector<CanaryView> CanaryController::List(Clock::time_point now) const {
  MutexLock lock(&mu_);
  std::vector<CanaryView> out;
  for (const auto& [name, run] : runs_) {
    CanaryView v;
    v.route = name;
    v.baseline = run.route.canary->baseline;
    v.canary = run.route.canary->canary;
    v.state = run.state;
    v.step = run.step;
    v.steps = run.route.canary->steps;
    v.weight = run.weight;
    v.step_age_s = Since(run.step_start, now);
    v.baseline_now = Figures(run.baseline);
    v.canary_now = Figures(run.canary);
    v.decisions.assign(run.decisions.begin(), run.decisions.end());
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace strata::gateway
