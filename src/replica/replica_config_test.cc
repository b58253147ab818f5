#include "replica/replica_config.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "yamlcfg/wrong_kind_sweep.h"

namespace strata::replica {
namespace {

namespace kv = engine::kv;
namespace kvtier = engine::kvtier;
namespace sched = engine::sched;
using engine::serving::ParseKvTiersYaml;
using engine::serving::ServingConfig;

std::string Error(std::string_view yaml) {
  auto c = ParseReplicaConfigYaml(yaml);
  EXPECT_FALSE(c.ok()) << yaml;
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << yaml;
  return std::string(c.status().message());
}

TEST(ReplicaConfigTest, OneSetOfDefaultsTheServeDefaults) {
  const ReplicaConfig c;
  EXPECT_EQ(c.server.host, "127.0.0.1");
  EXPECT_EQ(c.server.port, 8080);
  EXPECT_EQ(c.server.io_threads, 2);
  EXPECT_EQ(c.server.max_body_bytes, 4u << 20);
  EXPECT_EQ(c.server.idle_timeout_s, 60);
  EXPECT_EQ(c.server.request_timeout_s, 30);
  EXPECT_EQ(c.server.shutdown_timeout_s, 30);
  EXPECT_EQ(c.server.max_tokens_cap, 4096);
  EXPECT_EQ(c.engine.kv_cache.memory, "1GiB");
  EXPECT_EQ(c.engine.kv_cache.dtype, kv::KvDType::kF16);
  EXPECT_EQ(c.engine.kv_cache.block_size, 16);
  EXPECT_TRUE(c.engine.kv_cache.prefix_cache);
  EXPECT_EQ(c.engine.scheduler.max_num_seqs, 64);
  EXPECT_EQ(c.engine.scheduler.max_batched_tokens, 2048);
  EXPECT_EQ(c.engine.scheduler.max_prefill_tokens_with_decodes, 0);
  EXPECT_EQ(c.engine.scheduler.max_queued_requests, 256);
  EXPECT_EQ(c.engine.max_model_len, 0);
  EXPECT_EQ(c.engine.threads, 0);
  EXPECT_FALSE(c.engine.kv_tiers.enabled());
  EXPECT_EQ(c.engine.kv_tier_prefetch_timeout_s, 1.0);
  EXPECT_TRUE(c.Validate().ok()) << c.Validate().ToString();
  // The scheduler's own defaults are the replica's (one struct, not a copy).
  EXPECT_EQ(sched::SchedulerConfig{}.max_queued_requests, c.engine.scheduler.max_queued_requests);
  // An empty document is the defaults.
  auto empty = ParseReplicaConfigYaml("");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(ReplicaConfigToYaml(*empty), ReplicaConfigToYaml(c));
}

TEST(ReplicaConfigTest, LoadsNestedKeysAndKeepsTheRestDefault) {
  auto c = ParseReplicaConfigYaml(R"(
model:
  path: /models/1b.gguf
  served_model_name: llama
server:
  port: 0
  api_keys: [k1, "k 2"]
engine:
  threads: 4
  kv_cache: { memory: 512MiB, dtype: q8_0, prefix_cache: false }
  scheduler:
    max_num_seqs: 8
    max_prefill_tokens_with_decodes: 128
  kv_tier_prefetch_timeout_s: 0.25
)");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.path, "/models/1b.gguf");
  EXPECT_EQ(c->model.served_model_name, "llama");
  EXPECT_EQ(c->server.port, 0);
  EXPECT_EQ(c->server.api_keys, (std::vector<std::string>{"k1", "k 2"}));
  EXPECT_EQ(c->server.host, "127.0.0.1");
  EXPECT_EQ(c->engine.threads, 4);
  EXPECT_EQ(c->engine.kv_cache.memory, "512MiB");
  EXPECT_EQ(c->engine.kv_cache.dtype, kv::KvDType::kQ8_0);
  EXPECT_FALSE(c->engine.kv_cache.prefix_cache);
  EXPECT_EQ(c->engine.kv_cache.block_size, 16);
  EXPECT_EQ(c->engine.scheduler.max_num_seqs, 8);
  EXPECT_EQ(c->engine.scheduler.max_prefill_tokens_with_decodes, 128);
  EXPECT_EQ(c->engine.scheduler.max_batched_tokens, 2048);
  EXPECT_EQ(c->engine.kv_tier_prefetch_timeout_s, 0.25);
}

TEST(ReplicaConfigTest, UnknownKeysNameTheFullPathAndSuggest) {
  EXPECT_EQ(Error("engine:\n  scheduler:\n    max_num_seq: 8\n"),
            "engine.scheduler.max_num_seq: unknown key (did you mean max_num_seqs?)");
  EXPECT_EQ(Error("sever: {port: 1}"), "sever: unknown key (did you mean server?)");
  EXPECT_EQ(Error("engine: {kv_tiers: {ram: {capacity: 1GiB, colour: red}}}"),
            "engine.kv_tiers.ram.colour: unknown key");
  EXPECT_EQ(Error("engine: {kv_tiers: {redis: {url: 'redis://h:1', capacity: 1GiB}}}"),
            "engine.kv_tiers.redis.capacity: unknown key");
  // The derived scheduler field is not a key.
  EXPECT_EQ(Error("engine: {scheduler: {max_model_len: 8}}"),
            "engine.scheduler.max_model_len: unknown key");
  EXPECT_NE(Error("[1, 2]").find("(top level): expected a mapping"), std::string::npos);
  EXPECT_NE(Error("{[1]: 2}").find("keys must be strings"), std::string::npos);
}

TEST(ReplicaConfigTest, WrongTypesAndValuesNameThePath) {
  struct Case {
    const char* yaml;
    const char* want;
  } cases[] = {
      {"server: {port: abc}", "server.port: expected an integer"},
      {"server: {port: 70000}", "server.port: must be in [0, 65535], got 70000"},
      {"server: {port: 1.5}", "server.port: expected an integer"},
      {"server: {port: 99999999999999999999999}", "server.port: expected an integer"},
      {"server: {host: [a]}", "server.host: expected a string"},
      {"server: {api_keys: [a, [b]]}", "server.api_keys[1]: expected a string"},
      {"server: {api_keys: a}", "server.api_keys: expected a list of strings"},
      {"server: {idle_timeout_s: .nan}", "server.idle_timeout_s: expected a number"},
      {"server: {idle_timeout_s: -1}", "server.idle_timeout_s: must be in"},
      {"engine: 5", "engine: expected a mapping"},
      {"engine: {threads: 100000}", "engine.threads: must be in [0, 1024]"},
      {"engine: {kv_cache: {dtype: f64}}",
       "engine.kv_cache.dtype: expected one of f16, f32, q8_0 (got \"f64\")"},
      {"engine: {kv_cache: {memory: lots}}", "engine.kv_cache.memory: memory size 'lots'"},
      {"engine: {kv_cache: {block_size: 0}}",
       "engine.kv_cache.block_size: must be in [1, 1024], got 0"},
      {"engine: {kv_cache: {prefix_cache: maybe}}",
       "engine.kv_cache.prefix_cache: expected true or false"},
      {"engine: {scheduler: {max_num_seqs: 0}}",
       "engine.scheduler.max_num_seqs: must be in [1, 1024], got 0"},
      {"engine: {scheduler: {max_num_seqs: 2147483647}}",
       "engine.scheduler.max_num_seqs: must be in"},
      {"engine: {scheduler: {max_batched_tokens: -1}}",
       "engine.scheduler.max_batched_tokens: must be in"},
      {"engine: {kv_tiers: {compression: brotli}}",
       "engine.kv_tiers.compression: expected one of none, lz4, zstd"},
      {"engine: {kv_tiers: {ram: {capacity: lots}}}",
       "engine.kv_tiers.ram.capacity: memory size 'lots'"},
      {"engine: {kv_tiers: {ram: {ttl_s: 5}}}", "engine.kv_tiers: ram.capacity"},
      {"engine: {kv_tiers: {disk: {capacity: 1GiB}}}", "engine.kv_tiers: disk.dir"},
      {"engine: {kv_tiers: {ram: {capacity: 1GiB, tenant_quota: {a: nope}}}}",
       "engine.kv_tiers.ram.tenant_quota.a: memory size 'nope'"},
      {"engine: {kv_cache: {prefix_cache: false}, kv_tiers: {ram: {capacity: 1GiB}}}",
       "engine.kv_tiers: KV tiers need the prefix cache"},
  };
  for (const Case& k : cases) {
    const std::string e = Error(k.yaml);
    EXPECT_EQ(e.rfind(k.want, 0), 0u) << k.yaml << " -> " << e;
  }
}

TEST(ReplicaConfigTest, HostileInputIsRefusedWithoutCrashing) {
  EXPECT_NE(Error(std::string(65 << 10, ' ')).find("larger than 64 KiB"), std::string::npos);
  EXPECT_NE(Error(std::string(60000, '[')).find("YAML error"), std::string::npos);
  EXPECT_NE(Error("engine: {" + std::string(50000, '{')).find("YAML error"), std::string::npos);
  EXPECT_NE(Error("engine: [1, 2").find("YAML error"), std::string::npos);
  EXPECT_NE(Error("\t\x01\xff: :").size(), 0u);
  // Aliases: a list of a list of ... is a type error at the first level, not an expansion.
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 8; ++i) bomb += std::string(i ? ", *" : "*") + static_cast<char>(c - 1);
    bomb += "]\n";
  }
  EXPECT_NE(Error("server:\n  api_keys: *j\n" + bomb).find("YAML error"), std::string::npos);
  EXPECT_NE(Error(bomb + "server: {api_keys: *j}\n").find("unknown key"), std::string::npos);
}

