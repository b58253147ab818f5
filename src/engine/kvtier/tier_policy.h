// Tier policy shared by the RAM and disk tiers: an index of entries with byte capacity (LRU
// eviction), TTL (age since written) and per-tenant byte quotas (a tenant over its quota evicts
// only its own least-recently-used entries), plus the counters every tier reports. An optional
// KeyObserver hears every key entering or leaving an index (the replica's block events).
//
// Thread contract: PolicyIndex is thread-compatible (the owning tier holds a mutex around it);
// TierCounters is thread-safe (atomics).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/kvtier/tiered_cache.h"

namespace strata::engine::kvtier {

// Seconds on some clock; the tiers use the wall clock (disk entries outlive the process), tests
// inject their own.
using Clock = std::function<double()>;
double WallClockSeconds();

struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const {
    size_t v;
    std::memcpy(&v, k.data(), sizeof(v));  // the key is already a cryptographic hash
    return v;
  }
};

struct TierCounters {
  std::atomic<int64_t> hits{0}, misses{0}, bytes_in{0}, bytes_out{0}, evictions{0}, expirations{0},
      corrupt{0}, errors{0}, read_ops{0}, read_ns{0}, write_ops{0}, write_ns{0};
  // A read whose `bytes` decoded (a tier's Get counts only its misses: the caller decodes).
  void CountHit(size_t bytes) {
    hits.fetch_add(1, std::memory_order_relaxed);
    bytes_out.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  }
  // A read whose bytes failed verification: corrupt, and a miss.
  void CountCorrupt() {
    corrupt.fetch_add(1, std::memory_order_relaxed);
    misses.fetch_add(1, std::memory_order_relaxed);
  }
  // Fills everything but name/enabled/entries/bytes_used.
  void Fill(TierStats* s) const;
  // An enabled tier's stats: the counters plus name, entries and bytes held.
  TierStats Snapshot(const char* name, uint64_t entries, uint64_t bytes_used) const {
    TierStats s;
    s.name = name;
    s.enabled = true;
    Fill(&s);
    s.entries = static_cast<int64_t>(entries);
    s.bytes_used = static_cast<int64_t>(bytes_used);
    return s;
  }
};

// Measures one read or write into the counters.
class OpTimer {
 public:
  OpTimer(std::atomic<int64_t>* ops, std::atomic<int64_t>* ns)
      : ops_(ops), ns_(ns), start_(std::chrono::steady_clock::now()) {}
  ~OpTimer() {
    ops_->fetch_add(1, std::memory_order_relaxed);
    ns_->fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now() - start_)
                       .count(),
                   std::memory_order_relaxed);
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  std::atomic<int64_t>* ops_;
  std::atomic<int64_t>* ns_;
  std::chrono::steady_clock::time_point start_;
};

enum class RemoveReason { kCapacity, kQuota, kTooLarge, kExpired };

// Told, under the owning tier's lock, when a key enters (`present` true) or leaves (false) an
// index — every insert, eviction, expiry and erase; a replaced key is neither. Must be quick and
// must not call back into the tier.
using KeyObserver = std::function<void(const BlockKey& key, bool present)>;

template <typename V>
class PolicyIndex {
 public:
  struct Entry {
    BlockKey key{};
    std::string tenant;
    uint64_t bytes = 0;
    double written_s = 0;
    V value{};
  };
  struct Removed {
    Entry entry;
    RemoveReason reason;
  };

  explicit PolicyIndex(const TierLimits& limits)
      : capacity_(limits.capacity_bytes),
        ttl_s_(limits.ttl_s),
        default_quota_(limits.default_tenant_quota_bytes) {
    for (const auto& [tenant, quota] : limits.tenant_quota_bytes) quotas_[tenant] = quota;
  }

  // Reports every key already held as entering, then every later change (see KeyObserver).
  void SetObserver(KeyObserver observer) {
    observer_ = std::move(observer);
    if (!observer_) return;
    for (const Node& n : lru_) observer_(n.e.key, true);
  }

  uint64_t QuotaFor(const std::string& tenant) const {
    auto it = quotas_.find(tenant);
    return it == quotas_.end() ? default_quota_ : it->second;
  }

