// control/render_k8s and control/manifest_yaml: the objects a spec renders to (probes, drain,
// resources, model paths, KEDA's trigger and HPA behavior, headless Services, the gateway's DNS
// names, ServiceMonitor relabelling, the PrometheusRule's groups, kustomization.yaml), names
// that Kubernetes would refuse are errors naming the spec key, and the YAML writer's scalars read
// back with the same types.
#include "control/render_k8s.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "control/manifest_yaml.h"

namespace strata::control {
namespace {

using J = OrderedJson;

// A YAML node as JSON with YAML's own typing: a quoted scalar is a string; a plain one is null,
// a boolean, an integer, a float or else a string (what a Kubernetes reader would decide).
J Typed(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      J o = J::object();
      for (const auto& kv : n) o[kv.first.Scalar()] = Typed(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      J a = J::array();
      for (const auto& item : n) a.push_back(Typed(item));
      return a;
    }
    case YAML::NodeType::Scalar: {
      if (n.Tag() == "!") return n.Scalar();  // quoted
      const std::string& s = n.Scalar();
      if (s == "null" || s == "~") return nullptr;
      if (s == "true" || s == "false") return s == "true";
      bool b;
      if (YAML::convert<bool>::decode(n, b)) return b;  // yes/no/on/off
      try {
        size_t used = 0;
        const long long i = std::stoll(s, &used);
        if (used == s.size()) return i;
        const double d = std::stod(s, &used);
        if (used == s.size()) return d;
      } catch (const std::exception&) {
      }
      return s;
    }
    default:
      return nullptr;
  }
}

J ReadBack(const std::string& yaml) { return Typed(YAML::Load(yaml)); }

DeploymentSpec TestSpec() {
  DeploymentSpec s;
  s.name = "ref";
  s.base_dir = "/srv/spec";
  s.models = {{"tiny", {{"v1", "../models/tiny-v1.gguf"}, {"v2", "/abs/tiny-v2.gguf"}}}};
  PoolSpec general;
  general.name = "general";
  general.model = "tiny";
  general.version = "v1";
  general.replicas = {1, 3};
  general.devices = {{"int8"}, 4, 2, 0};
  general.slo.e2e_p95_ms = 500;
  PoolSpec gold = general;
  gold.name = "long-context";
  gold.version = "v2";
  gold.replicas = {0, 4};
  gold.devices = {{"bf16"}, 16, 8, 1};
  gold.serve_yaml = "engine:\n  max_num_seqs: 8\n";
  gold.serve_args = {"--chat-template", "chatml"};
  s.pools = {general, gold};
  s.gateway.extra_yaml =
      "routes:\n  - name: gold\n    match: {priority: gold}\n    to: long-context\n"
      "  - name: default\n    to: general\n";
  return s;
}

RenderOptions TestOptions() {
  RenderOptions o;
  o.spec_yaml = "apiVersion: strata.dev/v1\nkind: Deployment\n";
  o.namespace_name = "llm";
  o.model_bytes = {{"general", 2.0 * 1024 * 1024 * 1024}};
  return o;
}

std::map<std::string, J> Render(const DeploymentSpec& s, const RenderOptions& o,
                                std::map<std::string, std::string>* text = nullptr) {
  auto files = RenderK8s(s, o);
  EXPECT_TRUE(files.ok()) << files.status().message();
  std::map<std::string, J> out;
  if (!files.ok()) return out;
  for (const ManifestFile& f : *files) {
    if (text) (*text)[f.name] = f.text;
    if (f.name.ends_with(".yaml")) out[f.name] = ReadBack(f.text);
  }
  return out;
}

TEST(ManifestYaml, ScalarsReadBackWithTheirTypes) {
  const J v = {{"int", 3},
               {"float", 0.25},
               {"neg", -7},
               {"yes", true},
               {"nothing", nullptr},
               {"str_int", "1"},
               {"str_float", "1e3"},
               {"str_bool", "true"},
               {"str_yes", "yes"},
               {"str_on", "On"},
               {"str_null", "null"},
               {"empty", ""},
               {"time", "12:30"},
               {"colon space", "a: b"},
               {"hash", "a #b"},
               {"dash", "-x"},
               {"star", "*ref"},
               {"plain", "app.kubernetes.io/name"},
               {"promql", "max(strata_control_desired_replicas{pool=\"a\"})"},
               {"unicode", "café ✓"},
               {"ctrl", std::string("a\x01"
                                    "b")},
               {"multi", "line one\n  indented\n\nlast\n"},
               {"multi_keep", "a\nb\n\n\n"},
               {"multi_strip", "a\nb"},
               {"multi_lead", " lead\nx\n"},
               {"empty_obj", J::object()},
               {"empty_arr", J::array()},
               {"nested", J::array({J::array({1, 2}), J::object({{"k", "v"}, {"n", {{"x", 1}}}}),
                                    "s", J::array()})},
               {"1starts-with-digit", "k"},
               {"strata.dev/pool", "p"}};
  const std::string yaml = ToYaml(v);
  EXPECT_EQ(ReadBack(yaml), v) << yaml;
  // Multi-line text reads as a literal block (ConfigMaps stay readable).
  EXPECT_NE(yaml.find("multi: |\n  line one\n    indented\n\n  last\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("multi_strip: |-\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("multi_keep: |+\n"), std::string::npos) << yaml;
}

TEST(ManifestYaml, YamlToJsonKeepsStructureAndRefusesHostileInput) {
  auto j =
      YamlToJson("groups:\n  - name: g\n    rules:\n      - record: r\n        expr: 1\n", "rules");
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ((*j)["groups"][0]["rules"][0]["expr"], "1");  // every scalar a string
  EXPECT_FALSE(YamlToJson("a: [", "rules").ok());
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += "[";
  auto d = YamlToJson(deep, "rules");
  ASSERT_FALSE(d.ok());
  // Billion laughs: aliases expand past the node bound, an error and no blow-up.
  std::string laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c)
    laughs += std::string(1, c) + ": &" + c + " [*" + static_cast<char>(c - 1) + ", *" +
              static_cast<char>(c - 1) + ", *" + static_cast<char>(c - 1) + ", *" +
              static_cast<char>(c - 1) + ", *" + static_cast<char>(c - 1) + "]\n";
  auto l = YamlToJson(laughs, "rules");
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("rules: too many nodes"), std::string::npos)
      << l.status().message();
  EXPECT_FALSE(YamlToJson(std::string(kMaxYamlToJsonBytes + 1, ' '), "rules").ok());
}

