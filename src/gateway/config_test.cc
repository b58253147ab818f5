// gateway/config: the example parses and routes its three branches, defaults, every kind of
// error names its key path, files are bounded, hostile YAML is an error and never a crash.
#include "gateway/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gateway/routes.h"

namespace strata::gateway {
namespace {

constexpr const char* kMinimal = R"(
pools:
  - name: p
    replicas: [http://127.0.0.1:9000]
routes:
  - name: r
    to: p
)";

std::string ErrorOf(const std::string& yaml) {
  auto c = ParseGatewayConfig(yaml);
  return c.ok() ? std::string("(ok)") : c.status().message();
}

TEST(GatewayConfig, MinimalHasTheDefaults) {
  auto c = ParseGatewayConfig(kMinimal);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const GatewayConfig& g = **c;
  ASSERT_EQ(g.pools.size(), 1u);
  EXPECT_EQ(g.pools[0].replicas[0], "http://127.0.0.1:9000");
  EXPECT_EQ(g.pools[0].max_in_flight, 0);
  EXPECT_FALSE(g.routes[0].match.has_value());
  EXPECT_EQ(g.admission.max_wait[0].count(), 2000);
  EXPECT_EQ(g.admission.max_wait[1].count(), 0);
  EXPECT_EQ(g.admission.max_wait[2].count(), 0);
  EXPECT_EQ(g.health.interval.count(), 500);
  EXPECT_EQ(g.health.eject_after_failures, 3);
  EXPECT_EQ(g.balancer.policy, BalancePolicy::kCost);
  EXPECT_EQ(g.balancer.history_ttl.count(), 120);
  EXPECT_DOUBLE_EQ(g.balancer.tier_seconds_per_block[static_cast<int>(KvTier::kRedis)], 3e-3);
  EXPECT_DOUBLE_EQ(g.balancer.lora_load_s, 0.05);
  EXPECT_EQ(g.upstream.timeout.count(), 600000);
  EXPECT_EQ(g.upstream.retries, 1);
  EXPECT_EQ(g.access_log, "stderr");
  EXPECT_FALSE(g.keys_required());
  EXPECT_EQ(g.FindPool("p"), &g.pools[0]);
  EXPECT_EQ(g.FindPool("q"), nullptr);
}

TEST(GatewayConfig, EveryKeyParses) {
  auto c = ParseGatewayConfig(R"(
pools:
  - name: a
    replicas: [http://10.0.0.1:8080, "http://10.0.0.2:8081/prefix"]
    dns: {name: strata.svc, port: 9000, interval_ms: 2000}
    tokenizer: /models/x.gguf
    chat_template: chatml
    labels: {gpu: a100, zone: eu}
    api_key: secret
    max_in_flight: 7
routes:
  - name: r1
    match:
      model: m
      adapter: ad
      adapter_prefix: finetune-
      tenant: t
      priority: bronze
      min_prompt_tokens: 10
      max_prompt_tokens: 20
      header: {X-Team: Search}
    to: a
  - name: r2
    match:
    to: a
tenants:
  - name: t
    api_keys: [k1, k2]
    tokens_per_minute: 1000.5
    requests_per_minute: 10
    max_concurrency: 3
    default_priority: gold
admission: {gold_max_wait_ms: 100, silver_max_wait_ms: 50, bronze_max_wait_ms: 1}
health: {interval_ms: 20, timeout_ms: 30, eject_after_failures: 5, ejection_base_ms: 40,
         ejection_max_ms: 50}
balancer:
  policy: least_loaded
  metrics_interval_ms: 60
  kv_events_interval_ms: 70
  history_ttl_s: 80
  default_prefill_tokens_per_s: 90
  default_decode_step_s: 0.5
  lora_load_s: 0.25
  tier_seconds_per_block: {pool: 0.1, ram: 0.2, disk: 0.3, redis: 0.4}
upstream: {timeout_s: 1.5, retries: 0}
access_log: "off"
)");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const GatewayConfig& g = **c;
  const PoolConfig& p = g.pools[0];
  EXPECT_EQ(p.replicas.size(), 2u);
  ASSERT_TRUE(p.dns.has_value());
  EXPECT_EQ(p.dns->name, "strata.svc");
  EXPECT_EQ(p.dns->port, 9000);
  EXPECT_EQ(p.dns->interval.count(), 2000);
  EXPECT_EQ(p.tokenizer, "/models/x.gguf");
  EXPECT_EQ(p.chat_template, "chatml");
  EXPECT_EQ(p.labels.at("zone"), "eu");
  EXPECT_EQ(p.api_key, "secret");
  EXPECT_EQ(p.max_in_flight, 7);
  const RouteMatch& m = *g.routes[0].match;
  EXPECT_EQ(*m.model, "m");
  EXPECT_EQ(*m.adapter, "ad");
  EXPECT_EQ(*m.adapter_prefix, "finetune-");
  EXPECT_EQ(*m.tenant, "t");
  EXPECT_EQ(*m.priority, Priority::kBronze);
  EXPECT_EQ(*m.min_prompt_tokens, 10);
  EXPECT_EQ(*m.max_prompt_tokens, 20);
  ASSERT_EQ(m.headers.size(), 1u);
  EXPECT_EQ(m.headers[0].first, "x-team");   // names lower-cased
  EXPECT_EQ(m.headers[0].second, "Search");  // values exact
  EXPECT_FALSE(g.routes[1].match.has_value());
  const TenantConfig& t = g.tenants[0];
  EXPECT_DOUBLE_EQ(t.tokens_per_minute, 1000.5);
  EXPECT_DOUBLE_EQ(t.requests_per_minute, 10);
  EXPECT_EQ(t.max_concurrency, 3);
  EXPECT_EQ(*t.default_priority, Priority::kGold);
  EXPECT_EQ(g.admission.max_wait[1].count(), 50);
  EXPECT_EQ(g.health.ejection_max.count(), 50);
  EXPECT_EQ(g.balancer.policy, BalancePolicy::kLeastLoaded);
  EXPECT_EQ(g.balancer.history_ttl.count(), 80);
  EXPECT_DOUBLE_EQ(g.balancer.tier_seconds_per_block[static_cast<int>(KvTier::kDisk)], 0.3);
  EXPECT_DOUBLE_EQ(g.balancer.lora_load_s, 0.25);
  EXPECT_EQ(g.upstream.timeout.count(), 1500);
  EXPECT_EQ(g.upstream.retries, 0);
  EXPECT_EQ(g.access_log, "off");
  EXPECT_TRUE(g.keys_required());
  EXPECT_EQ(g.TenantForKey("k2"), &t);
  EXPECT_EQ(g.TenantForKey("k3"), nullptr);
  EXPECT_EQ(g.TenantForKey(""), nullptr);
  EXPECT_EQ(g.FindTenant("t"), &t);
}

struct BadCase {
  const char* name;
  std::string yaml;
  std::string error;  // a substring of the message
};

std::string Pools(const std::string& body) { return "pools:\n" + body; }
const std::string kPoolP = "  - name: p\n    replicas: [http://127.0.0.1:9000]\n";
const std::string kRouteR = "routes:\n  - name: r\n    to: p\n";

class GatewayConfigErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(GatewayConfigErrors, NamesTheKeyPath) {
  const BadCase& c = GetParam();
  const std::string err = ErrorOf(c.yaml);
  EXPECT_NE(err.find(c.error), std::string::npos) << "got: " << err << "\nwant: " << c.error;
}

INSTANTIATE_TEST_SUITE_P(
    All, GatewayConfigErrors,
    ::testing::Values(
        BadCase{"unknown_top", std::string(kMinimal) + "poolz: []\n", "poolz: unknown key"},
        BadCase{"suggests", std::string(kMinimal) + "acess_log: off\n",
                "acess_log: unknown key (did you mean access_log?)"},
        BadCase{"unknown_nested", Pools(kPoolP + "    colour: red\n") + kRouteR,
                "pools[0].colour: unknown key"},
        BadCase{"duplicate_key",
                Pools(kPoolP + "    max_in_flight: 1\n    max_in_flight: 2\n") + kRouteR,
                "pools[0].max_in_flight: duplicate key"},
        BadCase{"bad_url",
                Pools("  - name: p\n    replicas: [http://127.0.0.1:9000, ftp://x]\n") + kRouteR,
                "pools[0].replicas[1]: not an http:// URL"},
        BadCase{"dup_url", Pools("  - name: p\n    replicas: [http://a:1, http://a:1]\n") + kRouteR,
                "pools[0].replicas[1]: duplicate replica URL"},
        BadCase{"no_replicas", Pools("  - name: p\n") + kRouteR,
                "pools[0]: needs replicas: or dns:"},
        BadCase{"dns_no_name", Pools("  - name: p\n    dns: {port: 1}\n") + kRouteR,
                "pools[0].dns.name: is required"},
        BadCase{"dns_port", Pools("  - name: p\n    dns: {name: x, port: 70000}\n") + kRouteR,
                "pools[0].dns.port: must be in [1, 65535], got 70000"},
        BadCase{"dup_pool", Pools(kPoolP + kPoolP) + kRouteR, "pools[1].name: duplicate pool 'p'"},
        BadCase{"pool_name", Pools("  - name: 'a b'\n    replicas: [http://a:1]\n") + kRouteR,
                "pools[0].name: must be 1 to 64"},
        BadCase{"no_pools", "routes: []\n", "pools: at least one pool is required"},
        BadCase{"no_routes", Pools(kPoolP), "routes: at least one route is required"},
        BadCase{"to_missing", Pools(kPoolP) + "routes:\n  - name: r\n    to: x\n",
                "routes[0].to: no pool named 'x'"},
        BadCase{"to_absent", Pools(kPoolP) + "routes:\n  - name: r\n", "routes[0].to: is required"},
        BadCase{"dup_route",
                Pools(kPoolP) + "routes:\n  - {name: r, to: p}\n  - {name: r, to: p}\n",
                "routes[1].name: duplicate route 'r'"},
        BadCase{
            "min_gt_max",
            Pools(kPoolP) +
                "routes:\n  - name: r\n    match: {min_prompt_tokens: 5, max_prompt_tokens: 4}\n"
                "    to: p\n",
            "routes[0].match: min_prompt_tokens 5 is greater than max_prompt_tokens 4"},
        BadCase{"priority",
                Pools(kPoolP) + "routes:\n  - {name: r, match: {priority: platinum}, to: p}\n",
                "routes[0].match.priority: expected gold, silver or bronze (got \"platinum\")"},
        BadCase{"negative_tokens",
                Pools(kPoolP) + "routes:\n  - {name: r, match: {min_prompt_tokens: -1}, to: p}\n",
                "routes[0].match.min_prompt_tokens: must be in [0, "},
        BadCase{"huge_int",
                Pools(kPoolP + "    max_in_flight: 99999999999999999999999\n") + kRouteR,
                "pools[0].max_in_flight: expected an integer"},
        BadCase{"float_for_int", Pools(kPoolP + "    max_in_flight: 1.5\n") + kRouteR,
                "pools[0].max_in_flight: expected an integer"},
        BadCase{"nan", std::string(kMinimal) + "tenants:\n  - {name: t, tokens_per_minute: .nan}\n",
                "tenants[0].tokens_per_minute: expected a number"},
        BadCase{"inf",
                std::string(kMinimal) + "tenants:\n  - {name: t, tokens_per_minute: 1e400}\n",
                "tenants[0].tokens_per_minute: expected a number"},
        BadCase{"negative_rate",
                std::string(kMinimal) + "tenants:\n  - {name: t, requests_per_minute: -5}\n",
                "tenants[0].requests_per_minute: must be in [0, "},
        BadCase{"string_for_list", Pools("  - name: p\n    replicas: http://a:1\n") + kRouteR,
                "pools[0].replicas: expected a list of strings"},
        BadCase{"map_for_string", Pools("  - name: {a: b}\n    replicas: [http://a:1]\n") + kRouteR,
                "pools[0].name: expected a string"},
        BadCase{"list_for_map", std::string(kMinimal) + "health: [1, 2]\n",
                "health: expected a mapping"},
        BadCase{"top_not_map", "- a\n- b\n", "(top level): expected a mapping"},
        BadCase{"dup_tenant", std::string(kMinimal) + "tenants:\n  - {name: t}\n  - {name: t}\n",
                "tenants[1].name: duplicate tenant 't'"},
        BadCase{"dup_key_across",
                std::string(kMinimal) +
                    "tenants:\n  - {name: t, api_keys: [k]}\n  - {name: u, api_keys: [k]}\n",
                "tenants[1].api_keys[0]: duplicate API key"},
        BadCase{"empty_key", std::string(kMinimal) + "tenants:\n  - {name: t, api_keys: ['']}\n",
                "tenants[0].api_keys[0]: an API key is empty"},
        BadCase{"policy", std::string(kMinimal) + "balancer: {policy: fastest}\n",
                "balancer.policy: expected cost, round_robin, random or least_loaded"},
        BadCase{"tier", std::string(kMinimal) + "balancer: {tier_seconds_per_block: {tape: 1}}\n",
                "balancer.tier_seconds_per_block.tape: unknown key"},
        BadCase{"prefill_zero",
                std::string(kMinimal) + "balancer: {default_prefill_tokens_per_s: 0}\n",
                "balancer.default_prefill_tokens_per_s: must be in (0, "},
        BadCase{"lora_load", std::string(kMinimal) + "balancer: {lora_load_s: -1}\n",
                "balancer.lora_load_s: must be in [0, 3600]"},
        BadCase{"timeout_zero", std::string(kMinimal) + "upstream: {timeout_s: 0}\n",
                "upstream.timeout_s: must be in (0, 86400]"},
        BadCase{"retries", std::string(kMinimal) + "upstream: {retries: 11}\n",
                "upstream.retries: must be in [0, 10], got 11"},
        BadCase{"wait", std::string(kMinimal) + "admission: {gold_max_wait_ms: -1}\n",
                "admission.gold_max_wait_ms: must be in [0, "},
        BadCase{"ejection_order",
                std::string(kMinimal) + "health: {ejection_base_ms: 50, ejection_max_ms: 10}\n",
                "health.ejection_base_ms: must not exceed health.ejection_max_ms"},
        BadCase{"template", Pools(kPoolP + "    chat_template: nope\n") + kRouteR,
                "pools[0].chat_template: unknown built-in chat template 'nope'"},
        BadCase{"header_dup",
                Pools(kPoolP) +
                    "routes:\n  - name: r\n    match: {header: {x-a: 1, x-a: 2}}\n    to: p\n",
                "routes[0].match.header.x-a: duplicate key"},
        BadCase{"syntax", "pools: [\n", "YAML error"},
        BadCase{"undefined_alias", "pools: *nothing\n", "YAML error"}),
    [](const ::testing::TestParamInfo<BadCase>& i) { return std::string(i.param.name); });

TEST(GatewayConfig, HostileNestingIsAnError) {
  // Deep flow nesting: yaml-cpp's depth guard refuses it; never a stack overflow.
  const std::string flow = "pools: " + std::string(100000, '[') + std::string(100000, ']') + "\n";
  EXPECT_NE(ErrorOf(flow).find("YAML error"), std::string::npos);
  std::string block = "pools:\n";
  std::string indent = "  ";
  for (int i = 0; i < 1000 && block.size() < kMaxGatewayConfigBytes / 2; ++i) {
    block += indent + "- \n";
    indent += "  ";
  }
  const std::string err = ErrorOf(block);
  EXPECT_FALSE(err.empty());
  EXPECT_NE(err, "(ok)");
  // Self-referencing aliases: the walk follows the schema, never the node graph.
  EXPECT_NE(ErrorOf("pools: &a [*a]\n").find("pools[0]: expected a mapping"), std::string::npos)
      << ErrorOf("pools: &a [*a]\n");
  EXPECT_NE(ErrorOf("pools:\n  - &p {name: p, replicas: [http://h:1], labels: {x: *p}}\n" +
                    std::string(kRouteR))
                .find("pools[0].labels.x: expected a string"),
            std::string::npos);
  // Aliases of big lists are shared, not copied.
  std::string alias = "x: &a [";
  for (int i = 0; i < 1000; ++i) alias += "1,";
  alias += "1]\n";
  EXPECT_NE(ErrorOf(alias + kMinimal).find("x: unknown key"), std::string::npos);
}

// Big but legal shapes near the size limit parse in n log n, not n^2 (no hang).
TEST(GatewayConfig, ManyPoolsRoutesAndLabelsStayFast) {
  std::string y = "pools:\n";
  for (int i = 0; i < 8000; ++i)
    y += "  - {name: p" + std::to_string(i) + ", replicas: ['http://h:1']}\n";
  y += "routes:\n";
  for (int i = 0; i < 8000; ++i)
    y += "  - {name: r" + std::to_string(i) + ", to: p" + std::to_string(7999 - i) + "}\n";
  ASSERT_LT(y.size(), kMaxGatewayConfigBytes);
  auto c = ParseGatewayConfig(y);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ((*c)->routes.size(), 8000u);
  std::string labels = "pools:\n  - name: p\n    replicas: ['http://h:1']\n    labels:\n";
  for (int i = 0; i < 30000; ++i) labels += "      l" + std::to_string(i) + ": v\n";
  labels += "      l7: dup\n";
  labels += kRouteR;
  ASSERT_LT(labels.size(), kMaxGatewayConfigBytes);
  EXPECT_NE(ErrorOf(labels).find("pools[0].labels.l7: duplicate key"), std::string::npos);
}

TEST(GatewayConfig, NullValuesAreEmptyOrAbsent) {
  auto c = ParseGatewayConfig(Pools(kPoolP + "    tokenizer:\n") +
                              "routes:\n  - name: r\n    match: {model: ~, adapter_prefix: x}\n"
                              "    to: p\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ((*c)->pools[0].tokenizer, "");
  EXPECT_FALSE((*c)->routes[0].match->model.has_value());
  EXPECT_EQ(*(*c)->routes[0].match->adapter_prefix, "x");
}

TEST(GatewayConfig, TextLargerThanOneMebibyteIsRefused) {
  std::string big(kMaxGatewayConfigBytes + 1, '#');
  EXPECT_NE(ErrorOf(big).find("larger than"), std::string::npos);
}

class GatewayConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("gw_cfg_" + std::to_string(::getpid()) + ".yaml"))
                .string();
  }
  void TearDown() override { std::remove(path_.c_str()); }
  void Write(const std::string& s) { std::ofstream(path_, std::ios::binary) << s; }
  std::string path_;
};

TEST_F(GatewayConfigFile, LoadsAndPrefixesErrorsWithThePath) {
  Write(kMinimal);
  auto ok = LoadGatewayConfig(path_);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ((*ok)->pools[0].name, "p");
  Write(std::string(kMinimal) + "bogus: 1\n");
  auto bad = LoadGatewayConfig(path_);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), path_ + ": bogus: unknown key");
}