ReplicaConfig EverythingSet() {
  ReplicaConfig c;
  c.model.path = "/m/x.gguf";
  c.model.served_model_name = "null";  // strings that look like other YAML types stay strings
  c.model.chat_template_file = "";
  c.server.host = "0.0.0.0";
  c.server.port = 0;
  c.server.api_keys = {"true", "123", "# not a comment", "a: b", "quote\"d", ""};
  c.server.api_key_file = "/k/keys.txt";
  c.server.io_threads = 3;
  c.server.max_body_bytes = 12345;
  c.server.max_header_bytes = 4096;
  c.server.max_connections = 17;
  c.server.idle_timeout_s = 0.1;
  c.server.request_timeout_s = 1e-3;
  c.server.shutdown_timeout_s = 12.5;
  c.server.max_tokens_cap = 99;
  c.server.retry_after_s = 7;
  c.tracing = {"http://127.0.0.1:4318", 0.25, "replica-7"};
  c.engine.threads = 5;
  c.engine.max_model_len = 333;
  c.engine.kv_tier_prefetch_timeout_s = 0.3;
  c.engine.kv_cache = {"0.25", kv::KvDType::kQ8_0, 32, true};
  c.engine.scheduler.max_num_seqs = 3;
  c.engine.scheduler.max_batched_tokens = 77;
  c.engine.scheduler.max_prefill_tokens_with_decodes = 9;
  c.engine.scheduler.max_queued_requests = 11;
  c.engine.scheduler.max_queued_prompt_tokens = 123456789012;
  c.engine.scheduler.aging_s = 2.5;
  auto& t = c.engine.kv_tiers;
  t.ram.emplace();
  t.ram->limits.capacity_bytes = 3ull << 29;
  t.ram->limits.ttl_s = 3600;
  t.ram->limits.tenant_quota_bytes = {{"acme", 512ull << 20}, {"", 1000}};
  t.ram->limits.default_tenant_quota_bytes = 1ull << 30;
  t.disk.emplace();
  t.disk->dir = "/var/cache/strata kv";
  t.disk->limits.capacity_bytes = 50ull << 30;
  t.disk->write_through = true;
  t.disk->fsync = false;
  t.redis.emplace();
  t.redis->url = "redis://127.0.0.1:6379/2";
  t.redis->key_prefix = "p:";
  t.redis->limits.ttl_s = 600;
  t.redis->write_through = false;
  t.redis->timeout_s = 0.75;
  t.compression = kvtier::Compression::kZstd;
  t.max_queued_writes = 64;
  t.io_threads = 3;
  return c;
}

