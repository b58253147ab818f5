// control/up_replicas: the replica set of `strata up` (control/up.h). Reconcile moves each pool
// toward its desired count of its current version: missing replicas start; during a surge rollout
// each ready new replica lets one old one leave; extras leave (not ready ones first, then the
// newest); a canary rollout's new set (control/rollout.h) is kept at the pool's count and fed its
// readiness, and a finished one is applied (promoted: the pool runs the new version; rolled back
// or failed: the new set leaves). Then gateway.yaml and targets.json are rewritten (ConfigFiles),
// and a leaving replica is stopped (drained) kLeaveAfterReload after the gateway.yaml without it,
// so the gateway has reloaded first. Cold starts are recorded as replicas become ready.
// Ownership: holds references to the Supervisor, the launcher and the configs; works on the
// State it is given.
// Thread contract: Reconcile needs State::mu; CurrentReplicas takes it.
// Errors: none returned; a replica that cannot start is reported on stderr (or fails a canary).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "control/spec.h"
#include "control/supervisor.h"
#include "control/up_configs.h"
#include "control/up_launch.h"
#include "control/up_state.h"

namespace strata::control::up {

// How long a leaving replica keeps running after the gateway.yaml without it was written: the
// gateway's reload (SIGHUP) and the requests it routed just before it.
inline constexpr std::chrono::milliseconds kLeaveAfterReload{2000};

class ReplicaSet {
 public:
  ReplicaSet(Supervisor& sup, ChildLauncher& launcher, ConfigFiles& configs)
      : sup_(sup), launcher_(launcher), configs_(configs) {}

  // One pass over every pool (nothing once State::stopping).
  void Reconcile(State& s) REQUIRES(s.mu);
  // The autoscaler's view of a pool: its replicas that run or are starting (not leaving, not
  // failed, not the new set of a canary rollout).
  int CurrentReplicas(const State& s, const std::string& pool) EXCLUDES(s.mu);

 private:
  // Replicas seen ready for the first time: a cold start (from zero when the pool was activated).
  static void RecordColdStarts(State& s, const ChildMap& children) REQUIRES(s.mu);
  void ReconcilePool(State& s, const PoolSpec& p, PoolRun& run, const ChildMap& children,
                     std::vector<std::string>* leave) REQUIRES(s.mu);
  void ReconcileCanarySet(State& s, const PoolSpec& p, PoolRun& run, const ChildMap& children,
                          std::vector<std::string>* leave) REQUIRES(s.mu);
  static void FinishCanary(State& s, const PoolSpec& p, PoolRun& run,
                           std::vector<std::string>* leave) REQUIRES(s.mu);
  Status StartReplica(State& s, const PoolSpec& p, const std::string& version) REQUIRES(s.mu);
  // `leave` gets its stop time; replicas whose stop time has come are stopped.
  void StopLeavers(State& s, const std::vector<std::string>& leave) REQUIRES(s.mu);

  Supervisor& sup_;
  ChildLauncher& launcher_;
  ConfigFiles& configs_;
};
}  // namespace strata::control::up
