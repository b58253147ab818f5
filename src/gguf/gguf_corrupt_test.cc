// Hand-crafted corrupt files: each corrupts one field of an otherwise valid file and checks that
// parsing fails with InvalidArgument and a message naming the field.
#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "gguf/gguf_test_util.h"

namespace strata::gguf {
namespace {

using testing::ByteBuilder;
using testing::ParseFailsWith;

constexpr uint32_t kF32 = 0, kQ4_0 = 2, kQ4_K = 12;
constexpr uint32_t kTypeU32 = 4, kTypeString = 8, kTypeArray = 9, kTypeBool = 7;

// A file with one tensor described by the caller; data is zero-filled to `data_bytes`.
std::vector<uint8_t> OneTensor(const std::string& name, std::initializer_list<uint64_t> dims,
                               uint32_t type, uint64_t offset, uint64_t data_bytes) {
  ByteBuilder b;
  b.Header(3, 1, 0).Tensor(name, dims, type, offset).PadTo(32).Zeros(data_bytes);
  return b.bytes();
}

TEST(GgufCorruptTest, EmptyFile) { EXPECT_TRUE(ParseFailsWith({}, {"header.magic", "empty"})); }

TEST(GgufCorruptTest, BadMagic) {
  auto bytes = testing::SmallValidFile();
  bytes[0] = 'X';
  EXPECT_TRUE(ParseFailsWith(bytes, {"header.magic"}));
}

TEST(GgufCorruptTest, ShortMagic) {
  EXPECT_TRUE(ParseFailsWith({'G', 'G', 'U'}, {"header.magic"}));
}

TEST(GgufCorruptTest, Version1Rejected) {
  ByteBuilder b;
  b.Raw("GGUF").U32(1).U32(0).U32(0);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"header.version", "version 1"}));
}

TEST(GgufCorruptTest, Version4Rejected) {
  ByteBuilder b;
  b.Header(4, 0, 0);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"header.version", "unknown GGUF version 4"}));
}

TEST(GgufCorruptTest, BigEndianVersionRejected) {
  ByteBuilder b;
  b.Raw("GGUF").U32(0x03000000).U64(0).U64(0);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"header.version", "big-endian"}));
}

TEST(GgufCorruptTest, TruncatedInVersion) {
  ByteBuilder b;
  b.Raw("GGUF").U16(3);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"header.version", "truncated"}));
}

TEST(GgufCorruptTest, TruncatedInTensorCount) {
  ByteBuilder b;
  b.Raw("GGUF").U32(3).U32(0);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"header.tensor_count", "truncated"}));
}

TEST(GgufCorruptTest, TruncatedInKvCount) {
  ByteBuilder b;
  b.Raw("GGUF").U32(3).U64(0).U32(0);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"header.kv_count", "truncated"}));
}

TEST(GgufCorruptTest, HugeTensorCount) {
  ByteBuilder b;
  b.Header(3, uint64_t{1} << 62, 0);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"header.tensor_count"}));
}

TEST(GgufCorruptTest, TensorCountAboveOptionLimit) {
  ByteBuilder b;
  b.Header(3, 3, 0).Zeros(4096);
  ReadOptions opts;
  opts.max_tensors = 2;
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"header.tensor_count", "limit of 2"}, opts));
}

TEST(GgufCorruptTest, HugeKvCount) {
  ByteBuilder b;
  b.Header(3, 0, ~uint64_t{0});
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"header.kv_count"}));
}

TEST(GgufCorruptTest, HugeKeyLength) {
  ByteBuilder b;
  b.Header(3, 0, 1).U64(~uint64_t{0}).Zeros(16);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"metadata[0].key", "string length"}));
}

TEST(GgufCorruptTest, KeyLengthPastEnd) {
  ByteBuilder b;
  b.Header(3, 0, 1).U64(20).Raw("short").Zeros(8);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"metadata[0].key", "past end of file"}));
}

TEST(GgufCorruptTest, HugeStringValueLength) {
  ByteBuilder b;
  b.Header(3, 0, 1).Str("general.name").U32(kTypeString).U64(uint64_t{1} << 40).Raw("abc");
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"metadata 'general.name'", "string length"}));
}

