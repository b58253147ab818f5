#include "synth/synth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "kernels/kernels.h"
#include "testing/shared_dir.h"

namespace strata::synth {
namespace {

// A vocabulary made here, so most tests do not depend on the tokenizer module's contents.
tokenizer::Vocab TestVocab(size_t n) {
  tokenizer::Vocab v;
  v.kind = tokenizer::Vocab::Kind::kSpm;
  v.model = "llama";
  for (size_t i = 0; i < n; ++i) {
    v.tokens.push_back("t" + std::to_string(i));
    v.scores.push_back(-static_cast<float>(i));
    v.types.push_back(i < 3 ? tokenizer::TokenType::kControl : tokenizer::TokenType::kNormal);
  }
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  v.add_bos = true;
  return v;
}

std::string TempPath(const std::string& stem) {
  return (std::filesystem::temp_directory_path() /
          (stem + "-" + std::to_string(::getpid()) + ".gguf"))
      .string();
}

std::vector<uint8_t> Build(const SynthConfig& c, const tokenizer::Vocab& v, ThreadPool* pool) {
  gguf::GgufWriter w;
  auto st = BuildModel(c, v, pool, &w);
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  auto buf = w.WriteToBuffer();
  EXPECT_TRUE(buf.ok()) << buf.status().ToString();
  return buf.ok() ? std::move(buf).value() : std::vector<uint8_t>{};
}

std::vector<float> Dequantize(const gguf::TensorInfo& t) {
  std::vector<float> out(t.n_elements);
  const uint64_t rows = t.n_elements / t.shape[0];
  const uint64_t rb = *RowBytes(t.type, t.shape[0]);
  for (uint64_t r = 0; r < rows; ++r) {
    if (t.type == DType::kF32) {
      std::memcpy(out.data() + r * t.shape[0], t.data + r * rb, rb);
    } else {
      kernels::DequantizeRow(t.type, t.data + r * rb, out.data() + r * t.shape[0], t.shape[0]);
    }
  }
  return out;
}

double Mean(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += v;
  return s / static_cast<double>(x.size());
}
double Std(const std::vector<float>& x) {
  const double m = Mean(x);
  double s = 0;
  for (float v : x) s += (v - m) * (v - m);
  return std::sqrt(s / static_cast<double>(x.size()));
}

// ---- Config ----

TEST(SynthConfigTest, PresetsAreValidAndMatchTheirSpec) {
  for (auto name : PresetNames()) {
    auto c = Preset(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_TRUE(c->Validate().ok()) << name << ": " << c->Validate().ToString();
  }
  auto b = Preset("llama-3.2-1b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->dim, 2048u);
  EXPECT_EQ(b->n_layers, 16u);
  EXPECT_EQ(b->n_kv_heads, 8u);
  EXPECT_EQ(b->EffectiveHeadDim(), 64u);
  EXPECT_TRUE(b->rope_scaling.enabled);
  EXPECT_FALSE(b->tied);
  auto q = Preset("qwen2-0.5b");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->arch, Arch::kQwen2);
  EXPECT_EQ(q->EffectiveHeadDim(), 64u);
  EXPECT_TRUE(q->tied && q->qkv_bias);
  EXPECT_FALSE(Preset("7b").ok());
}

TEST(SynthConfigTest, ValidateRejectsBadConfigs) {
  auto expect_bad = [](const char* what, auto mutate, const char* needle) {
    SynthConfig c = *Preset("tiny");
    mutate(c);
    Status s = c.Validate();
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(needle), std::string::npos) << what << ": " << s.message();
  };
  expect_bad(
      "zero layers", [](SynthConfig& c) { c.n_layers = 0; }, "n_layers");
  expect_bad(
      "zero dim", [](SynthConfig& c) { c.dim = 0; }, "dim");
  expect_bad(
      "zero heads", [](SynthConfig& c) { c.n_heads = 0; }, "n_heads");
  expect_bad(
      "zero ffn", [](SynthConfig& c) { c.ffn = 0; }, "ffn");
  expect_bad(
      "heads not dividing dim",
      [](SynthConfig& c) {
        c.n_heads = 5;
        c.n_kv_heads = 5;
      },
      "divide dim");
  expect_bad(
      "kv not dividing heads", [](SynthConfig& c) { c.n_kv_heads = 3; }, "n_kv_heads");
  expect_bad(
      "odd head dim", [](SynthConfig& c) { c.head_dim = 7; }, "head_dim");
  expect_bad(
      "rope dim > head dim", [](SynthConfig& c) { c.rope_dim = 32; }, "rope_dim");
  expect_bad(
      "zero eps", [](SynthConfig& c) { c.rms_eps = 0; }, "rms_eps");
  expect_bad(
      "nan rope base", [](SynthConfig& c) { c.rope_base = std::nan(""); }, "rope_base");
  expect_bad(
      "qwen2 without bias", [](SynthConfig& c) { c.arch = Arch::kQwen2; }, "qwen2");
  expect_bad(
      "bad rope scaling",
      [](SynthConfig& c) {
        c.rope_scaling.enabled = true;
        c.rope_scaling.high_freq_factor = 0.5;
      },
      "high_freq_factor");
  expect_bad(
      "huge",
      [](SynthConfig& c) {
        c.dim = 1 << 20;
        c.ffn = 1 << 20;
        c.n_layers = 1000;
      },
      "parameters");
  expect_bad(
      "too many layers", [](SynthConfig& c) { c.n_layers = 100000; }, "n_layers");
}

TEST(SynthConfigTest, ParsesFileTypes) {
  EXPECT_EQ(ParseFileType("Q4_K_M"), FileType::kQ4_K_M);
  EXPECT_EQ(ParseFileType("q4_k"), FileType::kQ4_K_S);
  EXPECT_EQ(ParseFileType("bf16"), FileType::kBF16);
  EXPECT_FALSE(ParseFileType("q3_k").has_value());
  // general.file_type values are llama.cpp's llama_ftype numbers.
  EXPECT_EQ(static_cast<uint32_t>(FileType::kQ4_0), 2u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::kQ8_0), 7u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::kQ4_K_M), 15u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::kQ5_K_M), 17u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::kBF16), 32u);
}

