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

}  // namespace
}  // namespace strata::control
