#include "control/up_replicas.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace strata::control::up {
namespace {

// Of `names`, those beyond the `keep` that stay, in the order they leave: not ready ones first,
// then the newest (highest index, same width or longer).
std::vector<std::string> Extras(std::vector<std::string> names, size_t keep,
                                const ChildMap& children) {
  if (names.size() <= keep) return {};
  std::sort(names.begin(), names.end(), [&children](const std::string& a, const std::string& b) {
    const bool ra = IsReady(children, a), rb = IsReady(children, b);
    return ra != rb ? !ra : a > b;
  });
  names.resize(names.size() - keep);
  return names;
}

}  // namespace

Status ReplicaSet::StartReplica(State& s, const PoolSpec& p, const std::string& version) {
  PoolRun& run = s.pools[p.name];
  const std::string name = fmt::format("{}-{}", p.name, run.next_index++);
  RETURN_IF_ERROR(launcher_.StartReplica(s.spec, p, version, name));
  s.replicas[name] = ReplicaRun{p.name, version, false, std::nullopt};
  return Status::Ok();
}

void ReplicaSet::ReconcilePool(State& s, const PoolSpec& p, PoolRun& run, const ChildMap& children,
                               std::vector<std::string>* leave) {
  FinishCanary(s, p, run, leave);
  std::vector<std::string> current, old;
  int ready_new = 0;
  for (const auto& [name, r] : s.replicas) {
    if (r.pool != p.name || r.leaving || run.InCanarySet(r.version)) continue;
    (r.version == run.version ? current : old).push_back(name);
    ready_new += r.version == run.version && IsReady(children, name);
  }
  for (int i = static_cast<int>(current.size()); i < run.desired; ++i) {
    if (Status e = StartReplica(s, p, run.version); !e.ok()) {
      std::fprintf(stderr, "strata up: pool %s: %s\n", p.name.c_str(), e.ToString().c_str());
      break;
    }
  }
  const size_t allowed_old = static_cast<size_t>(std::max(0, run.desired - ready_new));
  for (std::string& n : Extras(old, allowed_old, children)) leave->push_back(std::move(n));
  if (old.empty() && !run.rollout.empty()) {
    run.last_rollout = {{"strategy", "surge"},    {"pool", p.name},
                        {"from", run.surge_from}, {"to", run.version},
                        {"phase", "promoted"},    {"reason", "every old replica drained"}};
    run.rollout.clear();
  }
  for (std::string& n : Extras(current, static_cast<size_t>(run.desired), children))
    leave->push_back(std::move(n));
  ReconcileCanarySet(s, p, run, children, leave);
}

// The new version's set of a canary rollout: as many replicas as the pool's count (the old set's:
// the autoscaler sizes the pool, the set follows), extras leave; then the rollout sees the set.
void ReplicaSet::ReconcileCanarySet(State& s, const PoolSpec& p, PoolRun& run,
                                    const ChildMap& children, std::vector<std::string>* leave) {
  if (!run.canary || !run.canary->active()) return;
  const std::string version = run.canary->to();
  std::vector<std::string> set;
  NewSetState seen;
  seen.wanted = std::max(1, run.desired);
  for (const auto& [name, r] : s.replicas) {
    if (r.pool != p.name || r.leaving || r.version != version) continue;
    set.push_back(name);
    auto it = children.find(name);
    if (it == children.end()) continue;
    seen.ready += it->second.state == ChildState::kReady;
    if (it->second.state == ChildState::kFailed && seen.failed.empty())
      seen.failed = fmt::format("{}: {} (log {})", name, it->second.last_exit, it->second.log_path);
  }
  for (int i = static_cast<int>(set.size()); i < seen.wanted; ++i) {
    if (Status e = StartReplica(s, p, version); !e.ok()) {
      seen.failed = e.ToString();
      break;
    }
  }
  for (std::string& n : Extras(set, static_cast<size_t>(seen.wanted), children)) {
    seen.ready -= IsReady(children, n);
    leave->push_back(std::move(n));
  }
  run.canary->ObserveReplicas(seen, std::chrono::steady_clock::now());
  FinishCanary(s, p, run, leave);  // a failed start ends it at once
}

