// AVX2 MatMul for the K-quants (Q4_K, Q5_K, Q6_K) on kPanels16 panels (kernels_internal.h:
// kQ4KRecordBytes, kQ5KRecordBytes, kQ6KRecordBytes): the 256-bit form of the avx512 level's GEMV
// (cpu/matmul_kq_avx512.cc), for every token count, with its exact integers and its float fold:
//   Q4_K / Q5_K: isum_b = sum_s scale_s * dot(q_s, y_s), imin_b = sum_s min_s * bsum_s(y),
//                acc = fma(float(isum_b), d_b * dx_b, acc), accm = fma(float(imin_b),
//                dmin_b * dx_b, accm), y = acc - accm
//   Q6_K:        isum_b = sum_g scale_g * (dot(q_g, y_g) - 32 * bsum_g), acc = fma(float(isum_b),
//                d_b * dx_b, acc), y = acc
// so the outputs are the avx512 level's bits (the activations are the same Q8_K bytes,
// Avx2QuantizeQ8_K), whatever the token count, thread split or layout.
//
// A record's 64-byte vector holds 4 quant bytes of each of 16 rows; its low 32 bytes are rows 0-7
// and its high 32 bytes rows 8-15 (a "half"), so each half is 8 rows in 8 lanes multiplied by the
// token's 4 values broadcast from memory: no cross-lane moves in the loop. Without VNNI:
// vpmaddubsw (u8 levels x s8 activations) gives 16-bit pair sums, which add exactly in int16 while
// they fit (Q4_K: 8 vectors, at most 8 * 2 * 15 * 128 = 30720; Q5_K: 4 vectors, 4 * 2 * 31 * 128 =
// 31744; Q6_K: 2 vectors, 2 * 2 * 63 * 128 = 32256), and one vpmaddwd by the rows' scales
// (replicated into both 16-bit halves of each lane) multiplies and widens them at once.
// The mins (Q4_K/Q5_K) and Q6_K's 32-offset terms are vpmaddwd of the rows' int16 scale pairs with
// the token's int16 bsum pairs.
// kRows weights (STRATA_WEIGHT_LAYOUT=rows, tests) are packed into one panel at a time first.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "base/thread_pool.h"
#include "kernels/cpu/quantize_avx2.h"
#include "kernels/kernels_internal.h"

namespace strata::kernels::internal {
namespace {

#define K2_TARGET "avx2,fma,f16c"
#define K2_FN static inline __attribute__((target(K2_TARGET), always_inline))
#define K2_ENTRY __attribute__((target(K2_TARGET), noinline))

constexpr size_t kPanel = kPanelRows;
constexpr size_t kPrefetch = 4096;  // how far ahead of its loads the GEMV prefetches

K2_FN __m256i Bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// 8 bytes at p (one per row of a half) -> 8 int32 lanes holding the value in both 16-bit halves:
// the vpmaddwd multiplier of a row's two 16-bit partial sums.
template <bool kSigned>
K2_FN __m256i Scales8(const char* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m256i x = kSigned ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
  return _mm256_or_si256(_mm256_and_si256(x, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(x, 16));
}

// Rows' byte pairs (p0[i], p1[i]) as int16 pairs in 8 lanes (kSigned: sign-extended bytes).
template <bool kSigned>
K2_FN __m256i Pairs8(const char* p0, const char* p1) {
  const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0));
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p1));
  const __m256i x = kSigned ? _mm256_cvtepi8_epi32(a) : _mm256_cvtepu8_epi32(a);
  const __m256i y = kSigned ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
  return _mm256_or_si256(_mm256_and_si256(x, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(y, 16));
}

// The token's int16 pair (v0, v1) broadcast to every lane.
K2_FN __m256i BcastPair(int32_t v0, int32_t v1) {
  return _mm256_set1_epi32(static_cast<int32_t>((static_cast<uint32_t>(v0) & 0xFFFFU) |
                                                (static_cast<uint32_t>(v1) << 16)));
}

