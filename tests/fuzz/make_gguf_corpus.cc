// Writes the seed corpus for the GGUF fuzzer: small valid files from GgufWriter and a few
// corrupt variants. Run by hand: make_gguf_corpus tests/fuzz/gguf/corpus
#include <cstdio>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace {

using namespace strata;
using namespace strata::gguf;

bool Save(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return (std::fclose(f) == 0) && ok;
}

std::vector<uint8_t> Must(const GgufWriter& w) {
  auto r = w.WriteToBuffer();
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
    std::exit(1);
  }
  return *r;
}

void PutU64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  bool ok = true;

  GgufWriter empty;
  ok &= Save(dir, "empty_v3.gguf", Must(empty));

  GgufWriter scalars;
  scalars.Set("general.architecture", Value::String("llama"));
  scalars.Set("u8", Value::Uint(ValueType::kUint8, 200));
  scalars.Set("i8", Value::Int(ValueType::kInt8, -100));
  scalars.Set("u16", Value::Uint(ValueType::kUint16, 60000));
  scalars.Set("i16", Value::Int(ValueType::kInt16, -30000));
  scalars.Set("u32", Value::Uint(ValueType::kUint32, 4000000000u));
  scalars.Set("i32", Value::Int(ValueType::kInt32, -2000000000));
  scalars.Set("u64", Value::Uint(ValueType::kUint64, ~uint64_t{0}));
  scalars.Set("i64", Value::Int(ValueType::kInt64, -1));
  scalars.Set("f32", Value::Float32(1e-5f));
  scalars.Set("f64", Value::Float64(3.25));
  scalars.Set("b", Value::Bool(true));
  auto scalar_bytes = Must(scalars);
  ok &= Save(dir, "scalars.gguf", scalar_bytes);

  GgufWriter arrays;
  arrays.Set("tokenizer.ggml.model", Value::String("gpt2"));
  arrays.Set("tokenizer.ggml.tokens", Value::StringArray({"a", "b", "ab", "<s>"}));
  arrays.Set("tokenizer.ggml.scores", Value::Float32Array({0, -1, -2, 0}));
  arrays.Set("tokenizer.ggml.token_type", Value::Int32Array({1, 1, 1, 3}));
  arrays.Set("tokenizer.ggml.merges", Value::StringArray({"a b"}));
  arrays.Set("flags", Value::BoolArray({true, false}));
  arrays.Set("u8s", Value::UintArray(ValueType::kUint8, {1, 2, 3}));
  arrays.Set("i64s", Value::IntArray(ValueType::kInt64, {-5, 5}));
  arrays.Set("f64s", Value{ValueType::kArray, ValueType::kFloat64, std::vector<double>{0.5}});
  arrays.Set("none", Value::EmptyArray(ValueType::kUint32));
  ok &= Save(dir, "arrays.gguf", Must(arrays));

  GgufWriter tensors;
  tensors.Set("general.architecture", Value::String("llama"));
  tensors.Set("llama.block_count", Value::Uint(ValueType::kUint32, 1));
  tensors.AddTensor("f32", DType::kF32, {4}, std::vector<uint8_t>(16, 1)).ok();
  tensors.AddTensor("f16", DType::kF16, {2, 3}, std::vector<uint8_t>(12, 2)).ok();
  tensors.AddTensor("q4_0", DType::kQ4_0, {32, 2}, std::vector<uint8_t>(36, 3)).ok();
  tensors.AddTensor("q8_0", DType::kQ8_0, {32, 1, 2}, std::vector<uint8_t>(68, 4)).ok();
  tensors.AddTensor("q4_k", DType::kQ4_K, {256}, std::vector<uint8_t>(144, 5)).ok();
  tensors.AddTensor("q6_k", DType::kQ6_K, {256, 1, 1, 1}, std::vector<uint8_t>(210, 6)).ok();
  auto tensor_bytes = Must(tensors);
  ok &= Save(dir, "tensors.gguf", tensor_bytes);

  GgufWriter aligned;
  aligned.Set("general.alignment", Value::Uint(ValueType::kUint32, 64));
  aligned.AddTensor("x", DType::kBF16, {3}, std::vector<uint8_t>(6, 9)).ok();
  aligned.AddTensor("y", DType::kI32, {2}, std::vector<uint8_t>(8, 9)).ok();
  ok &= Save(dir, "align64.gguf", Must(aligned));

  // Corrupt variants of the valid files.
  auto v = tensor_bytes;
  v[4] = 1;  // version 1
  ok &= Save(dir, "bad_version1.gguf", v);
  v = tensor_bytes;
  v[0] = 'X';
  ok &= Save(dir, "bad_magic.gguf", v);
  v = tensor_bytes;
  PutU64(v, 8, uint64_t{1} << 40);  // tensor_count
  ok &= Save(dir, "huge_tensor_count.gguf", v);
  v = scalar_bytes;
  PutU64(v, 16, ~uint64_t{0});  // kv_count
  ok &= Save(dir, "huge_kv_count.gguf", v);
  v = scalar_bytes;
  PutU64(v, 24, uint64_t{1} << 50);  // first key length
  ok &= Save(dir, "huge_key_len.gguf", v);
  v = tensor_bytes;
  v.resize(v.size() / 2);
  ok &= Save(dir, "truncated_data.gguf", v);
  v = tensor_bytes;
  v.resize(60);
  ok &= Save(dir, "truncated_meta.gguf", v);
  v = scalar_bytes;
  v[24 + 8 + 20] = 13;  // value type of general.architecture -> unknown
  ok &= Save(dir, "unknown_value_type.gguf", v);
  GgufWriter dup_like;
  dup_like.Set("general.alignment", Value::Uint(ValueType::kUint32, 32));
  dup_like.Set("general.alignmenu", Value::Uint(ValueType::kUint32, 32));
  v = Must(dup_like);
  v[24 + 33 + 8 + 16] = 't';  // second key becomes "general.alignment" again
  ok &= Save(dir, "duplicate_key.gguf", v);
  GgufWriter bad_align;
  bad_align.Set("general.alignment", Value::Uint(ValueType::kUint32, 32));
  v = Must(bad_align);
  v[24 + 8 + 17 + 4] = 3;  // alignment value 32 -> 3
  ok &= Save(dir, "alignment3.gguf", v);

  if (!ok) {
    std::fprintf(stderr, "failed to write corpus into %s\n", dir.c_str());
    return 1;
  }
  return 0;
}