TEST(GgufCorruptTest, UnknownValueType) {
  ByteBuilder b;
  b.Header(3, 0, 1).Str("k.weird").U32(13).U32(0);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"metadata 'k.weird'", "unknown value type 13"}));
}

TEST(GgufCorruptTest, UnknownArrayElementType) {
  ByteBuilder b;
  b.Header(3, 0, 1).Str("k.arr").U32(kTypeArray).U32(99).U64(0);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"metadata 'k.arr'", "array element type", "99"}));
}

TEST(GgufCorruptTest, NestedArrayRejected) {
  ByteBuilder b;
  b.Header(3, 0, 1)
      .Str("k.nested")
      .U32(kTypeArray)
      .U32(kTypeArray)
      .U64(1)
      .U32(kTypeU32)
      .U64(1)
      .U32(5);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"metadata 'k.nested'", "nested arrays"}));
}

TEST(GgufCorruptTest, HugeArrayCount) {
  ByteBuilder b;
  b.Header(3, 0, 1)
      .Str("tokenizer.ggml.scores")
      .U32(kTypeArray)
      .U32(6)
      .U64(uint64_t{1} << 60)
      .Zeros(64);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"metadata 'tokenizer.ggml.scores'", "array count"}));
}

TEST(GgufCorruptTest, ArrayCountPastEndOfFile) {
  // 1000 strings need at least 8000 bytes; only a few are present.
  ByteBuilder b;
  b.Header(3, 0, 1)
      .Str("tokenizer.ggml.tokens")
      .U32(kTypeArray)
      .U32(kTypeString)
      .U64(1000)
      .Str("a")
      .Str("b");
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"metadata 'tokenizer.ggml.tokens'", "array count 1000"}));
}

TEST(GgufCorruptTest, ArrayCountAboveOptionLimit) {
  ByteBuilder b;
  b.Header(3, 0, 1).Str("k").U32(kTypeArray).U32(0).U64(10).Zeros(10);
  ReadOptions opts;
  opts.max_array_elems = 5;
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"metadata 'k'", "limit of 5"}, opts));
}

TEST(GgufCorruptTest, StringInArrayPastEnd) {
  ByteBuilder b;
  b.Header(3, 0, 1)
      .Str("tokenizer.ggml.merges")
      .U32(kTypeArray)
      .U32(kTypeString)
      .U64(2)
      .Str("a b")
      .U64(500)
      .Zeros(8);
  EXPECT_TRUE(
      ParseFailsWith(b.bytes(), {"metadata 'tokenizer.ggml.merges'[1]", "string length 500"}));
}

TEST(GgufCorruptTest, BoolNotZeroOrOne) {
  ByteBuilder b;
  b.Header(3, 0, 1).Str("k.flag").U32(kTypeBool).U8(2);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"metadata 'k.flag'", "bool"}));
}

TEST(GgufCorruptTest, DuplicateKey) {
  ByteBuilder b;
  b.Header(3, 0, 2).KvU32("llama.block_count", 2).KvU32("llama.block_count", 3);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"metadata 'llama.block_count'", "duplicate key"}));
}

TEST(GgufCorruptTest, DuplicateTensorName) {
  ByteBuilder b;
  b.Header(3, 2, 0).Tensor("w", {8}, kF32, 0).Tensor("w", {8}, kF32, 32).PadTo(32).Zeros(64);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"tensor 'w'", "duplicate tensor name"}));
}

TEST(GgufCorruptTest, EmptyTensorName) {
  EXPECT_TRUE(ParseFailsWith(OneTensor("", {8}, kF32, 0, 32), {"tensor[0]", "empty tensor name"}));
}

TEST(GgufCorruptTest, HugeTensorNameLength) {
  ByteBuilder b;
  b.Header(3, 1, 0).U64(~uint64_t{0} - 3).Zeros(40);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"tensor[0].name", "string length"}));
}

TEST(GgufCorruptTest, NDimsZero) {
  ByteBuilder b;
  b.Header(3, 1, 0).Str("t").U32(0).U32(kF32).U64(0).Zeros(64);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"tensor 't'", "n_dims 0"}));
}