TEST(RenderK8s, EveryObjectHasItsFileAndTheKustomizationListsThem) {
  std::map<std::string, std::string> text;
  auto objs = Render(TestSpec(), TestOptions(), &text);
  for (const char* f :
       {"deployment-ref-pool-general.yaml", "service-ref-pool-general.yaml",
        "scaledobject-ref-pool-general.yaml", "configmap-ref-pool-long-context-serve.yaml",
        "deployment-ref-pool-long-context.yaml", "configmap-ref-gateway.yaml",
        "deployment-ref-gateway.yaml", "service-ref-gateway.yaml", "configmap-ref-autoscaler.yaml",
        "deployment-ref-autoscaler.yaml", "service-ref-autoscaler.yaml",
        "servicemonitor-ref-replica.yaml", "servicemonitor-ref-gateway.yaml",
        "servicemonitor-ref-autoscaler.yaml", "prometheusrule-ref.yaml", "kustomization.yaml"})
    EXPECT_EQ(objs.count(f), 1u) << f;
  EXPECT_EQ(objs.count("configmap-ref-pool-general-serve.yaml"), 0u) << "no serve: map, no file";
  const J& k = objs["kustomization.yaml"];
  EXPECT_EQ(k["kind"], "Kustomization");
  EXPECT_EQ(k["namespace"], "llm");
  EXPECT_EQ(k["resources"].size(), objs.size() - 1);
  for (const J& r : k["resources"]) EXPECT_EQ(objs.count(r.get<std::string>()), 1u) << r;
  // models.txt: where each file goes on the models volume.
  EXPECT_NE(text["models.txt"].find("/srv/models/tiny-v1.gguf\ttiny/v1/tiny-v1.gguf"),
            std::string::npos)
      << text["models.txt"];
  EXPECT_NE(text["models.txt"].find("/abs/tiny-v2.gguf\ttiny/v2/tiny-v2.gguf"), std::string::npos);
}

