// control/spec: the deployment spec (`strata up -f deploy.yaml`, `strata render k8s -f ...`) — the
// models and their versions, the pools of replicas, each pool's SLOs and device needs, the
// gateway's routes and the autoscaling policy — parsed strictly from YAML into an immutable value.
//
// YAML keys are the member names below (durations carry their unit: `interval_s`, `ttft_p95_ms`);
// examples/deploy.yaml documents every key. `apiVersion` must be kApiVersion and `kind` must be
// "Deployment". Unknown keys, duplicate keys, wrong types, out-of-range numbers, duplicate
// model/version/pool names, a pool naming a model or version that does not exist, min > max
// replicas, routes to unknown pools are errors, and every error names the key path:
// "pools[1].replicas.max: must be >= replicas.min (3 > 2)".
// Hostile input (deep nesting, huge text, aliases) yields an error, never a crash: the text is
// bounded (kMaxSpecBytes) and yaml-cpp's exceptions are caught.
//
// Ownership: plain values; ParseDeploymentSpec returns one by value.
// Thread contract: a DeploymentSpec is an immutable value once parsed; share it read-only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata::control {

inline constexpr std::string_view kApiVersion = "strata.dev/v1";
inline constexpr size_t kMaxSpecBytes = 1 << 20;
// The `strata serve` flag of the model id clients send. Every replica of a pool gets
// `--served-model-name <models[].name>` (`strata up` and `strata render k8s`), so a client sends
// the spec's model name whichever version (a rollout runs two) answers; the version is a label
// (gateway pool label `version`, pod label `strata.dev/version`). A pool's `serve_args` and
// `serve.model.served_model_name` may not set it.
inline constexpr std::string_view kServedModelNameFlag = "--served-model-name";

struct ModelVersion {
  std::string version;  // "v1"
  std::string path;     // GGUF path (relative paths are relative to the spec file's folder)
};

struct ModelSpec {
  std::string name;
  std::vector<ModelVersion> versions;  // >= 1
  const ModelVersion* Find(std::string_view version) const;
};

// A pool's device needs. YAML: `devices: {precisions: [bf16, int8], memory_gb: 4, cpus: 2}`.
struct DeviceNeeds {
  std::vector<std::string> precisions;  // of "fp32" "fp16" "bf16" "int8" "fp8" (lower-case)
  double memory_gb = 1;                 // resident memory per replica (> 0)
  double cpus = 1;                      // CPU cores per replica (> 0)
  int gpus = 0;                         // accelerators per replica (0 = CPU replica)
};

// Per-pool service-level objectives (0 = no objective on that figure). YAML keys as named.
struct SloSpec {
  double ttft_p95_ms = 0, tpot_p95_ms = 0;
  double e2e_p95_ms = 0;     // the reference architecture's p95_slo (default 150 ms there)
  double error_rate = 0.01;  // max_error_slo, in [0, 1]
};

// What kind of work dominates the pool: placement prefers bandwidth for decode-heavy pools and
// compute for prefill-heavy ones.
enum class Workload { kBalanced, kDecodeHeavy, kPrefillHeavy };
std::string_view WorkloadName(Workload w);  // "balanced" | "decode_heavy" | "prefill_heavy"

struct ReplicaBounds {
  int min = 1, max = 1;  // 0 <= min <= max <= kMaxReplicas; min 0 allows scale to zero
};
inline constexpr int kMaxReplicas = 1000;

// How a new model version of a pool rolls out (`strata up`: POST /rollout, or a SIGHUP after the
// pool's `version` changed). YAML `rollout: {strategy, steps, min_requests, min_duration_s,
// interval_s, guards: {...}}` at the top level (every pool's default) and per pool (its keys
// override the top level's, key by key).
//   surge:  new replicas start; each one ready lets one old replica drain.
//   canary: the new version's replicas start as a replica set of their own (gateway pool
//           `POOL.VERSION`); once all are ready every route whose `to:` is the pool becomes a
//           2-arm split baseline POOL / canary POOL.VERSION with a gateway `canary:` block
//           (these steps, guards, intervals); promoted → the pool is the new version and the old
//           replicas drain; rolled back → the new replicas stop and the rollout is reported
//           failed with the canary's reason.
// Absent `strategy`: canary when the pool is routed (a route's `to:` names it alone), else surge.
enum class RolloutStrategy { kAuto, kSurge, kCanary };
std::string_view RolloutStrategyName(RolloutStrategy s);  // "auto" | "surge" | "canary"

