// gateway/routes: each condition alone, their conjunction, order, the default route, headers,
// and the lazy, once-per-pool prompt measurement.
#include "gateway/routes.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace strata::gateway {
namespace {

// Builders: a value with the fields `f` sets (GCC warns on partial designated initializers).
template <typename T, typename F>
T With(F f) {
  T v;
  f(v);
  return v;
}
#define MATCH(body) With<RouteMatch>([&](RouteMatch& m) { body; })
#define FACTS(body) With<RequestFacts>([&](RequestFacts& f) { body; })

GatewayConfig Config(std::vector<RouteConfig> routes) {
  GatewayConfig c;
  c.pools.resize(2);
  c.pools[0].name = "a";
  c.pools[1].name = "b";
  c.routes = std::move(routes);
  return c;
}
RouteConfig Route(std::string name, std::optional<RouteMatch> m, std::string to = "a") {
  RouteConfig r;
  r.name = std::move(name);
  r.match = std::move(m);
  r.to = std::move(to);
  return r;
}
RouteConfig Default(std::string to = "b") { return Route("default", std::nullopt, std::move(to)); }

std::string Pick(const GatewayConfig& c, const RequestFacts& f, int64_t tokens = 0) {
  const RouteConfig* r = MatchRoute(c, f, [tokens](const PoolConfig&) { return tokens; });
  return r == nullptr ? "(none)" : r->name;
}

TEST(MatchRoute, Model) {
  const auto c = Config({Route("m", MATCH(m.model = "llama")), Default()});
  EXPECT_EQ(Pick(c, FACTS(f.model = "llama")), "m");
  EXPECT_EQ(Pick(c, FACTS(f.model = "llama2")), "default");
  EXPECT_EQ(Pick(c, FACTS(f.model = "Llama")), "default");  // exact
}

TEST(MatchRoute, AdapterExactAndPrefix) {
  const auto c = Config({Route("exact", MATCH(m.adapter = "legal-1")),
                         Route("prefix", MATCH(m.adapter_prefix = "finetune-legal-")), Default()});
  EXPECT_EQ(Pick(c, FACTS(f.adapter = "legal-1")), "exact");
  EXPECT_EQ(Pick(c, FACTS(f.adapter = "legal-10")), "default");
  EXPECT_EQ(Pick(c, FACTS(f.adapter = "finetune-legal-")), "prefix");
  EXPECT_EQ(Pick(c, FACTS(f.adapter = "finetune-legal-contracts-v2")), "prefix");
  EXPECT_EQ(Pick(c, FACTS(f.adapter = "finetune-legal")), "default");
  EXPECT_EQ(Pick(c, FACTS(f.adapter = "x-finetune-legal-a")),
            "default");  // a prefix, not a substring
}

TEST(MatchRoute, TenantAndPriority) {
  const auto c = Config({Route("t", MATCH(m.tenant = "acme")),
                         Route("gold", MATCH(m.priority = Priority::kGold)), Default()});
  EXPECT_EQ(Pick(c, FACTS(f.tenant = "acme"; f.priority = Priority::kBronze)), "t");
  EXPECT_EQ(Pick(c, FACTS(f.tenant = "other"; f.priority = Priority::kGold)), "gold");
  EXPECT_EQ(Pick(c, FACTS(f.tenant = ""; f.priority = Priority::kSilver)), "default");
}

TEST(MatchRoute, HeadersCaseInsensitiveNameExactValue) {
  RouteMatch m;
  m.headers = {{"x-team", "Search"}};
  const auto c = Config({Route("h", m), Default()});
  http::HttpRequest req;
  req.headers = {{"x-other", "1"}, {"x-team", "Search"}};  // the server lower-cases names
  EXPECT_EQ(Pick(c, FACTS(f.request = &req)), "h");
  req.headers = {{"x-team", "search"}};
  EXPECT_EQ(Pick(c, FACTS(f.request = &req)), "default");  // the value compares exactly
  req.headers = {{"x-team", "a"}, {"x-team", "Search"}};
  EXPECT_EQ(Pick(c, FACTS(f.request = &req)), "h");  // any header of the name
  EXPECT_EQ(Pick(c, RequestFacts{}), "default");     // no request: no header matches
  // A config's upper-case name is lower-cased at parse time.
  auto parsed = ParseGatewayConfig(
      "pools: [{name: a, replicas: ['http://h:1']}]\n"
      "routes: [{name: h, match: {header: {X-Team: Search}}, to: a}]\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  req.headers = {{"x-team", "Search"}};
  EXPECT_EQ(Pick(**parsed, FACTS(f.request = &req)), "h");
}

TEST(MatchRoute, PromptBoundsAreInclusive) {
  const auto c = Config({
    Route("short", MATCH(m.max_prompt_tokens = 100)),
        Route("mid", MATCH(m.min_prompt_tokens = 101; m.max_prompt_tokens = 1000)), Default()
  });
  EXPECT_EQ(Pick(c, RequestFacts{}, 0), "short");
  EXPECT_EQ(Pick(c, RequestFacts{}, 100), "short");
  EXPECT_EQ(Pick(c, RequestFacts{}, 101), "mid");
  EXPECT_EQ(Pick(c, RequestFacts{}, 1000), "mid");
  EXPECT_EQ(Pick(c, RequestFacts{}, 1001), "default");
}

TEST(MatchRoute, AllConditionsMustHold) {
  RouteMatch all = MATCH(m.model = "m"; m.adapter_prefix = "ft-"; m.tenant = "acme";
                         m.priority = Priority::kGold; m.min_prompt_tokens = 10);
  all.headers = {{"x-a", "1"}};
  const auto c = Config({Route("all", all), Default()});
  http::HttpRequest req;
  req.headers = {{"x-a", "1"}};
  const RequestFacts full = FACTS(f.model = "m"; f.adapter = "ft-x"; f.tenant = "acme";
                                  f.priority = Priority::kGold; f.request = &req);
  EXPECT_EQ(Pick(c, full, 10), "all");
  EXPECT_EQ(Pick(c, full, 9), "default");
  auto without = [&](auto change) {
    RequestFacts f = full;
    change(f);
    return Pick(c, f, 10);
  };
  EXPECT_EQ(without([](RequestFacts& f) { f.model = "n"; }), "default");
  EXPECT_EQ(without([](RequestFacts& f) { f.adapter = "x"; }), "default");
  EXPECT_EQ(without([](RequestFacts& f) { f.tenant = "z"; }), "default");
  EXPECT_EQ(without([](RequestFacts& f) { f.priority = Priority::kSilver; }), "default");
  http::HttpRequest other;
  EXPECT_EQ(without([&](RequestFacts& f) { f.request = &other; }), "default");
}

TEST(MatchRoute, FirstMatchWinsAndNoneMatchesWithoutADefault) {
  const auto c =
      Config({Route("one", MATCH(m.model = "m")), Route("two", MATCH(m.model = "m"), "b")});
  EXPECT_EQ(Pick(c, FACTS(f.model = "m")), "one");
  EXPECT_EQ(Pick(c, FACTS(f.model = "x")), "(none)");
  const auto d = Config({Default("a"), Route("never", MATCH(m.model = "m"))});
  EXPECT_EQ(Pick(d, FACTS(f.model = "m")), "default");
  const auto e = Config({Route("empty", RouteMatch{})});  // `match: {}` matches everything
  EXPECT_EQ(Pick(e, FACTS(f.model = "anything")), "empty");
}

TEST(MatchRoute, MeasuresLazilyOncePerPool) {
  const auto c =
      Config({Route("m", MATCH(m.model = "m")), Route("a1", MATCH(m.min_prompt_tokens = 50)),
              Route("a2", MATCH(m.min_prompt_tokens = 20)),
              Route("b1", MATCH(m.min_prompt_tokens = 5), "b"), Default()});
  std::map<std::string, int> calls;
  auto measure = [&](const PoolConfig& p) {
    ++calls[p.name];
    return int64_t{10};
  };
  // No prompt-length condition reached: never measured.
  EXPECT_EQ(MatchRoute(c, FACTS(f.model = "m"), measure)->name, "m");
  EXPECT_TRUE(calls.empty());
  // a1 and a2 (pool a) share one measurement; b1 measures for pool b.
  EXPECT_EQ(MatchRoute(c, FACTS(f.model = "x"), measure)->name, "b1");
  EXPECT_EQ(calls["a"], 1);
  EXPECT_EQ(calls["b"], 1);
  // A route whose cheaper conditions fail does not measure.
  calls.clear();
  const auto d = Config(
      { Route("g", MATCH(m.priority = Priority::kGold; m.min_prompt_tokens = 1)), Default() });
  EXPECT_EQ(MatchRoute(d, FACTS(f.priority = Priority::kBronze), measure)->name, "default");
  EXPECT_TRUE(calls.empty());
}

// A split measures with its first arm's pool, a cascade with its first pool.
TEST(MatchRoute, SplitsAndCascadesMeasureWithTheirPrimaryPool) {
  RouteConfig split = Route("split", MATCH(m.min_prompt_tokens = 50), "");
  split.arms = {{"b", 10}, {"a", 90}};
  RouteConfig cascade = Route("cascade", MATCH(m.min_prompt_tokens = 5), "");
  cascade.cascade = CascadeConfig{"a", "b", CascadeSignal::kMeanLogprob, -1.0};
  const auto c = Config({split, cascade, Default()});
  std::map<std::string, int> calls;
  auto measure = [&](const PoolConfig& p) {
    ++calls[p.name];
    return p.name == "b" ? int64_t{60} : int64_t{10};
  };
  EXPECT_EQ(MatchRoute(c, FACTS(f.model = "x"), measure)->name, "split");  // b measured 60
  EXPECT_EQ(calls["b"], 1);
  EXPECT_EQ(calls["a"], 0);
  calls.clear();
  auto small = [&](const PoolConfig& p) {
    ++calls[p.name];
    return int64_t{10};
  };
  EXPECT_EQ(MatchRoute(c, FACTS(f.model = "x"), small)->name, "cascade");
  EXPECT_EQ(calls["b"], 1);
  EXPECT_EQ(calls["a"], 1);
}

}  // namespace
}  // namespace strata::gateway
