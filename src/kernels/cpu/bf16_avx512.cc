// BF16 weights x BF16-exact activations with AVX512-BF16 `vdpbf16ps` (the "bf16-dot" variant of
// the avx512 level; kernels.cc selects it when cpuid reports AVX512_BF16, see kernels.h).
//
// Arithmetic (the variant's contract, the same for the row and the panel layout and for any number
// of tokens): MatMul hands these kernels the activations converted to bf16 by Avx512ToBf16
// (vcvtneps2bf16: round to nearest even, denormals to zero: the values ConvertActivations gives
// elsewhere, but for denormals), so every product is exact in f32. Each output (row, token) has two
// 8-lane f32 accumulators, for the even and the odd 16-value chunks; value pair (16c + 2j,
// 16c + 2j + 1) of the row goes to lane j of chunk c's accumulator, added by one vdpbf16ps per
// chunk in chunk order (as the instruction defines: odd element first, then even, each add
// rounded, denormal inputs read as zero). Then y = Hsum8(even + odd) + the last n % 16 products
// one by one in f32. This differs from the FMA variant (16 lanes, no flushing) in the
// order of the additions only, so both stay within the reference tolerance; a test pins that the
// two layouts and every token count give the same bits within the variant.
//
// Panel tile: a kPanels4 chunk holds 16 values of rows 0..3 consecutively, so one 512-bit load is
// [row 0 | row 1] and the next [row 2 | row 3]; the activation chunk's 16 bf16 values
// broadcast from memory is [x | x]. One vdpbf16ps thus advances two rows (low and high 8 lanes)
// with no shuffle in the loop. Prefill: 4 rows x up to 6 tokens per pass (24 accumulators: two
// chains per output hide the instruction's latency); decode: 4 rows x 1 token.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC bug 105593, as in kernels_avx512.cc
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernels_internal.h"
#include "tensor/fp16.h"

namespace strata::kernels::internal {
namespace {

#define STRATA_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16"
#define STRATA_FN static inline __attribute__((target(STRATA_TARGET), always_inline))

STRATA_FN float Hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// The last n % 16 products of one row, one by one, after the vector part.
STRATA_FN float Tail(float s, const uint16_t* w, const uint16_t* x, size_t tail) {
  for (size_t j = 0; j < tail; ++j) s += BF16ToF32(w[j]) * BF16ToF32(x[j]);
  return s;
}

template <int kNt>
STRATA_FN void TokenPtrs(const void* x, size_t xs, const uint16_t* (&xt)[kNt]) {
  for (int t = 0; t < kNt; ++t)
    xt[t] = reinterpret_cast<const uint16_t*>(static_cast<const char*>(x) +
                                              static_cast<size_t>(t) * xs);
}

STRATA_FN __m256bh Load16(const uint16_t* p) {
  return (__m256bh)_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// One row in the GGUF layout: 256-bit vdpbf16ps, the same lanes and order as a panel's half.
template <int kNt>
STRATA_FN void RowDot(const void* wv, const void* xv, size_t xs, size_t n, float* out) {
  const auto* w = static_cast<const uint16_t*>(wv);
  const uint16_t* xt[kNt];
  TokenPtrs<kNt>(xv, xs, xt);
  __m256 even[kNt], odd[kNt];
  for (int t = 0; t < kNt; ++t) even[t] = odd[t] = _mm256_setzero_ps();
  const size_t chunks = n / 16, tail = n % 16;
  size_t c = 0;
  for (; c + 2 <= chunks; c += 2) {
    const __m256bh w0 = Load16(w + 16 * c), w1 = Load16(w + 16 * c + 16);
    for (int t = 0; t < kNt; ++t) {
      even[t] = _mm256_dpbf16_ps(even[t], w0, Load16(xt[t] + 16 * c));
      odd[t] = _mm256_dpbf16_ps(odd[t], w1, Load16(xt[t] + 16 * c + 16));
    }
  }
  if (c < chunks) {
    const __m256bh w0 = Load16(w + 16 * c);
    for (int t = 0; t < kNt; ++t) even[t] = _mm256_dpbf16_ps(even[t], w0, Load16(xt[t] + 16 * c));
  }
  for (int t = 0; t < kNt; ++t)
    out[t] =
        Tail(Hsum8(_mm256_add_ps(even[t], odd[t])), w + 16 * chunks, xt[t] + 16 * chunks, tail);
}

// Chunk c of a kPanels4 panel into one chain of accumulators (rows 0-1, rows 2-3) per token.
template <int kNt>
STRATA_FN void PanelStep(const uint16_t* p, const uint16_t* const (&xt)[kNt], size_t c,
                         __m512 (&acc01)[kNt], __m512 (&acc23)[kNt]) {
  // No software prefetch: the hardware's stream prefetch alone measured faster here (Zen 5, 1B
  // BF16, 1 thread: tg 12.6 against 11.2 tok/s with 2 lines 4 KiB ahead, 8 interleaved pairs;
  // 2 threads and pp512 no worse; docs/perf.md). This loop has the fewest micro-ops per cache
  // line of the panel kernels (2 loads, 2 vdpbf16ps per 2 lines), so the prefetches were a
  // large share of its instructions and of the L1 misses in flight.
  const uint16_t* chunk = p + size_t{kFloatPanelRows} * 16 * c;
  const auto w01 = (__m512bh)_mm512_loadu_si512(chunk);
  const auto w23 = (__m512bh)_mm512_loadu_si512(chunk + 32);
  for (int t = 0; t < kNt; ++t) {
    const auto x = (__m512bh)_mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xt[t] + 16 * c)));  // [x | x]
    acc01[t] = _mm512_dpbf16_ps(acc01[t], w01, x);
    acc23[t] = _mm512_dpbf16_ps(acc23[t], w23, x);
  }
}

