// AVX2 + FMA + F16C kernels. Every function carries a target attribute (no global -m flags), so the
// binary runs on any x86-64; kernels.cc calls these only when cpuid reports the features.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/quantize_avx2.h"
#include "kernels/kernels_internal.h"
#include "kernels/ref/quants_ref.h"
#include "tensor/fp16.h"

namespace strata::kernels::internal {
namespace {

#define STRATA_TARGET "avx2,fma,f16c"
#define STRATA_FN static inline __attribute__((target(STRATA_TARGET), always_inline))
#define STRATA_VNNI 0

#include "kernels/cpu/dot_kernels.inc"

// F16 / BF16 weights. MatMul stores the rounded activations as 16-bit halves (Avx2ToF16 /
// Avx2ToBf16: the values ConvertActivations gives) and the kernels widen them in registers. Every
// output (row, token) is one 8-lane accumulator over the row's 16-value chunks in order,
// acc = fma(w[16c..16c+7], x[16c..16c+7], acc), then acc = fma(w[16c+8..16c+15], x[.], acc), and
// y = HsumPs(acc) + the last n % 16 products one by one, in either layout (HalfRowSrc: a row as
// stored; HalfPanelSrc: the 4 rows of a kPanels4 panel), so every tile, layout and token count
// gives the same bits. One accumulator per output lets 16 registers hold a 2-row x 6-token tile (12
// accumulators, 2 weight vectors, 1 activation vector); with two per output (this level's
// arithmetic until 2026-12-07) it held 8 outputs and F16 prefill ran at about half of llama.cpp's
// AVX2 build (docs/perf.md). Decode runs the panel's 4 rows against one token (4 chains, each
// activation load shared by 4 rows) and prefetches the panel 4 KiB ahead; prefill passes over an
// L2-resident block (ForBlockedTiles), 2 rows x up to 6 tokens at a time, without prefetches.

// Rows r0..r0 + kNr - 1 of src against kNt tokens; out[(r0 + r) * out_stride + t].
template <int kNr, int kNt, bool kBf16, bool kPrefetch, typename Src>
STRATA_FN void HalfPass(const Src& src, int r0, const uint16_t* const (&xt)[kNt], size_t n,
                        float* out, size_t out_stride) {
  __m256 acc[kNr][kNt];
  for (int r = 0; r < kNr; ++r)
    for (int t = 0; t < kNt; ++t) acc[r][t] = _mm256_setzero_ps();
  const size_t chunks = n / 16, tail = n % 16;
  for (size_t c = 0; c < chunks; ++c) {
    if constexpr (kPrefetch) {  // a panel chunk: 2 lines
      const char* ahead = reinterpret_cast<const char*>(src.Chunk(0, c)) + 4096;
      _mm_prefetch(ahead, _MM_HINT_T0);
      _mm_prefetch(ahead + 64, _MM_HINT_T0);
    }
    for (size_t h = 0; h < 16; h += 8) {
      __m256 w[kNr];
      for (int r = 0; r < kNr; ++r) w[r] = Load8(src.Chunk(r0 + r, c) + h, kBf16);
      for (int t = 0; t < kNt; ++t) {
        const __m256 x = Load8(xt[t] + 16 * c + h, kBf16);
        for (int r = 0; r < kNr; ++r) acc[r][t] = _mm256_fmadd_ps(w[r], x, acc[r][t]);
      }
    }
  }
  for (int r = 0; r < kNr; ++r) {
    const uint16_t* tw = src.Tail(r0 + r, chunks, tail);
    for (int t = 0; t < kNt; ++t) {
      float s = HsumPs(acc[r][t]);
      for (size_t j = 0; j < tail; ++j)
        s += Scalar(tw[j], kBf16) * Scalar(xt[t][16 * chunks + j], kBf16);
      out[static_cast<size_t>(r0 + r) * out_stride + static_cast<size_t>(t)] = s;
    }
  }
}

// A kPanels4 panel against kNt tokens (DotPanelFn's out layout).
template <int kNt, bool kBf16>
STRATA_FN void PanelTile(const void* pv, const void* xv, size_t xs, size_t n, float* out) {
  const uint16_t* xt[kNt];
  TokenRows<uint16_t, kNt>(xv, xs, xt);
  const HalfPanelSrc src{static_cast<const uint16_t*>(pv)};
  if constexpr (kNt == 1) {
    HalfPass<4, 1, kBf16, true>(src, 0, xt, n, out, kMaxPanelTileTokens);
  } else {
    HalfPass<2, kNt, kBf16, false>(src, 0, xt, n, out, kMaxPanelTileTokens);
    HalfPass<2, kNt, kBf16, false>(src, 2, xt, n, out, kMaxPanelTileTokens);
  }
}
template <int kNt>
STRATA_FN void PanelF16T(const void* p, const void* x, size_t xs, size_t n, float* o) {
  PanelTile<kNt, false>(p, x, xs, n, o);
}
template <int kNt>
STRATA_FN void PanelBF16T(const void* p, const void* x, size_t xs, size_t n, float* o) {
  PanelTile<kNt, true>(p, x, xs, n, o);
}
STRATA_DEFINE_PANEL_TILE(PanelF16, PanelF16T)
STRATA_DEFINE_PANEL_TILE(PanelBF16, PanelBF16T)

// A row as stored: the panel's arithmetic with one row (one chain: slower, the same bits).
template <int kNt, bool kBf16>
STRATA_FN void DotHalfRow(const void* w, const void* xv, size_t xs, size_t n, float* out) {
  const uint16_t* xt[kNt];
  TokenRows<uint16_t, kNt>(xv, xs, xt);
  HalfPass<1, kNt, kBf16, false>(HalfRowSrc{static_cast<const uint16_t*>(w)}, 0, xt, n, out, 0);
}
template <int kNt>
STRATA_FN void DotF16T(const void* w, const void* x, size_t xs, size_t n, float* o) {
  DotHalfRow<kNt, false>(w, x, xs, n, o);
}
template <int kNt>
STRATA_FN void DotF32T(const void* w, const void* x, size_t xs, size_t n, float* o) {
  DotFloatN<kNt>(w, x, xs, n, o);
}
template <int kNt>
STRATA_FN void DotBF16T(const void* w, const void* x, size_t xs, size_t n, float* o) {
  DotHalfRow<kNt, true>(w, x, xs, n, o);
}
STRATA_DEFINE_TILE(TileF16, DotF16T)
STRATA_DEFINE_TILE(TileBF16, DotBF16T)
STRATA_DEFINE_TILE(TileF32, DotF32T)

using VF = __m256;
constexpr size_t kLanes = 8;
STRATA_FN VF VZero() { return _mm256_setzero_ps(); }
STRATA_FN VF VSet1(float v) { return _mm256_set1_ps(v); }
STRATA_FN VF VLoad(const float* p) { return _mm256_loadu_ps(p); }
STRATA_FN VF VLoad(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
STRATA_FN void VStore(float* p, VF v) { _mm256_storeu_ps(p, v); }
STRATA_FN VF VAdd(VF a, VF b) { return _mm256_add_ps(a, b); }
STRATA_FN VF VSub(VF a, VF b) { return _mm256_sub_ps(a, b); }
STRATA_FN VF VMul(VF a, VF b) { return _mm256_mul_ps(a, b); }
STRATA_FN VF VDiv(VF a, VF b) { return _mm256_div_ps(a, b); }
STRATA_FN VF VFmadd(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
STRATA_FN VF VMax(VF a, VF b) { return _mm256_max_ps(a, b); }
STRATA_FN VF VMin(VF a, VF b) { return _mm256_min_ps(a, b); }
STRATA_FN float VHsum(VF v) { return HsumPs(v); }
STRATA_FN void VHsum16(const VF (&v)[16],
                       float* out) {  // (unused: grouped attention is 512-bit only)
  for (int k = 0; k < 16; ++k) out[k] = HsumPs(v[k]);
}
STRATA_FN float VHmax(VF v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
STRATA_FN VF VRound(VF v) {
  return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
STRATA_FN VF VExp2i(VF k) {
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_castsi256_ps(e);
}

#include "kernels/cpu/vec_kernels.inc"

}  // namespace

__attribute__((target(STRATA_TARGET))) void Avx2QuantizeQ8_0(const float* x, BlockQ8_0* y,
                                                             size_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 8 * i);
      amax =
          _mm256_max_ps(_mm256_and_ps(v[i], abs_mask), amax);  // a NaN lane keeps amax, as std::max
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float a = _mm_cvtss_f32(m);
    // As ref::QuantizeQ8_0: d = amax/127 as f16, inverse 127/amax, round half to even (MXCSR's
    // default, which std::nearbyint follows too).
    y[b].d = F32ToF16(a / 127.0f);
    const __m256 id = _mm256_set1_ps(a != 0.0f ? 127.0f / a : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
    const __m256i q16 = _mm256_packs_epi32(q[0], q[1]), q16b = _mm256_packs_epi32(q[2], q[3]);
    const __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16, q16b), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), q8);
  }
}

// The first value of largest magnitude in x[0, 256) (as ref's SignedMax: NaNs never win), or 0.
__attribute__((target(STRATA_TARGET))) static float SignedMax256(const float* x) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < kQK_K; i += 8)
    amax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), amax);
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float a = _mm_cvtss_f32(m);
  if (a == 0.0f) return 0.0f;
  const __m256 target = _mm256_set1_ps(a);
  for (int i = 0; i < kQK_K; i += 8) {
    const __m256 v = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(v, target, _CMP_EQ_OQ));
    if (hit != 0) return x[i + __builtin_ctz(static_cast<unsigned>(hit))];
  }
  return 0.0f;  // unreachable: some lane holds the maximum
}

