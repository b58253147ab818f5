// Helpers shared by the GGUF reader, writer and value code. Not part of the module API.
// Plain functions on value types; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "gguf/gguf.h"

namespace strata::gguf::internal {

inline constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
inline constexpr uint32_t kWriteVersion = 3;
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;
inline constexpr const char* kAlignmentKey = "general.alignment";

bool IsKnownValueType(uint32_t raw);
bool IsUnsignedType(ValueType t);
bool IsSignedType(ValueType t);
bool IsFloatType(ValueType t);
// Bytes one element of type t takes in the file (for strings and arrays: the minimum).
uint64_t ScalarSize(ValueType t);
// Largest value of an unsigned type / range of a signed type.
uint64_t MaxUnsigned(ValueType t);
void SignedRange(ValueType t, int64_t* lo, int64_t* hi);
// "u32", "array[string]", ...
std::string TypeDescription(const Value& v);

}  // namespace strata::gguf::internal
