// AVX-512 VNNI MatMul for the K-quants (Q4_K, Q5_K, Q6_K): the decode GEMV on kPanels16 panels
// (kernels_internal.h: kQ4KRecordBytes, kQ5KRecordBytes, kQ6KRecordBytes) and the prefill GEMM,
// with identical bits.
//
// Arithmetic of Q4_K and Q5_K (Q6_K: its section below), per output (row r, token t), whatever path
// computes it: for super-block b = 0, 1, ...
//   isum_b = sum_s scale_s * dot(q_s, y_s)   (s < 8 sub-blocks of 32; exact int32)
//   imin_b = sum_s min_s * bsum_s(y)          (bsum_s: the sum of sub-block s's 32 activations)
//   acc  = fma(float(isum_b), d_b * dx_b, acc)
//   accm = fma(float(imin_b), dmin_b * dx_b, accm)
// y = acc - accm. The integers are exact (|isum| < 2^25), so any order of the integer additions
// gives them; each output lives in one f32 lane and sees this float sequence, whether the GEMV
// (lanes = 16 rows) or the GEMM (lanes = 16 tokens) computed it, for any thread count or token
// grouping. It differs from the avx2 level's 256-bit tile (which keeps 8 float partial sums per
// output): kernels/README.md.
//
// GEMV: per panel record, vector 8 j + k holds 4 quant bytes of each of the 16 rows, so one
// vpdpbusd (u8 nibbles x the token's 4 values broadcast) adds row i's 4 products to lane i: loads,
// ANDs, dot products and one vpmulld per sub-block for the scales; no cross-lane moves.
// GEMM (>= kGemmMinTokens tokens): the panel's rows unpacked once to int8 in value order (with
// -128 * each sub-block's sum), activations of 16 tokens transposed so that one vector holds 4
// consecutive values of 16 tokens as u8 (y + 128); tile 4 rows x 16 tokens.
// kRows weights (STRATA_WEIGHT_LAYOUT=rows, tests) are packed into one panel at a time first.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>

#include "base/thread_pool.h"
#include "kernels/cpu/quantize_avx2.h"
#include "kernels/kernels_internal.h"

