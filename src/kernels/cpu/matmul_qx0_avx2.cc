// AVX2 MatMul for Q4_0 / Q8_0 weights: a 256-bit GEMV on the kPanels16 layout, for CPUs without
// AVX-512 (and the avx2 level forced on any CPU).
//
// Arithmetic, per output (row r, token t) -- matmul_qx0_avx512.cc's, so the outputs are the avx512
// level's bits for finite activations (both read the same Q8_0 activation bytes:
// Avx2QuantizeQ8_0 == ref::QuantizeQ8_0 == the avx512 pack):
//   isum_b = exact integer dot of weight block b and the token's Q8_0 block b
//   acc    = fma(float(isum_b), dw_b * dx_b, acc)      for b = 0, 1, ... in order
// Each output lives in one f32 lane and sees this sequence whatever the token count, the thread
// split or the layout the weights came in.
//
// A kPanels16 vector (64 bytes) holds 4 quant bytes of each of 16 rows: its low 32 bytes are rows
// 0-7, its high 32 bytes rows 8-15. Each 256-bit half is 8 rows in 8 lanes, multiplied by the
// token's 4 values broadcast from memory: loads, vpmaddubsw / vpmaddwd and FMAs, no cross-lane
// moves (the reason for panels on Zen, whose cross-lane moves are slow).
// Q4_0: nibbles (u8 0..15) x y (s8) by vpmaddubsw. A block's 8 products per 16-bit lane stay within
//   8 * 2 * 15 * 128 = 30720, so they add exactly in int16; one vpmaddwd by ones per block and
//   half, then minus 8 * sum(y_b) (the nibbles' offset).
// Q8_0 (stored q + 128): xor 0x80 gives q back; |q| x sign(y, q) by vpmaddubsw (a pair within
//   2 * 128 * 127: exact), vpmaddwd by ones, int32 adds.
// Row-layout weights are packed into a panel per 16 rows first (PackPanel16, one panel of scratch
// per thread): the same bits, the extra copy costing what the non-preferred layout costs.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "base/thread_pool.h"
#include "kernels/cpu/quantize_avx2.h"
#include "kernels/kernels_internal.h"
#include "tensor/fp16.h"

namespace strata::kernels::internal {
namespace {

#define Q2_TARGET "avx2,fma,f16c"
#define Q2_FN static inline __attribute__((target(Q2_TARGET), always_inline))
#define Q2_ENTRY __attribute__((target(Q2_TARGET), noinline))

constexpr size_t kPanel = kPanelRows;

// Per-token activations: qs (32 bytes per block, natural order), dx (f32 per block: the block's
// f16 scale widened), corr (int32 per block: 8 * sum of its values for Q4_0, unused for Q8_0).
struct ActLayout {
  size_t nb, dx_off, corr_off, stride;
};

ActLayout MakeLayout(size_t cols) {
  ActLayout l{};
  l.nb = cols / 32;
  l.dx_off = l.nb * 32;
  l.corr_off = l.dx_off + l.nb * 4;
  l.stride = (l.corr_off + l.nb * 4 + 63) / 64 * 64;
  return l;
}

Q2_ENTRY void PackTokens(const float* x, size_t x_stride, size_t t0, size_t t1, const ActLayout& l,
                         char* pack) {
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (size_t t = t0; t < t1; ++t) {
    char* dst = pack + t * l.stride;
    auto* dx = reinterpret_cast<float*>(dst + l.dx_off);
    auto* corr = reinterpret_cast<int32_t*>(dst + l.corr_off);
    for (size_t b = 0; b < l.nb; ++b) {
      BlockQ8_0 blk;
      Avx2QuantizeQ8_0(x + t * x_stride + 32 * b, &blk, 32);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * b), q);
      dx[b] = _cvtsh_ss(blk.d);
      const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
      __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
      h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
      corr[b] = 8 * _mm_cvtsi128_si32(h);
    }
  }
}

