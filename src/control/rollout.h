// control/rollout: the state machine of one canary rollout of a pool in `strata up` (a new model
// version through the gateway's canary, gateway/canary.h) — pure: up feeds it what it sees of
// the new replica set and of the gateway's GET /admin/canary, with the time, and acts on its
// phase.
//
//   starting ──(all of the new set ready)──────────────────────────► canary
//   starting ──(a new replica failed: never ready, or exits)────────► failed
//   canary   ──(every split route's canary promoted)────────────────► promoted
//   canary   ──(any split route's canary rolled back)───────────────► rolled_back
//   canary   ──(the gateway shows not all of them for gateway_timeout)► failed
//
// What up does in each phase (control/up.cc): starting — the new set (gateway pool
// CanaryPoolName(pool, to)) runs but gets no traffic; canary — gateway.yaml splits the pool's
// routes (control/gateway_yaml.h) and up polls the admin API; promoted — the pool's version is
// `to`, the old replicas drain; rolled_back / failed — the new replicas stop, the routes return
// to the old version, and the reason (the canary's, e.g. "error_rate 0.5 > baseline 0 + 0.01")
// is reported. A paused canary (the operator) just waits.
//
// Thread contract: none (a plain value; up keeps it under its mutex).
// Errors: ParseCanaryList returns InvalidArgument for a body that is not the admin API's shape.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata::control {

enum class RolloutPhase { kStarting, kCanary, kPromoted, kRolledBack, kFailed };
// "starting" | "canary" | "promoted" | "rolled_back" | "failed"
std::string_view RolloutPhaseName(RolloutPhase p);

// One route's canary as the gateway's GET /admin/canary lists it.
struct CanaryRouteState {
  std::string route, baseline, canary;
  std::string state;  // progressing | paused | promoted | rolled_back
  int64_t step = 0;   // 0-based
  std::vector<double> steps;
  double weight = 0;                                   // the canary's weight %
  std::string last_decision, last_reason;              // "" before the first decision
  int64_t baseline_requests = 0, canary_requests = 0;  // the current step's windows
};

// The canaries whose canary arm is `canary_pool` in a GET /admin/canary body
// (`{"canaries": [{route, baseline, canary, state, step, steps, weight, window, decisions}]}`).
Result<std::vector<CanaryRouteState>> ParseCanaryList(std::string_view body,
                                                      std::string_view canary_pool);

// What up sees of the new replica set.
struct NewSetState {
  int wanted = 1;      // its size (the old set's count)
  int ready = 0;       // of them ready
  std::string failed;  // "" or a failed replica: "NAME: its last exit"
};

class CanaryRollout {
 public:
  using Time = std::chrono::steady_clock::time_point;

  // `routes`: the routes gateway.yaml splits (every one must show its canary).
  CanaryRollout(std::string pool, std::string from, std::string to, std::string canary_pool,
                std::vector<std::string> routes, std::chrono::milliseconds gateway_timeout,
                Time now);

  // starting → canary once `ready >= wanted`, → failed on a failed replica. Ignored otherwise.
  void ObserveReplicas(const NewSetState& s, Time now);
  // One answer of the admin API (or why there was none). Ignored unless in the canary phase.
  void ObserveGateway(const Result<std::vector<CanaryRouteState>>& canaries, Time now);

  RolloutPhase phase() const { return phase_; }
  bool active() const { return phase_ == RolloutPhase::kStarting || splitting(); }
  bool splitting() const { return phase_ == RolloutPhase::kCanary; }
  bool done() const { return !active(); }
  const std::string& pool() const { return pool_; }
  const std::string& from() const { return from_; }
  const std::string& to() const { return to_; }
  const std::string& canary_pool() const { return canary_pool_; }
  const std::string& reason() const { return reason_; }

  // {strategy: canary, from, to, phase, reason, canary_pool, step, steps, weight, state,
  //  last_decision: {route, decision, reason}, routes: [...], elapsed_s, last_gateway_error}.
  nlohmann::json ToJson(Time now) const;
  // One line: "v1 -> v2 canary: step 2/3, canary 50 % (progressing)".
  std::string Summary() const;

 private:
  void Finish(RolloutPhase phase, std::string reason, Time now);

  std::string pool_, from_, to_, canary_pool_;
  std::vector<std::string> routes_;
  std::chrono::milliseconds gateway_timeout_;
  Time started_, phase_since_, last_seen_;
  RolloutPhase phase_ = RolloutPhase::kStarting;
  std::string reason_;
  int new_ready_ = 0, new_wanted_ = 0;
  std::vector<CanaryRouteState> seen_;  // the last answer's canaries of our routes
  std::string gateway_error_;           // the last failed poll ("" after a good one)
  double finished_s_ = -1;              // seconds from start to the end, once done
};

}  // namespace strata::control