// ---- Rope scaling ----

TEST(SynthRopeTest, Llama3FactorsMatchPublishedValues) {
  // shared/models/README.md: head 32, base 500000, factor 8, low 1, high 4, original 8192 gives
  // [1 x8, 2.69453, 8 x7].
  auto f = Llama3RopeFactors(32, 500000.0, RopeScaling{true, 8.0, 1.0, 4.0, 8192});
  ASSERT_EQ(f.size(), 16u);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(f[i], 1.0f) << i;
  EXPECT_NEAR(f[8], 2.69453f, 1e-4);
  for (int i = 9; i < 16; ++i) EXPECT_FLOAT_EQ(f[i], 8.0f) << i;
}

TEST(SynthRopeTest, Llama3FactorsMatchConvertedModel) {
  STRATA_REQUIRE_SHARED(path, "models/tiny-llama3-Q4_K_M.gguf");
  auto g = gguf::GgufFile::Open(path);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const gguf::TensorInfo* t = (*g)->FindTensor("rope_freqs.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, DType::kF32);
  auto f = Llama3RopeFactors(32, 500000.0, RopeScaling{true, 8.0, 1.0, 4.0, 8192});
  ASSERT_EQ(t->n_elements, f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    float ref;
    std::memcpy(&ref, t->data + 4 * i, 4);
    EXPECT_NEAR(f[i], ref, 1e-5f * ref) << i;
  }
}

// ---- Type rules ----

std::map<std::string, DType> TypesOf(const SynthConfig& c) {
  auto plan = PlanTensors(c);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  std::map<std::string, DType> m;
  if (plan.ok())
    for (const auto& t : *plan) m[t.name] = t.type;
  return m;
}

SynthConfig Aligned16Layers(FileType ft) {
  SynthConfig c;
  c.n_layers = 16;
  c.dim = 256;
  c.n_heads = 4;
  c.n_kv_heads = 1;
  c.ffn = 512;
  c.n_vocab = 1000;
  c.file_type = ft;
  return c;
}

TEST(SynthTypesTest, Q4KMMixOnAlignedConfig) {
  auto m = TypesOf(Aligned16Layers(FileType::kQ4_K_M));
  // use_more_bits on 16 layers: first 2, last 2, and (i - 2) % 3 == 2 -> {0,1,4,7,10,13,14,15}.
  const std::set<int> more = {0, 1, 4, 7, 10, 13, 14, 15};
  EXPECT_EQ(m["token_embd.weight"], DType::kQ4_K);
  EXPECT_EQ(m["output.weight"], DType::kQ6_K);
  EXPECT_EQ(m["output_norm.weight"], DType::kF32);
  for (int l = 0; l < 16; ++l) {
    auto p = "blk." + std::to_string(l) + ".";
    DType expect = more.count(l) ? DType::kQ6_K : DType::kQ4_K;
    EXPECT_EQ(m[p + "attn_v.weight"], expect) << l;
    EXPECT_EQ(m[p + "ffn_down.weight"], expect) << l;
    EXPECT_EQ(m[p + "attn_q.weight"], DType::kQ4_K) << l;
    EXPECT_EQ(m[p + "attn_k.weight"], DType::kQ4_K) << l;
    EXPECT_EQ(m[p + "attn_output.weight"], DType::kQ4_K) << l;
    EXPECT_EQ(m[p + "ffn_gate.weight"], DType::kQ4_K) << l;
    EXPECT_EQ(m[p + "ffn_up.weight"], DType::kQ4_K) << l;
    EXPECT_EQ(m[p + "attn_norm.weight"], DType::kF32) << l;
    EXPECT_EQ(m[p + "ffn_norm.weight"], DType::kF32) << l;
  }
  auto m5 = TypesOf(Aligned16Layers(FileType::kQ5_K_M));
  EXPECT_EQ(m5["blk.4.attn_v.weight"], DType::kQ6_K);
  EXPECT_EQ(m5["blk.5.attn_v.weight"], DType::kQ5_K);
  EXPECT_EQ(m5["token_embd.weight"], DType::kQ5_K);
}

TEST(SynthTypesTest, SmallKMixAndPlainTypes) {
  auto s = TypesOf(Aligned16Layers(FileType::kQ4_K_S));
  for (int l = 0; l < 16; ++l) {
    auto p = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(s[p + "attn_v.weight"], l < 4 ? DType::kQ5_K : DType::kQ4_K) << l;
    EXPECT_EQ(s[p + "ffn_down.weight"], l < 2 ? DType::kQ5_K : DType::kQ4_K) << l;
  }
  // Q4_0 keeps output.weight in Q6_K; Q8_0 keeps it in Q8_0.
  auto q4 = TypesOf(Aligned16Layers(FileType::kQ4_0));
  EXPECT_EQ(q4["output.weight"], DType::kQ6_K);
  EXPECT_EQ(q4["token_embd.weight"], DType::kQ4_0);
  EXPECT_EQ(q4["blk.0.attn_v.weight"], DType::kQ4_0);
  auto q8 = TypesOf(Aligned16Layers(FileType::kQ8_0));
  EXPECT_EQ(q8["output.weight"], DType::kQ8_0);
  // Float files: every matrix in that type, no mix.
  auto f16 = TypesOf(Aligned16Layers(FileType::kF16));
  EXPECT_EQ(f16["output.weight"], DType::kF16);
  EXPECT_EQ(f16["blk.0.attn_norm.weight"], DType::kF32);
  // Tied: token_embd is the output projection and gets its type.
  SynthConfig tied = Aligned16Layers(FileType::kQ4_0);
  tied.tied = true;
  auto t = TypesOf(tied);
  EXPECT_EQ(t["token_embd.weight"], DType::kQ6_K);
  EXPECT_EQ(t.count("output.weight"), 0u);
}

TEST(SynthTypesTest, RowLengthFallbacks) {
  SynthConfig c = *Preset("tiny");  // dim 64, ffn 128: no row is a multiple of 256
  c.n_vocab = 300;
  c.file_type = FileType::kQ4_K_M;
  for (const auto& [name, type] : TypesOf(c)) {
    if (name.find("norm") != std::string::npos) {
      EXPECT_EQ(type, DType::kF32) << name;
    } else {
      EXPECT_EQ(type, DType::kQ8_0) << name;
    }
  }
  c.file_type = FileType::kQ4_0;
  EXPECT_EQ(TypesOf(c)["output.weight"], DType::kQ8_0);  // Q6_K does not fit 64 -> Q8_0
  EXPECT_EQ(TypesOf(c)["blk.0.attn_q.weight"], DType::kQ4_0);
  c.dim = 48;  // not a multiple of 32 either
  c.n_heads = 4;
  c.n_kv_heads = 2;
  EXPECT_EQ(TypesOf(c)["blk.0.attn_q.weight"], DType::kF16);
  EXPECT_EQ(TypesOf(c)["blk.0.ffn_down.weight"], DType::kQ4_0);  // ffn 128
}

// Our plan for the shape of each shared model must equal what llama.cpp's converter + quantizer
// produced (names, shapes, types).
void ExpectPlanMatchesFile(const SynthConfig& c, const std::string& path) {
  auto g = gguf::GgufFile::Open(path);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto plan = PlanTensors(c);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::map<std::string, std::pair<DType, std::vector<uint64_t>>> ours, theirs;
  for (const auto& t : *plan) ours[t.name] = {t.type, t.shape};
  for (const auto& t : (*g)->tensors()) theirs[t.name] = {t.type, t.shape};
  ASSERT_EQ(ours.size(), theirs.size());
  for (const auto& [name, v] : theirs) {
    auto it = ours.find(name);
    ASSERT_NE(it, ours.end()) << name;
    EXPECT_EQ(it->second.first, v.first)
        << name << ": ours " << DTypeName(it->second.first) << ", llama.cpp " << DTypeName(v.first);
    EXPECT_EQ(it->second.second, v.second) << name;
  }
  // Architecture metadata written the same way.
  // Only the metadata matters here (a small vocabulary keeps it quick).
  SynthConfig cc = c;
  cc.n_vocab = 0;
  tokenizer::Vocab v = TestVocab(300);
  gguf::GgufWriter w;
  auto ok = BuildModel(cc, v, nullptr, &w);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto buf = w.WriteToBuffer();
  ASSERT_TRUE(buf.ok());
  auto mine = gguf::GgufFile::Parse(*buf);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  const std::string a(ArchName(c.arch));
  for (auto key : {".context_length", ".embedding_length", ".block_count", ".feed_forward_length",
                   ".attention.head_count", ".attention.head_count_kv", ".rope.dimension_count"}) {
    auto theirs_v = (*g)->GetUint(a + key);
    if (!theirs_v.ok()) continue;  // the converter does not write every key for every arch
    EXPECT_EQ(*(*mine)->GetUint(a + key), *theirs_v) << key;
  }
  for (auto key : {".attention.layer_norm_rms_epsilon", ".rope.freq_base"}) {
    EXPECT_FLOAT_EQ(static_cast<float>(*(*mine)->GetFloat(a + key)),
                    static_cast<float>(*(*g)->GetFloat(a + key)))
        << key;
  }
  EXPECT_EQ(*(*mine)->GetUint("general.file_type"), *(*g)->GetUint("general.file_type"));
}

TEST(SynthTypesTest, PlanMatchesLlamaCppQ4KMFile) {
  STRATA_REQUIRE_SHARED(path, "models/tiny-llama3-Q4_K_M.gguf");
  SynthConfig c;
  c.n_layers = 2;
  c.dim = 256;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.ffn = 512;
  c.n_vocab = 128256;
  c.ctx_len = 131072;
  c.rope_base = 500000;
  c.rope_scaling = RopeScaling{true, 8.0, 1.0, 4.0, 8192};
  c.file_type = FileType::kQ4_K_M;
  ExpectPlanMatchesFile(c, path);
}

TEST(SynthTypesTest, PlanMatchesLlamaCppQwen2Q80File) {
  STRATA_REQUIRE_SHARED(path, "models/tiny-qwen2-Q8_0.gguf");
  SynthConfig c = *Preset("qwen2-0.5b");
  c.n_layers = 2;
  c.dim = 256;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn = 512;
  c.n_vocab = 151936;
  c.file_type = FileType::kQ8_0;
  ExpectPlanMatchesFile(c, path);
}

// ---- Files ----

TEST(SynthFileTest, TinyReadsBackWithEveryKeyAndTensor) {
  SynthConfig c = *Preset("tiny");
  c.seed = 7;
  tokenizer::Vocab v = TestVocab(300);
  v.chat_template = "{{ messages }}";
  ThreadPool pool(2);
  const std::string path = TempPath("synth-tiny");
  auto st = WriteModel(c, v, &pool, path);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  auto g = gguf::GgufFile::Open(path);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const auto& f = **g;
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetUint("general.file_type"), 7u);
  EXPECT_EQ(*f.GetUint("general.quantization_version"), 2u);
  EXPECT_EQ(*f.GetUint("general.alignment"), 32u);
  EXPECT_EQ(*f.GetUint("llama.context_length"), 2048u);
  EXPECT_EQ(*f.GetUint("llama.embedding_length"), 64u);
  EXPECT_EQ(*f.GetUint("llama.block_count"), 2u);
  EXPECT_EQ(*f.GetUint("llama.feed_forward_length"), 128u);
  EXPECT_EQ(*f.GetUint("llama.attention.head_count"), 4u);
  EXPECT_EQ(*f.GetUint("llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(*f.GetUint("llama.rope.dimension_count"), 16u);
  EXPECT_EQ(*f.GetUint("llama.vocab_size"), 300u);
  EXPECT_NEAR(*f.GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
  EXPECT_NEAR(*f.GetFloat("llama.rope.freq_base"), 10000.0, 1e-3);
  EXPECT_EQ(*f.GetString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f.GetStringArray("tokenizer.ggml.tokens")->size(), 300u);
  EXPECT_EQ(f.GetFloatArray("tokenizer.ggml.scores")->size(), 300u);
  auto tt = f.GetIntArray("tokenizer.ggml.token_type");
  ASSERT_TRUE(tt.ok());
  EXPECT_EQ((*tt)[1], 3);
  EXPECT_EQ((*tt)[5], 1);
  EXPECT_EQ(*f.GetUint("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(*f.GetUint("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(*f.GetUint("tokenizer.ggml.unknown_token_id"), 0u);
  EXPECT_FALSE(f.Has("tokenizer.ggml.padding_token_id"));
  EXPECT_FALSE(f.Has("tokenizer.ggml.merges"));
  EXPECT_TRUE(*f.GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(*f.GetBool("tokenizer.ggml.add_eos_token"));
  EXPECT_TRUE(*f.GetBool("tokenizer.ggml.add_space_prefix"));
  EXPECT_EQ(*f.GetString("tokenizer.chat_template"), "{{ messages }}");

  // 1 embedding + 9 per layer + output_norm + output.
  EXPECT_EQ(f.tensors().size(), 1u + 2 * 9 + 2);
  EXPECT_EQ(st->n_tensors, f.tensors().size());
  struct Want {
    const char* name;
    std::vector<uint64_t> shape;
    DType type;
  };
  const Want want[] = {
      {"token_embd.weight", {64, 300}, DType::kQ8_0},
      {"output_norm.weight", {64}, DType::kF32},
      {"output.weight", {64, 300}, DType::kQ8_0},
      {"blk.1.attn_norm.weight", {64}, DType::kF32},
      {"blk.1.attn_q.weight", {64, 64}, DType::kQ8_0},
      {"blk.1.attn_k.weight", {64, 32}, DType::kQ8_0},
      {"blk.1.attn_v.weight", {64, 32}, DType::kQ8_0},
      {"blk.1.attn_output.weight", {64, 64}, DType::kQ8_0},
      {"blk.1.ffn_norm.weight", {64}, DType::kF32},
      {"blk.1.ffn_gate.weight", {64, 128}, DType::kQ8_0},
      {"blk.1.ffn_up.weight", {64, 128}, DType::kQ8_0},
      {"blk.1.ffn_down.weight", {128, 64}, DType::kQ8_0},
  };
  uint64_t params = 0;
  for (const auto& t : f.tensors()) params += t.n_elements;
  EXPECT_EQ(st->n_params, params);
  for (const auto& w : want) {
    const gguf::TensorInfo* t = f.FindTensor(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->shape, w.shape) << w.name;
    EXPECT_EQ(t->type, w.type) << w.name;
  }
  EXPECT_EQ(f.FindTensor("rope_freqs.weight"), nullptr);
  std::filesystem::remove(path);
}

TEST(SynthFileTest, Qwen2HasBiasesAndNoOutput) {
  SynthConfig c = *Preset("qwen2-0.5b");
  c.n_layers = 1;
  c.dim = 128;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.ffn = 256;
  auto buf = Build(c, TestVocab(100), nullptr);
  auto g = gguf::GgufFile::Parse(buf);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(*(*g)->GetString("general.architecture"), "qwen2");
  EXPECT_EQ((*g)->FindTensor("output.weight"), nullptr);
  for (auto [name, n] : {std::pair<const char*, uint64_t>{"blk.0.attn_q.bias", 128},
                         {"blk.0.attn_k.bias", 64},
                         {"blk.0.attn_v.bias", 64}}) {
    const gguf::TensorInfo* t = (*g)->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->type, DType::kF32);
    EXPECT_EQ(t->shape, std::vector<uint64_t>{n});
  }
  EXPECT_NEAR(*(*g)->GetFloat("qwen2.attention.layer_norm_rms_epsilon"), 1e-6, 1e-10);
}

TEST(SynthFileTest, SameSeedSameBytesAnyThreadCount) {
  SynthConfig c = *Preset("tiny");
  c.dim = 256;
  c.ffn = 512;
  c.file_type = FileType::kQ4_K_M;
  const auto v = TestVocab(500);
  ThreadPool two(2);
  auto a = Build(c, v, nullptr);
  auto b = Build(c, v, &two);
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b);
  c.seed = 2;
  auto d = Build(c, v, &two);
  ASSERT_EQ(a.size(), d.size());
  EXPECT_FALSE(a == d);
  // Every generated tensor differs under another seed (rope_freqs excepted: it is not random).
  auto ga = gguf::GgufFile::Parse(a);
  auto gd = gguf::GgufFile::Parse(d);
  ASSERT_TRUE(ga.ok() && gd.ok());
  for (const auto& t : (*ga)->tensors()) {
    const gguf::TensorInfo* u = (*gd)->FindTensor(t.name);
    ASSERT_NE(u, nullptr);
    ASSERT_EQ(t.n_bytes, u->n_bytes);
    EXPECT_NE(std::memcmp(t.data, u->data, t.n_bytes), 0) << t.name;
  }
}

TEST(SynthFileTest, VocabMismatchIsAnError) {
  SynthConfig c = *Preset("tiny");
  c.n_vocab = 10;
  gguf::GgufWriter w;
  auto st = BuildModel(c, TestVocab(20), nullptr, &w);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("n_vocab"), std::string::npos);
  tokenizer::Vocab bad = TestVocab(20);
  bad.eos = 25;
  c.n_vocab = 0;
  EXPECT_FALSE(BuildModel(c, bad, nullptr, &w).ok());
  EXPECT_FALSE(BuildModel(c, tokenizer::Vocab{}, nullptr, &w).ok());
}

// Weight statistics follow the recipe (std per tensor role, norms in [0.8, 1.2], log-normal rows).
void CheckStats(FileType ft, double tol) {
  SynthConfig c;
  c.n_layers = 1;
  c.dim = 256;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn = 512;
  c.qkv_bias = true;
  c.file_type = ft;
  auto buf = Build(c, TestVocab(2000), nullptr);
  auto g = gguf::GgufFile::Parse(buf);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto std_of = [&](const char* name) { return Std(Dequantize(*(*g)->FindTensor(name))); };
  EXPECT_NEAR(std_of("token_embd.weight"), 0.5, 0.5 * tol);
  EXPECT_NEAR(std_of("blk.0.attn_q.weight"), 2.0 / 16, 2.0 / 16 * tol);
  EXPECT_NEAR(std_of("blk.0.attn_k.weight"), 2.0 / 16, 2.0 / 16 * tol);
  EXPECT_NEAR(std_of("blk.0.attn_v.weight"), 1.0 / 16, 1.0 / 16 * tol);
  EXPECT_NEAR(std_of("blk.0.ffn_gate.weight"), 1.0 / 16, 1.0 / 16 * tol);
  EXPECT_NEAR(std_of("blk.0.ffn_up.weight"), 1.0 / 16, 1.0 / 16 * tol);
  EXPECT_NEAR(std_of("blk.0.attn_output.weight"), 1.0 / 16, 1.0 / 16 * tol);
  EXPECT_NEAR(std_of("blk.0.ffn_down.weight"), 1.0 / std::sqrt(512.0),
              1.0 / std::sqrt(512.0) * tol);
  EXPECT_NEAR(std_of("blk.0.attn_q.bias"), 0.3, 0.3 * 0.2);  // only 256 samples
  EXPECT_NEAR(Mean(Dequantize(*(*g)->FindTensor("blk.0.attn_q.weight"))), 0.0, 0.01);
  for (auto name : {"blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"}) {
    auto x = Dequantize(*(*g)->FindTensor(name));
    for (float v : x) {
      EXPECT_GE(v, 0.8f);
      EXPECT_LE(v, 1.2f);
    }
    EXPECT_NEAR(Mean(x), 1.0, 0.03) << name;
  }
  // output rows: std 0.5 * exp(N(0, 0.8^2)) -> log of the row std has mean log 0.5, std 0.8.
  auto out = Dequantize(*(*g)->FindTensor("output.weight"));
  std::vector<float> logs;
  for (size_t r = 0; r < 2000; ++r) {
    std::vector<float> row(out.begin() + r * 256, out.begin() + (r + 1) * 256);
    logs.push_back(static_cast<float>(std::log(Std(row))));
  }
  EXPECT_NEAR(Mean(logs), std::log(0.5), 0.06);
  EXPECT_NEAR(Std(logs), 0.8, 0.06);
}

// The values are Gaussian, tails included: standardised values pooled over the F32 matrices of
// one layer (~590k samples) against normal-distribution facts.
TEST(SynthStatsTest, F32WeightsAreGaussian) {
  SynthConfig c;
  c.n_layers = 1;
  c.dim = 256;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn = 512;
  c.file_type = FileType::kF32;
  auto buf = Build(c, TestVocab(10), nullptr);
  auto g = gguf::GgufFile::Parse(buf);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::vector<double> z;
  for (auto [name, std] : {std::pair<const char*, double>{"blk.0.attn_q.weight", 2.0 / 16},
                           {"blk.0.attn_k.weight", 2.0 / 16},
                           {"blk.0.attn_v.weight", 1.0 / 16},
                           {"blk.0.attn_output.weight", 1.0 / 16},
                           {"blk.0.ffn_gate.weight", 1.0 / 16},
                           {"blk.0.ffn_up.weight", 1.0 / 16},
                           {"blk.0.ffn_down.weight", 1.0 / std::sqrt(512.0)}}) {
    for (float v : Dequantize(*(*g)->FindTensor(name))) z.push_back(v / std);
  }
  const double n = static_cast<double>(z.size());
  ASSERT_EQ(z.size(), 589824u);
  double m2 = 0, m3 = 0, m4 = 0, mean = 0;
  size_t over2 = 0, over3 = 0, over4 = 0, positive = 0;
  for (double v : z) {
    mean += v;
    m2 += v * v;
    m3 += v * v * v;
    m4 += v * v * v * v;
    over2 += std::fabs(v) > 2;
    over3 += std::fabs(v) > 3;
    over4 += std::fabs(v) > 4;
    positive += v > 0;
  }
  mean /= n;
  m2 /= n;
  EXPECT_NEAR(mean, 0.0, 0.006);
  EXPECT_NEAR(m2, 1.0, 0.01);
  EXPECT_NEAR(m3 / n, 0.0, 0.03);              // skewness 0
  EXPECT_NEAR(m4 / n / (m2 * m2), 3.0, 0.05);  // kurtosis 3
  EXPECT_NEAR(static_cast<double>(positive) / n, 0.5, 0.003);
  // P(|Z| > 2) = 0.045500, P(|Z| > 3) = 0.0026998, P(|Z| > 4) = 6.334e-5 (about 37 here).
  EXPECT_NEAR(static_cast<double>(over2) / n, 0.045500, 0.0012);
  EXPECT_NEAR(static_cast<double>(over3) / n, 0.0026998, 0.0003);
  EXPECT_GE(over4, 17u);
  EXPECT_LE(over4, 60u);
}

TEST(SynthStatsTest, F32WeightsHaveIntendedStd) { CheckStats(FileType::kF32, 0.03); }
TEST(SynthStatsTest, Q8_0WeightsHaveIntendedStd) { CheckStats(FileType::kQ8_0, 0.04); }
TEST(SynthStatsTest, Q4_K_MWeightsHaveIntendedStd) { CheckStats(FileType::kQ4_K_M, 0.12); }

// ---- Vocabularies ----

TEST(SynthVocabTest, SentencePieceModelGives32000Tokens) {
  STRATA_REQUIRE_SHARED(path, "models/llama2-tokenizer.model");
  auto v = LoadVocab(path);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->tokens.size(), 32000u);
  SynthConfig c = *Preset("tiny");
  auto buf = Build(c, *v, nullptr);
  auto g = gguf::GgufFile::Parse(buf);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(*(*g)->GetUint("llama.vocab_size"), 32000u);
  EXPECT_EQ((*g)->FindTensor("token_embd.weight")->shape, (std::vector<uint64_t>{64, 32000}));
  EXPECT_EQ(*(*g)->GetString("tokenizer.ggml.model"), "llama");
  // Llama 2 facts: BOS 1, EOS 2, UNK 0.
  EXPECT_EQ(*(*g)->GetUint("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(*(*g)->GetUint("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(*(*g)->GetUint("tokenizer.ggml.unknown_token_id"), 0u);
  // The vocabulary reads back identical.
  auto back = tokenizer::VocabFromGguf(**g);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tokens, v->tokens);
  EXPECT_EQ(back->scores, v->scores);
}

TEST(SynthVocabTest, GgufVocabRoundTrips) {
  STRATA_REQUIRE_SHARED(path, "models/tiny-qwen2-Q8_0.gguf");
  auto v = LoadVocab(path);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->tokens.size(), 151936u);
  SynthConfig c = *Preset("tiny");
  c.n_layers = 1;
  auto buf = Build(c, *v, nullptr);
  auto g = gguf::GgufFile::Parse(buf);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto back = tokenizer::VocabFromGguf(**g);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tokens, v->tokens);
  EXPECT_EQ(back->merges, v->merges);
  EXPECT_EQ(back->pre, "qwen2");
  EXPECT_EQ(back->bos, v->bos);
  EXPECT_EQ(back->eos, v->eos);
  EXPECT_EQ(back->add_bos, v->add_bos);
}

TEST(SynthVocabTest, MissingFileIsAnError) {
  auto v = LoadVocab("/nonexistent/vocab.model");
  EXPECT_FALSE(v.ok());
}

}  // namespace
}  // namespace strata::synth
