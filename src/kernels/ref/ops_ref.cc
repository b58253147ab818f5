// Reference tile kernels (one scalar dot per token), activation conversion and vector ops.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kernels_internal.h"
#include "kernels/ref/quants_ref.h"
#include "tensor/fp16.h"

namespace strata::kernels::internal {
namespace {

template <typename W, typename X, float (*Dot)(const W*, const X*, size_t), int kBlock>
void RefTile(const void* w, const void* x, size_t x_stride, int nt, size_t n, float* out) {
  for (int t = 0; t < nt; ++t) {
    const X* xt = reinterpret_cast<const X*>(static_cast<const char*>(x) + t * x_stride);
    out[t] = Dot(static_cast<const W*>(w), xt, n / kBlock);
  }
}

void RmsNormRef(const float* x, const float* weight, float* out, size_t n, float eps) {
  double ss = 0.0;
  for (size_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (size_t i = 0; i < n; ++i) out[i] = x[i] * scale * (weight ? weight[i] : 1.0f);
}

void SiluMulRef(const float* gate, const float* up, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void AddRef(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

float DotF32Ref(const float* a, const float* b, size_t n) { return ref::DotF32(a, b, n); }

void AxpyRef(float a, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void SoftmaxRef(float* x, size_t n) {
  if (n == 0) return;
  float mx = x[0];
  for (size_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

void AttendRef(const float* q, const float* k, const float* v, size_t kv_stride, size_t len,
               size_t hd, float scale, float* scores, float* out) {
  for (size_t j = 0; j < len; ++j) scores[j] = DotF32Ref(q, k + j * kv_stride, hd) * scale;
  SoftmaxRef(scores, len);
  for (size_t i = 0; i < hd; ++i) out[i] = 0.0f;
  for (size_t j = 0; j < len; ++j) AxpyRef(scores[j], v + j * kv_stride, out, hd);
}

// The reference widens each row first (exact), then runs AttendRef on the f32 copies.
void AttendF16Ref(const float* q, const uint16_t* k, const uint16_t* v, size_t kv_stride,
                  size_t len, size_t hd, float scale, float* scores, float* out) {
  thread_local std::vector<float> kf,
      vf;  // grow once per thread (no allocation per call after that)
  kf.resize(len * hd);
  vf.resize(len * hd);
  for (size_t j = 0; j < len; ++j)
    for (size_t i = 0; i < hd; ++i) {
      kf[j * hd + i] = F16ToF32(k[j * kv_stride + i]);
      vf[j * hd + i] = F16ToF32(v[j * kv_stride + i]);
    }
  AttendRef(q, kf.data(), vf.data(), hd, len, hd, scale, scores, out);
}

void AttendF16GroupRef(const float* q, size_t group, const uint16_t* k, const uint16_t* v,
                       size_t kv_stride, size_t len, size_t hd, float scale, float* scores,
                       float* out) {
  for (size_t h = 0; h < group; ++h)
    AttendF16Ref(q + h * hd, k, v, kv_stride, len, hd, scale, scores + h * len, out + h * hd);
}

// The reference copies the rows out of their blocks, then runs AttendF16Ref head by head.
void AttendF16PagedRef(const float* q, size_t group, const uint16_t* const* k_blocks,
                       const uint16_t* const* v_blocks, unsigned block_shift, size_t row_stride,
                       size_t len, size_t hd, float scale, float* scores, float* out) {
  thread_local std::vector<uint16_t> kc, vc;
  kc.resize(len * hd);
  vc.resize(len * hd);
  const size_t mask = (size_t{1} << block_shift) - 1;
  for (size_t j = 0; j < len; ++j) {
    std::memcpy(&kc[j * hd], k_blocks[j >> block_shift] + (j & mask) * row_stride,
                hd * sizeof(uint16_t));
    std::memcpy(&vc[j * hd], v_blocks[j >> block_shift] + (j & mask) * row_stride,
                hd * sizeof(uint16_t));
  }
  for (size_t h = 0; h < group; ++h)
    AttendF16Ref(q + h * hd, kc.data(), vc.data(), hd, len, hd, scale, scores + h * len,
                 out + h * hd);
}

}  // namespace

DType ActivationType(DType w) {
  switch (w) {
    case DType::kQ4_0:
    case DType::kQ8_0:
      return DType::kQ8_0;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return DType::kQ8_K;
    default:
      return DType::kF32;
  }
}

void ConvertActivations(DType weight_type, const float* x, void* dst, size_t n) {
  float* f = static_cast<float*>(dst);
  switch (ActivationType(weight_type)) {
    case DType::kQ8_0:
      ref::QuantizeQ8_0(x, static_cast<BlockQ8_0*>(dst), n);
      return;
    case DType::kQ8_K:
      ref::QuantizeQ8_K(x, static_cast<BlockQ8_K*>(dst), n);
      return;
    default:
      break;
  }
  if (weight_type == DType::kF16) {
    for (size_t i = 0; i < n; ++i) f[i] = F16ToF32(F32ToF16(x[i]));
  } else if (weight_type == DType::kBF16) {
    for (size_t i = 0; i < n; ++i) f[i] = BF16ToF32(F32ToBF16(x[i]));
  } else {
    std::copy(x, x + n, f);
  }
}

DotTileFn RefDotTile(DType t) {
  switch (t) {
    case DType::kQ4_0:
      return RefTile<BlockQ4_0, BlockQ8_0, ref::DotQ4_0, kQK4_0>;
    case DType::kQ8_0:
      return RefTile<BlockQ8_0, BlockQ8_0, ref::DotQ8_0, kQK8_0>;
    case DType::kQ4_K:
      return RefTile<BlockQ4_K, BlockQ8_K, ref::DotQ4_K, kQK_K>;
    case DType::kQ5_K:
      return RefTile<BlockQ5_K, BlockQ8_K, ref::DotQ5_K, kQK_K>;
    case DType::kQ6_K:
      return RefTile<BlockQ6_K, BlockQ8_K, ref::DotQ6_K, kQK_K>;
    case DType::kF16:
      return RefTile<uint16_t, float, ref::DotF16, 1>;
    case DType::kBF16:
      return RefTile<uint16_t, float, ref::DotBF16, 1>;
    case DType::kF32:
      return RefTile<float, float, ref::DotF32, 1>;
    default:
      return nullptr;
  }
}

const VecOps& RefVecOps() {
  static const VecOps ops{RmsNormRef, SiluMulRef,        AddRef,
                          DotF32Ref,  AxpyRef,           SoftmaxRef,
                          AttendRef,  AttendF16GroupRef, AttendF16PagedRef};
  return ops;
}

}  // namespace strata::kernels::internal
