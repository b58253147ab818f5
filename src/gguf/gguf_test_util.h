// Test helpers for the GGUF module: a byte builder that lays out GGUF structures by hand (written
// from the format description, independent of GgufWriter) and error-matching helpers.
// Test-only; not thread-safe.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace strata::gguf::testing {

class ByteBuilder {
 public:
  ByteBuilder& U8(uint8_t v) { return Le(v, 1); }
  ByteBuilder& U16(uint16_t v) { return Le(v, 2); }
  ByteBuilder& U32(uint32_t v) { return Le(v, 4); }
  ByteBuilder& U64(uint64_t v) { return Le(v, 8); }
  ByteBuilder& I32(int32_t v) { return Le(static_cast<uint32_t>(v), 4); }
  ByteBuilder& F32(float v);
  ByteBuilder& F64(double v);
  ByteBuilder& Raw(const std::string& s);
  // u64 length + bytes.
  ByteBuilder& Str(const std::string& s) { return U64(s.size()).Raw(s); }
  // "GGUF", version, tensor_count, kv_count.
  ByteBuilder& Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv);
  // key + type + value.
  ByteBuilder& KvU32(const std::string& key, uint32_t v) { return Str(key).U32(4).U32(v); }
  ByteBuilder& KvStr(const std::string& key, const std::string& v) {
    return Str(key).U32(8).Str(v);
  }
  // name, n_dims, dims, type, offset.
  ByteBuilder& Tensor(const std::string& name, std::initializer_list<uint64_t> dims, uint32_t type,
                      uint64_t offset);
  ByteBuilder& PadTo(uint64_t align);
  ByteBuilder& Zeros(uint64_t n);
  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  ByteBuilder& Le(uint64_t v, int n);
  std::vector<uint8_t> bytes_;
};

// Parses and expects InvalidArgument whose message contains every one of `needles`.
::testing::AssertionResult ParseFailsWith(const std::vector<uint8_t>& bytes,
                                          std::initializer_list<std::string> needles,
                                          const ReadOptions& opts = {});

// A small valid file with two metadata keys and two F32 tensors ("a" 4 floats, "b" 2x8 floats).
std::vector<uint8_t> SmallValidFile();

}  // namespace strata::gguf::testing
