#include "gateway/prefix_index.h"

#include <bit>

namespace strata::gateway {

PrefixIndex::PrefixIndex(size_t max_hashes_per_replica)
    : max_hashes_(max_hashes_per_replica == 0 ? 1 : max_hashes_per_replica) {}

void PrefixIndex::DropHistory(Replica& r,
                              std::unordered_map<BlockHash, Entry, HashOf>::iterator it) {
  Entry& e = it->second;
  if (e.in_history) r.history_order.erase(e.history_pos);
  e.in_history = false;
  if (e.tiers == 0) r.entries.erase(it);
}

void PrefixIndex::DropEvents(Replica& r,
                             std::unordered_map<BlockHash, Entry, HashOf>::iterator it) {
  Entry& e = it->second;
  if (e.in_event_order) r.event_order.erase(e.event_pos);
  e.in_event_order = false;
  e.tiers = 0;
  if (!e.in_history) r.entries.erase(it);
}

void PrefixIndex::Expire(Replica& r, Clock::time_point now) const {
  // history_order is by record time; with one TTL per replica that is also expiry order, and an
  // entry whose expiry was extended is moved to the back, so the front is always the oldest.
  while (!r.history_order.empty()) {
    auto it = r.entries.find(r.history_order.front());
    if (it == r.entries.end()) {  // cannot happen: both are kept in step
      r.history_order.pop_front();
      continue;
    }
    if (it->second.expires > now) break;
    DropHistory(r, it);
  }
}

void PrefixIndex::Trim(Replica& r) const {
  while (r.entries.size() > max_hashes_) {
    if (!r.history_order.empty()) {
      DropHistory(r, r.entries.find(r.history_order.front()));
    } else if (!r.event_order.empty()) {
      DropEvents(r, r.entries.find(r.event_order.front()));
    } else {
      break;
    }
  }
}

void PrefixIndex::Apply(const std::string& replica, KvTier tier, bool add,
                        std::span<const BlockHash> hashes) {
  const uint8_t bit = static_cast<uint8_t>(1u << static_cast<unsigned>(tier));
  MutexLock lock(&mu_);
  Replica& r = replicas_[replica];
  for (const BlockHash& h : hashes) {
    if (add) {
      Entry& e = r.entries[h];
      e.tiers |= bit;
      if (!e.in_event_order) {
        e.event_pos = r.event_order.insert(r.event_order.end(), h);
        e.in_event_order = true;
      }
      continue;
    }
    auto it = r.entries.find(h);
    if (it == r.entries.end()) continue;
    it->second.tiers &= static_cast<uint8_t>(~bit);
    if (it->second.tiers == 0) DropEvents(r, it);
  }
  Trim(r);
}

void PrefixIndex::ResetEvents(const std::string& replica) {
  MutexLock lock(&mu_);
  auto rit = replicas_.find(replica);
  if (rit == replicas_.end()) return;
  Replica& r = rit->second;
  while (!r.event_order.empty()) DropEvents(r, r.entries.find(r.event_order.front()));
}

void PrefixIndex::RecordHistory(const std::string& replica, std::span<const BlockHash> hashes,
                                Clock::time_point now, Clock::time_point expires) {
  MutexLock lock(&mu_);
  Replica& r = replicas_[replica];
  Expire(r, now);
  for (const BlockHash& h : hashes) {
    Entry& e = r.entries[h];
    if (e.in_history) r.history_order.erase(e.history_pos);
    e.history_pos = r.history_order.insert(r.history_order.end(), h);
    e.in_history = true;
    e.expires = expires;
  }
  Trim(r);
}

PrefixMatch PrefixIndex::Lookup(const std::string& replica, std::span<const BlockHash> hashes,
                                Clock::time_point now) const {
  PrefixMatch m;
  MutexLock lock(&mu_);
  auto rit = replicas_.find(replica);
  if (rit == replicas_.end()) return m;
  Replica& r = rit->second;
  Expire(r, now);
  for (const BlockHash& h : hashes) {
    auto it = r.entries.find(h);
    if (it == r.entries.end()) break;
    const Entry& e = it->second;
    ++m.blocks;
    if (e.tiers != 0) {
      ++m.by_tier[static_cast<size_t>(std::countr_zero(static_cast<unsigned>(e.tiers)))];
    } else {
      ++m.by_tier[static_cast<size_t>(KvTier::kPool)];
      ++m.from_history;
    }
  }
  return m;
}

void PrefixIndex::Remove(const std::string& replica) {
  MutexLock lock(&mu_);
  auto it = replicas_.find(replica);
  if (it != replicas_.end()) replicas_.erase(it);
}

size_t PrefixIndex::size(const std::string& replica) const {
  MutexLock lock(&mu_);
  auto it = replicas_.find(replica);
  return it == replicas_.end() ? 0 : it->second.entries.size();
}

}  // namespace strata::gateway
