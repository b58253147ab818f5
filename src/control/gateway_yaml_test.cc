// control/gateway_yaml: the generated gateway.yaml parses with the gateway's own parser into the
// spec's pools (URLs or DNS), routes, tokenizer, chat template and labels; bad inputs are errors.
#include "control/gateway_yaml.h"

#include <gtest/gtest.h>

#include "gateway/config.h"
#include "gateway/routes.h"

namespace strata::control {
namespace {

constexpr const char* kSpec = R"(
apiVersion: strata.dev/v1
kind: Deployment
metadata: {name: demo}
models: [{name: tiny, versions: [{version: v1, path: tiny.gguf}, {version: v2, path: t2.gguf}]}]
pools:
  - name: gold
    model: tiny
    version: v2
    serve: {model: {chat_template: chatml}}
    labels: {tier: gold, version: override}
  - name: general
    model: tiny
    version: v1
    serve_args: [--chat-template=llama3]
gateway:
  port: 9999
  routes:
    - {name: long, match: {min_prompt_tokens: 4097}, to: gold}
    - {name: default, to: general}
  tenants: [{name: acme, api_keys: [k1]}]
)";

DeploymentSpec Spec() {
  auto s = ParseDeploymentSpec(kSpec, "/m");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : DeploymentSpec{};
}

TEST(GatewayYaml, StaticReplicas) {
  const DeploymentSpec spec = Spec();
  auto text = GatewayYaml(spec, {{"gold", {"http://127.0.0.1:9001", "http://127.0.0.1:9002"}},
                                 {"general", {"http://127.0.0.1:9003"}}});
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto g = gateway::ParseGatewayConfig(*text);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ((*g)->pools.size(), 2u);
  const gateway::PoolConfig& gold = (*g)->pools[0];
  EXPECT_EQ(gold.name, "gold");
  EXPECT_EQ(gold.replicas,
            (std::vector<std::string>{"http://127.0.0.1:9001", "http://127.0.0.1:9002"}));
  EXPECT_FALSE(gold.dns.has_value());
  EXPECT_EQ(gold.tokenizer, "/m/t2.gguf");
  EXPECT_EQ(gold.chat_template, "chatml");
  EXPECT_EQ(gold.labels.at("model"), "tiny");
  EXPECT_EQ(gold.labels.at("version"), "override");  // the pool's own labels win
  EXPECT_EQ(gold.labels.at("tier"), "gold");
  EXPECT_EQ((*g)->pools[1].chat_template, "llama3");
  EXPECT_EQ((*g)->pools[1].labels.at("version"), "v1");
  ASSERT_EQ((*g)->routes.size(), 2u);
  EXPECT_EQ((*g)->routes[0].to, "gold");
  EXPECT_EQ((*g)->routes[0].match->min_prompt_tokens, 4097);
  ASSERT_EQ((*g)->tenants.size(), 1u);
  EXPECT_EQ((*g)->tenants[0].api_keys[0], "k1");
}

TEST(GatewayYaml, DnsPerPool) {
  const DeploymentSpec spec = Spec();
  auto text = GatewayYaml(spec,
                          std::map<std::string, std::string>{{"gold", "strata-gold.ns.svc"},
                                                             {"general", "strata-general.ns.svc"}},
                          8000);
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto g = gateway::ParseGatewayConfig(*text);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const gateway::PoolConfig& gold = (*g)->pools[0];
  ASSERT_TRUE(gold.dns.has_value());
  EXPECT_EQ(gold.dns->name, "strata-gold.ns.svc");
  EXPECT_EQ(gold.dns->port, 8000);
  EXPECT_TRUE(gold.replicas.empty());
  EXPECT_TRUE(gold.tokenizer.empty());  // the gateway pod does not mount the models
  EXPECT_EQ((*g)->pools[1].dns->name, "strata-general.ns.svc");
}

TEST(GatewayYaml, Errors) {
  const DeploymentSpec spec = Spec();
  auto unknown = GatewayYaml(spec, {{"nope", {"http://127.0.0.1:1"}}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("no pool named 'nope'"), std::string::npos);
  auto bad_url = GatewayYaml(spec, {{"gold", {"ftp://x"}}, {"general", {"http://127.0.0.1:2"}}});
  ASSERT_FALSE(bad_url.ok());
  EXPECT_NE(bad_url.status().message().find("pools[0].replicas[0]: not an http:// URL"),
            std::string::npos)
      << bad_url.status().message();
  auto missing_dns = GatewayYaml(spec, std::map<std::string, std::string>{{"gold", "a"}}, 8000);
  ASSERT_FALSE(missing_dns.ok());
  EXPECT_NE(missing_dns.status().message().find("none for pool 'general'"), std::string::npos);
  auto bad_port =
      GatewayYaml(spec, std::map<std::string, std::string>{{"gold", "a"}, {"general", "b"}}, 0);
  EXPECT_FALSE(bad_port.ok());
}

TEST(GatewayYaml, SpecLoadChecksTheGatewaySection) {
  std::string text = kSpec;
  text.replace(text.find("to: gold"), 8, "to: golden");
  auto s = ParseDeploymentSpec(text);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "gateway.routes[0].to: no pool named 'golden'");
  text = kSpec;
  text.replace(text.find("api_keys: [k1]"), 14, "api_keys: [k1, k1]");
  s = ParseDeploymentSpec(text);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("gateway.tenants[0].api_keys[1]: duplicate API key"),
            std::string::npos)
      << s.status().message();
  text = kSpec;
  text.replace(text.find("chatml"), 6, "nosuch");
  s = ParseDeploymentSpec(text);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("pools[0].chat_template: unknown built-in chat template"),
            std::string::npos)
      << s.status().message();
}

