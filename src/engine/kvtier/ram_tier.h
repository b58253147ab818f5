// RamTier (L2): encoded entries (block_codec.h bytes) in host memory under a PolicyIndex.
//
// Ownership: owns the entry bytes. Put() hands back whatever it pushed out (capacity or quota
// evictions, or the entry itself when it can never fit) so the caller can demote it to L3;
// expired entries are dropped, never handed back.
// Thread contract: thread-safe (one mutex; Get copies the bytes out under it).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "engine/kvtier/tier_policy.h"

namespace strata::engine::kvtier {

struct StoredEntry {
  BlockKey key{};
  std::string tenant;
  std::vector<uint8_t> bytes;
};

class RamTier {
 public:
  // `observer` (may be empty) hears every key entering or leaving the tier (tier_policy.h).
  RamTier(const TierLimits& limits, Clock clock, KeyObserver observer = {});

  std::vector<StoredEntry> Put(const BlockKey& key, std::string tenant, std::vector<uint8_t> entry);
  // The stored bytes, or nullopt (miss or expired, counted). Hits are counted by the caller once
  // the bytes decode (counters().CountHit; EraseCorrupt when they do not).
  std::optional<std::vector<uint8_t>> Get(const BlockKey& key);
  void EraseCorrupt(const BlockKey& key);
  void SweepExpired();
  // Removes and returns every entry, least recently used first.
  std::vector<StoredEntry> TakeAll();
  bool Contains(const BlockKey& key) const;
  uint64_t tenant_bytes(const std::string& tenant) const;
  TierStats Stats() const;
  TierCounters& counters() { return counters_; }

 private:
  using Index = PolicyIndex<std::vector<uint8_t>>;
  Clock clock_;
  mutable Mutex mu_;
  Index index_ GUARDED_BY(mu_);
  TierCounters counters_;
};

}  // namespace strata::engine::kvtier
