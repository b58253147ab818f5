// control/up_poller: the periodic thread of `strata up` (control/up.h). Every 250 ms: while a
// pool is at zero, the gateway's held requests per pool (its strata_gateway_pool_held_requests
// gauge) — a pool at zero whose gateway holds requests is activated with one replica (KEDA's
// activationThreshold, at the gateway's pace rather than Prometheus's); every second while a
// canary splits, the gateway's GET /admin/canary for its rollout (control/up_rollouts.h); a
// reconcile (a child's port or state may have changed without a callback); every scrape interval,
// each pool's measured figures (p95 e2e / TTFT / TPOT, error and request rates over 1m) from
// Prometheus for the status. HTTP requests are made with State::mu released. Ownership: owns its
// thread; holds references to the run's Context, State and parts. Thread contract: Start once; Join
// after State::stopping was set and State::cv notified. Errors: none; an unreachable gateway or
// Prometheus leaves figures NaN and pools unactivated.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "control/supervisor.h"
#include "control/up_configs.h"
#include "control/up_replicas.h"
#include "control/up_rollouts.h"
#include "control/up_state.h"

namespace strata::control::up {

class Poller {
 public:
  Poller(const Context& ctx, State& state, Supervisor& sup, ReplicaSet& replicas,
         const ConfigFiles& configs)
      : ctx_(ctx), state_(state), sup_(sup), replicas_(replicas), configs_(configs) {}

  void Start();
  void Join();

 private:
  void Run() EXCLUDES(state_.mu);
  // These release State::mu for their HTTP requests; false when stopping was set meanwhile.
  bool ActivateHeldPools() REQUIRES(state_.mu);
  bool PollCanaries() REQUIRES(state_.mu);
  void MeasurePools() REQUIRES(state_.mu);
  void Activate(const std::map<std::string, int>& held) REQUIRES(state_.mu);

  const Context& ctx_;
  State& state_;
  Supervisor& sup_;
  ReplicaSet& replicas_;
  const ConfigFiles& configs_;
  // The poller thread's only.
  std::chrono::steady_clock::time_point next_measure_, next_canary_poll_;
  std::thread thread_;
};

}  // namespace strata::control::up
