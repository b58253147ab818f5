#include "control/up_rollouts.h"

#include <fmt/format.h>

#include <cstdio>

#include "control/gateway_yaml.h"
#include "control/rollout.h"

namespace strata::control::up {
namespace {

// The routes a canary rollout of `p` splits; empty for a surge rollout (strategy surge, or no
// strategy and the pool is not routed alone by any route).
Result<std::vector<std::string>> CanaryRoutes(const State& s, const PoolSpec& p) REQUIRES(s.mu) {
  if (p.rollout.strategy == RolloutStrategy::kSurge) return std::vector<std::string>{};
  ASSIGN_OR_RETURN(std::vector<std::string> routes, PlainRoutesTo(s.spec, p.name));
  if (routes.empty() && p.rollout.strategy == RolloutStrategy::kCanary)
    return Status::InvalidArgument(fmt::format(
        "pool '{}': rollout strategy canary needs a route whose to: is the pool alone", p.name));
  return routes;
}

}  // namespace

Status StartRollout(State& s, const std::string& pool, const std::string& version,
                    std::chrono::milliseconds ready_timeout) {
  const PoolSpec* p = s.spec.FindPool(pool);
  if (!p) return Status::NotFound("no pool named '" + pool + "'");
  const ModelSpec* m = s.spec.FindModel(p->model);
  if (!m || !m->Find(version))
    return Status::InvalidArgument(
        fmt::format("pool '{}': model '{}' has no version '{}'", pool, p->model, version));
  PoolRun& run = s.pools[pool];
  if (run.canary && run.canary->active()) {
    if (run.canary->to() == version) return Status::Ok();
    return Status::Unavailable(
        fmt::format("pool '{}': the canary rollout {} is in progress; wait until it is promoted "
                    "or rolled back (the gateway's POST /admin/canary/<route>/rollback ends it)",
                    pool, run.canary->Summary()));
  }
  if (run.version == version) return Status::Ok();
  ASSIGN_OR_RETURN(std::vector<std::string> routes, CanaryRoutes(s, *p));
  if (!routes.empty() && !run.rollout.empty())
    return Status::Unavailable(fmt::format(
        "pool '{}': the surge rollout {} is in progress; wait until it ends", pool, run.rollout));
  if (run.desired == 0) run.desired = 1;  // a rollout of an idle pool starts one to prove it
  if (routes.empty()) {  // surge: new replicas ready first, then one old one drains per new one
    if (run.rollout.empty()) run.surge_from = run.version;
    run.rollout = run.surge_from + " -> " + version;
    run.version = version;
    return Status::Ok();
  }
  run.canary_policy = p->rollout;
  run.canary.emplace(pool, run.version, version, CanaryPoolName(pool, version), std::move(routes),
                     ready_timeout, std::chrono::steady_clock::now());
  std::fprintf(stderr, "strata up: pool %s: canary rollout %s -> %s\n", pool.c_str(),
               run.version.c_str(), version.c_str());
  return Status::Ok();
}

bool AnyCanarySplits(const State& s) {
  for (const auto& [name, run] : s.pools)
    if (run.canary && run.canary->splitting()) return true;
  return false;
}

void ObserveCanaries(State& s, const Result<FetchReply>& reply) {
  for (auto& [name, run] : s.pools) {
    if (!run.canary || !run.canary->splitting()) continue;
    Result<std::vector<CanaryRouteState>> list = std::vector<CanaryRouteState>{};
    if (!reply.ok()) {
      list = reply.status();
    } else if (reply->status != 200) {
      list = Status::Unavailable(
          fmt::format("GET /admin/canary: HTTP {}: {}", reply->status, reply->body.substr(0, 200)));
    } else {
      list = ParseCanaryList(reply->body, run.canary->canary_pool());
    }
    run.canary->ObserveGateway(list, std::chrono::steady_clock::now());
  }
}

}  // namespace strata::control::up
