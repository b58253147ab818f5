// KvManager: the logical side of the paged KV cache — a pool of blocks with reference counts,
// per-sequence block tables, copy-on-write forks, and the prefix cache.
//
// Plan, then apply. Every change that can fail for lack of blocks is first planned and then
// applied: a KvPlan, built from the manager's current state, lists what would happen (the prefix
// hit a new sequence gets, blocks adopted from a lower tier, slots allocated, copy-on-write
// copies, a range of positions released) and how many blocks it takes out of NumFreeBlocks().
// Building a plan changes nothing — not even the hit counters — so a caller can ask, decide
// (e.g. preempt someone and plan again) and only then Apply. Apply performs the whole plan or,
// when the plan no longer fits or the manager changed since it was built, nothing at all.
// Operations that cannot fail (CommitComputed, Fork, Free) mutate directly.
//
// Prefix cache: a FULL block is keyed by the chained SHA-256 of cachekey (engine-independent, so
// a gateway computes the same keys): h_i = SHA256(h_{i-1} || salt || token ids of block i).
// `salt` binds everything that changes the meaning of the KV (see cachekey::ModelSalt and
// cachekey::RequestSalt). Cached blocks that no sequence references stay in the pool as
// "evictable" and are reused by later requests with the same prefix; when free blocks run out,
// evictable blocks are recycled LRU (least recently released first; among blocks released by the
// same Free, the deepest block of a chain first). Counters (in tokens): prefix queries and hits,
// counted when a planned MatchPrefix is applied.
//
// Block states: every block is exactly one of
//   free       ref 0, no hash registered       (in the free list)
//   evictable  ref 0, hash registered          (in the LRU set; reusable by a prefix hit)
//   used       ref > 0 (hash registered or not)
// A block with a registered hash is full and is never written again (a planned PrepareWrite
// un-registers it first if a caller insists). A table entry may be a hole (kNoBlock) after
// ReleaseRange: positions no longer kept (sliding windows).
//
// Typical step for a new request: plan MatchPrefix + Allocate(prefix + chunk) — if it does not
// fit, free room (preempt) and plan again, or give up with nothing to undo — → Apply → run →
// CommitComputed. For a running sequence: plan Allocate + PrepareWrite of the first written
// position (a copy-on-write after Fork) → Apply, which returns the copies to perform in storage.
// A sequence must use the same salt throughout.
//
// Tiered cache hooks (see engine/kvtier): a Listener hears about cached blocks leaving the pool
// (OnEvict, called just before the block is recycled, while its KV content is still intact) and
// about blocks newly registered by CommitComputed (OnRegister, content just computed). Each
// sequence carries a `tag` (the engine's tenant index, 0 by default; set by the MatchPrefix that
// creates it) that its registered blocks inherit and listeners receive. A planned Adopt brings
// blocks loaded from a lower tier back into the pool: Apply takes blocks, lets the caller fill
// them, and registers them as the sequence's next full blocks.
//
// Block events: SetEventLog makes every registration an `add` and every un-registration a `remove`
// of tier pool in a KvEventLog (what a gateway polls for prefix-affinity routing).
//
// Misuse by the engine (a plan op on a sequence in the wrong state, CommitComputed on an unknown
// seq) makes the plan invalid (fits() false) or, for direct calls, is checked with assert() in
// debug builds and is a no-op in release builds.
// Thread contract: owned by the engine thread; not thread-safe. A KvPlan is a value bound to the
// manager that built it and the state it saw.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "cachekey/block_hash.h"
#include "engine/kv/kv_event_log.h"

