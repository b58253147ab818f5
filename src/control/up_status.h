// control/up_status: what `strata up` (control/up.h) reports about its deployment, read from the
// shared state (control/up_state.h), the supervisor's children and the control loop:
//   Json()         GET /status: per pool its replicas (state, health, URL, restarts, cold start,
//                  last exit, log; "draining" while leaving, `canary` for a canary's new set),
//                  measured figures, SLO objectives with attainment, the autoscaler's decision,
//                  rollout summary and state; the gateway, Prometheus, cold starts, the loop;
//   MetricsText()  GET /metrics: strata_control_* (cold starts, replicas by state, restarts) and
//                  the control loop's families.
// FormatStatus (control/up.h), `strata status`'s text of that JSON, is defined here too.
// Ownership: a report is made per request; it copies the children at construction and holds
// references to the rest.
// Thread contract: Json and MetricsText take State::mu (after the supervisor's children were
// read, never under it).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "control/autoscaler.h"
#include "control/loop.h"
#include "control/supervisor.h"
#include "control/up_state.h"

namespace strata::control::up {

class StatusReport {
 public:
  // `loop`: null when the autoscaler does not run.
  StatusReport(const Context& ctx, const State& state, const Supervisor& sup,
               const ControlLoop* loop);

  nlohmann::json Json() const EXCLUDES(state_.mu);
  std::string MetricsText() const EXCLUDES(state_.mu);

 private:
  nlohmann::json PoolJson(const PoolSpec& p,
                          const std::map<std::string, ScaleDecision>& latest) const
      REQUIRES(state_.mu);
  // The pool's replicas; `serving` counts those ready, not leaving, not a canary's new set.
  nlohmann::json ReplicasJson(const PoolSpec& p, const PoolRun& run, int* serving) const
      REQUIRES(state_.mu);
  nlohmann::json ColdStartsJson() const REQUIRES(state_.mu);
  std::string ColdStartMetrics() const REQUIRES(state_.mu);
  std::string ReplicaMetrics() const REQUIRES(state_.mu);

  const Context& ctx_;
  const State& state_;
  const ControlLoop* loop_;
  const ChildMap children_;
};

}  // namespace strata::control::up
