// KvManager: the logical side of the paged KV cache — a pool of blocks with reference counts,
// per-sequence block tables, copy-on-write forks, and the prefix cache.
//
// Prefix cache: a FULL block is keyed by a chained SHA-256 hash
//   h_i = SHA256(h_{i-1} || salt || token ids of block i)      (h_{-1} = 32 zero bytes)
// Exact byte input of one hash (see HashBlock):
//   32 bytes   parent hash h_{i-1}
//   8 bytes    salt length, unsigned little-endian
//   n bytes    salt
//   4*bs bytes the block's token ids, each int32 little-endian (two's complement)
// `salt` binds everything that changes the meaning of the KV (model fingerprint, LoRA id, tenant
// salt, KV dtype, block size — see MakePrefixSalt) — so collisions can't be provoked across
// tenants/models. Cached blocks that no sequence references stay in the pool as "evictable" and
// are reused by later requests with the same prefix; when free blocks run out, evictable blocks
// are recycled LRU (least recently released first; among blocks released by the same Free, the
// deepest block of a chain first). Counters (in tokens): prefix queries and hits.
//
// Block states: every block is exactly one of
//   free       ref 0, no hash registered       (in the free list)
//   evictable  ref 0, hash registered          (in the LRU set; reusable by a prefix hit)
//   used       ref > 0 (hash registered or not)
// A block with a registered hash is full and is never written again (PrepareWrite un-registers
// it first if a caller insists).
//
// Typical step for a new request: MatchPrefix → AllocateSlots(prefix + chunk) — if that returns
// false, Free(seq) to give the hit blocks back — → PrepareWrite for the first written position
// (only needed after Fork) → run → CommitComputed. A sequence must use the same salt throughout.
//
// Tiered cache hooks (see engine/kvtier): a Listener hears about cached blocks leaving the pool
// (OnEvict, called just before the block is recycled, while its KV content is still intact) and
// about blocks newly registered by CommitComputed (OnRegister, content just computed). Each
// sequence carries a `tag` (the engine's tenant index, 0 by default) that its registered blocks
// inherit and listeners receive. AdoptBlocks brings blocks loaded from a lower tier back into the
// pool: it takes blocks, lets the caller fill them, and registers them as the sequence's next
// full blocks.
//
// All methods either fully succeed or change nothing (AllocateSlots returns false on "no room").
// Misuse by the engine (MatchPrefix on a seq that already has blocks, CommitComputed on an
// unknown seq) is checked with assert() in debug builds and is a no-op in release builds.
// Thread contract: owned by the engine thread; not thread-safe.
#pragma once

#include <array>
#include <functional>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace strata::engine::kv {

using BlockHash = std::array<uint8_t, 32>;
using SeqId = int64_t;

struct KvManagerConfig {
  int num_blocks = 0;
  int block_size = 16;
  bool enable_prefix_cache = true;
  Status Validate() const;
};

struct KvStats {
  int num_blocks = 0;
  int used_blocks = 0;        // referenced by at least one sequence
  int cached_blocks = 0;      // evictable (ref 0) blocks holding a cached prefix
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t evicted_blocks = 0;  // cached blocks recycled for new content
  double usage() const { return num_blocks ? static_cast<double>(used_blocks) / num_blocks : 0.0; }
};

// Hash of one full block given its parent's hash (32 zero bytes for the first block); the byte
// format is documented at the top of this file. `tokens` is the block's tokens (block_size ids).
BlockHash HashBlock(const BlockHash& parent, std::span<const uint8_t> salt,
                    std::span<const int32_t> tokens);

// Computes the chained hashes of the FULL blocks of `tokens`.
std::vector<BlockHash> ComputeBlockHashes(std::span<const int32_t> tokens, int block_size,
                                          std::span<const uint8_t> salt);

// Builds a salt from its parts without ambiguity: each part as 8-byte little-endian length + bytes.
// Pass e.g. {model fingerprint, LoRA id, tenant salt, KvDTypeName(dtype), to_string(block_size)}.
std::vector<uint8_t> MakePrefixSalt(std::initializer_list<std::string_view> parts);