__attribute__((target(STRATA_TARGET))) void Avx2QuantizeQ8_K(const float* x, BlockQ8_K* y,
                                                             size_t n) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i max_q = _mm256_set1_epi32(127);
  const __m256i ones = _mm256_set1_epi16(1);
  for (size_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    const float m = SignedMax256(x);
    if (m == 0.0f) {
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / m;
    const __m256 is = _mm256_set1_ps(iscale);
    for (int i = 0; i < kQK_K; i += 32) {  // nearbyint (MXCSR's round to nearest even), min 127
      __m256i q[4];
      for (int k = 0; k < 4; ++k)
        q[k] = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + i + 8 * k))), max_q);
      const __m256i q16 = _mm256_packs_epi32(q[0], q[1]), q16b = _mm256_packs_epi32(q[2], q[3]);
      const __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16, q16b), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + i), q8);
    }
    for (int g = 0; g < kQK_K / 16; g += 2) {  // bsums of two groups of 16 per pass
      const __m256i q32 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs + 16 * g));
      const __m256i lo = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(q32)), ones);
      const __m256i hi =
          _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(q32, 1)), ones);
      __m256i s = _mm256_hadd_epi32(lo, hi);  // [lo01 lo23 hi01 hi23 | lo45 lo67 hi45 hi67]
      s = _mm256_hadd_epi32(s, s);            // [lo0-3 hi0-3 . . | lo4-7 hi4-7 . .]
      const __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      y[b].bsums[g] = static_cast<int16_t>(_mm_cvtsi128_si32(t));
      y[b].bsums[g + 1] = static_cast<int16_t>(_mm_extract_epi32(t, 1));
    }
    y[b].d = 1.0f / iscale;
  }
}

