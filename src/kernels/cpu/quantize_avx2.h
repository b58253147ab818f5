// The AVX2 activation quantizer of the tile kernels (cpu/kernels_avx2.cc).
// Thread contract: a pure function. Errors: none (n a multiple of 32; call only where
// DetectIsa() >= Isa::kAvx2).
#pragma once

#include <cstddef>

#include "tensor/dtype.h"

namespace strata::kernels::internal {

// ref::QuantizeQ8_0 with AVX2, the same bytes for finite inputs: what kernels::QuantizeRow(kQ8_0)
// (KV rows) and the tile kernels' activations of Q4_0/Q8_0 weights use at the avx2 level and up.
void Avx2QuantizeQ8_0(const float* x, BlockQ8_0* y, size_t n);
// ref::QuantizeQ8_K with AVX2 (n a multiple of 256), the same bytes for finite inputs: the
// activations of Q4_K/Q5_K/Q6_K weights at the avx2 level and up.
void Avx2QuantizeQ8_K(const float* x, BlockQ8_K* y, size_t n);

}  // namespace strata::kernels::internal