namespace strata::kernels::internal {
namespace {

#define QK_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"
#define QK_FN static inline __attribute__((target(QK_TARGET), always_inline))
#define QK_ENTRY __attribute__((target(QK_TARGET), noinline))

constexpr size_t kPanel = kPanelRows;
constexpr size_t kGroup = 16;  // tokens per GEMM lane group
constexpr int kTileRows = 4;   // rows per GEMM register tile
constexpr size_t kSb = 256;    // values per super-block
// GEMM activation group, per super-block: 64 vectors of u8 quads (y + 128) of the 16 tokens, 4
// vectors of sub-block sum pairs (int16 bsum_2p | bsum_2p+1 << 16), 16 dx floats.
constexpr size_t kGroupQuadsBytes = 64 * 64, kGroupBsOff = kGroupQuadsBytes,
                 kGroupDxOff = kGroupBsOff + 4 * 64, kGroupSbBytes = kGroupDxOff + 64;
// How far ahead of its loads the GEMV prefetches (STRATA_PANEL_PREFETCH overrides, for tuning; on
// Sapphire Rapids 1024-16384 measured within this VM's noise, 16.4-18.9 tok/s at every distance).
constexpr size_t kPrefetchBytes = 4096;

// One unpacked super-block of one row for the GEMM.
struct alignas(64) RowSb {
  int8_t w[kSb];    // values 0..15 in order
  int32_t corr[8];  // -128 * sum of sub-block s's values (cancels the activations' + 128)
  int32_t sc[8];    // 6-bit scales
  int32_t mnp[4];   // mins as int16 pairs: min_2p | min_2p+1 << 16
  float d, dmin;
};

// The panel holding rows [p0, p0 + 16): in place for kPanels16, else packed into *buf.
const char* PanelAt(const WeightMatrix& w, const PanelGeom& g, size_t p0, Scratch* buf) {
  if (w.layout == WeightLayout::kPanels16)
    return static_cast<const char*>(w.data) + p0 / kPanel * g.stride;
  char* dst = buf->Get(g.stride);
  PackPanel16(w, p0, dst);
  return dst;
}

QK_FN __m512i Bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

QK_FN __m512i Bytes16(const char* p) {  // 16 bytes -> 16 int32 lanes
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

QK_FN int32_t SubBlockSum(const BlockQ8_K& y, size_t s) {
  return static_cast<int32_t>(y.bsums[2 * s]) + static_cast<int32_t>(y.bsums[2 * s + 1]);
}

// ---- GEMV: 16 rows (lanes) x kNt tokens sharing every weight load ----
// Q4_K, and Q5_K (kQ5: the record's qh vectors add bit 4 of each level).
template <bool kQ5, int kNt>
QK_FN void PanelGemvQ4(const char* panel, size_t nb, const BlockQ8_K* const (&act)[kNt],
                       __m512 (&out)[kNt]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m4h = _mm512_set1_epi8(static_cast<char>(0xF0));
  const __m512i m10 = _mm512_set1_epi8(0x10);
  constexpr size_t kRecord = kQ5 ? kQ5KRecordBytes : kQ4KRecordBytes;
  __m512 acc[kNt], accm[kNt];
  for (int t = 0; t < kNt; ++t) acc[t] = accm[t] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const char* rec = panel + b * kRecord;
    for (size_t o = 0; o < kRecord; o += 64)
      _mm_prefetch(rec + PanelPrefetchBytes(kPrefetchBytes) + o, _MM_HINT_T0);
    __m512i isum[kNt];
    for (int t = 0; t < kNt; ++t) isum[t] = _mm512_setzero_si512();
    for (size_t j = 0; j < 4; ++j) {
      __m512i s0[kNt], s1[kNt];
      for (int t = 0; t < kNt; ++t) s0[t] = s1[t] = _mm512_setzero_si512();
      for (size_t k = 0; k < 8; ++k) {
        const __m512i v = _mm512_loadu_si512(rec + 64 * (8 * j + k));
        __m512i lo = _mm512_and_si512(v, m4);
        __m512i hi = _mm512_and_si512(v, m4h);  // Q4_K: 16 x the high nibble, shifted back below
        if constexpr (kQ5) {  // bits 2j (low nibble's level) and 2j + 1 (high's) of qh -> bit 4
          const __m512i q = _mm512_srl_epi16(_mm512_loadu_si512(rec + kQ5KQhOff + 64 * k),
                                             _mm_cvtsi32_si128(static_cast<int>(2 * j)));
          lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16(q, 4), m10));
          hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                               _mm512_and_si512(_mm512_slli_epi16(q, 3), m10));
        }
        for (int t = 0; t < kNt; ++t) {
          const int8_t* y = act[t][b].qs + 64 * j + 4 * k;
          s0[t] = _mm512_dpbusd_epi32(s0[t], lo, Bcast4(y));
          s1[t] = _mm512_dpbusd_epi32(s1[t], hi, Bcast4(y + 32));
        }
      }
      const __m512i sc0 = Bytes16(rec + kQ4KScalesOff + 16 * (2 * j));
      const __m512i sc1 = Bytes16(rec + kQ4KScalesOff + 16 * (2 * j + 1));
      for (int t = 0; t < kNt; ++t)
        isum[t] = _mm512_add_epi32(
            isum[t],
            _mm512_add_epi32(_mm512_mullo_epi32(s0[t], sc0),
                             _mm512_mullo_epi32(kQ5 ? s1[t] : _mm512_srai_epi32(s1[t], 4), sc1)));
    }
    __m512i imin[kNt];
    for (int t = 0; t < kNt; ++t) imin[t] = _mm512_setzero_si512();
    for (size_t s = 0; s < 8; ++s) {
      const __m512i mn = Bytes16(rec + kQ4KMinsOff + 16 * s);
      for (int t = 0; t < kNt; ++t)
        imin[t] = _mm512_add_epi32(
            imin[t], _mm512_mullo_epi32(mn, _mm512_set1_epi32(SubBlockSum(act[t][b], s))));
    }
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kQ4KDOff)));
    const __m512 dmw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kQ4KDminOff)));
    for (int t = 0; t < kNt; ++t) {
      const __m512 dx = _mm512_set1_ps(act[t][b].d);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, dx), acc[t]);
      accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin[t]), _mm512_mul_ps(dmw, dx), accm[t]);
    }
  }
  for (int t = 0; t < kNt; ++t) out[t] = _mm512_sub_ps(acc[t], accm[t]);
}