// 4 bytes at p broadcast to every 32-bit lane.
Q2_FN __m256i Bcast4(const char* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Bytes ahead of the GEMV's loads that it prefetches (as the avx512 panel GEMV: the arithmetic per
// byte otherwise leaves too few misses in flight for one core to reach the memory's rate).
// 32768 for both types (Zen 5, 1 thread, tg64 of the 1B models at STRATA_ISA=avx2, two alternated
// rounds: Q4_0 45-46 tok/s at 4096, 51-54 at 16384, 54-56 at 32768; Q8_0 30.5 at 4096, 31.8-32.0
// at 32768): this level's longer arithmetic per byte needs its reads issued further ahead than the
// avx512 level's 2-4 KiB. STRATA_PANEL_PREFETCH overrides (kernels_internal.h).
constexpr size_t kPrefetch = 32768;

// Exact per-block integers of the panel's 16 rows (isum[t][h]: rows 8h..8h+7) and kNt tokens.
template <int kNt>
Q2_FN void BlockQ4(const char* q, const char* const (&act)[kNt], size_t b,
                   __m256i (&isum)[kNt][2]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256i p[kNt][2];
  for (int t = 0; t < kNt; ++t) p[t][0] = p[t][1] = _mm256_setzero_si256();
  for (size_t j = 0; j < 4; ++j) {
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * j + 32 * h));
      const __m256i lo = _mm256_and_si256(v, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      for (int t = 0; t < kNt; ++t) {
        const __m256i a = _mm256_maddubs_epi16(lo, Bcast4(act[t] + 32 * b + 4 * j));
        const __m256i c = _mm256_maddubs_epi16(hi, Bcast4(act[t] + 32 * b + 16 + 4 * j));
        p[t][h] = _mm256_add_epi16(p[t][h], _mm256_add_epi16(a, c));
      }
    }
  }
  for (int t = 0; t < kNt; ++t)
    for (int h = 0; h < 2; ++h) isum[t][h] = _mm256_madd_epi16(p[t][h], ones);
}

template <int kNt>
Q2_FN void BlockQ8(const char* q, const char* const (&act)[kNt], size_t b,
                   __m256i (&isum)[kNt][2]) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
  for (int t = 0; t < kNt; ++t) isum[t][0] = isum[t][1] = _mm256_setzero_si256();
  for (size_t j = 0; j < 8; ++j) {
    for (int h = 0; h < 2; ++h) {
      const __m256i w = _mm256_xor_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * j + 32 * h)), flip);
      const __m256i aw = _mm256_abs_epi8(w);
      for (int t = 0; t < kNt; ++t) {
        const __m256i sy = _mm256_sign_epi8(Bcast4(act[t] + 32 * b + 4 * j), w);
        isum[t][h] =
            _mm256_add_epi32(isum[t][h], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sy), ones));
      }
    }
  }
}

// acc[t][h] (rows 8h..8h+7 of the panel, token t) over every block of the panel.
template <bool kQ4, int kNt>
Q2_FN void PanelGemv(const char* panel, const PanelGeom& g, const char* const (&act)[kNt],
                     const ActLayout& l, __m256 (&acc)[kNt][2]) {
  for (int t = 0; t < kNt; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  const size_t block_bytes = kPanel * g.qb;
  const size_t ahead = PanelPrefetchBytes(kPrefetch);
  for (size_t b = 0; b < g.nb; ++b) {
    const char* q = panel + b * block_bytes;
    for (size_t k = 0; k < block_bytes; k += 64) _mm_prefetch(q + ahead + k, _MM_HINT_T0);
    __m256i isum[kNt][2];
    if constexpr (kQ4) {
      BlockQ4<kNt>(q, act, b, isum);
    } else {
      BlockQ8<kNt>(q, act, b, isum);
    }
    const char* sc = panel + g.scales_off + 32 * b;
    const __m256 dw[2] = {
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc))),
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16)))};
    for (int t = 0; t < kNt; ++t) {
      const __m256 dx = _mm256_set1_ps(reinterpret_cast<const float*>(act[t] + l.dx_off)[b]);
      const int32_t corr = kQ4 ? reinterpret_cast<const int32_t*>(act[t] + l.corr_off)[b] : 0;
      for (int h = 0; h < 2; ++h) {
        const __m256i s = kQ4 ? _mm256_sub_epi32(isum[t][h], _mm256_set1_epi32(corr)) : isum[t][h];
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw[h], dx), acc[t][h]);
      }
    }
  }
}

