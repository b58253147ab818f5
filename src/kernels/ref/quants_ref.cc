#include "kernels/ref/quants_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/fp16.h"

namespace strata::kernels::ref {
namespace {

// Round half to even (the default FP rounding mode), like ggml's nearest_int.
inline int NearestInt(float v) { return static_cast<int>(std::nearbyint(v)); }

// Value of largest magnitude (first one wins on ties) and its magnitude.
inline void SignedMax(const float* x, int n, float* max_signed, float* amax) {
  float m = 0.0f, a = 0.0f;
  for (int i = 0; i < n; ++i) {
    float v = std::fabs(x[i]);
    if (v > a) {
      a = v;
      m = x[i];
    }
  }
  *max_signed = m;
  *amax = a;
}

// Shared by Q4_K (nmax = 15) and Q5_K (nmax = 31): per sub-block of 32 a scale and a min, both
// quantized to 6 bits. Writes d, dmin, scales and the integer levels L (0..nmax).
void QuantizeKMinMax(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales,
                     uint8_t* levels) {
  float sub_scale[8], sub_min[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float lo = xs[0], hi = xs[0];
    for (int i = 1; i < 32; ++i) {
      lo = std::min(lo, xs[i]);
      hi = std::max(hi, xs[i]);
    }
    lo = std::min(lo, 0.0f);  // the min term is subtracted: keep it >= 0
    sub_scale[j] = (hi - lo) / static_cast<float>(nmax);
    sub_min[j] = -lo;
    max_scale = std::max(max_scale, sub_scale[j]);
    max_min = std::max(max_min, sub_min[j]);
  }
  const uint16_t d16 = F32ToF16(max_scale / 63.0f);
  const uint16_t dmin16 = F32ToF16(max_min / 63.0f);
  const float d = F16ToF32(d16), dmin = F16ToF32(dmin16);
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    // Round the scale up so the largest value of the sub-block still fits in nmax levels.
    int s = d > 0.0f ? static_cast<int>(std::ceil(sub_scale[j] / d - 1e-4f)) : 0;
    int m = dmin > 0.0f ? NearestInt(sub_min[j] / dmin) : 0;
    ls[j] = static_cast<uint8_t>(std::clamp(s, 0, 63));
    lm[j] = static_cast<uint8_t>(std::clamp(m, 0, 63));
  }
  PackScaleMinK4(ls, lm, scales);
  for (int j = 0; j < 8; ++j) {
    const float de = d * ls[j], me = dmin * lm[j];
    for (int i = 0; i < 32; ++i) {
      int q = de > 0.0f ? NearestInt((x[32 * j + i] + me) / de) : 0;
      levels[32 * j + i] = static_cast<uint8_t>(std::clamp(q, 0, nmax));
    }
  }
  *d_out = d16;
  *dmin_out = dmin16;
}

}  // namespace

void PackScaleMinK4(const uint8_t sc[8], const uint8_t mn[8], uint8_t* q) {
  std::memset(q, 0, kKScaleSize);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] = static_cast<uint8_t>(q[j] | (sc[j] & 63));
      q[j + 4] = static_cast<uint8_t>(q[j + 4] | (mn[j] & 63));
    } else {
      q[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
      q[j - 4] = static_cast<uint8_t>(q[j - 4] | ((sc[j] >> 4) << 6));
      q[j] = static_cast<uint8_t>(q[j] | ((mn[j] >> 4) << 6));
    }
  }
}

// ---------------- Dequantize ----------------

