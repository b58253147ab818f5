#include "engine/kv/kv_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace strata::engine::kv {
namespace {

std::vector<uint8_t> Salt(std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }

std::vector<int32_t> Range(int32_t start, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

#define EXPECT_INVARIANTS(m)               \
  do {                                     \
    Status s_ = (m).CheckInvariants();     \
    ASSERT_TRUE(s_.ok()) << s_.ToString(); \
  } while (0)

KvManager MakeManager(int num_blocks, int block_size = 4, bool prefix = true) {
  KvManagerConfig c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.enable_prefix_cache = prefix;
  EXPECT_TRUE(c.Validate().ok());
  return KvManager(c);
}

// The old one-call operations, each as a plan applied at once (what most tests need).
int Match(KvManager& m, SeqId seq, std::span<const int32_t> prompt, std::span<const uint8_t> salt,
          uint32_t tag = 0) {
  KvPlan plan = m.Plan();
  const int hit = plan.MatchPrefix(seq, prompt, salt, tag);
  EXPECT_TRUE(m.Apply(plan));
  return hit;
}

bool Allocate(KvManager& m, SeqId seq, int num_tokens) {
  KvPlan plan = m.Plan();
  plan.Allocate(seq, num_tokens);
  return m.Apply(plan);
}

int Needed(const KvManager& m, SeqId seq, int num_tokens) {
  KvPlan plan = m.Plan();
  plan.Allocate(seq, num_tokens);
  return plan.blocks_needed();
}

struct Probe {
  int tokens = 0;
  int evictable_blocks = 0;
};
// A plan that is never applied: what a MatchPrefix would give.
Probe PlannedHit(const KvManager& m, std::span<const int32_t> prompt,
                 std::span<const uint8_t> salt) {
  KvPlan plan = m.Plan();
  const int tokens = plan.MatchPrefix(/*seq=*/-1000, prompt, salt);
  return Probe{tokens, plan.evictable_hits()};
}

bool PlansACopy(const KvManager& m, SeqId seq, int pos) {
  KvPlan plan = m.Plan();
  plan.PrepareWrite(seq, pos);
  return plan.valid() && plan.num_copies() > 0;
}

bool PrepareWrite(KvManager& m, SeqId seq, int pos, CopyOp* op) {
  KvPlan plan = m.Plan();
  plan.PrepareWrite(seq, pos);
  std::vector<CopyOp> copies;
  const bool ok = m.Apply(plan, &copies);
  EXPECT_LE(copies.size(), 1u);
  *op = copies.empty() ? CopyOp{-1, -1} : copies[0];
  return ok;
}

int AdoptBlocks(KvManager& m, SeqId seq, std::span<const BlockHash> hashes,
                const std::function<void(size_t, int32_t)>& fill) {
  KvPlan plan = m.Plan();
  const int n = plan.Adopt(seq, hashes);
  EXPECT_TRUE(m.Apply(plan, nullptr, [&](SeqId, size_t i, int32_t block) { fill(i, block); }));
  return n;
}

// Runs a whole prompt through: match, allocate, commit. Returns the matched token count.
int Prefill(KvManager* m, SeqId seq, const std::vector<int32_t>& prompt,
            const std::vector<uint8_t>& salt) {
  const int hit = Match(*m, seq, prompt, salt);
  EXPECT_TRUE(Allocate(*m, seq, static_cast<int>(prompt.size())));
  m->CommitComputed(seq, prompt, static_cast<int>(prompt.size()), salt);
  return hit;
}

// ---- manager ----

TEST(KvManagerTest, ConfigValidate) {
  KvManagerConfig c;
  EXPECT_FALSE(c.Validate().ok());  // num_blocks 0
  c.num_blocks = 4;
  EXPECT_TRUE(c.Validate().ok());
  c.block_size = 0;
  EXPECT_FALSE(c.Validate().ok());
}

TEST(KvManagerTest, AllocateAndFree) {
  KvManager m = MakeManager(8);
  EXPECT_EQ(m.NumFreeBlocks(), 8);
  EXPECT_EQ(Needed(m, 1, 9), 3);
  ASSERT_TRUE(Allocate(m, 1, 9));
  EXPECT_INVARIANTS(m);
  EXPECT_TRUE(m.Has(1));
  EXPECT_EQ(m.BlockTable(1).size(), 3u);
  EXPECT_EQ(m.NumFreeBlocks(), 5);
  EXPECT_EQ(Needed(m, 1, 12), 0);
  EXPECT_EQ(Needed(m, 1, 13), 1);
  ASSERT_TRUE(Allocate(m, 1, 12));  // no growth needed
  EXPECT_EQ(m.BlockTable(1).size(), 3u);
  ASSERT_TRUE(Allocate(m, 1, 13));
  EXPECT_EQ(m.BlockTable(1).size(), 4u);
  ASSERT_TRUE(Allocate(m, 2, 0));  // creates an empty table
  EXPECT_TRUE(m.Has(2));
  EXPECT_INVARIANTS(m);
  KvStats st = m.Stats();
  EXPECT_EQ(st.used_blocks, 4);
  EXPECT_DOUBLE_EQ(st.usage(), 0.5);
  m.Free(1);
  m.Free(2);
  m.Free(99);  // unknown: no-op
  EXPECT_FALSE(m.Has(1));
  EXPECT_TRUE(m.BlockTable(1).empty());
  EXPECT_EQ(m.NumFreeBlocks(), 8);
  EXPECT_EQ(m.Stats().used_blocks, 0);
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, NoRoomChangesNothing) {
  KvManager m = MakeManager(4);
  ASSERT_TRUE(Allocate(m, 1, 10));  // 3 blocks
  const auto table = m.BlockTable(1);
  EXPECT_FALSE(Allocate(m, 1, 17));  // needs 2 more, 1 free
  EXPECT_EQ(m.BlockTable(1), table);
  EXPECT_FALSE(Allocate(m, 2, 5));  // needs 2
  EXPECT_FALSE(m.Has(2));
  EXPECT_EQ(m.NumFreeBlocks(), 1);
  EXPECT_INVARIANTS(m);
  EXPECT_TRUE(Allocate(m, 2, 4));
  EXPECT_EQ(m.NumFreeBlocks(), 0);
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, PrefixHitAcrossSequences) {
  KvManager m = MakeManager(16);
  const auto salt = Salt("s");
  const auto prompt = Range(100, 10);  // 2 full blocks + 2 tokens
  EXPECT_EQ(Prefill(&m, 1, prompt, salt), 0);
  EXPECT_INVARIANTS(m);
  const auto t1 = m.BlockTable(1);
  EXPECT_TRUE(m.IsCached(t1[0]));
  EXPECT_TRUE(m.IsCached(t1[1]));
  EXPECT_FALSE(m.IsCached(t1[2]));  // partial
  // Same first 8 tokens, different tail.
  const auto prompt2 = Concat(Range(100, 8), Range(500, 5));
  EXPECT_EQ(Match(m, 2, prompt2, salt), 8);
  EXPECT_INVARIANTS(m);
  ASSERT_EQ(m.BlockTable(2).size(), 2u);
  EXPECT_EQ(m.BlockTable(2)[0], t1[0]);
  EXPECT_EQ(m.BlockTable(2)[1], t1[1]);
  EXPECT_EQ(m.RefCount(t1[0]), 2);
  EXPECT_EQ(Needed(m, 2, 13), 2);
  ASSERT_TRUE(Allocate(m, 2, 13));
  EXPECT_INVARIANTS(m);
  // Different salt: no hit.
  EXPECT_EQ(Match(m, 3, prompt, Salt("other tenant")), 0);
  EXPECT_TRUE(m.BlockTable(3).empty());
  // Different first block: the chain breaks at once even though block 2 matches.
  auto prompt4 = prompt;
  prompt4[0] = 7;
  EXPECT_EQ(Match(m, 4, prompt4, salt), 0);
  EXPECT_INVARIANTS(m);
  // Counters in tokens: queries = all prompt tokens, hits = reused tokens.
  KvStats st = m.Stats();
  EXPECT_EQ(st.prefix_query_tokens, 10 + 13 + 10 + 10);
  EXPECT_EQ(st.prefix_hit_tokens, 8);
}

TEST(KvManagerTest, AlwaysComputesAtLeastOneToken) {
  KvManager m = MakeManager(16);
  const auto salt = Salt("s");
  const auto prompt = Range(1, 12);  // exactly 3 blocks
  Prefill(&m, 1, prompt, salt);
  EXPECT_EQ(PlannedHit(m, prompt, salt).tokens, 8);
  // Full block-aligned hit: the last block is recomputed so the last token yields logits.
  EXPECT_EQ(Match(m, 2, prompt, salt), 8);
  EXPECT_EQ(m.BlockTable(2).size(), 2u);
  // One more token: all 3 blocks reused.
  EXPECT_EQ(Match(m, 3, Concat(prompt, {42}), salt), 12);
  // Shorter prompts.
  EXPECT_EQ(Match(m, 4, Range(1, 5), salt), 4);
  EXPECT_EQ(Match(m, 5, Range(1, 4), salt), 0);
  EXPECT_EQ(Match(m, 6, Range(1, 1), salt), 0);
  EXPECT_EQ(Match(m, 7, {}, salt), 0);
  EXPECT_TRUE(m.Has(7));
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, PartialHitStopsAtFirstMiss) {
  KvManager m = MakeManager(16);
  const auto salt = Salt("s");
  Prefill(&m, 1, Range(0, 16), salt);  // 4 cached blocks
  auto prompt = Range(0, 20);
  prompt[9] = -5;  // third block differs
  EXPECT_EQ(Match(m, 2, prompt, salt), 8);
  ASSERT_TRUE(Allocate(m, 2, 20));
  m.CommitComputed(2, prompt, 20, salt);
  EXPECT_INVARIANTS(m);
  // Seq 2's blocks 2..4 are new and registered; block 3 of seq 2 has the same tokens as block 3
  // of seq 1 but a different parent, so it is a different cache entry.
  const auto& t2 = m.BlockTable(2);
  const auto& t1 = m.BlockTable(1);
  EXPECT_NE(t2[3], t1[3]);
  EXPECT_TRUE(m.IsCached(t2[3]));
  EXPECT_TRUE(m.IsCached(t1[3]));
}

TEST(KvManagerTest, FreedCachedBlocksAreReusedAndRevived) {
  KvManager m = MakeManager(8);
  const auto salt = Salt("s");
  const auto prompt = Range(0, 9);
  Prefill(&m, 1, prompt, salt);
  const auto t1 = m.BlockTable(1);
  m.Free(1);
  EXPECT_INVARIANTS(m);
  KvStats st = m.Stats();
  EXPECT_EQ(st.cached_blocks, 2);  // the two full blocks stay evictable
  EXPECT_EQ(st.used_blocks, 0);
  EXPECT_EQ(m.NumFreeBlocks(), 8);
  auto probe = PlannedHit(m, prompt, salt);
  EXPECT_EQ(probe.tokens, 8);
  EXPECT_EQ(probe.evictable_blocks, 2);
  EXPECT_EQ(Match(m, 2, prompt, salt), 8);
  EXPECT_INVARIANTS(m);
  EXPECT_EQ(m.BlockTable(2)[0], t1[0]);
  EXPECT_EQ(m.RefCount(t1[0]), 1);  // revived
  EXPECT_EQ(m.Stats().cached_blocks, 0);
  EXPECT_EQ(m.NumFreeBlocks(), 6);
  EXPECT_EQ(PlannedHit(m, prompt, salt).evictable_blocks, 0);
}

TEST(KvManagerTest, EvictsOldestReleasedFirstDeepestFirstOnTies) {
  KvManager m = MakeManager(6);
  const auto salt = Salt("s");
  // Seq A: 3 full blocks (+1 token so all 3 get committed and hit later).
  const auto a = Range(0, 12);
  const auto b = Range(1000, 8);
  Prefill(&m, 1, a, salt);
  Prefill(&m, 2, b, salt);
  const auto ta = m.BlockTable(1);
  const auto tb = m.BlockTable(2);
  m.Free(1);  // released first: a0 a1 a2 at the same time
  m.Free(2);  // then b0 b1
  EXPECT_INVARIANTS(m);
  EXPECT_EQ(m.Stats().cached_blocks, 5);
  // Take blocks one at a time with fresh sequences and watch which cache entries disappear.
  std::vector<int32_t> taken;
  for (SeqId s = 10; s < 16; ++s) {
    ASSERT_TRUE(Allocate(m, s, 1));
    taken.push_back(m.BlockTable(s)[0]);
    EXPECT_INVARIANTS(m);
  }
  EXPECT_FALSE(Allocate(m, 16, 1));
  // First the one never-cached free block, then A deepest-first, then B deepest-first.
  ASSERT_EQ(taken.size(), 6u);
  const std::vector<int32_t> want_evicted = {ta[2], ta[1], ta[0], tb[1], tb[0]};
  EXPECT_EQ(std::vector<int32_t>(taken.begin() + 1, taken.end()), want_evicted);
  EXPECT_EQ(m.Stats().cached_blocks, 0);
  EXPECT_EQ(m.Stats().evicted_blocks, 5);
  for (SeqId s = 10; s < 16; ++s) m.Free(s);
  EXPECT_EQ(PlannedHit(m, Concat(a, {1}), salt).tokens, 0);  // evicted entries are gone
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, HitRefreshesRecency) {
  KvManager m = MakeManager(4, 4);
  const auto salt = Salt("s");
  const auto a = Range(0, 5);    // 1 cached block
  const auto b = Range(100, 5);  // 1 cached block
  Prefill(&m, 1, a, salt);
  m.Free(1);
  Prefill(&m, 2, b, salt);
  m.Free(2);
  // Reuse A again: it is revived and later released after B, so B is now the LRU.
  EXPECT_EQ(Prefill(&m, 3, a, salt), 4);
  m.Free(3);
  EXPECT_INVARIANTS(m);
  // 2 never-cached free blocks + 2 evictable. Take 3 blocks: B's goes first.
  ASSERT_TRUE(Allocate(m, 9, 12));
  EXPECT_EQ(PlannedHit(m, b, salt).tokens, 0);
  EXPECT_EQ(PlannedHit(m, a, salt).tokens, 4);
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, DuplicateContentKeepsExistingMapping) {
  KvManager m = MakeManager(8);
  const auto salt = Salt("s");
  const auto prompt = Range(0, 9);
  // Both sequences compute the same prompt without sharing (no hit: seq 2 matched before seq 1
  // committed).
  EXPECT_EQ(Match(m, 1, prompt, salt), 0);
  EXPECT_EQ(Match(m, 2, prompt, salt), 0);
  ASSERT_TRUE(Allocate(m, 1, 9));
  ASSERT_TRUE(Allocate(m, 2, 9));
  m.CommitComputed(1, prompt, 9, salt);
  m.CommitComputed(2, prompt, 9, salt);
  EXPECT_INVARIANTS(m);
  const auto t1 = m.BlockTable(1);
  const auto t2 = m.BlockTable(2);
  EXPECT_TRUE(m.IsCached(t1[0]));
  EXPECT_FALSE(m.IsCached(t2[0]));
  m.Free(2);  // its duplicates go back to the free list, not the evictable set
  EXPECT_EQ(m.Stats().cached_blocks, 0);
  m.Free(1);
  EXPECT_EQ(m.Stats().cached_blocks, 2);
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, CommitIsIncremental) {
  KvManager m = MakeManager(8);
  const auto salt = Salt("s");
  auto tokens = Range(0, 3);
  ASSERT_TRUE(Allocate(m, 1, 3));
  m.CommitComputed(1, tokens, 3, salt);
  EXPECT_FALSE(m.IsCached(m.BlockTable(1)[0]));
  // Decode token by token; the block registers when its 4th token's KV is written.
  tokens.push_back(3);
  ASSERT_TRUE(Allocate(m, 1, 4));
  m.CommitComputed(1, tokens, 4, salt);
  EXPECT_TRUE(m.IsCached(m.BlockTable(1)[0]));
  for (int32_t t = 4; t < 9; ++t) {
    tokens.push_back(t);
    ASSERT_TRUE(Allocate(m, 1, static_cast<int>(tokens.size())));
    // The newest token is sampled but its KV not yet computed.
    m.CommitComputed(1, tokens, static_cast<int>(tokens.size()) - 1, salt);
    EXPECT_INVARIANTS(m);
  }
  EXPECT_TRUE(m.IsCached(m.BlockTable(1)[1]));  // positions 4..7 computed
  EXPECT_FALSE(m.IsCached(m.BlockTable(1)[2]));
  // The registered hashes are the chained ones of the whole token list.
  EXPECT_EQ(PlannedHit(m, Range(0, 9), salt).tokens, 8);
}

TEST(KvManagerTest, PrefixCacheDisabled) {
  KvManager m = MakeManager(8, 4, /*prefix=*/false);
  const auto salt = Salt("s");
  const auto prompt = Range(0, 9);
  EXPECT_EQ(Prefill(&m, 1, prompt, salt), 0);
  m.Free(1);
  EXPECT_EQ(m.Stats().cached_blocks, 0);
  EXPECT_EQ(Prefill(&m, 2, prompt, salt), 0);
  EXPECT_EQ(m.Stats().prefix_query_tokens, 0);
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, ForkSharesAndCopyOnWrite) {
  KvManager m = MakeManager(8);
  const auto salt = Salt("s");
  const auto prompt = Range(0, 6);  // 1 full + 1 partial block
  Prefill(&m, 1, prompt, salt);
  ASSERT_TRUE(m.Fork(1, 2));
  EXPECT_FALSE(m.Fork(1, 2));
  EXPECT_FALSE(m.Fork(77, 3));
  EXPECT_INVARIANTS(m);
  const auto t1 = m.BlockTable(1);
  EXPECT_EQ(m.BlockTable(2), t1);
  EXPECT_EQ(m.RefCount(t1[0]), 2);
  EXPECT_EQ(m.RefCount(t1[1]), 2);
  EXPECT_EQ(m.Stats().used_blocks, 2);
  // Child writes position 6 (partial block 1): copy-on-write.
  EXPECT_TRUE(PlansACopy(m, 2, 6));
  CopyOp op{0, 0};
  ASSERT_TRUE(PrepareWrite(m, 2, 6, &op));
  EXPECT_EQ(op.src, t1[1]);
  EXPECT_NE(op.dst, t1[1]);
  EXPECT_EQ(m.BlockTable(2)[1], op.dst);
  EXPECT_EQ(m.BlockTable(2)[0], t1[0]);  // full block still shared
  EXPECT_EQ(m.RefCount(t1[1]), 1);
  EXPECT_EQ(m.RefCount(op.dst), 1);
  EXPECT_INVARIANTS(m);
  // Parent now owns its block alone: no copy.
  EXPECT_FALSE(PlansACopy(m, 1, 6));
  ASSERT_TRUE(PrepareWrite(m, 1, 6, &op));
  EXPECT_EQ(op.src, -1);
  EXPECT_EQ(op.dst, -1);
  EXPECT_EQ(m.BlockTable(1), t1);
  // Out-of-table positions are refused.
  EXPECT_FALSE(PrepareWrite(m, 1, 8, &op));
  EXPECT_FALSE(PrepareWrite(m, 55, 0, &op));
  // Both continue independently and commit different second blocks.
  auto p1 = Concat(prompt, {10, 11});
  auto p2 = Concat(prompt, {20, 21});
  m.CommitComputed(1, p1, 8, salt);
  m.CommitComputed(2, p2, 8, salt);
  EXPECT_INVARIANTS(m);
  EXPECT_TRUE(m.IsCached(m.BlockTable(1)[1]));
  EXPECT_TRUE(m.IsCached(m.BlockTable(2)[1]));
  m.Free(1);
  EXPECT_EQ(m.RefCount(t1[0]), 1);
  m.Free(2);
  EXPECT_EQ(m.NumFreeBlocks(), 8);
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, CopyOnWriteWithoutRoomChangesNothing) {
  KvManager m = MakeManager(2);
  ASSERT_TRUE(Allocate(m, 1, 6));  // both blocks
  ASSERT_TRUE(m.Fork(1, 2));
  const auto t = m.BlockTable(2);
  CopyOp op{5, 5};
  EXPECT_FALSE(PrepareWrite(m, 2, 5, &op));
  EXPECT_EQ(m.BlockTable(2), t);
  EXPECT_EQ(m.RefCount(t[1]), 2);
  EXPECT_INVARIANTS(m);
}

// One plan writing positions [start, start + count): a PrepareWrite per block touched.
bool PlanWrites(KvManager& m, SeqId seq, int start, int count, std::vector<CopyOp>* ops) {
  KvPlan plan = m.Plan();
  for (int pos = start; pos < start + count; pos = (pos / m.block_size() + 1) * m.block_size())
    plan.PrepareWrite(seq, pos);
  return m.Apply(plan, ops);
}

TEST(KvManagerTest, PlanOfSeveralWritesIsAllOrNothing) {
  KvManager m = MakeManager(8);
  ASSERT_TRUE(Allocate(m, 1, 12));  // 3 blocks, none computed
  ASSERT_TRUE(m.Fork(1, 2));        // all 3 shared
  const auto t = m.BlockTable(1);
  ASSERT_TRUE(Allocate(m, 3, 16));  // leave 1 free block
  ASSERT_EQ(m.NumFreeBlocks(), 1);
  std::vector<CopyOp> ops;
  EXPECT_FALSE(PlanWrites(m, 2, 2, 4, &ops));  // blocks 0 and 1: 2 copies, 1 free
  EXPECT_TRUE(ops.empty());
  EXPECT_EQ(m.BlockTable(2), t);
  EXPECT_FALSE(PlanWrites(m, 2, 10, 3, &ops));  // past the table
  EXPECT_INVARIANTS(m);
  m.Free(3);
  ASSERT_TRUE(PlanWrites(m, 2, 2, 4, &ops));  // positions 2..5: blocks 0 and 1
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].src, t[0]);
  EXPECT_EQ(ops[1].src, t[1]);
  EXPECT_EQ(m.BlockTable(2)[0], ops[0].dst);
  EXPECT_EQ(m.BlockTable(2)[1], ops[1].dst);
  EXPECT_EQ(m.BlockTable(2)[2], t[2]);  // untouched, still shared
  EXPECT_EQ(m.RefCount(t[2]), 2);
  ops.clear();
  EXPECT_TRUE(PlanWrites(m, 2, 0, 8, &ops));  // already exclusive: nothing to copy
  EXPECT_TRUE(ops.empty());
  EXPECT_TRUE(PlanWrites(m, 2, 0, 0, &ops));
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, RewritingACachedBlockUnregistersIt) {
  KvManager m = MakeManager(4);
  const auto salt = Salt("s");
  Prefill(&m, 1, Range(0, 5), salt);
  const int32_t b0 = m.BlockTable(1)[0];
  ASSERT_TRUE(m.IsCached(b0));
  CopyOp op;
  ASSERT_TRUE(PrepareWrite(m, 1, 2, &op));  // caller slip: rewriting a full, registered block
  EXPECT_EQ(op.src, -1);
  EXPECT_FALSE(m.IsCached(b0));
  EXPECT_EQ(PlannedHit(m, Range(0, 5), salt).tokens, 0);
  EXPECT_INVARIANTS(m);
  m.CommitComputed(1, Range(0, 5), 5, salt);  // re-registers after recompute
  EXPECT_TRUE(m.IsCached(b0));
  EXPECT_INVARIANTS(m);
}