TEST(GgufCorruptTest, NDimsFive) {
  EXPECT_TRUE(
      ParseFailsWith(OneTensor("t5", {1, 1, 1, 1, 1}, kF32, 0, 32), {"tensor 't5'", "n_dims 5"}));
}

TEST(GgufCorruptTest, ZeroDim) {
  EXPECT_TRUE(
      ParseFailsWith(OneTensor("z", {4, 0}, kF32, 0, 32), {"tensor 'z'", "dim[1]", "zero"}));
}

TEST(GgufCorruptTest, DimProductOverflow) {
  EXPECT_TRUE(ParseFailsWith(OneTensor("big", {uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0, 32),
                             {"tensor 'big'", "overflow"}));
}

TEST(GgufCorruptTest, DimAboveInt64Max) {
  EXPECT_TRUE(
      ParseFailsWith(OneTensor("neg", {~uint64_t{0}}, kF32, 0, 32), {"tensor 'neg'", "dim[0]"}));
}

TEST(GgufCorruptTest, ByteSizeOverflow) {
  // Elements fit in int64 but bytes (x4 for f32) do not fit in u64.
  EXPECT_TRUE(ParseFailsWith(OneTensor("wide", {uint64_t{1} << 31, uint64_t{1} << 31}, kF32, 0, 32),
                             {"tensor 'wide'"}));
}

TEST(GgufCorruptTest, Ne0NotMultipleOfBlockSize) {
  EXPECT_TRUE(
      ParseFailsWith(OneTensor("q", {48, 2}, kQ4_0, 0, 128), {"tensor 'q'", "block size 32"}));
  EXPECT_TRUE(
      ParseFailsWith(OneTensor("k", {128}, kQ4_K, 0, 256), {"tensor 'k'", "block size 256"}));
}

TEST(GgufCorruptTest, UnknownTensorType) {
  EXPECT_TRUE(
      ParseFailsWith(OneTensor("u", {4}, 4, 0, 32), {"tensor 'u'", "unknown tensor type 4"}));
  EXPECT_TRUE(
      ParseFailsWith(OneTensor("u", {4}, 1000, 0, 32), {"tensor 'u'", "unknown tensor type 1000"}));
}

TEST(GgufCorruptTest, OffsetNotAligned) {
  EXPECT_TRUE(
      ParseFailsWith(OneTensor("o", {4}, kF32, 4, 64), {"tensor 'o'", "offset 4", "alignment 32"}));
}

TEST(GgufCorruptTest, TensorPastEndOfFile) {
  EXPECT_TRUE(ParseFailsWith(OneTensor("blk.0.attn_q.weight", {16}, kF32, 0, 60),
                             {"tensor 'blk.0.attn_q.weight'", "past end of file"}));
  EXPECT_TRUE(ParseFailsWith(OneTensor("far", {4}, kF32, 1 << 20, 64),
                             {"tensor 'far'", "past end of file"}));
}

TEST(GgufCorruptTest, OffsetOverflow) {
  EXPECT_TRUE(ParseFailsWith(OneTensor("ovf", {4}, kF32, ~uint64_t{0} - 31, 64),
                             {"tensor 'ovf'", "past end"}));
}

TEST(GgufCorruptTest, AlignmentZero) {
  ByteBuilder b;
  b.Header(3, 0, 1).KvU32("general.alignment", 0);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"general.alignment", "power of two"}));
}

TEST(GgufCorruptTest, AlignmentThree) {
  ByteBuilder b;
  b.Header(3, 0, 1).KvU32("general.alignment", 3);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"general.alignment", "alignment 3"}));
}

TEST(GgufCorruptTest, AlignmentAsString) {
  ByteBuilder b;
  b.Header(3, 0, 1).KvStr("general.alignment", "32");
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"general.alignment", "must be u32", "string"}));
}

TEST(GgufCorruptTest, AlignmentAsU64) {
  ByteBuilder b;
  b.Header(3, 0, 1).Str("general.alignment").U32(10).U64(32);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"general.alignment", "u64"}));
}