template <int kNt>
QK_FN void PanelGemvQ6(const char* panel, size_t nb, const BlockQ8_K* const (&act)[kNt],
                       __m512 (&out)[kNt]);

template <DType kT, int kNt>
QK_FN void PanelGemvStore(const char* panel, size_t nb, const char* xq, size_t xq_stride, size_t t0,
                          __mmask16 mask, float* y, size_t y_stride) {
  const BlockQ8_K* act[kNt];
  for (int t = 0; t < kNt; ++t)
    act[t] = reinterpret_cast<const BlockQ8_K*>(xq + (t0 + static_cast<size_t>(t)) * xq_stride);
  __m512 out[kNt];
  if constexpr (kT == DType::kQ6_K) {
    PanelGemvQ6<kNt>(panel, nb, act, out);
  } else {
    PanelGemvQ4<kT == DType::kQ5_K, kNt>(panel, nb, act, out);
  }
  for (int t = 0; t < kNt; ++t)
    _mm512_mask_storeu_ps(y + (t0 + static_cast<size_t>(t)) * y_stride, mask, out[t]);
}

// Rows [r0, r1) (a panel cut by the range computes all 16 lanes and stores those inside it).
template <DType kT>
QK_ENTRY void GemvRows(const WeightMatrix& w, size_t r0, size_t r1, const char* xq,
                       size_t xq_stride, size_t n_tokens, float* y, size_t y_stride) {
  const PanelGeom g = PanelGeometry(w.type, w.cols);
  thread_local Scratch pack;
  for (size_t p0 = r0 / kPanel * kPanel; p0 < r1; p0 += kPanel) {
    const size_t lo = std::max(p0, r0) - p0, hi = std::min(p0 + kPanel, r1) - p0;
    const auto mask = static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
    const char* panel = PanelAt(w, g, p0, &pack);
    float* yp = y + p0;
    size_t t = 0;
    for (; t + 4 <= n_tokens; t += 4)
      PanelGemvStore<kT, 4>(panel, g.nb, xq, xq_stride, t, mask, yp, y_stride);
    for (; t + 2 <= n_tokens; t += 2)
      PanelGemvStore<kT, 2>(panel, g.nb, xq, xq_stride, t, mask, yp, y_stride);
    for (; t < n_tokens; ++t)
      PanelGemvStore<kT, 1>(panel, g.nb, xq, xq_stride, t, mask, yp, y_stride);
  }
}

