// Route matching: a table of small predicates, one per condition of a RouteMatch, all ANDed; the
// prompt-length predicate last, so the (possibly costly) measurement runs only when every cheaper
// condition already holds.
#include "gateway/routes.h"

#include <map>
#include <string_view>

namespace strata::gateway {
namespace {

bool Equal(const std::optional<std::string>& want, const std::string& have) {
  return !want || *want == have;
}

bool HeadersHold(const RouteMatch& m, const http::HttpRequest* req) {
  for (const auto& [name, value] : m.headers) {
    if (req == nullptr) return false;
    bool found = false;
    for (const auto& [n, v] : req->headers) {
      if (n == name && v == value) {
        found = true;
        break;
      }
    }
    if (!found) return false;
  }
  return true;
}

using Predicate = bool (*)(const RouteMatch&, const RequestFacts&);
constexpr Predicate kConditions[] = {
    [](const RouteMatch& m, const RequestFacts& f) { return Equal(m.model, f.model); },
    [](const RouteMatch& m, const RequestFacts& f) { return Equal(m.adapter, f.adapter); },
    [](const RouteMatch& m, const RequestFacts& f) {
      return !m.adapter_prefix || std::string_view(f.adapter).starts_with(*m.adapter_prefix);
    },
    [](const RouteMatch& m, const RequestFacts& f) { return Equal(m.tenant, f.tenant); },
    [](const RouteMatch& m, const RequestFacts& f) {
      return !m.priority || *m.priority == f.priority;
    },
    [](const RouteMatch& m, const RequestFacts& f) { return HeadersHold(m, f.request); },
};

}  // namespace

bool MatchHolds(const RouteMatch& m, const RequestFacts& facts,
                const std::function<int64_t()>& prompt_tokens) {
  for (Predicate p : kConditions) {
    if (!p(m, facts)) return false;
  }
  if (!m.needs_prompt_tokens()) return true;
  const int64_t n = prompt_tokens ? prompt_tokens() : 0;
  if (m.min_prompt_tokens && n < *m.min_prompt_tokens) return false;
  if (m.max_prompt_tokens && n > *m.max_prompt_tokens) return false;
  return true;
}

const RouteConfig* MatchRoute(const GatewayConfig& cfg, const RequestFacts& facts,
                              const std::function<int64_t(const PoolConfig&)>& prompt_tokens) {
  std::map<std::string_view, int64_t> measured;  // pool name -> tokens (measured once per pool)
  for (const RouteConfig& r : cfg.routes) {
    if (!r.match) return &r;
    const PoolConfig* pool = cfg.FindPool(r.primary_pool());  // a split: its first arm
    auto tokens = [&]() -> int64_t {
      if (pool == nullptr || !prompt_tokens) return 0;
      auto it = measured.find(pool->name);
      if (it == measured.end()) it = measured.emplace(pool->name, prompt_tokens(*pool)).first;
      return it->second;
    };
    if (MatchHolds(*r.match, facts, tokens)) return &r;
  }
  return nullptr;
}

}  // namespace strata::gateway
