// Writer -> reader round trips, byte layout against a hand-built file, typed getters and display.
#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>

#include "gguf/gguf_test_util.h"

namespace strata::gguf {
namespace {

using testing::ByteBuilder;

std::unique_ptr<GgufFile> MustParse(const std::vector<uint8_t>& bytes) {
  auto r = GgufFile::Parse(bytes);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  return std::move(r).value();
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(GgufWriterTest, EveryScalarTypeRoundTrips) {
  GgufWriter w;
  w.Set("u8", Value::Uint(ValueType::kUint8, 255));
  w.Set("i8", Value::Int(ValueType::kInt8, -128));
  w.Set("u16", Value::Uint(ValueType::kUint16, 65535));
  w.Set("i16", Value::Int(ValueType::kInt16, -32768));
  w.Set("u32", Value::Uint(ValueType::kUint32, 4294967295u));
  w.Set("i32", Value::Int(ValueType::kInt32, std::numeric_limits<int32_t>::min()));
  w.Set("u64", Value::Uint(ValueType::kUint64, std::numeric_limits<uint64_t>::max()));
  w.Set("i64", Value::Int(ValueType::kInt64, std::numeric_limits<int64_t>::min()));
  w.Set("f32", Value::Float32(0.1f));
  w.Set("f64", Value::Float64(M_PI));
  w.Set("bool_t", Value::Bool(true));
  w.Set("bool_f", Value::Bool(false));
  w.Set("str", Value::String(std::string("a\0b\xc3\xa9", 5)));
  w.Set("empty_str", Value::String(""));
  auto buf = w.WriteToBuffer();
  ASSERT_TRUE(buf.ok()) << buf.status().ToString();
  auto f = MustParse(*buf);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 3u);
  ASSERT_EQ(f->metadata().size(), 14u);
  EXPECT_EQ(f->metadata()[0].key, "u8");  // insertion order kept
  EXPECT_EQ(f->Find("u8")->type, ValueType::kUint8);
  EXPECT_EQ(*f->GetUint("u8"), 255u);
  EXPECT_EQ(f->Find("i8")->type, ValueType::kInt8);
  EXPECT_EQ(*f->GetInt("i8"), -128);
  EXPECT_EQ(*f->GetUint("u16"), 65535u);
  EXPECT_EQ(*f->GetInt("i16"), -32768);
  EXPECT_EQ(*f->GetUint("u32"), 4294967295u);
  EXPECT_EQ(f->Find("u32")->type, ValueType::kUint32);
  EXPECT_EQ(*f->GetInt("i32"), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(*f->GetUint("u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f->GetInt("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f->Find("f32")->type, ValueType::kFloat32);
  EXPECT_EQ(static_cast<float>(*f->GetFloat("f32")), 0.1f);
  EXPECT_EQ(*f->GetFloat("f64"), M_PI);
  EXPECT_TRUE(*f->GetBool("bool_t"));
  EXPECT_FALSE(*f->GetBool("bool_f"));
  EXPECT_EQ(*f->GetString("str"), std::string("a\0b\xc3\xa9", 5));
  EXPECT_EQ(*f->GetString("empty_str"), "");
  EXPECT_TRUE(f->tensors().empty());
}

TEST(GgufWriterTest, EveryArrayTypeRoundTrips) {
  GgufWriter w;
  w.Set("a_u8", Value::UintArray(ValueType::kUint8, {0, 1, 255}));
  w.Set("a_i8", Value::IntArray(ValueType::kInt8, {-128, 0, 127}));
  w.Set("a_u16", Value::UintArray(ValueType::kUint16, {65535, 7}));
  w.Set("a_i16", Value::IntArray(ValueType::kInt16, {-32768, 32767}));
  w.Set("a_u32", Value::UintArray(ValueType::kUint32, {4294967295u}));
  w.Set("a_i32", Value::Int32Array({-5, 6, std::numeric_limits<int32_t>::max()}));
  w.Set("a_u64", Value::UintArray(ValueType::kUint64, {std::numeric_limits<uint64_t>::max(), 0}));
  w.Set("a_i64", Value::IntArray(ValueType::kInt64, {std::numeric_limits<int64_t>::min()}));
  w.Set("a_f32", Value::Float32Array({1.5f, -0.25f, 1e-7f}));
  w.Set("a_f64", Value::UintArray(ValueType::kUint64, {}));  // replaced below; order kept
  w.Set("a_f64", Value{ValueType::kArray, ValueType::kFloat64, std::vector<double>{M_E, -1e300}});
  w.Set("a_bool", Value::BoolArray({true, false, true}));
  w.Set("a_str", Value::StringArray({"x", "", "hello world"}));
  w.Set("a_empty", Value::EmptyArray(ValueType::kString));
  w.Set("a_empty_u32", Value::EmptyArray(ValueType::kUint32));
  auto buf = w.WriteToBuffer();
  ASSERT_TRUE(buf.ok()) << buf.status().ToString();
  auto f = MustParse(*buf);
  ASSERT_TRUE(f);
  ASSERT_EQ(f->metadata().size(), 14u);
  EXPECT_EQ(f->metadata()[9].key, "a_f64");
  const Value* v = f->Find("a_u8");
  ASSERT_TRUE(v && v->is_array());
  EXPECT_EQ(v->elem_type, ValueType::kUint8);
  EXPECT_EQ(v->array_size(), 3u);
  EXPECT_EQ(*f->GetIntArray("a_u8"), (std::vector<int64_t>{0, 1, 255}));
  EXPECT_EQ(*f->GetIntArray("a_i8"), (std::vector<int64_t>{-128, 0, 127}));
  EXPECT_EQ(f->Find("a_i8")->elem_type, ValueType::kInt8);
  EXPECT_EQ(*f->GetIntArray("a_u16"), (std::vector<int64_t>{65535, 7}));
  EXPECT_EQ(*f->GetIntArray("a_i16"), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(*f->GetIntArray("a_u32"), (std::vector<int64_t>{4294967295LL}));
  EXPECT_EQ(*f->GetIntArray("a_i32"),
            (std::vector<int64_t>{-5, 6, std::numeric_limits<int32_t>::max()}));
  EXPECT_EQ(f->Find("a_i32")->elem_type, ValueType::kInt32);
  EXPECT_FALSE(f->GetIntArray("a_u64").ok());  // u64 max does not fit i64
  EXPECT_EQ(std::get<std::vector<uint64_t>>(f->Find("a_u64")->data)[0],
            std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f->GetIntArray("a_i64"), (std::vector<int64_t>{std::numeric_limits<int64_t>::min()}));
  EXPECT_EQ(*f->GetFloatArray("a_f32"),
            (std::vector<double>{1.5, -0.25, static_cast<double>(1e-7f)}));
  EXPECT_EQ(f->Find("a_f32")->elem_type, ValueType::kFloat32);
  EXPECT_EQ(*f->GetFloatArray("a_f64"), (std::vector<double>{M_E, -1e300}));
  EXPECT_EQ(std::get<std::vector<uint8_t>>(f->Find("a_bool")->data),
            (std::vector<uint8_t>{1, 0, 1}));
  auto strs = f->GetStringArray("a_str");
  ASSERT_TRUE(strs.ok());
  ASSERT_EQ(strs->size(), 3u);
  EXPECT_EQ((*strs)[2], "hello world");
  EXPECT_EQ(f->Find("a_empty")->array_size(), 0u);
  EXPECT_EQ(f->Find("a_empty")->elem_type, ValueType::kString);
  EXPECT_EQ(f->Find("a_empty_u32")->elem_type, ValueType::kUint32);
}

// Block sizes from the GGUF/ggml format description: q4_0 18 bytes / 32, q8_0 34 / 32,
// q4_K 144 / 256, q6_K 210 / 256, f16 2 / 1.
TEST(GgufWriterTest, TensorsRoundTripAligned) {
  struct Case {
    const char* name;
    DType type;
    std::vector<uint64_t> shape;
    uint64_t bytes;
  };
  std::vector<Case> cases = {
      {"f32", DType::kF32, {3}, 12},
      {"f16", DType::kF16, {5, 3}, 30},
      {"q4_0", DType::kQ4_0, {64, 2}, 2 * 2 * 18},
      {"q8_0", DType::kQ8_0, {32, 1, 3}, 3 * 34},
      {"q4_k", DType::kQ4_K, {512, 2}, 2 * 2 * 144},
      {"q6_k", DType::kQ6_K, {256, 1, 1, 2}, 2 * 210},
      {"bf16", DType::kBF16, {7}, 14},
  };
  GgufWriter w;
  w.Set("general.architecture", Value::String("test"));
  uint32_t seed = 1;
  for (const auto& c : cases) {
    ASSERT_TRUE(w.AddTensor(c.name, c.type, c.shape, RandomBytes(c.bytes, seed++)).ok()) << c.name;
  }
  auto buf = w.WriteToBuffer();
  ASSERT_TRUE(buf.ok());
  auto f = MustParse(*buf);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
  ASSERT_EQ(f->tensors().size(), cases.size());
  seed = 1;
  for (size_t i = 0; i < cases.size(); ++i) {
    const TensorInfo& t = f->tensors()[i];
    EXPECT_EQ(t.name, cases[i].name);  // order of AddTensor kept
    EXPECT_EQ(t.type, cases[i].type);
    EXPECT_EQ(t.shape, cases[i].shape);
    EXPECT_EQ(t.n_bytes, cases[i].bytes);
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_EQ(t.data, buf->data() + f->data_offset() + t.offset);  // points into the input, no copy
    auto expect = RandomBytes(cases[i].bytes, seed++);
    EXPECT_TRUE(std::equal(expect.begin(), expect.end(), t.data)) << t.name;
    EXPECT_EQ(f->FindTensor(cases[i].name), &t);
  }
  EXPECT_EQ(f->tensors()[1].n_elements, 15u);
  EXPECT_EQ(f->FindTensor("nope"), nullptr);
  EXPECT_EQ(buf->size() % 32, 0u);
}

TEST(GgufWriterTest, ByteLayoutMatchesHandBuiltFile) {
  GgufWriter w;
  w.Set("general.architecture", Value::String("llama"));
  w.Set("general.alignment", Value::Uint(ValueType::kUint32, 32));
  std::vector<uint8_t> a, b;
  auto put = [](std::vector<uint8_t>& v, float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    for (int i = 0; i < 4; ++i) v.push_back(static_cast<uint8_t>(bits >> (8 * i)));
  };
  for (int i = 0; i < 4; ++i) put(a, static_cast<float>(i));
  for (int i = 0; i < 16; ++i) put(b, static_cast<float>(100 + i));
  ASSERT_TRUE(w.AddTensor("a", DType::kF32, {4}, a).ok());
  ASSERT_TRUE(w.AddTensor("b", DType::kF32, {8, 2}, b).ok());
  auto buf = w.WriteToBuffer();
  ASSERT_TRUE(buf.ok());
  // The hand-built file pads only up to the end of the last tensor; the writer also pads the
  // final blob to the alignment (as the reference writers do).
  auto expected = testing::SmallValidFile();
  while (expected.size() % 32 != 0) expected.push_back(0);
  EXPECT_EQ(*buf, expected);
}

TEST(GgufWriterTest, CustomAlignmentAndZeroPadding) {
  GgufWriter w;
  w.Set("general.alignment", Value::Uint(ValueType::kUint32, 256));
  ASSERT_TRUE(w.AddTensor("x", DType::kF32, {3}, std::vector<uint8_t>(12, 0xAB)).ok());
  ASSERT_TRUE(w.AddTensor("y", DType::kF32, {1}, std::vector<uint8_t>(4, 0xCD)).ok());
  auto buf = w.WriteToBuffer();
  ASSERT_TRUE(buf.ok());
  auto f = MustParse(*buf);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->alignment(), 256u);
  EXPECT_EQ(f->data_offset(), 256u);
  EXPECT_EQ(f->tensors()[1].offset, 256u);
  EXPECT_EQ(buf->size(), 768u);
  // Every byte that is neither header nor tensor data is zero padding.
  const auto& bytes = *buf;
  for (size_t i = 256 + 12; i < 512; ++i) ASSERT_EQ(bytes[i], 0) << i;
  for (size_t i = 512 + 4; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], 0) << i;
}

TEST(GgufWriterTest, WriteFileThenOpen) {
  std::string path = ::testing::TempDir() + "/gguf_write_test.gguf";
  GgufWriter w;
  w.Set("general.name", Value::String("roundtrip"));
  ASSERT_TRUE(w.AddTensor("t", DType::kF16, {4, 2}, std::vector<uint8_t>(16, 7)).ok());
  ASSERT_TRUE(w.WriteFile(path).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->path(), path);
  EXPECT_EQ(*(*f)->GetString("general.name"), "roundtrip");
  EXPECT_EQ((*f)->file_size(), std::filesystem::file_size(path));
  EXPECT_EQ((*f)->tensors()[0].data[15], 7);
  std::filesystem::remove(path);
}

TEST(GgufWriterTest, WriteFileToMissingDirFails) {
  GgufWriter w;
  Status s = w.WriteFile("/nonexistent-dir-strata/x.gguf");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("/nonexistent-dir-strata/x.gguf.tmp"), std::string::npos);
}

TEST(GgufWriterTest, OpenMissingFileIsNotFound) {
  auto f = GgufFile::Open("/nonexistent-dir-strata/x.gguf");
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
}

TEST(GgufWriterTest, OpenCorruptFileNamesPath) {
  std::string path = ::testing::TempDir() + "/gguf_corrupt_open.gguf";
  std::FILE* fp = std::fopen(path.c_str(), "wb");
  ASSERT_TRUE(fp);
  std::fputs("GGUF\x01", fp);
  std::fclose(fp);
  auto f = GgufFile::Open(path);
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find(path), std::string::npos);
  EXPECT_NE(f.status().message().find("header.version"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(GgufWriterTest, RejectsBadTensors) {
  GgufWriter w;
  EXPECT_EQ(w.AddTensor("t", DType::kF32, {4}, std::vector<uint8_t>(15)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(w.AddTensor("", DType::kF32, {1}, std::vector<uint8_t>(4)).ok());
  EXPECT_FALSE(w.AddTensor("t", DType::kF32, {}, {}).ok());
  EXPECT_FALSE(w.AddTensor("t", DType::kF32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)).ok());
  EXPECT_FALSE(w.AddTensor("t", DType::kF32, {0}, {}).ok());
  EXPECT_FALSE(w.AddTensor("t", DType::kQ4_0, {16}, std::vector<uint8_t>(9)).ok());
  EXPECT_FALSE(w.AddTensor("t", static_cast<DType>(4), {1}, std::vector<uint8_t>(4)).ok());
  ASSERT_TRUE(w.AddTensor("t", DType::kF32, {1}, std::vector<uint8_t>(4)).ok());
  Status dup = w.AddTensor("t", DType::kF32, {1}, std::vector<uint8_t>(4));
  EXPECT_NE(dup.message().find("duplicate"), std::string::npos);
}

TEST(GgufWriterTest, RejectsBadValues) {
  {
    GgufWriter w;
    w.Set("k", Value::Uint(ValueType::kUint8, 256));
    auto r = w.WriteToBuffer();
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("'k'"), std::string::npos);
  }
  {
    GgufWriter w;
    w.Set("k", Value::IntArray(ValueType::kInt16, {40000}));
    EXPECT_FALSE(w.WriteToBuffer().ok());
  }
  {
    GgufWriter w;
    w.Set("nested", Value::EmptyArray(ValueType::kArray));
    auto r = w.WriteToBuffer();
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("nested"), std::string::npos);
  }
  for (uint64_t bad : {0, 3, 48}) {
    GgufWriter w;
    w.Set("general.alignment", Value::Uint(ValueType::kUint32, bad));
    EXPECT_FALSE(w.WriteToBuffer().ok()) << bad;
  }
  {
    GgufWriter w;
    w.Set("general.alignment", Value::Uint(ValueType::kUint64, 32));
    EXPECT_FALSE(w.WriteToBuffer().ok());
  }
}

TEST(GgufReaderTest, AcceptsVersion2) {
  ByteBuilder b;
  b.Header(2, 1, 1)
      .KvStr("general.architecture", "x")
      .Tensor("t", {2}, 0, 0)
      .PadTo(32)
      .F32(1)
      .F32(2);
  auto f = MustParse(b.bytes());
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->tensors()[0].n_bytes, 8u);
}

TEST(GgufReaderTest, HandBuiltFileFacts) {
  auto bytes = testing::SmallValidFile();
  auto f = MustParse(bytes);
  ASSERT_TRUE(f);
  // header 24 + kv "general.architecture" (8+20+4+8+5) + kv "general.alignment" (8+17+4+4)
  // + tensor a (8+1+4+8+4+8) + tensor b (8+1+4+16+4+8) = 24+45+33+33+41 = 176 -> aligned 192.
  EXPECT_EQ(f->data_offset(), 192u);
  EXPECT_EQ(f->tensors()[1].offset, 32u);
  float x;
  std::memcpy(&x, f->tensors()[1].data + 4 * 15, 4);
  EXPECT_EQ(x, 115.0f);
}

TEST(GgufValueTest, TypedGettersConvertAndReportErrors) {
  GgufWriter w;
  w.Set("pos_i32", Value::Int(ValueType::kInt32, 42));
  w.Set("neg_i32", Value::Int(ValueType::kInt32, -1));
  w.Set("big_u64", Value::Uint(ValueType::kUint64, std::numeric_limits<uint64_t>::max()));
  w.Set("u16", Value::Uint(ValueType::kUint16, 9));
  w.Set("name", Value::String("n"));
  w.Set("flag", Value::Bool(true));
  w.Set("f", Value::Float32(2.5f));
  auto buf = w.WriteToBuffer();
  ASSERT_TRUE(buf.ok());
  auto f = MustParse(*buf);
  ASSERT_TRUE(f);
  EXPECT_EQ(*f->GetUint("pos_i32"), 42u);
  EXPECT_EQ(*f->GetInt("u16"), 9);
  EXPECT_EQ(*f->GetFloat("u16"), 9.0);
  EXPECT_EQ(*f->GetFloat("f"), 2.5);

  auto neg = f->GetUint("neg_i32");
  EXPECT_EQ(neg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(neg.status().message().find("neg_i32"), std::string::npos);
  EXPECT_NE(neg.status().message().find("i32"), std::string::npos);

  auto big = f->GetInt("big_u64");
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("big_u64"), std::string::npos);

  auto wrong = f->GetUint("name");
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("'name'"), std::string::npos);
  EXPECT_NE(wrong.status().message().find("string"), std::string::npos);
  EXPECT_FALSE(f->GetString("u16").ok());
  EXPECT_FALSE(f->GetBool("u16").ok());
  EXPECT_FALSE(f->GetFloat("name").ok());
  EXPECT_FALSE(f->GetStringArray("name").ok());
  EXPECT_FALSE(f->GetIntArray("u16").ok());

