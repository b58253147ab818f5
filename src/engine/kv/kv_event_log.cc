#include "engine/kv/kv_event_log.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "base/random_bytes.h"

namespace strata::engine::kv {
namespace {

constexpr uint8_t Bit(protocol::KvTier t) {
  return static_cast<uint8_t>(1u << static_cast<int>(t));
}

}  // namespace

std::string_view KvEventOpName(KvEventOp op) { return op == KvEventOp::kAdd ? "add" : "remove"; }

size_t KvEventPage::num_hashes() const {
  size_t n = 0;
  for (const KvEventGroup& g : events) n += g.hashes.size();
  return n;
}

size_t KvEventLog::HashKey::operator()(const cachekey::BlockHash& h) const {
  size_t v;
  std::memcpy(&v, h.data(), sizeof(v));  // already a cryptographic hash
  return v;
}

KvEventLog::KvEventLog(KvEventLogConfig config)
    : cfg_{std::max<size_t>(config.capacity, 1), std::max<size_t>(config.max_held_per_tier, 1)} {
  std::array<unsigned char, 16> bytes{};
  FillRandomBytes(bytes);
  AppendHexLower(bytes, &instance_);
  // 40 random bits above 2^20: far from 0 and from other instances, far below 2^53 (JSON numbers
  // stay exact for any client).
  uint64_t r = 0;
  for (size_t i = 0; i < 5; ++i) r = r << 8 | bytes[i];
  base_ = (uint64_t{1} << 20) + r;
  MutexLock lock(&mu_);
  head_ = base_;
}

void KvEventLog::Add(protocol::KvTier tier, const cachekey::BlockHash& hash) {
  Record(KvEventOp::kAdd, tier, hash);
}

void KvEventLog::Remove(protocol::KvTier tier, const cachekey::BlockHash& hash) {
  Record(KvEventOp::kRemove, tier, hash);
}

void KvEventLog::Record(KvEventOp op, protocol::KvTier tier, const cachekey::BlockHash& hash) {
  const uint8_t bit = Bit(tier);
  MutexLock lock(&mu_);
  size_t& count = held_count_[static_cast<size_t>(tier)];
  if (op == KvEventOp::kAdd) {
    auto [it, inserted] = held_.try_emplace(hash, uint8_t{0});
    if ((it->second & bit) != 0) return;  // already held: nothing changes
    if (count >= cfg_.max_held_per_tier) {
      ++dropped_adds_;
      if (inserted) held_.erase(it);
      return;
    }
    it->second |= bit;
    ++count;
  } else {
    auto it = held_.find(hash);
    if (it == held_.end() || (it->second & bit) == 0) return;  // not held (or dropped): nothing
    it->second &= static_cast<uint8_t>(~bit);
    if (it->second == 0) held_.erase(it);
    --count;
  }
  const Slot slot{hash, op, tier};
  const uint64_t index = head_ - base_;  // the new event's offset from the first one
  if (ring_.size() < cfg_.capacity)
    ring_.push_back(slot);  // grows to `capacity` once, then wraps
  else
    ring_[index % cfg_.capacity] = slot;
  ++head_;
}

void KvEventLog::Snapshot(KvEventPage* page) const {
  page->reset = true;
  page->cursor = head_;
  // One pass over the held set (the only O(held) work under the mutex; readers only).
  std::array<KvEventGroup, protocol::kNumKvTiers> groups;
  for (int t = 0; t < protocol::kNumKvTiers; ++t) {
    groups[static_cast<size_t>(t)].tier = static_cast<protocol::KvTier>(t);
    groups[static_cast<size_t>(t)].hashes.reserve(held_count_[static_cast<size_t>(t)]);
  }
  for (const auto& [hash, mask] : held_)
    for (int t = 0; t < protocol::kNumKvTiers; ++t)
      if ((mask & (1u << t)) != 0) groups[static_cast<size_t>(t)].hashes.push_back(hash);
  for (KvEventGroup& g : groups)
    if (!g.hashes.empty()) page->events.push_back(std::move(g));
}

KvEventPage KvEventLog::Read(uint64_t since, size_t max) const {
  max = std::max<size_t>(max, 1);
  KvEventPage page;
  MutexLock lock(&mu_);
  const uint64_t retained = std::min<uint64_t>(head_ - base_, cfg_.capacity);
  // Older than the ring, newer than the head, or 0 (below base_): a snapshot.
  if (since < head_ - retained || since > head_) {
    Snapshot(&page);
    return page;
  }
  const uint64_t n = std::min<uint64_t>(head_ - since, max);
  for (uint64_t s = since; s < since + n; ++s) {
    const Slot& slot = ring_[(s - base_) % cfg_.capacity];
    if (page.events.empty() || page.events.back().op != slot.op ||
        page.events.back().tier != slot.tier)
      page.events.push_back({slot.op, slot.tier, {}});
    page.events.back().hashes.push_back(slot.hash);
  }
  page.cursor = since + n;
  return page;
}

uint64_t KvEventLog::head() const {
  MutexLock lock(&mu_);
  return head_;
}

size_t KvEventLog::held(protocol::KvTier tier) const {
  MutexLock lock(&mu_);
  return held_count_[static_cast<size_t>(tier)];
}

uint64_t KvEventLog::dropped_adds() const {
  MutexLock lock(&mu_);
  return dropped_adds_;
}

}  // namespace strata::engine::kv
