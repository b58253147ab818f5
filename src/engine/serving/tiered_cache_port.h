// TieredCachePort: the engine's TierPort over a kvtier::TieredKvCache and the pool's KvStorage.
//
// Block payload format (what the tiers store for one pool block, block_bytes =
// KvLayout::BlockBytes):
//   for layer 0 .. n_layers-1:  K rows of the block (block_size × RowBytes, slot order), then
//                               V rows of the block (same size)
// i.e. exactly the bytes of the block in KvStorage, in the pool's KV dtype. The format_id given
// to the cache (FormatId) names the layout, so a different dtype/block size/model never reads it.
//
// Thread contract: Demote/Publish/Prefetch/Fill on the engine thread (a block copy + a queue push);
// the cache's workers do the rest. Flush mode (during shutdown) makes Demote wait for queue room
// instead of letting the cache drop work.
// Ownership: borrows the cache and the storage; both must outlive it.
#pragma once

#include <atomic>
#include <string>

#include "engine/kv/kv_storage.h"
#include "engine/kvtier/tiered_cache.h"
#include "engine/sched/tier_port.h"

namespace strata::engine::serving {

// "strata-kv/1;model=<fingerprint>;dtype=f16;block=16;layers=N;kv_dim=D"
std::string FormatId(const std::string& model_fingerprint, const kv::KvLayout& layout);

class TieredCachePort final : public sched::TierPort {
 public:
  // `max_queued_writes`: the cache's queue bound (flush mode keeps the queue at most half full).
  TieredCachePort(kvtier::TieredKvCache* cache, kv::KvStorage* storage, size_t max_queued_writes);

  void Demote(int32_t block, const kv::BlockHash& hash, std::string_view tenant) override;
  bool WantsPublish() const override { return cache_->WantsPublish(); }
  void Publish(int32_t block, const kv::BlockHash& hash, std::string_view tenant) override;
  std::shared_ptr<Fetch> Prefetch(std::vector<kv::BlockHash> hashes, std::string_view tenant,
                                  std::function<void()> wake) override;
  void Fill(int32_t block, const std::vector<uint8_t>& payload) override;

  void set_flush_mode(bool on) { flush_mode_ = on; }

  // The pool block's payload (see the format above).
  std::vector<uint8_t> ReadBlock(int32_t block) const;
  void WriteBlock(int32_t block, const std::vector<uint8_t>& payload);

 private:
  kvtier::TieredKvCache* cache_;
  kv::KvStorage* storage_;
  size_t block_bytes_;
  size_t slab_bytes_;  // one layer's K (or V) rows of one block
  bool flush_mode_ = false;
  size_t max_queue_ = 0;
};

}  // namespace strata::engine::serving
