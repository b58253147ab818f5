// Adapter::Load: synth-lora round trip, scale and digest rules, every rejection with its message,
// corrupt files, weight-type conversion.
#include "lora/adapter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "testing/lora_files.h"
#include "testing/shared_dir.h"

namespace strata::lora {
namespace {

using testing::AdapterSpec;
using ::testing::HasSubstr;
using testing::TempPath;
using testing::TinyBase;
using testing::WriteAdapter;
using testing::WriteSynthLora;

// Every value of a tensor of the file, in f32 (ggml order = row-major).
std::vector<float> FileValues(const gguf::GgufFile& f, const std::string& name) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> out(t->n_elements);
  const uint64_t cols = t->shape[0];
  const uint64_t rb = *RowBytes(t->type, cols);
  for (uint64_t r = 0; r < t->n_elements / cols; ++r)
    kernels::DequantizeRow(t->type, t->data + r * rb, out.data() + r * cols, cols);
  return out;
}

class AdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = TinyBase();
    ASSERT_NE(base_.model, nullptr);
  }
  const model::Model& base() const { return *base_.model; }

  // Writes a synth-lora adapter and loads it.
  Result<std::shared_ptr<const Adapter>> Synth(const synth::SynthLoraOptions& o,
                                               const std::string& tag, LoadOptions lo = {}) {
    const std::string path = TempPath(tag);
    WriteSynthLora(base(), o, path);
    return Adapter::Load(tag, path, base(), lo);
  }
  // Writes a hand-built adapter and expects Load to fail with InvalidArgument naming the file and
  // containing `needle`.
  void ExpectRejected(const AdapterSpec& spec, const std::string& needle, LoadOptions lo = {}) {
    const std::string path = TempPath("bad");
    WriteAdapter(spec, path);
    auto a = Adapter::Load("bad", path, base(), lo);
    ASSERT_FALSE(a.ok()) << "accepted; expected: " << needle;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << a.status().ToString();
    EXPECT_THAT(a.status().message(), HasSubstr(path + ": "));
    EXPECT_THAT(a.status().message(), HasSubstr(needle));
  }

  strata::testing::SynthModel base_;
};

TEST_F(AdapterTest, SynthRoundTripGivesTheValuesWritten) {
  synth::SynthLoraOptions o;
  o.rank = 8;
  o.alpha = 16;
  o.seed = 7;
  o.include_output = true;
  o.include_embd = true;
  const std::string path = TempPath("rt");
  WriteSynthLora(base(), o, path);
  auto a = Adapter::Load("rt", path, base(), {});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  const Adapter& ad = **a;
  EXPECT_EQ(ad.name(), "rt");
  EXPECT_EQ(ad.path(), path);
  EXPECT_EQ(ad.alpha(), 16.0f);
  EXPECT_EQ(ad.max_rank(), 8);
  EXPECT_EQ(ad.num_pairs(), 2 * kNumTargets + 2);
  size_t bytes = 0;
  const auto& layers = base().layers();
  for (int l = 0; l < 2; ++l) {
    const kernels::WeightMatrix* w[kNumTargets] = {
        &layers[l].wq,     &layers[l].wk,   &layers[l].wv,    &layers[l].wo,
        &layers[l].w_gate, &layers[l].w_up, &layers[l].w_down};
    for (int t = 0; t < kNumTargets; ++t) {
      const LoraPair* p = ad.Find(l, static_cast<Target>(t));
      ASSERT_NE(p, nullptr) << l << " " << TargetName(static_cast<Target>(t));
      EXPECT_EQ(p->rank, 8);
      EXPECT_EQ(p->in, static_cast<int>(w[t]->cols));
      EXPECT_EQ(p->out, static_cast<int>(w[t]->rows));
      EXPECT_EQ(p->scale, 2.0f);  // 1 * 16 / 8
      const std::string name = "blk." + std::to_string(l) + "." +
                               std::string(TargetTensorSuffix(static_cast<Target>(t)));
      EXPECT_EQ(p->a, FileValues(**file, name + ".lora_a")) << name;
      EXPECT_EQ(p->b, FileValues(**file, name + ".lora_b")) << name;
      ASSERT_EQ(p->a.size(), static_cast<size_t>(p->rank * p->in));
      ASSERT_EQ(p->b.size(), static_cast<size_t>(p->out * p->rank));
      // Synth's magnitudes: A within 1/sqrt(in), B non-zero (not PEFT's zero init).
      const float a_max = 1.0f / std::sqrt(static_cast<float>(p->in));
      for (float v : p->a) ASSERT_LE(std::fabs(v), a_max * 1.0001f);
      EXPECT_GT(*std::max_element(p->b.begin(), p->b.end()), 0.1f);
      bytes += (p->a.size() + p->b.size()) * sizeof(float);
    }
  }
  EXPECT_EQ(ad.Find(2, Target::kQ), nullptr);  // past the last layer
  ASSERT_NE(ad.output(), nullptr);
  EXPECT_EQ(ad.output()->in, 64);
  EXPECT_EQ(ad.output()->out, base().config().n_vocab);
  EXPECT_EQ(ad.output()->a, FileValues(**file, "output.weight.lora_a"));
  ASSERT_NE(ad.token_embd(), nullptr);
  EXPECT_EQ(ad.token_embd()->in, base().config().n_vocab);  // flipped
  EXPECT_EQ(ad.token_embd()->out, 64);
  EXPECT_EQ(ad.token_embd()->a, FileValues(**file, "token_embd.weight.lora_a"));
  EXPECT_EQ(ad.token_embd()->b, FileValues(**file, "token_embd.weight.lora_b"));
  for (const LoraPair* p : {ad.output(), ad.token_embd()})
    bytes += (p->a.size() + p->b.size()) * sizeof(float);
  EXPECT_EQ(ad.bytes(), bytes);
}