// examples/deploy.yaml through the gateway's own router: the reference decision tree (SEED-NOTES
// §2.4), each branch to its pool, with the bundled model as every pool's tokenizer.
TEST(GatewayYaml, TheExampleRoutesTheThreeBranches) {
  auto spec = LoadDeploymentSpec(STRATA_EXAMPLE_DEPLOY_YAML);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  auto text = GatewayYaml(*spec, {{"long-context", {"http://127.0.0.1:9101"}},
                                  {"compliance", {"http://127.0.0.1:9102"}},
                                  {"general", {"http://127.0.0.1:9103", "http://127.0.0.1:9104"}}});
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto g = gateway::ParseGatewayConfig(*text);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ((*g)->pools[0].tokenizer, spec->ModelPath(spec->pools[0]));
  EXPECT_EQ((*g)->admission.max_wait[0].count(), 2000);
  using gateway::Priority;
  auto route = [&](Priority p, std::string adapter, int64_t tokens) {
    gateway::RequestFacts f;
    f.model = adapter;
    f.adapter = std::move(adapter);
    f.priority = p;
    const gateway::RouteConfig* r =
        gateway::MatchRoute(**g, f, [&](const gateway::PoolConfig&) { return tokens; });
    return r == nullptr ? std::string("(none)") : r->to;
  };
  EXPECT_EQ(route(Priority::kGold, "base", 4097), "long-context");
  EXPECT_EQ(route(Priority::kGold, "base", 4096), "general");    // not "> 4096"
  EXPECT_EQ(route(Priority::kSilver, "base", 5000), "general");  // not gold
  EXPECT_EQ(route(Priority::kBronze, "finetune-legal-contracts", 10), "compliance");
  EXPECT_EQ(route(Priority::kGold, "finetune-legal-v2", 9000), "long-context");  // first wins
  EXPECT_EQ(route(Priority::kSilver, "finetune-medical-x", 10), "general");
}

