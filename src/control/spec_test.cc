// control/spec: a full spec parses into the structs with their defaults; every kind of error names
// its key path; routes are checked through the gateway's parser at load; hostile YAML is an error,
// never a crash; files are bounded and relative model paths resolve against the spec's folder.
#include "control/spec.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "yamlcfg/wrong_kind_sweep.h"

namespace strata::control {
namespace {

constexpr const char* kSpec = R"(
apiVersion: strata.dev/v1
kind: Deployment
metadata: {name: demo}
models:
  - name: tiny
    versions:
      - {version: v1, path: models/tiny-v1.gguf}
      - {version: v2, path: /abs/tiny-v2.gguf}
pools:
  - name: long-context
    model: tiny
    version: v2
    replicas: {min: 0, max: 3}
    devices: {precisions: [bf16, int8], memory_gb: 8, cpus: 4, gpus: 1}
    slo: {ttft_p95_ms: 500, tpot_p95_ms: 50, e2e_p95_ms: 100, error_rate: 0.001}
    workload: decode_heavy
    serve:
      engine: {threads: 2, kv_cache: {memory: 256MiB}}
    serve_args: [--chat-template, chatml]
    labels: {tier: gold}
  - name: general
    model: tiny
    version: v1
    rollout: {strategy: canary, min_requests: 7}
gateway:
  port: 0
  routes:
    - name: long
      match: {min_prompt_tokens: 4097, priority: gold}
      to: long-context
    - name: default
      to: general
  admission: {gold_max_wait_ms: 1000}
autoscaling:
  interval_s: 5
  scale_up_max_factor: 3
  scale_down_stabilization_s: 60
  scale_to_zero_idle_s: 120
  cold_start_hold_ms: 30000
  hysteresis: 0.2
  error_weight: 500
  enabled: false
prometheus: {port: 0, scrape_interval_s: 2, binary: /usr/bin/prometheus}
rollout:
  steps: [5, 50, 100]
  min_requests: 20
  min_duration_s: 10
  interval_s: 2
  guards: {ttft_p95_max_ratio: 1.5, error_rate_max_delta: 0.05}
)";

constexpr const char* kMinimal = R"(
apiVersion: strata.dev/v1
kind: Deployment
metadata: {name: m}
models: [{name: tiny, versions: [{version: v1, path: tiny.gguf}]}]
pools: [{name: p, model: tiny}]
)";

std::string ErrorOf(const std::string& yaml) {
  auto s = ParseDeploymentSpec(yaml);
  return s.ok() ? std::string("(ok)") : s.status().message();
}

