// control/up_rollouts: rollouts in `strata up` (control/up.h) — a pool's move to another model
// version (POST /rollout, or a reloaded spec). The pool's rollout.strategy decides: canary (the
// default for a pool some route names alone) starts a CanaryRollout (control/rollout.h) whose
// new set the ReplicaSet keeps and whose split the gateway runs, followed through the gateway's
// GET /admin/canary (polled by the Poller); surge sets the pool's version at once and the
// ReplicaSet drains an old replica per ready new one.
// Thread contract: every function needs State::mu.
// Errors: StartRollout — NotFound (no such pool), InvalidArgument (no such version; strategy
// canary and no route names the pool alone), Unavailable (another rollout of the pool is in
// progress).
#pragma once

#include <chrono>
#include <string>

#include "base/status.h"
#include "control/fetch.h"
#include "control/up_state.h"

namespace strata::control::up {

// Starts rolling `pool` out to `version` (Ok at once when it runs or rolls out to it); a canary's
// new set has `ready_timeout` to become ready. The caller reconciles.
Status StartRollout(State& s, const std::string& pool, const std::string& version,
                    std::chrono::milliseconds ready_timeout) REQUIRES(s.mu);
// Whether a canary rollout splits traffic now (the gateway's canary is to be followed).
bool AnyCanarySplits(const State& s) REQUIRES(s.mu);
// One answer of GET /admin/canary for every splitting canary rollout.
void ObserveCanaries(State& s, const Result<FetchReply>& reply) REQUIRES(s.mu);

}  // namespace strata::control::up
