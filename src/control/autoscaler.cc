#include "control/autoscaler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace strata::control {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// max(0, measured - objective)^2 in ms^2; an objective of 0 is not set.
double Excess(double p95_s, double slo_ms, double scale) {
  if (slo_ms <= 0) return 0;
  if (std::isinf(p95_s)) return kInf;
  const double over = p95_s * 1000 - slo_ms * scale;
  return over > 0 ? over * over : 0;
}

std::string Ms(double s) {
  return std::isfinite(s) ? fmt::format("{:.0f} ms", s * 1000) : std::string("overload");
}

// A latency objective measured above its target (no data: not a breach).
bool MeasuredBreach(const SloSpec& slo, const PoolObservation& o) {
  const auto over = [](double p95_s, double slo_ms) {
    return slo_ms > 0 && std::isfinite(p95_s) && p95_s * 1000 > slo_ms;
  };
  return over(o.e2e_p95_s, slo.e2e_p95_ms) || over(o.ttft_p95_s, slo.ttft_p95_ms) ||
         over(o.tpot_p95_s, slo.tpot_p95_ms);
}

ScaleDecision Keep(int current, std::string rule, std::string reason) {
  ScaleDecision d;
  d.current = d.desired = current;
  d.rule = std::move(rule);
  d.reason = std::move(reason);
  return d;
}

}  // namespace

Autoscaler::Autoscaler(AutoscalingSpec policy, ReplicaProfile profile)
    : policy_(policy), default_profile_(profile) {}

void Autoscaler::SetProfile(const std::string& pool, const ReplicaProfile& profile) {
  pools_[pool].profile = profile;
}

ReplicaProfile Autoscaler::Profile(const std::string& pool) const {
  auto it = pools_.find(pool);
  return it == pools_.end() ? default_profile_ : it->second.profile;
}

double Autoscaler::Penalty(const SloSpec& slo, const Prediction& p, double error_weight,
                           double slo_scale) {
  const double err_over = slo.error_rate > 0 ? std::max(0.0, p.error_rate - slo.error_rate) : 0;
  return Excess(p.e2e_p95_s, slo.e2e_p95_ms, slo_scale) +
         Excess(p.ttft_p95_s, slo.ttft_p95_ms, slo_scale) +
         Excess(p.tpot_p95_s, slo.tpot_p95_ms, slo_scale) + error_weight * err_over;
}

Autoscaler::PoolState& Autoscaler::State(const std::string& pool, Clock::time_point now) {
  auto [it, inserted] = pools_.try_emplace(pool);
  PoolState& s = it->second;
  if (inserted) s.profile = default_profile_;
  if (s.last_change == Clock::time_point{}) s.last_change = now;
  return s;
}

int Autoscaler::Smallest(const PoolSpec& pool, const ReplicaProfile& prof, double rate, int lo,
                         int hi, double slo_scale) const {
  for (int n = lo; n <= hi; ++n)
    if (Penalty(pool.slo, Predict(prof, n, rate), policy_.error_weight, slo_scale) == 0) return n;
  return hi;
}

int Autoscaler::Draining(const ReplicaProfile& prof, double arrivals, double backlog, int lo,
                         int hi) const {
  if (!(backlog > 0)) return lo;
  const double drain_s = kDrainIntervals * std::max(1.0, Seconds(policy_.interval));
  const double need = arrivals + backlog / drain_s;
  return std::clamp(static_cast<int>(std::ceil(need / prof.Capacity())), lo, hi);
}

ScaleDecision Autoscaler::Decide(const PoolSpec& pool, const PoolObservation& obs,
                                 Clock::time_point now) {
  PoolState& s = State(pool.name, now);
  const int cur = obs.current_replicas;
  const int lo = pool.replicas.min, hi = pool.replicas.max;
  const bool demand = obs.arrival_rate > 0 || obs.held_requests > 0;
  if (demand) {
    s.idle_since.reset();
  } else if (!s.idle_since) {
    s.idle_since = now;
  }
  ScaleDecision d;
  if (!policy_.enabled) {
    d = Keep(std::clamp(cur, lo, hi), "disabled", "autoscaling disabled");
  } else if (cur < lo || cur > hi) {
    d = Keep(std::clamp(cur, lo, hi), "bounds",
             fmt::format("{} outside [{}, {}] -> {}", cur, lo, hi, std::clamp(cur, lo, hi)));
  } else if (cur == 0) {
    d = demand ? Keep(1, "from_zero",
                      fmt::format("demand at 0 replicas ({} held, {:.2f} req/s) -> 1",
                                  obs.held_requests, obs.arrival_rate))
               : Keep(0, "from_zero", "idle at 0");
  } else if (obs.reporting_replicas < cur &&
             (!s.unreported_since ||
              now - *s.unreported_since < policy_.interval * kMaxReportWaitIntervals)) {
    if (!s.unreported_since) s.unreported_since = now;
    d = Keep(cur, "not_reporting",
             fmt::format("waiting: {} of {} replicas report metrics", obs.reporting_replicas, cur));
  } else {
    if (obs.reporting_replicas >= cur) s.unreported_since.reset();
    const auto idle_for = s.idle_since ? now - *s.idle_since : Clock::duration::zero();
    if (lo == 0 && s.idle_since && idle_for >= policy_.scale_to_zero_idle &&
        now - s.last_change >= policy_.scale_to_zero_idle) {
      d = Keep(0, "to_zero", fmt::format("idle for {:.0f} s -> 0", Seconds(idle_for)));
    } else {
      d = DecideSlo(pool, obs, s, now);
    }
  }
  d.current = cur;
  d.changed = d.desired != cur;
  if (d.changed) {
    s.last_up = d.desired > cur;
    s.last_change = now;
    s.recommendations.clear();
  }
  if (d.desired > 0) {
    const Prediction p = Predict(s.profile, d.desired, obs.arrival_rate);
    d.predicted_penalty = Penalty(pool.slo, p, policy_.error_weight);
    d.predicted_e2e_p95_s = p.e2e_p95_s;
  } else {
    d.predicted_penalty = demand ? kInf : 0;
    d.predicted_e2e_p95_s = 0;
  }
  return d;
}