// kSpec with `from` replaced by `to` (the text must contain `from`).
std::string With(const std::string& from, const std::string& to, const char* base = kSpec) {
  std::string s = base;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(DeploymentSpec, FullSpecParses) {
  auto r = ParseDeploymentSpec(kSpec, "/srv/deploy");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const DeploymentSpec& s = *r;
  EXPECT_EQ(s.name, "demo");
  ASSERT_EQ(s.models.size(), 1u);
  ASSERT_EQ(s.models[0].versions.size(), 2u);
  ASSERT_EQ(s.pools.size(), 2u);
  const PoolSpec& p = s.pools[0];
  EXPECT_EQ(p.name, "long-context");
  EXPECT_EQ(p.version, "v2");
  EXPECT_EQ(p.replicas.min, 0);
  EXPECT_EQ(p.replicas.max, 3);
  EXPECT_EQ(p.devices.precisions, (std::vector<std::string>{"bf16", "int8"}));
  EXPECT_DOUBLE_EQ(p.devices.memory_gb, 8);
  EXPECT_DOUBLE_EQ(p.devices.cpus, 4);
  EXPECT_EQ(p.devices.gpus, 1);
  EXPECT_DOUBLE_EQ(p.slo.ttft_p95_ms, 500);
  EXPECT_DOUBLE_EQ(p.slo.tpot_p95_ms, 50);
  EXPECT_DOUBLE_EQ(p.slo.e2e_p95_ms, 100);
  EXPECT_DOUBLE_EQ(p.slo.error_rate, 0.001);
  EXPECT_EQ(p.workload, Workload::kDecodeHeavy);
  EXPECT_EQ(WorkloadName(p.workload), "decode_heavy");
  EXPECT_EQ(p.serve_args, (std::vector<std::string>{"--chat-template", "chatml"}));
  EXPECT_EQ(p.labels.at("tier"), "gold");
  // The serve map is re-emitted as YAML that loads back to the same values.
  const YAML::Node serve = YAML::Load(p.serve_yaml);
  EXPECT_EQ(serve["engine"]["threads"].as<int>(), 2);
  EXPECT_EQ(serve["engine"]["kv_cache"]["memory"].as<std::string>(), "256MiB");
  // The gateway keys but port are kept as YAML.
  EXPECT_EQ(s.gateway.port, 0);
  const YAML::Node extra = YAML::Load(s.gateway.extra_yaml);
  EXPECT_FALSE(extra["port"]);
  EXPECT_EQ(extra["routes"].size(), 2u);
  EXPECT_EQ(extra["admission"]["gold_max_wait_ms"].as<int>(), 1000);
  const AutoscalingSpec& a = s.autoscaling;
  EXPECT_EQ(a.interval.count(), 5);
  EXPECT_DOUBLE_EQ(a.scale_up_max_factor, 3);
  EXPECT_EQ(a.scale_down_stabilization.count(), 60);
  EXPECT_EQ(a.scale_to_zero_idle.count(), 120);
  EXPECT_EQ(a.cold_start_hold.count(), 30000);
  EXPECT_DOUBLE_EQ(a.hysteresis, 0.2);
  EXPECT_DOUBLE_EQ(a.error_weight, 500);
  EXPECT_FALSE(a.enabled);
  EXPECT_EQ(s.prometheus.port, 0);
  EXPECT_EQ(s.prometheus.scrape_interval.count(), 2);
  EXPECT_EQ(s.prometheus.binary, "/usr/bin/prometheus");
  // Lookups and model paths (relative ones against base_dir).
  EXPECT_EQ(s.FindPool("general"), &s.pools[1]);
  EXPECT_EQ(s.FindPool("nope"), nullptr);
  EXPECT_EQ(s.FindModel("tiny"), &s.models[0]);
  EXPECT_EQ(s.models[0].Find("v3"), nullptr);
  EXPECT_EQ(s.ModelPath(s.pools[1]), "/srv/deploy/models/tiny-v1.gguf");
  EXPECT_EQ(s.ModelPath(s.pools[0]), "/abs/tiny-v2.gguf");
}

TEST(DeploymentSpec, MinimalHasTheDefaults) {
  auto r = ParseDeploymentSpec(kMinimal);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const PoolSpec& p = r->pools[0];
  EXPECT_EQ(p.version, "v1");  // the model's only version
  EXPECT_EQ(p.replicas.min, 1);
  EXPECT_EQ(p.replicas.max, 1);
  EXPECT_TRUE(p.devices.precisions.empty());
  EXPECT_DOUBLE_EQ(p.devices.memory_gb, 1);
  EXPECT_EQ(p.devices.gpus, 0);
  EXPECT_DOUBLE_EQ(p.slo.error_rate, 0.01);
  EXPECT_EQ(p.workload, Workload::kBalanced);
  EXPECT_TRUE(p.serve_yaml.empty());
  EXPECT_EQ(r->gateway.port, 8080);
  EXPECT_EQ(r->autoscaling.interval.count(), 15);
  EXPECT_EQ(r->autoscaling.scale_down_stabilization.count(), 300);
  EXPECT_DOUBLE_EQ(r->autoscaling.scale_up_max_factor, 2.0);
  EXPECT_TRUE(r->autoscaling.enabled);
  EXPECT_EQ(r->prometheus.port, 9090);
  EXPECT_EQ(r->prometheus.binary, "prometheus");
  EXPECT_EQ(r->ModelPath(p), "tiny.gguf");
  // One pool and no routes: the default route to it.
  const YAML::Node extra = YAML::Load(r->gateway.extra_yaml);
  ASSERT_EQ(extra["routes"].size(), 1u);
  EXPECT_EQ(extra["routes"][0]["to"].as<std::string>(), "p");
}

struct BadCase {
  std::string from, to, error;
};

TEST(DeploymentSpec, ErrorsNameThePath) {
  const BadCase cases[] = {
      {"apiVersion: strata.dev/v1", "apiVersion: v2",
       "apiVersion: must be strata.dev/v1 (got \"v2\")"},
      {"kind: Deployment", "kind: Pod", "kind: must be Deployment (got \"Pod\")"},
      {"metadata: {name: demo}", "metadata: {name: Demo}", "metadata.name: must be 1 to 40"},
      {"metadata: {name: demo}", "metadata: {}", "metadata.name: is required"},
      {"prometheus:", "prometheu:", "prometheu: unknown key (did you mean prometheus?)"},
      {"prometheus:", "pools: []\nprometheus:", "pools: duplicate key"},
      {"    workload: decode_heavy", "    workload: decode",
       "pools[0].workload: expected balanced, decode_heavy or prefill_heavy (got \"decode\")"},
      {"replicas: {min: 0, max: 3}", "replicas: {min: 3, max: 2}",
       "pools[0].replicas.max: must be >= replicas.min (3 > 2)"},
      {"replicas: {min: 0, max: 3}", "replicas: {min: 0, max: 0}",
       "pools[0].replicas.max: must be >= 1"},
      {"replicas: {min: 0, max: 3}", "replicas: {min: -1, max: 3}",
       "pools[0].replicas.min: must be in [0, 1000], got -1"},
      {"replicas: {min: 0, max: 3}", "replicas: {min: 0, max: 1001}",
       "pools[0].replicas.max: must be in [0, 1000], got 1001"},
      {"replicas: {min: 0, max: 3}", "replicas: {min: zero, max: 3}",
       "pools[0].replicas.min: expected an integer in [0, 1000]"},
      {"replicas: {min: 0, max: 3}", "replicas: {min: 0, max: 3, mx: 1}",
       "pools[0].replicas.mx: unknown key (did you mean max?)"},
      {"precisions: [bf16, int8]", "precisions: [bf16, int4]",
       "pools[0].devices.precisions[1]: expected one of fp32, fp16, bf16, int8, fp8 (got "
       "\"int4\")"},
      {"precisions: [bf16, int8]", "precisions: [bf16, bf16]",
       "pools[0].devices.precisions[1]: duplicate precision 'bf16'"},
      {"memory_gb: 8", "memory_gb: 0",
       "pools[0].devices.memory_gb: must be in (0, 1000000], got 0"},
      {"memory_gb: 8", "memory_gb: .nan", "pools[0].devices.memory_gb: expected a number"},
      {"error_rate: 0.001", "error_rate: 1.5",
       "pools[0].slo.error_rate: must be in [0, 1], got 1.5"},
      {"ttft_p95_ms: 500", "ttft_p95_ms: -1",
       "pools[0].slo.ttft_p95_ms: must be in [0, 3600000], got -1"},
      {"    version: v2", "    version: v9", "pools[0].version: model 'tiny' has no version 'v9'"},
      {"    version: v2\n", "", "pools[0].version: is required (model 'tiny' has 2 versions)"},
      {"    model: tiny\n    version: v1", "    model: huge\n    version: v1",
       "pools[1].model: no model named 'huge'"},
      {"  - name: general", "  - name: long-context",
       "pools[1].name: duplicate pool 'long-context'"},
      {"  - name: general", "  - name: General_", "pools[1].name: must be 1 to 40 of [a-z0-9-]"},
      {"  - name: general", "  - name: -general", "pools[1].name: must be 1 to 40 of [a-z0-9-]"},
      {"{version: v2, path: /abs/tiny-v2.gguf}", "{version: v1, path: /abs/tiny-v2.gguf}",
       "models[0].versions[1].version: duplicate version 'v1'"},
      {"{version: v2, path: /abs/tiny-v2.gguf}", "{version: v2}",
       "models[0].versions[1].path: is required (a GGUF file)"},
      {"{version: v2, path: /abs/tiny-v2.gguf}", "{version: v 2, path: x}",
       "models[0].versions[1].version: must be 1 to 63 letters"},
      {"serve:\n      engine:", "serve:\n      model: {path: x.gguf}\n      engine:",
       "pools[0].serve.model.path: is set by the spec"},
      {"    serve:\n", "    serve: [1]\n    x:\n", "pools[0].serve: expected a mapping"},
      {"labels: {tier: gold}", "labels: {9tier: gold}", "pools[0].labels.9tier: a label name is"},
      {"labels: {tier: gold}", "labels: {tier: gold, tier: silver}",
       "pools[0].labels.tier: duplicate key"},
      {"  port: 0\n", "  port: 0\n  port: 1\n", "gateway.port: duplicate key"},
      {"  port: 0\n", "  port: 70000\n", "gateway.port: must be in [0, 65535], got 70000"},
      {"  port: 0\n", "  pools: []\n", "gateway.pools: the gateway's pools are the spec's pools"},
      // Route checks come from the gateway's own parser, under `gateway.`.
      {"      to: general", "      to: x", "gateway.routes[1].to: no pool named 'x'"},
      {"  admission: {gold_max_wait_ms: 1000}", "  admission: {gold_max_wait: 1000}",
       "gateway.admission.gold_max_wait: unknown key"},
      {"  routes:", "  route:", "gateway.route: unknown key"},
      {"interval_s: 5", "interval_s: 0", "autoscaling.interval_s: must be in [1, 3600], got 0"},
      {"scale_up_max_factor: 3", "scale_up_max_factor: 1",
       "autoscaling.scale_up_max_factor: must be in (1, 100], got 1"},
      {"hysteresis: 0.2", "hysteresis: 1", "autoscaling.hysteresis: must be in [0, 0.99], got 1"},
      {"enabled: false", "enabled: maybe", "autoscaling.enabled: expected true or false"},
      {"binary: /usr/bin/prometheus", "binary: \"\"", "prometheus.binary: is required"},
      {"models:\n  - name: tiny", "models:\n  - name: tiny\n    path: x",
       "models[0].path: unknown key"},
  };
  for (const BadCase& c : cases) {
    const std::string err = ErrorOf(With(c.from, c.to));
    EXPECT_NE(err.find(c.error), std::string::npos) << "want: " << c.error << "\ngot:  " << err;
  }
}

// The spec's model name is the name clients send (kServedModelNameFlag): a pool may not rename it.
TEST(DeploymentSpec, APoolMayNotSetTheServedModelName) {
  const std::vector<BadCase> cases = {
      {"serve_args: [--chat-template, chatml]",
       "serve_args: [--chat-template, chatml, --served-model-name, x]",
       "pools[0].serve_args[2]: --served-model-name is set by the spec"},
      {"serve_args: [--chat-template, chatml]", "serve_args: [--served-model-name=x]",
       "pools[0].serve_args[0]: --served-model-name is set by the spec"},
      {"serve:\n      engine:", "serve:\n      model: {served_model_name: x}\n      engine:",
       "pools[0].serve.model.served_model_name: is set by the spec"},
  };
  for (const BadCase& c : cases) {
    const std::string err = ErrorOf(With(c.from, c.to));
    EXPECT_NE(err.find(c.error), std::string::npos) << "want: " << c.error << "\ngot:  " << err;
  }
  // Only the flag itself (or its `=` form) is refused, not an argument that starts like it.
  EXPECT_EQ(
      ErrorOf(With("serve_args: [--chat-template, chatml]", "serve_args: [--served-model-names]")),
      "(ok)");
}

TEST(DeploymentSpec, StructuralErrors) {
  EXPECT_NE(ErrorOf("").find("(top level): expected a mapping"), std::string::npos);
  EXPECT_NE(ErrorOf("[1, 2]").find("(top level): expected a mapping"), std::string::npos);
  EXPECT_NE(ErrorOf("a: [").find("YAML error"), std::string::npos);
  EXPECT_NE(ErrorOf(With("pools: [{name: p, model: tiny}]", "pools: []", kMinimal))
                .find("pools: at least one pool is required"),
            std::string::npos);
  EXPECT_NE(ErrorOf(With("models: [{name: tiny, versions: [{version: v1, path: tiny.gguf}]}]",
                         "models: {tiny: 1}", kMinimal))
                .find("models: expected a list"),
            std::string::npos);
  // Two pools and no routes: the gateway needs one.
  EXPECT_NE(ErrorOf(With("pools: [{name: p, model: tiny}]",
                         "pools: [{name: p, model: tiny}, {name: q, model: tiny}]", kMinimal))
                .find("gateway.routes: at least one route is required"),
            std::string::npos);
}

TEST(DeploymentSpec, HostileInputIsAnErrorNotACrash) {
  // Deep nesting.
  std::string deep = "apiVersion: " + std::string(10000, '[') + std::string(10000, ']');
  EXPECT_NE(ErrorOf(deep), "(ok)");
  // Alias fan-out (a billion laughs) in a free-form map that would be re-emitted.
  std::string laughs = With("    serve:\n", R"(    serve:
      a: &a [x, x, x, x, x, x, x, x, x, x]
      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
      e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
      f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
)");
  EXPECT_NE(ErrorOf(laughs).find("too large or too deep"), std::string::npos) << ErrorOf(laughs);
  // Too big.
  EXPECT_NE(ErrorOf(std::string(kMaxSpecBytes + 1, ' ')).find("larger than"), std::string::npos);
  // A huge key gets no suggestion but an error.
  EXPECT_NE(
      ErrorOf(With("prometheus:", std::string(500, 'k') + ": 1\nprometheus:")).find("unknown key"),
      std::string::npos);
  // Non-scalar keys.
  EXPECT_NE(ErrorOf(With("prometheus:", "[a]: 1\nprometheus:")).find("keys must be strings"),
            std::string::npos);
}

// Random byte edits of a valid spec: every result is a spec or an error naming something, never a
// crash (a small in-test fuzzer; the gateway's own parser is fuzzed by gateway/config_fuzz_test).
TEST(DeploymentSpec, MutatedSpecsNeverCrash) {
  const std::string base = kSpec;
  const char alphabet[] = "{}[]:,-&*!|>'\"#\n 0a_.";
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  auto next = [&x] {  // xorshift64: deterministic
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  int ok = 0, errors = 0;
  for (int i = 0; i < 1500; ++i) {
    std::string t = base;
    const int edits = 1 + static_cast<int>(next() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = next() % t.size();
      const char c = alphabet[next() % (sizeof(alphabet) - 1)];
      switch (next() % 3) {
        case 0:
          t[at] = c;
          break;
        case 1:
          t.insert(t.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        default:
          t.erase(at, 1 + next() % 8);
          break;
      }
    }
    auto r = ParseDeploymentSpec(t);
    if (r.ok()) {
      ++ok;
      EXPECT_FALSE(r->pools.empty());
    } else {
      ++errors;
      EXPECT_FALSE(r.status().message().empty());
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(ok + errors, 0);
}

// Every key of the full spec (kSpec with the gateway's tracing section and every rollout key, at
// the top and in a pool), in turn, gets a value of every wrong YAML kind: refused naming its path
// where the kind is wrong, never a crash or another kind of error (yamlcfg/wrong_kind_sweep.h has
// the contract). `serve:` is kept as text for the replica's own parser (its sweep is in
// engine/serving/replica_config_test.cc).
TEST(DeploymentSpec, EveryKeyWithEveryWrongTypeIsAnErrorNamingIt) {
  YAML::Node root = YAML::Load(kSpec);
  root["gateway"]["tracing"] = YAML::Load(
      "{otlp_endpoint: 'http://127.0.0.1:4318', sample_ratio: 0.5, service_name: gw, "
      "queue_capacity: 64}");
  root["rollout"]["strategy"] = "surge";
  root["rollout"]["guards"] = YAML::Load(
      "{ttft_p95_max_ratio: 1.5, tpot_p95_max_ratio: 1.3, latency_min_delta_s: 0.05, "
      "error_rate_max_delta: 0.05}");
  root["pools"][1]["rollout"] = YAML::Load(
      "{strategy: canary, steps: [10, 100], min_requests: 7, min_duration_s: 5, interval_s: 1, "
      "guards: {ttft_p95_max_ratio: 2, tpot_p95_max_ratio: 2, latency_min_delta_s: 0.1, "
      "error_rate_max_delta: 0.1}}");
  YAML::Emitter doc;
  doc << root;
  const yamlcfg::SweepResult r = yamlcfg::SweepWrongKinds(
      doc.c_str(), [](const std::string& y) { return ParseDeploymentSpec(y).status(); },
      {"pools[0].serve"});
  for (const std::string& f : r.failures) ADD_FAILURE() << f;
  const std::set<std::string> swept(r.paths.begin(), r.paths.end());
  auto under = [&](std::string_view prefix) {
    return std::count_if(r.paths.begin(), r.paths.end(),
                         [&](const std::string& p) { return p.starts_with(prefix); });
  };
  EXPECT_EQ(under("rollout"), 11);  // the section, its 5 keys, guards and its 4
  EXPECT_EQ(under("pools[1].rollout"), 11);
  EXPECT_EQ(under("gateway.tracing"), 5);
  for (const char* path : {"pools[0].serve", "autoscaling.enabled", "models[0].versions[1].path"})
    EXPECT_TRUE(swept.contains(path)) << path;
  EXPECT_FALSE(swept.contains("pools[0].serve.engine"));
  EXPECT_EQ(r.cases, static_cast<int>(r.paths.size() * std::size(yamlcfg::kWrongKinds)));
  EXPECT_GT(r.cases, 400);
  EXPECT_GT(r.errors, r.cases / 2);
}

TEST(DeploymentSpec, LoadResolvesAgainstTheFolderAndNamesTheFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("spec_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "deploy.yaml").string();
  { std::ofstream(file) << kMinimal; }
  auto r = LoadDeploymentSpec(file);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->ModelPath(r->pools[0]), (dir / "tiny.gguf").string());
  { std::ofstream(file) << With("name: m", "name: M", kMinimal); }
  auto bad = LoadDeploymentSpec(file);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind(file + ": metadata.name:", 0), 0u)
      << bad.status().message();
  EXPECT_EQ(LoadDeploymentSpec((dir / "none.yaml").string()).status().code(),
            StatusCode::kNotFound);
  { std::ofstream(file) << std::string(kMaxSpecBytes + 10, '#'); }
  EXPECT_NE(LoadDeploymentSpec(file).status().message().find("larger than"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::control

namespace strata::control {
namespace {

// examples/deploy.yaml: the reference architecture's three pools and routing tree, on the bundled
// model (its relative path resolves to <source>/build/models/strata-tiny.gguf).
TEST(DeploymentSpec, ExampleDeployYaml) {
  auto r = LoadDeploymentSpec(STRATA_EXAMPLE_DEPLOY_YAML);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const DeploymentSpec& s = *r;
  EXPECT_EQ(s.name, "reference");
  ASSERT_EQ(s.pools.size(), 3u);
  const PoolSpec& lc = s.pools[0];
  const PoolSpec& comp = s.pools[1];
  const PoolSpec& gen = s.pools[2];
  EXPECT_EQ(lc.name, "long-context");
  EXPECT_EQ(comp.name, "compliance");
  EXPECT_EQ(gen.name, "general");
  EXPECT_DOUBLE_EQ(lc.slo.e2e_p95_ms, 100);                // Gold
  EXPECT_DOUBLE_EQ(comp.slo.e2e_p95_ms, 300);              // Silver
  EXPECT_DOUBLE_EQ(gen.slo.e2e_p95_ms, 500);               // Bronze
  EXPECT_GT(lc.devices.memory_gb, gen.devices.memory_gb);  // the high-memory pool
  EXPECT_EQ(comp.replicas.min, 0);
  EXPECT_EQ(gen.workload, Workload::kDecodeHeavy);
  const std::filesystem::path example(STRATA_EXAMPLE_DEPLOY_YAML);
  const std::filesystem::path model =
      (example.parent_path().parent_path() / "build/models/strata-tiny.gguf").lexically_normal();
  for (const PoolSpec& p : s.pools) EXPECT_EQ(s.ModelPath(p), model.string());
  if (std::filesystem::path(STRATA_BUNDLED_MODEL).lexically_normal() == model) {
    EXPECT_TRUE(std::filesystem::exists(model)) << model;  // the default build dir: it was built
  }
  // The routing tree: long gold prompts, legal adapters, default.
  const YAML::Node routes = YAML::Load(s.gateway.extra_yaml)["routes"];
  ASSERT_EQ(routes.size(), 3u);
  EXPECT_EQ(routes[0]["match"]["priority"].as<std::string>(), "gold");
  EXPECT_EQ(routes[0]["match"]["min_prompt_tokens"].as<int>(), 4097);
  EXPECT_EQ(routes[0]["to"].as<std::string>(), "long-context");
  EXPECT_EQ(routes[1]["match"]["adapter_prefix"].as<std::string>(), "finetune-legal-");
  EXPECT_EQ(routes[1]["to"].as<std::string>(), "compliance");
  EXPECT_FALSE(routes[2]["match"]);
  EXPECT_EQ(routes[2]["to"].as<std::string>(), "general");
}

// `rollout:` at the top level is every pool's default; a pool's own keys override it key by key
// (wherever the top level appears in the document); absent everywhere, the defaults.
TEST(DeploymentSpec, RolloutSectionMergesTopLevelAndPool) {
  auto s = ParseDeploymentSpec(kSpec);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->rollout.strategy, RolloutStrategy::kAuto);
  EXPECT_EQ(s->rollout.steps, (std::vector<double>{5, 50, 100}));
  const RolloutSpec& lc = s->pools[0].rollout;  // no section of its own: the top level's
  EXPECT_EQ(lc.strategy, RolloutStrategy::kAuto);
  EXPECT_EQ(lc.min_requests, 20);
  EXPECT_EQ(lc.min_duration, std::chrono::seconds(10));
  EXPECT_EQ(lc.interval, std::chrono::seconds(2));
  EXPECT_DOUBLE_EQ(lc.guards.ttft_p95_max_ratio, 1.5);
  EXPECT_DOUBLE_EQ(lc.guards.tpot_p95_max_ratio, 1.2);
  EXPECT_DOUBLE_EQ(lc.guards.error_rate_max_delta, 0.05);
  const RolloutSpec& g = s->pools[1].rollout;  // its own keys over the top level's
  EXPECT_EQ(g.strategy, RolloutStrategy::kCanary);
  EXPECT_EQ(g.min_requests, 7);
  EXPECT_EQ(g.steps, (std::vector<double>{5, 50, 100}));
  EXPECT_EQ(g.min_duration, std::chrono::seconds(10));
  EXPECT_EQ(RolloutStrategyName(g.strategy), "canary");

  auto m = ParseDeploymentSpec(kMinimal);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const RolloutSpec& d = m->pools[0].rollout;
  EXPECT_EQ(d.strategy, RolloutStrategy::kAuto);
  EXPECT_EQ(d.steps, (std::vector<double>{10, 50, 100}));
  EXPECT_EQ(d.min_requests, 50);
  EXPECT_EQ(d.min_duration, std::chrono::seconds(30));
  EXPECT_EQ(d.interval, std::chrono::seconds(5));

  // The top level after the pools in the document still applies to them.
  auto late = ParseDeploymentSpec(std::string(kMinimal) + "rollout: {strategy: surge}\n");
  ASSERT_TRUE(late.ok()) << late.status().message();
  EXPECT_EQ(late->pools[0].rollout.strategy, RolloutStrategy::kSurge);
}

TEST(DeploymentSpec, RolloutErrorsNameThePath) {
  const BadCase cases[] = {
      {"strategy: canary", "strategy: blue-green",
       "pools[1].rollout.strategy: expected surge or canary (got \"blue-green\")"},
      {"min_requests: 7}", "min_requests: 0}",
       "pools[1].rollout.min_requests: must be in [1, 1000000], got 0"},
      {"min_requests: 7}", "min_requests: 7, steps: []}",
       "pools[1].rollout.steps: at least one step is required"},
      {"min_requests: 7}", "min_requests: 7, stepz: [1]}",
       "pools[1].rollout.stepz: unknown key (did you mean steps?)"},
      {"steps: [5, 50, 100]", "steps: [5, 50, 50]",
       "rollout.steps[2]: must be greater than the step before (50)"},
      {"steps: [5, 50, 100]", "steps: [0, 50]", "rollout.steps[0]: must be in (0, 100], got 0"},
      {"steps: [5, 50, 100]", "steps: [5, 150]", "rollout.steps[1]: must be in (0, 100], got 150"},
      {"steps: [5, 50, 100]", "steps: 5", "rollout.steps: expected a list"},
      {"\n  interval_s: 2", "\n  interval_s: 0", "rollout.interval_s: must be in [1, 3600], got 0"},
      {"min_duration_s: 10", "min_duration_s: -1", "rollout.min_duration_s: must be in [0, 86400]"},
      {"error_rate_max_delta: 0.05", "error_rate_max_delta: 2",
       "rollout.guards.error_rate_max_delta: must be in [0, 1], got 2"},
      {"ttft_p95_max_ratio: 1.5", "ttft_p95_max_ratio: 0",
       "rollout.guards.ttft_p95_max_ratio: must be in (0, 1000], got 0"},
      {"guards: {", "guards: {p99: 1, ", "rollout.guards.p99: unknown key"},
      // A canary needs a route that names the pool alone.
      {"    - name: default\n      to: general", "    - name: default\n      to: long-context",
       "pools[1].rollout.strategy: canary needs a route in gateway.routes whose to: is pool "
       "'general' alone"},
  };
  for (const BadCase& c : cases) {
    const std::string err = ErrorOf(With(c.from, c.to));
    EXPECT_NE(err.find(c.error), std::string::npos) << "want: " << c.error << "\ngot:  " << err;
  }
}

}  // namespace
}  // namespace strata::control
