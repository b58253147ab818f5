// control/render_k8s: the Kubernetes manifests of a deployment spec (`strata render k8s -f
// deploy.yaml -o DIR`) — the same pools, SLOs, routes and autoscaling policy that `strata up` runs
// on one machine, as objects for a cluster:
//   per pool    a Deployment of `strata serve` replicas (startupProbe on /ready sized for the
//               model load, liveness /health, readiness /ready, a preStop pause then SIGTERM's
//               drain, terminationGracePeriodSeconds covering both, resources from the device
//               needs, the model files from a read-only PersistentVolumeClaim), a headless
//               Service (the gateway's `dns:` name for the pool), a ConfigMap with its
//               `serve:` config when it has one, and a KEDA ScaledObject;
//   once        the gateway (ConfigMap with gateway.yaml, Deployment, Service), the autoscaler
//               (`strata autoscaler`: ConfigMap with the deploy spec, Deployment, Service), the
//               ServiceMonitors (labels pool/replica/version/role as `strata up` gives them), a
//               PrometheusRule (the recording and alerting rules of control/queries' RulesYaml)
//               and kustomization.yaml listing every file.
// The scaling decision is the autoscaler's: it exports `strata_control_desired_replicas{pool}`,
// and each ScaledObject's Prometheus trigger reads it as an AverageValue target of 1 (so the HPA's
// desired count is the recorded value), activationThreshold 0 for scale from/to zero (pools with
// replicas.min 0). src/control/README.md "Kubernetes" says why this and not KEDA's external-scaler
// gRPC interface, and how model files reach the pods.
//
// Object names are `<spec name>-pool-<pool>`, `<spec name>-gateway`, `<spec name>-autoscaler`
// (DNS-1035 labels, at most 63 characters: a longer or invalid one is an error naming the spec's
// key). Each object is one file `<kind>-<name>.yaml` (kind lower-cased).
//
// Ownership: plain values. Errors: InvalidArgument naming the spec path or option.
// Thread contract: pure functions of their arguments (WriteManifests writes files).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "control/spec.h"

namespace strata::control {

struct RenderOptions {
  std::string image = "strata:latest";  // the image of deploy/image (has /usr/bin/strata)
  std::string image_pull_policy = "IfNotPresent";
  std::string namespace_name;  // kustomization `namespace:` and the gateway's DNS names ("" =
                               // the namespace `kubectl apply` uses; short names resolve there)
  // Model files: a PersistentVolumeClaim mounted read-only at /models in every replica; a pool's
  // file is /models/<model>/<version>/<file name>. See models.txt in the output.
  std::string models_claim = "strata-models";
  // The Prometheus the autoscaler queries and KEDA's triggers read.
  std::string prometheus_url = "http://prometheus-operated.monitoring.svc:9090";
  std::string gpu_resource = "nvidia.com/gpu";  // the resource name of DeviceNeeds::gpus
  // The deploy spec's own text (the autoscaler's ConfigMap); "" = not rendered.
  std::string spec_yaml;
  // Sizes of the pools' model files in bytes (by pool name) when known: the startupProbe's budget
  // grows with them; a pool without one uses its devices.memory_gb.
  std::vector<std::pair<std::string, double>> model_bytes;
};

struct ManifestFile {
  std::string name;  // "deployment-ref-pool-general.yaml", "kustomization.yaml", "models.txt"
  std::string text;
};

inline constexpr int kReplicaPort = 8000;
inline constexpr int kAutoscalerPort = 9100;
inline constexpr int kPreStopPauseS = 5;  // endpoints drop a terminating pod before SIGTERM
inline constexpr int kDrainSeconds = 30;  // `strata serve`'s default --shutdown-timeout

// The seconds the startupProbe allows a replica to become ready: 120 + 30 per GB of model (or
// of devices.memory_gb), at least 300.
int StartupBudgetSeconds(double model_gb);

// Every object and kustomization.yaml (and models.txt), in a fixed order.
Result<std::vector<ManifestFile>> RenderK8s(const DeploymentSpec& spec, const RenderOptions& opt);

// Writes the files into `dir` (created if missing; files of the same names are replaced).
Status WriteManifests(const std::vector<ManifestFile>& files, const std::string& dir);

}  // namespace strata::control
