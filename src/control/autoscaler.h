// control/autoscaler: the SLO-driven replica count of each pool. Each interval the caller feeds
// what Prometheus says about a pool (PoolObservation, from control/queries via control/loop);
// Decide() returns the replica count the pool should run now.
//
// Policy, in order (the first rule that applies decides; `reason` says which):
//  1. disabled: autoscaling.enabled false keeps the current count (clamped to [min, max]).
//  2. bounds: a count below replicas.min or above replicas.max goes to the bound at once.
//  3. from zero: at 0 replicas, demand (held requests at the gateway, or any arrivals) gives 1;
//     no demand stays at 0.
//  4. not reporting (AIBrix #2670): while fewer replicas report metrics than run, no decision
//     (the count is kept), for at most kMaxReportWaitIntervals intervals; after that the pool is
//     judged from the replicas that do report.
//  5. to zero: a pool with min 0, no demand for `scale_to_zero_idle` and no change for as long,
//     goes to 0. The idle clock restarts with any demand and with every change, so a pool woken
//     by a held request cannot fall back to 0 before a full idle period (no 0 <-> 1 flapping).
//  6. SLO: the queueing model (control/queueing, the pool's ReplicaProfile calibrated online from
//     the measured mean latency and batch) predicts each count n in [max(min, 1), max]; its
//     penalty (latencies in ms, only the objectives set in the pool's SloSpec)
//       sum max(0, p95 - slo)^2 + error_weight * max(0, err - slo_err)
//     must be zero. Arrivals = the measured rate, and on a saturated pool (engine waiting >=
//     max_batch per replica: it serves its capacity) at least current * capacity + the backlog's
//     growth per second since the last decision (the 1-minute rate lags a jump); demand = arrivals
//     + (engine waiting + gateway held) / interval. up = the largest of: the smallest
//     zero-penalty n at the arrivals; that n at the arrivals + their rise since the last decision
//     (a burst still rising met by one step); the n whose full capacity serves the arrivals and
//     drains the backlog within kDrainIntervals — the last two at most ceil(arrivals / capacity)
//     + 1. down = the smallest zero-penalty n at the demand against the SLO tightened by
//     `hysteresis` and with max_utilisation tightened by hysteresis / 2. Recommendation: up when
//     up > current, else min(current, down); a saturated pool whose backlog grows gets >=
//     current + 1. Scale up is immediate, at most to max(current + 1, ceil(current *
//     scale_up_max_factor)); within a window of a scale-up a second one only when the first fell
//     short (the backlog still grows, or the SLO is predicted missed at the count while the
//     arrivals overload it, a backlog or a measured p95 over an objective shows it). Scale down
//     happens only when (a) every recommendation of the last `scale_down_stabilization` is below
//     the current count (as in HPA), then to the highest recommendation of the last
//     kScaleDownLookbackIntervals intervals, and (b) the last change (up or down), or the
//     autoscaler's first sight of the pool, is at least one stabilisation window old. So a pool
//     changes at most once per window unless a scale-up fell short, and never reverses within one.
//     Calibration (Calibrate, weight kCalibrationWeight) only on a settled pool (no backlog and no
//     change for 6 intervals), a steady rate (kSteadyRate), a mean batch >= kMinCalibrationBatch,
//     the mean within 3x of the prediction, and with several replicas only from a point slower
//     than the profile (least-loaded routing makes a pool look faster at the same mean batch
//     without adding capacity).
//
// Units: rates per second, latencies in seconds (penalties in ms^2 as the reference writes them).
// Ownership: an Autoscaler owns per-pool state (profiles, recommendation windows, clocks). Pure:
// no I/O, no clock — the caller passes `now`, so simulations run on a fake clock.
// Thread contract: not thread-safe; one owner thread (the control loop) calls it.
#pragma once

#include <chrono>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "control/queueing.h"
#include "control/spec.h"