TEST(RenderK8s, ReplicaDeploymentProbesDrainResourcesAndModel) {
  auto objs = Render(TestSpec(), TestOptions());
  const J& d = objs["deployment-ref-pool-general.yaml"];
  EXPECT_EQ(d["apiVersion"], "apps/v1");
  EXPECT_FALSE(d["spec"].contains("replicas")) << "KEDA's HPA owns the count";
  EXPECT_EQ(d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
  EXPECT_EQ(d["spec"]["selector"]["matchLabels"]["strata.dev/pool"], "general");
  const J& pod = d["spec"]["template"]["spec"];
  EXPECT_EQ(pod["terminationGracePeriodSeconds"], kPreStopPauseS + kDrainSeconds + 10);
  const J& c = pod["containers"][0];
  // 2 GiB model: 120 + 60 = 180 s -> the 300 s floor, 60 probes of 5 s.
  EXPECT_EQ(c["startupProbe"]["httpGet"]["path"], "/ready");
  EXPECT_EQ(c["startupProbe"]["failureThreshold"].get<int>() *
                c["startupProbe"]["periodSeconds"].get<int>(),
            300);
  EXPECT_EQ(c["livenessProbe"]["httpGet"]["path"], "/health");
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"], "/ready");
  EXPECT_EQ(c["lifecycle"]["preStop"]["sleep"]["seconds"], kPreStopPauseS);
  EXPECT_EQ(c["resources"]["requests"]["cpu"], "2000m");
  EXPECT_EQ(c["resources"]["requests"]["memory"], "4096Mi");
  EXPECT_EQ(c["resources"]["limits"]["memory"], "4096Mi");
  EXPECT_FALSE(c["resources"]["limits"].contains("cpu"));
  EXPECT_EQ(c["args"], J::array({"serve", "--model", "/models/tiny/v1/tiny-v1.gguf", "--host",
                                 "0.0.0.0", "--port", "8000", "--shutdown-timeout", "30",
                                 "--served-model-name", "tiny"}));
  EXPECT_EQ(pod["volumes"][0]["persistentVolumeClaim"]["claimName"], "strata-models");
  EXPECT_EQ(pod["volumes"][0]["persistentVolumeClaim"]["readOnly"], true);
  EXPECT_EQ(c["securityContext"]["readOnlyRootFilesystem"], true);

  const J& g = objs["deployment-ref-pool-long-context.yaml"];
  const J& gc = g["spec"]["template"]["spec"]["containers"][0];
  // No file size known: devices.memory_gb 16 -> 120 + 480 = 600 s.
  EXPECT_EQ(gc["startupProbe"]["failureThreshold"], 120);
  EXPECT_EQ(gc["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(gc["resources"]["requests"]["nvidia.com/gpu"], "1");
  const J& args = gc["args"];
  EXPECT_EQ(args[2], "/models/tiny/v2/tiny-v2.gguf");
  EXPECT_EQ(args[9], "--config");
  EXPECT_EQ(args[10], "/etc/strata/serve.yaml");
  EXPECT_EQ(args[11], "--chat-template");
  EXPECT_EQ(args[12], "chatml");
  EXPECT_EQ(g["metadata"]["labels"]["strata.dev/version"], "v2");
  EXPECT_EQ(objs["configmap-ref-pool-long-context-serve.yaml"]["data"]["serve.yaml"],
            "engine:\n  max_num_seqs: 8\n");
  // A changed serve config changes the pod template (a rollout).
  DeploymentSpec changed = TestSpec();
  changed.pools[1].serve_yaml = "engine:\n  max_num_seqs: 16\n";
  auto objs2 = Render(changed, TestOptions());
  EXPECT_NE(objs2["deployment-ref-pool-long-context.yaml"]["spec"]["template"]["metadata"],
            g["spec"]["template"]["metadata"]);
}

// Clients send the spec's model name (issue 42): every replica serves it, whichever version its
// pool runs (the files' stems are tiny-v1 / tiny-v2), and carries the version as a pod label.
TEST(RenderK8s, EveryReplicaServesTheSpecsModelNameAndIsLabelledWithItsVersion) {
  auto objs = Render(TestSpec(), TestOptions());
  for (const auto& [pool, version] :
       std::map<std::string, std::string>{{"general", "v1"}, {"long-context", "v2"}}) {
    const J& d = objs["deployment-ref-pool-" + pool + ".yaml"];
    const J& args = d["spec"]["template"]["spec"]["containers"][0]["args"];
    ASSERT_GE(args.size(), 2u) << pool;
    EXPECT_EQ(args[args.size() - 2], "--served-model-name") << pool;
    EXPECT_EQ(args[args.size() - 1], "tiny") << pool;
    const J& labels = d["spec"]["template"]["metadata"]["labels"];
    EXPECT_EQ(labels["strata.dev/model"], "tiny") << pool;
    EXPECT_EQ(labels["strata.dev/version"], version) << pool;
    EXPECT_EQ(labels["strata.dev/pool"], pool);
  }
  // The gateway's pools carry the same model and version labels (x-strata-model-version).
  const YAML::Node gw =
      YAML::Load(objs["configmap-ref-gateway.yaml"]["data"]["gateway.yaml"].get<std::string>());
  std::map<std::string, std::string> version_by_pool;
  for (const YAML::Node& p : gw["pools"]) {
    EXPECT_EQ(p["labels"]["model"].as<std::string>(), "tiny");
    version_by_pool[p["name"].as<std::string>()] = p["labels"]["version"].as<std::string>();
  }
  EXPECT_EQ(version_by_pool,
            (std::map<std::string, std::string>{{"general", "v1"}, {"long-context", "v2"}}));
}

TEST(RenderK8s, ScaledObjectCarriesTheAutoscalersDecision) {
  DeploymentSpec s = TestSpec();
  s.autoscaling.interval = std::chrono::seconds(20);
  s.autoscaling.scale_up_max_factor = 2.0;
  auto objs = Render(s, TestOptions());
  const J& so = objs["scaledobject-ref-pool-long-context.yaml"];
  EXPECT_EQ(so["apiVersion"], "keda.sh/v1alpha1");
  EXPECT_EQ(so["spec"]["scaleTargetRef"]["name"], "ref-pool-long-context");
  EXPECT_EQ(so["spec"]["minReplicaCount"], 0);
  EXPECT_EQ(so["spec"]["maxReplicaCount"], 4);
  EXPECT_EQ(so["spec"]["pollingInterval"], 20);
  const J& t = so["spec"]["triggers"][0];
  EXPECT_EQ(t["type"], "prometheus");
  EXPECT_EQ(t["metricType"], "AverageValue");
  EXPECT_EQ(t["metadata"]["threshold"], "1");
  EXPECT_EQ(t["metadata"]["activationThreshold"], "0");
  EXPECT_EQ(t["metadata"]["ignoreNullValues"], "false");
  EXPECT_EQ(
      t["metadata"]["query"],
      "max(strata_control_desired_replicas{service=\"ref-autoscaler\",pool=\"long-context\"})");
  EXPECT_EQ(t["metadata"]["serverAddress"], TestOptions().prometheus_url);
  const J& b = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"];
  EXPECT_EQ(b["scaleUp"]["policies"][0],
            J({{"type", "Percent"}, {"value", 100}, {"periodSeconds", 20}}));
  EXPECT_EQ(b["scaleDown"]["stabilizationWindowSeconds"], 0);
}

TEST(RenderK8s, ServicesMonitorsGatewayAndRules) {
  std::map<std::string, std::string> text;
  auto objs = Render(TestSpec(), TestOptions(), &text);
  const J& svc = objs["service-ref-pool-general.yaml"];
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["selector"]["strata.dev/pool"], "general");
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], kReplicaPort);
  // The gateway finds each pool through its headless Service's DNS name.
  const std::string gw =
      objs["configmap-ref-gateway.yaml"]["data"]["gateway.yaml"].get<std::string>();
  EXPECT_NE(gw.find("ref-pool-general.llm.svc.cluster.local"), std::string::npos) << gw;
  EXPECT_NE(gw.find("ref-pool-long-context.llm.svc.cluster.local"), std::string::npos) << gw;
  EXPECT_NE(gw.find("\nui:\n  control_url: http://ref-autoscaler:9100/status\n"), std::string::npos)
      << gw;
  const J& gd = objs["deployment-ref-gateway.yaml"];
  EXPECT_EQ(gd["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"],
            "/health");
  const J& ad = objs["deployment-ref-autoscaler.yaml"];
  EXPECT_EQ(ad["spec"]["template"]["spec"]["containers"][0]["args"][0], "autoscaler");
  EXPECT_EQ(ad["spec"]["template"]["spec"]["containers"][0]["args"][6], "0.0.0.0");
  EXPECT_EQ(objs["configmap-ref-autoscaler.yaml"]["data"]["deploy.yaml"], TestOptions().spec_yaml);
  // Relabelling gives the labels strata up's file_sd gives.
  const J& sm = objs["servicemonitor-ref-replica.yaml"];
  std::map<std::string, J> relabel;
  for (const J& r : sm["spec"]["endpoints"][0]["relabelings"])
    relabel[r["targetLabel"].get<std::string>()] = r;
  EXPECT_EQ(relabel["pool"]["sourceLabels"][0], "__meta_kubernetes_pod_label_strata_dev_pool");
  EXPECT_EQ(relabel["version"]["sourceLabels"][0],
            "__meta_kubernetes_pod_label_strata_dev_version");
  EXPECT_EQ(relabel["replica"]["sourceLabels"][0], "__meta_kubernetes_pod_name");
  EXPECT_EQ(relabel["role"]["replacement"], "replica");
  const J& smc = objs["servicemonitor-ref-autoscaler.yaml"];
  EXPECT_EQ(smc["spec"]["endpoints"][0]["relabelings"].back()["replacement"], "control");
  EXPECT_EQ(sm["spec"]["endpoints"][0]["interval"], "5s");
  // The PrometheusRule holds the rules file's groups.
  const J& rule = objs["prometheusrule-ref.yaml"];
  ASSERT_TRUE(rule["spec"]["groups"].is_array());
  bool recorded = false;
  for (const J& g : rule["spec"]["groups"])
    for (const J& r : g["rules"])
      recorded |= r.contains("record") && r["record"] == "strata:pool_desired_replicas";
  EXPECT_TRUE(recorded) << text["prometheusrule-ref.yaml"];
}