// ---- Q4_K and Q5_K (kQ5: the record's qh vectors add bit 4 of each level) ----
// Exact isum / imin of super-block record `rec` for the rows of half rh.
template <bool kQ5, int kNt>
K2_FN void SuperBlockQ4(const char* rec, size_t rh, const BlockQ8_K* const (&y)[kNt],
                        __m256i (&isum)[kNt], __m256i (&imin)[kNt]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
  constexpr int kParts = kQ5 ? 2 : 1;  // int16 sums per sub-block before they could overflow
  for (int t = 0; t < kNt; ++t) isum[t] = imin[t] = _mm256_setzero_si256();
  for (size_t j = 0; j < 4; ++j) {
    __m256i s0[kNt][kParts], s1[kNt][kParts];
    for (int t = 0; t < kNt; ++t)
      for (int p = 0; p < kParts; ++p) s0[t][p] = s1[t][p] = _mm256_setzero_si256();
    for (size_t k = 0; k < 8; ++k) {
      const int p = kQ5 ? static_cast<int>(k / 4) : 0;
      const __m256i v =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 64 * (8 * j + k) + 32 * rh));
      __m256i lo = _mm256_and_si256(v, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (kQ5) {  // bits 2j (low nibble's level) and 2j + 1 (high's) of qh -> bit 4
        const __m256i q = _mm256_srl_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                               rec + kQ5KQhOff + 64 * k + 32 * rh)),
                                           _mm_cvtsi32_si128(static_cast<int>(2 * j)));
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(q, 4), m10));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(q, 3), m10));
      }
      for (int t = 0; t < kNt; ++t) {
        const int8_t* a = y[t]->qs + 64 * j + 4 * k;
        s0[t][p] = _mm256_add_epi16(s0[t][p], _mm256_maddubs_epi16(lo, Bcast4(a)));
        s1[t][p] = _mm256_add_epi16(s1[t][p], _mm256_maddubs_epi16(hi, Bcast4(a + 32)));
      }
    }
    const __m256i sc0 = Scales8<false>(rec + kQ4KScalesOff + 16 * (2 * j) + 8 * rh);
    const __m256i sc1 = Scales8<false>(rec + kQ4KScalesOff + 16 * (2 * j + 1) + 8 * rh);
    for (int t = 0; t < kNt; ++t)
      for (int p = 0; p < kParts; ++p)
        isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_madd_epi16(s0[t][p], sc0),
                                                             _mm256_madd_epi16(s1[t][p], sc1)));
  }
  for (size_t p = 0; p < 4; ++p) {  // sub-blocks 2p, 2p + 1
    const __m256i mn = Pairs8<false>(rec + kQ4KMinsOff + 16 * (2 * p) + 8 * rh,
                                     rec + kQ4KMinsOff + 16 * (2 * p + 1) + 8 * rh);
    for (int t = 0; t < kNt; ++t) {
      const int16_t* bs = y[t]->bsums;
      const __m256i b = BcastPair(bs[4 * p] + bs[4 * p + 1], bs[4 * p + 2] + bs[4 * p + 3]);
      imin[t] = _mm256_add_epi32(imin[t], _mm256_madd_epi16(mn, b));
    }
  }
}

// ---- Q6_K: values of part h (128 each), l < 32: v(l) from ql[64h + l] low nibble and
// qh[32h + l] bits 0-1, v(l + 32) ql[64h + 32 + l] low and qh bits 2-3, v(l + 64) ql[64h + l]
// high and qh bits 4-5, v(l + 96) ql[64h + 32 + l] high and qh bits 6-7; group of value k: k / 16.
K2_FN void Q6Values(__m256i ql0, __m256i ql1, __m256i qh, __m256i (&v)[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  v[0] =
      _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
  v[1] =
      _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
  v[2] =
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
  v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                         _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
}

template <int kNt>
K2_FN void SuperBlockQ6(const char* rec, size_t rh, const BlockQ8_K* const (&y)[kNt],
                        __m256i (&isum)[kNt]) {
  const auto at = [&](size_t off) { return reinterpret_cast<const __m256i*>(rec + off + 32 * rh); };
  for (int t = 0; t < kNt; ++t) isum[t] = _mm256_setzero_si256();
  for (size_t h = 0; h < 2; ++h) {
    for (size_t lh = 0; lh < 2; ++lh) {  // l in [16 lh, 16 lh + 16): groups 8h + lh + 2e
      __m256i sc[4];
      for (size_t e = 0; e < 4; ++e)
        sc[e] = Scales8<true>(rec + kQ6KScalesOff + 16 * (8 * h + lh + 2 * e) + 8 * rh);
      for (size_t k2 = 0; k2 < 2; ++k2) {  // two steps of 4 values summed in int16, then widened
        __m256i s[4][kNt];
        for (int e = 0; e < 4; ++e)
          for (int t = 0; t < kNt; ++t) s[e][t] = _mm256_setzero_si256();
        for (size_t kk = 2 * k2; kk < 2 * k2 + 2; ++kk) {
          const size_t l = 16 * lh + 4 * kk;
          __m256i v[4];
          Q6Values(_mm256_loadu_si256(at(16 * (64 * h + l))),
                   _mm256_loadu_si256(at(16 * (64 * h + 32 + l))),
                   _mm256_loadu_si256(at(kQ6KQhOff + 16 * (32 * h + l))), v);
          for (int e = 0; e < 4; ++e)
            for (int t = 0; t < kNt; ++t)
              s[e][t] = _mm256_add_epi16(
                  s[e][t], _mm256_maddubs_epi16(
                               v[e], Bcast4(y[t]->qs + 128 * h + 32 * static_cast<size_t>(e) + l)));
        }
        for (int e = 0; e < 4; ++e)
          for (int t = 0; t < kNt; ++t)
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s[e][t], sc[e]));
      }
    }
  }
  __m256i off[kNt];  // sum_g scale_g * bsum_g, by int16 pairs of groups
  for (int t = 0; t < kNt; ++t) off[t] = _mm256_setzero_si256();
  for (size_t p = 0; p < 8; ++p) {
    const __m256i scp = Pairs8<true>(rec + kQ6KScalesOff + 16 * (2 * p) + 8 * rh,
                                     rec + kQ6KScalesOff + 16 * (2 * p + 1) + 8 * rh);
    for (int t = 0; t < kNt; ++t)
      off[t] = _mm256_add_epi32(
          off[t], _mm256_madd_epi16(scp, BcastPair(y[t]->bsums[2 * p], y[t]->bsums[2 * p + 1])));
  }
  for (int t = 0; t < kNt; ++t) isum[t] = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(off[t], 5));
}

