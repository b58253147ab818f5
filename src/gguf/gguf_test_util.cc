#include "gguf/gguf_test_util.h"

#include <cstring>

namespace strata::gguf::testing {

ByteBuilder& ByteBuilder::Le(uint64_t v, int n) {
  for (int i = 0; i < n; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

ByteBuilder& ByteBuilder::F32(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return U32(b);
}

ByteBuilder& ByteBuilder::F64(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  return U64(b);
}

ByteBuilder& ByteBuilder::Raw(const std::string& s) {
  bytes_.insert(bytes_.end(), s.begin(), s.end());
  return *this;
}

ByteBuilder& ByteBuilder::Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  return Raw("GGUF").U32(version).U64(n_tensors).U64(n_kv);
}

ByteBuilder& ByteBuilder::Tensor(const std::string& name, std::initializer_list<uint64_t> dims,
                                 uint32_t type, uint64_t offset) {
  Str(name).U32(static_cast<uint32_t>(dims.size()));
  for (uint64_t d : dims) U64(d);
  return U32(type).U64(offset);
}

ByteBuilder& ByteBuilder::PadTo(uint64_t align) {
  while (bytes_.size() % align != 0) bytes_.push_back(0);
  return *this;
}

ByteBuilder& ByteBuilder::Zeros(uint64_t n) {
  bytes_.insert(bytes_.end(), n, 0);
  return *this;
}

::testing::AssertionResult ParseFailsWith(const std::vector<uint8_t>& bytes,
                                          std::initializer_list<std::string> needles,
                                          const ReadOptions& opts) {
  auto r = GgufFile::Parse(bytes, opts);
  if (r.ok()) return ::testing::AssertionFailure() << "parse unexpectedly succeeded";
  if (r.status().code() != StatusCode::kInvalidArgument)
    return ::testing::AssertionFailure() << "wrong code: " << r.status().ToString();
  for (const auto& n : needles) {
    if (r.status().message().find(n) == std::string::npos)
      return ::testing::AssertionFailure()
             << "message lacks '" << n << "': " << r.status().message();
  }
  return ::testing::AssertionSuccess() << r.status().message();
}

std::vector<uint8_t> SmallValidFile() {
  ByteBuilder b;
  b.Header(3, 2, 2).KvStr("general.architecture", "llama").KvU32("general.alignment", 32);
  b.Tensor("a", {4}, 0, 0).Tensor("b", {8, 2}, 0, 32);
  b.PadTo(32);
  for (int i = 0; i < 4; ++i) b.F32(static_cast<float>(i));
  b.PadTo(32);
  for (int i = 0; i < 16; ++i) b.F32(static_cast<float>(100 + i));
  return b.bytes();
}

}  // namespace strata::gguf::testing
