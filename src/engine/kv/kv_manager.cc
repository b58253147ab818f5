#include "engine/kv/kv_manager.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>

namespace strata::engine::kv {

namespace {

const std::vector<int32_t>& EmptyTable() {
  static const std::vector<int32_t> kEmpty;
  return kEmpty;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Status KvManagerConfig::Validate() const {
  if (num_blocks <= 0) {
    return Status::InvalidArgument("KV manager: num_blocks must be positive, got " +
                                   std::to_string(num_blocks) +
                                   " (raise the KV cache memory budget)");
  }
  if (block_size <= 0) {
    return Status::InvalidArgument("KV manager: block_size must be positive, got " +
                                   std::to_string(block_size));
  }
  return Status::Ok();
}

size_t KvManager::HashKey::operator()(const BlockHash& h) const {
  size_t v;
  std::memcpy(&v, h.data(), sizeof(v));  // SHA-256 output is uniformly distributed
  return v;
}

KvManager::KvManager(const KvManagerConfig& config) : cfg_(config) {
  // A non-positive block size would divide by zero everywhere: a programming error (Validate).
  if (cfg_.block_size <= 0) std::abort();
  cfg_.num_blocks = std::max(cfg_.num_blocks, 0);
  blocks_.resize(static_cast<size_t>(cfg_.num_blocks));
  free_.reserve(blocks_.size());
  // Reverse order so that block 0 is handed out first (pop_back).
  for (int32_t i = cfg_.num_blocks - 1; i >= 0; --i) free_.push_back(i);
}

int32_t KvManager::TakeBlock() {
  int32_t id = -1;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!evictable_.empty()) {
    id = std::get<2>(*evictable_.begin());
    evictable_.erase(evictable_.begin());
    if (listener_ != nullptr) {
      const Block& victim = blocks_[static_cast<size_t>(id)];
      listener_->OnEvict(id, victim.hash, victim.tag);
    }
    Uncache(id);
    ++evicted_;
  } else {
    return -1;
  }
  Block& b = blocks_[static_cast<size_t>(id)];
  assert(b.ref == 0 && !b.cached);
  b.ref = 1;
  b.depth = 0;
  b.tag = 0;
  b.released_at = 0;
  return id;
}

void KvManager::AddRef(int32_t id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  if (b.ref == 0) {
    // Only a cached block can be referenced again from ref 0 (a prefix hit): revive it.
    assert(b.cached);
    evictable_.erase(KeyOf(b, id));
  }
  ++b.ref;
}

void KvManager::Release(int32_t id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  assert(b.ref > 0);
  if (--b.ref > 0) return;
  if (b.cached) {
    b.released_at = clock_;
    evictable_.insert(KeyOf(b, id));
  } else {
    free_.push_back(id);
  }
}

void KvManager::Uncache(int32_t id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  if (!b.cached) return;
  auto it = cached_.find(b.hash);
  if (it != cached_.end() && it->second == id) {
    cached_.erase(it);
    if (events_ != nullptr) events_->Remove(protocol::KvTier::kPool, b.hash);
  }
  b.cached = false;
  b.hash = BlockHash{};
}

// ---- planning (reads the manager, changes nothing) ----

KvPlan::SeqView* KvPlan::View(SeqId seq) {
  for (SeqView& v : views_)
    if (v.seq == seq) return &v;
  const KvManager::SeqState* s = kv_->FindSeq(seq);
  views_.push_back(SeqView{seq, s != nullptr, s ? s->table.size() : 0, s ? s->hashes.size() : 0});
  return &views_.back();
}

bool KvPlan::Revive(int32_t block) {
  if (kv_->block(block).ref != 0) return false;
  if (std::find(revived_.begin(), revived_.end(), block) != revived_.end()) return false;
  revived_.push_back(block);
  needed_ += 1;
  return true;
}

int KvPlan::MatchPrefix(SeqId seq, std::span<const int32_t> tokens, std::span<const uint8_t> salt,
                        uint32_t tag) {
  if (!valid_) return 0;
  SeqView* v = View(seq);
  if (took_ || v->table != 0) {  // a planned take could evict a hit; a seq with blocks is not new
    Invalidate();
    return 0;
  }
  Op op{OpKind::kMatch, seq, tag, static_cast<int>(tokens.size()), hits_.size(), hits_.size(), 0};
  const int bs = kv_->cfg_.block_size;
  if (kv_->cfg_.enable_prefix_cache && !tokens.empty()) {
    // Keep at least the last token to compute: it produces the logits.
    const size_t max_blocks = (tokens.size() - 1) / static_cast<size_t>(bs);
    BlockHash parent{};
    for (size_t i = 0; i < max_blocks; ++i) {
      const BlockHash h = cachekey::HashBlock(
          parent, salt, tokens.subspan(i * static_cast<size_t>(bs), static_cast<size_t>(bs)));
      auto it = kv_->cached_.find(h);
      if (it == kv_->cached_.end()) break;
      hits_.push_back(it->second);
      hit_hashes_.push_back(h);
      if (Revive(it->second)) evictable_hits_ += 1;
      parent = h;
    }
  }
  op.end = hits_.size();
  const size_t n = op.end - op.begin;
  v->exists = true;
  v->table = v->hashes = n;
  ops_.push_back(op);
  return static_cast<int>(n) * bs;
}

int KvPlan::Adopt(SeqId seq, std::span<const BlockHash> hashes) {
  if (!valid_) return 0;
  SeqView* v = View(seq);
  if (!v->exists || v->table != v->hashes) {  // adoption continues a chain of full blocks
    Invalidate();
    return 0;
  }
  if (!kv_->cfg_.enable_prefix_cache) return 0;
  Op op{OpKind::kAdopt, seq, 0, 0, adopt_hashes_.size(), adopt_hashes_.size(), 0};
  for (const BlockHash& h : hashes) {
    auto it = kv_->cached_.find(h);
    const bool cached = it != kv_->cached_.end();
    const bool costs =
        !cached || (kv_->block(it->second).ref == 0 &&
                    std::find(revived_.begin(), revived_.end(), it->second) == revived_.end());
    if (costs && needed_ + 1 > free_at_plan_) break;
    if (cached) {
      Revive(it->second);
    } else {
      needed_ += 1;
    }
    adopt_hashes_.push_back(h);
  }
  op.end = adopt_hashes_.size();
  took_ = true;
  v->table += op.end - op.begin;
  v->hashes = v->table;
  ops_.push_back(op);
  return static_cast<int>(op.end - op.begin);
}

void KvPlan::Allocate(SeqId seq, int num_tokens) {
  if (!valid_) return;
  SeqView* v = View(seq);
  const int64_t want = num_tokens <= 0 ? 0 : CeilDiv(num_tokens, kv_->cfg_.block_size);
  const int64_t need = std::max<int64_t>(0, want - static_cast<int64_t>(v->table));
  needed_ += static_cast<int>(need);
  took_ = took_ || need > 0;
  v->exists = true;
  v->table += static_cast<size_t>(need);
  ops_.push_back(Op{OpKind::kAllocate, seq, 0, 0, 0, 0, num_tokens});
}

void KvPlan::PrepareWrite(SeqId seq, int pos) {
  if (!valid_) return;
  SeqView* v = View(seq);
  const size_t index = pos < 0 ? 0 : static_cast<size_t>(pos / kv_->cfg_.block_size);
  const KvManager::SeqState* s = kv_->FindSeq(seq);
  const bool existing = s != nullptr && index < s->table.size();
  if (!v->exists || pos < 0 || index >= v->table || (existing && s->table[index] == kNoBlock)) {
    Invalidate();
    return;
  }
  if (existing && kv_->block(s->table[index]).ref > 1) {  // shared with a fork: copy on write
    needed_ += 1;
    copies_ += 1;
    took_ = true;
  }
  ops_.push_back(Op{OpKind::kWrite, seq, 0, 0, 0, 0, pos});
}

void KvPlan::ReleaseRange(SeqId seq, int from, int to) {
  if (!valid_) return;
  const KvManager::SeqState* s = kv_->FindSeq(seq);
  if (s == nullptr || from < 0 || to < from) {
    Invalidate();
    return;
  }
  const int64_t bs = kv_->cfg_.block_size;
  Op op{OpKind::kRelease, seq, 0, 0, released_.size(), released_.size(), 0};
  const int64_t first = CeilDiv(from, bs);
  const int64_t last = std::min<int64_t>(to / bs, static_cast<int64_t>(s->table.size()));
  for (int64_t i = first; i < last; ++i) {
    const size_t index = static_cast<size_t>(i);
    if (s->table[index] == kNoBlock) continue;
    // Not twice in one plan.
    if (std::find(released_.begin() + static_cast<std::ptrdiff_t>(op.begin), released_.end(),
                  index) != released_.end())
      continue;
    released_.push_back(index);
  }
  op.end = released_.size();
  ops_.push_back(op);
}

void KvManager::Plan(KvPlan* plan) const {
  plan->kv_ = this;
  plan->epoch_ = epoch_;
  plan->free_at_plan_ = NumFreeBlocks();
  plan->valid_ = true;
  plan->took_ = false;
  plan->needed_ = plan->evictable_hits_ = plan->copies_ = 0;
  plan->ops_.clear();
  plan->views_.clear();
  plan->hits_.clear();
  plan->hit_hashes_.clear();
  plan->adopt_hashes_.clear();
  plan->revived_.clear();
  plan->released_.clear();
}

KvPlan KvManager::Plan() const {
  KvPlan plan;
  Plan(&plan);
  return plan;
}

const KvManager::SeqState* KvManager::FindSeq(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : &it->second;
}

int KvManager::ProbeHashes(std::span<const BlockHash> hashes) const {
  if (!cfg_.enable_prefix_cache) return 0;
  int n = 0;
  for (const BlockHash& h : hashes) {
    if (cached_.count(h) == 0) break;
    ++n;
  }
  return n;
}

int KvManager::NumFreeBlocks() const { return static_cast<int>(free_.size() + evictable_.size()); }

// ---- applying ----

bool KvManager::Apply(const KvPlan& plan, std::vector<CopyOp>* copies, const AdoptFill& fill) {
  if (plan.kv_ != this || plan.epoch_ != epoch_ || !plan.fits()) return false;
  for (const KvPlan::Op& op : plan.ops_) {
    if (op.kind == KvPlan::OpKind::kAdopt && op.end > op.begin && !fill) return false;
  }
  ++epoch_;
  for (const KvPlan::Op& op : plan.ops_) {
    switch (op.kind) {
      case KvPlan::OpKind::kMatch:
        ApplyMatch(plan, op);
        break;
      case KvPlan::OpKind::kAdopt:
        ApplyAdopt(plan, op, fill);
        break;
      case KvPlan::OpKind::kAllocate:
        ApplyAllocate(op);
        break;
      case KvPlan::OpKind::kWrite:
        ApplyWrite(op, copies);
        break;
      case KvPlan::OpKind::kRelease:
        ApplyRelease(plan, op);
        break;
    }
  }
  return true;
}

void KvManager::ApplyMatch(const KvPlan& plan, const KvPlan::Op& op) {
  SeqState& s = seqs_[op.seq];
  s.tag = op.tag;
  if (!cfg_.enable_prefix_cache) return;
  const auto first = static_cast<std::ptrdiff_t>(op.begin),
             last = static_cast<std::ptrdiff_t>(op.end);
  for (std::ptrdiff_t i = first; i < last; ++i) AddRef(plan.hits_[static_cast<size_t>(i)]);
  s.table.assign(plan.hits_.begin() + first, plan.hits_.begin() + last);
  s.hashes.assign(plan.hit_hashes_.begin() + first, plan.hit_hashes_.begin() + last);
  query_tokens_ += op.query_tokens;
  hit_tokens_ += static_cast<int64_t>(op.end - op.begin) * cfg_.block_size;
}

void KvManager::ApplyAdopt(const KvPlan& plan, const KvPlan::Op& op, const AdoptFill& fill) {
  SeqState& s = seqs_[op.seq];
  for (size_t i = op.begin; i < op.end; ++i) {
    const BlockHash& hash = plan.adopt_hashes_[i];
    int32_t id;
    if (auto hit = cached_.find(hash); hit != cached_.end()) {
      id = hit->second;
      AddRef(id);
    } else {
      id = TakeBlock();  // may evict (and notify) an LRU cached block
      assert(id >= 0);   // counted by the plan
      if (id < 0) return;
      fill(op.seq, i - op.begin, id);
      Block& b = blocks_[static_cast<size_t>(id)];
      b.cached = true;
      b.hash = hash;
      b.depth = static_cast<int>(s.table.size());
      b.tag = s.tag;
      cached_.emplace(hash, id);
      if (events_ != nullptr) events_->Add(protocol::KvTier::kPool, hash);
    }
    s.table.push_back(id);
    s.hashes.push_back(hash);
  }
}

void KvManager::ApplyAllocate(const KvPlan::Op& op) {
  SeqState& s = seqs_[op.seq];
  const int64_t want = op.value <= 0 ? 0 : CeilDiv(op.value, cfg_.block_size);
  while (static_cast<int64_t>(s.table.size()) < want) {
    const int32_t id = TakeBlock();
    assert(id >= 0);  // counted by the plan
    if (id < 0) return;
    s.table.push_back(id);
  }
}

void KvManager::ApplyWrite(const KvPlan::Op& op, std::vector<CopyOp>* copies) {
  SeqState& s = seqs_[op.seq];
  const size_t index = static_cast<size_t>(op.value / cfg_.block_size);
  const int32_t old_id = s.table[index];
  Block& old_block = blocks_[static_cast<size_t>(old_id)];
  if (old_block.ref > 1) {
    const int32_t id = TakeBlock();
    assert(id >= 0);  // counted by the plan
    if (id < 0) return;
    blocks_[static_cast<size_t>(id)].depth = static_cast<int>(index);
    --blocks_[static_cast<size_t>(old_id)].ref;  // still >= 1: never released here
    s.table[index] = id;
    if (copies) copies->push_back(CopyOp{old_id, id});
  } else if (old_block.cached) {
    // Rewriting a registered (full) block: its content will change, so it must leave the cache.
    // The engine only writes partial blocks, so this is a caller slip that we make harmless.
    Uncache(old_id);
  }
  // The hashes of this block and every later one describe content about to change.
  if (s.hashes.size() > index) s.hashes.resize(index);
}

void KvManager::ApplyRelease(const KvPlan& plan, const KvPlan::Op& op) {
  SeqState& s = seqs_[op.seq];
  ++clock_;
  for (size_t i = op.begin; i < op.end; ++i) {
    int32_t& entry = s.table[plan.released_[i]];
    if (entry == kNoBlock) continue;
    Release(entry);
    entry = kNoBlock;
  }
}

void KvManager::CommitComputed(SeqId seq, std::span<const int32_t> tokens, int num_computed,
                               std::span<const uint8_t> salt) {
  if (!cfg_.enable_prefix_cache || num_computed <= 0) return;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    assert(false && "CommitComputed on an unknown sequence");
    return;
  }
  ++epoch_;
  SeqState& s = it->second;
  const size_t bs = static_cast<size_t>(cfg_.block_size);
  const size_t computed = std::min(static_cast<size_t>(num_computed), tokens.size());
  const size_t full = std::min(computed / bs, s.table.size());
  for (size_t i = s.hashes.size(); i < full; ++i) {
    const BlockHash parent = i == 0 ? BlockHash{} : s.hashes[i - 1];
    const BlockHash h = cachekey::HashBlock(parent, salt, tokens.subspan(i * bs, bs));
    s.hashes.push_back(h);
    const int32_t id = s.table[i];
    if (id == kNoBlock) continue;  // released (outside a window) before it was registered
    Block& b = blocks_[static_cast<size_t>(id)];
    if (b.cached) continue;               // shared with a fork or a prefix hit: already registered
    if (cached_.count(h) != 0) continue;  // identical content cached elsewhere: keep that one
    b.cached = true;
    b.hash = h;
    b.depth = static_cast<int>(i);
    b.tag = s.tag;
    cached_.emplace(h, id);
    if (events_ != nullptr) events_->Add(protocol::KvTier::kPool, h);
    if (listener_ != nullptr) listener_->OnRegister(id, h, s.tag);
  }
}

void KvManager::ForEachCached(
    const std::function<void(int32_t block, const BlockHash& hash, uint32_t tag)>& fn) const {
  for (const auto& [hash, id] : cached_) fn(id, hash, blocks_[static_cast<size_t>(id)].tag);
}

bool KvManager::Fork(SeqId parent, SeqId child) {
  auto it = seqs_.find(parent);
  if (it == seqs_.end() || parent == child || seqs_.count(child) != 0) return false;
  ++epoch_;
  SeqState copy = it->second;  // copy before inserting (rehash would invalidate `it`)
  for (int32_t id : copy.table)
    if (id != kNoBlock) AddRef(id);
  seqs_.emplace(child, std::move(copy));
  return true;
}

void KvManager::Free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  ++epoch_;
  ++clock_;
  for (int32_t id : it->second.table)
    if (id != kNoBlock) Release(id);
  seqs_.erase(it);
}