// During a canary rollout of `general` (v1 → v2): one more pool `general.v2` (its replicas, the
// v2 tokenizer and version label), the route whose `to:` is `general` alone becomes the 2-arm
// split with the rollout's canary block; other routes (to gold, a split naming general, a
// cascade) stay as they were; the whole text parses with the gateway's own parser.
TEST(GatewayYaml, CanaryRolloutSplitsThePoolsPlainRoutes) {
  std::string text = kSpec;
  const std::string routes = "    - {name: default, to: general}\n";
  text.replace(
      text.find(routes), routes.size(),
      "    - {name: ab, match: {tenant: acme}, to: [{pool: general, weight: 1}, "
      "{pool: gold, weight: 1}]}\n"
      "    - {name: casc, match: {model: c}, to: {cascade: {first: general, then: gold}}}\n" +
          routes);
  auto spec = ParseDeploymentSpec(text, "/m");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  auto plain = PlainRoutesTo(*spec, "general");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, (std::vector<std::string>{"default"}));
  EXPECT_EQ(*PlainRoutesTo(*spec, "gold"), (std::vector<std::string>{"long"}));
  EXPECT_TRUE(PlainRoutesTo(*spec, "nope")->empty());

  RolloutSpec policy;
  policy.steps = {20, 60, 100};
  policy.min_requests = 4;
  policy.min_duration = std::chrono::seconds(3);
  policy.interval = std::chrono::seconds(1);
  policy.guards.error_rate_max_delta = 0.2;
  policy.guards.ttft_p95_max_ratio = 2;
  auto out = GatewayYaml(
      *spec, {{"gold", {"http://127.0.0.1:9001"}}, {"general", {"http://127.0.0.1:9003"}}},
      {{"general", CanarySet{"v2", {"http://127.0.0.1:9005"}, policy}}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  auto g = gateway::ParseGatewayConfig(*out);
  ASSERT_TRUE(g.ok()) << g.status().message() << "\n" << *out;
  ASSERT_EQ((*g)->pools.size(), 3u);
  const gateway::PoolConfig* canary = (*g)->FindPool("general.v2");
  ASSERT_NE(canary, nullptr);
  EXPECT_EQ(canary->replicas, (std::vector<std::string>{"http://127.0.0.1:9005"}));
  EXPECT_EQ(canary->tokenizer, "/m/t2.gguf");
  EXPECT_EQ(canary->labels.at("version"), "v2");
  EXPECT_EQ(canary->chat_template, "llama3");  // the pool's serve flags
  EXPECT_EQ((*g)->FindPool("general")->labels.at("version"), "v1");
  EXPECT_EQ((*g)->FindPool("general")->replicas,
            (std::vector<std::string>{"http://127.0.0.1:9003"}));

  ASSERT_EQ((*g)->routes.size(), 4u);
  EXPECT_EQ((*g)->routes[0].to, "gold");  // long: untouched
  EXPECT_FALSE((*g)->routes[0].canary.has_value());
  EXPECT_EQ((*g)->routes[1].arms.size(), 2u);  // ab: a split of its own, untouched
  EXPECT_EQ((*g)->routes[1].arms[0].pool, "general");
  EXPECT_FALSE((*g)->routes[1].canary.has_value());
  ASSERT_TRUE((*g)->routes[2].cascade.has_value());  // casc: untouched
  EXPECT_EQ((*g)->routes[2].cascade->first, "general");
  const gateway::RouteConfig& def = (*g)->routes[3];
  EXPECT_EQ(def.name, "default");
  EXPECT_TRUE(def.to.empty());
  ASSERT_EQ(def.arms.size(), 2u);
  EXPECT_EQ(def.arms[0].pool, "general");
  EXPECT_DOUBLE_EQ(def.arms[0].weight, 80);
  EXPECT_EQ(def.arms[1].pool, "general.v2");
  EXPECT_DOUBLE_EQ(def.arms[1].weight, 20);
  ASSERT_TRUE(def.canary.has_value());
  EXPECT_EQ(def.canary->baseline, "general");
  EXPECT_EQ(def.canary->canary, "general.v2");
  EXPECT_EQ(def.canary->steps, (std::vector<double>{20, 60, 100}));
  EXPECT_EQ(def.canary->min_requests, 4);
  EXPECT_EQ(def.canary->min_duration, std::chrono::seconds(3));
  EXPECT_EQ(def.canary->interval, std::chrono::seconds(1));
  EXPECT_DOUBLE_EQ(def.canary->guards.error_rate_max_delta, 0.2);
  EXPECT_DOUBLE_EQ(def.canary->guards.ttft_p95_max_ratio, 2);
  EXPECT_DOUBLE_EQ(def.canary->guards.tpot_p95_max_ratio, 1.2);
  EXPECT_DOUBLE_EQ(def.canary->guards.latency_min_delta_s, 0.005);

  // Without canaries the same spec renders as before (to: general).
  const std::map<std::string, std::vector<std::string>> urls = {
      {"general", {"http://127.0.0.1:9003"}}};
  auto before = GatewayYaml(*spec, urls, std::map<std::string, CanarySet>{});
  ASSERT_TRUE(before.ok()) << before.status().message();
  EXPECT_EQ((*gateway::ParseGatewayConfig(*before))->routes[3].to, "general");
  // A canary set of a pool that is not in the spec is an error, not a silent pool.
  EXPECT_FALSE(GatewayYaml(*spec, {}, {{"nope", CanarySet{"v2", {}, policy}}}).ok());
}

TEST(GatewayYaml, CanaryPoolNamesFitTheGateway) {
  EXPECT_EQ(CanaryPoolName("general", "v2"), "general.v2");
  const std::string pool(40, 'p'), version(30, 'v');
  EXPECT_EQ(CanaryPoolName(pool, version), pool + ".canary");  // 71 > 64 characters
}

}  // namespace
}  // namespace strata::control