// Random operations checked against an independent model: the model keeps its own copy of every
// block table (updated only from what the API reports: new blocks, copy-on-write ops) and of what
// each physical block holds (the token prefix its KV encodes, and the salt). After every op:
// tables agree, refcounts equal the model's counts, newly handed-out blocks were unreferenced,
// every computed block of a live sequence still holds that sequence's prefix (nothing shared was
// overwritten, nothing referenced was evicted), and every prefix hit returned blocks whose
// content is exactly the requested prefix.
TEST(KvManagerTest, RandomizedStress) {
  constexpr int kBlocks = 24;
  constexpr int kBs = 4;
  KvManager m = MakeManager(kBlocks, kBs);
  std::mt19937 rng(12345);
  const std::vector<std::vector<uint8_t>> salts = {Salt("a"), Salt("b")};
  struct SeqModel {
    std::vector<int32_t> tokens;  // tokens so far
    int computed = 0;             // positions with KV
    int salt = 0;
    std::vector<int32_t> table;  // the model's copy
  };
  struct Content {
    std::vector<int32_t> prefix;  // tokens [0, end of what this block encodes)
    int salt = -1;
  };
  std::vector<Content> content(kBlocks);
  std::map<SeqId, SeqModel> live;
  SeqId next_id = 1;
  auto model_refs = [&]() {
    std::vector<int> refs(kBlocks, 0);
    for (const auto& [id, s] : live) {
      for (int32_t b : s.table) ++refs[static_cast<size_t>(b)];
    }
    return refs;
  };
  // Appends the blocks AllocateSlots added; they must have been unreferenced.
  auto adopt_new_blocks = [&](SeqId id, SeqModel* s, const std::vector<int>& refs_before) {
    const auto& table = m.BlockTable(id);
    ASSERT_GE(table.size(), s->table.size());
    ASSERT_TRUE(std::equal(s->table.begin(), s->table.end(), table.begin()));
    for (size_t i = s->table.size(); i < table.size(); ++i) {
      ASSERT_EQ(refs_before[static_cast<size_t>(table[i])], 0) << "handed out a used block";
      s->table.push_back(table[i]);
    }
  };
  // Prompts built from few block patterns so that hits happen, and so that identical blocks
  // follow different parents (the chained hash must tell them apart).
  auto random_prompt = [&]() {
    std::vector<int32_t> p;
    const int blocks = static_cast<int>(rng() % 4);
    for (int b = 0; b < blocks; ++b) {
      const int pattern = b == 0 ? static_cast<int>(rng() % 3) : static_cast<int>(rng() % 2);
      for (int i = 0; i < kBs; ++i) p.push_back(pattern * 100 + i);
    }
    const int extra = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < extra; ++i) p.push_back(static_cast<int32_t>(rng() % 5));
    return p;
  };
  int64_t queries = 0, hits = 0;
  // Coverage: the run must exercise every path at least once.
  int copies = 0, failed_allocs = 0, failed_writes = 0, forks = 0;
  for (int step = 0; step < 5000; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const int op = static_cast<int>(rng() % 10);
    if (op <= 2 || live.empty()) {  // new sequence
      SeqModel s;
      s.tokens = random_prompt();
      s.salt = static_cast<int>(rng() % 2);
      const SeqId id = next_id++;
      const int free_before = m.NumFreeBlocks();
      const auto probe = PlannedHit(m, s.tokens, salts[s.salt]);
      const int hit = Match(m, id, s.tokens, salts[s.salt]);
      ASSERT_EQ(hit, probe.tokens);
      ASSERT_EQ(hit % kBs, 0);
      ASSERT_LT(hit, static_cast<int>(s.tokens.size()));
      ASSERT_EQ(m.NumFreeBlocks(), free_before - probe.evictable_blocks);
      s.table = m.BlockTable(id);
      ASSERT_EQ(static_cast<int>(s.table.size()) * kBs, hit);
      for (size_t i = 0; i < s.table.size(); ++i) {
        const Content& c = content[static_cast<size_t>(s.table[i])];
        ASSERT_EQ(c.salt, s.salt);
        ASSERT_EQ(c.prefix,
                  std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + (i + 1) * kBs));
      }
      queries += static_cast<int64_t>(s.tokens.size());
      hits += hit;
      s.computed = hit;
      const auto refs_before = model_refs();
      const int need = Needed(m, id, static_cast<int>(s.tokens.size()));
      const int free_now = m.NumFreeBlocks();
      const bool ok = Allocate(m, id, static_cast<int>(s.tokens.size()));
      ASSERT_EQ(ok, need <= free_now);
      if (!ok) {
        ++failed_allocs;
        ASSERT_EQ(m.NumFreeBlocks(), free_now);
        ASSERT_EQ(m.BlockTable(id), s.table);
        m.Free(id);
      } else {
        ASSERT_EQ(m.NumFreeBlocks(), free_now - need);
        adopt_new_blocks(id, &s, refs_before);
        live[id] = s;
      }
    } else if (op <= 5) {  // compute the pending tokens, or sample one more
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      const SeqId id = it->first;
      SeqModel& s = it->second;
      const int n = static_cast<int>(s.tokens.size());
      if (s.computed < n) {
        // Every block the write touches must be exclusive (a fork may share several).
        bool ok = true;
        for (int pos = s.computed; pos < n && ok; pos = (pos / kBs + 1) * kBs) {
          const auto refs = model_refs();
          const int32_t old = s.table[static_cast<size_t>(pos / kBs)];
          const bool shared = refs[static_cast<size_t>(old)] > 1;
          ASSERT_EQ(PlansACopy(m, id, pos), shared);
          const int free_now = m.NumFreeBlocks();
          CopyOp cow;
          ok = PrepareWrite(m, id, pos, &cow);
          if (!ok) {
            ++failed_writes;
            ASSERT_TRUE(shared);
            ASSERT_EQ(free_now, 0);
          } else if (shared) {
            ++copies;
            ASSERT_EQ(cow.src, old);
            ASSERT_EQ(refs[static_cast<size_t>(cow.dst)], 0);
            content[static_cast<size_t>(cow.dst)] = content[static_cast<size_t>(old)];
            s.table[static_cast<size_t>(pos / kBs)] = cow.dst;
          } else {
            ASSERT_EQ(cow.src, -1);
            ASSERT_EQ(cow.dst, -1);
          }
        }
        if (ok) {
          // "Run the model": write KV of positions [computed, n).
          for (int pos = s.computed; pos < n; ++pos) {
            Content& c = content[static_cast<size_t>(s.table[static_cast<size_t>(pos / kBs)])];
            c.prefix.assign(s.tokens.begin(), s.tokens.begin() + pos + 1);
            c.salt = s.salt;
          }
          s.computed = n;
          m.CommitComputed(id, s.tokens, s.computed, salts[s.salt]);
        }
      } else {
        s.tokens.push_back(static_cast<int32_t>(rng() % 5));
        const auto refs_before = model_refs();
        if (Allocate(m, id, n + 1)) {
          adopt_new_blocks(id, &s, refs_before);
        } else {
          s.tokens.pop_back();  // no room: stay as is
        }
      }
    } else if (op <= 6) {  // fork
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      const SeqId child = next_id++;
      ASSERT_TRUE(m.Fork(it->first, child));
      ++forks;
      live[child] = it->second;
    } else {  // free
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      m.Free(it->first);
      live.erase(it);
    }
    if (HasFatalFailure()) return;
    Status st = m.CheckInvariants();
    ASSERT_TRUE(st.ok()) << st.ToString();
    const auto refs = model_refs();
    int used = 0;
    for (int b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(m.RefCount(b), refs[static_cast<size_t>(b)]) << "block " << b;
      used += refs[static_cast<size_t>(b)] > 0;
    }
    for (const auto& [id, s] : live) {
      ASSERT_EQ(m.BlockTable(id), s.table) << "seq " << id;
      ASSERT_GE(static_cast<int>(s.table.size()) * kBs, static_cast<int>(s.tokens.size()));
      for (int i = 0; i < s.computed / kBs; ++i) {
        const Content& c = content[static_cast<size_t>(s.table[static_cast<size_t>(i)])];
        ASSERT_EQ(c.salt, s.salt);
        ASSERT_EQ(c.prefix,
                  std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + (i + 1) * kBs))
            << "seq " << id << " block " << i << " was overwritten";
      }
    }
    ASSERT_EQ(m.Stats().used_blocks, used);
    ASSERT_EQ(m.NumSeqs(), static_cast<int>(live.size()));
    ASSERT_EQ(m.Stats().prefix_query_tokens, queries);
    ASSERT_EQ(m.Stats().prefix_hit_tokens, hits);
  }
  const KvStats final_stats = m.Stats();
  EXPECT_GT(hits, 0);
  EXPECT_GT(copies, 0);
  EXPECT_GT(failed_allocs, 0);
  EXPECT_GT(failed_writes, 0);
  EXPECT_GT(forks, 0);
  EXPECT_GT(final_stats.evicted_blocks, 0);
  std::printf(
      "stress: %d copies, %d failed allocs, %d failed writes, %d forks, %lld evictions, "
      "%lld/%lld hit tokens\n",
      copies, failed_allocs, failed_writes, forks,
      static_cast<long long>(final_stats.evicted_blocks), static_cast<long long>(hits),
      static_cast<long long>(queries));
  for (const auto& [id, s] : live) m.Free(id);
  EXPECT_EQ(m.NumFreeBlocks(), kBlocks);
  EXPECT_EQ(m.Stats().used_blocks, 0);
  EXPECT_INVARIANTS(m);
}

