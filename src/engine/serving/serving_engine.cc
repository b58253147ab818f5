#include "engine/serving/serving_engine.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>

#include "base/memory_size.h"
#include "cachekey/block_hash.h"

namespace strata::engine::serving {

namespace {
std::string Fingerprint(std::span<const uint8_t> bytes) {
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

// The tiers' block events go into the engine's event log, next to the pool's (the log is shared,
// so a tier worker never outlives it).
kvtier::TierObserver TierEvents(const sched::Engine& engine) {
  return [log = engine.shared_kv_events()](kvtier::TierId tier, const kvtier::BlockKey& key,
                                           bool present) {
    static constexpr protocol::KvTier kTiers[] = {protocol::KvTier::kRam, protocol::KvTier::kDisk,
                                                  protocol::KvTier::kRedis};
    log->Record(present ? kv::KvEventOp::kAdd : kv::KvEventOp::kRemove,
                kTiers[static_cast<size_t>(tier)], key);
  };
}
}  // namespace

ServingEngine::~ServingEngine() { Stop(); }

void ServingEngine::Stop() {
  if (!engine_ || stopped_) return;
  stopped_ = true;
  engine_->Stop();
  if (tiers_) {
    port_->set_flush_mode(true);
    engine_->FlushKvTier();
    tiers_->Shutdown();
  }
}

std::optional<kvtier::TieredKvStats> ServingEngine::TierStats() const {
  if (!tiers_) return std::nullopt;
  return tiers_->Stats();
}

Result<std::unique_ptr<ServingEngine>> ServingEngine::Create(
    std::shared_ptr<const model::Model> model, const ServingConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<ServingEngine> s(new ServingEngine());
  s->model_ = std::move(model);
  s->cfg_ = config;
  const auto& mc = s->model_->config();
  s->max_model_len_ = config.max_model_len > 0 ? std::min(config.max_model_len, mc.ctx_len)
                                               : std::min(mc.ctx_len, 8192);
  ASSIGN_OR_RETURN(uint64_t budget, ParseMemorySize(config.kv_cache.memory));
  kv::KvLayout layout;
  layout.n_layers = mc.n_layers;
  layout.kv_dim = mc.kv_dim();
  layout.block_size = config.kv_cache.block_size;
  layout.dtype = config.kv_cache.dtype;
  layout.num_blocks = 1;
  RETURN_IF_ERROR(layout.Validate().WithContext("KV cache layout"));
  layout.num_blocks = kv::NumBlocksForBudget(layout, budget);
  const int blocks_per_seq =
      (s->max_model_len_ + config.kv_cache.block_size - 1) / config.kv_cache.block_size;
  if (layout.num_blocks < blocks_per_seq)
    return Status::InvalidArgument(
        "engine.kv_cache.memory (--kv-cache-memory) " + config.kv_cache.memory + " holds " +
        std::to_string(layout.num_blocks) + " blocks, fewer than one sequence of " +
        std::to_string(s->max_model_len_) + " tokens needs (" + std::to_string(blocks_per_seq) +
        "); raise it or lower engine.max_model_len (--max-model-len)");
  s->layout_ = layout;
  ASSIGN_OR_RETURN(s->storage_, kv::KvStorage::Create(layout));
  s->pool_ =
      std::make_unique<ThreadPool>(config.threads > 0 ? config.threads : DefaultThreadCount());
  s->runner_ =
      std::make_unique<runner::CpuModelRunner>(*s->model_, s->storage_.get(), s->pool_.get());

  kv::KvManagerConfig kc;
  kc.num_blocks = layout.num_blocks;
  kc.block_size = config.kv_cache.block_size;
  kc.enable_prefix_cache = config.kv_cache.prefix_cache;
  sched::SchedulerConfig sc = config.scheduler;
  sc.max_model_len =
      s->max_model_len_;  // derived: the configured length, resolved against the model
  sc.max_loras = config.lora.max_loras;  // the LoRA active set (engine.lora)
  kv::KvStorage* storage = s->storage_.get();
  auto copy = [storage](std::span<const sched::BlockCopy> copies) {
    for (const auto& c : copies) storage->CopyBlock(c.src, c.dst, c.num_slots);
  };
  ASSIGN_OR_RETURN(s->engine_, sched::Engine::Create(s->runner_.get(), kc, sc, &s->clock_, copy));
  // Everything that changes the meaning of a KV block: the whole model file (weights, tokenizer,
  // rope settings and every other metadata key) by content hash, the KV dtype and the block size.
  const auto& f = s->model_->gguf();
  s->fingerprint_ = Fingerprint(f.bytes());
  s->engine_->SetModelSalt(cachekey::ModelSalt(
      {s->fingerprint_, kv::KvDTypeName(config.kv_cache.dtype), config.kv_cache.block_size}));
  if (config.kv_tiers.enabled()) {
    ASSIGN_OR_RETURN(s->tiers_, kvtier::TieredKvCache::Create(config.kv_tiers, layout.BlockBytes(),
                                                              FormatId(s->fingerprint_, layout),
                                                              TierEvents(*s->engine_)));
    s->port_ = std::make_unique<TieredCachePort>(s->tiers_.get(), s->storage_.get(),
                                                 config.kv_tiers.max_queued_writes);
    s->engine_->AttachKvTier(s->port_.get(), config.kv_tier_prefetch_timeout_s);
  }
  return s;
}

}  // namespace strata::engine::serving
