// AVX-512 (F, BW, DQ, VL, VNNI) kernels. Integer tiles use 256-bit vectors with vpdpbusd for the
// Q4_0/Q8_0 dot products (and the extra registers of AVX-512VL); F16/BF16/F32 tiles and vector ops
// use 512-bit vectors. Target attributes only; kernels.cc calls these only when cpuid reports them.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsic headers initialise pass-through operands with _mm512_undefined_*(),
// which -Wuninitialized flags once inlined here (GCC bug 105593). Only this file is affected.
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/kernels_internal.h"
#include "kernels/ref/quants_ref.h"
#include "tensor/fp16.h"

namespace strata::kernels::internal {
namespace {

#define STRATA_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"
#define STRATA_FN static inline __attribute__((target(STRATA_TARGET), always_inline))
#define STRATA_VNNI 1

#include "kernels/cpu/dot_kernels.inc"

STRATA_FN float Hsum512(__m512 v) {
  const __m512 s = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xEE));
  __m128 h = _mm_add_ps(_mm512_castps512_ps128(s),
                        _mm512_castps512_ps128(_mm512_shuffle_f32x4(s, s, 0x55)));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

STRATA_FN __m512 Load16(const uint16_t* p, bool bf16) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
  return _mm512_cvtph_ps(v);
}

// F32 weights (the F16 / BF16 kernels are DotHalf below).
template <int kNt>
STRATA_FN void DotFloat512N(const void* wv, const void* xv, size_t xs, size_t n, float* out) {
  const float* w = static_cast<const float*>(wv);
  const float* xt[kNt];
  TokenRows<float, kNt>(xv, xs, xt);
  __m512 a0[kNt], a1[kNt];
  for (int t = 0; t < kNt; ++t) a0[t] = a1[t] = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 w0 = _mm512_loadu_ps(w + i), w1 = _mm512_loadu_ps(w + i + 16);
    for (int t = 0; t < kNt; ++t) {
      a0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xt[t] + i), a0[t]);
      a1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xt[t] + i + 16), a1[t]);
    }
  }
  for (int t = 0; t < kNt; ++t) {
    float s = Hsum512(_mm512_add_ps(a0[t], a1[t]));
    for (size_t j = i; j < n; ++j) s += w[j] * xt[t][j];
    out[t] = s;
  }
}

// F16 / BF16 weights: every output (row, token) is one 16-lane accumulator over the row's
// 16-value chunks in order, acc = fma(w[16c..16c+15], x[16c..16c+15], acc), then
// y = Hsum512(acc) + the tail's products one by one, in either layout (HalfRowSrc: a row as stored;
// HalfPanelSrc: the 4 rows of a kPanels4 panel). Prefill runs 4 rows x 6 tokens per pass (each
// weight vector used by 6 tokens, each activation vector by 4 rows, 24 FMA chains); decode 4 rows x
// 1 token from one sequential panel stream (4 chains). A row alone (the row layout, or a forced
// lower tile) gives the same bits, only slower (one chain). No software prefetch: the one this
// loop had compiled to nothing (GCC 12 dropped the _mm_prefetch of a member function inlined here),
// and made to work (__builtin_prefetch 4 KiB ahead), or with two panels streamed side by side,
// F16 decode streamed no faster (Zen 5, docs/perf.md).

// The activations are 16-bit halves (MatMul: Avx2ToF16 / Avx2ToBf16, the rounded values at half
// the bytes), widened in registers to the same f32 values.
template <int kNr, int kNt, bool kBf16, typename Src>
STRATA_FN void DotHalf(const Src& src, const void* xv, size_t xs, size_t n, float* out,
                       size_t out_stride) {
  const uint16_t* xt[kNt];
  TokenRows<uint16_t, kNt>(xv, xs, xt);
  __m512 acc[kNr][kNt];
  for (int r = 0; r < kNr; ++r)
    for (int t = 0; t < kNt; ++t) acc[r][t] = _mm512_setzero_ps();
  const size_t chunks = n / 16, tail = n % 16;
  for (size_t c = 0; c < chunks; ++c) {
    __m512 wr[kNr];
    for (int r = 0; r < kNr; ++r) wr[r] = Load16(src.Chunk(r, c), kBf16);
    for (int t = 0; t < kNt; ++t) {
      const __m512 x = Load16(xt[t] + 16 * c, kBf16);
      for (int r = 0; r < kNr; ++r) acc[r][t] = _mm512_fmadd_ps(wr[r], x, acc[r][t]);
    }
  }
  for (int r = 0; r < kNr; ++r) {
    const uint16_t* tw = src.Tail(r, chunks, tail);
    for (int t = 0; t < kNt; ++t) {
      float s = Hsum512(acc[r][t]);
      for (size_t j = 0; j < tail; ++j)
        s += Scalar(tw[j], kBf16) * Scalar(xt[t][16 * chunks + j], kBf16);
      out[static_cast<size_t>(r) * out_stride + static_cast<size_t>(t)] = s;
    }
  }
}

