// Reads the real GGUF files under the shared directory and checks facts stated in
// shared/models/README.md and shared/vocab/README.md (independent of this reader).
#include <gtest/gtest.h>

#include <map>

#include "gguf/gguf.h"
#include "testing/shared_dir.h"

namespace strata::gguf {
namespace {

std::unique_ptr<GgufFile> MustOpen(const std::string& path) {
  auto r = GgufFile::Open(path);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  return std::move(r).value();
}

void ExpectTensor(const GgufFile& f, const std::string& name, DType type,
                  std::vector<uint64_t> shape) {
  const TensorInfo* t = f.FindTensor(name);
  ASSERT_NE(t, nullptr) << name;
  EXPECT_EQ(t->type, type) << name;
  EXPECT_EQ(t->shape, shape) << name;
}

// Invariants every well-formed file must satisfy.
void ExpectSane(const GgufFile& f) {
  EXPECT_EQ(f.data_offset() % f.alignment(), 0u);
  for (const auto& t : f.tensors()) {
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    EXPECT_LE(f.data_offset() + t.offset + t.n_bytes, f.file_size()) << t.name;
    EXPECT_NE(t.data, nullptr);
  }
}

TEST(GgufSharedTest, TinyLlama3Q4KM) {
  STRATA_REQUIRE_SHARED(path, "models/tiny-llama3-Q4_K_M.gguf");
  auto f = MustOpen(path);
  ASSERT_TRUE(f);
  ExpectSane(*f);
  EXPECT_EQ(f->file_size(), 53892032u);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_EQ(*f->GetUint("llama.block_count"), 2u);
  EXPECT_EQ(*f->GetUint("llama.embedding_length"), 256u);
  EXPECT_EQ(*f->GetUint("llama.attention.head_count"), 8u);
  EXPECT_EQ(*f->GetUint("llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(*f->GetUint("llama.feed_forward_length"), 512u);
  EXPECT_EQ(*f->GetUint("llama.rope.dimension_count"), 32u);
  EXPECT_EQ(*f->GetUint("llama.context_length"), 131072u);
  EXPECT_EQ(*f->GetFloat("llama.rope.freq_base"), 500000.0);
  EXPECT_NEAR(*f->GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  auto tokens = f->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->size(), 128256u);
  EXPECT_EQ((*tokens)[128000], "<|begin_of_text|>");
  EXPECT_EQ((*tokens)[128009], "<|eot_id|>");
  EXPECT_EQ(f->Find("tokenizer.ggml.merges")->array_size(), 280147u);
  EXPECT_EQ(*f->GetUint("tokenizer.ggml.bos_token_id"), 128000u);
  EXPECT_EQ(*f->GetUint("tokenizer.ggml.eos_token_id"), 128001u);
  EXPECT_EQ(*f->GetString("tokenizer.ggml.pre"), "llama-bpe");

  ExpectTensor(*f, "token_embd.weight", DType::kQ4_K, {256, 128256});
  ExpectTensor(*f, "output.weight", DType::kQ6_K, {256, 128256});
  ExpectTensor(*f, "blk.1.attn_v.weight", DType::kQ6_K, {256, 64});
  ExpectTensor(*f, "blk.1.ffn_down.weight", DType::kQ6_K, {512, 256});
  ExpectTensor(*f, "blk.0.attn_v.weight", DType::kQ4_K, {256, 64});
  ExpectTensor(*f, "blk.0.attn_q.weight", DType::kQ4_K, {256, 256});
  ExpectTensor(*f, "blk.0.ffn_gate.weight", DType::kQ4_K, {256, 512});
  ExpectTensor(*f, "blk.0.attn_norm.weight", DType::kF32, {256});
  ExpectTensor(*f, "rope_freqs.weight", DType::kF32, {16});
  // 2 layers x 9 tensors + token_embd, output_norm, output, rope_freqs.
  EXPECT_EQ(f->tensors().size(), 22u);
  // rope_freqs: [1 x8, 2.69453, 8 x7].
  const TensorInfo* rf = f->FindTensor("rope_freqs.weight");
  float v[16];
  std::memcpy(v, rf->data, sizeof(v));
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_NEAR(v[8], 2.69453f, 1e-4);
  EXPECT_EQ(v[15], 8.0f);
  // token_embd Q4_K: 128256 rows of one 144-byte block (256 columns).
  EXPECT_EQ(f->FindTensor("token_embd.weight")->n_bytes, 128256u * 144u);
}

TEST(GgufSharedTest, TinyQwen2Q8_0) {
  STRATA_REQUIRE_SHARED(path, "models/tiny-qwen2-Q8_0.gguf");
  auto f = MustOpen(path);
  ASSERT_TRUE(f);
  ExpectSane(*f);
  EXPECT_EQ(*f->GetString("general.architecture"), "qwen2");
  EXPECT_EQ(*f->GetUint("qwen2.block_count"), 2u);
  EXPECT_EQ(*f->GetUint("qwen2.context_length"), 32768u);
  EXPECT_EQ(*f->GetUint("qwen2.attention.head_count"), 4u);
  EXPECT_EQ(*f->GetUint("qwen2.attention.head_count_kv"), 2u);
  EXPECT_EQ(f->FindTensor("output.weight"), nullptr);  // tied embeddings
  ExpectTensor(*f, "token_embd.weight", DType::kQ8_0, {256, 151936});
  ExpectTensor(*f, "blk.0.attn_q.bias", DType::kF32, {256});
  ExpectTensor(*f, "blk.1.attn_k.bias", DType::kF32, {128});
  ExpectTensor(*f, "blk.1.ffn_down.weight", DType::kQ8_0, {512, 256});
  EXPECT_EQ(f->Find("tokenizer.ggml.tokens")->array_size(), 151936u);
  EXPECT_EQ(f->Find("tokenizer.ggml.merges")->array_size(), 151387u);
  EXPECT_EQ(*f->GetUint("tokenizer.ggml.bos_token_id"), 151643u);
  int q8 = 0;
  for (const auto& t : f->tensors()) q8 += t.type == DType::kQ8_0;
  EXPECT_EQ(q8, 15);  // "all 15 matrices Q8_0 (incl. token_embd)"
}

TEST(GgufSharedTest, Llama2TinyRandomF16) {
  STRATA_REQUIRE_SHARED(path, "models/llama-2-tiny-random.gguf");
  auto f = MustOpen(path);
  ASSERT_TRUE(f);
  ExpectSane(*f);
  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_EQ(*f->GetUint("llama.embedding_length"), 8u);
  EXPECT_EQ(*f->GetUint("llama.block_count"), 1u);
  EXPECT_EQ(*f->GetUint("llama.feed_forward_length"), 32u);
  EXPECT_EQ(*f->GetUint("llama.context_length"), 4096u);
  EXPECT_EQ(*f->GetUint("llama.attention.head_count"), 2u);
  EXPECT_EQ(*f->GetString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f->Find("tokenizer.ggml.tokens")->array_size(), 32000u);
  EXPECT_EQ(f->Find("tokenizer.ggml.scores")->array_size(), 32000u);
  EXPECT_EQ(*f->GetUint("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(*f->GetUint("tokenizer.ggml.eos_token_id"), 2u);
  ExpectTensor(*f, "token_embd.weight", DType::kF16, {8, 32000});
  ExpectTensor(*f, "output.weight", DType::kF16, {8, 32000});
  ExpectTensor(*f, "blk.0.ffn_up.weight", DType::kF16, {8, 32});
  EXPECT_EQ(f->FindTensor("token_embd.weight")->n_bytes, 8u * 32000u * 2u);
}

struct VocabFact {
  const char* file;
  const char* model;
  uint64_t tokens;
  uint64_t merges;  // 0: no merges key
  uint64_t bos, eos;
};

TEST(GgufSharedTest, VocabFiles) {
  const VocabFact facts[] = {
      {"vocab/llama3-vocab.gguf", "gpt2", 128256, 280147, 128000, 128001},
      {"vocab/qwen2-vocab.gguf", "gpt2", 151936, 151387, 151643, 151643},
      {"vocab/gpt-2-vocab.gguf", "gpt2", 50257, 50000, 50256, 50256},
      {"vocab/deepseek-coder-vocab.gguf", "gpt2", 32256, 31757, 32013, 32014},
      {"vocab/llama-spm-vocab.gguf", "llama", 32000, 0, 1, 2},
      {"vocab/phi-3-vocab.gguf", "llama", 32064, 0, 1, 32000},
  };
  int seen = 0;
  for (const auto& fact : facts) {
    std::string path = ::strata::testing::SharedPath(fact.file);
    if (path.empty()) continue;
    ++seen;
    SCOPED_TRACE(fact.file);
    auto f = MustOpen(path);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(*f->GetString("tokenizer.ggml.model"), fact.model);
    EXPECT_EQ(f->Find("tokenizer.ggml.tokens")->array_size(), fact.tokens);
    EXPECT_EQ(f->Find("tokenizer.ggml.token_type")->array_size(), fact.tokens);
    if (fact.merges) {
      EXPECT_EQ(f->Find("tokenizer.ggml.merges")->array_size(), fact.merges);
    } else {
      EXPECT_FALSE(f->Has("tokenizer.ggml.merges"));
    }
    EXPECT_EQ(*f->GetUint("tokenizer.ggml.bos_token_id"), fact.bos);
    EXPECT_EQ(*f->GetUint("tokenizer.ggml.eos_token_id"), fact.eos);
  }
  if (seen == 0) GTEST_SKIP() << "shared vocab files not found";
}

}  // namespace
}  // namespace strata::gguf
