#include "engine/kv/kv_manager.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>

namespace strata::engine::kv {

namespace {

void AppendLe64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

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

BlockHash HashBlock(const BlockHash& parent, std::span<const uint8_t> salt,
                    std::span<const int32_t> tokens) {
  // One contiguous buffer (reused per thread) keeps this to a single EVP_Digest call.
  thread_local std::vector<uint8_t> buf;
  buf.clear();
  buf.reserve(parent.size() + 8 + salt.size() + 4 * tokens.size());
  buf.insert(buf.end(), parent.begin(), parent.end());
  AppendLe64(&buf, salt.size());
  buf.insert(buf.end(), salt.begin(), salt.end());
  for (int32_t t : tokens) {
    const uint32_t u = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) buf.push_back(static_cast<uint8_t>(u >> (8 * i)));
  }
  BlockHash out{};
  unsigned int len = 0;
  if (EVP_Digest(buf.data(), buf.size(), out.data(), &len, EVP_sha256(), nullptr) != 1 ||
      len != out.size()) {
    // OpenSSL failing to hash in memory means the library is broken; a wrong key would corrupt
    // other requests' KV, so stop.
    std::abort();
  }
  return out;
}

std::vector<BlockHash> ComputeBlockHashes(std::span<const int32_t> tokens, int block_size,
                                          std::span<const uint8_t> salt) {
  std::vector<BlockHash> out;
  if (block_size <= 0) return out;
  const size_t bs = static_cast<size_t>(block_size);
  const size_t n = tokens.size() / bs;
  out.reserve(n);
  BlockHash parent{};
  for (size_t i = 0; i < n; ++i) {
    parent = HashBlock(parent, salt, tokens.subspan(i * bs, bs));
    out.push_back(parent);
  }
  return out;
}

std::vector<uint8_t> MakePrefixSalt(std::initializer_list<std::string_view> parts) {
  std::vector<uint8_t> out;
  for (std::string_view p : parts) {
    AppendLe64(&out, p.size());
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

std::string HashToHex(const BlockHash& h) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : h) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
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
  if (it != cached_.end() && it->second == id) cached_.erase(it);
  b.cached = false;
  b.hash = BlockHash{};
}

int KvManager::MatchCount(std::span<const int32_t> prompt, std::span<const uint8_t> salt,
                          std::vector<int32_t>* blocks, std::vector<BlockHash>* hashes) const {
  if (!cfg_.enable_prefix_cache || prompt.empty()) return 0;
  const size_t bs = static_cast<size_t>(cfg_.block_size);
  // Keep at least the last prompt token to compute: it produces the logits.
  const size_t max_blocks = (prompt.size() - 1) / bs;
  BlockHash parent{};
  size_t i = 0;
  for (; i < max_blocks; ++i) {
    const BlockHash h = HashBlock(parent, salt, prompt.subspan(i * bs, bs));
    auto it = cached_.find(h);
    if (it == cached_.end()) break;
    if (blocks) blocks->push_back(it->second);
    if (hashes) hashes->push_back(h);
    parent = h;
  }
  return static_cast<int>(i);
}

int KvManager::MatchPrefix(SeqId seq, std::span<const int32_t> prompt,
                           std::span<const uint8_t> salt) {
  auto existing = seqs_.find(seq);
  if (existing != seqs_.end() && !existing->second.table.empty()) {
    assert(false && "MatchPrefix on a sequence that already has blocks");
    return 0;
  }
  SeqState& s = seqs_[seq];
  if (!cfg_.enable_prefix_cache) return 0;
  std::vector<int32_t> blocks;
  std::vector<BlockHash> hashes;
  const int n = MatchCount(prompt, salt, &blocks, &hashes);
  for (int32_t id : blocks) AddRef(id);
  s.table = std::move(blocks);
  s.hashes = std::move(hashes);
  const int tokens = n * cfg_.block_size;
  query_tokens_ += static_cast<int64_t>(prompt.size());
  hit_tokens_ += tokens;
  return tokens;
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

KvManager::PrefixProbe KvManager::ProbePrefix(std::span<const int32_t> prompt,
                                              std::span<const uint8_t> salt) const {
  PrefixProbe probe;
  std::vector<int32_t> blocks;
  probe.tokens = MatchCount(prompt, salt, &blocks, nullptr) * cfg_.block_size;
  for (int32_t id : blocks) {
    if (blocks_[static_cast<size_t>(id)].ref == 0) ++probe.evictable_blocks;
  }
  return probe;
}

int KvManager::BlocksNeeded(SeqId seq, int num_tokens) const {
  if (num_tokens <= 0) return 0;
  auto it = seqs_.find(seq);
  const int64_t have = it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.table.size());
  const int64_t need = CeilDiv(num_tokens, cfg_.block_size) - have;
  return need > 0 ? static_cast<int>(need) : 0;
}

int KvManager::NumFreeBlocks() const {
  return static_cast<int>(free_.size() + evictable_.size());
}

bool KvManager::AllocateSlots(SeqId seq, int num_tokens) {
  const int need = BlocksNeeded(seq, num_tokens);
  if (need > NumFreeBlocks()) return false;
  SeqState& s = seqs_[seq];
  s.table.reserve(s.table.size() + static_cast<size_t>(need));
  for (int i = 0; i < need; ++i) {
    const int32_t id = TakeBlock();
    assert(id >= 0);  // counted above
    s.table.push_back(id);
  }
  return true;
}

void KvManager::CommitComputed(SeqId seq, std::span<const int32_t> tokens, int num_computed,
                               std::span<const uint8_t> salt) {
  if (!cfg_.enable_prefix_cache || num_computed <= 0) return;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    assert(false && "CommitComputed on an unknown sequence");
    return;
  }
  SeqState& s = it->second;
  const size_t bs = static_cast<size_t>(cfg_.block_size);
  const size_t computed = std::min(static_cast<size_t>(num_computed), tokens.size());
  const size_t full = std::min(computed / bs, s.table.size());
  for (size_t i = s.hashes.size(); i < full; ++i) {
    const BlockHash parent = i == 0 ? BlockHash{} : s.hashes[i - 1];
    const BlockHash h = HashBlock(parent, salt, tokens.subspan(i * bs, bs));
    s.hashes.push_back(h);
    const int32_t id = s.table[i];
    Block& b = blocks_[static_cast<size_t>(id)];
    if (b.cached) continue;  // shared with a fork or a prefix hit: already registered
    if (cached_.count(h) != 0) continue;  // identical content cached elsewhere: keep that one
    b.cached = true;
    b.hash = h;
    b.depth = static_cast<int>(i);
    b.tag = s.tag;
    cached_.emplace(h, id);
    if (listener_ != nullptr) listener_->OnRegister(id, h, s.tag);
  }
}