namespace strata::engine::kv {

using BlockHash = cachekey::BlockHash;
using SeqId = int64_t;
inline constexpr int32_t kNoBlock = -1;  // a released table entry (ReleaseRange)

struct KvManagerConfig {
  int num_blocks = 0;
  int block_size = 16;
  bool enable_prefix_cache = true;
  Status Validate() const;
};

struct KvStats {
  int num_blocks = 0;
  int used_blocks = 0;    // referenced by at least one sequence
  int cached_blocks = 0;  // evictable (ref 0) blocks holding a cached prefix
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t evicted_blocks = 0;  // cached blocks recycled for new content
  double usage() const { return num_blocks ? static_cast<double>(used_blocks) / num_blocks : 0.0; }
};

// A copy-on-write copy to perform in storage: block src's rows into block dst.
struct CopyOp {
  int32_t src = -1;
  int32_t dst = -1;
};

class KvManager;

// A planned change to a KvManager (see the top of this file). Ops are applied in the order they
// were planned; every MatchPrefix must be planned before any op that takes blocks (so that no
// planned hit can be evicted by the plan itself). Reusable: KvManager::Plan(&plan) resets it and
// keeps its capacity, so a step plans without allocating.
class KvPlan {
 public:
  // Attaches to the NEW sequence `seq` the longest run of cached blocks matching the prefix of
  // `tokens` (at most tokens.size() - 1 tokens are reused, so at least one token is always
  // computed: covered = min(hit_blocks, (tokens.size() - 1) / block_size) * block_size) and
  // creates its table with tag `tag`. Returns the tokens covered (0 with the prefix cache off).
  // A hit on an evictable block revives it, so it counts in blocks_needed().
  int MatchPrefix(SeqId seq, std::span<const int32_t> tokens, std::span<const uint8_t> salt,
                  uint32_t tag = 0);
  // Appends to `seq` (whose table must hold exactly its registered full blocks, as right after a
  // MatchPrefix) one block per hash, in order: a hash already cached in the pool is attached as a
  // prefix hit; otherwise a block is taken, filled by Apply's `fill` and registered under the
  // hash with the sequence's tag. Plans as many as fit in the free blocks left; returns that
  // number. The caller guarantees that hashes[i] is the chained hash of block (table size + i).
  int Adopt(SeqId seq, std::span<const BlockHash> hashes);
  // Grows `seq`'s table to cover `num_tokens` positions (creates the table of a new seq). Never
  // shrinks a table.
  void Allocate(SeqId seq, int num_tokens);
  // Makes the block holding position `pos` of `seq` exclusively owned (a copy-on-write when it is
  // shared with a fork: one block, and a CopyOp from Apply). `pos` must be covered by the table
  // as planned so far.
  void PrepareWrite(SeqId seq, int pos);
  // Releases the blocks of `seq` all of whose positions lie in [from, to) (a block partly outside
  // stays); their table entries become kNoBlock. Registered blocks stay cached (evictable once no
  // one else holds them). Frees blocks but never counts on them for the rest of the plan.
  void ReleaseRange(SeqId seq, int from, int to);

  // False when an op was misused (unknown or wrong-state sequence, uncovered position, a
  // MatchPrefix after an op that takes blocks) or the plan needs more blocks than are free.
  bool fits() const { return valid_ && needed_ <= free_at_plan_; }
  bool valid() const { return valid_; }
  // Blocks the plan takes out of NumFreeBlocks(): new blocks, copies, revived evictable hits.
  int blocks_needed() const { return needed_; }
  // Of the planned prefix hits, how many blocks are evictable now.
  int evictable_hits() const { return evictable_hits_; }
  int num_copies() const { return copies_; }
  int num_released() const { return static_cast<int>(released_.size()); }

 private:
  friend class KvManager;
  enum class OpKind : uint8_t { kMatch, kAdopt, kAllocate, kWrite, kRelease };
  struct Op {
    OpKind kind;
    SeqId seq;
    uint32_t tag = 0;
    int query_tokens = 0;  // kMatch: tokens queried
    size_t begin = 0;      // kMatch: [begin, end) of hits_/hit_hashes_; kAdopt: of adopt_hashes_;
    size_t end = 0;        // kRelease: of released_ (block indexes)
    int value = 0;         // kAllocate: positions to cover; kWrite: position
  };
  struct SeqView {  // a sequence as the plan leaves it so far
    SeqId seq;
    bool exists;    // in the manager or created by an earlier op of this plan
    size_t table;   // table size
    size_t hashes;  // hashes known (full registered blocks)
  };
  SeqView* View(SeqId seq);
  bool Revive(int32_t block);  // counts an evictable block once; true if it was evictable
  void Invalidate() { valid_ = false; }

  const KvManager* kv_ = nullptr;
  uint64_t epoch_ = 0;
  int free_at_plan_ = 0;
  bool valid_ = true;
  bool took_ = false;  // an op that takes blocks was planned
  int needed_ = 0;
  int evictable_hits_ = 0;
  int copies_ = 0;
  std::vector<Op> ops_;
  std::vector<SeqView> views_;
  std::vector<int32_t> hits_;
  std::vector<BlockHash> hit_hashes_;
  std::vector<BlockHash> adopt_hashes_;
  std::vector<int32_t> revived_;
  std::vector<size_t> released_;
};

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
  // Block events (kv_event_log.h): every hash registered in the prefix cache (computed or adopted)
  // is an `add` of tier pool, every hash leaving it (evicted, un-registered) a `remove`. Not
  // owned; must outlive the manager (or be reset to nullptr). Observation only: changes nothing
  // else.
  void SetEventLog(KvEventLog* log) { events_ = log; }

