// The engine's logits against the independent fp64 reference forward pass (tests/reference). The
// engine side is engine::runner::SequenceRunner (the batched runner with one sequence, F32 KV), the
// path of `strata generate`; the logits of several positions of one prompt come from prefilling it
// in chunks that end at those positions (chunked prefill is bit-identical to one shot).
//
// The reference uses the same stored weights (dequantized) but never quantizes activations and
// computes in double; the engine quantizes activations for the integer-dot types (as llama.cpp
// does), so the tolerance is per weight type. Error = max |engine - reference| / max |reference|
// over all logits of the compared positions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>

#include "base/thread_pool.h"
#include "engine/runner/sequence_runner.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "reference/reference_model.h"
#include "synth/synth.h"
#include "testing/shared_dir.h"
#include "testing/synth_model.h"

namespace strata {
namespace {

struct Built {
  std::vector<uint8_t> bytes;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<gguf::GgufFile> ref_file;  // second view of the same bytes for the reference
};

Built Build(const synth::SynthConfig& cfg) {
  testing::SynthModel sm = testing::BuildSynthModel(cfg);
  Built b{std::move(sm.bytes), std::move(sm.model), nullptr};
  auto f2 = gguf::GgufFile::Parse(b.bytes);
  if (f2.ok()) b.ref_file = std::move(f2).value();
  return b;
}

std::vector<int32_t> Prompt(size_t n, int n_vocab, uint32_t salt) {
  std::vector<int32_t> t(n);
  uint32_t s = 12345u + salt;
  for (auto& v : t) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(n_vocab));
  }
  return t;
}

double NormErr(std::span<const float> got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(got[i]) - want[i]));
    den = std::max(den, std::fabs(want[i]));
  }
  return num / std::max(den, 1e-30);
}

