// The single-sequence decode loop of `strata generate` (engine::runner::SequenceRunner::Eval of one
// token + sampling) performs no heap allocation at steady state, with 1 and 2 threads.
#include <gtest/gtest.h>

#include <atomic>

#include "base/thread_pool.h"
#include "engine/runner/sequence_runner.h"
#include "engine/sampler/sampler.h"
#include "model/model.h"
#include "synth/synth.h"
#include "tokenizer/tokenizer.h"

namespace strata::testing {
extern std::atomic<bool> g_count_allocs;
extern std::atomic<size_t> g_allocs;
}  // namespace strata::testing

namespace strata {
namespace {

TEST(SequenceAllocTest, DecodeStepDoesNotAllocate) {
  for (auto ft : {synth::FileType::kQ8_0, synth::FileType::kQ4_K_M, synth::FileType::kF16}) {
    synth::SynthConfig c;
    c.dim = 256;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.ffn = 512;
    c.file_type = ft;
    gguf::GgufWriter w;
    ASSERT_TRUE(synth::BuildModel(c, tokenizer::BuiltinByteVocab(), nullptr, &w).ok());
    auto buf = w.WriteToBuffer();
    ASSERT_TRUE(buf.ok());
    auto f = gguf::GgufFile::Parse(*buf);
    ASSERT_TRUE(f.ok());
    auto m = model::Model::FromGguf(std::move(f).value());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      auto seq = engine::runner::SequenceRunner::Create(**m, 64, &pool);
      ASSERT_TRUE(seq.ok()) << seq.status().ToString();
      engine::runner::SequenceRunner& runner = **seq;
      engine::sampler::SamplingParams sp;
      sp.seed = 1;
      engine::sampler::Sampler sampler(sp, static_cast<size_t>((*m)->config().n_vocab));
      std::vector<int32_t> history = {1, 2, 3, 4, 5};
      history.reserve(64);
      auto logits = runner.Eval(history);
      ASSERT_TRUE(logits.ok());
      for (int step = 0; step < 20; ++step) {
        testing::g_allocs = 0;
        testing::g_count_allocs = true;
        int32_t next = sampler.Sample(*logits, history);
        history.push_back(next);
        logits = runner.Eval(std::span<const int32_t>(&history.back(), 1));
        testing::g_count_allocs = false;
        ASSERT_TRUE(logits.ok());
        EXPECT_EQ(testing::g_allocs.load(), 0u) << "step " << step << " threads " << threads;
      }
    }
  }
}

}  // namespace
}  // namespace strata