  EXPECT_EQ(f->GetString("missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*f->GetUintOr("missing", 7), 7u);
  EXPECT_EQ(*f->GetUintOr("u16", 7), 9u);
  EXPECT_FALSE(f->GetUintOr("name", 7).ok());
  EXPECT_EQ(*f->GetFloatOr("missing", 1.5), 1.5);
  EXPECT_TRUE(*f->GetBoolOr("flag", false));
  EXPECT_EQ(*f->GetStringOr("missing", "d"), "d");
  EXPECT_FALSE(f->GetBoolOr("name", false).ok());
}

TEST(GgufValueTest, DisplayStrings) {
  EXPECT_EQ(Value::Uint(ValueType::kUint32, 128256).ToDisplayString(), "128256");
  EXPECT_EQ(Value::Int(ValueType::kInt8, -3).ToDisplayString(), "-3");
  EXPECT_EQ(Value::Float32(0.1f).ToDisplayString(), "0.1");
  EXPECT_EQ(Value::Float64(1e-5).ToDisplayString(), "1e-05");
  EXPECT_EQ(Value::Float32(500000.0f).ToDisplayString(), "500000");
  EXPECT_EQ(Value::Float64(-2.5).ToDisplayString(), "-2.5");
  EXPECT_EQ(Value::Float64(1e300).ToDisplayString(), "1e+300");
  EXPECT_EQ(Value::Bool(false).ToDisplayString(), "false");
  EXPECT_EQ(Value::String("a\"b\n").ToDisplayString(), "\"a\\\"b\\n\"");
  std::vector<int64_t> many(128256);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i) + 1;
  EXPECT_EQ(Value::IntArray(ValueType::kInt32, many).ToDisplayString(3),
            "[1, 2, 3, ... (128256 items)]");
  EXPECT_EQ(Value::StringArray({"x", "y"}).ToDisplayString(), "[\"x\", \"y\"]");
  EXPECT_EQ(Value::BoolArray({true}).ToDisplayString(), "[true]");
  EXPECT_EQ(Value::EmptyArray(ValueType::kUint8).ToDisplayString(), "[]");
  EXPECT_EQ(Value::StringArray({"a", "b"}).ToDisplayString(0), "[... (2 items)]");
  std::string long_str(1000, 'z');
  std::string shown = Value::String(long_str).ToDisplayString();
  EXPECT_LT(shown.size(), 200u);
  EXPECT_NE(shown.find("(1000 bytes)"), std::string::npos);
}

TEST(GgufValueTest, NamesAndSizes) {
  EXPECT_EQ(ValueTypeName(ValueType::kFloat64), "f64");
  EXPECT_EQ(ValueTypeName(ValueType::kString), "string");
  EXPECT_EQ(Value::Uint(ValueType::kUint8, 1).array_size(), 0u);
  EXPECT_EQ(Value::Float32Array({1, 2}).array_size(), 2u);
}

}  // namespace
}  // namespace strata::gguf