namespace strata::control {

using Clock = std::chrono::steady_clock;

inline constexpr int kMaxReportWaitIntervals = 8;
inline constexpr int kScaleDownLookbackIntervals = 4;
inline constexpr int kDrainIntervals = 2;          // a scale-up drains the backlog within this many
inline constexpr double kSteadyRate = 0.05;        // calibrate only while the rate moves less
inline constexpr double kCalibrationWeight = 0.5;  // each point's weight in the smoothed fit
inline constexpr double kMinCalibrationBatch = 1;  // mean requests running to calibrate on
inline constexpr double kNoData = std::numeric_limits<double>::quiet_NaN();

// One pool's figures over the last window (rates per second; latencies in seconds).
struct PoolObservation {
  int current_replicas = 0;    // replicas running now (ready or starting)
  int reporting_replicas = 0;  // replicas whose metrics Prometheus has (scraped: up == 1)
  double arrival_rate = 0;     // requests/s into the pool
  double error_rate = 0;       // failed / all, [0, 1]
  // Measured p95s now (kNoData when Prometheus has none): reported in decisions.
  double ttft_p95_s = kNoData, tpot_p95_s = kNoData, e2e_p95_s = kNoData;
  // Measured capacity point for calibration: mean e2e time and mean requests running per
  // replica, with nothing waiting (0 = unknown: the profile is kept).
  double mean_e2e_s = 0;
  double mean_running = 0;
  double waiting = 0;     // requests waiting in the replicas' engine queues (sum)
  int held_requests = 0;  // requests the gateway holds for a pool with no ready replica
};

struct ScaleDecision {
  int current = 0;
  int desired = 0;
  double predicted_penalty = 0;  // of `desired` (0 when desired is 0 and nothing arrives)
  double predicted_e2e_p95_s = 0;
  std::string rule;      // "disabled" "bounds" "from_zero" "not_reporting" "to_zero" "slo"
  std::string reason;    // "slo: predicted e2e p95 412 ms > 300 ms at 2 -> 4", "stabilizing ..."
  bool changed = false;  // desired != current
};

class Autoscaler {
 public:
  // `profile`: the replica profile every pool starts from (SetProfile overrides per pool).
  explicit Autoscaler(AutoscalingSpec policy, ReplicaProfile profile = {});

  ScaleDecision Decide(const PoolSpec& pool, const PoolObservation& obs, Clock::time_point now);

  void SetProfile(const std::string& pool, const ReplicaProfile& profile);
  // The pool's current (calibrated) profile; the default one for a pool not seen yet.
  ReplicaProfile Profile(const std::string& pool) const;
  const AutoscalingSpec& policy() const { return policy_; }

  // The penalty of a prediction against `slo` with every latency objective scaled by
  // `slo_scale` (1 = the SLO itself; 1 - hysteresis for scale-down).
  static double Penalty(const SloSpec& slo, const Prediction& p, double error_weight,
                        double slo_scale = 1);

 private:
  struct PoolState {
    ReplicaProfile profile;
    std::deque<std::pair<Clock::time_point, int>> recommendations;  // within the window
    Clock::time_point last_change;                                  // or the first Decide
    bool last_up = false;                                           // that change was up
    std::optional<Clock::time_point> idle_since;
    std::optional<Clock::time_point> unreported_since;
    std::optional<Clock::time_point> last_decide;  // of rule 6 (for the backlog's growth)
    double last_waiting = 0;
    std::optional<double> last_arrivals;            // of rule 6's last decision (the rate's trend)
    std::optional<double> last_rate;                // its measured arrival rate (calibration)
    std::optional<Clock::time_point> last_backlog;  // last time anything waited
  };
  PoolState& State(const std::string& pool, Clock::time_point now);
  // Rule 6 on a pool that reports: calibrate, recommend, then settle the recommendation.
  ScaleDecision DecideSlo(const PoolSpec& pool, const PoolObservation& obs, PoolState& s,
                          Clock::time_point now) const;
  // Refits the profile's speed on a quiet, settled pool (its mean e2e is then service time).
  void MaybeCalibrate(const PoolObservation& obs, PoolState& s, Clock::time_point now) const;
  // What rule 6 would run now, before the stabilisation windows.
  struct Recommendation {
    int count = 0;
    bool saturated = false;  // a full batch waits per replica
    double growth = 0;       // of the backlog, requests/s
    std::string state;       // "R req/s, predicted e2e p95 .. at N, measured .."
  };
  Recommendation Recommend(const PoolSpec& pool, const PoolObservation& obs, PoolState& s,
                           Clock::time_point now) const;
  // The recommendation through the up- and down-stabilisation windows and the step cap.
  ScaleDecision Settle(const PoolSpec& pool, const PoolObservation& obs, PoolState& s,
                       Clock::time_point now, const Recommendation& recommended) const;
  // The smallest count in [lo, hi] with zero penalty at `slo_scale`; hi when none.
  int Smallest(const PoolSpec& pool, const ReplicaProfile& prof, double rate, int lo, int hi,
               double slo_scale) const;
  // The smallest count in [lo, hi] whose full capacity serves `arrivals` and drains `backlog`
  // within kDrainIntervals intervals; lo without a backlog.
  int Draining(const ReplicaProfile& prof, double arrivals, double backlog, int lo, int hi) const;

  AutoscalingSpec policy_;
  ReplicaProfile default_profile_;
  std::map<std::string, PoolState> pools_;
};

}  // namespace strata::control
