// control/autoscaler: the SLO-driven replica count of each pool. Each interval the caller feeds
// what Prometheus says about a pool (PoolObservation, from control/queries); Decide() returns the
// smallest replica count in [min, max] whose *predicted* penalty
//   max(0, p95_ms - slo_ms)^2 + error_weight * max(0, err - slo_err)
// is zero, predicted by a queueing model (control/queueing) fed with the replicas' measured
// capacity; then applies the policy: at most x scale_up_max_factor per interval, scale-down only
// after `scale_down_stabilization` of lower recommendations (the highest recommendation of the
// window wins, as HPA's), hysteresis, no decision from replicas that have not reported yet, and
// scale to zero after `scale_to_zero_idle` without requests (back to 1 when the gateway holds one).
//
// Ownership: an Autoscaler owns per-pool state (recommendation windows). Pure: no I/O, no clock —
// the caller passes `now`, so simulations run on a fake clock.
// Thread contract: not thread-safe; one owner thread (the control loop) calls it.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "control/spec.h"

namespace strata::control {

using Clock = std::chrono::steady_clock;

// One pool's figures over the last window (all rates per second; latencies in seconds).
struct PoolObservation {
  int current_replicas = 0;    // replicas running now (ready or starting)
  int reporting_replicas = 0;  // replicas whose metrics Prometheus has (ready and scraped)
  double arrival_rate = 0;     // requests/s into the pool (gateway or replicas)
  double error_rate = 0;       // failed / all, [0, 1]
  double ttft_p95_s = 0, tpot_p95_s = 0, e2e_p95_s = 0;  // measured now (NaN = no data)
  // Measured per-replica capacity: mean service time of one request alone (s) and how many a
  // replica serves concurrently at that speed (its batch); 0 = unknown (use the last known).
  double service_time_s = 0;
  double concurrency = 0;
  int held_requests = 0;  // requests the gateway holds for a pool with no ready replica
};

struct ScaleDecision {
  int desired = 0;
  double predicted_penalty = 0;  // of `desired`
  double predicted_e2e_p95_s = 0;
  std::string reason;  // "slo: p95 0.41 s > 0.30 s at 2 -> 3", "stabilizing", "idle -> 0", ...
  bool changed = false;
};

class Autoscaler {
 public:
  explicit Autoscaler(AutoscalingSpec policy);
  ScaleDecision Decide(const PoolSpec& pool, const PoolObservation& obs, Clock::time_point now);

 private:
  struct PoolState;
  AutoscalingSpec policy_;
  std::map<std::string, PoolState*> unused_;  // placeholder: the helper defines the state
};

}  // namespace strata::control