// ---- GEMM ----
// Row i of a panel (nb super-blocks) -> nb RowSb.
template <bool kQ5>
QK_FN void UnpackRowQ4(const char* panel, size_t nb, size_t i, RowSb* out) {
  const __m256i step = _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
  for (size_t b = 0; b < nb; ++b) {
    const char* rec = panel + b * (kQ5 ? kQ5KRecordBytes : kQ4KRecordBytes);
    RowSb& r = out[b];
    const __m256i qh =
        kQ5 ? _mm256_i32gather_epi32(reinterpret_cast<const int*>(rec + kQ5KQhOff + 4 * i), step, 1)
            : _mm256_setzero_si256();
    for (size_t j = 0; j < 4; ++j) {  // chunk j: bytes 4k..4k+3 at vector 8 j + k
      const __m256i q =
          _mm256_i32gather_epi32(reinterpret_cast<const int*>(rec + 512 * j + 4 * i), step, 1);
      __m256i vals[2] = {_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)};
      if constexpr (kQ5) {  // bit 2j (2j + 1) of qh: bit 4 of the low (high) nibble's level
        const __m256i qs = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(static_cast<int>(2 * j)));
        vals[0] = _mm256_or_si256(vals[0], _mm256_and_si256(_mm256_slli_epi16(qs, 4), m10));
        vals[1] = _mm256_or_si256(vals[1], _mm256_and_si256(_mm256_slli_epi16(qs, 3), m10));
      }
      for (size_t h = 0; h < 2; ++h) {
        const size_t s = 2 * j + h;
        _mm256_store_si256(reinterpret_cast<__m256i*>(r.w + 32 * s), vals[h]);
        const __m256i sad = _mm256_sad_epu8(vals[h], _mm256_setzero_si256());
        __m128i sum = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
        sum = _mm_add_epi64(sum, _mm_unpackhi_epi64(sum, sum));
        r.corr[s] = -128 * _mm_cvtsi128_si32(sum);
      }
    }
    for (size_t s = 0; s < 8; ++s)
      r.sc[s] = static_cast<unsigned char>(rec[kQ4KScalesOff + 16 * s + i]);
    for (size_t p = 0; p < 4; ++p) {
      const auto m0 =
          static_cast<uint32_t>(static_cast<unsigned char>(rec[kQ4KMinsOff + 32 * p + i]));
      const auto m1 =
          static_cast<uint32_t>(static_cast<unsigned char>(rec[kQ4KMinsOff + 32 * p + 16 + i]));
      r.mnp[p] = static_cast<int32_t>(m0 | m1 << 16);
    }
    uint16_t d16, dm16;
    std::memcpy(&d16, rec + kQ4KDOff + 2 * i, 2);
    std::memcpy(&dm16, rec + kQ4KDminOff + 2 * i, 2);
    r.d = _cvtsh_ss(d16);
    r.dmin = _cvtsh_ss(dm16);
  }
}

// Q5_K rows: the same unpacked form (levels 0..31).
struct RowSb5 : RowSb {};

QK_FN void UnpackRow(const char* panel, size_t nb, size_t i, RowSb* out) {
  UnpackRowQ4<false>(panel, nb, i, out);
}
QK_FN void UnpackRow(const char* panel, size_t nb, size_t i, RowSb5* out) {
  for (size_t b = 0; b < nb; ++b)  // one at a time: RowSb5 and RowSb have one size
    UnpackRowQ4<true>(panel + b * kQ5KRecordBytes, 1, i, out + b);
}

// 4 rows x 16 tokens over all super-blocks; out[r] lane t = (row r, token t).
template <typename Row>
QK_FN void GemmTile(const Row* const (&rows)[kTileRows], const char* grp, size_t nb,
                    __m512 (&out)[kTileRows]) {
  __m512 acc[kTileRows], accm[kTileRows];
  for (int r = 0; r < kTileRows; ++r) acc[r] = accm[r] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const char* ab = grp + b * kGroupSbBytes;
    __m512i isum[kTileRows], imin[kTileRows];
    for (int r = 0; r < kTileRows; ++r) isum[r] = imin[r] = _mm512_setzero_si512();
    for (size_t s = 0; s < 8; ++s) {
      __m512i dot[kTileRows];
      for (int r = 0; r < kTileRows; ++r) dot[r] = _mm512_set1_epi32(rows[r][b].corr[s]);
      for (size_t q = 0; q < 8; ++q) {
        const __m512i a = _mm512_load_si512(ab + 64 * (8 * s + q));
        for (int r = 0; r < kTileRows; ++r)
          dot[r] = _mm512_dpbusd_epi32(dot[r], a, Bcast4(rows[r][b].w + 32 * s + 4 * q));
      }
      for (int r = 0; r < kTileRows; ++r)
        isum[r] = _mm512_add_epi32(isum[r],
                                   _mm512_mullo_epi32(dot[r], _mm512_set1_epi32(rows[r][b].sc[s])));
    }
    for (size_t p = 0; p < 4; ++p) {
      const __m512i bs = _mm512_load_si512(ab + kGroupBsOff + 64 * p);
      for (int r = 0; r < kTileRows; ++r)
        imin[r] = _mm512_dpwssd_epi32(imin[r], bs, _mm512_set1_epi32(rows[r][b].mnp[p]));
    }
    const __m512 dxv = _mm512_load_ps(reinterpret_cast<const float*>(ab + kGroupDxOff));
    for (int r = 0; r < kTileRows; ++r) {
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]),
                               _mm512_mul_ps(_mm512_set1_ps(rows[r][b].d), dxv), acc[r]);
      accm[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin[r]),
                                _mm512_mul_ps(_mm512_set1_ps(rows[r][b].dmin), dxv), accm[r]);
    }
  }
  for (int r = 0; r < kTileRows; ++r) out[r] = _mm512_sub_ps(acc[r], accm[r]);
}

