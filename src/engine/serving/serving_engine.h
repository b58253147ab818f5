// ServingEngine: a model served by the batching engine — the assembly of Model, paged KvStorage,
// CpuModelRunner, thread pool and sched::Engine, sized from one config (ServingConfig, the
// `engine:` part of the ReplicaConfig tree, serving_config.h). Used by `strata bench offline` and
// `strata serve`.
//
// Block events: the tier cache reports which blocks RAM/disk/Redis hold into the engine's
// KvEventLog (sched::Engine::kv_events()), next to the pool's own events.
// Ownership: owns every part; the Model is shared (the server also tokenizes with it).
// Thread contract: as sched::Engine (Submit/Cancel/Stats from any thread; the engine thread runs
// after Start()).
// Errors: Create() returns InvalidArgument naming the config key and flag that is wrong (memory
// budget too small for one sequence, bad dtype, ...).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/kv/kv_manager.h"
#include "engine/kv/kv_storage.h"
#include "engine/kvtier/tiered_cache.h"
#include "engine/runner/cpu_runner.h"
#include "engine/sched/clock.h"
#include "engine/sched/engine.h"
#include "engine/serving/serving_config.h"
#include "engine/serving/tiered_cache_port.h"
#include "model/model.h"

namespace strata::engine::serving {

class ServingEngine {
 public:
  static Result<std::unique_ptr<ServingEngine>> Create(std::shared_ptr<const model::Model> model,
                                                       const ServingConfig& config);
  ~ServingEngine();

  sched::Engine& engine() { return *engine_; }
  const model::Model& model() const { return *model_; }
  const ServingConfig& config() const { return cfg_; }
  int num_blocks() const { return layout_.num_blocks; }
  int max_model_len() const { return max_model_len_; }
  // XXH3-128 of the whole model file, hex: the weights fingerprint bound into every block key
  // (with the KV dtype and block size: cachekey::ModelSalt, handed to the engine, which adds each
  // request's tenant/adapter).
  const std::string& model_fingerprint() const { return fingerprint_; }
  // The tier cache's statistics, or nullptr-equivalent (empty optional) when no tier is configured.
  std::optional<kvtier::TieredKvStats> TierStats() const;
  kvtier::TieredKvCache* tiers() { return tiers_.get(); }

  void Start() { engine_->Start(); }
  // Stops the engine thread; with tiers, demotes every cached pool block and shuts the tier cache
  // down (drains writes, persists RAM into disk) so a restarted server finds them. Idempotent.
  void Stop();

 private:
  ServingEngine() = default;
  std::shared_ptr<const model::Model> model_;
  ServingConfig cfg_;
  kv::KvLayout layout_;
  int max_model_len_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<kv::KvStorage> storage_;
  std::unique_ptr<runner::CpuModelRunner> runner_;
  sched::SteadyClock clock_;
  std::unique_ptr<kvtier::TieredKvCache> tiers_;
  std::unique_ptr<TieredCachePort> port_;
  std::unique_ptr<sched::Engine> engine_;
  std::string fingerprint_;
  bool stopped_ = false;
};

}  // namespace strata::engine::serving