TEST(ReplicaConfigTest, PrintLoadsBackToTheSameConfig) {
  for (const ReplicaConfig& c : {ReplicaConfig{}, EverythingSet()}) {
    ASSERT_TRUE(c.Validate().ok()) << c.Validate().ToString();
    const std::string yaml = ReplicaConfigToYaml(c);
    auto back = ParseReplicaConfigYaml(yaml);
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << yaml;
    EXPECT_EQ(ReplicaConfigToYaml(*back), yaml);
  }
  // Field by field for the non-default one (the printed forms could agree on a field both omit).
  const ReplicaConfig want = EverythingSet();
  auto got = ParseReplicaConfigYaml(ReplicaConfigToYaml(want));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->model.served_model_name, "null");
  EXPECT_EQ(got->server.api_keys, want.server.api_keys);
  EXPECT_EQ(got->server.max_body_bytes, 12345u);
  EXPECT_EQ(got->server.max_header_bytes, 4096u);
  EXPECT_EQ(got->server.max_connections, 17);
  EXPECT_EQ(got->server.idle_timeout_s, 0.1);
  EXPECT_EQ(got->server.request_timeout_s, 1e-3);
  EXPECT_EQ(got->server.retry_after_s, 7);
  EXPECT_EQ(got->engine.kv_cache.memory, "0.25");
  EXPECT_EQ(got->engine.kv_cache.block_size, 32);
  EXPECT_EQ(got->engine.scheduler.max_queued_prompt_tokens, 123456789012);
  EXPECT_EQ(got->engine.scheduler.aging_s, 2.5);
  ASSERT_TRUE(got->engine.kv_tiers.ram && got->engine.kv_tiers.disk && got->engine.kv_tiers.redis);
  EXPECT_EQ(got->engine.kv_tiers.ram->limits.capacity_bytes, 3ull << 29);
  EXPECT_EQ(got->engine.kv_tiers.ram->limits.tenant_quota_bytes,
            want.engine.kv_tiers.ram->limits.tenant_quota_bytes);
  EXPECT_EQ(got->engine.kv_tiers.disk->dir, "/var/cache/strata kv");
  EXPECT_FALSE(got->engine.kv_tiers.disk->fsync);
  EXPECT_EQ(got->engine.kv_tiers.redis->timeout_s, 0.75);
  EXPECT_EQ(got->engine.kv_tiers.compression, kvtier::Compression::kZstd);
  EXPECT_EQ(got->engine.kv_tiers.io_threads, 3);
  // Every key is printed.
  const std::string yaml = ReplicaConfigToYaml(want);
  for (const std::string& path : ReplicaConfigKeyPaths()) {
    const std::string leaf = path.substr(path.rfind('.') + 1);
    EXPECT_NE(yaml.find(leaf + ":"), std::string::npos) << path;
  }
}

