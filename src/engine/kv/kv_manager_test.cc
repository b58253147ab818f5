#include "engine/kv/kv_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
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

#define EXPECT_INVARIANTS(m)                                     \
  do {                                                           \
    Status s_ = (m).CheckInvariants();                           \
    ASSERT_TRUE(s_.ok()) << s_.ToString();                       \
  } while (0)

KvManager MakeManager(int num_blocks, int block_size = 4, bool prefix = true) {
  KvManagerConfig c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.enable_prefix_cache = prefix;
  EXPECT_TRUE(c.Validate().ok());
  return KvManager(c);
}

// Runs a whole prompt through: match, allocate, commit. Returns the matched token count.
int Prefill(KvManager* m, SeqId seq, const std::vector<int32_t>& prompt,
            const std::vector<uint8_t>& salt) {
  const int hit = m->MatchPrefix(seq, prompt, salt);
  EXPECT_TRUE(m->AllocateSlots(seq, static_cast<int>(prompt.size())));
  m->CommitComputed(seq, prompt, static_cast<int>(prompt.size()), salt);
  return hit;
}

// ---- hashing ----

BlockHash FromHex(std::string_view hex) {
  BlockHash h{};
  for (size_t i = 0; i < 32; ++i) {
    auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    h[i] = static_cast<uint8_t>(nib(hex[2 * i]) * 16 + nib(hex[2 * i + 1]));
  }
  return h;
}

TEST(BlockHashTest, KnownAnswerMatchesDocumentedFormat) {
  // Expected values from coreutils sha256sum over the bytes documented in kv_manager.h:
  //  (head -c 32 /dev/zero; printf '\x03\0\0\0\0\0\0\0abc\x01\0\0\0\x02\0\0\0\xff\xff\xff\xff\0\x01\0\0')
  //    | sha256sum
  const std::vector<uint8_t> salt = Salt("abc");
  const std::vector<int32_t> tokens = {1, 2, -1, 256, 5, 6, 7, 8, 9};
  const auto hashes = ComputeBlockHashes(tokens, 4, salt);
  ASSERT_EQ(hashes.size(), 2u);  // the partial third block has no hash
  EXPECT_EQ(HashToHex(hashes[0]),
            "b428e5b655d4d8ab4fe64060d543abd3edbf33fd3811c2d18c82f537b8545091");
  // Second block: parent = the hash above, same salt, tokens 5 6 7 8.
  EXPECT_EQ(HashToHex(hashes[1]),
            "7f725a61df7c281731df9b5a4d1b7fecdacfd551b8648d0d6cffe25ac4192f05");
  // Empty salt, zero parent, tokens 5 6 7 8: 32 zero bytes, 8 zero bytes, then the tokens.
  const std::vector<int32_t> block = {5, 6, 7, 8};
  EXPECT_EQ(HashToHex(HashBlock(BlockHash{}, {}, block)),
            "87aecd27b6a72746c78671a1d842091c5122701965926dce15bcf3a0b230dfa0");
  EXPECT_EQ(FromHex(HashToHex(hashes[0])), hashes[0]);
}