  const KvManagerConfig& config() const { return cfg_; }
  int block_size() const { return cfg_.block_size; }

  // Starts a plan against the current state (resetting `plan`, keeping its capacity).
  void Plan(KvPlan* plan) const;
  KvPlan Plan() const;
  // Writes the KV content of an adopted hash into pool block `block` (`index` into the hashes of
  // the Adopt op of sequence `seq`).
  using AdoptFill = std::function<void(SeqId seq, size_t index, int32_t block)>;
  // Applies `plan` entirely and returns true, appending the copy-on-write copies to perform to
  // `copies` (may be null when the plan has none); or returns false changing nothing when the
  // plan does not fit, is invalid, or the manager changed since it was planned. `fill` is needed
  // when the plan adopts blocks.
  bool Apply(const KvPlan& plan, std::vector<CopyOp>* copies = nullptr,
             const AdoptFill& fill = nullptr);

  // How many leading hashes of a precomputed chain are cached in the pool (no hashing, no
  // counting).
  int ProbeHashes(std::span<const BlockHash> hashes) const;
  int NumFreeBlocks() const;  // free + evictable

  // After the KV of positions [0, num_computed) is written: registers every newly FULL block of
  // `tokens` (the sequence's tokens so far) in the prefix cache. If another block already holds
  // the same hash, that mapping is kept and this block stays unregistered (freed normally later).
  void CommitComputed(SeqId seq, std::span<const int32_t> tokens, int num_computed,
                      std::span<const uint8_t> salt);

  // Shares parent's blocks with a new child (n > 1 completions). The last block, if partially
  // filled, is shared too; before either side writes into a shared block it must plan a
  // PrepareWrite, which copies it (copy-on-write). Returns false (changing nothing) if parent is
  // unknown or child already exists.
  bool Fork(SeqId parent, SeqId child);
  // Calls fn(block, hash, tag) for every block registered in the prefix cache (used or evictable).
  void ForEachCached(
      const std::function<void(int32_t block, const BlockHash& hash, uint32_t tag)>& fn) const;

  // Releases all blocks of seq (cached full blocks become evictable, others free). No-op for an
  // unknown seq.
  void Free(SeqId seq);
  bool Has(SeqId seq) const;
  // The seq's block table (empty for an unknown seq). Invalidated by any non-const call.
  const std::vector<int32_t>& BlockTable(SeqId seq) const;
  int NumSeqs() const { return static_cast<int>(seqs_.size()); }
  int RefCount(int32_t block) const;   // for tests and stats
  bool IsCached(int32_t block) const;  // hash registered

  KvStats Stats() const;
  // Checks invariants: every block is in exactly one of {free, evictable, referenced}; reference
  // counts equal the number of table entries pointing at each block; cached map consistent;
  // hashes recorded per sequence agree with the registered blocks. O(blocks + table entries).
  Status CheckInvariants() const;

 private:
  friend class KvPlan;
  struct Block {
    int ref = 0;
    bool cached = false;
    BlockHash hash{};
    int depth = 0;             // index of the block in its chain (set when registered)
    uint32_t tag = 0;          // tag of the sequence that registered it
    uint64_t released_at = 0;  // LRU clock when ref dropped to 0
  };
  struct SeqState {
    std::vector<int32_t> table;  // kNoBlock for released positions
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
  const SeqState* FindSeq(SeqId seq) const;
  const Block& block(int32_t id) const { return blocks_[static_cast<size_t>(id)]; }
  // Apply, one op each (the plan checked room and states).
  void ApplyMatch(const KvPlan& plan, const KvPlan::Op& op);
  void ApplyAdopt(const KvPlan& plan, const KvPlan::Op& op, const AdoptFill& fill);
  void ApplyAllocate(const KvPlan::Op& op);
  void ApplyWrite(const KvPlan::Op& op, std::vector<CopyOp>* copies);
  void ApplyRelease(const KvPlan& plan, const KvPlan::Op& op);

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
  uint64_t epoch_ = 0;  // bumped by every change; a plan is valid only at the epoch it saw
  Listener* listener_ = nullptr;
  KvEventLog* events_ = nullptr;
  int64_t query_tokens_ = 0, hit_tokens_ = 0, evicted_ = 0;
};

}  // namespace strata::engine::kv