void Autoscaler::MaybeCalibrate(const PoolObservation& obs, PoolState& s,
                                Clock::time_point now) const {
  const int cur = obs.current_replicas;
  // Calibrate on a quiet, settled pool only: the mean e2e then is service time, not waiting (a
  // window that saw a backlog, or straddles a change, would teach the model a wrong speed).
  const double settled = 6 * Seconds(policy_.interval);
  const double expected = s.profile.ServiceTime(obs.mean_running + 1);
  if (obs.waiting > 0) s.last_backlog = now;
  // Least-loaded routing makes a pool of several replicas look faster than one replica at the
  // same mean batch (an arrival joins the least busy one), which does not raise its capacity
  // (a full batch is a full batch): with several replicas only a point slower than the profile
  // (routing never makes it slower) is taken; one replica fits both ways.
  // The mean e2e spans the rate window while the batch is a gauge of now: only a steady rate
  // (within kSteadyRate of the last decision's) keeps the two about the same load, and only a
  // batch of kMinCalibrationBatch or more is measured well enough to fit.
  const bool fits = cur == 1 || obs.mean_e2e_s > expected;
  const bool steady_rate =
      s.last_rate && std::abs(obs.arrival_rate - *s.last_rate) <= kSteadyRate * obs.arrival_rate;
  s.last_rate = obs.arrival_rate;
  if (obs.waiting <= 0 && steady_rate && Seconds(now - s.last_change) >= settled &&
      (!s.last_backlog || Seconds(now - *s.last_backlog) >= settled) && obs.mean_e2e_s > 0 &&
      obs.mean_e2e_s < 3 * expected && obs.mean_e2e_s > expected / 3 &&
      obs.mean_running >= kMinCalibrationBatch && fits)
    Calibrate(&s.profile, obs.mean_running, obs.mean_e2e_s, kCalibrationWeight);
}

Autoscaler::Recommendation Autoscaler::Recommend(const PoolSpec& pool, const PoolObservation& obs,
                                                 PoolState& s, Clock::time_point now) const {
  const int cur = obs.current_replicas;
  // A growing backlog proves demand above what the replicas serve: served + growth.
  const double dt = s.last_decide ? Seconds(now - *s.last_decide) : 0;
  const double growth = dt > 0 ? (obs.waiting - s.last_waiting) / dt : 0;
  s.last_decide = now;
  s.last_waiting = obs.waiting;
  const int lo = std::max(1, pool.replicas.min), hi = pool.replicas.max;
  // Demand = arrivals + the backlog (engine queues, gateway holds) drained within one interval.
  // The measured rate (a 1-minute window) lags a jump; a saturated pool serves its capacity, so
  // its arrivals are at least capacity + the backlog's growth.
  const double interval_s = std::max(1.0, Seconds(policy_.interval));
  const bool saturated = obs.waiting >= static_cast<double>(s.profile.max_batch) * cur;
  double arrivals = obs.arrival_rate;
  if (saturated) arrivals = std::max(arrivals, cur * s.profile.Capacity() + growth);
  const double rate = arrivals + (obs.waiting + obs.held_requests) / interval_s;
  // Scale-up is one decisive step: the smallest count that meets the SLO at the arrivals and
  // whose capacity drains the backlog within kDrainIntervals on top of them.
  // A rising rate (the arrivals above the last decision's) is extrapolated one interval on, so
  // that a burst still rising is met by one step. The backlog and the trend each add at most one
  // replica beyond the count the arrivals fill at full capacity.
  const double backlog = obs.waiting + obs.held_requests;
  const double trend = s.last_arrivals ? std::max(0.0, arrivals - *s.last_arrivals) : 0;
  s.last_arrivals = arrivals;
  const int steady = Smallest(pool, s.profile, arrivals, lo, hi, 1);
  const int filled = static_cast<int>(std::ceil(arrivals / s.profile.Capacity()));
  const int ahead = std::max(Smallest(pool, s.profile, arrivals + trend, lo, hi, 1),
                             Draining(s.profile, arrivals, backlog, lo, hi));
  const int up = std::max(steady, std::min(ahead, std::clamp(filled + 1, lo, hi)));
  // Scale-down needs the smaller count inside the SLO tightened by the hysteresis, and its
  // utilisation inside the model's headroom tightened by half as much: near the knee latencies
  // change little until the queue explodes, so the latency margin alone lets a count go that is
  // needed again.
  ReplicaProfile tight = s.profile;
  tight.max_utilisation *= 1 - policy_.hysteresis / 2;
  const int down = Smallest(pool, tight, rate, lo, hi, 1 - policy_.hysteresis);
  const Prediction at_cur = Predict(s.profile, cur, rate);
  const std::string state =
      fmt::format("{:.2f} req/s, predicted e2e p95 {} at {}, measured {}", rate,
                  Ms(at_cur.e2e_p95_s), cur, std::isnan(obs.e2e_p95_s) ? "-" : Ms(obs.e2e_p95_s));
  int rec = up > cur ? up : std::min(cur, down);
  // Saturated (a full batch waiting per replica) and the backlog growing: the measured rate
  // understates the demand, so grow by at least one whatever the model says.
  if (saturated && growth > 0 && rec <= cur) rec = std::min(hi, cur + 1);
  return {rec, saturated, growth, state};
}