TEST(BlockHashTest, ChainedAndSalted) {
  const auto salt = Salt("model-a");
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> b = {9, 9, 9, 9, 5, 6, 7, 8};
  const auto ha = ComputeBlockHashes(a, 4, salt);
  const auto hb = ComputeBlockHashes(b, 4, salt);
  ASSERT_EQ(ha.size(), 2u);
  ASSERT_EQ(hb.size(), 2u);
  EXPECT_NE(ha[1], hb[1]);  // same tokens, different parents
  EXPECT_EQ(ha[1], HashBlock(ha[0], salt, std::span(a).subspan(4, 4)));
  EXPECT_NE(ha[0], ComputeBlockHashes(a, 4, Salt("model-b"))[0]);
  EXPECT_EQ(ha, ComputeBlockHashes(a, 4, salt));  // deterministic
  EXPECT_TRUE(ComputeBlockHashes(a, 16, salt).empty());
  // Salt parts are length-prefixed, so moving a byte between parts changes the salt.
  EXPECT_NE(MakePrefixSalt({"ab", "c"}), MakePrefixSalt({"a", "bc"}));
  EXPECT_EQ(MakePrefixSalt({"ab"}).size(), 10u);
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
  EXPECT_EQ(m.BlocksNeeded(1, 9), 3);
  ASSERT_TRUE(m.AllocateSlots(1, 9));
  EXPECT_INVARIANTS(m);
  EXPECT_TRUE(m.Has(1));
  EXPECT_EQ(m.BlockTable(1).size(), 3u);
  EXPECT_EQ(m.NumFreeBlocks(), 5);
  EXPECT_EQ(m.BlocksNeeded(1, 12), 0);
  EXPECT_EQ(m.BlocksNeeded(1, 13), 1);
  ASSERT_TRUE(m.AllocateSlots(1, 12));  // no growth needed
  EXPECT_EQ(m.BlockTable(1).size(), 3u);
  ASSERT_TRUE(m.AllocateSlots(1, 13));
  EXPECT_EQ(m.BlockTable(1).size(), 4u);
  ASSERT_TRUE(m.AllocateSlots(2, 0));  // creates an empty table
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
  ASSERT_TRUE(m.AllocateSlots(1, 10));  // 3 blocks
  const auto table = m.BlockTable(1);
  EXPECT_FALSE(m.AllocateSlots(1, 17));  // needs 2 more, 1 free
  EXPECT_EQ(m.BlockTable(1), table);
  EXPECT_FALSE(m.AllocateSlots(2, 5));  // needs 2
  EXPECT_FALSE(m.Has(2));
  EXPECT_EQ(m.NumFreeBlocks(), 1);
  EXPECT_INVARIANTS(m);
  EXPECT_TRUE(m.AllocateSlots(2, 4));
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
  EXPECT_EQ(m.MatchPrefix(2, prompt2, salt), 8);
  EXPECT_INVARIANTS(m);
  ASSERT_EQ(m.BlockTable(2).size(), 2u);
  EXPECT_EQ(m.BlockTable(2)[0], t1[0]);
  EXPECT_EQ(m.BlockTable(2)[1], t1[1]);
  EXPECT_EQ(m.RefCount(t1[0]), 2);
  EXPECT_EQ(m.BlocksNeeded(2, 13), 2);
  ASSERT_TRUE(m.AllocateSlots(2, 13));
  EXPECT_INVARIANTS(m);
  // Different salt: no hit.
  EXPECT_EQ(m.MatchPrefix(3, prompt, Salt("other tenant")), 0);
  EXPECT_TRUE(m.BlockTable(3).empty());
  // Different first block: the chain breaks at once even though block 2 matches.
  auto prompt4 = prompt;
  prompt4[0] = 7;
  EXPECT_EQ(m.MatchPrefix(4, prompt4, salt), 0);
  EXPECT_INVARIANTS(m);
  // Counters in tokens: queries = all prompt tokens, hits = reused tokens.
  KvStats st = m.Stats();
  EXPECT_EQ(st.prefix_query_tokens, 10 + 13 + 10 + 10);
  EXPECT_EQ(st.prefix_hit_tokens, 8);
  m.ResetCounters();
  EXPECT_EQ(m.Stats().prefix_query_tokens, 0);
}