void KvManager::SetTag(SeqId seq, uint32_t tag) {
  auto it = seqs_.find(seq);
  if (it != seqs_.end()) it->second.tag = tag;
}

int KvManager::AdoptBlocks(SeqId seq, std::span<const BlockHash> hashes,
                           const std::function<void(size_t index, int32_t block)>& fill) {
  if (!cfg_.enable_prefix_cache) return 0;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    assert(false && "AdoptBlocks on an unknown sequence");
    return 0;
  }
  if (it->second.table.size() != it->second.hashes.size()) {
    assert(false && "AdoptBlocks after a partial block");
    return 0;
  }
  int adopted = 0;
  for (size_t i = 0; i < hashes.size(); ++i) {
    int32_t id;
    auto hit = cached_.find(hashes[i]);
    if (hit != cached_.end()) {
      id = hit->second;
      AddRef(id);
    } else {
      id = TakeBlock();  // may evict (and notify) an LRU cached block; `it` stays valid
      if (id < 0) break;
      fill(i, id);
      Block& b = blocks_[static_cast<size_t>(id)];
      b.cached = true;
      b.hash = hashes[i];
      b.depth = static_cast<int>(it->second.table.size());
      b.tag = it->second.tag;
      cached_.emplace(hashes[i], id);
    }
    it->second.table.push_back(id);
    it->second.hashes.push_back(hashes[i]);
    ++adopted;
  }
  return adopted;
}