// ---- Q6_K (record: kernels_internal.h, kQ6KRecordBytes) ----
// Per super-block: isum = sum_g scale_g * (dot(q_g, y_g) - 32 * bsum_g) over the 16 groups of 16
// values (q the unsigned 6-bit levels; exact int32, |isum| < 2^29), acc = fma(float(isum),
// d_b * dx_b, acc), y = acc: rows in lanes for the GEMV, tokens in lanes for the GEMM.
// Values of half h (128 each), l < 32: v(l) from ql[64h + l] low nibble and qh[32h + l] bits 0-1,
// v(l + 32) from ql[64h + 32 + l] low and qh bits 2-3, v(l + 64) ql[64h + l] high and qh bits 4-5,
// v(l + 96) ql[64h + 32 + l] high and qh bits 6-7; group of value k: k / 16.

// The four value vectors (levels 0..63; values l, l + 32, l + 64, l + 96 of the 16 rows, 4 per
// row) from the ql vectors at l and l + 32 and the qh vector at l.
QK_FN void Q6Values(__m512i ql0, __m512i ql1, __m512i qh, __m512i (&v)[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  v[0] =
      _mm512_or_si512(_mm512_and_si512(ql0, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30));
  v[1] =
      _mm512_or_si512(_mm512_and_si512(ql1, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 2), m30));
  v[2] =
      _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql0, 4), m4), _mm512_and_si512(qh, m30));
  v[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql1, 4), m4),
                         _mm512_and_si512(_mm512_srli_epi16(qh, 2), m30));
}

template <int kNt>
QK_FN void PanelGemvQ6(const char* panel, size_t nb, const BlockQ8_K* const (&act)[kNt],
                       __m512 (&out)[kNt]) {
  __m512 acc[kNt];
  for (int t = 0; t < kNt; ++t) acc[t] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const char* rec = panel + b * kQ6KRecordBytes;
    for (size_t o = 0; o < kQ6KRecordBytes; o += 64)
      _mm_prefetch(rec + PanelPrefetchBytes(kPrefetchBytes) + o, _MM_HINT_T0);
    __m512i isum[kNt];
    for (int t = 0; t < kNt; ++t) isum[t] = _mm512_setzero_si512();
    for (size_t h = 0; h < 2; ++h) {
      for (size_t lh = 0; lh < 2; ++lh) {  // l in [16 lh, 16 lh + 16): groups 8h + lh + 2e
        __m512i s[4][kNt];
        for (int e = 0; e < 4; ++e)
          for (int t = 0; t < kNt; ++t) s[e][t] = _mm512_setzero_si512();
        for (size_t kk = 0; kk < 4; ++kk) {
          const size_t l = 16 * lh + 4 * kk;
          __m512i v[4];
          Q6Values(_mm512_loadu_si512(rec + 16 * (64 * h + l)),
                   _mm512_loadu_si512(rec + 16 * (64 * h + 32 + l)),
                   _mm512_loadu_si512(rec + kQ6KQhOff + 16 * (32 * h + l)), v);
          for (int e = 0; e < 4; ++e)
            for (int t = 0; t < kNt; ++t)
              s[e][t] = _mm512_dpbusd_epi32(
                  s[e][t], v[e], Bcast4(act[t][b].qs + 128 * h + 32 * static_cast<size_t>(e) + l));
        }
        for (int e = 0; e < 4; ++e) {
          const size_t g = 8 * h + lh + 2 * static_cast<size_t>(e);
          const __m512i sc = _mm512_cvtepi8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kQ6KScalesOff + 16 * g)));
          for (int t = 0; t < kNt; ++t) {
            const __m512i off = _mm512_set1_epi32(32 * static_cast<int32_t>(act[t][b].bsums[g]));
            isum[t] =
                _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_sub_epi32(s[e][t], off), sc));
          }
        }
      }
    }
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kQ6KDOff)));
    for (int t = 0; t < kNt; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]),
                               _mm512_mul_ps(dw, _mm512_set1_ps(act[t][b].d)), acc[t]);
  }
  for (int t = 0; t < kNt; ++t) out[t] = acc[t];
}

