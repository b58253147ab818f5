// Overflow-checked arithmetic for sizes and offsets that come from files or requests.
// All functions return std::nullopt on overflow instead of wrapping. Header-only, thread-safe.
#pragma once

#include <cstdint>
#include <optional>

namespace strata {

inline std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Rounds `v` up to a multiple of `align` (align > 0); nullopt on overflow.
inline std::optional<uint64_t> CheckedAlignUp(uint64_t v, uint64_t align) {
  if (align == 0) return std::nullopt;
  uint64_t rem = v % align;
  if (rem == 0) return v;
  return CheckedAdd(v, align - rem);
}

}  // namespace strata