TEST_F(AdapterTest, OnlyTheTargetsGivenArePresent) {
  synth::SynthLoraOptions o;
  o.targets = {"q", "down"};
  auto a = Synth(o, "qdown");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  for (int l = 0; l < 2; ++l) {
    EXPECT_NE((*a)->Find(l, Target::kQ), nullptr);
    EXPECT_NE((*a)->Find(l, Target::kDown), nullptr);
    for (Target t : {Target::kK, Target::kV, Target::kO, Target::kGate, Target::kUp})
      EXPECT_EQ((*a)->Find(l, t), nullptr);
  }
  EXPECT_EQ((*a)->output(), nullptr);
  EXPECT_EQ((*a)->token_embd(), nullptr);
  EXPECT_EQ((*a)->num_pairs(), 4);
}

TEST_F(AdapterTest, ScaleIsUserScaleTimesAlphaOverRank) {
  synth::SynthLoraOptions o;
  o.rank = 8;
  o.alpha = 4;
  auto a = Synth(o, "alpha", LoadOptions{0.5f, 16});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->Find(0, Target::kQ)->scale, 0.5f * 4.0f / 8.0f);
  o.alpha = 0;  // written as 0: no alpha scaling
  auto b = Synth(o, "alpha0", LoadOptions{0.5f, 16});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->Find(0, Target::kQ)->scale, 0.5f);
  EXPECT_EQ((*b)->alpha(), 0.0f);
  // Absent key: as 0 (llama.cpp's default).
  AdapterSpec spec;
  spec.Erase("adapter.lora.alpha");
  spec.AddPair("blk.0.attn_q.weight", 64, 4, 64);
  const std::string path = TempPath("noalpha");
  WriteAdapter(spec, path);
  auto c = Adapter::Load("c", path, base(), LoadOptions{0.25f, 16});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->Find(0, Target::kQ)->scale, 0.25f);
  EXPECT_EQ((*c)->Find(0, Target::kQ)->rank, 4);
  // Alpha with rank 4: 0.25 * 8 / 4.
  spec.Set("adapter.lora.alpha", gguf::Value::Float32(8.0f));
  WriteAdapter(spec, path);
  auto d = Adapter::Load("d", path, base(), LoadOptions{0.25f, 16});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->Find(0, Target::kQ)->scale, 0.5f);
}