// A key given twice is an error at any level (the first one does not silently lose).
TEST(ReplicaConfigTest, DuplicateKeysAreErrors) {
  EXPECT_EQ(Error("server: {port: 1, port: 2}"), "server.port: duplicate key");
  EXPECT_EQ(Error("engine: {threads: 1}\nengine: {threads: 2}\n"), "engine: duplicate key");
  EXPECT_EQ(Error("tracing:\n  sample_ratio: 0.5\n  sample_ratio: 1\n"),
            "tracing.sample_ratio: duplicate key");
  EXPECT_EQ(Error("engine: {kv_tiers: {ram: {capacity: 1GiB, capacity: 2GiB}}}"),
            "engine.kv_tiers.ram.capacity: duplicate key");
  EXPECT_EQ(Error("engine: {kv_tiers: {ram: {capacity: 1GiB, tenant_quota: {a: 1GiB, a: 2GiB}}}}"),
            "engine.kv_tiers.ram.tenant_quota.a: duplicate key");
  auto tiers = ParseKvTiersYaml("ram: {capacity: 1GiB}\nram: {capacity: 2GiB}\n");
  ASSERT_FALSE(tiers.ok());
  EXPECT_EQ(tiers.status().message(), "kv tiers config: ram: duplicate key");
}

// Every key of a config that sets everything (sections too, tracing and the KV tiers included)
// gets a value of every wrong YAML kind: refused naming its path where the kind is wrong, never a
// crash (yamlcfg/wrong_kind_sweep.h has the contract).
TEST(ReplicaConfigTest, EveryKeyWithEveryWrongKindIsAnErrorNamingIt) {
  const yamlcfg::SweepResult r = yamlcfg::SweepWrongKinds(
      ReplicaConfigToYaml(EverythingSet()),
      [](const std::string& y) { return ParseReplicaConfigYaml(y).status(); });
  for (const std::string& f : r.failures) ADD_FAILURE() << f;
  const std::set<std::string> swept(r.paths.begin(), r.paths.end());
  for (const std::string& leaf : ReplicaConfigKeyPaths()) EXPECT_TRUE(swept.contains(leaf)) << leaf;
  for (const char* section :
       {"model", "server", "engine", "tracing", "engine.kv_cache", "engine.scheduler",
        "engine.lora", "engine.kv_tiers", "engine.kv_tiers.ram", "engine.kv_tiers.disk",
        "engine.kv_tiers.redis"})
    EXPECT_TRUE(swept.contains(section)) << section;
  EXPECT_EQ(r.cases, static_cast<int>(r.paths.size() * std::size(yamlcfg::kWrongKinds)));
  EXPECT_GT(r.errors, r.cases / 2);
}

