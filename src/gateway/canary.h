// gateway/canary: metric-driven canary releases on 2-arm split routes (`canary:` in the config) —
// per route, per arm, a window of request outcomes of the current step; an analysis every
// `interval`; steps, promotion and rollback; the decision log the admin API lists.
//
// The analysis of a progressing canary, every `interval` (Tick):
//   - both arms need >= min_requests outcomes in the current step, else nothing is decided;
//   - then the guards compare canary with baseline over the same window: TTFT p95 ratio, TPOT p95
//     ratio, error-rate difference (absolute), and the mean output logprob difference when the
//     guard is set and both arms have logprob samples. A breach → rolled back at once (canary
//     weight 0), even before min_duration;
//   - within bounds and the step lasted >= min_duration → the next step (canary weight = its %,
//     the baseline the rest); passing the last step → promoted (canary weight 100 %).
//   A step change clears the windows (each step is judged on its own traffic). Windows keep the
//   newest kMaxWindow outcomes per arm.
// Outcome facts: an error is a status >= 500 (a 4xx is the client's, 499 the client went away:
// neither counts, nor is its latency used); TTFT is the gateway's time to first byte; TPOT is
// (total − TTFT) / (completion tokens − 1), for answers of 2+ tokens.
// Operator actions: pause (no decisions; weights stay), resume (a paused canary continues; a
// rolled-back one starts again at step 1), rollback, promote. Every decision and action is kept
// (the newest kMaxDecisions per route) with the figures it used.
// Reload: a route whose arms and canary block are unchanged keeps its state; otherwise its
// canary starts at step 1. The weights live in SplitWeights (split.h); the controller sets them.
//
// Thread contract: thread-safe (one mutex); times are passed in, so tests drive the clock.
// Errors: actions return NotFound (no canary on that route) or InvalidArgument (a transition
// the state does not allow, e.g. promote a promoted canary; the admin API answers 409).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "gateway/config.h"
#include "gateway/split.h"
#include "gateway/types.h"

namespace strata::gateway {

inline constexpr size_t kMaxWindow = 10000;  // outcomes per arm
inline constexpr size_t kMaxDecisions = 64;  // per route

// One finished request on an arm (from the gateway's RequestRecord).
struct CanaryOutcome {
  int status = 0;
  double ttft_s = -1;  // < 0: unknown
  double tpot_s = -1;  // < 0: unknown
  std::optional<double> mean_logprob;
};

enum class CanaryState { kProgressing, kPaused, kPromoted, kRolledBack };
std::string_view CanaryStateName(CanaryState s);  // progressing | paused | promoted | rolled_back

// What one arm's window showed.
struct ArmFigures {
  int64_t requests = 0, errors = 0;
  double error_rate = 0;
  std::optional<double> ttft_p95_s, tpot_p95_s, mean_logprob;
};

struct CanaryDecision {
  std::string route;
  // step | promote | rollback (the analysis); pause | resume | manual_rollback |
  // manual_promote (an operator)
  std::string decision;
  std::string reason;  // the guard breached, "within bounds", or the action
  size_t step = 0;     // the step index after the decision (0-based)
  double weight = 0;   // the canary weight % after the decision
  ArmFigures baseline, canary;
  double at_s = 0;  // seconds since the controller started
};

struct CanaryView {
  std::string route, baseline, canary;
  CanaryState state = CanaryState::kProgressing;
  size_t step = 0;
  std::vector<double> steps;
  double weight = 0;                    // canary weight %
  double step_age_s = 0;                // how long the current step has lasted
  ArmFigures baseline_now, canary_now;  // the current windows
  std::vector<CanaryDecision> decisions;
};

// Percentile p (0-100) by nearest rank; nullopt when empty.
std::optional<double> Percentile(std::vector<double> v, double p);

class CanaryController {
 public:
  CanaryController(SplitWeights* weights, Clock::time_point now) : weights_(weights), t0_(now) {}

  // Adopts a configuration (call it after SplitWeights::Reconfigure): sets the weights of the
  // canaries that start (step 1) and re-applies those of the canaries kept.
  void Reconfigure(const GatewayConfig& cfg, Clock::time_point now);
  // Whether `route` has a canary (the admin API refuses manual weights then).
  bool Has(std::string_view route) const;
  // A finished request of `route` served by `pool` (ignored unless one of its canary's arms).
  void Observe(std::string_view route, std::string_view pool, const CanaryOutcome& o);
  // Runs the analyses that are due; returns the decisions made.
  std::vector<CanaryDecision> Tick(Clock::time_point now);

  enum class Action { kPause, kResume, kRollback, kPromote };
  Result<CanaryDecision> Act(std::string_view route, Action a, Clock::time_point now);

  std::vector<CanaryView> List(Clock::time_point now) const;

 private:
  struct Run {
    RouteConfig route;  // a copy: arms and canary, to compare on reload
    CanaryState state = CanaryState::kProgressing;
    size_t step = 0;
    double weight = 0;
    Clock::time_point step_start, last_analysis;
    std::deque<CanaryOutcome> baseline, canary;
    std::deque<CanaryDecision> decisions;
  };
  void Apply(Run& run, CanaryState state, size_t step, double weight, Clock::time_point now)
      REQUIRES(mu_);
  CanaryDecision Decide(Run& run, std::string decision, std::string reason, Clock::time_point now)
      REQUIRES(mu_);
  std::optional<CanaryDecision> Analyse(Run& run, Clock::time_point now) REQUIRES(mu_);

  SplitWeights* weights_;
  const Clock::time_point t0_;
  mutable Mutex mu_;
  std::map<std::string, Run, std::less<>> runs_ GUARDED_BY(mu_);
};

}  // namespace strata::gateway
