// A model whose Q4_0/Q8_0/Q4_K (F16/BF16) matrices are repacked at load (kernels::WeightLayout::
// kPanels16 / kPanels4, what Model::Load does at the avx512 level) computes the logits of the
// model kept in the file's row
// layout bit for bit: prefill, decode steps and the tied embedding table read back from panels.
// STRATA_WEIGHT_LAYOUT forces each layout, so this runs at whatever ISA the machine has (below
// avx512 the kernels read panel rows back into the row format).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/runner/sequence_runner.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "synth/synth.h"
#include "testing/synth_model.h"

namespace strata {
namespace {

// Sets STRATA_WEIGHT_LAYOUT for the scope.
class LayoutEnv {
 public:
  explicit LayoutEnv(const char* value) { setenv("STRATA_WEIGHT_LAYOUT", value, 1); }
  ~LayoutEnv() { unsetenv("STRATA_WEIGHT_LAYOUT"); }
  LayoutEnv(const LayoutEnv&) = delete;
  LayoutEnv& operator=(const LayoutEnv&) = delete;
};

// Logits of a 37-token prefill, then of 5 greedy decode steps, all concatenated.
std::vector<float> Run(const model::Model& m, ThreadPool* pool) {
  auto seq = engine::runner::SequenceRunner::Create(m, 64, pool);
  EXPECT_TRUE(seq.ok()) << seq.status().ToString();
  if (!seq.ok()) return {};
  std::vector<int32_t> prompt(37);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % 200);
  std::vector<float> out;
  auto logits = (*seq)->Eval(prompt);
  EXPECT_TRUE(logits.ok());
  for (int step = 0; logits.ok() && step < 6; ++step) {
    out.insert(out.end(), logits->begin(), logits->end());
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) - logits->begin());
    if (step < 5) logits = (*seq)->Eval(std::span<const int32_t>(&next, 1));
  }
  return out;
}

void ExpectSameLogits(synth::FileType type, bool tied) {
  synth::SynthConfig cfg;
  cfg.file_type = type;
  cfg.tied = tied;
  const bool k_quant = type == synth::FileType::kQ4_K_S;
  cfg.dim = k_quant ? 768 : 96;  // 3 blocks (super-blocks) per row: an odd count
  cfg.n_heads = 4;
  cfg.n_kv_heads = 1;  // K/V: 24 (Q4_K: 192) rows
  cfg.ffn = k_quant ? 512 : 160;
  testing::SynthModel rows_model, panel_model;
  {
    LayoutEnv env("rows");
    rows_model = testing::BuildSynthModel(cfg);
  }
  {
    LayoutEnv env("panels");
    panel_model = testing::BuildSynthModel(cfg);
  }
  ASSERT_TRUE(rows_model.model && panel_model.model);
  const model::Model& a = *rows_model.model;
  const model::Model& b = *panel_model.model;
  EXPECT_EQ(a.repacked_bytes(), 0u);
  ASSERT_GT(b.repacked_bytes(), 0u);
  const kernels::WeightLayout want = type == synth::FileType::kF16 || type == synth::FileType::kBF16
                                         ? kernels::WeightLayout::kPanels4
                                         : kernels::WeightLayout::kPanels16;
  // Q4_K_S files keep some matrices (output, early ffn_down) in other K-quants: rows.
  EXPECT_EQ(b.layers()[0].wq.layout, want);
  if (!k_quant) {
    EXPECT_EQ(b.layers()[0].w_down.layout, want);
    EXPECT_EQ(b.output().layout, want);
  }
  EXPECT_EQ(a.decode_bytes(), b.decode_bytes());
  // The repacked copies hold the file's bytes of the matrices plus the padding of each matrix's
  // last panel (< 16 rows) and < 64 bytes per panel (Q4_K: + 2.8 % for the unpacked scales).
  EXPECT_LE(b.repacked_bytes(), a.decode_bytes() + a.decode_bytes() / 10 + 64 * 1024);
  const int dim = a.config().dim;
  std::vector<float> ea(static_cast<size_t>(dim)), eb(static_cast<size_t>(dim));
  for (int32_t tok : {0, 1, 17, a.config().n_vocab - 1}) {
    a.Embed(tok, ea.data());
    b.Embed(tok, eb.data());
    EXPECT_EQ(0, std::memcmp(ea.data(), eb.data(), ea.size() * sizeof(float))) << "token " << tok;
  }
  ThreadPool two(2);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
    const std::vector<float> la = Run(a, pool), lb = Run(b, pool);
    ASSERT_EQ(la.size(), lb.size());
    ASSERT_FALSE(la.empty());
    EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)))
        << "isa " << kernels::IsaName(kernels::ActiveIsa())
        << (pool ? ", 2 threads" : ", 1 thread");
  }
}

TEST(WeightLayout, Q8_0PanelsGiveTheRowLayoutsLogits) {
  ExpectSameLogits(synth::FileType::kQ8_0, false);
}
TEST(WeightLayout, Q4_0TiedPanelsGiveTheRowLayoutsLogits) {
  ExpectSameLogits(synth::FileType::kQ4_0, true);
}

TEST(WeightLayout, Q4_K_SPanelsGiveTheRowLayoutsLogits) {
  ExpectSameLogits(synth::FileType::kQ4_K_S, false);
}

TEST(WeightLayout, F16PanelsGiveTheRowLayoutsLogits) {
  ExpectSameLogits(synth::FileType::kF16, false);
}
TEST(WeightLayout, BF16TiedPanelsGiveTheRowLayoutsLogits) {
  ExpectSameLogits(synth::FileType::kBF16, true);
}

}  // namespace
}  // namespace strata
