// control/up_state: what the parts of `strata up` (control/up.h) share — the run's fixed context
// (options, state dir, ports) and the deployment's mutable state (the spec, each pool's run,
// each replica, cold starts), one mutex over all of it. The parts:
//   up_replicas.h  ReplicaSet: reconciles the replicas toward each pool's desired count;
//   up_configs.h   ConfigFiles: gateway.yaml and Prometheus's targets.json from that state;
//   up_launch.h    ChildLauncher: the ChildSpecs of a replica, the gateway and Prometheus;
//   up_rollouts.h  Rollouts: starting a rollout, following the gateway's canaries;
//   up_poller.h    Poller: the 250 ms thread (activation from zero, canary polls, figures);
//   up_status.h    StatusReport: GET /status and GET /metrics.
// Ownership: Up::Impl (up.cc) owns one Context, one State and every part; the parts hold
// references to them.
// Thread contract: State's members are guarded by State::mu; Context is written only while Up
// starts, before the threads that read it start (status_port: atomic, set once the server
// listens).
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "control/autoscaler.h"
#include "control/rollout.h"
#include "control/spec.h"
#include "control/supervisor.h"
#include "control/up.h"

namespace strata::control::up {

// The two children that are not replicas, by name.
inline constexpr std::string_view kGateway = "gateway";
inline constexpr std::string_view kPrometheus = "prometheus";

// The supervisor's children by name, as they are now.
using ChildMap = std::map<std::string, ChildStatus>;
ChildMap ChildrenByName(const Supervisor& sup);
// Whether child `name` is in `children` and ready.
bool IsReady(const ChildMap& children, const std::string& name);

// `text` into `path` through a temporary file and a rename (readers never see half a file).
Status WriteFileAtomic(const std::string& path, const std::string& text);

// Fixed once Up has started: the options, the state dir and the ports.
struct Context {
  UpOptions opts;
  std::string state_dir;  // absolute, no trailing '/'
  std::string prom_bin;   // "" without Prometheus
  int prom_port = 0;      // 0: no Prometheus
  // The status server's, known once it listens (it may answer a request before).
  std::atomic<int> status_port{0};

  std::string Path(std::string_view rel) const { return state_dir + "/" + std::string(rel); }
  std::string LogPath(std::string_view child) const {
    return Path("logs/" + std::string(child) + ".log");
  }
  std::string StatusUrl() const;
  std::string PrometheusUrl() const;  // "" without Prometheus
};

// The measured figures of one pool over the last minute, from the replicas' histograms.
struct PoolFigures {
  double e2e_p95_s = std::nan(""), ttft_p95_s = std::nan(""), tpot_p95_s = std::nan("");
  double error_rate = std::nan(""), request_rate = std::nan("");
};

// One replica child of a pool.
struct ReplicaRun {
  std::string pool, version;
  bool leaving = false;
  // A leaving replica is stopped (drained) this long after the gateway.yaml without it was
  // written, so the gateway has reloaded and no request picked before it lands on it.
  std::optional<std::chrono::steady_clock::time_point> stop_at;
};

// One pool as it runs: its version, desired count, rollout and figures.
struct PoolRun {
  std::string version;
  int desired = 0;
  int next_index = 0;
  std::optional<ScaleDecision> decision;
  std::string rollout;     // "v1 -> v2" while a surge rollout runs
  std::string surge_from;  // its old version
  // A canary rollout (control/rollout.h): active, or finished and not applied yet; its policy
  // as it was when it started (a reload does not restart the gateway's canary).
  std::optional<CanaryRollout> canary;
  RolloutSpec canary_policy;
  nlohmann::json last_rollout;  // the last finished rollout (null: none yet)
  PoolFigures figures;
  // Whether replica version `v` belongs to the pool's active canary set.
  bool InCanarySet(const std::string& v) const {
    return canary && canary->active() && v == canary->to();
  }
};

struct ColdStart {
  std::string pool, replica;
  double seconds;      // fork → ready
  double from_zero_s;  // activation (held request, pool at 0) → ready; < 0: not from zero
};

// A pool started from zero (a held request), awaiting its first ready replica.
struct Activation {
  std::string pool;
  std::chrono::steady_clock::time_point at;
};

struct State {
  mutable Mutex mu;
  CondVar cv;  // wakes the poller (stopping)
  DeploymentSpec spec GUARDED_BY(mu);
  std::map<std::string, PoolRun> pools GUARDED_BY(mu);
  std::map<std::string, ReplicaRun> replicas GUARDED_BY(mu);  // by child name
  std::vector<ColdStart> cold_starts GUARDED_BY(mu);
  std::set<std::string> seen_ready GUARDED_BY(mu);
  std::vector<Activation> activations GUARDED_BY(mu);
  bool stopping GUARDED_BY(mu) = false;
};

}  // namespace strata::control::up