void KvManager::ForEachCached(
    const std::function<void(int32_t block, const BlockHash& hash, uint32_t tag)>& fn) const {
  for (const auto& [hash, id] : cached_) fn(id, hash, blocks_[static_cast<size_t>(id)].tag);
}

bool KvManager::Fork(SeqId parent, SeqId child) {
  auto it = seqs_.find(parent);
  if (it == seqs_.end() || parent == child || seqs_.count(child) != 0) return false;
  SeqState copy = it->second;  // copy before inserting (rehash would invalidate `it`)
  for (int32_t id : copy.table) AddRef(id);
  seqs_.emplace(child, std::move(copy));
  return true;
}

bool KvManager::NeedsCopyOnWrite(SeqId seq, int pos) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || pos < 0) return false;
  const size_t index = static_cast<size_t>(pos) / static_cast<size_t>(cfg_.block_size);
  if (index >= it->second.table.size()) return false;
  return blocks_[static_cast<size_t>(it->second.table[index])].ref > 1;
}

bool KvManager::PrepareWrite(SeqId seq, int pos, CopyOp* op) {
  if (op) *op = CopyOp{-1, -1};
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || pos < 0) return false;
  SeqState& s = it->second;
  const size_t index = static_cast<size_t>(pos) / static_cast<size_t>(cfg_.block_size);
  if (index >= s.table.size()) return false;
  const int32_t old_id = s.table[index];
  Block& old_block = blocks_[static_cast<size_t>(old_id)];
  if (old_block.ref > 1) {
    const int32_t id = TakeBlock();
    if (id < 0) return false;
    blocks_[static_cast<size_t>(id)].depth = static_cast<int>(index);
    --blocks_[static_cast<size_t>(old_id)].ref;  // still >= 1: never released here
    s.table[index] = id;
    if (op) *op = CopyOp{old_id, id};
  } else if (old_block.cached) {
    // Rewriting a registered (full) block: its content will change, so it must leave the cache.
    // The engine only writes partial blocks, so this is a caller slip that we make harmless.
    Uncache(old_id);
  }
  // The hashes of this block and every later one describe content about to change.
  if (s.hashes.size() > index) s.hashes.resize(index);
  return true;
}

bool KvManager::PrepareWriteRange(SeqId seq, int start, int count, std::vector<CopyOp>* ops) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || start < 0 || count < 0) return false;
  if (count == 0) return true;
  const int64_t bs = cfg_.block_size;
  const int64_t first = start / bs;
  const int64_t last = (static_cast<int64_t>(start) + count - 1) / bs;
  const std::vector<int32_t>& table = it->second.table;
  if (last >= static_cast<int64_t>(table.size())) return false;
  int copies = 0;
  for (int64_t i = first; i <= last; ++i) {
    copies += blocks_[static_cast<size_t>(table[static_cast<size_t>(i)])].ref > 1;
  }
  if (copies > NumFreeBlocks()) return false;
  for (int64_t i = first; i <= last; ++i) {
    const int pos = static_cast<int>(std::max<int64_t>(i * bs, start));
    CopyOp op{-1, -1};
    const bool ok = PrepareWrite(seq, pos, &op);
    assert(ok);  // room and coverage checked above
    (void)ok;
    if (op.src >= 0 && ops) ops->push_back(op);
  }
  return true;
}

void KvManager::Free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  ++clock_;
  for (int32_t id : it->second.table) Release(id);
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