void DequantizeQ4_0(const BlockQ4_0* x, float* y, size_t n) {
  for (size_t b = 0; b < n / kQK4_0; ++b, y += kQK4_0) {
    const float d = F16ToF32(x[b].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = static_cast<float>((x[b].qs[j] & 0xF) - 8) * d;
      y[j + kQK4_0 / 2] = static_cast<float>((x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeQ8_0(const BlockQ8_0* x, float* y, size_t n) {
  for (size_t b = 0; b < n / kQK8_0; ++b, y += kQK8_0) {
    const float d = F16ToF32(x[b].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(x[b].qs[j]) * d;
  }
}

void DequantizeQ4_K(const BlockQ4_K* x, float* y, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b) {
    const float d = F16ToF32(x[b].d), dmin = F16ToF32(x[b].dmin);
    const uint8_t* q = x[b].qs;
    for (int j = 0; j < 4; ++j, q += 32) {  // 64 values per step: low nibbles, then high
      uint8_t sc, mn;
      UnpackScaleMinK4(2 * j, x[b].scales, &sc, &mn);
      const float d1 = d * sc, m1 = dmin * mn;
      UnpackScaleMinK4(2 * j + 1, x[b].scales, &sc, &mn);
      const float d2 = d * sc, m2 = dmin * mn;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void DequantizeQ5_K(const BlockQ5_K* x, float* y, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b) {
    const float d = F16ToF32(x[b].d), dmin = F16ToF32(x[b].dmin);
    const uint8_t* ql = x[b].qs;
    const uint8_t* qh = x[b].qh;
    for (int j = 0; j < 4; ++j, ql += 32) {
      const uint8_t u1 = static_cast<uint8_t>(1u << (2 * j)),
                    u2 = static_cast<uint8_t>(2u << (2 * j));
      uint8_t sc, mn;
      UnpackScaleMinK4(2 * j, x[b].scales, &sc, &mn);
      const float d1 = d * sc, m1 = dmin * mn;
      UnpackScaleMinK4(2 * j + 1, x[b].scales, &sc, &mn);
      const float d2 = d * sc, m2 = dmin * mn;
      for (int l = 0; l < 32; ++l)
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l)
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

void DequantizeQ6_K(const BlockQ6_K* x, float* y, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b) {
    const float d = F16ToF32(x[b].d);
    const uint8_t* ql = x[b].ql;
    const uint8_t* qh = x[b].qh;
    const int8_t* sc = x[b].scales;
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is + 0] * static_cast<float>(q1);
        y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
        y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
        y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
      }
    }
  }
}

void DequantizeQ8_K(const BlockQ8_K* x, float* y, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b, y += kQK_K)
    for (int j = 0; j < kQK_K; ++j) y[j] = x[b].d * static_cast<float>(x[b].qs[j]);
}

void DequantizeF16(const uint16_t* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = F16ToF32(x[i]);
}
void DequantizeBF16(const uint16_t* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = BF16ToF32(x[i]);
}

// ---------------- Quantize ----------------

void QuantizeQ8_0(const float* x, BlockQ8_0* y, size_t n) {
  for (size_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    // As ggml's x86 path: d = amax/127 stored as f16, inverse 127/amax, round half to even.
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = F32ToF16(d);
    for (int j = 0; j < kQK8_0; ++j) y[b].qs[j] = static_cast<int8_t>(NearestInt(x[j] * id));
  }
}

void QuantizeQ4_0(const float* x, BlockQ4_0* y, size_t n) {
  for (size_t b = 0; b < n / kQK4_0; ++b, x += kQK4_0) {
    float m, amax;
    SignedMax(x, kQK4_0, &m, &amax);
    const float d = m / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = F32ToF16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x[j + kQK4_0 / 2] * id + 8.5f));
      y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void QuantizeQ4_K(const float* x, BlockQ4_K* y, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    uint8_t levels[kQK_K];
    QuantizeKMinMax(x, 15, &y[b].d, &y[b].dmin, y[b].scales, levels);
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l)
        y[b].qs[32 * j + l] =
            static_cast<uint8_t>(levels[64 * j + l] | (levels[64 * j + 32 + l] << 4));
  }
}

void QuantizeQ5_K(const float* x, BlockQ5_K* y, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    uint8_t levels[kQK_K];
    QuantizeKMinMax(x, 31, &y[b].d, &y[b].dmin, y[b].scales, levels);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const int l1 = levels[64 * j + l], l2 = levels[64 * j + 32 + l];
        if (l1 > 15) y[b].qh[l] = static_cast<uint8_t>(y[b].qh[l] | (1u << (2 * j)));
        if (l2 > 15) y[b].qh[l] = static_cast<uint8_t>(y[b].qh[l] | (2u << (2 * j)));
        y[b].qs[32 * j + l] = static_cast<uint8_t>((l1 & 0xF) | ((l2 & 0xF) << 4));
      }
    }
  }
}

void QuantizeQ6_K(const float* x, BlockQ6_K* y, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float sub_scale[16];
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
      float m, amax;
      SignedMax(x + 16 * j, 16, &m, &amax);
      sub_scale[j] = m / -32.0f;  // the largest-magnitude value maps to level -32
      if (amax / 32.0f > max_abs_scale) {
        max_abs_scale = amax / 32.0f;
        max_scale = sub_scale[j];
      }
    }
    uint8_t levels[kQK_K];
    if (max_abs_scale == 0.0f) {
      std::memset(&y[b], 0, sizeof(BlockQ6_K));
      std::memset(levels, 32, sizeof(levels));
    } else {
      const float iscale = -128.0f / max_scale;
      y[b].d = F32ToF16(1.0f / iscale);
      const float d = F16ToF32(y[b].d);
      for (int j = 0; j < 16; ++j) {
        const int ls = std::clamp(NearestInt(iscale * sub_scale[j]), -128, 127);
        y[b].scales[j] = static_cast<int8_t>(ls);
        const float de = d * static_cast<float>(ls);
        for (int i = 0; i < 16; ++i) {
          const int q = de != 0.0f ? NearestInt(x[16 * j + i] / de) : 0;
          levels[16 * j + i] = static_cast<uint8_t>(std::clamp(q, -32, 31) + 32);
        }
      }
    }
    uint8_t* ql = y[b].ql;
    uint8_t* qh = y[b].qh;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32) {
      const uint8_t* lv = levels + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int q1 = lv[l], q2 = lv[l + 32], q3 = lv[l + 64], q4 = lv[l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                     ((q4 >> 4) << 6));
      }
    }
  }
}