TEST(KvManagerTest, AlwaysComputesAtLeastOneToken) {
  KvManager m = MakeManager(16);
  const auto salt = Salt("s");
  const auto prompt = Range(1, 12);  // exactly 3 blocks
  Prefill(&m, 1, prompt, salt);
  EXPECT_EQ(m.ProbePrefix(prompt, salt).tokens, 8);
  // Full block-aligned hit: the last block is recomputed so the last token yields logits.
  EXPECT_EQ(m.MatchPrefix(2, prompt, salt), 8);
  EXPECT_EQ(m.BlockTable(2).size(), 2u);
  // One more token: all 3 blocks reused.
  EXPECT_EQ(m.MatchPrefix(3, Concat(prompt, {42}), salt), 12);
  // Shorter prompts.
  EXPECT_EQ(m.MatchPrefix(4, Range(1, 5), salt), 4);
  EXPECT_EQ(m.MatchPrefix(5, Range(1, 4), salt), 0);
  EXPECT_EQ(m.MatchPrefix(6, Range(1, 1), salt), 0);
  EXPECT_EQ(m.MatchPrefix(7, {}, salt), 0);
  EXPECT_TRUE(m.Has(7));
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, PartialHitStopsAtFirstMiss) {
  KvManager m = MakeManager(16);
  const auto salt = Salt("s");
  Prefill(&m, 1, Range(0, 16), salt);  // 4 cached blocks
  auto prompt = Range(0, 20);
  prompt[9] = -5;  // third block differs
  EXPECT_EQ(m.MatchPrefix(2, prompt, salt), 8);
  ASSERT_TRUE(m.AllocateSlots(2, 20));
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
  auto probe = m.ProbePrefix(prompt, salt);
  EXPECT_EQ(probe.tokens, 8);
  EXPECT_EQ(probe.evictable_blocks, 2);
  EXPECT_EQ(m.MatchPrefix(2, prompt, salt), 8);
  EXPECT_INVARIANTS(m);
  EXPECT_EQ(m.BlockTable(2)[0], t1[0]);
  EXPECT_EQ(m.RefCount(t1[0]), 1);  // revived
  EXPECT_EQ(m.Stats().cached_blocks, 0);
  EXPECT_EQ(m.NumFreeBlocks(), 6);
  EXPECT_EQ(m.ProbePrefix(prompt, salt).evictable_blocks, 0);
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
    ASSERT_TRUE(m.AllocateSlots(s, 1));
    taken.push_back(m.BlockTable(s)[0]);
    EXPECT_INVARIANTS(m);
  }
  EXPECT_FALSE(m.AllocateSlots(16, 1));
  // First the one never-cached free block, then A deepest-first, then B deepest-first.
  ASSERT_EQ(taken.size(), 6u);
  const std::vector<int32_t> want_evicted = {ta[2], ta[1], ta[0], tb[1], tb[0]};
  EXPECT_EQ(std::vector<int32_t>(taken.begin() + 1, taken.end()), want_evicted);
  EXPECT_EQ(m.Stats().cached_blocks, 0);
  EXPECT_EQ(m.Stats().evicted_blocks, 5);
  for (SeqId s = 10; s < 16; ++s) m.Free(s);
  EXPECT_EQ(m.ProbePrefix(Concat(a, {1}), salt).tokens, 0);  // evicted entries are gone
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, HitRefreshesRecency) {
  KvManager m = MakeManager(4, 4);
  const auto salt = Salt("s");
  const auto a = Range(0, 5);      // 1 cached block
  const auto b = Range(100, 5);    // 1 cached block
  Prefill(&m, 1, a, salt);
  m.Free(1);
  Prefill(&m, 2, b, salt);
  m.Free(2);
  // Reuse A again: it is revived and later released after B, so B is now the LRU.
  EXPECT_EQ(Prefill(&m, 3, a, salt), 4);
  m.Free(3);
  EXPECT_INVARIANTS(m);
  // 2 never-cached free blocks + 2 evictable. Take 3 blocks: B's goes first.
  ASSERT_TRUE(m.AllocateSlots(9, 12));
  EXPECT_EQ(m.ProbePrefix(b, salt).tokens, 0);
  EXPECT_EQ(m.ProbePrefix(a, salt).tokens, 4);
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, DuplicateContentKeepsExistingMapping) {
  KvManager m = MakeManager(8);
  const auto salt = Salt("s");
  const auto prompt = Range(0, 9);
  // Both sequences compute the same prompt without sharing (no hit: seq 2 matched before seq 1
  // committed).
  EXPECT_EQ(m.MatchPrefix(1, prompt, salt), 0);
  EXPECT_EQ(m.MatchPrefix(2, prompt, salt), 0);
  ASSERT_TRUE(m.AllocateSlots(1, 9));
  ASSERT_TRUE(m.AllocateSlots(2, 9));
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
  ASSERT_TRUE(m.AllocateSlots(1, 3));
  m.CommitComputed(1, tokens, 3, salt);
  EXPECT_FALSE(m.IsCached(m.BlockTable(1)[0]));
  // Decode token by token; the block registers when its 4th token's KV is written.
  tokens.push_back(3);
  ASSERT_TRUE(m.AllocateSlots(1, 4));
  m.CommitComputed(1, tokens, 4, salt);
  EXPECT_TRUE(m.IsCached(m.BlockTable(1)[0]));
  for (int32_t t = 4; t < 9; ++t) {
    tokens.push_back(t);
    ASSERT_TRUE(m.AllocateSlots(1, static_cast<int>(tokens.size())));
    // The newest token is sampled but its KV not yet computed.
    m.CommitComputed(1, tokens, static_cast<int>(tokens.size()) - 1, salt);
    EXPECT_INVARIANTS(m);
  }
  EXPECT_TRUE(m.IsCached(m.BlockTable(1)[1]));  // positions 4..7 computed
  EXPECT_FALSE(m.IsCached(m.BlockTable(1)[2]));
  // The registered hashes are the chained ones of the whole token list.
  EXPECT_EQ(m.ProbePrefix(Range(0, 9), salt).tokens, 8);
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
  EXPECT_TRUE(m.NeedsCopyOnWrite(2, 6));
  KvManager::CopyOp op{0, 0};
  ASSERT_TRUE(m.PrepareWrite(2, 6, &op));
  EXPECT_EQ(op.src, t1[1]);
  EXPECT_NE(op.dst, t1[1]);
  EXPECT_EQ(m.BlockTable(2)[1], op.dst);
  EXPECT_EQ(m.BlockTable(2)[0], t1[0]);  // full block still shared
  EXPECT_EQ(m.RefCount(t1[1]), 1);
  EXPECT_EQ(m.RefCount(op.dst), 1);
  EXPECT_INVARIANTS(m);
  // Parent now owns its block alone: no copy.
  EXPECT_FALSE(m.NeedsCopyOnWrite(1, 6));
  ASSERT_TRUE(m.PrepareWrite(1, 6, &op));
  EXPECT_EQ(op.src, -1);
  EXPECT_EQ(op.dst, -1);
  EXPECT_EQ(m.BlockTable(1), t1);
  // Out-of-table positions are refused.
  EXPECT_FALSE(m.PrepareWrite(1, 8, &op));
  EXPECT_FALSE(m.PrepareWrite(55, 0, &op));
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
  ASSERT_TRUE(m.AllocateSlots(1, 6));  // both blocks
  ASSERT_TRUE(m.Fork(1, 2));
  const auto t = m.BlockTable(2);
  KvManager::CopyOp op{5, 5};
  EXPECT_FALSE(m.PrepareWrite(2, 5, &op));
  EXPECT_EQ(m.BlockTable(2), t);
  EXPECT_EQ(m.RefCount(t[1]), 2);
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, PrepareWriteRangeIsAllOrNothing) {
  KvManager m = MakeManager(8);
  ASSERT_TRUE(m.AllocateSlots(1, 12));  // 3 blocks, none computed
  ASSERT_TRUE(m.Fork(1, 2));             // all 3 shared
  const auto t = m.BlockTable(1);
  ASSERT_TRUE(m.AllocateSlots(3, 16));   // leave 1 free block
  ASSERT_EQ(m.NumFreeBlocks(), 1);
  std::vector<KvManager::CopyOp> ops;
  EXPECT_FALSE(m.PrepareWriteRange(2, 2, 4, &ops));  // blocks 0 and 1: 2 copies, 1 free
  EXPECT_TRUE(ops.empty());
  EXPECT_EQ(m.BlockTable(2), t);
  EXPECT_FALSE(m.PrepareWriteRange(2, 10, 3, &ops));  // past the table
  EXPECT_INVARIANTS(m);
  m.Free(3);
  ASSERT_TRUE(m.PrepareWriteRange(2, 2, 4, &ops));  // positions 2..5: blocks 0 and 1
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].src, t[0]);
  EXPECT_EQ(ops[1].src, t[1]);
  EXPECT_EQ(m.BlockTable(2)[0], ops[0].dst);
  EXPECT_EQ(m.BlockTable(2)[1], ops[1].dst);
  EXPECT_EQ(m.BlockTable(2)[2], t[2]);  // untouched, still shared
  EXPECT_EQ(m.RefCount(t[2]), 2);
  ops.clear();
  EXPECT_TRUE(m.PrepareWriteRange(2, 0, 8, &ops));  // already exclusive: nothing to copy
  EXPECT_TRUE(ops.empty());
  EXPECT_TRUE(m.PrepareWriteRange(2, 0, 0, &ops));
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTest, RewritingACachedBlockUnregistersIt) {
  KvManager m = MakeManager(4);
  const auto salt = Salt("s");
  Prefill(&m, 1, Range(0, 5), salt);
  const int32_t b0 = m.BlockTable(1)[0];
  ASSERT_TRUE(m.IsCached(b0));
  KvManager::CopyOp op;
  ASSERT_TRUE(m.PrepareWrite(1, 2, &op));  // caller slip: rewriting a full, registered block
  EXPECT_EQ(op.src, -1);
  EXPECT_FALSE(m.IsCached(b0));
  EXPECT_EQ(m.ProbePrefix(Range(0, 5), salt).tokens, 0);
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
    std::vector<int32_t> table;   // the model's copy
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
      const auto probe = m.ProbePrefix(s.tokens, salts[s.salt]);
      const int hit = m.MatchPrefix(id, s.tokens, salts[s.salt]);
      ASSERT_EQ(hit, probe.tokens);
      ASSERT_EQ(hit % kBs, 0);
      ASSERT_LT(hit, static_cast<int>(s.tokens.size()));
      ASSERT_EQ(m.NumFreeBlocks(), free_before - probe.evictable_blocks);
      s.table = m.BlockTable(id);
      ASSERT_EQ(static_cast<int>(s.table.size()) * kBs, hit);
      for (size_t i = 0; i < s.table.size(); ++i) {
        const Content& c = content[static_cast<size_t>(s.table[i])];
        ASSERT_EQ(c.salt, s.salt);
        ASSERT_EQ(c.prefix, std::vector<int32_t>(s.tokens.begin(),
                                                 s.tokens.begin() + (i + 1) * kBs));
      }
      queries += static_cast<int64_t>(s.tokens.size());
      hits += hit;
      s.computed = hit;
      const auto refs_before = model_refs();
      const int need = m.BlocksNeeded(id, static_cast<int>(s.tokens.size()));
      const int free_now = m.NumFreeBlocks();
      const bool ok = m.AllocateSlots(id, static_cast<int>(s.tokens.size()));
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
          ASSERT_EQ(m.NeedsCopyOnWrite(id, pos), shared);
          const int free_now = m.NumFreeBlocks();
          KvManager::CopyOp cow;
          ok = m.PrepareWrite(id, pos, &cow);
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
        if (m.AllocateSlots(id, n + 1)) {
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
        ASSERT_EQ(c.prefix, std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + (i + 1) * kBs))
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
  std::printf("stress: %d copies, %d failed allocs, %d failed writes, %d forks, %lld evictions, "
              "%lld/%lld hit tokens\n", copies, failed_allocs, failed_writes, forks,
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
  void OnEvict(int32_t block, const BlockHash& hash, uint32_t tag) override { evicted.push_back({block, hash, tag}); }
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
  ASSERT_EQ(m.MatchPrefix(1, prompt, salt), 0);
  m.SetTag(1, 7);
  ASSERT_TRUE(m.AllocateSlots(1, 8));
  m.CommitComputed(1, prompt, 8, salt);
  const auto hashes = ComputeBlockHashes(prompt, 4, salt);
  ASSERT_EQ(l.registered.size(), 2u);
  EXPECT_EQ(l.registered[0].hash, hashes[0]);
  EXPECT_EQ(l.registered[1].hash, hashes[1]);
  EXPECT_EQ(l.registered[0].tag, 7u);
  EXPECT_TRUE(l.evicted.empty());
  m.Free(1);
  // A different prompt needs both blocks: the cached ones are evicted, deepest first, content
  // still reported with the hash and tag that registered it.
  ASSERT_EQ(m.MatchPrefix(2, Range(100, 8), salt), 0);
  ASSERT_TRUE(m.AllocateSlots(2, 8));
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
  const auto hashes = ComputeBlockHashes(prompt, 4, salt);
  ASSERT_EQ(hashes.size(), 3u);
  ASSERT_EQ(m.MatchPrefix(1, prompt, salt), 0);
  std::vector<std::pair<size_t, int32_t>> fills;
  const int n = m.AdoptBlocks(1, std::span(hashes).first(3),
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
  ASSERT_TRUE(m.AllocateSlots(1, 13));
  m.CommitComputed(1, prompt, 13, salt);
  EXPECT_INVARIANTS(m);
  // Another request with the same prompt hits all three (at most (13-1)/4 = 3 blocks).
  EXPECT_EQ(m.MatchPrefix(2, prompt, salt), 12);
  EXPECT_EQ(m.BlockTable(2)[2], fills[2].second);
  EXPECT_INVARIANTS(m);
}

TEST(KvManagerTierTest, AdoptAttachesAlreadyCachedHashesWithoutFillAndStopsWhenFull) {
  KvManager m = MakeManager(3, 4);
  const auto salt = Salt("s");
  const auto prompt = Range(1, 17);
  const auto hashes = ComputeBlockHashes(prompt, 4, salt);  // 4 full blocks
  // Seq 1 computes block 0 only.
  ASSERT_EQ(Prefill(&m, 1, std::vector<int32_t>(prompt.begin(), prompt.begin() + 4), salt), 0);
  const int32_t first = m.BlockTable(1)[0];
  // Seq 2 matches nothing (needs >= 1 token left: prompt of 4 → 0 blocks), then adopts all 4
  // hashes: block 0 is already cached (attached, no fill), two more fit, the pool is then full.
  ASSERT_EQ(m.MatchPrefix(2, std::vector<int32_t>(prompt.begin(), prompt.begin() + 4), salt), 0);
  int fill_calls = 0;
  const int n = m.AdoptBlocks(2, hashes, [&](size_t i, int32_t) {
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

}  // namespace
}  // namespace strata::engine::kv
