// `strata render k8s` end to end: the real binary renders examples/deploy.yaml and a spec of this
// test (scale to zero, a GPU pool, a serve config); every object validates against the
// Kubernetes, KEDA and prometheus-operator schemas (npm kubernetes-models, run by node:
// tests/k8s/validate.mjs), `kubectl kustomize` renders the folder, `promtool check rules` passes
// on the PrometheusRule's groups; a bad spec is refused naming the key. And the container image
// recipe (deploy/image/build.sh): its root filesystem holds everything the binary needs, proven
// by running the binary inside it with chroot (as root).
// Skips with a message when node, the npm packages, kubectl or promtool are missing
// (scripts/install-deps.sh installs them).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "testing/run_command.h"

namespace strata::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// stdout and stderr together.
int RunCmd(const std::string& cmd, std::string* out) { return RunCommand(cmd + " 2>&1", out); }

const std::string kTestDir = std::string(STRATA_SOURCE_DIR) + "/tests/k8s";

constexpr const char* kSpec = R"(apiVersion: strata.dev/v1
kind: Deployment
metadata:
  name: edge
models:
  - name: tiny
    versions:
      - {version: v1, path: MODEL}
      - {version: v2, path: MODEL}
pools:
  - name: chat
    model: tiny
    version: v2
    replicas: {min: 0, max: 5}
    devices: {precisions: [bf16], memory_gb: 24, cpus: 4, gpus: 2}
    slo: {ttft_p95_ms: 200, tpot_p95_ms: 40, error_rate: 0.02}
    serve:
      engine:
        max_num_seqs: 16
    serve_args: [--chat-template, chatml]
  - name: batch
    model: tiny
    version: v1
    replicas: {min: 1, max: 2}
gateway:
  port: 9000
  routes:
    - name: chat
      match: {priority: gold}
      to: chat
    - name: rest
      to: batch
autoscaling:
  interval_s: 10
  scale_down_stabilization_s: 120
)";

class K8sRenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string out;
    if (RunCmd("node --version", &out) != 0) GTEST_SKIP() << "node not installed";
    if (!fs::exists(kTestDir + "/node_modules/kubernetes-models") ||
        !fs::exists(kTestDir + "/node_modules/@kubernetes-models/keda") ||
        !fs::exists(kTestDir + "/node_modules/@kubernetes-models/prometheus-operator"))
      GTEST_SKIP() << "tests/k8s npm packages not installed (run scripts/install-deps.sh)";
    if (RunCmd("command -v kubectl", &out) != 0) GTEST_SKIP() << "kubectl not installed";
    if (RunCmd("command -v promtool", &out) != 0) GTEST_SKIP() << "promtool not installed";
    dir_ = fs::temp_directory_path() /
           ("strata-k8s-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // Renders `spec` into dir_/name and runs every check on it; returns the objects by kind.
  std::map<std::string, int> RenderAndCheck(const std::string& spec, const std::string& name,
                                            const std::string& flags) {
    std::map<std::string, int> kinds;
    const std::string out_dir = (dir_ / name).string();
    std::string out;
    EXPECT_EQ(
        RunCmd(std::string(STRATA_BIN) + " render k8s -f " + spec + " -o " + out_dir + " " + flags,
               &out),
        0)
        << out;
    const std::string rules = (dir_ / (name + "-rules.json")).string();
    EXPECT_EQ(RunCmd("node " + kTestDir + "/validate.mjs " + out_dir + " --rules " + rules, &out),
              0)
        << out;
    const json summary = json::parse(out.substr(out.find('{')), nullptr, false);
    EXPECT_TRUE(summary.is_object()) << out;
    if (!summary.is_object()) return kinds;
    for (const json& o : summary["objects"]) ++kinds[o["kind"].get<std::string>()];
    EXPECT_EQ(RunCmd("kubectl kustomize " + out_dir, &out), 0) << out;
    int docs = 0;
    for (size_t at = 0; (at = out.find("\nkind: ", at)) != std::string::npos; ++at) ++docs;
    if (out.rfind("kind: ", 0) == 0) ++docs;
    EXPECT_EQ(docs, static_cast<int>(summary["objects"].size())) << out;
    kustomized_ = out;
    EXPECT_EQ(RunCmd("promtool check rules " + rules, &out), 0) << out;
    EXPECT_NE(out.find("SUCCESS"), std::string::npos) << out;
    return kinds;
  }

  fs::path dir_;
  std::string kustomized_;
};