std::unique_ptr<engine::runner::SequenceRunner> NewSequence(const model::Model& m, int n_ctx,
                                                            ThreadPool* pool) {
  auto s = engine::runner::SequenceRunner::Create(m, n_ctx, pool);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Logits at each of `positions` (ascending) of `prompt`: the prompt is prefilled in chunks ending
// there. Rows in the order of `positions`.
Result<std::vector<std::vector<float>>> LogitsAt(engine::runner::SequenceRunner& seq,
                                                 const std::vector<int32_t>& prompt,
                                                 const std::vector<size_t>& positions) {
  std::vector<std::vector<float>> rows;
  size_t done = 0;
  for (size_t pos : positions) {
    if (pos + 1 > done) {
      ASSIGN_OR_RETURN(auto l,
                       seq.Eval(std::span<const int32_t>(prompt.data() + done, pos + 1 - done)));
      rows.emplace_back(l.begin(), l.end());
      done = pos + 1;
    } else {
      rows.push_back(rows.back());  // the same position again
    }
  }
  return rows;
}

struct Case {
  std::string name;
  synth::SynthConfig cfg;
  double tol;  // against the plain fp64 reference (includes activation-quantization error)
  // Share of positions that must match the rounded-activation reference to kRoundedExact (see
  // below); 0 = kRoundedExactShare.
  double exact_share = 0;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

// Against the reference that rounds activations to the engine's formats, only float summation
// order remains (measured ~1e-7) — except where an activation sits on a rounding boundary and
// the two sides round it differently; the random test networks amplify such a flip to ~1e-2.
// So: most positions must agree to kRoundedExact, and every position to kRoundedMax.
constexpr double kRoundedExact = 1e-4;
constexpr double kRoundedMax = 5e-2;
constexpr double kRoundedExactShare = 0.8;
// All-Q4_K weights (q4_k_s) quantize the most activations to Q8_K, so flips are most frequent:
// 4 of its 12 distinct positions flip with the per-super-block integer kernels (avx512, and avx2
// since its panel GEMV gives their bits; the avx2 256-bit tile before it flipped 4 too), 22 of 30
// compared; the avx512 tile before those, 3.
constexpr double kQ4KSExactShare = 0.7;

synth::SynthConfig Base(synth::FileType ft) {
  synth::SynthConfig c;
  c.arch = synth::Arch::kLlama;
  c.n_layers = 2;
  c.dim = 256;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // GQA 2:1
  c.ffn = 512;
  c.ctx_len = 512;
  c.rope_base = 10000.0;
  c.file_type = ft;
  c.seed = 7;
  return c;
}

std::vector<Case> Cases() {
  std::vector<Case> cs;
  struct T {
    const char* n;
    synth::FileType ft;
    double tol;
  };
  // Plain-reference tolerances: activation quantization (Q8_0/Q8_K, ~0.4% per element) is
  // amplified by the random networks to 2-11% of the largest logit at long prompts (measured).
  for (T t : {T{"f32", synth::FileType::kF32, 1e-4}, T{"f16", synth::FileType::kF16, 1e-2},
              T{"bf16", synth::FileType::kBF16, 4e-2}, T{"q8_0", synth::FileType::kQ8_0, 0.15},
              T{"q4_0", synth::FileType::kQ4_0, 0.15}, T{"q4_k_s", synth::FileType::kQ4_K_S, 0.15},
              T{"q5_k_s", synth::FileType::kQ5_K_S, 0.15}, T{"q6_k", synth::FileType::kQ6_K, 0.15},
              T{"q4_k_m", synth::FileType::kQ4_K_M, 0.15}})
    cs.push_back({std::string("llama_gqa_") + t.n, Base(t.ft), t.tol,
                  t.ft == synth::FileType::kQ4_K_S ? kQ4KSExactShare : 0.0});
  {
    auto c = Base(synth::FileType::kQ8_0);
    c.arch = synth::Arch::kQwen2;
    c.n_kv_heads = 1;  // MQA
    c.tied = true;
    c.qkv_bias = true;
    c.rope_base = 1e6;
    c.rms_eps = 1e-6;
    cs.push_back({"qwen2_mqa_tied_bias_q8_0", c, 0.15});
    c.file_type = synth::FileType::kF32;
    cs.push_back({"qwen2_mqa_tied_bias_f32", c, 1e-4});
  }
  {
    auto c = Base(synth::FileType::kF32);
    c.rope_base = 500000.0;
    c.rope_scaling.enabled = true;  // llama3 rope_freqs
    c.rope_scaling.factor = 32.0;
    c.rope_scaling.original_ctx = 64;  // small so the scaled band covers many frequencies
    cs.push_back({"llama3_rope_scaling_f32", c, 1e-4});
    c.file_type = synth::FileType::kQ4_K_M;
    // Long prompts put more activations of this case on Q8_K rounding boundaries: measured 26 of
    // 30 positions exact with the scalar kernels and 22 of 30 with the avx2 level (AMD EPYC, no
    // AVX-512: its float sums flip two more, at the last prompt positions); every position stays
    // within kRoundedMax.
    cs.push_back({"llama3_rope_scaling_q4_k_m", c, 0.15, 0.7});
  }
  {
    auto c = Base(synth::FileType::kF16);
    c.n_kv_heads = 4;  // plain MHA, partial rotary dims
    c.rope_dim = 32;
    cs.push_back({"llama_mha_partial_rope_f16", c, 1e-2});
  }
  return cs;
}

class ModelReferenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(ModelReferenceTest, LogitsMatchFp64Reference) {
  const Case& c = GetParam();
  Built b = Build(c.cfg);
  ASSERT_TRUE(b.model && b.ref_file);
  auto ref = testing::ReferenceModel::Create(*b.ref_file);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const int n_vocab = b.model->config().n_vocab;
  int compared = 0, exact = 0;
  for (size_t len : {size_t{1}, size_t{2}, size_t{17}, size_t{70}, size_t{300}}) {
    SCOPED_TRACE("prompt length " + std::to_string(len));
    auto prompt = Prompt(len, n_vocab, static_cast<uint32_t>(len));
    // Positions to compare: a few, including the first and the last.
    std::vector<size_t> pos = {0, len / 2, len - 1};
    auto want = ref->Forward(prompt, pos);
    ref->set_round_activations(true);
    auto want_rounded = ref->Forward(prompt, pos);
    ref->set_round_activations(false);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      auto seq = NewSequence(*b.model, 512, &pool);
      ASSERT_NE(seq, nullptr);
      auto got = LogitsAt(*seq, prompt, pos);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      for (size_t i = 0; i < pos.size(); ++i) {
        std::span<const float> row((*got)[i]);
        ASSERT_EQ(row.size(), static_cast<size_t>(n_vocab));
        double err = NormErr(row, want[i]);
        EXPECT_LT(err, c.tol) << "threads " << threads << " position " << pos[i];
        double err_r = NormErr(row, want_rounded[i]);
        EXPECT_LT(err_r, kRoundedMax)
            << "rounded-activation reference, threads " << threads << " position " << pos[i];
        ++compared;
        exact += err_r < kRoundedExact ? 1 : 0;
        if (std::getenv("STRATA_PRINT_ERR"))
          std::cout << c.name << " len " << len << " pos " << pos[i] << " err " << err
                    << " rounded " << err_r << "\n";
      }
    }
  }
  // f16/bf16 rounding boundaries are ~1000x denser than Q8's, so flips are the rule there; those
  // types are held to the plain reference above (measured 3e-3 for f16, 1.6e-2 for bf16).
  bool float16_types =
      c.cfg.file_type == synth::FileType::kF16 || c.cfg.file_type == synth::FileType::kBF16;
  if (!float16_types) {
    EXPECT_GE(exact, (c.exact_share > 0 ? c.exact_share : kRoundedExactShare) * compared)
        << exact << " of " << compared << " positions match the rounded-activation reference to "
        << kRoundedExact;
  }
}

TEST_P(ModelReferenceTest, OneAndTwoThreadsBitIdenticalAndDecodeMatchesPrefill) {
  const Case& c = GetParam();
  Built b = Build(c.cfg);
  ASSERT_TRUE(b.model);
  const int n_vocab = b.model->config().n_vocab;
  auto prompt = Prompt(40, n_vocab, 99);
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    auto seq = NewSequence(*b.model, 64, &pool);
    ASSERT_NE(seq, nullptr);
    auto l = seq->Eval(prompt);
    ASSERT_TRUE(l.ok());
    outs.emplace_back(l->begin(), l->end());
  }
  EXPECT_EQ(outs[0], outs[1]) << "1-thread and 2-thread logits differ";
  // Token-by-token decode reaches the same logits as one prefill (up to the activation
  // quantization of a different batch shape: compare by normalized error).
  ThreadPool pool(2);
  auto seq = NewSequence(*b.model, 64, &pool);
  ASSERT_NE(seq, nullptr);
  Result<std::span<const float>> l = Status::Internal("unset");
  for (int32_t t : prompt) l = seq->Eval(std::span<const int32_t>(&t, 1));
  ASSERT_TRUE(l.ok());
  std::vector<double> want(outs[0].begin(), outs[0].end());
  EXPECT_LT(NormErr(*l, want), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Configs, ModelReferenceTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// Every ISA path gives reference-close logits (forced fallbacks).
TEST(ModelReferenceIsaTest, EveryIsaMatchesReference) {
  auto c = Base(synth::FileType::kQ4_K_M);
  Built b = Build(c);
  ASSERT_TRUE(b.model && b.ref_file);
  auto ref = testing::ReferenceModel::Create(*b.ref_file);
  ASSERT_TRUE(ref.ok());
  auto prompt = Prompt(9, b.model->config().n_vocab, 5);
  auto want = ref->Forward(prompt);
  ref->set_round_activations(true);
  auto want_rounded = ref->Forward(prompt);
  kernels::Isa detected = kernels::DetectIsa();
  for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(detected)) continue;
    kernels::SetIsa(isa);
    ThreadPool pool(2);
    auto seq = NewSequence(*b.model, 64, &pool);
    ASSERT_NE(seq, nullptr);
    auto got = seq->Eval(prompt);
    ASSERT_TRUE(got.ok());
    EXPECT_LT(NormErr(*got, want[0]), 0.15) << kernels::IsaName(isa);
    EXPECT_LT(NormErr(*got, want_rounded[0]), kRoundedExact) << kernels::IsaName(isa);
  }
  kernels::SetIsa(detected);
}

