#include "control/render_k8s.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>

#include "control/gateway_yaml.h"
#include "control/manifest_yaml.h"
#include "control/queries.h"

namespace strata::control {

namespace {

using J = OrderedJson;

constexpr int kProbePeriodS = 5;
constexpr int kGatewayPort = 8080;
constexpr std::string_view kConfigDir = "/etc/strata";
constexpr std::string_view kModelsDir = "/models";
constexpr std::string_view kBinary = "/usr/bin/strata";
constexpr int kRunAsUser = 65532;  // the image's unprivileged user (deploy/image)

Status Bad(const std::string& path, const std::string& msg) {
  return Status::InvalidArgument(path + ": " + msg);
}

// A DNS-1035 label: what Service names must be (and every name here is one).
Status CheckObjectName(const std::string& name, const std::string& path) {
  const bool ok = !name.empty() && name.size() <= 63 && std::isalpha(name.front()) &&
                  std::isalnum(static_cast<unsigned char>(name.back())) &&
                  std::all_of(name.begin(), name.end(), [](unsigned char c) {
                    return std::islower(c) || std::isdigit(c) || c == '-';
                  });
  if (ok) return Status::Ok();
  return Bad(path, fmt::format("makes the Kubernetes name '{}', which must be 1 to 63 of [a-z0-9-] "
                               "starting with a letter and ending with a letter or digit",
                               name));
}

// A label value: at most 63 of [A-Za-z0-9._-], beginning and ending alphanumeric.
Status CheckLabelValue(const std::string& v, const std::string& path) {
  const bool ok = !v.empty() && v.size() <= 63 &&
                  std::isalnum(static_cast<unsigned char>(v.front())) &&
                  std::isalnum(static_cast<unsigned char>(v.back())) &&
                  std::all_of(v.begin(), v.end(), [](unsigned char c) {
                    return std::isalnum(c) || c == '-' || c == '_' || c == '.';
                  });
  if (ok) return Status::Ok();
  return Bad(path, fmt::format("'{}' is not a Kubernetes label value (1 to 63 of [A-Za-z0-9._-], "
                               "alphanumeric at both ends)",
                               v));
}

// FNV-1a 64 of the text: a stable hash for the pod templates' config annotations (a changed
// ConfigMap rolls the Deployment).
std::string ConfigHash(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return fmt::format("{:016x}", h);
}

struct Names {
  std::string instance;
  std::string Pool(const std::string& pool) const { return instance + "-pool-" + pool; }
  std::string Gateway() const { return instance + "-gateway"; }
  std::string Autoscaler() const { return instance + "-autoscaler"; }
};

J Selector(const Names& n, std::string_view component) {
  return {{"app.kubernetes.io/name", "strata"},
          {"app.kubernetes.io/instance", n.instance},
          {"app.kubernetes.io/component", component}};
}

J PoolSelector(const Names& n, const PoolSpec& p) {
  J s = Selector(n, "replica");
  s["strata.dev/pool"] = p.name;
  return s;
}

J PoolLabels(const Names& n, const PoolSpec& p) {
  J s = PoolSelector(n, p);
  s["strata.dev/model"] = p.model;
  s["strata.dev/version"] = p.version;
  return s;
}

J Object(std::string_view api_version, std::string_view kind, const std::string& name,
         const J& labels) {
  return {{"apiVersion", api_version},
          {"kind", kind},
          {"metadata", {{"name", name}, {"labels", labels}}}};
}

J HttpProbe(std::string_view path, int period_s, int failures, int timeout_s) {
  return {{"httpGet", {{"path", path}, {"port", "http"}}},
          {"periodSeconds", period_s},
          {"timeoutSeconds", timeout_s},
          {"failureThreshold", failures}};
}

J SecurityContext() {
  return {{"allowPrivilegeEscalation", false},
          {"readOnlyRootFilesystem", true},
          {"capabilities", {{"drop", J::array({"ALL"})}}}};
}

J PodSecurityContext() {
  return {{"runAsNonRoot", true},
          {"runAsUser", kRunAsUser},
          {"runAsGroup", kRunAsUser},
          {"seccompProfile", {{"type", "RuntimeDefault"}}}};
}

J Volume(std::string_view name, const J& source) {
  J v = {{"name", name}};
  for (const auto& [k, val] : source.items()) v[k] = val;
  return v;
}

J ConfigVolume(const std::string& config_map) {
  return Volume("config", {{"configMap", {{"name", config_map}}}});
}

J Mount(std::string_view name, std::string_view path, bool read_only) {
  return {{"name", name}, {"mountPath", path}, {"readOnly", read_only}};
}

std::string Cpu(double cpus) { return fmt::format("{}m", std::llround(cpus * 1000)); }
std::string Memory(double gb) { return fmt::format("{}Mi", std::llround(gb * 1024)); }

J Resources(const DeviceNeeds& d, const RenderOptions& opt) {
  J requests = {{"cpu", Cpu(d.cpus)}, {"memory", Memory(d.memory_gb)}};
  // Memory is limited at the request (a replica's KV cache is sized, not elastic); CPU is not
  // limited (CFS throttling stalls decode steps).
  J limits = {{"memory", Memory(d.memory_gb)}};
  if (d.gpus > 0) {
    requests[opt.gpu_resource] = std::to_string(d.gpus);
    limits[opt.gpu_resource] = std::to_string(d.gpus);
  }
  return {{"requests", requests}, {"limits", limits}};
}

J ConfigMap(const std::string& name, const J& labels, const std::string& file,
            const std::string& text) {
  J o = Object("v1", "ConfigMap", name, labels);
  o["data"] = {{file, text}};
  return o;
}

// The path of a pool's model file inside the pods.
std::string PodModelPath(const DeploymentSpec& spec, const PoolSpec& p) {
  const std::string file = std::filesystem::path(spec.ModelPath(p)).filename().string();
  return fmt::format("{}/{}/{}/{}", kModelsDir, p.model, p.version, file);
}

double ModelGb(const PoolSpec& p, const RenderOptions& opt) {
  for (const auto& [pool, bytes] : opt.model_bytes)
    if (pool == p.name) return bytes / (1024.0 * 1024.0 * 1024.0);
  return p.devices.memory_gb;
}

J ReplicaContainer(const DeploymentSpec& spec, const PoolSpec& p, const RenderOptions& opt) {
  J args = {"serve",
            "--model",
            PodModelPath(spec, p),
            "--host",
            "0.0.0.0",
            "--port",
            std::to_string(kReplicaPort),
            "--shutdown-timeout",
            std::to_string(kDrainSeconds)};
  if (!p.serve_yaml.empty()) {
    args.push_back("--config");
    args.push_back(fmt::format("{}/serve.yaml", kConfigDir));
  }
  for (const std::string& a : p.serve_args) args.push_back(a);
  // Clients send the spec's model name, whichever version answers (spec.h kServedModelNameFlag).
  args.push_back(kServedModelNameFlag);
  args.push_back(p.model);
  const int startup_failures =
      (StartupBudgetSeconds(ModelGb(p, opt)) + kProbePeriodS - 1) / kProbePeriodS;
  J mounts = J::array({Mount("models", kModelsDir, true), Mount("tmp", "/tmp", false)});
  if (!p.serve_yaml.empty()) mounts.push_back(Mount("config", kConfigDir, true));
  return {{"name", "strata"},
          {"image", opt.image},
          {"imagePullPolicy", opt.image_pull_policy},
          {"command", J::array({kBinary})},
          {"args", args},
          {"ports", J::array({{{"name", "http"}, {"containerPort", kReplicaPort}}})},
          // /health answers 200 while the model loads; /ready only once it can serve.
          {"startupProbe", HttpProbe("/ready", kProbePeriodS, startup_failures, 2)},
          {"livenessProbe", HttpProbe("/health", 10, 3, 5)},
          {"readinessProbe", HttpProbe("/ready", kProbePeriodS, 2, 2)},
          // The pause lets the Service drop the pod before SIGTERM starts the drain.
          {"lifecycle", {{"preStop", {{"sleep", {{"seconds", kPreStopPauseS}}}}}}},
          {"resources", Resources(p.devices, opt)},
          {"securityContext", SecurityContext()},
          {"volumeMounts", mounts}};
}

J PoolDeployment(const Names& n, const DeploymentSpec& spec, const PoolSpec& p,
                 const RenderOptions& opt) {
  J volumes = J::array({Volume("models", {{"persistentVolumeClaim",
                                           {{"claimName", opt.models_claim}, {"readOnly", true}}}}),
                        Volume("tmp", {{"emptyDir", J::object()}})});
  if (!p.serve_yaml.empty()) volumes.push_back(ConfigVolume(n.Pool(p.name) + "-serve"));
  std::string config_text = p.serve_yaml;
  for (const std::string& a : p.serve_args) config_text += "\n" + a;
  J o = Object("apps/v1", "Deployment", n.Pool(p.name), PoolLabels(n, p));
  // No spec.replicas: KEDA's HPA owns the count (an applied count would fight it).
  o["spec"] = {
      {"selector", {{"matchLabels", PoolSelector(n, p)}}},
      // A new version's replica is ready before an old one drains (as `strata up` rolls out).
      {"strategy",
       {{"type", "RollingUpdate"}, {"rollingUpdate", {{"maxSurge", 1}, {"maxUnavailable", 0}}}}},
      {"template",
       {{"metadata",
         {{"labels", PoolLabels(n, p)},
          {"annotations", {{"strata.dev/config-hash", ConfigHash(config_text)}}}}},
        {"spec",
         {{"terminationGracePeriodSeconds", kPreStopPauseS + kDrainSeconds + 10},
          {"securityContext", PodSecurityContext()},
          {"containers", J::array({ReplicaContainer(spec, p, opt)})},
          {"volumes", volumes}}}}}};
  return o;
}

// The first field of a Service's spec: headless (the DNS name lists every pod) or a ClusterIP.
using ServiceKind = std::pair<const char*, const char*>;
constexpr ServiceKind kHeadless{"clusterIP", "None"};
constexpr ServiceKind kClusterIp{"type", "ClusterIP"};

// A Service of one port, named http, over the pods `selector` picks.
J Service(ServiceKind kind, const std::string& name, const J& labels, const J& selector, int port) {
  J o = Object("v1", "Service", name, labels);
  o["spec"] = {{kind.first, kind.second},
               {"selector", selector},
               {"ports", J::array({{{"name", "http"}, {"port", port}, {"targetPort", "http"}}})}};
  return o;
}

// HPA behavior: scale-up at most x scale_up_max_factor per interval (the autoscaler's own bound);
// no HPA stabilization, since the recorded count already passed the autoscaler's window (the
// HPA default of 300 s would be a second window on top of it).
J Behavior(const AutoscalingSpec& a) {
  const auto period = static_cast<int>(std::max<int64_t>(1, a.interval.count()));
  const auto up_percent =
      static_cast<int>(std::max<long long>(1, std::llround((a.scale_up_max_factor - 1) * 100)));
  return {{"scaleUp",
           {{"stabilizationWindowSeconds", 0},
            {"selectPolicy", "Max"},
            {"policies",
             J::array({{{"type", "Percent"}, {"value", up_percent}, {"periodSeconds", period}}})}}},
          {"scaleDown",
           {{"stabilizationWindowSeconds", 0},
            {"selectPolicy", "Max"},
            {"policies",
             J::array({{{"type", "Percent"}, {"value", 100}, {"periodSeconds", period}}})}}}};
}

// The trigger's query: the autoscaler's recorded decision for the pool, from this deployment's
// autoscaler Service (Prometheus Operator labels its targets `service`).
std::string DesiredQuery(const Names& n, const PoolSpec& p) {
  return fmt::format("max(strata_control_desired_replicas{{service=\"{}\",pool=\"{}\"}})",
                     n.Autoscaler(), p.name);
}

J ScaledObject(const Names& n, const DeploymentSpec& spec, const PoolSpec& p,
               const RenderOptions& opt) {
  const AutoscalingSpec& a = spec.autoscaling;
  J o = Object("keda.sh/v1alpha1", "ScaledObject", n.Pool(p.name), PoolLabels(n, p));
  o["spec"] = {
      {"scaleTargetRef",
       {{"apiVersion", "apps/v1"}, {"kind", "Deployment"}, {"name", n.Pool(p.name)}}},
      {"pollingInterval", std::max<int64_t>(1, a.interval.count())},
      // The autoscaler already waited scale_to_zero_idle before recording 0.
      {"cooldownPeriod", std::max<int64_t>(1, a.interval.count())},
      {"minReplicaCount", p.replicas.min},
      {"maxReplicaCount", p.replicas.max},
      {"advanced",
       {{"horizontalPodAutoscalerConfig", {{"name", n.Pool(p.name)}, {"behavior", Behavior(a)}}}}},
      {"triggers",
       J::array({{{"type", "prometheus"},
                  {"metricType", "AverageValue"},
                  {"metadata",
                   {{"serverAddress", opt.prometheus_url},
                    {"query", DesiredQuery(n, p)},
                    {"threshold", "1"},
                    {"activationThreshold", "0"},
                    // No series (the autoscaler is down or has not decided): an error, so the
                    // HPA keeps the current count, never a 0 that would scale the pool down.
                    {"ignoreNullValues", "false"}}}}})}};
  return o;
}

J ServiceMonitor(const Names& n, std::string_view component, std::string_view role,
                 bool pool_labels, const DeploymentSpec& spec) {
  J relabel = J::array();
  if (pool_labels) {
    relabel.push_back({{"sourceLabels", J::array({"__meta_kubernetes_pod_label_strata_dev_pool"})},
                       {"targetLabel", "pool"}});
    relabel.push_back(
        {{"sourceLabels", J::array({"__meta_kubernetes_pod_label_strata_dev_version"})},
         {"targetLabel", "version"}});
  }
  relabel.push_back(
      {{"sourceLabels", J::array({"__meta_kubernetes_pod_name"})}, {"targetLabel", "replica"}});
  relabel.push_back({{"targetLabel", "role"}, {"replacement", role}, {"action", "replace"}});
  const std::string name = n.instance + "-" + std::string(component);
  J o = Object("monitoring.coreos.com/v1", "ServiceMonitor", name, Selector(n, component));
  o["spec"] = {
      {"selector", {{"matchLabels", Selector(n, component)}}},
      {"endpoints",
       J::array({{{"port", "http"},
                  {"path", "/metrics"},
                  {"interval", fmt::format("{}s", spec.prometheus.scrape_interval.count())},
                  {"relabelings", relabel}}})}};
  return o;
}

J GatewayDeployment(const Names& n, const std::string& gateway_yaml, int port,
                    const RenderOptions& opt) {
  J c = {{"name", "gateway"},
         {"image", opt.image},
         {"imagePullPolicy", opt.image_pull_policy},
         {"command", J::array({kBinary})},
         {"args", J::array({"gateway", "--config", fmt::format("{}/gateway.yaml", kConfigDir),
                            "--host", "0.0.0.0", "--port", std::to_string(port)})},
         {"ports", J::array({{{"name", "http"}, {"containerPort", port}}})},
         {"livenessProbe", HttpProbe("/health", 10, 3, 5)},
         // Not /ready: that is 503 while every pool is scaled to zero, and an unready gateway
         // would never receive the request that wakes a pool up.
         {"readinessProbe", HttpProbe("/health", kProbePeriodS, 2, 2)},
         {"lifecycle", {{"preStop", {{"sleep", {{"seconds", kPreStopPauseS}}}}}}},
         {"resources",
          {{"requests", {{"cpu", "500m"}, {"memory", "256Mi"}}}, {"limits", {{"memory", "1Gi"}}}}},
         {"securityContext", SecurityContext()},
         {"volumeMounts", J::array({Mount("config", kConfigDir, true)})}};
  J o = Object("apps/v1", "Deployment", n.Gateway(), Selector(n, "gateway"));
  o["spec"] = {{"replicas", 1},  // admission limits and canary state are per gateway process
               {"selector", {{"matchLabels", Selector(n, "gateway")}}},
               {"template",
                {{"metadata",
                  {{"labels", Selector(n, "gateway")},
                   {"annotations", {{"strata.dev/config-hash", ConfigHash(gateway_yaml)}}}}},
                 {"spec",
                  {{"terminationGracePeriodSeconds", kPreStopPauseS + kDrainSeconds + 10},
                   {"securityContext", PodSecurityContext()},
                   {"containers", J::array({c})},
                   {"volumes", J::array({ConfigVolume(n.Gateway())})}}}}}};
  return o;
}

J AutoscalerDeployment(const Names& n, const RenderOptions& opt) {
  J c = {{"name", "autoscaler"},
         {"image", opt.image},
         {"imagePullPolicy", opt.image_pull_policy},
         {"command", J::array({kBinary})},
         {"args", J::array({"autoscaler", "-f", fmt::format("{}/deploy.yaml", kConfigDir),
                            "--prometheus", opt.prometheus_url, "--host", "0.0.0.0", "--port",
                            std::to_string(kAutoscalerPort)})},
         {"ports", J::array({{{"name", "http"}, {"containerPort", kAutoscalerPort}}})},
         {"livenessProbe", {{"tcpSocket", {{"port", "http"}}}, {"periodSeconds", 10}}},
         {"readinessProbe", HttpProbe("/metrics", kProbePeriodS, 2, 2)},
         {"resources",
          {{"requests", {{"cpu", "100m"}, {"memory", "64Mi"}}}, {"limits", {{"memory", "256Mi"}}}}},
         {"securityContext", SecurityContext()},
         {"volumeMounts", J::array({Mount("config", kConfigDir, true)})}};
  J o = Object("apps/v1", "Deployment", n.Autoscaler(), Selector(n, "autoscaler"));
  o["spec"] = {{"replicas", 1},  // one decision maker per deployment
               {"selector", {{"matchLabels", Selector(n, "autoscaler")}}},
               {"template",
                {{"metadata",
                  {{"labels", Selector(n, "autoscaler")},
                   {"annotations", {{"strata.dev/config-hash", ConfigHash(opt.spec_yaml)}}}}},
                 {"spec",
                  {{"securityContext", PodSecurityContext()},
                   {"containers", J::array({c})},
                   {"volumes", J::array({ConfigVolume(n.Autoscaler())})}}}}}};
  return o;
}

Result<J> PrometheusRule(const Names& n, const DeploymentSpec& spec) {
  ASSIGN_OR_RETURN(J doc, YamlToJson(RulesYaml(spec), "the rules file"));
  if (!doc.is_object() || !doc.contains("groups") || !doc["groups"].is_array())
    return Status::Internal("the rules file has no groups: list");
  J o = Object("monitoring.coreos.com/v1", "PrometheusRule", n.instance, Selector(n, "rules"));
  o["spec"] = {{"groups", doc["groups"]}};
  return o;
}

std::string FileName(const J& object) {
  std::string kind = object["kind"].get<std::string>();  // json-access: our own object
  std::transform(kind.begin(), kind.end(), kind.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return kind + "-" + object["metadata"]["name"].get<std::string>() + ".yaml";  // json-access
}

Status CheckNames(const Names& n, const DeploymentSpec& spec) {
  RETURN_IF_ERROR(CheckObjectName(n.Autoscaler(), "metadata.name"));
  for (size_t i = 0; i < spec.pools.size(); ++i) {
    const PoolSpec& p = spec.pools[i];
    const std::string at = fmt::format("pools[{}]", i);
    RETURN_IF_ERROR(CheckObjectName(n.Pool(p.name), at + ".name"));
    RETURN_IF_ERROR(CheckLabelValue(p.model, at + ".model"));
    RETURN_IF_ERROR(CheckLabelValue(p.version, at + ".version"));
  }
  return Status::Ok();
}

std::string ModelsTxt(const DeploymentSpec& spec, const RenderOptions& opt) {
  std::string out = fmt::format(
      "# The model files of this deployment: copy each file (left) onto the volume of the\n"
      "# PersistentVolumeClaim '{}' at the path on the right (the claim is mounted read-only at\n"
      "# {} in every replica).\n",
      opt.models_claim, kModelsDir);
  std::map<std::string, std::string> seen;
  for (const PoolSpec& p : spec.pools) seen[PodModelPath(spec, p)] = spec.ModelPath(p);
  for (const auto& [pod_path, local] : seen)
    out += local + "\t" + pod_path.substr(kModelsDir.size() + 1) + "\n";
  return out;
}

}  // namespace

int StartupBudgetSeconds(double model_gb) {
  return std::max(300, static_cast<int>(std::ceil(120 + 30 * std::max(0.0, model_gb))));
}

Result<std::vector<ManifestFile>> RenderK8s(const DeploymentSpec& spec, const RenderOptions& opt) {
  const Names n{spec.name};
  RETURN_IF_ERROR(CheckNames(n, spec));
  if (opt.spec_yaml.empty())
    return Status::InvalidArgument(
        "spec_yaml: the deploy spec's text is required (the "
        "autoscaler's ConfigMap)");
  if (!opt.namespace_name.empty())
    RETURN_IF_ERROR(CheckObjectName(opt.namespace_name, "--namespace"));
  std::vector<J> objects;
  std::map<std::string, std::string> dns;
  for (const PoolSpec& p : spec.pools) {
    if (!p.serve_yaml.empty())
      objects.push_back(
          ConfigMap(n.Pool(p.name) + "-serve", PoolLabels(n, p), "serve.yaml", p.serve_yaml));
    objects.push_back(PoolDeployment(n, spec, p, opt));
    objects.push_back(
        Service(kHeadless, n.Pool(p.name), PoolLabels(n, p), PoolSelector(n, p), kReplicaPort));
    objects.push_back(ScaledObject(n, spec, p, opt));
    dns[p.name] = opt.namespace_name.empty()
                      ? n.Pool(p.name)
                      : fmt::format("{}.{}.svc.cluster.local", n.Pool(p.name), opt.namespace_name);
  }
  ASSIGN_OR_RETURN(std::string gateway_yaml, GatewayYaml(spec, dns, kReplicaPort));
  // The status page /ui shows the autoscaler's decisions (its /status), unless the spec set ui:.
  if (gateway_yaml.rfind("ui:", 0) != 0 && gateway_yaml.find("\nui:") == std::string::npos) {
    if (!gateway_yaml.empty() && gateway_yaml.back() != '\n') gateway_yaml += '\n';
    gateway_yaml +=
        fmt::format("ui:\n  control_url: http://{}:{}/status\n", n.Autoscaler(), kAutoscalerPort);
  }
  const int gateway_port = spec.gateway.port > 0 ? spec.gateway.port : kGatewayPort;
  objects.push_back(ConfigMap(n.Gateway(), Selector(n, "gateway"), "gateway.yaml", gateway_yaml));
  objects.push_back(GatewayDeployment(n, gateway_yaml, gateway_port, opt));
  objects.push_back(Service(kClusterIp, n.Gateway(), Selector(n, "gateway"), Selector(n, "gateway"),
                            gateway_port));
  objects.push_back(
      ConfigMap(n.Autoscaler(), Selector(n, "autoscaler"), "deploy.yaml", opt.spec_yaml));
  objects.push_back(AutoscalerDeployment(n, opt));
  objects.push_back(Service(kClusterIp, n.Autoscaler(), Selector(n, "autoscaler"),
                            Selector(n, "autoscaler"), kAutoscalerPort));
  objects.push_back(ServiceMonitor(n, "replica", "replica", true, spec));
  objects.push_back(ServiceMonitor(n, "gateway", "gateway", false, spec));
  objects.push_back(ServiceMonitor(n, "autoscaler", "control", false, spec));
  ASSIGN_OR_RETURN(J rule, PrometheusRule(n, spec));
  objects.push_back(std::move(rule));

  std::vector<ManifestFile> files;
  files.reserve(objects.size() + 2);
  J resources = J::array();
  for (const J& o : objects) {
    files.push_back({FileName(o), ToYaml(o)});
    resources.push_back(files.back().name);
  }
  J kustomization = {{"apiVersion", "kustomize.config.k8s.io/v1beta1"}, {"kind", "Kustomization"}};
  if (!opt.namespace_name.empty()) kustomization["namespace"] = opt.namespace_name;
  kustomization["resources"] = resources;
  files.push_back({"kustomization.yaml", ToYaml(kustomization)});
  files.push_back({"models.txt", ModelsTxt(spec, opt)});
  return files;
}

Status WriteManifests(const std::vector<ManifestFile>& files, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create " + dir + ": " + ec.message());
  for (const ManifestFile& f : files) {
    const std::string path = (std::filesystem::path(dir) / f.name).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << f.text;
    out.close();
    if (!out) return Status::IoError("cannot write " + path);
  }
  return Status::Ok();
}

}  // namespace strata::control