// out[t][rh] = rows 8 rh .. 8 rh + 7 of the panel against token t, over nb super-blocks.
template <DType kT, int kNt>
K2_FN void PanelGemv(const char* panel, size_t nb, const BlockQ8_K* const (&act)[kNt],
                     __m256 (&out)[kNt][2]) {
  constexpr size_t kRecord = kT == DType::kQ4_K   ? kQ4KRecordBytes
                             : kT == DType::kQ5_K ? kQ5KRecordBytes
                                                  : kQ6KRecordBytes;
  constexpr size_t kDOff = kT == DType::kQ6_K ? kQ6KDOff : kQ4KDOff;
  __m256 acc[kNt][2], accm[kNt][2];
  for (int t = 0; t < kNt; ++t)
    for (int rh = 0; rh < 2; ++rh) acc[t][rh] = accm[t][rh] = _mm256_setzero_ps();
  const size_t ahead = PanelPrefetchBytes(kPrefetch);
  for (size_t b = 0; b < nb; ++b) {
    const char* rec = panel + b * kRecord;
    for (size_t o = 0; o < kRecord; o += 64) _mm_prefetch(rec + ahead + o, _MM_HINT_T0);
    const BlockQ8_K* y[kNt];
    for (int t = 0; t < kNt; ++t) y[t] = act[t] + b;
    for (size_t rh = 0; rh < 2; ++rh) {
      __m256i isum[kNt], imin[kNt];
      if constexpr (kT == DType::kQ6_K) {
        SuperBlockQ6<kNt>(rec, rh, y, isum);
      } else {
        SuperBlockQ4<kT == DType::kQ5_K, kNt>(rec, rh, y, isum, imin);
      }
      const __m256 dw =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kDOff + 16 * rh)));
      for (int t = 0; t < kNt; ++t) {
        const __m256 dx = _mm256_set1_ps(y[t]->d);
        acc[t][rh] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, dx), acc[t][rh]);
      }
      if constexpr (kT != DType::kQ6_K) {
        const __m256 dmw = _mm256_cvtph_ps(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kQ4KDminOff + 16 * rh)));
        for (int t = 0; t < kNt; ++t)
          accm[t][rh] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin[t]),
                                        _mm256_mul_ps(dmw, _mm256_set1_ps(y[t]->d)), accm[t][rh]);
      }
    }
  }
  for (int t = 0; t < kNt; ++t)
    for (int rh = 0; rh < 2; ++rh)
      out[t][rh] = kT == DType::kQ6_K ? acc[t][rh] : _mm256_sub_ps(acc[t][rh], accm[t][rh]);
}