// The real models in ../shared against the reference (last position of a short prompt).
class SharedModelReferenceTest : public ::testing::TestWithParam<std::pair<std::string, double>> {};

TEST_P(SharedModelReferenceTest, LastLogitsMatchReference) {
  STRATA_REQUIRE_SHARED(path, "models/" + GetParam().first);
  auto m = model::Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto f = gguf::GgufFile::Open(path);
  ASSERT_TRUE(f.ok());
  auto ref = testing::ReferenceModel::Create(**f);
  ASSERT_TRUE(ref.ok());
  for (size_t len : {size_t{1}, size_t{12}}) {
    auto prompt = Prompt(len, (*m)->config().n_vocab, 3);
    auto want = ref->Forward(prompt);
    ThreadPool pool(2);
    auto seq = NewSequence(**m, 64, &pool);
    ASSERT_NE(seq, nullptr);
    auto got = seq->Eval(prompt);
    ASSERT_TRUE(got.ok());
    EXPECT_LT(NormErr(*got, want[0]), GetParam().second) << "prompt length " << len;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shared, SharedModelReferenceTest,
    ::testing::Values(std::make_pair(std::string("tiny-llama3-Q4_K_M.gguf"), 6e-2),
                      std::make_pair(std::string("tiny-qwen2-Q8_0.gguf"), 4e-2),
                      std::make_pair(std::string("llama-2-tiny-random.gguf"), 2e-2)),
    [](const auto& info) {
      std::string n = info.param.first.substr(0, info.param.first.size() - 5);
      for (char& ch : n)
        if (ch == '-' || ch == '.') ch = '_';
      return n;
    });

}  // namespace
}  // namespace strata
