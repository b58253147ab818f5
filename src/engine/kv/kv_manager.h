// KvManager: the logical side of the paged KV cache — a pool of blocks with reference counts,
// per-sequence block tables, copy-on-write forks, and the prefix cache.
//
// Prefix cache: a FULL block is keyed by a chained SHA-256 hash
//   h_i = SHA256(h_{i-1} || salt || token ids of block i)      (h_{-1} = 32 zero bytes)
// where `salt` binds everything that changes the meaning of the KV (model fingerprint, LoRA id,
// tenant salt, KV dtype, block size) — so collisions can't be provoked across tenants/models.
// Cached blocks that no sequence references stay in the pool as "evictable" and are reused by
// later requests with the same prefix; when free blocks run out, evictable blocks are recycled
// LRU (least recently released first; among equal times, the deepest block of a chain first).
// Counters (in tokens): prefix queries and hits.
//
// All methods either fully succeed or change nothing (AllocateSlots returns false on "no room").
// Thread contract: owned by the engine thread; not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
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
  double usage() const { return num_blocks ? static_cast<double>(used_blocks) / num_blocks : 0.0; }
};

// Computes the chained hashes of the FULL blocks of `tokens`.
std::vector<BlockHash> ComputeBlockHashes(std::span<const int32_t> tokens, int block_size,
                                          std::span<const uint8_t> salt);

class KvManager {
 public:
  explicit KvManager(const KvManagerConfig& config);

  // Attaches to a NEW sequence the longest run of cached blocks matching the prefix of `prompt`
  // (at most prompt.size() - 1 tokens are reused, so at least one token is always computed).
  // Returns the number of prompt tokens covered (a multiple of block_size). Counts queries/hits.
  int MatchPrefix(SeqId seq, std::span<const int32_t> prompt, std::span<const uint8_t> salt);

  // Ensures `seq`'s block table covers `num_tokens` positions, allocating blocks as needed
  // (creates the table for a new seq). Returns false — changing nothing — when not enough blocks
  // can be found (free + evictable).
  bool AllocateSlots(SeqId seq, int num_tokens);
  // Number of blocks AllocateSlots would need to take for `num_tokens` total positions.
  int BlocksNeeded(SeqId seq, int num_tokens) const;
  int NumFreeBlocks() const;  // free + evictable

  // After the KV of positions [0, num_computed) is written: registers every newly FULL block of
  // `tokens` (the sequence's tokens so far) in the prefix cache.
  void CommitComputed(SeqId seq, std::span<const int32_t> tokens, int num_computed,
                      std::span<const uint8_t> salt);

  // Shares parent's blocks with a new child (n > 1 completions). The last block, if partially
  // filled, is shared too; before either side writes into a shared block it must call
  // PrepareWrite, which copies it (copy-on-write) and returns {src, dst} to copy in storage.
  void Fork(SeqId parent, SeqId child);
  struct CopyOp {
    int32_t src;
    int32_t dst;
  };
  // Makes the block holding position `pos` of `seq` exclusively owned; returns the copy to
  // perform when it was shared (src == dst == -1 when nothing to do). False if no block is free.
  bool PrepareWrite(SeqId seq, int pos, CopyOp* op);

  // Releases all blocks of seq (cached full blocks become evictable, others free).
  void Free(SeqId seq);
  bool Has(SeqId seq) const;
  const std::vector<int32_t>& BlockTable(SeqId seq) const;

  KvStats Stats() const;
  // Checks invariants: every block is in exactly one of {free, evictable, referenced}; reference
  // counts equal the number of table entries pointing at each block; cached map consistent.
  Status CheckInvariants() const;

 private:
  struct Block {
    int ref = 0;
    bool cached = false;
    BlockHash hash{};
    int depth = 0;              // index of the block in its chain
    uint64_t released_at = 0;   // LRU clock when ref dropped to 0
  };
  int32_t TakeBlock();  // from free list, else evict LRU cached; -1 if none
  KvManagerConfig cfg_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;
  struct HashKey {
    size_t operator()(const BlockHash& h) const;
  };
  std::unordered_map<BlockHash, int32_t, HashKey> cached_;
  std::unordered_map<SeqId, std::vector<int32_t>> tables_;
  uint64_t clock_ = 0;
  int64_t query_tokens_ = 0, hit_tokens_ = 0;
};

}  // namespace strata::engine::kv