void QuantizeQ8_K(const float* x, BlockQ8_K* y, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float m, amax;
    SignedMax(x, kQK_K, &m, &amax);
    if (amax == 0.0f) {
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / m;
    for (int j = 0; j < kQK_K; ++j)
      y[b].qs[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * x[j])));
    for (int g = 0; g < kQK_K / 16; ++g) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += y[b].qs[16 * g + i];
      y[b].bsums[g] = static_cast<int16_t>(s);
    }
    y[b].d = 1.0f / iscale;
  }
}

void QuantizeF16(const float* x, uint16_t* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = F32ToF16(x[i]);
}
void QuantizeBF16(const float* x, uint16_t* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = F32ToBF16(x[i]);
}

// ---------------- Dot products ----------------

float DotQ4_0(const BlockQ4_0* w, const BlockQ8_0* x, size_t nb) {
  float sum = 0.0f;
  for (size_t b = 0; b < nb; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      sumi += ((w[b].qs[j] & 0xF) - 8) * x[b].qs[j];
      sumi += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + kQK4_0 / 2];
    }
    sum += static_cast<float>(sumi) * (F16ToF32(w[b].d) * F16ToF32(x[b].d));
  }
  return sum;
}

float DotQ8_0(const BlockQ8_0* w, const BlockQ8_0* x, size_t nb) {
  float sum = 0.0f;
  for (size_t b = 0; b < nb; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK8_0; ++j) sumi += w[b].qs[j] * x[b].qs[j];
    sum += static_cast<float>(sumi) * (F16ToF32(w[b].d) * F16ToF32(x[b].d));
  }
  return sum;
}

namespace {

// Per super-block: sum += (d_w * d_x) * isum - (dmin_w * d_x) * msum, with isum the scaled integer
// dot product and msum = sum_j min_j * (sum of the 32 activation quants of sub-block j). Q4_K and
// Q5_K differ only in how quant l of sub-block j is read (`quant`).
template <typename Block, typename Quant>
float DotScaleMinK(const Block* w, const BlockQ8_K* x, size_t nb, Quant quant) {
  float sum = 0.0f;
  for (size_t b = 0; b < nb; ++b) {
    const int8_t* a = x[b].qs;
    int isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      UnpackScaleMinK4(j, w[b].scales, &sc, &mn);
      int s = 0;
      for (int l = 0; l < 32; ++l) s += quant(w[b], j, l) * a[32 * j + l];
      isum += sc * s;
      msum += mn * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    }
    sum += F16ToF32(w[b].d) * x[b].d * static_cast<float>(isum) -
           F16ToF32(w[b].dmin) * x[b].d * static_cast<float>(msum);
  }
  return sum;
}

// The low 4 bits of quant l of sub-block j: sub-blocks 2i and 2i+1 share 32 bytes (low, high).
int LowNibbleK(const uint8_t* qs, int j, int l) {
  return (qs[32 * (j / 2) + l] >> ((j & 1) ? 4 : 0)) & 0xF;
}

}  // namespace

float DotQ4_K(const BlockQ4_K* w, const BlockQ8_K* x, size_t nb) {
  return DotScaleMinK(w, x, nb,
                      [](const BlockQ4_K& q, int j, int l) { return LowNibbleK(q.qs, j, l); });
}

float DotQ5_K(const BlockQ5_K* w, const BlockQ8_K* x, size_t nb) {
  return DotScaleMinK(w, x, nb, [](const BlockQ5_K& q, int j, int l) {
    return LowNibbleK(q.qs, j, l) + (((q.qh[l] >> j) & 1) << 4);
  });
}

float DotQ6_K(const BlockQ6_K* w, const BlockQ8_K* x, size_t nb) {
  float sum = 0.0f;
  for (size_t b = 0; b < nb; ++b) {
    int8_t q[kQK_K];
    const uint8_t* ql = w[b].ql;
    const uint8_t* qh = w[b].qh;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32) {
      int8_t* o = q + 128 * half;
      for (int l = 0; l < 32; ++l) {
        o[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        o[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        o[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        o[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int isum = 0;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += q[16 * g + i] * x[b].qs[16 * g + i];
      isum += w[b].scales[g] * s;
    }
    sum += F16ToF32(w[b].d) * x[b].d * static_cast<float>(isum);
  }
  return sum;
}

float DotF16(const uint16_t* w, const float* x, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += F16ToF32(w[i]) * x[i];
  return sum;
}

float DotBF16(const uint16_t* w, const float* x, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += BF16ToF32(w[i]) * x[i];
  return sum;
}

float DotF32(const float* w, const float* x, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += w[i] * x[i];
  return sum;
}

}  // namespace strata::kernels::ref
