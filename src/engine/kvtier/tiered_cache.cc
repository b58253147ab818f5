#include "engine/kvtier/tiered_cache.h"

#include <cmath>
#include <deque>
#include <thread>

#include "base/mutex.h"
#include "engine/kvtier/block_codec.h"
#include "engine/kvtier/disk_tier.h"
#include "engine/kvtier/ram_tier.h"
#include "engine/kvtier/redis_tier.h"
#include "engine/kvtier/tiered_cache_internal.h"

namespace strata::engine::kvtier {
namespace {

constexpr size_t kMaxPrefetchKeys = 4096;
constexpr size_t kMaxQueuedWrites = size_t{1} << 20;
constexpr int kMaxIoThreads = 64;

Status ValidateLimits(const TierLimits& l, const std::string& tier, bool need_capacity) {
  if (need_capacity && l.capacity_bytes == 0)
    return Status::InvalidArgument(tier + ".capacity: must be > 0");
  if (!std::isfinite(l.ttl_s) || l.ttl_s < 0)
    return Status::InvalidArgument(tier + ".ttl_s: must be >= 0");
  for (const auto& [tenant, quota] : l.tenant_quota_bytes) {
    if (tenant.size() > kMaxTenantBytes) {
      return Status::InvalidArgument(tier + ".tenant_quota: tenant name longer than " +
                                     std::to_string(kMaxTenantBytes) + " bytes");
    }
    if (quota == 0)
      return Status::InvalidArgument(tier + ".tenant_quota." + tenant + ": must be > 0");
  }
  return Status::Ok();
}

class PrefetchHandleImpl final : public PrefetchHandle {
 public:
  PrefetchHandleImpl(std::vector<BlockKey> keys, std::string tenant, std::function<void()> on_done)
      : keys_(std::move(keys)), tenant_(std::move(tenant)), on_done_(std::move(on_done)) {}

  bool ready() const override { return ready_.load(std::memory_order_acquire); }
  std::vector<std::vector<uint8_t>> Take() override {
    MutexLock lock(&mu_);
    return std::move(blocks_);
  }
  void Cancel() override { cancelled_.store(true, std::memory_order_relaxed); }

  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  const std::vector<BlockKey>& keys() const { return keys_; }

  void Finish(std::vector<std::vector<uint8_t>> blocks) {
    {
      MutexLock lock(&mu_);
      blocks_ = std::move(blocks);
    }
    ready_.store(true, std::memory_order_release);
    if (on_done_) on_done_();
    on_done_ = nullptr;  // drop captures now, not when the engine releases the handle
  }

 private:
  std::vector<BlockKey> keys_;
  std::string tenant_;
  std::function<void()> on_done_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> cancelled_{false};
  Mutex mu_;
  std::vector<std::vector<uint8_t>> blocks_ GUARDED_BY(mu_);
};

class TieredKvCacheImpl final : public TieredKvCache {
 public:
  // By value like TieredKvCache::Create's `format_id` (tiered_cache.h); make the whole chain a
  // std::string_view when that header changes next.
  // NOLINTNEXTLINE(performance-unnecessary-value-param)
  TieredKvCacheImpl(const TieredKvConfig& config, uint64_t block_bytes, std::string format_id,
                    TieredKvTestHooks hooks, TierObserver observer)
      : config_(config),
        block_bytes_(block_bytes),
        format_hash_(FormatHash(format_id)),
        hooks_(std::move(hooks)),
        observer_(std::move(observer)) {
    if (!hooks_.clock) hooks_.clock = WallClockSeconds;
  }
  ~TieredKvCacheImpl() override { Shutdown(); }

