// gateway/config: the example parses and routes its three branches, defaults, every kind of
// error names its key path, files are bounded, hostile YAML is an error and never a crash.
#include "gateway/config.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "gateway/routes.h"
#include "yamlcfg/wrong_kind_sweep.h"

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

// Every key of the config's sections (the traffic keys are in TrafficKeysParse).
constexpr const char* kEveryKey = R"(
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
)";

TEST(GatewayConfig, EveryKeyParses) {
  auto c = ParseGatewayConfig(kEveryKey);
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

// Issue 17's shapes: a split with stickiness, a canary and a shadow; a cascade; the admin key.
TEST(GatewayConfig, TrafficKeysParse) {
  auto c = ParseGatewayConfig(R"(
pools:
  - {name: v1, replicas: [http://127.0.0.1:9001]}
  - {name: v2, replicas: [http://127.0.0.1:9002]}
  - {name: v3, replicas: [http://127.0.0.1:9003]}
routes:
  - name: chat
    match: {model: chat}
    to:
      - {pool: v1, weight: 90}
      - {pool: v2, weight: 10.5}
    sticky: {key: header, header: X-Session-Id}
    canary:
      baseline: v1
      canary: v2
      steps: [5, 25, 50, 100]
      min_requests: 7
      min_duration_s: 30
      interval_s: 2
      guards:
        ttft_p95_max_ratio: 1.5
        tpot_p95_max_ratio: 1.25
        error_rate_max_delta: 0.05
        mean_logprob_min_delta: -0.3
    shadow: {pool: v3, fraction: 0.25}
  - name: cheap
    match: {model: ask}
    to:
      cascade: {first: v1, then: v3, signal: margin, threshold: 0.5}
  - name: ab
    to: [{pool: v2, weight: 1}, {pool: v3, weight: 0}]
    sticky: {key: tenant}
admin: {api_key: root-key}
)");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const GatewayConfig& g = **c;
  const RouteConfig& chat = g.routes[0];
  EXPECT_EQ(chat.to, "");
  ASSERT_EQ(chat.arms.size(), 2u);
  EXPECT_EQ(chat.arms[0].pool, "v1");
  EXPECT_DOUBLE_EQ(chat.arms[0].weight, 90);
  EXPECT_DOUBLE_EQ(chat.arms[1].weight, 10.5);
  EXPECT_EQ(chat.primary_pool(), "v1");
  EXPECT_EQ(chat.sticky.key, StickyKey::kHeader);
  EXPECT_EQ(chat.sticky.header, "x-session-id");  // lower-cased
  ASSERT_TRUE(chat.canary.has_value());
  const CanaryConfig& cc = *chat.canary;
  EXPECT_EQ(cc.baseline, "v1");
  EXPECT_EQ(cc.canary, "v2");
  EXPECT_EQ(cc.steps, (std::vector<double>{5, 25, 50, 100}));
  EXPECT_EQ(cc.min_requests, 7);
  EXPECT_EQ(cc.min_duration.count(), 30);
  EXPECT_EQ(cc.interval.count(), 2);
  EXPECT_DOUBLE_EQ(cc.guards.ttft_p95_max_ratio, 1.5);
  EXPECT_DOUBLE_EQ(cc.guards.tpot_p95_max_ratio, 1.25);
  EXPECT_DOUBLE_EQ(cc.guards.error_rate_max_delta, 0.05);
  ASSERT_TRUE(cc.guards.mean_logprob_min_delta.has_value());
  EXPECT_DOUBLE_EQ(*cc.guards.mean_logprob_min_delta, -0.3);
  ASSERT_TRUE(chat.shadow.has_value());
  EXPECT_EQ(chat.shadow->pool, "v3");
  EXPECT_DOUBLE_EQ(chat.shadow->fraction, 0.25);
  EXPECT_EQ(chat.ReferencedPools(), (std::vector<std::string_view>{"v1", "v2", "v3"}));
  const RouteConfig& cheap = g.routes[1];
  ASSERT_TRUE(cheap.cascade.has_value());
  EXPECT_EQ(cheap.to, "");
  EXPECT_TRUE(cheap.arms.empty());
  EXPECT_EQ(cheap.cascade->first, "v1");
  EXPECT_EQ(cheap.cascade->then, "v3");
  EXPECT_EQ(cheap.cascade->signal, CascadeSignal::kMargin);
  EXPECT_DOUBLE_EQ(cheap.cascade->threshold, 0.5);
  EXPECT_EQ(cheap.primary_pool(), "v1");
  EXPECT_FALSE(cheap.canary.has_value());
  EXPECT_FALSE(cheap.shadow.has_value());
  EXPECT_EQ(g.routes[2].sticky.key, StickyKey::kTenant);
  EXPECT_EQ(g.routes[2].primary_pool(), "v2");
  EXPECT_EQ(g.admin.api_key, "root-key");
  EXPECT_EQ(StickyKeyName(StickyKey::kTenant), "tenant");
  EXPECT_EQ(CascadeSignalName(CascadeSignal::kMinLogprob), "min_logprob");
}

TEST(GatewayConfig, TrafficDefaults) {
  auto c = ParseGatewayConfig(R"(
pools:
  - {name: a, replicas: [http://127.0.0.1:9001]}
  - {name: b, replicas: [http://127.0.0.1:9002]}
routes:
  - name: r
    to: [{pool: a, weight: 1}, {pool: b, weight: 1}]
    canary: {baseline: a, canary: b, steps: [50]}
  - name: c
    to: {cascade: {first: a, then: b}}
)");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const GatewayConfig& g = **c;
  EXPECT_EQ(g.admin.api_key, "");
  EXPECT_EQ(g.routes[0].sticky.key, StickyKey::kUser);
  EXPECT_EQ(g.routes[0].sticky.header, "");
  const CanaryConfig& cc = *g.routes[0].canary;
  EXPECT_EQ(cc.min_requests, 100);
  EXPECT_EQ(cc.min_duration.count(), 60);
  EXPECT_EQ(cc.interval.count(), 10);
  EXPECT_DOUBLE_EQ(cc.guards.ttft_p95_max_ratio, 1.2);
  EXPECT_DOUBLE_EQ(cc.guards.tpot_p95_max_ratio, 1.2);
  EXPECT_DOUBLE_EQ(cc.guards.error_rate_max_delta, 0.01);
  EXPECT_FALSE(cc.guards.mean_logprob_min_delta.has_value());
  EXPECT_EQ(g.routes[1].cascade->signal, CascadeSignal::kMeanLogprob);
  EXPECT_DOUBLE_EQ(g.routes[1].cascade->threshold, -1.0);
  // A single-pool route keeps its old shape.
  auto m = ParseGatewayConfig(kMinimal);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->routes[0].primary_pool(), "p");
  EXPECT_TRUE((*m)->routes[0].arms.empty());
  EXPECT_FALSE((*m)->routes[0].cascade.has_value());
}

struct BadCase {
  const char* name;
  std::string yaml;
  std::string error;  // a substring of the message
};

std::string Pools(const std::string& body) { return "pools:\n" + body; }
const std::string kPoolP = "  - name: p\n    replicas: [http://127.0.0.1:9000]\n";
const std::string kRouteR = "routes:\n  - name: r\n    to: p\n";
const std::string kTwoPools =
    "pools:\n  - {name: a, replicas: [http://127.0.0.1:9001]}\n"
    "  - {name: b, replicas: [http://127.0.0.1:9002]}\n";
const std::string kSplitAB =
    kTwoPools + "routes:\n  - name: r\n    to: [{pool: a, weight: 9}, {pool: b, weight: 1}]\n";
const std::string kCanaryAB = "    canary: {baseline: a, canary: b, steps: [5, 50, 100]}\n";

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
        BadCase{"split_one_arm", kTwoPools + "routes:\n  - {name: r, to: [{pool: a, weight: 1}]}\n",
                "routes[0].to: a split needs at least 2 arms"},
        BadCase{"split_empty", kTwoPools + "routes:\n  - {name: r, to: []}\n",
                "routes[0].to: a split needs at least 2 arms"},
        BadCase{"arm_pool_missing",
                kTwoPools + "routes:\n  - {name: r, to: [{pool: a, weight: 1}, {pool: x}]}\n",
                "routes[0].to[1].pool: no pool named 'x'"},
        BadCase{"arm_pool_absent",
                kTwoPools + "routes:\n  - {name: r, to: [{pool: a, weight: 1}, {weight: 2}]}\n",
                "routes[0].to[1].pool: is required"},
        BadCase{"arm_dup",
                kTwoPools + "routes:\n  - {name: r, to: [{pool: a, weight: 1}, {pool: a}]}\n",
                "routes[0].to[1].pool: pool 'a' is already an arm"},
        BadCase{"arm_weight_negative",
                kTwoPools + "routes:\n  - {name: r, to: [{pool: a, weight: -1}, {pool: b}]}\n",
                "routes[0].to[0].weight: must be in [0, "},
        BadCase{"arm_weight_nan",
                kTwoPools + "routes:\n  - {name: r, to: [{pool: a, weight: .nan}, {pool: b}]}\n",
                "routes[0].to[0].weight: expected a number"},
        BadCase{"arm_weights_zero",
                kTwoPools + "routes:\n  - {name: r, to: [{pool: a}, {pool: b, weight: 0}]}\n",
                "routes[0].to: the arms' weights must not all be 0"},
        BadCase{"arm_unknown_key",
                kTwoPools + "routes:\n  - {name: r, to: [{pool: a, wieght: 1}, {pool: b}]}\n",
                "routes[0].to[0].wieght: unknown key (did you mean weight?)"},
        BadCase{"arm_not_map", kTwoPools + "routes:\n  - {name: r, to: [a, b]}\n",
                "routes[0].to[0]: expected a mapping"},
        BadCase{"to_unknown_map", kTwoPools + "routes:\n  - {name: r, to: {cascad: {}}}\n",
                "routes[0].to.cascad: unknown key (did you mean cascade?)"},
        BadCase{"to_empty_map", kTwoPools + "routes:\n  - {name: r, to: {}}\n",
                "routes[0].to: is required (a pool name, a list of arms or {cascade: ...})"},
        BadCase{"cascade_same",
                kTwoPools + "routes:\n  - {name: r, to: {cascade: {first: a, then: a}}}\n",
                "routes[0].to.cascade.then: must differ from first"},
        BadCase{"cascade_missing",
                kTwoPools + "routes:\n  - {name: r, to: {cascade: {first: a, then: z}}}\n",
                "routes[0].to.cascade.then: no pool named 'z'"},
        BadCase{"cascade_no_first",
                kTwoPools + "routes:\n  - {name: r, to: {cascade: {then: a}}}\n",
                "routes[0].to.cascade.first: is required"},
        BadCase{"cascade_null", kTwoPools + "routes:\n  - {name: r, to: {cascade: ~}}\n",
                "routes[0].to.cascade: expected a mapping"},
        BadCase{"cascade_signal",
                kTwoPools +
                    "routes:\n  - {name: r, to: {cascade: {first: a, then: b, signal: entropy}}}\n",
                "routes[0].to.cascade.signal: expected one of mean_logprob, min_logprob, margin "
                "(got \"entropy\")"},
        BadCase{"cascade_threshold",
                kTwoPools +
                    "routes:\n  - {name: r, to: {cascade: {first: a, then: b, threshold: .inf}}}\n",
                "routes[0].to.cascade.threshold: expected a number"},
        BadCase{
            "cascade_key",
            kTwoPools + "routes:\n  - {name: r, to: {cascade: {first: a, then: b, treshold: 1}}}\n",
            "routes[0].to.cascade.treshold: unknown key (did you mean threshold?)"},
        BadCase{"canary_single_pool", kTwoPools + "routes:\n  - name: r\n    to: a\n" + kCanaryAB,
                "routes[0].canary: needs a split of exactly 2 arms in to:"},
        BadCase{"canary_three_arms",
                std::string(kTwoPools) + "  - {name: c, replicas: [http://127.0.0.1:9003]}\n" +
                    "routes:\n  - name: r\n    to: [{pool: a, weight: 1}, {pool: b}, {pool: c}]\n" +
                    kCanaryAB,
                "routes[0].canary: needs a split of exactly 2 arms in to:"},
        BadCase{"canary_baseline", kSplitAB + "    canary: {baseline: x, canary: b, steps: [50]}\n",
                "routes[0].canary.baseline: must be one of the arms' pools ('a', 'b')"},
        BadCase{"canary_same", kSplitAB + "    canary: {baseline: a, canary: a, steps: [50]}\n",
                "routes[0].canary.canary: must be the other arm's pool"},
        BadCase{"canary_no_steps", kSplitAB + "    canary: {baseline: a, canary: b}\n",
                "routes[0].canary.steps: is required"},
        BadCase{"canary_null", kSplitAB + "    canary:\n",
                "routes[0].canary.baseline: is required"},  // an empty block is no silent no-op
        BadCase{"steps_order",
                kSplitAB + "    canary: {baseline: a, canary: b, steps: [5, 50, 25]}\n",
                "routes[0].canary.steps[2]: must be greater than the step before (50)"},
        BadCase{"steps_equal", kSplitAB + "    canary: {baseline: a, canary: b, steps: [5, 5]}\n",
                "routes[0].canary.steps[1]: must be greater than the step before (5)"},
        BadCase{"steps_zero", kSplitAB + "    canary: {baseline: a, canary: b, steps: [0, 5]}\n",
                "routes[0].canary.steps[0]: must be in (0, 100], got 0"},
        BadCase{"steps_over", kSplitAB + "    canary: {baseline: a, canary: b, steps: [5, 101]}\n",
                "routes[0].canary.steps[1]: must be in (0, 100], got 101"},
        BadCase{"steps_scalar", kSplitAB + "    canary: {baseline: a, canary: b, steps: 5}\n",
                "routes[0].canary.steps: expected a list of canary weights"},
        BadCase{"canary_min_requests",
                kSplitAB + "    canary: {baseline: a, canary: b, steps: [5], min_requests: 0}\n",
                "routes[0].canary.min_requests: must be in [1, "},
        BadCase{"canary_interval",
                kSplitAB + "    canary: {baseline: a, canary: b, steps: [5], interval_s: 0}\n",
                "routes[0].canary.interval_s: must be in [1, 86400], got 0"},
        BadCase{
            "canary_duration",
            kSplitAB + "    canary: {baseline: a, canary: b, steps: [5], min_duration_s: 1.5}\n",
            "routes[0].canary.min_duration_s: expected an integer"},
        BadCase{"canary_key",
                kSplitAB + "    canary: {baseline: a, canary: b, steps: [5], min_request: 1}\n",
                "routes[0].canary.min_request: unknown key (did you mean min_requests?)"},
        BadCase{"guard_ratio",
                kSplitAB + "    canary: {baseline: a, canary: b, steps: [5], guards: "
                           "{ttft_p95_max_ratio: 0}}\n",
                "routes[0].canary.guards.ttft_p95_max_ratio: must be in (0, "},
        BadCase{"guard_error_rate",
                kSplitAB + "    canary: {baseline: a, canary: b, steps: [5], guards: "
                           "{error_rate_max_delta: 2}}\n",
                "routes[0].canary.guards.error_rate_max_delta: must be in [0, 1], got 2"},
        BadCase{"guard_key",
                kSplitAB + "    canary: {baseline: a, canary: b, steps: [5], guards: "
                           "{ttft_p99_max_ratio: 2}}\n",
                "routes[0].canary.guards.ttft_p99_max_ratio: unknown key (did you mean "
                "ttft_p95_max_ratio?)"},
        BadCase{"shadow_pool", kTwoPools + "routes:\n  - {name: r, to: a, shadow: {pool: q}}\n",
                "routes[0].shadow.pool: no pool named 'q'"},
        BadCase{"shadow_null", kTwoPools + "routes:\n  - {name: r, to: a, shadow: ~}\n",
                "routes[0].shadow.pool: is required"},
        BadCase{"shadow_fraction",
                kTwoPools + "routes:\n  - {name: r, to: a, shadow: {pool: b, fraction: 1.5}}\n",
                "routes[0].shadow.fraction: must be in [0, 1], got 1.5"},
        BadCase{"sticky_key", kSplitAB + "    sticky: {key: cookie}\n",
                "routes[0].sticky.key: expected one of user, header, tenant (got \"cookie\")"},
        BadCase{"sticky_no_header", kSplitAB + "    sticky: {key: header}\n",
                "routes[0].sticky.header: is required with key: header"},
        BadCase{"sticky_stray_header", kSplitAB + "    sticky: {header: x-s}\n",
                "routes[0].sticky.header: is used only with key: header"},
        BadCase{"admin_key", std::string(kMinimal) + "admin: {apikey: x}\n",
                "admin.apikey: unknown key (did you mean api_key?)"},
        BadCase{"admin_not_map", std::string(kMinimal) + "admin: secret\n",
                "admin: expected a mapping"},
        BadCase{
            "admin_is_tenant_key",
            std::string(kMinimal) + "tenants:\n  - {name: t, api_keys: [k]}\nadmin: {api_key: k}\n",
            "admin.api_key: must differ from every tenant's API key"},
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

// Every key of kEveryKey with the rest added (the pool hold, a split with stickiness, a canary
// with every guard, a shadow, a cascade, admin, ui, tracing) gets a value of every wrong YAML
// kind: refused naming its path where the kind is wrong, never a crash
// (yamlcfg/wrong_kind_sweep.h has the contract).
TEST(GatewayConfig, EveryKeyWithEveryWrongKindIsAnErrorNamingIt) {
  YAML::Node root = YAML::Load(kEveryKey);
  root["pools"][0]["cold_start_hold_ms"] = 100;
  root["pools"][0]["cold_start_max_held"] = 5;
  root["pools"].push_back(YAML::Load("{name: b, replicas: ['http://10.0.0.3:8080']}"));
  root["routes"][0]["match"]["headers"] = YAML::Load("{X-Other: x}");
  root["routes"].push_back(
      YAML::Load(R"({name: split, to: [{pool: a, weight: 9}, {pool: b, weight: 1}],
      sticky: {key: header, header: x-user},
      canary: {baseline: a, canary: b, steps: [5, 50, 100], min_requests: 10, min_duration_s: 60,
               interval_s: 5, guards: {ttft_p95_max_ratio: 1.5, tpot_p95_max_ratio: 1.2,
               latency_min_delta_s: 0.05, error_rate_max_delta: 0.01,
               mean_logprob_min_delta: -0.5}},
      shadow: {pool: b, fraction: 0.1}})"));
  root["routes"].push_back(YAML::Load(
      "{name: cascade, to: {cascade: {first: a, then: b, signal: margin, threshold: -1.5}}}"));
  root["admin"] = YAML::Load("{api_key: admin-secret}");
  root["ui"] = YAML::Load("{control_url: 'http://127.0.0.1:7000'}");
  root["tracing"] = YAML::Load(
      "{otlp_endpoint: 'http://127.0.0.1:4318', sample_ratio: 0.5, service_name: gw, "
      "queue_capacity: 64}");
  root["access_log"] = "/var/log/gateway.log";  // not `off`: re-emitted plain, it reads as a bool
  YAML::Emitter doc;
  doc << root;
  const yamlcfg::SweepResult r = yamlcfg::SweepWrongKinds(
      doc.c_str(), [](const std::string& y) { return ParseGatewayConfig(y).status(); });
  for (const std::string& f : r.failures) ADD_FAILURE() << f;
  const std::set<std::string> swept(r.paths.begin(), r.paths.end());
  for (const char* path :
       {"pools[0].dns.interval_ms", "pools[0].cold_start_max_held", "routes[0].match.headers",
        "routes[2].sticky.key", "routes[2].canary.guards.mean_logprob_min_delta",
        "routes[2].shadow.fraction", "routes[3].to.cascade.threshold",
        "tenants[0].default_priority", "admission.bronze_max_wait_ms", "health.ejection_max_ms",
        "balancer.tier_seconds_per_block.redis", "upstream.retries", "admin.api_key",
        "ui.control_url", "tracing.otlp_endpoint", "tracing.sample_ratio", "tracing.service_name",
        "tracing.queue_capacity", "access_log"})
    EXPECT_TRUE(swept.contains(path)) << path;
  EXPECT_EQ(r.cases, static_cast<int>(r.paths.size() * std::size(yamlcfg::kWrongKinds)));
  EXPECT_GT(r.errors, r.cases / 2);
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

// examples/gateway.yaml: the split with a canary and a shadow, and the cascade (issue 17).
TEST(GatewayConfigExample, HasASplitACanaryAShadowAndACascade) {
  auto c = LoadGatewayConfig(STRATA_EXAMPLE_GATEWAY_YAML);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const GatewayConfig& g = **c;
  RequestFacts f;
  f.model = f.adapter = "chat";
  const RouteConfig* chat = MatchRoute(g, f, [](const PoolConfig&) { return int64_t{10}; });
  ASSERT_NE(chat, nullptr);
  EXPECT_EQ(chat->name, "chat");
  ASSERT_EQ(chat->arms.size(), 2u);
  EXPECT_EQ(chat->arms[1].pool, "chat-v2");
  ASSERT_TRUE(chat->canary.has_value());
  EXPECT_EQ(chat->canary->steps.back(), 100);
  ASSERT_TRUE(chat->shadow.has_value());
  EXPECT_EQ(chat->shadow->pool, "chat-v3");
  f.model = f.adapter = "ask";
  const RouteConfig* ask = MatchRoute(g, f, [](const PoolConfig&) { return int64_t{10}; });
  ASSERT_NE(ask, nullptr);
  ASSERT_TRUE(ask->cascade.has_value());
  EXPECT_EQ(ask->cascade->first, "small");
  EXPECT_EQ(ask->cascade->then, "large");
  EXPECT_EQ(g.admin.api_key, "");  // the admin API is off unless configured
}

}  // namespace
}  // namespace strata::gateway