bool KvManager::Has(SeqId seq) const { return seqs_.count(seq) != 0; }

const std::vector<int32_t>& KvManager::BlockTable(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? EmptyTable() : it->second.table;
}

int KvManager::RefCount(int32_t block) const {
  if (block < 0 || block >= cfg_.num_blocks) return 0;
  return blocks_[static_cast<size_t>(block)].ref;
}

bool KvManager::IsCached(int32_t block) const {
  if (block < 0 || block >= cfg_.num_blocks) return false;
  return blocks_[static_cast<size_t>(block)].cached;
}

KvStats KvManager::Stats() const {
  KvStats st;
  st.num_blocks = cfg_.num_blocks;
  st.used_blocks = cfg_.num_blocks - NumFreeBlocks();
  st.cached_blocks = static_cast<int>(evictable_.size());
  st.prefix_query_tokens = query_tokens_;
  st.prefix_hit_tokens = hit_tokens_;
  st.evicted_blocks = evicted_;
  return st;
}

Status KvManager::CheckInvariants() const {
  auto fail = [](const std::string& what) { return Status::Internal("KV invariant: " + what); };
  const size_t n = blocks_.size();
  if (static_cast<int>(n) != cfg_.num_blocks) return fail("block count");
  // Reference counts from the tables.
  std::vector<int> refs(n, 0);
  std::vector<int64_t> last_seen(n, -1);
  int64_t seq_index = 0;
  for (const auto& [id, s] : seqs_) {
    if (s.hashes.size() > s.table.size()) {
      return fail("seq " + std::to_string(id) + " has more hashes than blocks");
    }
    for (size_t i = 0; i < s.table.size(); ++i) {
      const int32_t b = s.table[i];
      if (b == kNoBlock) continue;  // released range
      if (b < 0 || static_cast<size_t>(b) >= n) {
        return fail("seq " + std::to_string(id) + " holds bad block id " + std::to_string(b));
      }
      if (last_seen[static_cast<size_t>(b)] == seq_index) {
        return fail("block " + std::to_string(b) + " twice in seq " + std::to_string(id));
      }
      last_seen[static_cast<size_t>(b)] = seq_index;
      ++refs[static_cast<size_t>(b)];
      const Block& blk = blocks_[static_cast<size_t>(b)];
      if (blk.cached && i < s.hashes.size() && blk.hash != s.hashes[i]) {
        return fail("seq " + std::to_string(id) + " block " + std::to_string(i) +
                    " hash disagrees with the registered block");
      }
    }
    ++seq_index;
  }
  // Membership: free list and evictable set.
  std::vector<uint8_t> in_free(n, 0);
  for (int32_t b : free_) {
    if (b < 0 || static_cast<size_t>(b) >= n) return fail("bad id in free list");
    if (in_free[static_cast<size_t>(b)]) return fail("block " + std::to_string(b) + " freed twice");
    in_free[static_cast<size_t>(b)] = 1;
  }
  std::vector<uint8_t> in_evict(n, 0);
  for (const EvictKey& key : evictable_) {
    const int32_t b = std::get<2>(key);
    if (b < 0 || static_cast<size_t>(b) >= n) return fail("bad id in evictable set");
    if (in_evict[static_cast<size_t>(b)]) return fail("block evictable twice");
    in_evict[static_cast<size_t>(b)] = 1;
    if (key != KeyOf(blocks_[static_cast<size_t>(b)], b)) {
      return fail("stale evictable key for block " + std::to_string(b));
    }
  }
  size_t num_cached = 0;
  for (size_t i = 0; i < n; ++i) {
    const Block& b = blocks_[i];
    const std::string name = "block " + std::to_string(i);
    if (b.ref != refs[i]) {
      return fail(name + " ref " + std::to_string(b.ref) + " but " + std::to_string(refs[i]) +
                  " table entries");
    }
    const int states = (b.ref > 0) + in_free[i] + in_evict[i];
    if (states != 1) return fail(name + " is in " + std::to_string(states) + " states");
    if (in_free[i] && b.cached) return fail(name + " is free but cached");
    if (in_evict[i] && !b.cached) return fail(name + " is evictable but not cached");
    if (b.cached) {
      ++num_cached;
      auto it = cached_.find(b.hash);
      if (it == cached_.end() || it->second != static_cast<int32_t>(i)) {
        return fail(name + " is cached but its hash maps elsewhere");
      }
    }
  }
  if (num_cached != cached_.size()) return fail("cache map has entries for uncached blocks");
  if (!cfg_.enable_prefix_cache && !cached_.empty()) return fail("cache used while disabled");
  return Status::Ok();
}

}  // namespace strata::engine::kv