struct RolloutGuards {  // the gateway's canary guards (gateway/config.h CanaryGuards)
  double ttft_p95_max_ratio = 1.2, tpot_p95_max_ratio = 1.2;
  double latency_min_delta_s = 0.005;
  double error_rate_max_delta = 0.01;
};

struct RolloutSpec {
  RolloutStrategy strategy = RolloutStrategy::kAuto;
  std::vector<double> steps = {10, 50, 100};  // canary weight % per step, increasing, (0, 100]
  int64_t min_requests = 50;                  // per arm, per step
  std::chrono::seconds min_duration{30};      // min_duration_s: per step
  std::chrono::seconds interval{5};           // interval_s: between analyses
  RolloutGuards guards;
};

struct PoolSpec {
  std::string name;     // [a-z0-9-], <= 40 chars (a Kubernetes name part)
  std::string model;    // a ModelSpec name
  std::string version;  // one of its versions
  ReplicaBounds replicas;
  DeviceNeeds devices;
  SloSpec slo;
  Workload workload = Workload::kBalanced;
  // The replica config of `strata serve --config` (its YAML, re-emitted verbatim as a file /
  // ConfigMap; validated by the replica itself at start). YAML: `serve: {...}` (a map) or absent.
  std::string serve_yaml;
  // Extra `strata serve` flags, e.g. ["--chat-template", "x"] (not kServedModelNameFlag: the spec
  // gives the name, as it gives the model path).
  std::vector<std::string> serve_args;
  std::map<std::string, std::string> labels;  // gateway pool labels
  RolloutSpec rollout;  // the top level's `rollout:` with this pool's `rollout:` keys over it
};

// The gateway part: the `routes`, `tenants`, `admission`, `balancer` ... of gateway.yaml, kept as
// YAML text and validated by gateway::ParseGatewayConfig once pools are filled in (`to:` names
// pools of this spec). YAML: `gateway: {port: 8080, routes: [...], tenants: [...], ...}`.
struct GatewaySpec {
  int port = 8080;         // 0 = any free port (tests)
  std::string extra_yaml;  // every key but `port` and `pools`, as a YAML map
};

// The SLO-driven autoscaler's policy. YAML `autoscaling: {...}` with these keys.
struct AutoscalingSpec {
  std::chrono::seconds interval{15};                   // interval_s: one decision per pool
  double scale_up_max_factor = 2.0;                    // at most x2 per interval (HPA's 100 %)
  std::chrono::seconds scale_down_stabilization{300};  // scale_down_stabilization_s
  std::chrono::seconds scale_to_zero_idle{600};        // scale_to_zero_idle_s (min 0 pools)
  std::chrono::milliseconds cold_start_hold{60000};    // cold_start_hold_ms: gateway holds
  double hysteresis = 0.1;     // scale down only when the smaller count is this far inside the SLO
  double error_weight = 1000;  // the penalty's weight on the error-rate excess
  bool enabled = true;
};

struct PrometheusSpec {
  int port = 9090;                          // 0 = any free port (tests)
  std::chrono::seconds scrape_interval{5};  // scrape_interval_s
  std::string binary = "prometheus";        // looked up on PATH
};

struct DeploymentSpec {
  std::string name;  // metadata.name ([a-z0-9-])
  std::vector<ModelSpec> models;
  std::vector<PoolSpec> pools;
  GatewaySpec gateway;
  AutoscalingSpec autoscaling;
  PrometheusSpec prometheus;
  RolloutSpec rollout;   // the top-level `rollout:` (each pool's defaults)
  std::string base_dir;  // the spec file's folder (relative model paths resolve against it)

  const ModelSpec* FindModel(std::string_view name) const;
  const PoolSpec* FindPool(std::string_view name) const;
  // The GGUF path of a pool's model version, resolved against base_dir.
  std::string ModelPath(const PoolSpec& pool) const;
};

// Errors are InvalidArgument and name the key path.
Result<DeploymentSpec> ParseDeploymentSpec(std::string_view yaml_text, std::string base_dir = ".");
// Reads and parses a file; errors are prefixed with the file's path.
Result<DeploymentSpec> LoadDeploymentSpec(const std::string& path);

}  // namespace strata::control
