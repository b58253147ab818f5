// control/up: `strata up -f deploy.yaml` — one machine runs a whole deployment spec. Up starts,
// as supervised children (control/supervisor.h), every pool's replicas (`strata serve`, at least
// replicas.min of each), the gateway (`strata gateway`, its gateway.yaml written from the spec by
// control/gateway_yaml with the replicas' URLs and a cold-start hold of
// autoscaling.cold_start_hold_ms per pool; rewritten and SIGHUP'd whenever the replica set
// changes) and Prometheus (Debian's binary; a generated prometheus.yml whose file_sd targets are
// labelled pool / replica / version / role, a fresh TSDB under the state dir, listening on
// 127.0.0.1), and serves a status endpoint:
//   GET /status   JSON: pools, replicas (state, health, URL, restarts, cold start, last exit,
//                 log), SLOs with their measured figures and attainment, the autoscaler's last
//                 decisions, rollouts (`rollout` summary, `rollout_state`: phase, step, weights,
//                 last decision, reason), cold starts;
//   GET /metrics  strata_control_* (cold starts, replicas by state, restarts, the control loop's
//                 families) for the Prometheus it runs;
//   POST /rollout {"pool": P, "version": V} — rolls pool P out to model version V (202; 404 no
//                 such pool; 400 no such version; 409 another rollout of P is in progress).
// A rollout (POST /rollout, or a SIGHUP after editing a pool's `version` in the spec) follows the
// pool's `rollout.strategy` (spec.h):
//   canary (default for a pool some route names alone): the new version's replicas start as a set
//     of their own (as many as the pool's desired count; no traffic yet); once all are ready,
//     gateway.yaml splits the pool's routes baseline P / canary P.V with a `canary:` block
//     (control/gateway_yaml.h) and the gateway's GET /admin/canary is read every second
//     (control/rollout.h): promoted → P runs V and the old replicas drain; rolled back or
//     failed → the new replicas stop and P keeps its version, the reason in the status;
//   surge: replicas of the new version start; each one that is ready lets one old replica drain
//     (removed from the gateway first, then SIGTERM), so serving capacity never drops below the
//     pool's count.
// The gateway gets an admin API key (the spec's gateway.admin.api_key, else one made up at start
// and written only to the state dir's gateway.yaml) so that up can read the canary.
// SetReplicas (the autoscaler's actuator) changes a pool's desired count within [min, max].
// Shutdown drains in order: the gateway (in-flight requests finish), then replicas, then
// Prometheus and the status server.
//
// State dir layout: logs/NAME.log, gateway.yaml, serve/POOL.yaml, prometheus/{prometheus.yml,
// targets.json, rules.yml, data-TIME/}, up.json (the status URL, for `strata status`).
// Ownership: Up owns its children (through the Supervisor), its status server and its threads.
// Its parts (control/up_state.h lists them): ReplicaSet (reconcile), ConfigFiles (gateway.yaml,
// targets.json), ChildLauncher (the children's command lines), rollouts, Poller (the 250 ms
// thread), StatusReport (/status, /metrics, and FormatStatus's text).
// Thread contract: public methods are thread-safe.
// Errors: Start fails (InvalidArgument/NotFound/IoError) when the state dir, the gateway config
// or a binary is unusable; failures of children are reported in the status, never fatal.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "control/autoscaler.h"
#include "control/spec.h"

namespace strata::control {

struct UpOptions {
  std::string state_dir;   // "" = <spec folder>/.strata/<spec name>
  int status_port = 0;     // 0 = any free port
  std::string strata_bin;  // the binary that runs replicas and the gateway
  bool prometheus = true;  // run Prometheus (when false, SLO figures are absent)
  std::chrono::milliseconds ready_timeout{120000};  // a child not ready by then is reported
  std::chrono::milliseconds drain_grace{30000};     // SIGTERM → SIGKILL
};

class Up {
 public:
  static Result<std::unique_ptr<Up>> Start(DeploymentSpec spec, const UpOptions& options);
  ~Up();  // Shutdown()

  // Waits until the gateway and replicas.min replicas of every pool are ready or failed, or the
  // timeout; false on the timeout.
  bool WaitStarted(std::chrono::milliseconds timeout);
  // The actuator: a pool's desired replica count (clamped to [min, max]) and why.
  Status SetReplicas(const std::string& pool, int n, const ScaleDecision& decision);
  Status Rollout(const std::string& pool, const std::string& version);
  // A new spec (SIGHUP): changed versions roll out, replica bounds apply; other changes need a
  // restart (reported as an error, nothing applied).
  Status Reload(DeploymentSpec spec);
  nlohmann::json StatusJson() const;
  std::string MetricsText() const;
  std::string gateway_url() const;
  std::string status_url() const;
  std::string prometheus_url() const;
  // Drains everything (gateway, replicas, Prometheus) and stops the status server. Idempotent.
  void Shutdown();

  struct Impl;

 private:
  explicit Up(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `strata status`'s text: a line per pool (ready/desired, bounds, SLO verdict, rollout), its SLO
// objectives (measured vs target) and autoscaler decision, and a line per replica.
std::string FormatStatus(const nlohmann::json& status);

// `strata up`: Start, print the URLs, then SIGHUP → reload the spec file, SIGTERM/SIGINT →
// Shutdown; returns 0 after a clean drain.
int RunUp(const std::string& spec_path, const UpOptions& options);

}  // namespace strata::control