// One unpacked Q6_K super-block of one row for the GEMM.
struct alignas(64) RowSb6 {
  int8_t w[kSb];     // values q - 32 in order
  int32_t corr[16];  // -128 * sum of group g's values
  int32_t sc[16];    // int8 scales
  float d;
};

QK_FN void UnpackRow(const char* panel, size_t nb, size_t i, RowSb6* out) {
  for (size_t b = 0; b < nb; ++b) {
    const char* rec = panel + b * kQ6KRecordBytes;
    RowSb6& r = out[b];
    alignas(32) uint8_t ql[128], qh[64];
    for (size_t v = 0; v < 32; ++v) std::memcpy(ql + 4 * v, rec + 64 * v + 4 * i, 4);
    for (size_t v = 0; v < 16; ++v) std::memcpy(qh + 4 * v, rec + kQ6KQhOff + 64 * v + 4 * i, 4);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    for (size_t h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(ql + 64 * h));
      const __m256i l1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(ql + 64 * h + 32));
      const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(qh + 32 * h));
      const __m256i v[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(q, 4), m30)),
          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(q, 2), m30)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(q, m30)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                          _mm256_and_si256(_mm256_srli_epi16(q, 2), m30))};
      for (size_t e = 0; e < 4; ++e) {
        const size_t at = 128 * h + 32 * e;  // groups at / 16 and at / 16 + 1
        _mm256_store_si256(reinterpret_cast<__m256i*>(r.w + at),
                           _mm256_sub_epi8(v[e], _mm256_set1_epi8(32)));
        alignas(32) uint64_t sad[4];
        _mm256_store_si256(reinterpret_cast<__m256i*>(sad),
                           _mm256_sad_epu8(v[e], _mm256_setzero_si256()));
        r.corr[at / 16] = -128 * (static_cast<int32_t>(sad[0] + sad[1]) - 32 * 16);
        r.corr[at / 16 + 1] = -128 * (static_cast<int32_t>(sad[2] + sad[3]) - 32 * 16);
      }
    }
    for (size_t g = 0; g < 16; ++g) {  // the int8 scale, sign-extended from its byte
      const auto u = static_cast<unsigned char>(rec[kQ6KScalesOff + 16 * g + i]);
      r.sc[g] = static_cast<int32_t>(u ^ 0x80U) - 128;
    }
    uint16_t d16;
    std::memcpy(&d16, rec + kQ6KDOff + 2 * i, 2);
    r.d = _cvtsh_ss(d16);
  }
}

