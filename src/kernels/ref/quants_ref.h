// Scalar reference kernels: the definition of "correct" for every SIMD kernel.
//
// Block layouts are bit-compatible with ggml/GGUF (see tensor/dtype.h). The dot products follow
// ggml's arithmetic: integer dot products inside a block, one f32 multiply-add per block (or per
// block term) accumulated across blocks in order. Thread-safe, no allocation, no state.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace strata::kernels::ref {

// ---- Dequantize (n multiple of the block size) ----
void DequantizeQ4_0(const BlockQ4_0* x, float* y, size_t n);
void DequantizeQ8_0(const BlockQ8_0* x, float* y, size_t n);
void DequantizeQ4_K(const BlockQ4_K* x, float* y, size_t n);
void DequantizeQ5_K(const BlockQ5_K* x, float* y, size_t n);
void DequantizeQ6_K(const BlockQ6_K* x, float* y, size_t n);
void DequantizeQ8_K(const BlockQ8_K* x, float* y, size_t n);
void DequantizeF16(const uint16_t* x, float* y, size_t n);
void DequantizeBF16(const uint16_t* x, float* y, size_t n);

// ---- Quantize (n multiple of the block size) ----
// Q8_0: d = amax/127 (stored as f16), q = round(x / d) (round half away from zero).
void QuantizeQ8_0(const float* x, BlockQ8_0* y, size_t n);
// Q4_0: d = m / -8 where m is the value of largest magnitude; q = min(15, trunc(x/d + 8.5)).
void QuantizeQ4_0(const float* x, BlockQ4_0* y, size_t n);
// K-quants: per-sub-block min/max (Q4_K/Q5_K) or signed absmax (Q6_K) scales, then the sub-block
// scales quantized to 6 (Q4_K/Q5_K) or 8 (Q6_K) bits against an f16 super-block scale. Simpler
// than llama.cpp's iterative search; valid blocks with somewhat larger error.
void QuantizeQ4_K(const float* x, BlockQ4_K* y, size_t n);
void QuantizeQ5_K(const float* x, BlockQ5_K* y, size_t n);
void QuantizeQ6_K(const float* x, BlockQ6_K* y, size_t n);
// Q8_K activations as ggml's quantize_row_q8_K: m = value of largest magnitude, iscale = -127/m,
// q = min(127, nearest_int(iscale * x)) (round half to even), d = 1/iscale, bsums per 16.
void QuantizeQ8_K(const float* x, BlockQ8_K* y, size_t n);
void QuantizeF16(const float* x, uint16_t* y, size_t n);
void QuantizeBF16(const float* x, uint16_t* y, size_t n);

// Unpacks the 6-bit scale and min of sub-block j (0..7) from the 12-byte K-quant scale field.
inline void UnpackScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *mn = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}
// Inverse of UnpackScaleMinK4 for all 8 sub-blocks (values < 64).
void PackScaleMinK4(const uint8_t sc[8], const uint8_t mn[8], uint8_t* q);

// ---- Dot products of one weight row with one activation row (nb = number of blocks) ----
float DotQ4_0(const BlockQ4_0* w, const BlockQ8_0* x, size_t nb);
float DotQ8_0(const BlockQ8_0* w, const BlockQ8_0* x, size_t nb);
float DotQ4_K(const BlockQ4_K* w, const BlockQ8_K* x, size_t nb);
float DotQ5_K(const BlockQ5_K* w, const BlockQ8_K* x, size_t nb);
float DotQ6_K(const BlockQ6_K* w, const BlockQ8_K* x, size_t nb);
// F16/BF16 weights: x holds activations already rounded to f16/bf16 (as ggml does), stored as f32;
// products and accumulation in f32, sequential.
float DotF16(const uint16_t* w, const float* x, size_t n);
float DotBF16(const uint16_t* w, const float* x, size_t n);
float DotF32(const float* w, const float* x, size_t n);

}  // namespace strata::kernels::ref
