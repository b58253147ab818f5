#include "gateway/gateway_services.h"

#include <utility>

namespace strata::gateway {

Result<std::shared_ptr<const Snapshot>> Snapshots::Build(std::shared_ptr<const GatewayConfig> cfg) {
  const std::shared_ptr<const Snapshot> previous = current();
  auto s = std::make_shared<Snapshot>();
  s->cfg = cfg;
  s->generation = previous ? previous->generation + 1 : 1;
  ASSIGN_OR_RETURN(s->tokenizers,
                   LoadPoolTokenizers(*cfg, previous ? &previous->tokenizers : nullptr));
  for (const PoolConfig& p : cfg->pools) {
    std::shared_ptr<ReplicaSet> set;
    if (previous) {
      auto it = previous->pools.find(p.name);
      if (it != previous->pools.end()) {
        set = it->second;
        set->Update(p, cfg->balancer, cfg->health);
      }
    }
    if (!set) {
      set = std::make_shared<ReplicaSet>(*io_, p, cfg->balancer, cfg->health);
      if (started_) set->Start();
    }
    s->pools.emplace(p.name, std::move(set));
  }
  return std::shared_ptr<const Snapshot>(std::move(s));
}

void Snapshots::StopPoolsNotIn(const Snapshot& next) {
  for (const auto& [name, set] : current()->pools)
    if (!next.pools.contains(name)) set->Stop();
}

void Snapshots::Publish(std::shared_ptr<const Snapshot> next) {
  MutexLock lock(&mu_);
  snap_ = std::move(next);
}

std::shared_ptr<const Snapshot> Snapshots::current() const {
  MutexLock lock(&mu_);
  return snap_;
}

void Snapshots::Start() {
  started_ = true;
  for (const auto& [name, set] : current()->pools) set->Start();
}

void Snapshots::Stop() {
  for (const auto& [name, set] : current()->pools) set->Stop();
}

void Snapshots::Reset() { Publish(nullptr); }

}  // namespace strata::gateway