TEST_F(AdapterTest, ScaleZeroMakesEveryPairInert) {
  synth::SynthLoraOptions o;
  o.include_output = true;
  o.include_embd = true;
  auto a = Synth(o, "zero", LoadOptions{0.0f, 16});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->num_pairs(), 0);
  EXPECT_EQ((*a)->max_rank(), 0);
  EXPECT_EQ((*a)->Find(0, Target::kQ), nullptr);
  EXPECT_EQ((*a)->output(), nullptr);
  EXPECT_EQ((*a)->token_embd(), nullptr);
}

TEST_F(AdapterTest, DigestFollowsContentAndScaleNotName) {
  synth::SynthLoraOptions o;
  o.seed = 1;
  const std::string p1 = TempPath("s1"), p2 = TempPath("s2"), p1b = TempPath("s1b");
  WriteSynthLora(base(), o, p1);
  WriteSynthLora(base(), o, p1b);  // same bytes, other path
  o.seed = 2;
  WriteSynthLora(base(), o, p2);
  auto a = Adapter::Load("x", p1, base(), {});
  auto a_again = Adapter::Load("y", p1b, base(), {});
  auto b = Adapter::Load("x", p2, base(), {});
  auto a_scaled = Adapter::Load("x", p1, base(), LoadOptions{0.5f, 16});
  ASSERT_TRUE(a.ok() && a_again.ok() && b.ok() && a_scaled.ok());
  const std::string& d = (*a)->digest();
  EXPECT_EQ(d.size(), 32u);
  EXPECT_EQ(d.find_first_not_of("0123456789abcdef"), std::string::npos) << d;
  EXPECT_EQ(d, (*a_again)->digest());
  EXPECT_NE(d, (*b)->digest());
  EXPECT_NE(d, (*a_scaled)->digest());
  // One changed byte in the file changes it too (a weight's low bits).
  std::vector<char> bytes;
  {
    std::ifstream in(p1, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() - 8] ^= 1;
  {
    std::ofstream out(p1b, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto c = Adapter::Load("x", p1b, base(), {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(d, (*c)->digest());
}

TEST_F(AdapterTest, SynthIsDeterministic) {
  synth::SynthLoraOptions o;
  o.seed = 5;
  gguf::GgufWriter w1, w2;
  ASSERT_TRUE(synth::BuildLora(base().gguf(), o, &w1).ok());
  ASSERT_TRUE(synth::BuildLora(base().gguf(), o, &w2).ok());
  EXPECT_EQ(*w1.WriteToBuffer(), *w2.WriteToBuffer());
}

TEST_F(AdapterTest, SynthRefusesBadOptions) {
  gguf::GgufWriter w;
  synth::SynthLoraOptions o;
  o.rank = 0;
  EXPECT_THAT(synth::BuildLora(base().gguf(), o, &w).status().message(), HasSubstr("rank 0"));
  o.rank = 8;
  o.targets = {"q", "qkv"};
  EXPECT_THAT(synth::BuildLora(base().gguf(), o, &w).status().message(),
              HasSubstr("unknown target 'qkv'"));
  o.targets = {"q", "q"};
  EXPECT_THAT(synth::BuildLora(base().gguf(), o, &w).status().message(), HasSubstr("twice"));
  o.targets = {"q"};
  o.type = DType::kQ4_0;
  EXPECT_THAT(synth::BuildLora(base().gguf(), o, &w).status().message(),
              HasSubstr("not an adapter type"));
  auto tied = TinyBase(synth::FileType::kQ8_0, /*tied=*/true);
  o.type = DType::kF32;
  o.include_output = true;
  EXPECT_THAT(synth::BuildLora(tied.model->gguf(), o, &w).status().message(),
              HasSubstr("tied embeddings"));
}

// ---- rejections ----

TEST_F(AdapterTest, RejectsWrongMetadata) {
  AdapterSpec spec;
  spec.AddPair("blk.0.attn_q.weight", 64, 4, 64);
  AdapterSpec s = spec;
  s.Set("general.type", gguf::Value::String("model"));
  ExpectRejected(s, "general.type is 'model', expected 'adapter'");
  s = spec;
  s.Erase("general.type");
  ExpectRejected(s, "general.type is missing, expected 'adapter'");
  s = spec;
  s.Set("general.type", gguf::Value::Uint(gguf::ValueType::kUint32, 3));
  ExpectRejected(s, "general.type");
  s = spec;
  s.Set("general.architecture", gguf::Value::String("qwen2"));
  ExpectRejected(s, "general.architecture is 'qwen2', the base model's is 'llama'");
  s = spec;
  s.Erase("general.architecture");
  ExpectRejected(s, "general.architecture is '', the base model's is 'llama'");
  s = spec;
  s.Set("adapter.type", gguf::Value::String("ia3"));
  ExpectRejected(s, "adapter.type is 'ia3', expected 'lora'");
  s = spec;
  s.Erase("adapter.type");
  ExpectRejected(s, "adapter.type is missing, expected 'lora'");
  s = spec;
  s.Set("adapter.lora.alpha", gguf::Value::String("16"));
  ExpectRejected(s, "adapter.lora.alpha");
  s = spec;
  s.Set("adapter.lora.alpha", gguf::Value::Float32(std::nanf("")));
  ExpectRejected(s, "adapter.lora.alpha nan is not a finite f32");
}

TEST_F(AdapterTest, RejectsIncompletePairsAndUnknownSuffixes) {
  AdapterSpec s;
  s.tensors.push_back({"blk.0.attn_q.weight.lora_b", {4, 64}, DType::kF32, {}});
  ExpectRejected(s, "tensor 'blk.0.attn_q.weight.lora_b' has no lora_a");
  s.tensors = {{"blk.1.ffn_up.weight.lora_a", {64, 4}, DType::kF32, {}}};
  ExpectRejected(s, "tensor 'blk.1.ffn_up.weight.lora_a' has no lora_b");
  s.tensors = {{"blk.0.attn_q.weight.lora_c", {64, 4}, DType::kF32, {}}};
  ExpectRejected(s, "tensor 'blk.0.attn_q.weight.lora_c' has an unexpected suffix");
  s.tensors = {{"blk.0.attn_q.weight", {64, 64}, DType::kF32, {}}};
  ExpectRejected(s, "tensor 'blk.0.attn_q.weight' has an unexpected suffix");
}

TEST_F(AdapterTest, RejectsPairsWithoutABaseTensor) {
  AdapterSpec s;
  s.AddPair("blk.9.attn_q.weight", 64, 4, 64);
  ExpectRejected(s, "tensor 'blk.9.attn_q.weight.lora_a' has no base tensor 'blk.9.attn_q.weight'");
  s.tensors.clear();
  s.AddPair("blk.0.attn_qkv.weight", 64, 4, 128);
  ExpectRejected(s, "no base tensor 'blk.0.attn_qkv.weight'");
  // A tied model has no output.weight (llama.cpp refuses this pair too).
  auto tied = TinyBase(synth::FileType::kQ8_0, /*tied=*/true);
  s.tensors.clear();
  s.AddPair("output.weight", 64, 4, static_cast<uint64_t>(tied.model->config().n_vocab));
  const std::string path = TempPath("tied");
  WriteAdapter(s, path);
  auto a = Adapter::Load("t", path, *tied.model, {});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("no base tensor 'output.weight'"));
}

TEST_F(AdapterTest, RejectsShapesThatDoNotMatchTheBase) {
  AdapterSpec s;
  s.AddPair("blk.0.attn_q.weight", 32, 8, 64);
  ExpectRejected(s,
                 "tensor 'blk.0.attn_q.weight.lora_a' shape [32, 8] does not match base "
                 "'blk.0.attn_q.weight' [64, 64] (expected [64, rank])");
  s.tensors.clear();
  s.AddPair("blk.0.attn_k.weight", 64, 8, 64);  // attn_k's out is kv_dim 32
  ExpectRejected(s,
                 "tensor 'blk.0.attn_k.weight.lora_b' shape [8, 64] does not match base "
                 "'blk.0.attn_k.weight' [64, 32] (expected [rank, 32])");
  s.tensors = {{"blk.0.attn_q.weight.lora_a", {64, 8}, DType::kF32, {}},
               {"blk.0.attn_q.weight.lora_b", {4, 64}, DType::kF32, {}}};
  ExpectRejected(s, "tensor 'blk.0.attn_q.weight.lora_a' [64, 8] is not transposed");
  s.tensors = {{"blk.0.attn_q.weight.lora_a", {64, 4, 2}, DType::kF32, {}},
               {"blk.0.attn_q.weight.lora_b", {4, 64}, DType::kF32, {}}};
  ExpectRejected(s,
                 "tensor 'blk.0.attn_q.weight.lora_a' has shape [64, 4, 2]; a LoRA tensor is 2-D");
  // token_embd is flipped: a ne [rank, n_vocab], b ne [rank, dim].
  const uint64_t vocab = static_cast<uint64_t>(base().config().n_vocab);
  s.tensors = {{"token_embd.weight.lora_a", {64, 4}, DType::kF32, {}},
               {"token_embd.weight.lora_b", {4, vocab}, DType::kF32, {}}};
  ExpectRejected(s,
                 "tensor 'token_embd.weight.lora_a' shape [64, 4] does not match base "
                 "'token_embd.weight' [64, " +
                     std::to_string(vocab) + "]");
  s.tensors = {{"token_embd.weight.lora_a", {4, vocab}, DType::kF32, {}},
               {"token_embd.weight.lora_b", {8, 64}, DType::kF32, {}}};
  ExpectRejected(s, "disagree on the rank");
}

TEST_F(AdapterTest, RejectsRankAboveTheLimit) {
  AdapterSpec s;
  s.AddPair("blk.0.attn_q.weight", 64, 32, 64);
  ExpectRejected(s, "tensor 'blk.0.attn_q.weight.lora_b' has rank 32, above --max-lora-rank 16");
  const std::string path = TempPath("r32");
  WriteAdapter(s, path);
  auto a = Adapter::Load("r", path, base(), LoadOptions{1.0f, 32});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->max_rank(), 32);
}

TEST_F(AdapterTest, RejectsUnsupportedTypesAndNonFiniteValues) {
  AdapterSpec s;
  s.AddPair("blk.0.attn_q.weight", 64, 32, 64, DType::kQ4_0);
  ExpectRejected(s, "tensor 'blk.0.attn_q.weight.lora_a' has type q4_0; adapter weights must be",
                 LoadOptions{1.0f, 32});
  s.tensors.clear();
  s.AddPair("blk.0.attn_q.weight", 64, 4, 64);
  s.tensors[1].values.assign(4 * 64, 0.5f);
  s.tensors[1].values[17] = std::numeric_limits<float>::infinity();
  ExpectRejected(s, "tensor 'blk.0.attn_q.weight.lora_b' contains a non-finite value");
  auto bad_scale = Adapter::Load("x", TempPath("unused"), base(), LoadOptions{NAN, 16});
  EXPECT_THAT(bad_scale.status().message(), HasSubstr("not finite"));
}

TEST_F(AdapterTest, NormTensorsAndPairsOnVectorsHaveNoEffect) {
  // llama.cpp skips "*_norm.weight" tensors, and loads pairs on tensors it never multiplies
  // (norms, biases) without applying them.
  AdapterSpec s;
  s.tensors.push_back({"blk.0.attn_norm.weight", {64}, DType::kF32, {}});
  s.AddPair("blk.0.ffn_norm.weight", 64, 4, 1);
  s.AddPair("blk.1.attn_v.weight", 64, 4, 32);
  const std::string path = TempPath("norm");
  WriteAdapter(s, path);
  auto a = Adapter::Load("n", path, base(), {});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->num_pairs(), 1);
  EXPECT_NE((*a)->Find(1, Target::kV), nullptr);
  // ... but they are still checked against the base's shape, as llama.cpp does.
  s.tensors.clear();
  s.AddPair("blk.0.ffn_norm.weight", 32, 4, 1);
  ExpectRejected(s, "does not match base 'blk.0.ffn_norm.weight' [64]");
}

TEST_F(AdapterTest, EmptyAdapterLoadsInert) {
  AdapterSpec s;
  const std::string path = TempPath("empty");
  WriteAdapter(s, path);
  auto a = Adapter::Load("e", path, base(), {});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->num_pairs(), 0);
  EXPECT_EQ((*a)->bytes(), 0u);
}

TEST_F(AdapterTest, MissingCorruptAndTruncatedFiles) {
  auto missing = Adapter::Load("m", TempPath("does_not_exist"), base(), {});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("does_not_exist"));

  const std::string path = TempPath("good");
  WriteSynthLora(base(), synth::SynthLoraOptions{}, path);
  std::vector<char> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [](const std::string& p, const char* data, size_t n) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(data, static_cast<std::streamsize>(n));
  };
  for (size_t cut : {size_t{0}, size_t{3}, size_t{40}, bytes.size() / 2, bytes.size() - 1}) {
    const std::string p = TempPath("cut" + std::to_string(cut));
    write(p, bytes.data(), cut);
    auto a = Adapter::Load("c", p, base(), {});
    ASSERT_FALSE(a.ok()) << "cut at " << cut;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << a.status().ToString();
    EXPECT_THAT(a.status().message(), HasSubstr(p));
  }
  // Garbage after a valid magic.
  std::vector<char> junk(4096, '\xff');
  std::copy(bytes.begin(), bytes.begin() + 8, junk.begin());
  const std::string p = TempPath("junk");
  write(p, junk.data(), junk.size());
  auto j = Adapter::Load("j", p, base(), {});
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  // A model file given as an adapter.
  const std::string model_path = TempPath("model");
  write(model_path, reinterpret_cast<const char*>(base_.bytes.data()), base_.bytes.size());
  auto m = Adapter::Load("m", model_path, base(), {});
  EXPECT_THAT(m.status().message(), HasSubstr("general.type is missing, expected 'adapter'"));
}