  Status Init() {
    const uint64_t max_entry = kEntryHeaderBytes + kMaxTenantBytes + block_bytes_;
    if (config_.ram)
      ram_ = std::make_unique<RamTier>(config_.ram->limits, hooks_.clock, ObserverOf(TierId::kRam));
    if (config_.disk) {
      ASSIGN_OR_RETURN(
          disk_, DiskTier::Open(*config_.disk, max_entry, hooks_.clock, ObserverOf(TierId::kDisk)));
    }
    if (config_.redis && observer_) {
      TierLimits track;
      track.capacity_bytes = kMaxTrackedRedisKeys;  // one "byte" per key
      track.ttl_s = config_.redis->limits.ttl_s;
      MutexLock lock(&redis_known_mu_);
      redis_known_ = std::make_unique<PolicyIndex<char>>(track);
      redis_known_->SetObserver(ObserverOf(TierId::kRedis));
    }
    if (config_.redis) {
      ASSIGN_OR_RETURN(redis_, RedisTier::Create(*config_.redis, config_.io_threads, max_entry));
      const TierLimits& rl = config_.redis->limits;
      if (rl.default_tenant_quota_bytes > 0 || !rl.tenant_quota_bytes.empty()) {
        TierLimits quota_only = rl;
        quota_only.capacity_bytes = 0;  // Redis's own maxmemory policy bounds the total
        quota_only.ttl_s = 0;           // Redis expires keys itself (PX)
        redis_quota_ = std::make_unique<PolicyIndex<char>>(quota_only);
      }
    }
    double sweep = 0;
    for (const TierLimits* l : {config_.ram ? &config_.ram->limits : nullptr,
                                config_.disk ? &config_.disk->limits : nullptr,
                                redis_known_ ? &config_.redis->limits : nullptr}) {
      if (l != nullptr && l->ttl_s > 0) {
        double s = std::clamp(l->ttl_s / 4, 0.05, 5.0);
        sweep = sweep == 0 ? s : std::min(sweep, s);
      }
    }
    sweep_interval_s_ = sweep;
    if (config_.enabled()) {
      for (int i = 0; i < config_.io_threads; ++i)
        workers_.emplace_back([this, i] { WorkerLoop(i); });
    }
    return Status::Ok();
  }

  uint64_t block_bytes() const override { return block_bytes_; }
  bool WantsPublish() const override {
    return (config_.redis && config_.redis->write_through) ||
           (config_.disk && config_.disk->write_through);
  }