// ---- tiered-cache hooks ----

struct RecordingListener : KvManager::Listener {
  struct Event {
    int32_t block;
    BlockHash hash;
    uint32_t tag;
  };
  std::vector<Event> evicted, registered;
  void OnEvict(int32_t block, const BlockHash& hash, uint32_t tag) override {
    evicted.push_back({block, hash, tag});
  }
  void OnRegister(int32_t block, const BlockHash& hash, uint32_t tag) override {
    registered.push_back({block, hash, tag});
  }
};

TEST(KvManagerTierTest, ListenerHearsRegistrationsAndEvictionsWithTags) {
  KvManager m = MakeManager(2, 4);
  RecordingListener l;
  m.SetListener(&l);
  const auto salt = Salt("s");
  const auto prompt = Range(10, 8);  // two full blocks
  ASSERT_EQ(Match(m, 1, prompt, salt, /*tag=*/7), 0);
  ASSERT_TRUE(Allocate(m, 1, 8));
  m.CommitComputed(1, prompt, 8, salt);
  const auto hashes = cachekey::ComputeBlockHashes(prompt, 4, salt);
  ASSERT_EQ(l.registered.size(), 2u);
  EXPECT_EQ(l.registered[0].hash, hashes[0]);
  EXPECT_EQ(l.registered[1].hash, hashes[1]);
  EXPECT_EQ(l.registered[0].tag, 7u);
  EXPECT_TRUE(l.evicted.empty());
  m.Free(1);
  // A different prompt needs both blocks: the cached ones are evicted, deepest first, content
  // still reported with the hash and tag that registered it.
  ASSERT_EQ(Match(m, 2, Range(100, 8), salt), 0);
  ASSERT_TRUE(Allocate(m, 2, 8));
  ASSERT_EQ(l.evicted.size(), 2u);
  EXPECT_EQ(l.evicted[0].hash, hashes[1]);
  EXPECT_EQ(l.evicted[1].hash, hashes[0]);
  EXPECT_EQ(l.evicted[0].tag, 7u);
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTierTest, AdoptedBlocksAreFilledRegisteredAndHitLater) {
  KvManager m = MakeManager(8, 4);
  const auto salt = Salt("s");
  const auto prompt = Range(1, 13);  // three full blocks + 1 token
  const auto hashes = cachekey::ComputeBlockHashes(prompt, 4, salt);
  ASSERT_EQ(hashes.size(), 3u);
  ASSERT_EQ(Match(m, 1, prompt, salt), 0);
  std::vector<std::pair<size_t, int32_t>> fills;
  const int n = AdoptBlocks(m, 1, std::span(hashes).first(3),
                            [&](size_t i, int32_t b) { fills.emplace_back(i, b); });
  ASSERT_EQ(n, 3);
  ASSERT_EQ(fills.size(), 3u);
  EXPECT_EQ(m.BlockTable(1).size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(fills[i].first, i);
    EXPECT_EQ(m.BlockTable(1)[i], fills[i].second);
    EXPECT_TRUE(m.IsCached(fills[i].second));
  }
  EXPECT_INVARIANTS(m);
  // The rest of the prompt continues after the adopted blocks; commit does not re-register them.
  ASSERT_TRUE(Allocate(m, 1, 13));
  m.CommitComputed(1, prompt, 13, salt);
  EXPECT_INVARIANTS(m);
  // Another request with the same prompt hits all three (at most (13-1)/4 = 3 blocks).
  EXPECT_EQ(Match(m, 2, prompt, salt), 12);
  EXPECT_EQ(m.BlockTable(2)[2], fills[2].second);
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTierTest, AdoptAttachesAlreadyCachedHashesWithoutFillAndStopsWhenFull) {
  KvManager m = MakeManager(3, 4);
  const auto salt = Salt("s");
  const auto prompt = Range(1, 17);
  const auto hashes = cachekey::ComputeBlockHashes(prompt, 4, salt);  // 4 full blocks
  // Seq 1 computes block 0 only.
  ASSERT_EQ(Prefill(&m, 1, std::vector<int32_t>(prompt.begin(), prompt.begin() + 4), salt), 0);
  const int32_t first = m.BlockTable(1)[0];
  // Seq 2 matches nothing (needs >= 1 token left: prompt of 4 → 0 blocks), then adopts all 4
  // hashes: block 0 is already cached (attached, no fill), two more fit, the pool is then full.
  ASSERT_EQ(Match(m, 2, std::vector<int32_t>(prompt.begin(), prompt.begin() + 4), salt), 0);
  int fill_calls = 0;
  const int n = AdoptBlocks(m, 2, hashes, [&](size_t i, int32_t) {
    EXPECT_GE(i, 1u);
    ++fill_calls;
  });
  EXPECT_EQ(n, 3);
  EXPECT_EQ(fill_calls, 2);
  EXPECT_EQ(m.BlockTable(2)[0], first);
  EXPECT_EQ(m.RefCount(first), 2);
  EXPECT_EQ(m.NumFreeBlocks(), 0);
  EXPECT_INVARIANTS(m);
  m.Free(2);
  m.Free(1);
  EXPECT_INVARIANTS(m);
  int cached = 0;
  m.ForEachCached([&](int32_t, const BlockHash&, uint32_t) { ++cached; });
  EXPECT_EQ(cached, 3);
}