// Tokens [t0, t0 + kNt) against one panel; stores rows [lo, hi) of it (y at its first row).
template <DType kT, int kNt>
K2_FN void PanelStore(const char* panel, size_t nb, const char* xq, size_t xq_stride, size_t t0,
                      size_t lo, size_t hi, float* y, size_t y_stride) {
  const BlockQ8_K* act[kNt];
  for (int t = 0; t < kNt; ++t)
    act[t] = reinterpret_cast<const BlockQ8_K*>(xq + (t0 + static_cast<size_t>(t)) * xq_stride);
  __m256 out[kNt][2];
  PanelGemv<kT, kNt>(panel, nb, act, out);
  for (int t = 0; t < kNt; ++t) {
    float* yt = y + (t0 + static_cast<size_t>(t)) * y_stride;
    if (lo == 0 && hi == kPanel) {
      _mm256_storeu_ps(yt, out[t][0]);
      _mm256_storeu_ps(yt + 8, out[t][1]);
      continue;
    }
    alignas(32) float tmp[kPanel];
    _mm256_store_ps(tmp, out[t][0]);
    _mm256_store_ps(tmp + 8, out[t][1]);
    for (size_t i = lo; i < hi; ++i) yt[i] = tmp[i];
  }
}

// Rows [r0, r1) of one job (a panel cut by the range computes all 16 rows, stores those inside).
template <DType kT>
K2_ENTRY void GemvRows(const WeightMatrix& w, size_t r0, size_t r1, const char* xq,
                       size_t xq_stride, size_t n_tokens, float* y, size_t y_stride) {
  const PanelGeom g = PanelGeometry(w.type, w.cols);
  const bool rows = w.layout == WeightLayout::kRows;
  thread_local Scratch pack;
  char* packed = rows ? pack.Get(g.stride) : nullptr;
  for (size_t p0 = r0 / kPanel * kPanel; p0 < r1; p0 += kPanel) {
    const size_t lo = std::max(p0, r0) - p0, hi = std::min(p0 + kPanel, r1) - p0;
    const char* panel = static_cast<const char*>(w.data) + p0 / kPanel * g.stride;
    if (rows) {
      PackPanel16(w, p0, packed);
      panel = packed;
    }
    float* yp = y + p0;
    size_t t = 0;
    for (; t + 2 <= n_tokens; t += 2)
      PanelStore<kT, 2>(panel, g.nb, xq, xq_stride, t, lo, hi, yp, y_stride);
    if (t < n_tokens) PanelStore<kT, 1>(panel, g.nb, xq, xq_stride, t, lo, hi, yp, y_stride);
  }
}

}  // namespace

bool Avx2MatMulKQuant(std::span<const QxJob> jobs, const float* x, size_t x_stride, size_t n_tokens,
                      ThreadPool* pool) {
  if (jobs.empty()) return true;
  const DType type = jobs[0].w->type;
  if (type != DType::kQ4_K && type != DType::kQ5_K && type != DType::kQ6_K) return false;
  const size_t cols = jobs[0].w->cols;
  for (const QxJob& j : jobs)
    if (j.w->type != type || j.w->cols != cols) return false;
  const size_t xq_stride = (cols / kQK_K * sizeof(BlockQ8_K) + 63) / 64 * 64;
  thread_local Scratch act_buf;
  char* xq = act_buf.Get(xq_stride * n_tokens);
  RunRange(
      pool, n_tokens,
      [&](size_t t0, size_t t1, int) {
        for (size_t t = t0; t < t1; ++t)
          Avx2QuantizeQ8_K(x + t * x_stride, reinterpret_cast<BlockQ8_K*>(xq + t * xq_stride),
                           cols);
      },
      3);
  size_t total_rows = 0;
  for (const QxJob& j : jobs) total_rows += j.w->rows;
  RunRange(
      pool, total_rows,
      [&](size_t g0, size_t g1, int) {
        ForJobRows(jobs, g0, g1, [&](const QxJob& j, size_t r0, size_t r1) {
          if (type == DType::kQ4_K) {
            GemvRows<DType::kQ4_K>(*j.w, r0, r1, xq, xq_stride, n_tokens, j.y, j.y_stride);
          } else if (type == DType::kQ5_K) {
            GemvRows<DType::kQ5_K>(*j.w, r0, r1, xq, xq_stride, n_tokens, j.y, j.y_stride);
          } else {
            GemvRows<DType::kQ6_K>(*j.w, r0, r1, xq, xq_stride, n_tokens, j.y, j.y_stride);
          }
        });
      },
      kPanel);
  return true;
}

}  // namespace strata::kernels::internal