// ---- weight types ----

TEST_F(AdapterTest, F16Bf16Q8_0ConvertWithinRounding) {
  synth::SynthLoraOptions o;
  o.rank = 32;  // lora_b rows of 32 values: Q8_0 blocks fit (a rank below 32 falls back to F16)
  o.include_output = true;
  o.include_embd = true;
  LoadOptions lo{1.0f, 32};
  auto f32 = Synth(o, "f32", lo);
  ASSERT_TRUE(f32.ok()) << f32.status().ToString();
  struct Case {
    DType type;
    double rel;  // bound on |x - x32| / max|x32| per tensor
  };
  for (Case c : {Case{DType::kF16, 1e-3}, Case{DType::kBF16, 8e-3}, Case{DType::kQ8_0, 8e-3}}) {
    o.type = c.type;
    const std::string tag(DTypeName(c.type));
    auto q = Synth(o, tag, lo);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    auto file = gguf::GgufFile::Open(TempPath(tag));
    ASSERT_TRUE(file.ok());
    EXPECT_EQ((*file)->FindTensor("blk.0.attn_q.weight.lora_b")->type, c.type);
    auto close = [&](const LoraPair* x, const LoraPair* ref) {
      ASSERT_NE(x, nullptr);
      for (auto [v, r] : {std::pair{&x->a, &ref->a}, std::pair{&x->b, &ref->b}}) {
        ASSERT_EQ(v->size(), r->size());
        float mx = 0, err = 0;
        for (size_t i = 0; i < r->size(); ++i) {
          mx = std::max(mx, std::fabs((*r)[i]));
          err = std::max(err, std::fabs((*v)[i] - (*r)[i]));
        }
        EXPECT_GT(err, 0.0f) << tag;  // really converted
        EXPECT_LE(err, c.rel * mx) << tag;
      }
    };
    for (int l = 0; l < 2; ++l)
      for (int t = 0; t < kNumTargets; ++t)
        close((*q)->Find(l, static_cast<Target>(t)), (*f32)->Find(l, static_cast<Target>(t)));
    close((*q)->output(), (*f32)->output());
    close((*q)->token_embd(), (*f32)->token_embd());
  }
  // Rank 8 in Q8_0: lora_a (rows of `in`) stays Q8_0, lora_b (rows of 8) is written as F16.
  o.rank = 8;
  o.type = DType::kQ8_0;
  auto q8 = Synth(o, "q8r8", lo);
  ASSERT_TRUE(q8.ok()) << q8.status().ToString();
  auto file = gguf::GgufFile::Open(TempPath("q8r8"));
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->FindTensor("blk.0.attn_q.weight.lora_a")->type, DType::kQ8_0);
  EXPECT_EQ((*file)->FindTensor("blk.0.attn_q.weight.lora_b")->type, DType::kF16);
}

