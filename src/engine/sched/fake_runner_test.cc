#include "engine/sched/fake_runner.h"

#include <gtest/gtest.h>

namespace strata::engine::sched {
namespace {

using runner::BatchSeq;

FakeRunnerConfig Cfg() {
  FakeRunnerConfig c;
  c.num_blocks = 8;
  c.block_size = 4;
  c.n_vocab = 32;
  return c;
}

BatchSeq Seq(int64_t id, const std::vector<int32_t>& toks, int start,
             const std::vector<int32_t>& table, bool logits = true) {
  BatchSeq b;
  b.seq_id = id;
  b.tokens = toks;
  b.start_pos = start;
  b.block_table = table;
  b.want_logits = logits;
  return b;
}

TEST(FakeRunner, ChunkedEqualsWholeAndMatchesChain) {
  FakeModelRunner r(Cfg());
  std::vector<float> lg;
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> table = {3, 5};
  const std::vector<int32_t> a(toks.begin(), toks.begin() + 3), b(toks.begin() + 3, toks.end());
  ASSERT_TRUE(r.Run(std::vector<BatchSeq>{Seq(1, a, 0, table, false)}, &lg).ok());
  EXPECT_TRUE(lg.empty());
  ASSERT_TRUE(r.Run(std::vector<BatchSeq>{Seq(1, b, 3, table)}, &lg).ok());
  std::vector<float> want(32);
  r.Logits(FakeModelRunner::Chain(toks), 5, want);
  EXPECT_EQ(lg, want);
  EXPECT_EQ(r.batches().size(), 2u);
}

TEST(FakeRunner, DetectsMisuse) {
  std::vector<float> lg;
  const std::vector<int32_t> t3 = {1, 2, 3}, t1 = {7};
  {
    FakeModelRunner r(Cfg());  // position 4 is not covered by a 1-block table
    EXPECT_FALSE(r.Run(std::vector<BatchSeq>{Seq(1, {1, 2, 3, 4, 5}, 0, {0})}, &lg).ok());
  }
  {
    FakeModelRunner r(Cfg());  // reads a never-written slot
    EXPECT_FALSE(r.Run(std::vector<BatchSeq>{Seq(1, t1, 3, {0})}, &lg).ok());
  }
  {
    FakeModelRunner r(Cfg());  // reuses a position of a known sequence
    ASSERT_TRUE(r.Run(std::vector<BatchSeq>{Seq(1, t3, 0, {0})}, &lg).ok());
    EXPECT_FALSE(r.Run(std::vector<BatchSeq>{Seq(1, t1, 2, {0})}, &lg).ok());
  }
  {
    FakeModelRunner r(Cfg());  // two sequences of a batch share a block one of them writes
    ASSERT_TRUE(r.Run(std::vector<BatchSeq>{Seq(1, t3, 0, {0})}, &lg).ok());
    EXPECT_FALSE(r.Run(std::vector<BatchSeq>{Seq(1, t1, 3, {0}), Seq(2, t1, 3, {0, 1})}, &lg).ok());
    EXPECT_EQ(r.num_errors(), 1);
  }
  {
    FakeModelRunner r(Cfg());  // block id out of range, same seq twice
    EXPECT_FALSE(r.Run(std::vector<BatchSeq>{Seq(1, t3, 0, {8})}, &lg).ok());
    EXPECT_FALSE(r.Run(std::vector<BatchSeq>{Seq(1, t3, 0, {0}), Seq(1, t3, 0, {1})}, &lg).ok());
  }
  {
    FakeModelRunner r(Cfg());  // after copy-on-write the child reads the copied slots
    ASSERT_TRUE(r.Run(std::vector<BatchSeq>{Seq(1, t3, 0, {0})}, &lg).ok());
    const std::vector<float> parent = lg;
    r.CopyBlocks(std::vector<BlockCopy>{BlockCopy{0, 4, 3, 2}});
    ASSERT_TRUE(r.Run(std::vector<BatchSeq>{Seq(1, t1, 3, {0}), Seq(2, t1, 3, {4})}, &lg).ok());
    ASSERT_EQ(lg.size(), 64u);
    EXPECT_TRUE(std::equal(lg.begin(), lg.begin() + 32, lg.begin() + 32));  // same history
  }
}

}  // namespace
}  // namespace strata::engine::sched