template <int kNt>
STRATA_FN void DotF16T(const void* w, const void* x, size_t xs, size_t n, float* o) {
  DotHalf<1, kNt, false, HalfRowSrc>(HalfRowSrc{static_cast<const uint16_t*>(w)}, x, xs, n, o, 0);
}
template <int kNt>
STRATA_FN void DotBF16T(const void* w, const void* x, size_t xs, size_t n, float* o) {
  DotHalf<1, kNt, true, HalfRowSrc>(HalfRowSrc{static_cast<const uint16_t*>(w)}, x, xs, n, o, 0);
}
template <int kNt>
STRATA_FN void DotF16P(const void* p, const void* x, size_t xs, size_t n, float* o) {
  DotHalf<kFloatPanelRows, kNt, false, HalfPanelSrc>(HalfPanelSrc{static_cast<const uint16_t*>(p)},
                                                     x, xs, n, o, kMaxPanelTileTokens);
}
template <int kNt>
STRATA_FN void DotBF16P(const void* p, const void* x, size_t xs, size_t n, float* o) {
  DotHalf<kFloatPanelRows, kNt, true, HalfPanelSrc>(HalfPanelSrc{static_cast<const uint16_t*>(p)},
                                                    x, xs, n, o, kMaxPanelTileTokens);
}
template <int kNt>
STRATA_FN void DotF32T(const void* w, const void* x, size_t xs, size_t n, float* o) {
  DotFloat512N<kNt>(w, x, xs, n, o);
}
STRATA_DEFINE_TILE(TileF16, DotF16T)
STRATA_DEFINE_TILE(TileBF16, DotBF16T)
STRATA_DEFINE_PANEL_TILE(PanelF16, DotF16P)
STRATA_DEFINE_PANEL_TILE(PanelBF16, DotBF16P)
STRATA_DEFINE_TILE(TileF32, DotF32T)

using VF = __m512;
constexpr size_t kLanes = 16;
STRATA_FN VF VZero() { return _mm512_setzero_ps(); }
STRATA_FN VF VSet1(float v) { return _mm512_set1_ps(v); }
STRATA_FN VF VLoad(const float* p) { return _mm512_loadu_ps(p); }
STRATA_FN VF VLoad(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
STRATA_FN void VStore(float* p, VF v) { _mm512_storeu_ps(p, v); }
STRATA_FN VF VAdd(VF a, VF b) { return _mm512_add_ps(a, b); }
STRATA_FN VF VSub(VF a, VF b) { return _mm512_sub_ps(a, b); }
STRATA_FN VF VMul(VF a, VF b) { return _mm512_mul_ps(a, b); }
STRATA_FN VF VDiv(VF a, VF b) { return _mm512_div_ps(a, b); }
STRATA_FN VF VFmadd(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
STRATA_FN VF VMax(VF a, VF b) { return _mm512_max_ps(a, b); }
STRATA_FN VF VMin(VF a, VF b) { return _mm512_min_ps(a, b); }
STRATA_FN float VHsum(VF v) { return Hsum512(v); }
#define TREE16_FN STRATA_FN
#include "kernels/cpu/tree16.inc"
struct AddPs {
  __attribute__((target(STRATA_TARGET))) __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_add_ps(a, b);
  }
};
// out[k] = VHsum(v[k]) for 16 vectors, bit for bit (Tree16 adds Hsum512's pairs).
STRATA_FN void VHsum16(const VF (&v)[16], float* out) {
  alignas(64) float t[16];
  _mm512_store_ps(t, Tree16(v, AddPs{}));
  for (int c = 0; c < 4; ++c)
    for (int k = 0; k < 4; ++k) out[4 * k + c] = t[4 * c + k];  // lane 4c + k: input 4k + c
}
STRATA_FN float VHmax(VF v) {
  // (GCC 12's _mm512_reduce_* trip -Wuninitialized inside its own headers.)
  const __m512 m = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0xEE));
  __m128 h = _mm_max_ps(_mm512_castps512_ps128(m),
                        _mm512_castps512_ps128(_mm512_shuffle_f32x4(m, m, 0x55)));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}
STRATA_FN VF VRound(VF v) {
  return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
STRATA_FN VF VExp2i(VF k) {
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
  return _mm512_castsi512_ps(e);
}

#include "kernels/cpu/vec_kernels.inc"

}  // namespace

#define STRATA_ENTRY(name) Avx512##name
#include "kernels/cpu/entry_points.inc"
#undef STRATA_ENTRY

}  // namespace strata::kernels::internal
