#include "engine/kvtier/ram_tier.h"

namespace strata::engine::kvtier {

RamTier::RamTier(const TierLimits& limits, Clock clock, KeyObserver observer)
    : clock_(std::move(clock)), index_(limits) {
  MutexLock lock(&mu_);
  index_.SetObserver(std::move(observer));
}

std::vector<StoredEntry> RamTier::Put(const BlockKey& key, std::string tenant,
                                      std::vector<uint8_t> entry) {
  OpTimer timer(&counters_.write_ops, &counters_.write_ns);
  const size_t n = entry.size();
  Index::Entry e{key, std::move(tenant), n, clock_(), std::move(entry)};
  std::vector<Index::Removed> removed;
  {
    MutexLock lock(&mu_);
    removed = index_.Insert(std::move(e));
  }
  std::vector<StoredEntry> out;
  out.reserve(removed.size());
  bool stored = true;
  for (auto& r : removed) {
    if (r.reason == RemoveReason::kTooLarge)
      stored = false;
    else
      counters_.evictions.fetch_add(1, std::memory_order_relaxed);
    out.push_back({r.entry.key, std::move(r.entry.tenant), std::move(r.entry.value)});
  }
  if (stored) counters_.bytes_in.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  return out;
}

std::optional<std::vector<uint8_t>> RamTier::Get(const BlockKey& key) {
  OpTimer timer(&counters_.read_ops, &counters_.read_ns);
  std::optional<Index::Entry> expired;
  MutexLock lock(&mu_);
  Index::Entry* e = index_.Find(key, clock_(), &expired);
  if (e == nullptr) {
    if (expired) counters_.expirations.fetch_add(1, std::memory_order_relaxed);
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  return e->value;
}

void RamTier::EraseCorrupt(const BlockKey& key) {
  counters_.CountCorrupt();
  MutexLock lock(&mu_);
  index_.Erase(key);
}

void RamTier::SweepExpired() {
  MutexLock lock(&mu_);
  counters_.expirations.fetch_add(static_cast<int64_t>(index_.SweepExpired(clock_()).size()),
                                  std::memory_order_relaxed);
}

std::vector<StoredEntry> RamTier::TakeAll() {
  std::vector<Index::Entry> all;
  {
    MutexLock lock(&mu_);
    all = index_.TakeAll();
  }
  std::vector<StoredEntry> out;
  out.reserve(all.size());
  for (auto& e : all) out.push_back({e.key, std::move(e.tenant), std::move(e.value)});
  return out;
}

bool RamTier::Contains(const BlockKey& key) const {
  MutexLock lock(&mu_);
  return index_.Contains(key);
}

uint64_t RamTier::tenant_bytes(const std::string& tenant) const {
  MutexLock lock(&mu_);
  return index_.tenant_bytes(tenant);
}

TierStats RamTier::Stats() const {
  MutexLock lock(&mu_);
  return counters_.Snapshot("ram", index_.size(), index_.bytes());
}

}  // namespace strata::engine::kvtier
