// gateway/config under seeded mutation: 1,000 variants of a valid config (lines deleted,
// duplicated, re-indented; values replaced by hostile ones; keys moved; bytes flipped; the text
// truncated) must each parse or fail with a non-empty message — never crash or hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gateway/config.h"
#include "gateway/routes.h"

namespace strata::gateway {
namespace {

constexpr const char* kBase = R"(pools:
  - name: big
    replicas:
      - http://127.0.0.1:8101
      - http://127.0.0.1:8102
    labels: {gpu: a100}
    max_in_flight: 4
    dns:
      name: strata.local
      port: 8080
      interval_ms: 5000
  - name: small
    replicas: [http://127.0.0.1:8103]
routes:
  - name: long
    match:
      priority: gold
      min_prompt_tokens: 4097
      header: {x-team: search}
    to: big
  - name: legal
    match:
      adapter_prefix: finetune-legal-
      max_prompt_tokens: 100000
    to: big
  - name: split
    match: {model: chat}
    to:
      - {pool: big, weight: 90}
      - {pool: small, weight: 10}
    sticky: {key: header, header: x-session-id}
    canary:
      baseline: big
      canary: small
      steps: [5, 25, 50, 100]
      min_requests: 100
      min_duration_s: 60
      interval_s: 10
      guards:
        ttft_p95_max_ratio: 1.2
        tpot_p95_max_ratio: 1.2
        error_rate_max_delta: 0.01
        mean_logprob_min_delta: -0.2
    shadow: {pool: small, fraction: 0.1}
  - name: cheap
    match: {model: ask}
    to:
      cascade: {first: small, then: big, signal: mean_logprob, threshold: -1.0}
  - name: rest
    to: small
tenants:
  - name: acme
    api_keys: [k1, k2]
    tokens_per_minute: 10000
    requests_per_minute: 60
    max_concurrency: 4
    default_priority: gold
admission:
  gold_max_wait_ms: 2000
admin:
  api_key: admin-key
health:
  interval_ms: 500
  eject_after_failures: 3
balancer:
  policy: cost
  tier_seconds_per_block: {pool: 0, ram: 0.0001}
upstream:
  timeout_s: 600
  retries: 1
access_log: stderr
)";

const char* const kValues[] = {"-1",
                               "0",
                               ".nan",
                               "-.inf",
                               "1e400",
                               "99999999999999999999999",
                               "3.5",
                               "\"\"",
                               "~",
                               "true",
                               "[1, 2]",
                               "{a: b}",
                               "[[[[[[[[",
                               "]]]",
                               "*undefined",
                               "&a x",
                               "!!binary aGVsbG8=",
                               "'it''s'",
                               "\"\\x00\\uFFFF\"",
                               "http://",
                               "ftp://x",
                               "gold",
                               "platinum",
                               "{x-a: 1, x-a: 2}",
                               "- x",
                               "|\n  block",
                               "? complex",
                               "%TAG",
                               "@",
                               "`",
                               "\t",
                               "big",
                               "small",
                               "no-such-pool",
                               "[http://127.0.0.1:1, http://127.0.0.1:1]",
                               "[{pool: big, weight: 1}]",
                               "[{pool: big}, {pool: big}]",
                               "[{pool: big, weight: 0}, {pool: small, weight: 0}]",
                               "{cascade: {first: big, then: big}}",
                               "{cascade: ~}",
                               "[100, 50]",
                               "[0]",
                               "[5, 101]",
                               "min_logprob",
                               "margin",
                               "tenant",
                               "1.0001"};
const char* const kKeys[] = {
    "name",    "replicas", "to",       "match",    "pools",         "routes",
    "tenants", "dns",      "priority", "api_keys", "max_in_flight", "min_prompt_tokens",
    "header",  "policy",   "bogus",    "<<",       "health",        "port",
    "pool",    "weight",   "sticky",   "canary",   "shadow",        "cascade",
    "steps",   "baseline", "guards",   "first",    "then",          "signal",
    "admin",   "api_key",  "fraction", "key",      "interval_s",    "min_requests"};

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}
std::string Unlines(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += l + "\n";
  return s;
}

std::string Mutate(std::string text, std::mt19937& rng) {
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  std::vector<std::string> lines = Lines(text);
  if (lines.empty()) lines.push_back("");
  const size_t i = pick(lines.size());
  std::string& line = lines[i];
  const size_t colon = line.find(':');
  switch (pick(9)) {
    case 0:  // delete a key
      lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    case 1:  // duplicate a key
      lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(i), line);
      break;
    case 2:  // replace a value (wrong type, hostile number)
      if (colon != std::string::npos)
        line = line.substr(0, colon + 1) + " " + kValues[pick(std::size(kValues))];
      break;
    case 3: {  // rename a key (unknown keys, keys moved to the wrong section)
      const size_t start = line.find_first_not_of(" -");
      if (start != std::string::npos && colon != std::string::npos && colon > start)
        line = line.substr(0, start) + kKeys[pick(std::size(kKeys))] + line.substr(colon);
      break;
    }
    case 4:  // re-indent
      line = pick(2) ? "  " + line : line.substr(std::min<size_t>(2, line.size()));
      break;
    case 5:  // move a line elsewhere
    {
      std::string moved = line;
      lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(i));
      lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(pick(lines.size() + 1)), moved);
      break;
    }
    case 6:  // flip a byte
      text = Unlines(lines);
      text[pick(text.size())] = static_cast<char>(pick(256));
      return text;
    case 7:  // truncate
      text = Unlines(lines);
      return text.substr(0, pick(text.size() + 1));
    default:  // a value becomes a deep structure
      if (colon != std::string::npos)
        line = line.substr(0, colon + 1) + " " + std::string(pick(3000), '[');
      break;
  }
  return Unlines(lines);
}

