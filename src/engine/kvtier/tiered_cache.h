// TieredKvCache: the KV cache tiers below the engine's KV pool — host RAM (L2), a local directory
// (L3, survives restarts), Redis (L4, shared by every replica of a model).
//
// Unit. One entry = one full KV block of the engine (all layers, K and V) as an opaque byte
// payload of exactly `block_bytes` bytes, keyed by the block's chained prefix hash (BlockKey, the
// 32-byte SHA-256 of cachekey::HashBlock). The engine's salt already binds the model-weights
// fingerprint, tokenizer, KV dtype, block size, rope settings, LoRA adapter and tenant into that
// hash (cachekey::ModelSalt, cachekey::RequestSalt); the cache
// additionally stores `format_id` (a string the engine builds from the same facts) in every
// entry's header and rejects entries whose format_id differs.
//
// Stored entry (every tier stores the same bytes; see block_codec.h):
//   header: magic "SKVB", format version, flags (compression), key (32 B), format_id hash,
//           payload length (uncompressed), stored length, tenant, checksum (XXH3-64 over header
//           with the checksum field zeroed + stored bytes)
//   stored bytes: the payload, raw or compressed (LZ4/zstd, only when it saves >= 1/8).
// Any mismatch on read (magic, version, key, format, lengths, checksum, decompression) counts as
// `corrupt` for that tier, deletes the entry there, and is a miss — never served.
//
// Write path (all non-blocking for the caller; a bounded queue of `max_queued_writes` entries
// drops new work and counts `queue_drops` when full):
//   Demote(key, payload)   the engine's pool evicts a cached block → L2 (or L3 when there is no
//                          L2; or nothing when neither exists). L2 evictions (capacity, quota)
//                          move down to L3.
//   Publish(key, payload)  a block was just computed and committed → written through to L4
//                          (when redis.write_through) and to L3 (when disk.write_through).
//                          WantsPublish() is false when no tier wants them (the engine then skips
//                          the copy).
// Read path: Prefetch(keys) looks the keys up IN ORDER through L2 → L3 → L4 on a worker thread and
//   stops at the first key found in no tier; hits in L3/L4 are promoted into L2. A block served
//   from L3 is also written through to L4 when redis.write_through is on (a block that was on disk
//   before Redis was, e.g. after a warm restart, reaches the other replicas the first time it is
//   used). The result (the
//   longest loaded prefix of `keys`) is delivered through the PrefetchHandle; `on_done` is called
//   (from a worker thread) when it is ready, so the engine can wake up.
// Shutdown(): stops accepting work, drains the queue, and (when L3 exists) writes every L2 entry
//   to L3 so a restarted server finds them (warm restart). The destructor calls it.
//
// Per-tier policy: byte capacity (LRU eviction), TTL (entries older than ttl_s are misses and are
//   removed lazily or by a sweep; Redis uses its own expiry, PX), and per-tenant byte quotas: a
//   tenant over its quota in a tier evicts its own LRU entries first (never another tenant's).
//   Tenant "" is the default tenant.
// L3 files: <dir>/<first 2 hex chars>/<64 hex chars of key>.kvb, written to a unique temp name in
//   the same directory, fsynced, renamed, directory fsynced; at startup the directory is scanned
//   to rebuild the index (temp files are deleted; entries are verified when read). Capacity counts
//   file sizes.
// L4 Redis: key "<key_prefix><64 hex>" → the whole stored entry as one value, SET with PX when a
//   TTL is set. Connection errors never fail the caller: lookups miss, writes are dropped and
//   counted (errors), and the tier reconnects with backoff. Timeouts bound every command. Create()
//   tries one connection; Stats().redis.up / last_error tell the caller whether it worked (so a
//   server can warn at start that Redis is unreachable).
//
// Block events (optional TierObserver given to Create): the cache tells which keys each tier holds,
//   so a replica can publish them (engine/kv/kv_event_log.h, GET /v1/kv/events).
//   RAM and disk: exact — every entry stored, evicted (capacity, quota, demoted down), expired
//   (on a lookup or by the sweep), deleted as corrupt, moved at shutdown; the disk tier reports
//   every file its startup scan finds.
//   Redis is shared and cannot be watched, so the cache tracks the keys THIS replica knows are
//   there: ones it wrote (write-through, disk → Redis) or found by a lookup; a key is forgotten
//   when a lookup misses it (or fails), when this replica deletes it (quota, corrupt), when its
//   ttl_s has passed since it was written or last found, and beyond kMaxTrackedRedisKeys (least
//   recently touched first). Not seen: keys written by other replicas that this one never looked
//   up, and Redis's own maxmemory evictions or other replicas' deletions until a lookup misses.
//   Without an observer none of this runs (no tracking memory).
//
// Thread contract: every public method is thread-safe; the engine calls Demote/Publish/Prefetch
// from its thread and must never be blocked by I/O. Internally one or more worker threads do all
// encoding, compression, I/O and network.
// Errors: Create() returns InvalidArgument for a bad config (naming the field) and IoError when the
// L3 directory can't be created/used. Redis being down at Create is NOT an error (the tier starts
// disconnected and retries).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata::engine::kvtier {

using BlockKey = std::array<uint8_t, 32>;

enum class Compression { kNone, kLz4, kZstd };