TEST(ReplicaConfigTest, ValidateNamesTheKeyAndItsFlag) {
  ServingConfig c;
  c.scheduler.max_num_seqs = 0;
  Status s = c.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "engine.scheduler.max_num_seqs (--max-num-seqs): must be in [1, 1024], got 0");
  c = ServingConfig{};
  c.kv_cache.memory = "2 bananas";
  EXPECT_NE(c.Validate().message().find("engine.kv_cache.memory (--kv-cache-memory)"),
            std::string::npos);
  ReplicaConfig r;
  r.server.port = -1;
  EXPECT_NE(r.Validate().message().find("server.port (--port)"), std::string::npos);
}

TEST(ReplicaConfigTest, LoraKeysDefaultsRangesAndTheirFlags) {
  const ServingConfig d;
  EXPECT_EQ(d.lora.max_loras, 1);  // vLLM's defaults
  EXPECT_EQ(d.lora.max_lora_rank, 16);
  EXPECT_EQ(d.lora.max_cpu_loras, 0);
  EXPECT_EQ(d.lora.max_loras, sched::SchedulerConfig{}.max_loras);
  auto c = ParseReplicaConfigYaml(
      "engine: {lora: {max_loras: 4, max_lora_rank: 64, "
      "max_cpu_loras: 8}}");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->engine.lora.max_loras, 4);
  EXPECT_EQ(c->engine.lora.max_lora_rank, 64);
  EXPECT_EQ(c->engine.lora.max_cpu_loras, 8);
  auto back = ParseReplicaConfigYaml(ReplicaConfigToYaml(*c));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->engine.lora.max_loras, 4);
  EXPECT_EQ(back->engine.lora.max_cpu_loras, 8);
  EXPECT_EQ(Error("engine: {lora: {max_loras: 0}}"),
            "engine.lora.max_loras: must be in [1, 64], got 0");
  EXPECT_EQ(Error("engine: {lora: {max_loras: 65}}"),
            "engine.lora.max_loras: must be in [1, 64], got 65");
  EXPECT_EQ(Error("engine: {lora: {max_lora_rank: 0}}"),
            "engine.lora.max_lora_rank: must be in [1, 1024], got 0");
  EXPECT_EQ(Error("engine: {lora: {max_cpu_loras: -1}}"),
            "engine.lora.max_cpu_loras: must be in [0, 65536], got -1");
  EXPECT_EQ(Error("engine: {lora: {max_lora: 2}}"),
            "engine.lora.max_lora: unknown key (did you mean max_loras?)");
  EXPECT_EQ(Error("engine: {lora: {max_loras: 4, max_cpu_loras: 2}}"),
            "engine.lora.max_cpu_loras (--max-cpu-loras): must be 0 (unbounded) or at least "
            "engine.lora.max_loras (--max-loras, 4), got 2");
  // The scheduler's copy is derived from engine.lora, not a key of its own.
  EXPECT_EQ(Error("engine: {scheduler: {max_loras: 2}}"),
            "engine.scheduler.max_loras: unknown key");
  ServingConfig v;
  v.lora.max_loras = 100;
  EXPECT_EQ(v.Validate().message(),
            "engine.lora.max_loras (--max-loras): must be in [1, 64], got 100");
  v = ServingConfig{};
  v.lora.max_lora_rank = 5000;
  EXPECT_NE(v.Validate().message().find("engine.lora.max_lora_rank (--max-lora-rank)"),
            std::string::npos);
}