// Tokens [t0, t0 + kNt) against one panel; stores rows [lo, hi) of the panel (y points at its
// first row).
template <bool kQ4, int kNt>
Q2_FN void PanelStore(const char* panel, const PanelGeom& g, const char* pack, const ActLayout& l,
                      size_t t0, size_t lo, size_t hi, float* y, size_t y_stride) {
  const char* act[kNt];
  for (int t = 0; t < kNt; ++t) act[t] = pack + (t0 + static_cast<size_t>(t)) * l.stride;
  __m256 acc[kNt][2];
  PanelGemv<kQ4, kNt>(panel, g, act, l, acc);
  for (int t = 0; t < kNt; ++t) {
    float* yt = y + (t0 + static_cast<size_t>(t)) * y_stride;
    if (lo == 0 && hi == kPanel) {
      _mm256_storeu_ps(yt, acc[t][0]);
      _mm256_storeu_ps(yt + 8, acc[t][1]);
      continue;
    }
    alignas(32) float tmp[kPanel];
    _mm256_store_ps(tmp, acc[t][0]);
    _mm256_store_ps(tmp + 8, acc[t][1]);
    for (size_t i = lo; i < hi; ++i) yt[i] = tmp[i];
  }
}

// Rows [r0, r1) of one job (any split: a panel cut by the range computes all 16 rows and stores
// those inside it).
template <bool kQ4>
Q2_ENTRY void GemvRows(const WeightMatrix& w, size_t r0, size_t r1, const char* pack,
                       const ActLayout& l, size_t n_tokens, float* y, size_t y_stride) {
  const PanelGeom g = PanelGeometry(w.type, w.cols);
  const char* wd = static_cast<const char*>(w.data);
  const bool rows = w.layout == WeightLayout::kRows;
  thread_local Scratch panel_buf;
  char* packed = rows ? panel_buf.Get(g.stride) : nullptr;
  for (size_t p0 = r0 / kPanel * kPanel; p0 < r1; p0 += kPanel) {
    const size_t lo = std::max(p0, r0) - p0, hi = std::min(p0 + kPanel, r1) - p0;
    const char* panel = wd + p0 / kPanel * g.stride;
    if (rows) {
      PackPanel16(w, p0, packed);
      panel = packed;
    }
    float* yp = y + p0;
    size_t t = 0;
    for (; t + 2 <= n_tokens; t += 2)
      PanelStore<kQ4, 2>(panel, g, pack, l, t, lo, hi, yp, y_stride);
    if (t < n_tokens) PanelStore<kQ4, 1>(panel, g, pack, l, t, lo, hi, yp, y_stride);
  }
}

}  // namespace

bool Avx2MatMulQx0(std::span<const QxJob> jobs, const float* x, size_t x_stride, size_t n_tokens,
                   ThreadPool* pool) {
  if (jobs.empty()) return true;
  const DType type = jobs[0].w->type;
  if (type != DType::kQ4_0 && type != DType::kQ8_0) return false;
  for (const QxJob& j : jobs)
    if (j.w->type != type || j.w->cols != jobs[0].w->cols) return false;
  const ActLayout l = MakeLayout(jobs[0].w->cols);
  thread_local Scratch pack_buf;
  char* pack = pack_buf.Get(l.stride * n_tokens);
  RunRange(
      pool, n_tokens, [&](size_t t0, size_t t1, int) { PackTokens(x, x_stride, t0, t1, l, pack); },
      3);
  size_t total_rows = 0;
  for (const QxJob& j : jobs) total_rows += j.w->rows;
  const bool q4 = type == DType::kQ4_0;
  RunRange(
      pool, total_rows,
      [&](size_t g0, size_t g1, int) {
        ForJobRows(jobs, g0, g1, [&](const QxJob& j, size_t r0, size_t r1) {
          q4 ? GemvRows<true>(*j.w, r0, r1, pack, l, n_tokens, j.y, j.y_stride)
             : GemvRows<false>(*j.w, r0, r1, pack, l, n_tokens, j.y, j.y_stride);
        });
      },
      kPanel);
  return true;
}

}  // namespace strata::kernels::internal