struct TierLimits {
  uint64_t capacity_bytes = 0;  // required > 0 for an enabled L2/L3; 0 = unlimited for Redis
  double ttl_s = 0;             // 0: no expiry
  // Per-tenant byte quota in this tier; tenants not listed get default_tenant_quota_bytes
  // (0: no quota beyond capacity).
  std::vector<std::pair<std::string, uint64_t>> tenant_quota_bytes;
  uint64_t default_tenant_quota_bytes = 0;
};

struct RamTierConfig {
  TierLimits limits;
};

struct DiskTierConfig {
  std::string dir;
  TierLimits limits;
  bool write_through = false;  // Publish() also writes here
  bool fsync = true;
};

struct RedisTierConfig {
  std::string url;  // redis://host:port[/db]   (host may be a name or IPv4 address)
  std::string key_prefix = "strata:kv:";
  TierLimits limits;  // capacity is not enforced for Redis (its maxmemory policy is); TTL is
                      // (PX); tenant quotas are, over the keys THIS replica wrote (least
                      // recently written deleted first)
  bool write_through = true;  // Publish() writes here
  double timeout_s = 0.5;     // connect and per-command timeout
};

struct TieredKvConfig {
  std::optional<RamTierConfig> ram;
  std::optional<DiskTierConfig> disk;
  std::optional<RedisTierConfig> redis;
  Compression compression = Compression::kNone;
  size_t max_queued_writes = 256;  // entries (each up to one block) waiting for a worker
  int io_threads = 2;
  bool enabled() const { return ram || disk || redis; }
  Status Validate() const;
};

// The YAML form of this config is the `engine.kv_tiers` section of the replica config
// (engine/serving/serving_config.h, which also reads it as a file of its own).

struct TierStats {
  std::string name;  // "ram", "disk", "redis"
  bool enabled = false;
  // Whether the tier can serve now: Redis is up while a connection to it is open; RAM and disk
  // always are. `address` and `last_error` (Redis only): host:port and the last connection error.
  bool up = true;
  std::string address{}, last_error{};
  int64_t hits = 0, misses = 0;
  int64_t bytes_in = 0, bytes_out = 0;  // stored bytes written into / read out of this tier
  int64_t entries = 0, bytes_used = 0;
  int64_t evictions = 0;    // capacity/quota evictions (including demotions out of it)
  int64_t expirations = 0;  // TTL
  int64_t corrupt = 0;      // entries rejected on read (and deleted)
  int64_t errors = 0;       // I/O or connection errors
  int64_t read_ops = 0;
  double read_seconds_total = 0;  // time spent in lookups/reads (for mean latency)
  int64_t write_ops = 0;
  double write_seconds_total = 0;
};

struct TieredKvStats {
  TierStats ram, disk, redis;
  int64_t queue_drops = 0;    // writes dropped because the queue was full
  int64_t queued_writes = 0;  // currently waiting
  int64_t prefetches = 0;     // Prefetch calls
  int64_t prefetched_blocks = 0;
};

// Which tier a block event is about.
enum class TierId : uint8_t { kRam, kDisk, kRedis };
// Told when `tier` starts (`present` true) or stops (false) holding `key`; see "Block events"
// above. Called from worker threads (or Create's / Shutdown's caller) under the tier's own lock:
// must be quick and must not call into the cache.
using TierObserver = std::function<void(TierId tier, const BlockKey& key, bool present)>;
// Redis keys tracked at most for block events (each costs ~200 bytes).
inline constexpr size_t kMaxTrackedRedisKeys = 65536;

// The result of one Prefetch. Thread contract: ready()/Take() may be called from any thread;
// Take() only after ready() is true, once.
class PrefetchHandle {
 public:
  virtual ~PrefetchHandle() = default;
  virtual bool ready() const = 0;
  // The payloads of keys[0, n) in order (n may be 0); each exactly block_bytes long.
  virtual std::vector<std::vector<uint8_t>> Take() = 0;
  // Asks the worker to stop early (the handle becomes ready soon, possibly with fewer blocks).
  virtual void Cancel() = 0;
};

class TieredKvCache {
 public:
  // `block_bytes`: payload size of every entry (> 0). `format_id`: see the header comment.
  // `observer`: block events (may be empty; see the header comment).
  static Result<std::unique_ptr<TieredKvCache>> Create(const TieredKvConfig& config,
                                                       uint64_t block_bytes, std::string format_id,
                                                       TierObserver observer = {});
  virtual ~TieredKvCache() = default;

  virtual uint64_t block_bytes() const = 0;
  virtual bool WantsPublish() const = 0;

  // Non-blocking. `payload` must be block_bytes long (else ignored and counted as an error).
  virtual void Demote(const BlockKey& key, std::string_view tenant,
                      std::vector<uint8_t> payload) = 0;
  virtual void Publish(const BlockKey& key, std::string_view tenant,
                       std::vector<uint8_t> payload) = 0;

  // Non-blocking: starts loading the longest available prefix of `keys` (at most 4096 keys).
  // `on_done` (may be empty) runs on a worker thread once the handle is ready.
  virtual std::shared_ptr<PrefetchHandle> Prefetch(std::vector<BlockKey> keys,
                                                   std::string_view tenant,
                                                   std::function<void()> on_done) = 0;

  virtual TieredKvStats Stats() const = 0;
  // Drains pending writes and persists L2 into L3 (when both exist). Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace strata::engine::kvtier
