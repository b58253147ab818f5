// gateway/routes: picks the route of a request — the first entry of the config's ordered route
// list whose `match` holds (every condition of a match must hold; a route without `match` matches
// everything).
//
// Conditions: `model`, `adapter`, `tenant` compare exactly; `adapter_prefix` is a prefix test on
// the adapter; `priority` compares the request's tier; `header` names compare case-insensitively
// (request and config names are lower case) and values exactly (any header of that name may
// match); `min_prompt_tokens` / `max_prompt_tokens` are inclusive bounds on the prompt's length
// as measured for the route's primary pool (RouteConfig::primary_pool: the pool, a split's first
// arm, a cascade's first) — measured lazily, only when a route with such a condition is
// reached, and at most once per pool.
//
// Thread contract: a pure function of its arguments.
// Errors: none; nullptr when no route matches (the caller answers 404 / 400).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "gateway/config.h"
#include "gateway/types.h"
#include "http/server.h"

namespace strata::gateway {

struct RequestFacts {          // what a route matches on
  std::string model, adapter;  // adapter: body "lora" if a string, else body "model"
  std::string tenant;          // "" = no tenant
  Priority priority = Priority::kSilver;
  const http::HttpRequest* request = nullptr;  // headers (nullptr: no header matches)
};

// Whether every condition of `m` holds. `prompt_tokens()` is called only when `m` has a
// prompt-length condition and the other conditions hold.
bool MatchHolds(const RouteMatch& m, const RequestFacts& facts,
                const std::function<int64_t()>& prompt_tokens);

// The first route whose match holds; `prompt_tokens(pool)` is called lazily, only for routes
// with a prompt-length condition (once per pool), and returns the prompt's length as measured for
// that route's pool.
const RouteConfig* MatchRoute(const GatewayConfig& cfg, const RequestFacts& facts,
                              const std::function<int64_t(const PoolConfig&)>& prompt_tokens);

}  // namespace strata::gateway
