// KvEventLog: which KV blocks this replica holds, and in which tier, as a stream of add/remove
// events that a gateway polls (`GET /v1/kv/events`, src/server/README.md) to route requests to the
// replica that already holds their prefix.
//
// Events. One event = (op, tier, block hash): `add` — the replica now holds the block in that
// tier; `remove` — it no longer does. Tiers: the engine's own KV pool (a hash registered in the
// KvManager's prefix cache, used or evictable) and the KV tier cache below it (RAM, disk, Redis;
// engine/kvtier). A hash may be held in several tiers at once; each (tier, hash) pair is tracked
// on its own.
//
// Held set. The log keeps the set of (tier, hash) pairs currently held, updated by the events, so
// a snapshot never touches engine or tier state. Only events that change the held set are logged
// (an add of a pair already held, or a remove of one not held, is dropped), so replaying the
// stream from a snapshot reproduces the held set exactly. Memory is bounded: a tier holds at most
// `max_held_per_tier` pairs; an add beyond that is dropped (the block is not published, and its
// later remove is dropped too), so the held set never exceeds 4 × max_held_per_tier entries.
//
// Cursors. Every logged event gets the next sequence number. A reader passes the cursor of its
// last answer (`since`) and gets the events after it, oldest first, at most `max` hashes, with
// the cursor of the last one returned. The ring keeps the newest `capacity` events; a cursor older
// than that, 0 (none), or one this log never issued → a reset answer: a full snapshot of the held
// set (one `add` group per tier, not limited by `max`) with the current cursor. Sequence numbers
// start at a random offset per process (from the instance id), so a cursor from another instance
// (a restarted replica) is almost surely outside the retained range and gets a reset.
//
// Instance: 128 random bits (OpenSSL RAND_bytes), lower-case hex, fixed for the log's lifetime.
//
// Thread contract: thread-safe. Producers (the engine thread, tier worker threads) take one mutex
// for O(1) work per event; readers (HTTP threads) take it for a copy of at most `max` hashes, or
// of the held set for a snapshot, and build their answers outside it. Callers may hold their own
// locks while producing (the log never calls out). Errors: none.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "cachekey/block_hash.h"
#include "protocol/wire.h"

namespace strata::engine::kv {

// Tiers are the wire's (protocol::KvTier: pool, ram, disk, redis).

enum class KvEventOp : uint8_t { kAdd, kRemove };
std::string_view KvEventOpName(KvEventOp op);  // "add" | "remove"

struct KvEventLogConfig {                      // 0 is taken as 1
  size_t capacity = 65536;                     // hash-events kept in the ring
  size_t max_held_per_tier = size_t{1} << 20;  // pairs tracked per tier
};

// Consecutive events with the same op and tier.
struct KvEventGroup {
  KvEventOp op = KvEventOp::kAdd;
  protocol::KvTier tier = protocol::KvTier::kPool;
  std::vector<cachekey::BlockHash> hashes;
};

struct KvEventPage {
  uint64_t cursor = 0;  // pass as `since` next time
  bool reset = false;   // `events` is a full snapshot: forget what was known first
  std::vector<KvEventGroup> events;
  size_t num_hashes() const;
};

class KvEventLog {
 public:
  explicit KvEventLog(KvEventLogConfig config = {});
  KvEventLog(const KvEventLog&) = delete;
  KvEventLog& operator=(const KvEventLog&) = delete;

  // Producers.
  void Add(protocol::KvTier tier, const cachekey::BlockHash& hash) EXCLUDES(mu_);
  void Remove(protocol::KvTier tier, const cachekey::BlockHash& hash) EXCLUDES(mu_);
  void Record(KvEventOp op, protocol::KvTier tier, const cachekey::BlockHash& hash) EXCLUDES(mu_);

  // The events after cursor `since` (at most `max` hashes, max >= 1), or a reset snapshot (see the
  // top of this file).
  KvEventPage Read(uint64_t since, size_t max) const EXCLUDES(mu_);

  const std::string& instance() const { return instance_; }
  const KvEventLogConfig& config() const { return cfg_; }
  // The cursor of the newest event (the cursor a reader that has seen everything holds).
  uint64_t head() const EXCLUDES(mu_);
  // Pairs held in `tier` now.
  size_t held(protocol::KvTier tier) const EXCLUDES(mu_);
  // Adds dropped because their tier was at max_held_per_tier.
  uint64_t dropped_adds() const EXCLUDES(mu_);

 private:
  struct Slot {
    cachekey::BlockHash hash{};
    KvEventOp op = KvEventOp::kAdd;
    protocol::KvTier tier = protocol::KvTier::kPool;
  };
  struct HashKey {
    size_t operator()(const cachekey::BlockHash& h) const;
  };
  void Snapshot(KvEventPage* page) const REQUIRES(mu_);

  const KvEventLogConfig cfg_;
  std::string instance_;
  uint64_t base_ = 0;  // the cursor before the first event (random per instance)

  mutable Mutex mu_;
  std::vector<Slot> ring_ GUARDED_BY(mu_);  // event s at ring_[(s - base_ - 1) % capacity]
  uint64_t head_ GUARDED_BY(mu_) = 0;       // sequence number of the newest event
  // hash -> bit mask of the tiers holding it.
  std::unordered_map<cachekey::BlockHash, uint8_t, HashKey> held_ GUARDED_BY(mu_);
  std::array<size_t, protocol::kNumKvTiers> held_count_ GUARDED_BY(mu_){};
  uint64_t dropped_adds_ GUARDED_BY(mu_) = 0;
};

}  // namespace strata::engine::kv