QK_FN void GemmTile(const RowSb6* const (&rows)[kTileRows], const char* grp, size_t nb,
                    __m512 (&out)[kTileRows]) {
  __m512 acc[kTileRows];
  for (int r = 0; r < kTileRows; ++r) acc[r] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const char* ab = grp + b * kGroupSbBytes;
    __m512i isum[kTileRows];
    for (int r = 0; r < kTileRows; ++r) isum[r] = _mm512_setzero_si512();
    for (size_t g = 0; g < 16; ++g) {
      __m512i dot[kTileRows];
      for (int r = 0; r < kTileRows; ++r) dot[r] = _mm512_set1_epi32(rows[r][b].corr[g]);
      for (size_t q = 0; q < 4; ++q) {
        const __m512i a = _mm512_load_si512(ab + 64 * (4 * g + q));
        for (int r = 0; r < kTileRows; ++r)
          dot[r] = _mm512_dpbusd_epi32(dot[r], a, Bcast4(rows[r][b].w + 16 * g + 4 * q));
      }
      for (int r = 0; r < kTileRows; ++r)
        isum[r] = _mm512_add_epi32(isum[r],
                                   _mm512_mullo_epi32(dot[r], _mm512_set1_epi32(rows[r][b].sc[g])));
    }
    const __m512 dxv = _mm512_load_ps(reinterpret_cast<const float*>(ab + kGroupDxOff));
    for (int r = 0; r < kTileRows; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]),
                               _mm512_mul_ps(_mm512_set1_ps(rows[r][b].d), dxv), acc[r]);
  }
  for (int r = 0; r < kTileRows; ++r) out[r] = acc[r];
}

// Tokens [t0, t0 + 16) (clamped to n_tokens) of the Q8_K rows in the GEMM group layout.
QK_ENTRY void PackGroup(const char* xq, size_t xq_stride, size_t nb, size_t t0, size_t n_tokens,
                        char* dst) {
  alignas(64) int32_t idx[16];
  const BlockQ8_K* tok[16];
  for (size_t t = 0; t < 16; ++t) {
    const size_t tt = std::min(t0 + t, n_tokens - 1);
    idx[t] = static_cast<int32_t>((tt - t0) * xq_stride);
    tok[t] = reinterpret_cast<const BlockQ8_K*>(xq + tt * xq_stride);
  }
  const __m512i vindex = _mm512_load_si512(idx);
  const __m512i bias = _mm512_set1_epi8(-128);
  const char* base = xq + t0 * xq_stride;
  for (size_t b = 0; b < nb; ++b) {
    char* out = dst + b * kGroupSbBytes;
    const char* qs = base + b * sizeof(BlockQ8_K) + offsetof(BlockQ8_K, qs);
    for (size_t g = 0; g < 64; ++g) {
      const __m512i v = _mm512_i32gather_epi32(vindex, qs + 4 * g, 1);
      _mm512_store_si512(out + 64 * g, _mm512_xor_si512(v, bias));
    }
    auto* bs = reinterpret_cast<int32_t*>(out + kGroupBsOff);
    auto* dx = reinterpret_cast<float*>(out + kGroupDxOff);
    for (size_t t = 0; t < 16; ++t) {
      const BlockQ8_K& y = tok[t][b];
      for (size_t p = 0; p < 4; ++p) {
        const auto lo = static_cast<uint32_t>(static_cast<uint16_t>(SubBlockSum(y, 2 * p)));
        const auto hi = static_cast<uint32_t>(static_cast<uint16_t>(SubBlockSum(y, 2 * p + 1)));
        bs[16 * p + t] = static_cast<int32_t>(lo | hi << 16);
      }
      dx[t] = y.d;
    }
  }
}

template <typename Row>
QK_ENTRY void GemmRows(const WeightMatrix& w, size_t r0, size_t r1, const char* groups,
                       size_t n_tokens, float* y, size_t y_stride) {
  const PanelGeom g = PanelGeometry(w.type, w.cols);
  const size_t nb = g.nb;
  thread_local Scratch pack, unpacked;
  auto* rows = reinterpret_cast<Row*>(unpacked.Get(kPanel * nb * sizeof(Row)));
  const size_t gbytes = nb * kGroupSbBytes;
  const size_t n_groups = (n_tokens + kGroup - 1) / kGroup;
  for (size_t p0 = r0 / kPanel * kPanel; p0 < r1; p0 += kPanel) {
    const size_t lo = std::max(p0, r0) - p0, hi = std::min(p0 + kPanel, r1) - p0;
    const char* panel = PanelAt(w, g, p0, &pack);
    for (size_t i = lo; i < hi; ++i) UnpackRow(panel, nb, i, rows + i * nb);
    for (size_t gi = 0; gi < n_groups; ++gi) {
      const size_t t0 = gi * kGroup;
      const size_t nt = std::min(kGroup, n_tokens - t0);
      for (size_t i0 = lo; i0 < hi; i0 += kTileRows) {
        const Row* tile[kTileRows];
        for (int r = 0; r < kTileRows; ++r)
          tile[r] = rows + std::min(i0 + static_cast<size_t>(r), hi - 1) * nb;
        __m512 out[kTileRows];
        GemmTile(tile, groups + gi * gbytes, nb, out);
        alignas(64) float tmp[kTileRows][16];
        for (int r = 0; r < kTileRows; ++r) _mm512_store_ps(tmp[r], out[r]);
        const size_t nrt = std::min<size_t>(kTileRows, hi - i0);
        for (size_t t = 0; t < nt; ++t)
          for (size_t r = 0; r < nrt; ++r) y[(t0 + t) * y_stride + p0 + i0 + r] = tmp[r][t];
      }
    }
  }
}

}  // namespace

