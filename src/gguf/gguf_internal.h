// Helpers shared by the GGUF reader, writer and value code. Not part of the module API.
// Plain functions on value types; thread-safe.
#pragma once

#include <cstdint>
#include <iterator>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

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
// "u32", "array[string]", ...
std::string TypeDescription(const Value& v);

// The numeric ValueTypes and, in the same order, their C types in the file: the one map between
// the two, used by the reader, the writer and ScalarSize.
inline constexpr ValueType kNumericTypes[] = {
    ValueType::kUint8,  ValueType::kInt8,   ValueType::kUint16,  ValueType::kInt16,
    ValueType::kUint32, ValueType::kInt32,  ValueType::kFloat32, ValueType::kUint64,
    ValueType::kInt64,  ValueType::kFloat64};
using NumericCTypes = std::tuple<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float,
                                 uint64_t, int64_t, double>;
static_assert(std::size(kNumericTypes) == std::tuple_size_v<NumericCTypes>);

// numeric(std::type_identity<T>{}) for the C type T of a numeric t; other() for bool, string,
// array and unknown types. Both callables return the same type. (A chain of compares that the
// compiler unrolls; `kI` is the entry of kNumericTypes tried next.)
template <size_t kI = 0, typename Numeric, typename Other>
auto VisitNumeric(ValueType t, const Numeric& numeric, const Other& other) {
  if constexpr (kI == std::size(kNumericTypes)) {
    return other();
  } else {
    if (t == kNumericTypes[kI]) {
      return numeric(std::type_identity<std::tuple_element_t<kI, NumericCTypes>>{});
    }
    return VisitNumeric<kI + 1>(t, numeric, other);
  }
}

}  // namespace strata::gguf::internal