TEST_F(AdapterTest, LoadsAdaptersForQwen2AndItsBiases) {
  auto cfg = synth::Preset("tiny");
  ASSERT_TRUE(cfg.ok());
  cfg->arch = synth::Arch::kQwen2;
  cfg->qkv_bias = true;
  auto qwen = strata::testing::BuildSynthModel(*cfg);
  ASSERT_NE(qwen.model, nullptr);
  synth::SynthLoraOptions o;
  o.include_output = true;
  const std::string path = TempPath("qwen");
  WriteSynthLora(*qwen.model, o, path);
  auto a = Adapter::Load("q", path, *qwen.model, {});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->num_pairs(), 2 * kNumTargets + 1);
  // The same file on a llama base: architecture mismatch.
  auto b = Adapter::Load("q", path, base(), {});
  EXPECT_THAT(b.status().message(), HasSubstr("general.architecture is 'qwen2'"));
  // A pair on a bias (llama.cpp adds biases, never multiplies them): accepted, no effect.
  AdapterSpec s;
  s.Set("general.architecture", gguf::Value::String("qwen2"));
  s.AddPair("blk.0.attn_q.bias", 64, 2, 1);
  WriteAdapter(s, path);
  auto c = Adapter::Load("q", path, *qwen.model, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->num_pairs(), 0);
}