TEST(ReplicaConfigTest, FilesAndTheirErrors) {
  auto missing = LoadReplicaConfigFile("/nonexistent/replica.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/replica.yaml"), std::string::npos);
  const std::string path = ::testing::TempDir() + "/replica_config_test.yaml";
  std::ofstream(path) << "engine:\n  scheduler:\n    max_num_seq: 8\n";
  auto bad = LoadReplicaConfigFile(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            path + ": engine.scheduler.max_num_seq: unknown key (did you mean max_num_seqs?)");
}

// Collects the key paths of a YAML mapping tree, stopping at the config's leaves (a tenant_quota
// leaf is itself a mapping).
void LeafPaths(const YAML::Node& n, const std::string& path, const std::set<std::string>& leaves,
               std::set<std::string>* out) {
  if (!n.IsMap() || leaves.count(path) != 0) {
    out->insert(path);
    return;
  }
  for (const auto& kv : n) {
    LeafPaths(kv.second, path.empty() ? kv.first.Scalar() : path + "." + kv.first.Scalar(), leaves,
              out);
  }
}

// examples/replica.yaml: every key with its default, the optional KV tiers commented out with
// "#~ ". As is, it loads to the defaults; with the tiers uncommented it loads too, and together
// they name every key of the tree.
TEST(ReplicaConfigTest, TheExampleFileDocumentsEveryKey) {
  std::ifstream in(STRATA_EXAMPLE_REPLICA_YAML);
  ASSERT_TRUE(in) << STRATA_EXAMPLE_REPLICA_YAML;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  auto as_is = LoadReplicaConfigFile(STRATA_EXAMPLE_REPLICA_YAML);
  ASSERT_TRUE(as_is.ok()) << as_is.status().ToString();
  EXPECT_EQ(ReplicaConfigToYaml(*as_is), ReplicaConfigToYaml(ReplicaConfig{}));

  std::string uncommented;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find("#~ ");
    if (at != std::string::npos && line.find_first_not_of(' ') == at) line.erase(at, 3);
    uncommented += line + "\n";
  }
  auto full = ParseReplicaConfigYaml(uncommented);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_TRUE(full->engine.kv_tiers.ram && full->engine.kv_tiers.disk &&
              full->engine.kv_tiers.redis);
  const std::vector<std::string> all = ReplicaConfigKeyPaths();
  const std::set<std::string> leaves(all.begin(), all.end());
  EXPECT_GE(leaves.size(), 50u);
  std::set<std::string> present;
  LeafPaths(YAML::Load(uncommented), "", leaves, &present);
  EXPECT_EQ(present, leaves);
}

}  // namespace
}  // namespace strata::replica