  void Demote(const BlockKey& key, std::string_view tenant, std::vector<uint8_t> payload) override {
    if (!ram_ && !disk_) return;
    if (payload.size() != block_bytes_) {
      (ram_ ? ram_->counters() : disk_->counters()).errors.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    Enqueue({false, key, std::string(tenant), std::move(payload)});
  }

  void Publish(const BlockKey& key, std::string_view tenant,
               std::vector<uint8_t> payload) override {
    if (!WantsPublish()) return;
    if (payload.size() != block_bytes_) {
      (redis_ && config_.redis->write_through ? redis_->counters() : disk_->counters())
          .errors.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    Enqueue({true, key, std::string(tenant), std::move(payload)});
  }

  std::shared_ptr<PrefetchHandle> Prefetch(std::vector<BlockKey> keys, std::string_view tenant,
                                           std::function<void()> on_done) override {
    prefetches_.fetch_add(1, std::memory_order_relaxed);
    if (keys.size() > kMaxPrefetchKeys) keys.resize(kMaxPrefetchKeys);
    auto handle = std::make_shared<PrefetchHandleImpl>(std::move(keys), std::string(tenant),
                                                       std::move(on_done));
    {
      MutexLock lock(&mu_);
      if (!stopping_ && !workers_.empty()) {
        prefetch_queue_.push_back(handle);
        work_cv_.NotifyOne();
        return handle;
      }
    }
    handle->Finish({});  // no tiers or shut down: ready at once, on_done on this thread
    return handle;
  }

  TieredKvStats Stats() const override {
    TieredKvStats s;
    s.ram = ram_ ? ram_->Stats() : TierStats{.name = "ram"};
    s.disk = disk_ ? disk_->Stats() : TierStats{.name = "disk"};
    s.redis = redis_ ? redis_->Stats() : TierStats{.name = "redis"};
    s.queue_drops = queue_drops_.load(std::memory_order_relaxed);
    s.prefetches = prefetches_.load(std::memory_order_relaxed);
    s.prefetched_blocks = prefetched_blocks_.load(std::memory_order_relaxed);
    MutexLock lock(&mu_);
    s.queued_writes = static_cast<int64_t>(write_queue_.size());
    return s;
  }

  void Shutdown() override {
    MutexLock shutdown_lock(&shutdown_mu_);
    if (shut_down_) return;
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    work_cv_.NotifyAll();
    for (std::thread& t : workers_) t.join();  // workers drain both queues before they exit
    workers_.clear();
    if (ram_ && disk_) {  // warm restart: whatever is only in RAM goes to disk, LRU first
      for (StoredEntry& e : ram_->TakeAll()) {
        if (!disk_->Contains(e.key)) (void)disk_->Put(e.key, e.tenant, e.bytes);
      }
    }
    shut_down_ = true;
  }

 private:
  struct WriteTask {
    bool publish;
    BlockKey key;
    std::string tenant;
    std::vector<uint8_t> payload;
  };

  void Enqueue(WriteTask task) {
    MutexLock lock(&mu_);
    if (stopping_) return;
    if (write_queue_.size() >= config_.max_queued_writes) {
      queue_drops_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    write_queue_.push_back(std::move(task));
    work_cv_.NotifyOne();
  }

  void WorkerLoop(int index) {
    const bool sweeper = index == 0 && sweep_interval_s_ > 0;
    auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(sweep_interval_s_));
    auto next_sweep = std::chrono::steady_clock::now() + interval;
    MutexLock lock(&mu_);
    while (true) {
      if (!prefetch_queue_.empty()) {
        std::shared_ptr<PrefetchHandleImpl> h = std::move(prefetch_queue_.front());
        prefetch_queue_.pop_front();
        lock.Unlock();
        RunPrefetch(*h);
        lock.Lock();
        continue;
      }
      if (!write_queue_.empty()) {
        WriteTask task = std::move(write_queue_.front());
        write_queue_.pop_front();
        lock.Unlock();
        RunWrite(std::move(task));
        lock.Lock();
        continue;
      }
      if (stopping_) return;
      if (sweeper) {
        if (!work_cv_.WaitUntil(&mu_, next_sweep)) {  // timed out
          lock.Unlock();
          if (ram_) ram_->SweepExpired();
          if (disk_) disk_->SweepExpired();
          SweepRedisKnown();
          lock.Lock();
          next_sweep = std::chrono::steady_clock::now() + interval;
        }
      } else {
        work_cv_.Wait(&mu_);
      }
    }
  }

  void RunWrite(WriteTask task) {
    if (hooks_.before_write) hooks_.before_write();
    auto entry =
        EncodeEntry(task.key, format_hash_, task.tenant, task.payload, config_.compression);
    task.payload = {};
    if (!entry.ok()) {  // tenant name too long
      (task.publish ? (redis_ ? redis_->counters() : disk_->counters())
                    : (ram_ ? ram_->counters() : disk_->counters()))
          .errors.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (task.publish) {
      if (redis_ && config_.redis->write_through && redis_->Set(task.key, *entry)) {
        NoteRedis(task.key, RedisNote::kWritten);
        EnforceRedisQuota(task, entry->size());
      }
      if (disk_ && config_.disk->write_through) (void)disk_->Put(task.key, task.tenant, *entry);
      return;
    }
    if (ram_) {
      for (StoredEntry& e : ram_->Put(task.key, std::move(task.tenant), std::move(*entry))) {
        // The demotion chain L2 → L3 (an entry promoted from L3 is still there: same key, same
        // bytes).
        if (disk_ && !disk_->Contains(e.key)) (void)disk_->Put(e.key, e.tenant, e.bytes);
      }
    } else {
      (void)disk_->Put(task.key, task.tenant, *entry);
    }
  }

  // Per-tenant quotas in Redis, for what THIS replica wrote (Redis is shared; other replicas keep
  // their own accounts): a tenant over its quota loses its least recently written keys (DEL).
  void EnforceRedisQuota(const WriteTask& task, size_t bytes) {
    std::vector<BlockKey> victims;
    {
      MutexLock lock(&redis_quota_mu_);
      if (!redis_quota_) return;
      for (auto& r : redis_quota_->Insert({task.key, task.tenant, bytes, hooks_.clock(), 0}))
        victims.push_back(r.entry.key);
    }
    for (const BlockKey& k : victims) {
      if (redis_->Delete(k)) {
        redis_->counters().evictions.fetch_add(1, std::memory_order_relaxed);
        NoteRedis(k, RedisNote::kGone);
      }
    }
  }

  KeyObserver ObserverOf(TierId tier) const {
    if (!observer_) return {};
    return [obs = observer_, tier](const BlockKey& key, bool present) { obs(tier, key, present); };
  }

  // Block events of Redis (see tiered_cache.h): what this replica learnt about a key.
  enum class RedisNote { kWritten, kFound, kGone };
  void NoteRedis(const BlockKey& key, RedisNote note) {
    if (!redis_known_) return;
    MutexLock lock(&redis_known_mu_);
    const double now = hooks_.clock();
    if (note == RedisNote::kGone) {
      redis_known_->Erase(key);
    } else if (note == RedisNote::kWritten || redis_known_->Find(key, now, nullptr) == nullptr) {
      redis_known_->Insert({key, "", 1, now, 0});  // a write restarts its TTL; a find refreshes LRU
    }
  }

  void SweepRedisKnown() {
    if (!redis_known_) return;
    MutexLock lock(&redis_known_mu_);
    redis_known_->SweepExpired(hooks_.clock());
  }

  // Verifies stored bytes; nullopt when corrupt.
  std::optional<std::vector<uint8_t>> Decode(const std::vector<uint8_t>& entry, const BlockKey& key,
                                             EntryMeta* meta) {
    auto d = DecodeEntry(entry, key, format_hash_, block_bytes_, meta);
    if (!d.ok()) return std::nullopt;
    return std::move(d).value();
  }

  // Looks `key` up in one tier: the verified payload of a hit (counted; `*stored` gets the bytes
  // as stored, for a promotion), or nullopt on a miss or on bytes that fail verification (the tier
  // erases those).
  template <typename Tier>
  std::optional<std::vector<uint8_t>> Lookup(Tier& tier, const BlockKey& key, EntryMeta* meta,
                                             std::vector<uint8_t>* stored) {
    std::optional<std::vector<uint8_t>> e = tier.Get(key);
    if (!e) return std::nullopt;
    std::optional<std::vector<uint8_t>> payload = Decode(*e, key, meta);
    if (!payload) {
      tier.EraseCorrupt(key);
      return std::nullopt;
    }
    tier.counters().CountHit(e->size());
    *stored = std::move(*e);
    return payload;
  }

  void RunPrefetch(PrefetchHandleImpl& h) {
    std::vector<std::vector<uint8_t>> blocks;
    // Promotions run after the result is delivered: they stay off the engine's critical path, and
    // RAM evictions they cause cannot push out keys later in this same prefix.
    struct Promotion {
      StoredEntry entry;
      bool from_disk;
    };
    const bool disk_to_redis = redis_ && config_.redis->write_through;
    std::vector<Promotion> promotions;
    for (const BlockKey& key : h.keys()) {
      if (h.cancelled()) break;
      std::optional<std::vector<uint8_t>> payload;
      EntryMeta meta;
      std::vector<uint8_t> stored;
      if (ram_) payload = Lookup(*ram_, key, &meta, &stored);
      if (!payload && disk_) {
        payload = Lookup(*disk_, key, &meta, &stored);
        if (payload && (ram_ || disk_to_redis))
          promotions.push_back({{key, meta.tenant, std::move(stored)}, true});
      }
      if (!payload && redis_) {
        payload = Lookup(*redis_, key, &meta, &stored);
        // A miss, an error or corrupt bytes: no longer vouched for.
        NoteRedis(key, payload ? RedisNote::kFound : RedisNote::kGone);
        if (payload && (ram_ || disk_))
          promotions.push_back({{key, meta.tenant, std::move(stored)}, false});
      }
      if (!payload) break;
      blocks.push_back(std::move(*payload));
    }
    prefetched_blocks_.fetch_add(static_cast<int64_t>(blocks.size()), std::memory_order_relaxed);
    h.Finish(std::move(blocks));
    // L3/L4 hits go into L2 (RAM evictions continue down to L3); without L2, L4 hits go to L3.
    // L3 hits are written through to L4 (redis.write_through).
    for (Promotion& p : promotions) {
      if (p.from_disk && disk_to_redis) {
        WriteTask task{true, p.entry.key, p.entry.tenant, {}};
        if (redis_->Set(p.entry.key, p.entry.bytes)) {
          NoteRedis(p.entry.key, RedisNote::kWritten);
          EnforceRedisQuota(task, p.entry.bytes.size());
        }
        if (!ram_) continue;
      }
      if (ram_) {
        for (StoredEntry& e :
             ram_->Put(p.entry.key, std::move(p.entry.tenant), std::move(p.entry.bytes))) {
          if (disk_ && !disk_->Contains(e.key)) (void)disk_->Put(e.key, e.tenant, e.bytes);
        }
      } else if (!p.from_disk) {
        (void)disk_->Put(p.entry.key, p.entry.tenant, p.entry.bytes);
      }
    }
  }

  const TieredKvConfig config_;
  const uint64_t block_bytes_;
  const uint64_t format_hash_;
  TieredKvTestHooks hooks_;
  const TierObserver observer_;
  double sweep_interval_s_ = 0;
  std::unique_ptr<RamTier> ram_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<RedisTier> redis_;
  Mutex redis_quota_mu_;
  // Only when a Redis quota is configured (set by Init, before the workers start).
  std::unique_ptr<PolicyIndex<char>> redis_quota_ PT_GUARDED_BY(redis_quota_mu_);
  Mutex redis_known_mu_;
  // The Redis keys this replica knows are there (block events; only with an observer and Redis).
  std::unique_ptr<PolicyIndex<char>> redis_known_ PT_GUARDED_BY(redis_known_mu_);

  mutable Mutex mu_;
  CondVar work_cv_;
  std::deque<WriteTask> write_queue_ GUARDED_BY(mu_);
  std::deque<std::shared_ptr<PrefetchHandleImpl>> prefetch_queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;

  Mutex shutdown_mu_;
  bool shut_down_ GUARDED_BY(shutdown_mu_) = false;

  std::atomic<int64_t> queue_drops_{0}, prefetches_{0}, prefetched_blocks_{0};
};

}  // namespace

Status TieredKvConfig::Validate() const {
  if (ram) RETURN_IF_ERROR(ValidateLimits(ram->limits, "ram", true));
  if (disk) {
    if (disk->dir.empty()) return Status::InvalidArgument("disk.dir: must not be empty");
    RETURN_IF_ERROR(ValidateLimits(disk->limits, "disk", true));
  }
  if (redis) {
    RETURN_IF_ERROR(ParseRedisUrl(redis->url).status());
    if (!std::isfinite(redis->timeout_s) || redis->timeout_s <= 0 || redis->timeout_s > 60) {
      return Status::InvalidArgument("redis.timeout_s: must be in (0, 60]");
    }
    RETURN_IF_ERROR(ValidateLimits(redis->limits, "redis", false));
  }
  if (max_queued_writes < 1 || max_queued_writes > kMaxQueuedWrites) {
    return Status::InvalidArgument("max_queued_writes: must be in [1, " +
                                   std::to_string(kMaxQueuedWrites) + "]");
  }
  if (io_threads < 1 || io_threads > kMaxIoThreads) {
    return Status::InvalidArgument("io_threads: must be in [1, " + std::to_string(kMaxIoThreads) +
                                   "]");
  }
  return Status::Ok();
}

Result<std::unique_ptr<TieredKvCache>> CreateTieredKvCacheWithHooks(const TieredKvConfig& config,
                                                                    uint64_t block_bytes,
                                                                    std::string format_id,
                                                                    TieredKvTestHooks hooks,
                                                                    TierObserver observer) {
  RETURN_IF_ERROR(config.Validate());
  if (block_bytes == 0 || block_bytes > kMaxPayloadBytes) {
    return Status::InvalidArgument("kv tiers: block_bytes must be in [1, " +
                                   std::to_string(kMaxPayloadBytes) + "]");
  }
  auto cache = std::make_unique<TieredKvCacheImpl>(config, block_bytes, std::move(format_id),
                                                   std::move(hooks), std::move(observer));
  RETURN_IF_ERROR(cache->Init());
  return std::unique_ptr<TieredKvCache>(std::move(cache));
}

Result<std::unique_ptr<TieredKvCache>> TieredKvCache::Create(const TieredKvConfig& config,
                                                             uint64_t block_bytes,
                                                             std::string format_id,
                                                             TierObserver observer) {
  return CreateTieredKvCacheWithHooks(config, block_bytes, std::move(format_id), {},
                                      std::move(observer));
}

}  // namespace strata::engine::kvtier