TEST(GgufCorruptTest, OverlappingTensors) {
  ByteBuilder b;
  b.Header(3, 2, 0)
      .Tensor("first", {16}, kF32, 0)
      .Tensor("second", {8}, kF32, 32)
      .PadTo(32)
      .Zeros(128);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"tensor 'second'", "overlaps tensor 'first'"}));
}

TEST(GgufCorruptTest, SameOffsetTensors) {
  ByteBuilder b;
  b.Header(3, 2, 0).Tensor("x", {8}, kF32, 0).Tensor("y", {8}, kF32, 0).PadTo(32).Zeros(64);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"overlaps"}));
}

TEST(GgufCorruptTest, TruncatedInTensorInfo) {
  // Exactly 32 bytes after the header (the minimum one tensor info needs) but the offset field
  // is cut after 7 of its 8 bytes.
  ByteBuilder b;
  b.Header(3, 1, 0).Str("t").U32(1).U64(4).U32(kF32).Zeros(7);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"tensor 't'", "offset", "truncated"}));
}

TEST(GgufCorruptTest, TruncatedInMetadataValue) {
  ByteBuilder b;
  b.Header(3, 0, 1).Str("llama.context_length").U32(kTypeU32).U16(0);
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"metadata 'llama.context_length'", "truncated"}));
}

TEST(GgufCorruptTest, DataSectionMissing) {
  ByteBuilder b;
  b.Header(3, 1, 0).Tensor("t", {4}, kF32, 0);  // no padding, no data
  EXPECT_TRUE(ParseFailsWith(b.bytes(), {"tensor 't'", "past end of file"}));
}

// Every proper prefix of a valid file must fail cleanly (and never crash or read out of bounds).
TEST(GgufCorruptTest, EveryTruncationFails) {
  GgufWriter w;
  w.Set("general.architecture", Value::String("llama"));
  w.Set("llama.block_count", Value::Uint(ValueType::kUint32, 2));
  w.Set("tokenizer.ggml.tokens", Value::StringArray({"<s>", "</s>", "a"}));
  w.Set("tokenizer.ggml.scores", Value::Float32Array({0, 0, -1}));
  w.Set("flags", Value::BoolArray({true, false}));
  ASSERT_TRUE(w.AddTensor("w", DType::kQ8_0, {32, 2}, std::vector<uint8_t>(68, 1)).ok());
  ASSERT_TRUE(w.AddTensor("n", DType::kF32, {5}, std::vector<uint8_t>(20, 2)).ok());
  auto full = w.WriteToBuffer();
  ASSERT_TRUE(full.ok());
  ASSERT_TRUE(GgufFile::Parse(*full).ok());
  // The last tensor ends 20 bytes into its 32-byte slot; cutting the trailing padding is fine.
  const size_t last_needed = full->size() - 12;
  for (size_t n = 0; n < full->size(); ++n) {
    // Copy into an exact-size buffer so ASan would see any read past the prefix.
    std::vector<uint8_t> prefix(full->begin(), full->begin() + static_cast<std::ptrdiff_t>(n));
    auto r = GgufFile::Parse(prefix);
    if (n < last_needed) {
      ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
      ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << n;
      ASSERT_FALSE(r.status().message().empty());
    } else {
      ASSERT_TRUE(r.ok()) << n << ": " << r.status().ToString();
    }
  }
}

// Flipping any single byte must never crash; the result is either an error or a parse whose
// tensors all lie inside the buffer.
TEST(GgufCorruptTest, SingleByteCorruptionsNeverEscapeTheBuffer) {
  auto base = testing::SmallValidFile();
  int errors = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    for (uint8_t x : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x80}, uint8_t{0x01}}) {
      auto bytes = base;
      bytes[i] ^= x == 0 ? 0x10 : x;
      auto r = GgufFile::Parse(bytes);
      if (!r.ok()) {
        ++errors;
        continue;
      }
      for (const auto& t : (*r)->tensors()) {
        ASSERT_GE(t.data, bytes.data());
        ASSERT_LE(t.data + t.n_bytes, bytes.data() + bytes.size());
      }
    }
  }
  EXPECT_GT(errors, 100);
}

}  // namespace
}  // namespace strata::gguf
