// TierPort: the engine's view of the KV cache tiers below its block pool (host RAM, disk, Redis).
// The engine knows blocks by pool index and chained hash; the port knows how to copy a block's KV
// content out of / into the pool's storage and where to keep it (engine::serving::TieredCachePort
// in engine/serving/tiered_cache_port.h implements it over kvtier::TieredKvCache + kv::KvStorage;
// tests use an in-memory fake). A request's own prefetch state is a TierStaging (tier_staging.h).
//
// Thread contract: Demote, Publish, Prefetch and Fill are called on the engine thread and must not
// block on I/O (they copy a block and queue work). A Fetch's ready/Take/Cancel may be called from
// the engine thread while a worker completes it; `wake` runs on a worker thread.
// Ownership: the port is not owned by the engine and must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/kv/kv_manager.h"

namespace strata::engine::sched {

class TierPort {
 public:
  class Fetch {
   public:
    virtual ~Fetch() = default;
    virtual bool ready() const = 0;
    // Payloads of the longest loaded prefix of the requested hashes, in order. Once, when ready.
    virtual std::vector<std::vector<uint8_t>> Take() = 0;
    virtual void Cancel() = 0;
  };
  virtual ~TierPort() = default;
  // A cached block leaves the pool (its content is still in storage): keep it in a lower tier.
  virtual void Demote(int32_t block, const kv::BlockHash& hash, std::string_view tenant) = 0;
  // Whether Publish is wanted (write-through tiers exist); when false the engine skips it.
  virtual bool WantsPublish() const = 0;
  // A block was just computed and registered: write it through to the shared tiers.
  virtual void Publish(int32_t block, const kv::BlockHash& hash, std::string_view tenant) = 0;
  // Starts loading the longest available prefix of `hashes`; `wake` runs when the Fetch is ready.
  virtual std::shared_ptr<Fetch> Prefetch(std::vector<kv::BlockHash> hashes,
                                          std::string_view tenant, std::function<void()> wake) = 0;
  // Writes a loaded payload into pool block `block`.
  virtual void Fill(int32_t block, const std::vector<uint8_t>& payload) = 0;
};

}  // namespace strata::engine::sched