TEST(RenderK8s, NamesKubernetesRefusesAreErrorsNamingTheKey) {
  auto error = [](const DeploymentSpec& s, const RenderOptions& o = TestOptions()) {
    auto r = RenderK8s(s, o);
    return r.ok() ? std::string("(ok)") : r.status().message();
  };
  DeploymentSpec s = TestSpec();
  s.name = std::string(60, 'a');
  EXPECT_NE(error(s).find("metadata.name: makes the Kubernetes name"), std::string::npos)
      << error(s);
  s = TestSpec();
  s.name = "9ref";
  EXPECT_NE(error(s).find("metadata.name:"), std::string::npos) << error(s);
  s = TestSpec();
  s.pools[1].name = std::string(60, 'p');  // ref-pool- + 60 > 63
  EXPECT_NE(error(s).find("pools[1].name: makes the Kubernetes name"), std::string::npos)
      << error(s);
  s = TestSpec();
  s.pools[0].version = "v1+local";
  s.models[0].versions[0].version = "v1+local";
  EXPECT_NE(error(s).find("pools[0].version: 'v1+local' is not a Kubernetes label value"),
            std::string::npos)
      << error(s);
  RenderOptions o = TestOptions();
  o.namespace_name = "Bad_NS";
  EXPECT_NE(error(TestSpec(), o).find("--namespace:"), std::string::npos);
  o = TestOptions();
  o.spec_yaml.clear();
  EXPECT_NE(error(TestSpec(), o).find("spec_yaml:"), std::string::npos);
}

TEST(RenderK8s, StartupBudgetGrowsWithTheModel) {
  EXPECT_EQ(StartupBudgetSeconds(0), 300);
  EXPECT_EQ(StartupBudgetSeconds(6), 300);
  EXPECT_EQ(StartupBudgetSeconds(10), 420);
  EXPECT_EQ(StartupBudgetSeconds(140), 4320);
}

TEST(RenderK8s, WritesTheFilesIntoTheFolder) {
  auto files = RenderK8s(TestSpec(), TestOptions());
  ASSERT_TRUE(files.ok()) << files.status().message();
  const std::string dir = ::testing::TempDir() + "/render_k8s_out/nested";
  ASSERT_TRUE(WriteManifests(*files, dir).ok());
  for (const ManifestFile& f : *files) {
    std::ifstream in(dir + "/" + f.name, std::ios::binary);
    std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(got, f.text) << f.name;
  }
  std::filesystem::remove_all(::testing::TempDir() + "/render_k8s_out");
  EXPECT_FALSE(WriteManifests(*files, "/proc/no/such/dir").ok());
}

}  // namespace
}  // namespace strata::control