TEST(GatewayConfigFuzz, ThousandSeededMutationsParseOrFailCleanly) {
  ASSERT_TRUE(ParseGatewayConfig(kBase).ok()) << ParseGatewayConfig(kBase).status().message();
  std::mt19937 rng(20261201);
  int ok = 0, errors = 0;
  for (int n = 0; n < 1000; ++n) {
    std::string text = kBase;
    const int rounds = 1 + static_cast<int>(rng() % 3);
    for (int r = 0; r < rounds; ++r) text = Mutate(std::move(text), rng);
    auto c = ParseGatewayConfig(text);
    if (c.ok()) {
      ++ok;
      // A config that parsed is usable: every route reaches its pools, matching works, a
      // canary's arms are its split's, and the route's target is exactly one of its forms.
      for (const RouteConfig& route : (*c)->routes) {
        ASSERT_NE((*c)->FindPool(route.primary_pool()), nullptr);
        for (std::string_view p : route.ReferencedPools())
          ASSERT_NE((*c)->FindPool(p), nullptr) << p;
        const int forms = static_cast<int>(!route.to.empty()) +
                          static_cast<int>(!route.arms.empty()) +
                          static_cast<int>(route.cascade.has_value());
        ASSERT_EQ(forms, 1) << "case " << n << ":\n" << text;
        if (route.canary) {
          ASSERT_EQ(route.arms.size(), 2u);
          ASSERT_FALSE(route.canary->steps.empty());
          ASSERT_TRUE(std::is_sorted(route.canary->steps.begin(), route.canary->steps.end()));
          ASSERT_GT(route.canary->steps.front(), 0);
          ASSERT_LE(route.canary->steps.back(), 100);
        }
      }
      RequestFacts f;
      f.priority = Priority::kGold;
      (void)MatchRoute(**c, f, [](const PoolConfig&) { return int64_t{5000}; });
    } else {
      ++errors;
      ASSERT_FALSE(c.status().message().empty()) << "case " << n << ":\n" << text;
    }
  }
  // The mutations reach both outcomes (a fuzzer that only ever fails tests nothing).
  EXPECT_GT(ok, 20);
  EXPECT_GT(errors, 300);
}

}  // namespace
}  // namespace strata::gateway