  // Inserts (or replaces) an entry as most recently used. Returns what was removed to make room,
  // oldest first; an entry larger than the capacity or its tenant's quota is not inserted and
  // comes back itself with kTooLarge.
  std::vector<Removed> Insert(Entry e) {
    std::vector<Removed> removed;
    const bool replaced = EraseEntry(e.key, /*notify=*/false).has_value();
    const uint64_t quota = QuotaFor(e.tenant);
    if ((capacity_ > 0 && e.bytes > capacity_) || (quota > 0 && e.bytes > quota)) {
      if (replaced) Notify(e.key, false);
      removed.push_back({std::move(e), RemoveReason::kTooLarge});
      return removed;
    }
    if (quota > 0) {
      auto t = tenants_.find(e.tenant);
      while (t != tenants_.end() && t->second.bytes + e.bytes > quota && !t->second.lru.empty()) {
        removed.push_back({*Erase(t->second.lru.front()), RemoveReason::kQuota});
        t = tenants_.find(e.tenant);
      }
    }
    while (capacity_ > 0 && bytes_ + e.bytes > capacity_ && !lru_.empty()) {
      removed.push_back({*Erase(lru_.front().e.key), RemoveReason::kCapacity});
    }
    TenantState& ts = tenants_[e.tenant];
    ts.bytes += e.bytes;
    ts.lru.push_back(e.key);
    bytes_ += e.bytes;
    lru_.push_back(Node{std::move(e), std::prev(ts.lru.end())});
    map_[lru_.back().e.key] = std::prev(lru_.end());
    if (!replaced) Notify(lru_.back().e.key, true);
    return removed;
  }

  bool Expired(const Entry& e, double now) const {
    return ttl_s_ > 0 && now - e.written_s >= ttl_s_;
  }

  // Looks a key up and marks it most recently used. An expired entry is removed and returned
  // through *expired (the result is then null).
  Entry* Find(const BlockKey& key, double now, std::optional<Entry>* expired) {
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    if (Expired(it->second->e, now)) {
      if (expired != nullptr)
        *expired = Erase(key);
      else
        Erase(key);
      return nullptr;
    }
    auto node = it->second;
    lru_.splice(lru_.end(), lru_, node);
    TenantState& ts = tenants_[node->e.tenant];
    ts.lru.splice(ts.lru.end(), ts.lru, node->tenant_it);
    return &node->e;
  }

  std::optional<Entry> Erase(const BlockKey& key) { return EraseEntry(key, /*notify=*/true); }

  std::vector<Entry> SweepExpired(double now) {
    std::vector<BlockKey> keys;
    for (const Node& n : lru_) {
      if (Expired(n.e, now)) keys.push_back(n.e.key);
    }
    std::vector<Entry> out;
    out.reserve(keys.size());
    for (const BlockKey& k : keys) out.push_back(*Erase(k));
    return out;
  }

  // Removes everything, least recently used first.
  std::vector<Entry> TakeAll() {
    std::vector<Entry> out;
    while (!lru_.empty()) out.push_back(*Erase(lru_.front().e.key));
    return out;
  }

  bool Contains(const BlockKey& key) const { return map_.count(key) != 0; }
  size_t size() const { return map_.size(); }
  uint64_t bytes() const { return bytes_; }
  uint64_t tenant_bytes(const std::string& tenant) const {
    auto it = tenants_.find(tenant);
    return it == tenants_.end() ? 0 : it->second.bytes;
  }

 private:
  void Notify(const BlockKey& key, bool present) const {
    if (observer_) observer_(key, present);
  }

  std::optional<Entry> EraseEntry(const BlockKey& key, bool notify) {
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    auto node = it->second;
    map_.erase(it);
    auto t = tenants_.find(node->e.tenant);
    t->second.bytes -= node->e.bytes;
    t->second.lru.erase(node->tenant_it);
    if (t->second.lru.empty()) tenants_.erase(t);
    bytes_ -= node->e.bytes;
    Entry e = std::move(node->e);
    lru_.erase(node);
    if (notify) Notify(e.key, false);
    return e;
  }

  struct Node {
    Entry e;
    std::list<BlockKey>::iterator tenant_it;
  };
  struct TenantState {
    uint64_t bytes = 0;
    std::list<BlockKey> lru;  // front = least recently used
  };

  uint64_t capacity_;
  double ttl_s_;
  uint64_t default_quota_;
  std::unordered_map<std::string, uint64_t> quotas_;
  std::list<Node> lru_;  // front = least recently used
  std::unordered_map<BlockKey, typename std::list<Node>::iterator, BlockKeyHash> map_;
  std::unordered_map<std::string, TenantState> tenants_;
  uint64_t bytes_ = 0;
  KeyObserver observer_;
};

}  // namespace strata::engine::kvtier