// A kPanels4 panel (4 rows); out[r * kMaxPanelTileTokens + t].
template <int kNt>
STRATA_FN void PanelDot(const void* pv, const void* xv, size_t xs, size_t n, float* out) {
  constexpr int kR = kFloatPanelRows;
  static_assert(kR == 4, "two rows per 512-bit vector, two vectors per chunk");
  const auto* p = static_cast<const uint16_t*>(pv);
  const uint16_t* xt[kNt];
  TokenPtrs<kNt>(xv, xs, xt);
  // [0]: even chunks, [1]: odd chunks (two chains per output, as RowDot).
  __m512 acc01[2][kNt], acc23[2][kNt];
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < kNt; ++t) acc01[h][t] = acc23[h][t] = _mm512_setzero_ps();
  const size_t chunks = n / 16, tail = n % 16;
  size_t c = 0;
  for (; c + 2 <= chunks; c += 2) {
    PanelStep<kNt>(p, xt, c, acc01[0], acc23[0]);
    PanelStep<kNt>(p, xt, c + 1, acc01[1], acc23[1]);
  }
  if (c < chunks) PanelStep<kNt>(p, xt, c, acc01[0], acc23[0]);
  const uint16_t* tails = p + static_cast<size_t>(kR) * 16 * chunks;
  for (int t = 0; t < kNt; ++t) {
    const uint16_t* xtail = xt[t] + 16 * chunks;
    const __m512 a01 = _mm512_add_ps(acc01[0][t], acc01[1][t]);
    const __m512 a23 = _mm512_add_ps(acc23[0][t], acc23[1][t]);
    const __m256 lanes[kR] = {_mm512_castps512_ps256(a01), _mm512_extractf32x8_ps(a01, 1),
                              _mm512_castps512_ps256(a23), _mm512_extractf32x8_ps(a23, 1)};
    for (int r = 0; r < kR; ++r)
      out[static_cast<size_t>(r) * kMaxPanelTileTokens + static_cast<size_t>(t)] =
          Tail(Hsum8(lanes[r]), tails + static_cast<size_t>(r) * tail, xtail, tail);
  }
}

__attribute__((target(STRATA_TARGET))) void TileBF16Dot(const void* w, const void* x, size_t xs,
                                                        int nt, size_t n, float* out) {
  switch (nt) {
    case 1:
      return RowDot<1>(w, x, xs, n, out);
    case 2:
      return RowDot<2>(w, x, xs, n, out);
    case 3:
      return RowDot<3>(w, x, xs, n, out);
    default:
      return RowDot<4>(w, x, xs, n, out);
  }
}

__attribute__((target(STRATA_TARGET))) void PanelBF16Dot(const void* w, const void* x, size_t xs,
                                                         int nt, size_t n, float* out) {
  switch (nt) {
    case 1:
      return PanelDot<1>(w, x, xs, n, out);
    case 2:
      return PanelDot<2>(w, x, xs, n, out);
    case 3:
      return PanelDot<3>(w, x, xs, n, out);
    case 4:
      return PanelDot<4>(w, x, xs, n, out);
    case 5:
      return PanelDot<5>(w, x, xs, n, out);
    default:
      return PanelDot<6>(w, x, xs, n, out);
  }
}

}  // namespace

__attribute__((target(STRATA_TARGET))) void Avx512ToBf16(const float* x, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  if (i < n) {  // the same instruction on a zero-padded last vector
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
    _mm256_mask_storeu_epi16(out + i, m, (__m256i)v);
  }
}

DotTileFn Avx512Bf16DotTile() { return TileBF16Dot; }
DotPanelFn Avx512Bf16DotPanel4() { return PanelBF16Dot; }

}  // namespace strata::kernels::internal