TEST_F(GatewayConfigFile, RefusesATenMegabyteFile) {
  Write(std::string(kMinimal) + "# " + std::string(10 << 20, 'x') + "\n");
  auto c = LoadGatewayConfig(path_);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("larger than 1048576 bytes"), std::string::npos);
}

TEST(GatewayConfig, MissingFileIsNotFound) {
  auto c = LoadGatewayConfig("/nonexistent/gateway.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
}

// examples/gateway.yaml: the decision tree of SEED-NOTES §2.4, each branch to its pool.
TEST(GatewayConfigExample, RoutesTheThreeBranches) {
  auto c = LoadGatewayConfig(STRATA_EXAMPLE_GATEWAY_YAML);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const GatewayConfig& g = **c;
  ASSERT_EQ(g.tenants.size(), 2u);
  EXPECT_GT(g.tenants[0].tokens_per_minute, 0);
  EXPECT_GT(g.tenants[1].requests_per_minute, 0);
  auto route = [&](Priority p, std::string adapter, int64_t tokens) {
    RequestFacts f;
    f.model = adapter;
    f.adapter = std::move(adapter);
    f.priority = p;
    const RouteConfig* r = MatchRoute(g, f, [&](const PoolConfig&) { return tokens; });
    return r == nullptr ? std::string("(none)") : r->to;
  };
  EXPECT_EQ(route(Priority::kGold, "base", 5000), "high-memory");
  EXPECT_EQ(route(Priority::kGold, "base", 4097), "high-memory");
  EXPECT_EQ(route(Priority::kGold, "base", 4096), "general");    // not "> 4096"
  EXPECT_EQ(route(Priority::kSilver, "base", 5000), "general");  // not gold
  EXPECT_EQ(route(Priority::kBronze, "finetune-legal-contracts", 10), "compliance");
  EXPECT_EQ(route(Priority::kGold, "finetune-legal-v2", 10), "compliance");
  EXPECT_EQ(route(Priority::kGold, "finetune-legal-v2", 9000), "high-memory");  // first wins
  EXPECT_EQ(route(Priority::kSilver, "finetune-medical-x", 10), "general");
  EXPECT_EQ(route(Priority::kBronze, "llama", 100000), "general");
}

}  // namespace
}  // namespace strata::gateway