TEST_F(K8sRenderTest, ExampleDeploySpecValidates) {
  const std::string example = std::string(STRATA_SOURCE_DIR) + "/examples/deploy.yaml";
  ASSERT_TRUE(fs::exists(example)) << example;
  auto kinds = RenderAndCheck(example, "example", "--namespace llm");
  // Three pools: a Deployment, a headless Service and a ScaledObject each; the gateway and the
  // autoscaler; one ServiceMonitor per role; one PrometheusRule.
  EXPECT_EQ(kinds["Deployment"], 5);
  EXPECT_EQ(kinds["ScaledObject"], 3);
  EXPECT_EQ(kinds["Service"], 5);
  EXPECT_EQ(kinds["ServiceMonitor"], 3);
  EXPECT_EQ(kinds["PrometheusRule"], 1);
  EXPECT_GE(kinds["ConfigMap"], 2);
  EXPECT_NE(kustomized_.find("namespace: llm"), std::string::npos);
}

TEST_F(K8sRenderTest, ScaleToZeroGpuPoolAndServeConfigValidate) {
  const std::string spec = (dir_ / "deploy.yaml").string();
  std::ofstream(spec) << std::regex_replace(kSpec, std::regex("MODEL"), STRATA_DEFAULT_MODEL);
  auto kinds =
      RenderAndCheck(spec, "edge", "--image registry.local/strata:1 --gpu-resource amd.com/gpu");
  EXPECT_EQ(kinds["Deployment"], 4);
  EXPECT_EQ(kinds["ConfigMap"], 3);  // chat's serve config, gateway.yaml, the spec
  EXPECT_NE(kustomized_.find("amd.com/gpu: \"2\""), std::string::npos) << kustomized_;
  EXPECT_NE(kustomized_.find("image: registry.local/strata:1"), std::string::npos);
  EXPECT_NE(kustomized_.find("minReplicaCount: 0"), std::string::npos);
  std::ifstream models(dir_ / "edge" / "models.txt");
  std::string text((std::istreambuf_iterator<char>(models)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(std::string(STRATA_DEFAULT_MODEL) + "\ttiny/v2/strata-tiny.gguf"),
            std::string::npos)
      << text;
}

TEST_F(K8sRenderTest, BadSpecIsRefusedNamingTheKey) {
  const std::string spec = (dir_ / "bad.yaml").string();
  std::string bad = std::regex_replace(kSpec, std::regex("MODEL"), STRATA_DEFAULT_MODEL);
  bad = std::regex_replace(bad, std::regex("max: 5"), "max: -1");
  std::ofstream(spec) << bad;
  std::string out;
  EXPECT_EQ(
      RunCmd(std::string(STRATA_BIN) + " render k8s -f " + spec + " -o " + (dir_ / "bad").string(),
             &out),
      1)
      << out;
  EXPECT_NE(out.find("pools[0].replicas.max"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir_ / "bad" / "kustomization.yaml"));
}

TEST(K8sImage, RootFilesystemHoldsEverythingTheBinaryNeeds) {
  const fs::path out_dir =
      fs::temp_directory_path() / ("strata-image-" + std::to_string(::getpid()));
  const fs::path build_dir = fs::path(STRATA_BIN).parent_path().parent_path();
  std::string out;
  ASSERT_EQ(RunCmd(std::string(STRATA_SOURCE_DIR) + "/deploy/image/build.sh " + build_dir.string() +
                       " " + out_dir.string(),
                   &out),
            0)
      << out;
  const fs::path rootfs = out_dir / "rootfs";
  EXPECT_TRUE(fs::exists(rootfs / "usr/bin/strata"));
  EXPECT_TRUE(fs::exists(out_dir / "strata-rootfs.tar"));
  std::ifstream dockerfile(out_dir / "Dockerfile");
  std::string df((std::istreambuf_iterator<char>(dockerfile)), std::istreambuf_iterator<char>());
  EXPECT_NE(df.find("\nFROM scratch\n"), std::string::npos) << df;
  // Every library ldd resolves is in the image at its path.
  ASSERT_EQ(RunCmd("ldd " + std::string(STRATA_BIN), &out), 0) << out;
  std::smatch m;
  std::string rest = out;
  int libs = 0;
  while (std::regex_search(rest, m, std::regex(R"((/[^ \n]+\.so[^ \n]*))"))) {
    EXPECT_TRUE(fs::exists(rootfs / m.str(1).substr(1))) << m.str(1);
    ++libs;
    rest = m.suffix();
  }
  EXPECT_GE(libs, 3);
  if (::geteuid() == 0) {  // inside the image's root: nothing of this machine's /usr is visible
    EXPECT_EQ(RunCmd("chroot " + rootfs.string() + " /usr/bin/strata --help", &out), 0) << out;
    EXPECT_NE(out.find("render"), std::string::npos) << out;
    fs::copy_file(STRATA_DEFAULT_MODEL, rootfs / "models/strata-tiny.gguf");
    EXPECT_EQ(RunCmd("chroot --userspec=65532:65532 " + rootfs.string() +
                         " /usr/bin/strata info /models/strata-tiny.gguf",
                     &out),
              0)
        << out;
    EXPECT_NE(out.find("gguf:"), std::string::npos) << out;
  }
  std::error_code ec;
  fs::remove_all(out_dir, ec);
}

}  // namespace
}  // namespace strata::testing