void Avx512MatMulKQuant(std::span<const QxJob> jobs, const float* x, size_t x_stride,
                        size_t n_tokens, ThreadPool* pool) {
  const size_t cols = jobs[0].w->cols, nb = cols / kSb;
  const bool q6 = jobs[0].w->type == DType::kQ6_K, q5 = jobs[0].w->type == DType::kQ5_K;
  const size_t xq_stride = (nb * sizeof(BlockQ8_K) + 63) / 64 * 64;
  thread_local Scratch act_buf, group_buf;
  char* xq = act_buf.Get(xq_stride * n_tokens);
  auto run = [&](size_t n, auto&& fn, size_t grain) { RunRange(pool, n, fn, grain); };
  size_t total_rows = 0;
  for (const QxJob& j : jobs) total_rows += j.w->rows;
  auto run_rows = [&](auto&& rows_fn) {  // rows_fn(job, r0, r1) over every job's rows end to end
    run(
        total_rows, [&](size_t g0, size_t g1, int) { ForJobRows(jobs, g0, g1, rows_fn); }, kPanel);
  };
  run(
      n_tokens,
      [&](size_t t0, size_t t1, int) {
        for (size_t t = t0; t < t1; ++t)
          Avx2QuantizeQ8_K(x + t * x_stride, reinterpret_cast<BlockQ8_K*>(xq + t * xq_stride),
                           cols);
      },
      3);
  if (n_tokens < kGemmMinTokens) {
    run_rows([&](const QxJob& j, size_t r0, size_t r1) {
      if (q6) {
        GemvRows<DType::kQ6_K>(*j.w, r0, r1, xq, xq_stride, n_tokens, j.y, j.y_stride);
      } else if (q5) {
        GemvRows<DType::kQ5_K>(*j.w, r0, r1, xq, xq_stride, n_tokens, j.y, j.y_stride);
      } else {
        GemvRows<DType::kQ4_K>(*j.w, r0, r1, xq, xq_stride, n_tokens, j.y, j.y_stride);
      }
    });
    return;
  }
  const size_t n_groups = (n_tokens + kGroup - 1) / kGroup;
  const size_t gbytes = nb * kGroupSbBytes;
  char* groups = group_buf.Get(n_groups * gbytes);
  run(
      n_groups,
      [&](size_t g0, size_t g1, int) {
        for (size_t gi = g0; gi < g1; ++gi)
          PackGroup(xq, xq_stride, nb, gi * kGroup, n_tokens, groups + gi * gbytes);
      },
      1);
  run_rows([&](const QxJob& j, size_t r0, size_t r1) {
    if (q6) {
      GemmRows<RowSb6>(*j.w, r0, r1, groups, n_tokens, j.y, j.y_stride);
    } else if (q5) {
      GemmRows<RowSb5>(*j.w, r0, r1, groups, n_tokens, j.y, j.y_stride);
    } else {
      GemmRows<RowSb>(*j.w, r0, r1, groups, n_tokens, j.y, j.y_stride);
    }
  });
}

}  // namespace strata::kernels::internal