__attribute__((target(STRATA_TARGET))) void Avx2ToF16(const float* x, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = F32ToF16(x[i]);
}

// F32ToBF16's integer rounding of x[0, 8), as f32 bit patterns (the bf16 value in the upper half).
__attribute__((target(STRATA_TARGET))) static __m256i RoundBf16(const float* x) {
  const __m256i round = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(v, 16), one);
  const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(v, _mm256_add_epi32(round, odd)), high);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, abs_mask), inf);
  const __m256i quieted = _mm256_and_si256(_mm256_or_si256(v, quiet), high);
  return _mm256_blendv_epi8(rounded, quieted, nan);
}

__attribute__((target(STRATA_TARGET))) void Avx2ToBf16(const float* x, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i h = _mm256_srli_epi32(RoundBf16(x + i), 16);  // < 2^16: packus keeps it
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
  }
  for (; i < n; ++i) out[i] = F32ToBF16(x[i]);
}

__attribute__((target(STRATA_TARGET))) void Avx2RoundActivations(DType weight_type, const float* x,
                                                                 float* out, size_t n) {
  size_t i = 0;
  if (weight_type == DType::kF16) {
    for (; i + 8 <= n; i += 8) {  // vcvtps2ph rounds to nearest even (imm 0), as F32ToF16
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
  } else if (weight_type == DType::kBF16) {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), RoundBf16(x + i));
  }
  if (i < n) ConvertActivations(weight_type, x + i, out + i, n - i);
}

#define STRATA_ENTRY(name) Avx2##name
#include "kernels/cpu/entry_points.inc"
#undef STRATA_ENTRY

}  // namespace strata::kernels::internal