// The llama.cpp-written models of shared/: a synth-lora adapter for each loads against it (and
// not against the other), whatever the base's quantization.
TEST(AdapterSharedTest, SynthAdaptersForTheSharedModelsLoad) {
  STRATA_REQUIRE_SHARED(llama3, "models/tiny-llama3-Q4_K_M.gguf");
  STRATA_REQUIRE_SHARED(qwen2, "models/tiny-qwen2-Q8_0.gguf");
  auto m_llama = model::Model::Load(llama3);
  auto m_qwen = model::Model::Load(qwen2);
  ASSERT_TRUE(m_llama.ok() && m_qwen.ok());
  struct Case {
    const model::Model* m;
    const model::Model* other;
    bool output;
    std::string tag;
  };
  for (const Case& c : {Case{m_llama->get(), m_qwen->get(), true, "llama3"},
                        Case{m_qwen->get(), m_llama->get(), false, "qwen2"}}) {
    synth::SynthLoraOptions o;
    o.rank = 16;
    o.type = DType::kQ8_0;
    o.include_output = c.output;  // qwen2's output is tied to token_embd
    o.include_embd = true;
    const std::string path = TempPath(c.tag);
    WriteSynthLora(*c.m, o, path);
    auto a = Adapter::Load(c.tag, path, *c.m, {});
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ((*a)->num_pairs(), c.m->config().n_layers * kNumTargets + 1 + (c.output ? 1 : 0));
    EXPECT_EQ((*a)->max_rank(), 16);
    auto wrong = Adapter::Load(c.tag, path, *c.other, {});
    EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace strata::lora