// A finished canary rollout is applied: promoted → the pool runs the new version (the old
// replicas are then "old" and drain, the new set ready); rolled back or failed → the new set
// leaves and the pool keeps its version. The rollout stays in the status as last_rollout.
void ReplicaSet::FinishCanary(State& s, const PoolSpec& p, PoolRun& run,
                              std::vector<std::string>* leave) {
  if (!run.canary || run.canary->active()) return;
  const CanaryRollout& c = *run.canary;
  if (c.phase() == RolloutPhase::kPromoted) {
    run.version = c.to();
  } else {
    for (auto& [name, r] : s.replicas) {
      if (r.pool != p.name || r.leaving || r.version != c.to()) continue;
      r.leaving = true;
      leave->push_back(name);
    }
  }
  run.last_rollout = c.ToJson(std::chrono::steady_clock::now());
  std::fprintf(stderr, "strata up: pool %s: rollout %s -> %s %s: %s\n", p.name.c_str(),
               c.from().c_str(), c.to().c_str(), std::string(RolloutPhaseName(c.phase())).c_str(),
               c.reason().c_str());
  run.canary.reset();
}

void ReplicaSet::RecordColdStarts(State& s, const ChildMap& children) {
  for (const auto& [name, c] : children) {
    if (c.cold_start_s < 0 || s.seen_ready.contains(name) || !s.replicas.contains(name)) continue;
    s.seen_ready.insert(name);
    const std::string& pool = s.replicas[name].pool;
    double from_zero = -1;
    auto& acts = s.activations;
    if (auto a = std::find_if(acts.begin(), acts.end(),
                              [&pool](const Activation& x) { return x.pool == pool; });
        a != acts.end()) {
      from_zero = std::chrono::duration<double>(std::chrono::steady_clock::now() - a->at).count();
      acts.erase(a);
    }
    s.cold_starts.push_back({pool, name, c.cold_start_s, from_zero});
  }
}

void ReplicaSet::StopLeavers(State& s, const std::vector<std::string>& leave) {
  const auto now = std::chrono::steady_clock::now();
  for (const std::string& n : leave) s.replicas[n].stop_at = now + kLeaveAfterReload;
  for (auto& [name, r] : s.replicas) {  // after the gateway stopped sending to them
    if (!r.leaving || !r.stop_at || now < *r.stop_at) continue;
    sup_.Stop(name);
    r.stop_at.reset();
  }
}

void ReplicaSet::Reconcile(State& s) {
  if (s.stopping) return;
  ChildMap children = ChildrenByName(sup_);
  for (auto it = s.replicas.begin(); it != s.replicas.end();)  // stopped and reaped
    it = children.contains(it->first) ? std::next(it) : s.replicas.erase(it);
  RecordColdStarts(s, children);
  std::vector<std::string> leave;
  for (const PoolSpec& p : s.spec.pools) ReconcilePool(s, p, s.pools[p.name], children, &leave);
  for (const std::string& n : leave) s.replicas[n].leaving = true;
  children = ChildrenByName(sup_);  // new replicas were started: read again
  if (Status e = configs_.WriteGateway(s, children); !e.ok())
    std::fprintf(stderr, "strata up: gateway.yaml: %s\n", e.ToString().c_str());
  StopLeavers(s, leave);
  configs_.WriteTargets(children);
}

int ReplicaSet::CurrentReplicas(const State& s, const std::string& pool) {
  const ChildMap children = ChildrenByName(sup_);
  MutexLock lock(&s.mu);
  int n = 0;
  auto run = s.pools.find(pool);
  for (const auto& [name, r] : s.replicas) {
    auto it = children.find(name);
    const bool canary_set = run != s.pools.end() && run->second.InCanarySet(r.version);
    n += r.pool == pool && !r.leaving && !canary_set && it != children.end() &&
         it->second.state != ChildState::kFailed;
  }
  return n;
}

}  // namespace strata::control::up