// Lower-case hex of a hash (logs, tests).
std::string HashToHex(const BlockHash& h);

class KvManager {
 public:
  explicit KvManager(const KvManagerConfig& config);

  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void OnEvict(int32_t block, const BlockHash& hash, uint32_t tag) = 0;
    virtual void OnRegister(int32_t block, const BlockHash& hash, uint32_t tag) = 0;
  };
  // Not owned; must outlive the manager (or be reset to nullptr).
  void SetListener(Listener* listener) { listener_ = listener; }
  // Sets the tag of an existing sequence (no-op for an unknown seq). Forks inherit it.
  void SetTag(SeqId seq, uint32_t tag);

  const KvManagerConfig& config() const { return cfg_; }
  int block_size() const { return cfg_.block_size; }

  // Attaches to a NEW sequence the longest run of cached blocks matching the prefix of `prompt`
  // (at most prompt.size() - 1 tokens are reused, so at least one token is always computed:
  // covered = min(hit_blocks, (prompt.size() - 1) / block_size) * block_size).
  // Creates the (possibly empty) table of seq. Returns the number of prompt tokens covered (a
  // multiple of block_size). Counts queries (prompt.size()) and hits (the returned value) when the
  // prefix cache is enabled. A hit on an evictable block revives it (ref 1, no longer evictable).
  int MatchPrefix(SeqId seq, std::span<const int32_t> prompt, std::span<const uint8_t> salt);

  // What MatchPrefix would return for `prompt`, without attaching or counting anything.
  // `evictable_blocks`: how many of the hit blocks are currently evictable (attaching them takes
  // them out of NumFreeBlocks()).
  struct PrefixProbe {
    int tokens = 0;
    int evictable_blocks = 0;
  };
  PrefixProbe ProbePrefix(std::span<const int32_t> prompt, std::span<const uint8_t> salt) const;
  // How many leading hashes of a precomputed chain are cached in the pool (no hashing, no counting).
  int ProbeHashes(std::span<const BlockHash> hashes) const;

  // Ensures `seq`'s block table covers `num_tokens` positions, allocating blocks as needed
  // (creates the table for a new seq). Returns false — changing nothing — when not enough blocks
  // can be found (free + evictable). Never shrinks a table.
  bool AllocateSlots(SeqId seq, int num_tokens);
  // Number of blocks AllocateSlots would need to take for `num_tokens` total positions.
  int BlocksNeeded(SeqId seq, int num_tokens) const;
  int NumFreeBlocks() const;  // free + evictable

  // After the KV of positions [0, num_computed) is written: registers every newly FULL block of
  // `tokens` (the sequence's tokens so far) in the prefix cache. If another block already holds
  // the same hash, that mapping is kept and this block stays unregistered (freed normally later).
  void CommitComputed(SeqId seq, std::span<const int32_t> tokens, int num_computed,
                      std::span<const uint8_t> salt);

  // Shares parent's blocks with a new child (n > 1 completions). The last block, if partially
  // filled, is shared too; before either side writes into a shared block it must call
  // PrepareWrite, which copies it (copy-on-write) and returns {src, dst} to copy in storage.
  // Returns false (changing nothing) if parent is unknown or child already exists.
  bool Fork(SeqId parent, SeqId child);
  struct CopyOp {
    int32_t src;
    int32_t dst;
  };
  // Makes the block holding position `pos` of `seq` exclusively owned; returns the copy to
  // perform when it was shared (src == dst == -1 when nothing to do). False if no block is free
  // (or seq/pos is not covered by the table); nothing changes then.
  bool PrepareWrite(SeqId seq, int pos, CopyOp* op);
  // PrepareWrite for every block touched by positions [start, start + count), all or nothing:
  // appends the copies to perform to `ops` (may be null) and returns true, or returns false
  // changing nothing when the table does not cover the range or too few blocks are free.
  bool PrepareWriteRange(SeqId seq, int start, int count, std::vector<CopyOp>* ops);
  // True when writing position `pos` of `seq` needs a copy-on-write (so one free block).
  bool NeedsCopyOnWrite(SeqId seq, int pos) const;

  // Appends to `seq` (whose table must hold exactly its registered full blocks, as right after
  // MatchPrefix) one block per hash, in order: a hash already cached in the pool is attached as a
  // prefix hit; otherwise a block is taken (possibly evicting an LRU cached block), `fill(i, block)`
  // must write the KV content of hashes[i] into it, and it is registered under hashes[i] with the
  // sequence's tag. Stops early when no block can be taken. The caller guarantees that hashes[i] is
  // the chained hash of the sequence's block (table size + i). Returns the number appended.
  int AdoptBlocks(SeqId seq, std::span<const BlockHash> hashes,
                  const std::function<void(size_t index, int32_t block)>& fill);
  // Calls fn(block, hash, tag) for every block registered in the prefix cache (used or evictable).
  void ForEachCached(const std::function<void(int32_t block, const BlockHash& hash, uint32_t tag)>& fn) const;

  // Releases all blocks of seq (cached full blocks become evictable, others free). No-op for an
  // unknown seq.
  void Free(SeqId seq);
  bool Has(SeqId seq) const;
  // The seq's block table (empty for an unknown seq). Invalidated by any non-const call.
  const std::vector<int32_t>& BlockTable(SeqId seq) const;
  int NumSeqs() const { return static_cast<int>(seqs_.size()); }
  int RefCount(int32_t block) const;        // for tests and stats
  bool IsCached(int32_t block) const;       // hash registered
  // Takes back the counts of MatchPrefix calls whose admission was rolled back (the scheduler
  // retries it later; counting every attempt would inflate the hit rate's both sides).
  void UncountQuery(int64_t query_tokens, int64_t hit_tokens) {
    query_tokens_ -= query_tokens;
    hit_tokens_ -= hit_tokens;
  }
  // Clears the prefix-cache counters (stats reset).
  void ResetCounters() { query_tokens_ = hit_tokens_ = evicted_ = 0; }

  KvStats Stats() const;
  // Checks invariants: every block is in exactly one of {free, evictable, referenced}; reference
  // counts equal the number of table entries pointing at each block; cached map consistent;
  // hashes recorded per sequence agree with the registered blocks. O(blocks + table entries).
  Status CheckInvariants() const;

 private:
  struct Block {
    int ref = 0;
    bool cached = false;
    BlockHash hash{};
    int depth = 0;              // index of the block in its chain (set when registered)
    uint32_t tag = 0;           // tag of the sequence that registered it
    uint64_t released_at = 0;   // LRU clock when ref dropped to 0
  };
  struct SeqState {
    std::vector<int32_t> table;
    // hashes[i] = chained hash of full block i, for the blocks hashed so far (<= table.size()).
    std::vector<BlockHash> hashes;
    uint32_t tag = 0;
  };
  // Evictable order: released_at ascending, then depth descending, then block id.
  using EvictKey = std::tuple<uint64_t, int, int32_t>;
  static EvictKey KeyOf(const Block& b, int32_t id) { return {b.released_at, -b.depth, id}; }

  int32_t TakeBlock();  // from free list, else evict LRU cached; -1 if none. Returns ref 1.
  void AddRef(int32_t id);
  void Release(int32_t id);
  void Uncache(int32_t id);
  int MatchCount(std::span<const int32_t> prompt, std::span<const uint8_t> salt,
                 std::vector<int32_t>* blocks, std::vector<BlockHash>* hashes) const;

  KvManagerConfig cfg_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;
  std::set<EvictKey> evictable_;
  struct HashKey {
    size_t operator()(const BlockHash& h) const;
  };
  std::unordered_map<BlockHash, int32_t, HashKey> cached_;
  std::unordered_map<SeqId, SeqState> seqs_;
  uint64_t clock_ = 0;
  Listener* listener_ = nullptr;
  int64_t query_tokens_ = 0, hit_tokens_ = 0, evicted_ = 0;
};

}  // namespace strata::engine::kv
