// Element types of tensors, numbered as GGUF/ggml number them, with the block formats of the
// quantized types. Everything here is plain data; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tensor/fp16.h"

namespace strata {

// Values are the on-disk GGUF tensor type ids (ggml_type). Gaps are ids ggml retired.
enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct DTypeTraits {
  std::string_view name;   // "f32", "q4_K", ... (ggml spelling)
  uint32_t block_size;     // elements per block (1 for plain types)
  uint32_t type_size;      // bytes per block
  bool compute_supported;  // the engine can multiply with / read rows of this type
};

// Traits of a known type id; nullopt for an id this build does not know (an "unknown type").
std::optional<DTypeTraits> GetDTypeTraits(uint32_t type_id);
inline std::optional<DTypeTraits> GetDTypeTraits(DType t) {
  return GetDTypeTraits(static_cast<uint32_t>(t));
}
std::string_view DTypeName(DType t);
// Parses "f32", "F16", "q4_k", "Q8_0", "bf16", ... (case-insensitive); nullopt if unknown.
std::optional<DType> ParseDType(std::string_view name);

// Bytes of a row of `n` elements of type t; nullopt if n is not a multiple of the block size or on
// overflow or unknown type.
std::optional<uint64_t> RowBytes(DType t, uint64_t n);

// ---- Block formats (layouts identical to ggml's; static_asserts pin the sizes) ----
constexpr int kQK4_0 = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK_K = 256;
constexpr int kKScaleSize = 12;

struct BlockQ4_0 {
  uint16_t d;  // fp16 scale
  uint8_t
      qs[kQK4_0 / 2];  // element j (<16) in low nibble of qs[j], element j+16 in the high nibble
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_K {
  uint16_t d;                   // fp16 super-block scale for the 6-bit scales
  uint16_t dmin;                // fp16 super-block scale for the 6-bit mins
  uint8_t scales[kKScaleSize];  // 8 scales + 8 mins, 6 bits each, packed
  uint8_t qs[kQK_K / 2];        // 4-bit quants
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];  // high bit of each quant
  uint8_t qs[kQK_K / 2];  // low 4 bits
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // low 4 bits
  uint8_t qh[kQK_K / 4];      // high 2 bits
  int8_t scales[kQK_K / 16];  // 8-bit scales of 16-element groups
  uint16_t d;                 // fp16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210);

// Activation format for dot products with K-quants (not a storage format of models).
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sums of groups of 16 quants
};
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace strata
