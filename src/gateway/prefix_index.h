// gateway/prefix_index: which replica holds which KV blocks, by chained block hash
// (cachekey/block_hash.h), and in which KV tier — the knowledge behind prefix affinity.
//
// Two sources per replica:
//   events  — what the replica itself publishes on /v1/kv/events: `add`/`remove` of a hash in a
//             tier (a hash may be in several tiers), `reset` (forget every event-learned hash);
//   history — the gateway's own routing: the hashes of requests it sent there, each believed
//             until an expiry time (the balancer's history_ttl for replicas that do not publish).
//             A history entry counts as held in the pool tier.
// Lookup walks a request's hash chain and stops at the first hash the replica does not hold
// (a prefix cache only reuses leading blocks), reporting for each held block its fastest tier.
//
// Memory: at most `max_hashes_per_replica` hashes per replica (default 1M, ~100 bytes each).
// Past the cap the oldest history entry goes first; with no history left, the oldest
// event-learned hash goes. Expired history is dropped lazily (on insertion and lookup).
// Thread contract: every method is thread-safe (one mutex; each call is a map walk, no I/O).
// Errors: none (unknown replicas read as holding nothing).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <list>
#include <map>
#include <span>
#include <string>
#include <unordered_map>

#include "base/mutex.h"
#include "cachekey/block_hash.h"
#include "gateway/types.h"

namespace strata::gateway {

using cachekey::BlockHash;

// The leading blocks of a request a replica holds.
struct PrefixMatch {
  int64_t blocks = 0;                          // leading hashes held (in any tier, or history)
  std::array<int64_t, kNumKvTiers> by_tier{};  // of those, how many have this as fastest tier
  int64_t from_history = 0;                    // of those, how many only history vouches for
};

class PrefixIndex {
 public:
  static constexpr size_t kDefaultMaxHashesPerReplica = size_t{1} << 20;
  explicit PrefixIndex(size_t max_hashes_per_replica = kDefaultMaxHashesPerReplica);

  // Events: the replica now holds (add) / no longer holds (remove) these hashes in `tier`.
  void Apply(const std::string& replica, KvTier tier, bool add, std::span<const BlockHash> hashes)
      EXCLUDES(mu_);
  // Forgets every event-learned hash of the replica (history stays).
  void ResetEvents(const std::string& replica) EXCLUDES(mu_);
  // History: the gateway sent a request with these hashes to the replica; believed until `expires`
  // (a later record of the same hash extends it). `now` drops what has expired.
  void RecordHistory(const std::string& replica, std::span<const BlockHash> hashes,
                     Clock::time_point now, Clock::time_point expires) EXCLUDES(mu_);
  PrefixMatch Lookup(const std::string& replica, std::span<const BlockHash> hashes,
                     Clock::time_point now) const EXCLUDES(mu_);
  // Forgets the replica entirely (it left the pool).
  void Remove(const std::string& replica) EXCLUDES(mu_);
  size_t size(const std::string& replica) const EXCLUDES(mu_);  // hashes held (both sources)

 private:
  struct HashOf {
    size_t operator()(const BlockHash& h) const {  // SHA-256 bytes are uniform already
      size_t v = 0;
      std::memcpy(&v, h.data(), sizeof(v));
      return v;
    }
  };
  struct Entry {
    uint8_t tiers = 0;  // bit t: held in KvTier t per events
    bool in_history = false;
    Clock::time_point expires{};
    std::list<BlockHash>::iterator history_pos, event_pos;
    bool in_event_order = false;
  };
  struct Replica {
    std::unordered_map<BlockHash, Entry, HashOf> entries;
    std::list<BlockHash> history_order;  // oldest record first
    std::list<BlockHash> event_order;    // oldest add first
  };
  static void DropHistory(Replica& r, std::unordered_map<BlockHash, Entry, HashOf>::iterator it);
  static void DropEvents(Replica& r, std::unordered_map<BlockHash, Entry, HashOf>::iterator it);
  void Expire(Replica& r, Clock::time_point now) const;
  void Trim(Replica& r) const;

  const size_t max_hashes_;
  mutable Mutex mu_;
  // `mutable`: Lookup drops expired history as it goes.
  mutable std::map<std::string, Replica, std::less<>> replicas_ GUARDED_BY(mu_);
};

}  // namespace strata::gateway