// ---- block events ----

// The pool hashes a KvEventLog holds, read as a gateway would (a reset snapshot).
std::set<BlockHash> LoggedPool(const KvEventLog& log) {
  KvEventPage p = log.Read(0, 1);
  EXPECT_TRUE(p.reset);
  std::set<BlockHash> out;
  for (const KvEventGroup& g : p.events)
    if (g.tier == protocol::KvTier::kPool) out.insert(g.hashes.begin(), g.hashes.end());
  return out;
}

std::set<BlockHash> CachedHashes(const KvManager& m) {
  std::set<BlockHash> out;
  m.ForEachCached([&](int32_t, const BlockHash& h, uint32_t) { out.insert(h); });
  return out;
}

TEST(KvManagerEventsTest, EventLogMirrorsThePrefixCache) {
  KvManager m = MakeManager(4, 4);
  KvEventLog log;
  m.SetEventLog(&log);
  const auto salt = Salt("s");
  const uint64_t c0 = log.head();
  const auto prompt = Range(10, 9);  // two full blocks + 1
  Prefill(&m, 1, prompt, salt);
  const auto hashes = cachekey::ComputeBlockHashes(prompt, 4, salt);
  KvEventPage p = log.Read(c0, 100);
  ASSERT_FALSE(p.reset);
  ASSERT_EQ(p.events.size(), 1u);
  EXPECT_EQ(p.events[0].op, KvEventOp::kAdd);
  EXPECT_EQ(p.events[0].tier, protocol::KvTier::kPool);
  EXPECT_EQ(p.events[0].hashes, hashes);
  m.Free(1);  // evictable blocks stay cached: no event
  EXPECT_EQ(log.head(), p.cursor);
  // A different prompt needs every block: both cached ones are evicted (deepest first).
  Prefill(&m, 2, Range(100, 16), salt);
  KvEventPage q = log.Read(p.cursor, 100);
  ASSERT_GE(q.events.size(), 2u);
  EXPECT_EQ(q.events[0].op, KvEventOp::kRemove);
  EXPECT_EQ(q.events[0].hashes, (std::vector<BlockHash>{hashes[1], hashes[0]}));
  EXPECT_EQ(LoggedPool(log), CachedHashes(m));
  // Adopted blocks (loaded from a tier) are registered: add events too.
  m.Free(2);
  const auto other = cachekey::ComputeBlockHashes(Range(500, 8), 4, salt);
  ASSERT_EQ(Match(m, 3, Range(500, 3), salt), 0);
  ASSERT_EQ(AdoptBlocks(m, 3, other, [](size_t, int32_t) {}), 2);
  EXPECT_EQ(LoggedPool(log), CachedHashes(m));
  EXPECT_EQ(LoggedPool(log).count(other[1]), 1u);
  // Rewriting a registered block (a caller slip) un-registers it: a remove.
  CopyOp op;
  ASSERT_TRUE(PrepareWrite(m, 3, 5, &op));
  EXPECT_EQ(LoggedPool(log).count(other[1]), 0u);
  EXPECT_EQ(LoggedPool(log), CachedHashes(m));
  m.SetEventLog(nullptr);
  m.Free(3);
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerEventsTest, RandomWorkloadKeepsTheLogEqualToTheCache) {
  KvManager m = MakeManager(16, 4);
  KvEventLog log({.capacity = 32});  // small ring: LoggedPool reads snapshots, never the ring
  m.SetEventLog(&log);
  std::mt19937 rng(3);
  const auto salt = Salt("r");
  std::vector<SeqId> live;
  for (SeqId seq = 1; seq < 400; ++seq) {
    if (live.size() >= 3 || (!live.empty() && rng() % 3 == 0)) {
      const size_t i = rng() % live.size();
      m.Free(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    // Prompts share prefixes: a few families of up to 4 blocks.
    std::vector<int32_t> prompt =
        Range(static_cast<int32_t>(1000 * (rng() % 4)), static_cast<int>(4 + rng() % 14));
    if (Needed(m, seq, static_cast<int>(prompt.size())) > m.NumFreeBlocks()) continue;
    Prefill(&m, seq, prompt, salt);
    live.push_back(seq);
    ASSERT_EQ(LoggedPool(log), CachedHashes(m)) << "after seq " << seq;
  }
  EXPECT_INVARIANTS(m);
}

// ---- plan, then apply ----

TEST(KvPlanTest, PlanningChangesNothingUntilApplied) {
  KvManager m = MakeManager(8);
  const auto salt = Salt("s");
  Prefill(&m, 1, Range(0, 9), salt);
  m.Free(1);  // two cached, evictable blocks
  const KvStats before = m.Stats();
  KvPlan plan = m.Plan();
  EXPECT_EQ(plan.MatchPrefix(2, Range(0, 13), salt, /*tag=*/3), 8);
  plan.Allocate(2, 13);
  EXPECT_TRUE(plan.fits());
  EXPECT_EQ(plan.evictable_hits(), 2);
  EXPECT_EQ(plan.blocks_needed(), 2 + 2);  // two revived hits + two new blocks
  // Nothing happened yet: no sequence, no counted query, same free blocks.
  EXPECT_FALSE(m.Has(2));
  EXPECT_EQ(m.NumFreeBlocks(), 8);
  EXPECT_EQ(m.Stats().prefix_query_tokens, before.prefix_query_tokens);
  EXPECT_EQ(m.Stats().prefix_hit_tokens, before.prefix_hit_tokens);
  ASSERT_TRUE(m.Apply(plan));
  EXPECT_EQ(m.BlockTable(2).size(), 4u);
  EXPECT_EQ(m.NumFreeBlocks(), 4);
  EXPECT_EQ(m.Stats().prefix_query_tokens, before.prefix_query_tokens + 13);
  EXPECT_EQ(m.Stats().prefix_hit_tokens, before.prefix_hit_tokens + 8);
  EXPECT_INVARIANTS(m);
  // Applying it twice is refused: the manager changed since it was planned.
  EXPECT_FALSE(m.Apply(plan));
  EXPECT_EQ(m.BlockTable(2).size(), 4u);
}

TEST(KvPlanTest, APlanThatDoesNotFitCountsNothingAndChangesNothing) {
  KvManager m = MakeManager(3);
  const auto salt = Salt("s");
  Prefill(&m, 1, Range(0, 5), salt);  // 2 blocks, one cached
  const KvStats before = m.Stats();
  KvPlan plan = m.Plan();
  EXPECT_EQ(plan.MatchPrefix(2, Range(0, 17), salt), 4);
  plan.Allocate(2, 17);  // 4 more blocks, 1 free
  EXPECT_FALSE(plan.fits());
  EXPECT_TRUE(plan.valid());
  EXPECT_FALSE(m.Apply(plan));
  EXPECT_FALSE(m.Has(2));
  EXPECT_EQ(m.RefCount(m.BlockTable(1)[0]), 1);
  EXPECT_EQ(m.Stats().prefix_query_tokens, before.prefix_query_tokens);
  EXPECT_EQ(m.Stats().prefix_hit_tokens, before.prefix_hit_tokens);
  EXPECT_INVARIANTS(m);
  // Room made (the caller preempts seq 1), planned again: it fits.
  m.Free(1);
  m.Plan(&plan);  // reuses the plan object
  EXPECT_EQ(plan.MatchPrefix(2, Range(0, 9), salt), 4);
  plan.Allocate(2, 9);
  EXPECT_TRUE(plan.fits());
  EXPECT_TRUE(m.Apply(plan));
  EXPECT_INVARIANTS(m);
}

TEST(KvPlanTest, StaleAndMisusedPlansAreRefused) {
  KvManager m = MakeManager(8);
  const auto salt = Salt("s");
  ASSERT_TRUE(Allocate(m, 1, 4));
  KvPlan stale = m.Plan();
  stale.Allocate(2, 4);
  m.Free(1);  // any change makes earlier plans stale
  EXPECT_FALSE(m.Apply(stale));
  EXPECT_FALSE(m.Has(2));
  // MatchPrefix after an op that takes blocks (it could evict a planned hit).
  KvPlan late = m.Plan();
  late.Allocate(3, 4);
  late.MatchPrefix(4, Range(0, 9), salt);
  EXPECT_FALSE(late.valid());
  EXPECT_FALSE(m.Apply(late));
  // MatchPrefix on a sequence that has blocks; writes outside the table.
  ASSERT_TRUE(Allocate(m, 5, 4));
  KvPlan again = m.Plan();
  again.MatchPrefix(5, Range(0, 9), salt);
  EXPECT_FALSE(again.valid());
  KvPlan outside = m.Plan();
  outside.PrepareWrite(5, 4);
  EXPECT_FALSE(outside.valid());
  // Adopting needs a fill function.
  Prefill(&m, 6, Range(100, 9), salt);
  const auto hashes = cachekey::ComputeBlockHashes(Range(200, 8), 4, salt);
  KvPlan adopt = m.Plan();
  adopt.MatchPrefix(7, Range(200, 9), salt);
  EXPECT_EQ(adopt.Adopt(7, hashes), 2);
  EXPECT_FALSE(m.Apply(adopt));  // no fill
  EXPECT_FALSE(m.Has(7));
  EXPECT_INVARIANTS(m);
}

TEST(KvPlanTest, JointPlanCountsASharedEvictableHitOnce) {
  KvManager m = MakeManager(4);
  const auto salt = Salt("s");
  Prefill(&m, 1, Range(0, 5), salt);
  m.Free(1);  // block 0 of the chain cached and evictable
  KvPlan plan = m.Plan();
  EXPECT_EQ(plan.MatchPrefix(2, Range(0, 6), salt), 4);
  EXPECT_EQ(plan.MatchPrefix(3, Range(0, 7), salt), 4);
  EXPECT_EQ(plan.blocks_needed(), 1);  // one block revived, shared by both
  plan.Allocate(2, 6);
  plan.Allocate(3, 7);
  EXPECT_EQ(plan.blocks_needed(), 3);
  ASSERT_TRUE(m.Apply(plan));
  EXPECT_EQ(m.BlockTable(2)[0], m.BlockTable(3)[0]);
  EXPECT_EQ(m.RefCount(m.BlockTable(2)[0]), 2);
  EXPECT_EQ(m.NumFreeBlocks(), 1);
  EXPECT_INVARIANTS(m);
}

TEST(KvPlanTest, ReleaseRangeFreesWholeBlocksOnly) {
  KvManager m = MakeManager(8);
  const auto salt = Salt("s");
  const auto tokens = Range(0, 14);  // 3 full blocks + 2 tokens
  Prefill(&m, 1, tokens, salt);
  const auto t = m.BlockTable(1);
  ASSERT_EQ(t.size(), 4u);
  KvPlan plan = m.Plan();
  plan.ReleaseRange(1, 2, 9);  // positions 2..8: only block 1 ([4, 8)) lies wholly inside
  EXPECT_EQ(plan.num_released(), 1);
  EXPECT_EQ(m.BlockTable(1), t);  // planned only
  ASSERT_TRUE(m.Apply(plan));
  EXPECT_EQ(m.BlockTable(1), (std::vector<int32_t>{t[0], kNoBlock, t[2], t[3]}));
  EXPECT_EQ(m.RefCount(t[1]), 0);
  EXPECT_TRUE(m.IsCached(t[1]));  // registered content stays in the prefix cache, evictable
  EXPECT_EQ(m.Stats().cached_blocks, 1);
  EXPECT_INVARIANTS(m);
  // Releasing [0, 8) now frees block 0 too; the hole is skipped.
  m.Plan(&plan);
  plan.ReleaseRange(1, 0, 8);
  EXPECT_EQ(plan.num_released(), 1);
  ASSERT_TRUE(m.Apply(plan));
  EXPECT_EQ(m.BlockTable(1)[0], kNoBlock);
  EXPECT_INVARIANTS(m);
  // The sequence goes on: writes and commits past the window still register chained hashes, so
  // another request with the same tokens hits the whole chain (released blocks included).
  auto longer = Concat(tokens, {50, 51, 52});
  ASSERT_TRUE(Allocate(m, 1, 17));
  CopyOp op;
  ASSERT_TRUE(PrepareWrite(m, 1, 14, &op));
  EXPECT_EQ(op.src, -1);
  m.CommitComputed(1, longer, 16, salt);
  EXPECT_EQ(PlannedHit(m, longer, salt).tokens, 16);
  // Writing a released position is refused; forks and Free skip the holes.
  KvPlan write = m.Plan();
  write.PrepareWrite(1, 5);
  EXPECT_FALSE(write.valid());
  ASSERT_TRUE(m.Fork(1, 2));
  EXPECT_EQ(m.BlockTable(2)[0], kNoBlock);
  EXPECT_INVARIANTS(m);
  m.Free(1);
  m.Free(2);
  EXPECT_EQ(m.NumFreeBlocks(), 8);
  EXPECT_INVARIANTS(m);
  // Unknown sequences and bad ranges make the plan invalid.
  m.Plan(&plan);
  plan.ReleaseRange(99, 0, 4);
  EXPECT_FALSE(plan.valid());
  m.Plan(&plan);
  plan.ReleaseRange(2, 8, 4);
  EXPECT_FALSE(plan.valid());
}

}  // namespace
}  // namespace strata::engine::kv