ScaleDecision Autoscaler::Settle(const PoolSpec& pool, const PoolObservation& obs, PoolState& s,
                                 Clock::time_point now, const Recommendation& recommended) const {
  const int cur = obs.current_replicas, rec = recommended.count;
  const bool saturated = recommended.saturated;
  const double growth = recommended.growth;
  const std::string& state = recommended.state;
  // The stabilisation window keeps every recommendation; scale-down takes the highest of them.
  const auto window = policy_.scale_down_stabilization;
  while (!s.recommendations.empty() && now - s.recommendations.front().first >= window)
    s.recommendations.pop_front();
  s.recommendations.emplace_back(now, rec);
  // Up-stabilisation: within a window of a scale-up, another one only when the first fell short
  // — the replicas it added report (rule 4) and the SLO is still predicted to be missed at the
  // count, or the backlog still grows. A scale-up sized as above rarely needs a second.
  if (rec > cur && s.last_up && now - s.last_change < window) {
    const Prediction at = Predict(s.profile, cur, obs.arrival_rate);
    const bool predicted = Penalty(pool.slo, at, policy_.error_weight) > 0;
    const bool short_fell =
        (saturated && growth > 0) ||
        (predicted && (at.utilisation >= 1 || obs.waiting > 0 || MeasuredBreach(pool.slo, obs)));
    if (!short_fell)
      return Keep(cur, "slo",
                  fmt::format("stabilizing up: {}, {} would do, last scale-up {:.0f} s ago", state,
                              rec, Seconds(now - s.last_change)));
  }
  if (rec > cur) {
    const int cap = std::max(
        cur + 1, static_cast<int>(std::ceil(cur * std::max(1.0, policy_.scale_up_max_factor))));
    const int to = std::min(rec, cap);
    return Keep(to, "slo",
                fmt::format("{}: {} -> {}{}", saturated ? "saturated" : "slo", state, to,
                            to < rec ? fmt::format(" (step cap, wants {})", rec) : ""));
  }
  if (rec == cur) return Keep(cur, "slo", fmt::format("slo: {}, keep {}", state, cur));
  int highest = rec;
  for (const auto& r : s.recommendations) highest = std::max(highest, r.second);
  if (highest >= cur)
    return Keep(cur, "slo",
                fmt::format("stabilizing: {}, {} would do, {} wanted within {} s", state, rec,
                            highest, window.count()));
  const auto since = now - s.last_change;
  if (since < window)
    return Keep(cur, "slo",
                fmt::format("stabilizing: {}, {} would do, last change {:.0f} s ago", state,
                            highest, Seconds(since)));
  // Every recommendation of the window is below the current count: go to the highest of the
  // last kScaleDownLookbackIntervals (the older ones saw load that is gone).
  int target = rec;
  for (const auto& r : s.recommendations)
    if (now - r.first < policy_.interval * kScaleDownLookbackIntervals)
      target = std::max(target, r.second);
  return Keep(target, "slo", fmt::format("slo: {} -> {}", state, target));
}

ScaleDecision Autoscaler::DecideSlo(const PoolSpec& pool, const PoolObservation& obs, PoolState& s,
                                    Clock::time_point now) const {
  MaybeCalibrate(obs, s, now);
  return Settle(pool, obs, s, now, Recommend(pool, obs, s, now));
}

}  // namespace strata::control
