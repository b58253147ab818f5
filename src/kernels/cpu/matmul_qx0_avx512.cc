// AVX-512 VNNI MatMul for Q4_0 / Q8_0 weights (decode GEMV and prefill GEMM with identical bits).
//
// Arithmetic, per output (row r, token t), whatever path computes it:
//   isum_b = exact integer dot of weight block b and the Q8_0 activation block b
//   acc    = fma(float(isum_b), dw_b * dx_b, acc)      for b = 0, 1, ... in order, acc starting at
//   0 y      = acc
// i.e. the reference's per-block order (with a fused multiply-add). Each output lives in one f32
// vector lane and sees exactly this instruction sequence, so results do not depend on the thread
// count, on how tokens are grouped, or on whether the GEMV (lanes = 16 rows) or the GEMM
// (lanes = 16 tokens) computed it.
//
// GEMV (few tokens): 16 rows at a time; vpdpbusd on 512-bit vectors covering a block pair, then a
// transposing reduction tree turns 16 row vectors into two vectors of per-block sums (lane = row).
// Unsigned x signed: Q4_0 uses its unsigned nibbles q and subtracts 8 * sum(y); Q8_0 uses w + 128
// and subtracts 128 * sum(y) (sums precomputed per activation block).
// GEMM (>= kGemmMinTokens tokens): weights of a 16-row panel are unpacked once to int8; activations
// of 16 tokens are transposed so that one vector holds 4 consecutive values of 16 tokens (as u8,
// y + 128); each vpdpbusd broadcasts 4 weight bytes, the +128 offset is removed by starting the
// accumulator at -128 * sum(w). A tile is 4 rows x 16 tokens.
// AMX GEMM (Isa::kAmx, >= kAmxMinTokens tokens): the same 16-token activation groups (signed),
// one tdpbssd per 16 rows x 16 tokens x 32-block, the exact int32 tile folded into the same FMA
// sequence (see the section further down).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC bug 105593, see kernels_avx512.cc
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kernels_internal.h"
#include "tensor/fp16.h"

namespace strata::kernels::internal {
namespace {

#define QX_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"
#define QX_FN static inline __attribute__((target(QX_TARGET), always_inline))
#define QX_ENTRY __attribute__((target(QX_TARGET), noinline))

constexpr size_t kGroup = 16;                     // tokens per GEMM lane group
constexpr size_t kPanel = 16;                     // rows per GEMV panel / GEMM weight panel
constexpr int kTileRows = 4;                      // rows per GEMM register tile
constexpr size_t kGroupBlockBytes = 8 * 64 + 64;  // 8 vectors of u8 quads + 16 dx floats

// Per-token activation pack: qs (64 bytes per block pair; Q8_0 weights: natural order; Q4_0:
// [b0 0..15, b1 0..15, b0 16..31, b1 16..31] to match the nibble unpack), then dx floats and
// corr int32 (C * sum of the block's values, C = 8 for Q4_0 and 128 for Q8_0), both padded to
// pairs.
struct ActLayout {
  size_t nb, npairs, dx_off, corr_off, stride;
};

ActLayout MakeLayout(size_t cols) {
  ActLayout l;
  l.nb = cols / 32;
  l.npairs = (l.nb + 1) / 2;
  l.dx_off = l.npairs * 64;
  l.corr_off = l.dx_off + l.npairs * 8;
  l.stride = (l.corr_off + l.npairs * 8 + 63) / 64 * 64;
  return l;
}

template <bool kQ4>
size_t ElemOffset(size_t b, size_t k) {
  const size_t p = b / 2, h = b % 2;
  if constexpr (kQ4) return p * 64 + h * 16 + (k < 16 ? k : 16 + k);
  return p * 64 + h * 32 + k;
}

QX_FN float HmaxPs(__m512 v) {
  __m256 m = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

QX_FN int HsumEpi32(__m512i v) {
  __m256i s = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
  return _mm_cvtsi128_si32(h);
}

#define TREE16_FN QX_FN
#include "kernels/cpu/tree16.inc"

struct MaxPs {
  __attribute__((target(QX_TARGET))) __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_max_ps(a, b);
  }
};
struct AddEpi32 {  // on float-typed vectors holding int32 lanes
  __attribute__((target(QX_TARGET))) __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  }
};

// PackToken's arithmetic for blocks b0 .. b0 + 15, the per-block reductions (amax, sum of quants)
// done 16 at a time: max of absolute values and integer sums do not depend on the order, and the
// divisions and f16 rounding are the same IEEE operations lane-wise (vcvtps2ph rounds to nearest
// even like F32ToF16), so every byte written is the one PackToken's block loop writes.
template <bool kQ4, bool kPair = kQ4>
QX_FN void PackBlocks16(const float* x, size_t b0, int8_t* qs, float* dx, int32_t* corr) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  auto slot = [](int j) { return 4 * (j % 4) + j / 4; };  // tree input j holds block b0 + slot(j)
  __m512 m[16];
  for (int j = 0; j < 16; ++j) {
    const float* p = x + 32 * (b0 + static_cast<size_t>(slot(j)));
    m[j] = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(p), abs_mask),
                         _mm512_and_ps(_mm512_loadu_ps(p + 16), abs_mask));
  }
  const __m512 amax = Tree16(m, MaxPs{});
  const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
  // amax != 0.0f (true for NaN as well, like the scalar comparison)
  const __mmask16 nz = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_NEQ_UQ);
  alignas(64) float id[16];
  _mm512_store_ps(id, _mm512_maskz_div_ps(nz, _mm512_set1_ps(127.0f), amax));
  _mm512_storeu_ps(
      dx + b0, _mm512_cvtph_ps(_mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  __m512 sums[16];
  for (int j = 0; j < 16; ++j) {
    const size_t b = b0 + static_cast<size_t>(slot(j));
    const __m512 vid = _mm512_set1_ps(id[slot(j)]);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b), vid));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b + 16), vid));
    sums[j] = _mm512_castsi512_ps(_mm512_add_epi32(q0, q1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + ElemOffset<kPair>(b, 0)),
                     _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + ElemOffset<kPair>(b, 16)),
                     _mm512_cvtsepi32_epi8(q1));
  }
  const __m512i total = _mm512_castps_si512(Tree16(sums, AddEpi32{}));
  _mm512_storeu_si512(corr + b0, _mm512_mullo_epi32(total, _mm512_set1_epi32(kQ4 ? 8 : 128)));
}

// Quantizes one token to Q8_0 exactly as ref::QuantizeQ8_0 (amax/127 rounded to f16, values
// round-half-even of x * (127/amax)) and writes it in the pack layout.
template <bool kQ4, bool kPair = kQ4>
QX_FN void PackToken(const float* x, const ActLayout& l, char* dst) {
  int8_t* qs = reinterpret_cast<int8_t*>(dst);
  float* dx = reinterpret_cast<float*>(dst + l.dx_off);
  int32_t* corr = reinterpret_cast<int32_t*>(dst + l.corr_off);
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  size_t b0 = 0;
  for (; b0 + 16 <= l.nb; b0 += 16) PackBlocks16<kQ4, kPair>(x, b0, qs, dx, corr);
  for (size_t b = b0; b < l.nb; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax =
        HmaxPs(_mm512_max_ps(_mm512_and_ps(v0, abs_mask), _mm512_and_ps(v1, abs_mask)));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    dx[b] = F16ToF32(F32ToF16(d));
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));  // MXCSR default: nearest even
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
    corr[b] = (kQ4 ? 8 : 128) * HsumEpi32(_mm512_add_epi32(q0, q1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + ElemOffset<kPair>(b, 0)),
                     _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + ElemOffset<kPair>(b, 16)),
                     _mm512_cvtsepi32_epi8(q1));
  }
  if (l.nb % 2 != 0) {  // zero the unused half of the last pair
    const size_t b = l.nb;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + ElemOffset<kPair>(b, 0)), _mm_setzero_si128());
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + ElemOffset<kPair>(b, 16)),
                     _mm_setzero_si128());
    dx[b] = 0.0f;
    corr[b] = 0;
  }
}

// Weight block pair (b, b + 1) of one row as u8 in the activation pack's order; `two` = false loads
// block b only (zero / +128 upper half; the activation half there is zero).
template <bool kQ4>
QX_FN __m512i LoadWPair(const char* row, size_t b, bool two) {
  if constexpr (kQ4) {
    const char* p = row + b * sizeof(BlockQ4_0) + 2;
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i q1 =
        two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + sizeof(BlockQ4_0)))
            : _mm_setzero_si128();
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(q, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  } else {
    const char* p = row + b * sizeof(BlockQ8_0) + 2;
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i c =
        two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + sizeof(BlockQ8_0)))
            : _mm256_setzero_si256();
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1),
                            _mm512_set1_epi8(-128));
  }
}

// 16 row vectors (int32 partial sums of a block pair; which 128-bit chunks belong to block b vs
// b + 1 depends on the layout) -> per-block sums with lane i = row i.
template <bool kQ4>
QX_FN void Reduce16(const __m512i (&v)[16], __m512i* s0, __m512i* s1) {
  __m512i l1[8], l2[4], l3[2];
  for (int i = 0; i < 8; ++i)
    l1[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i)
    l2[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(l1[2 * i], l1[2 * i + 1]),
                             _mm512_unpackhi_epi64(l1[2 * i], l1[2 * i + 1]));
  // l2[q]: chunk c holds rows 4q..4q+3 of chunk c. Q8_0 chunks: b, b, b+1, b+1; Q4_0: b, b+1, b,
  // b+1.
  constexpr int kA = kQ4 ? 0x44 : 0x88, kB = kQ4 ? 0xEE : 0xDD;
  for (int i = 0; i < 2; ++i)
    l3[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(l2[2 * i], l2[2 * i + 1], kA),
                             _mm512_shuffle_i32x4(l2[2 * i], l2[2 * i + 1], kB));
  // l3[i] = [rows 8i..8i+3 of b, same of b+1, rows 8i+4..8i+7 of b, same of b+1]
  *s0 = _mm512_shuffle_i32x4(l3[0], l3[1], 0x88);
  *s1 = _mm512_shuffle_i32x4(l3[0], l3[1], 0xDD);
}

// Dot products of 16 rows (row i = rows[i]) with one packed token; lane i = row i.
template <bool kQ4>
QX_FN __m512 GemvPanel(const char* const (&rows)[16], const __m512i vindex, const char* act,
                       const ActLayout& l) {
  constexpr size_t kBlockBytes = kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const float* dx = reinterpret_cast<const float*>(act + l.dx_off);
  const int32_t* corr = reinterpret_cast<const int32_t*>(act + l.corr_off);
  __m512 acc = _mm512_setzero_ps();
  for (size_t p = 0; p < l.npairs; ++p) {
    const size_t b = 2 * p;
    const bool two = b + 1 < l.nb;
    const __m512i yv = _mm512_load_si512(act + 64 * p);
    __m512i v[16];
    for (int i = 0; i < 16; ++i)
      v[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), LoadWPair<kQ4>(rows[i], b, two), yv);
    __m512i s0, s1;
    Reduce16<kQ4>(v, &s0, &s1);
    const char* base = rows[0] + b * kBlockBytes;
    const __m512 dw0 =
        _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(vindex, base, 1)));
    s0 = _mm512_sub_epi32(s0, _mm512_set1_epi32(corr[b]));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(dw0, _mm512_set1_ps(dx[b])), acc);
    if (two) {
      const __m512 dw1 = _mm512_cvtph_ps(
          _mm512_cvtepi32_epi16(_mm512_i32gather_epi32(vindex, base + kBlockBytes, 1)));
      s1 = _mm512_sub_epi32(s1, _mm512_set1_epi32(corr[b + 1]));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(dw1, _mm512_set1_ps(dx[b + 1])),
                            acc);
    }
  }
  return acc;
}

// GEMM weight panel: int8 values (natural order), -128 * block sum, f32 block scale.
struct PanelRow {
  const int8_t* s8;
  const int32_t* corr;
  const float* dw;
};

// Q4_0 quant bytes (element k low nibble, k + 16 high) -> the 32 int8 values in order.
QX_FN __m256i UnpackQ4(__m128i q) {
  const __m256i qq = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
  return _mm256_sub_epi8(_mm256_and_si256(qq, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

// Block b of a GEMM panel row: its int8 values v, -128 * their sum and the f32 scale.
QX_FN void StoreRowBlock(__m256i v, uint16_t d16, size_t b, int8_t* s8, int32_t* corr, float* dw) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(s8 + 32 * b), v);
  const __m256i sad =
      _mm256_sad_epu8(_mm256_xor_si256(v, _mm256_set1_epi8(-128)), _mm256_setzero_si256());
  __m128i h = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
  h = _mm_add_epi64(h, _mm_unpackhi_epi64(h, h));
  const int wsum = static_cast<int>(_mm_cvtsi128_si32(h)) - 128 * 32;
  corr[b] = -128 * wsum;
  dw[b] = _cvtsh_ss(d16);
}

template <bool kQ4>
QX_FN void PrepRow(const char* row, size_t nb, int8_t* s8, int32_t* corr, float* dw) {
  for (size_t b = 0; b < nb; ++b) {
    const char* blk = row + b * (kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0));
    uint16_t d16;
    std::memcpy(&d16, blk, 2);
    const __m256i v = kQ4 ? UnpackQ4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)))
                          : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    StoreRowBlock(v, d16, b, s8, corr, dw);
  }
}

// The same from row i of a kPanels16 panel: the row's 4-byte groups are 64 bytes apart.
template <bool kQ4>
QX_FN void PrepPanelRow(const char* panel, const PanelGeom& g, size_t i, int8_t* s8, int32_t* corr,
                        float* dw) {
  const __m256i step = _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448);
  for (size_t b = 0; b < g.nb; ++b) {
    const char* q = panel + b * kPanel * g.qb + 4 * i;
    uint16_t d16;
    std::memcpy(&d16, panel + g.scales_off + 32 * b + 2 * i, 2);
    __m256i v;
    if constexpr (kQ4) {
      v = UnpackQ4(
          _mm_i32gather_epi32(reinterpret_cast<const int*>(q), _mm256_castsi256_si128(step), 1));
    } else {
      v = _mm256_xor_si256(_mm256_i32gather_epi32(reinterpret_cast<const int*>(q), step, 1),
                           _mm256_set1_epi8(-128));
    }
    StoreRowBlock(v, d16, b, s8, corr, dw);
  }
}

// 4 rows x 16 tokens over all blocks; out[r] lane t = (row r, token t).
QX_FN void GemmTile(const PanelRow (&pr)[kTileRows], const char* grp, size_t nb,
                    __m512 (&out)[kTileRows]) {
  __m512 acc[kTileRows];
  for (int r = 0; r < kTileRows; ++r) acc[r] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const char* ab = grp + b * kGroupBlockBytes;
    __m512i ia[kTileRows];
    for (int r = 0; r < kTileRows; ++r) ia[r] = _mm512_set1_epi32(pr[r].corr[b]);
    for (int j = 0; j < 8; ++j) {
      const __m512i a = _mm512_load_si512(ab + 64 * j);
      for (int r = 0; r < kTileRows; ++r) {
        int32_t w4;
        std::memcpy(&w4, pr[r].s8 + 32 * b + 4 * j, 4);
        ia[r] = _mm512_dpbusd_epi32(ia[r], a, _mm512_set1_epi32(w4));
      }
    }
    const __m512 dxv = _mm512_load_ps(reinterpret_cast<const float*>(ab + 512));
    for (int r = 0; r < kTileRows; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r]),
                               _mm512_mul_ps(_mm512_set1_ps(pr[r].dw[b]), dxv), acc[r]);
  }
  for (int r = 0; r < kTileRows; ++r) out[r] = acc[r];
}

// Transposes tokens [t0, t0 + 16) (clamped to n_tokens) of the per-token pack into the GEMM layout
// (kBias: values as u8 y + 128 for vpdpbusd; otherwise signed y for AMX tdpbssd).
// kPair: the order of the pack's quants (ElemOffset).
template <bool kPair, bool kBias>
QX_FN void PackGroup(const char* pack, const ActLayout& l, size_t t0, size_t n_tokens, char* dst) {
  alignas(64) int32_t idx[16];
  for (size_t t = 0; t < 16; ++t)
    idx[t] = static_cast<int32_t>((std::min(t0 + t, n_tokens - 1) - t0) * l.stride);
  const __m512i vindex = _mm512_load_si512(idx);
  pack += t0 * l.stride;
  const __m512i bias = _mm512_set1_epi8(kBias ? -128 : 0);
  for (size_t b = 0; b < l.nb; ++b) {
    char* out = dst + b * kGroupBlockBytes;
    for (size_t j = 0; j < 8; ++j) {
      const __m512i g = _mm512_i32gather_epi32(vindex, pack + ElemOffset<kPair>(b, 4 * j), 1);
      _mm512_store_si512(out + 64 * j, _mm512_xor_si512(g, bias));
    }
    _mm512_store_ps(reinterpret_cast<float*>(out + 512),
                    _mm512_i32gather_ps(vindex, pack + l.dx_off + 4 * b, 1));
  }
}

template <bool kQ4, bool kPair>
QX_ENTRY void PackTokens(const float* x, size_t x_stride, size_t t0, size_t t1, const ActLayout& l,
                         char* pack) {
  for (size_t t = t0; t < t1; ++t) PackToken<kQ4, kPair>(x + t * x_stride, l, pack + t * l.stride);
}

template <bool kPair, bool kBias>
QX_ENTRY void PackGroups(const char* pack, const ActLayout& l, size_t n_tokens, size_t g0,
                         size_t g1, char* groups) {
  const size_t gbytes = l.nb * kGroupBlockBytes;
  for (size_t g = g0; g < g1; ++g)
    PackGroup<kPair, kBias>(pack, l, g * kGroup, n_tokens, groups + g * gbytes);
}

template <bool kQ4>
QX_ENTRY void GemvRows(const WeightMatrix& w, size_t r0, size_t r1, const char* pack,
                       const ActLayout& l, size_t n_tokens, float* y, size_t y_stride) {
  const char* wd = static_cast<const char*>(w.data);
  for (size_t p0 = r0; p0 < r1; p0 += kPanel) {
    const size_t nr = std::min(kPanel, r1 - p0);
    const char* rows[16];
    alignas(64) int32_t idx[16];
    for (size_t i = 0; i < 16; ++i) {
      const size_t ri = std::min(i, nr - 1);
      rows[i] = wd + (p0 + ri) * w.row_bytes;
      idx[i] = static_cast<int32_t>(ri * w.row_bytes);
    }
    const __m512i vindex = _mm512_load_si512(idx);
    const __mmask16 mask = static_cast<__mmask16>((1u << nr) - 1);
    for (size_t t = 0; t < n_tokens; ++t) {
      const __m512 acc = GemvPanel<kQ4>(rows, vindex, pack + t * l.stride, l);
      _mm512_mask_storeu_ps(y + t * y_stride + p0, mask, acc);
    }
  }
}

template <bool kQ4, bool kPanels>
QX_ENTRY void GemmRows(const WeightMatrix& w, size_t r0, size_t r1, const char* groups,
                       const ActLayout& l, size_t n_tokens, float* y, size_t y_stride) {
  const char* wd = static_cast<const char*>(w.data);
  const PanelGeom pg = PanelGeometry(w.type, w.cols);
  const size_t nb = l.nb;
  const size_t s8_stride = (nb * 32 + 63) / 64 * 64;
  thread_local Scratch panel_buf;
  char* buf = panel_buf.Get(kPanel * (s8_stride + nb * 8));
  int8_t* s8 = reinterpret_cast<int8_t*>(buf);
  int32_t* corr = reinterpret_cast<int32_t*>(buf + kPanel * s8_stride);
  float* dw = reinterpret_cast<float*>(corr + kPanel * nb);
  const size_t gbytes = nb * kGroupBlockBytes;
  const size_t n_groups = (n_tokens + kGroup - 1) / kGroup;
  for (size_t p0 = r0; p0 < r1; p0 += kPanel) {
    const size_t nr = std::min(kPanel, r1 - p0);
    for (size_t i = 0; i < nr; ++i) {
      const size_t r = p0 + i;
      if constexpr (kPanels) {
        PrepPanelRow<kQ4>(wd + r / kPanel * pg.stride, pg, r % kPanel, s8 + i * s8_stride,
                          corr + i * nb, dw + i * nb);
      } else {
        PrepRow<kQ4>(wd + r * w.row_bytes, nb, s8 + i * s8_stride, corr + i * nb, dw + i * nb);
      }
    }
    for (size_t g = 0; g < n_groups; ++g) {
      const size_t t0 = g * kGroup;
      const size_t nt = std::min(kGroup, n_tokens - t0);
      for (size_t i0 = 0; i0 < nr; i0 += kTileRows) {
        PanelRow pr[kTileRows];
        for (int r = 0; r < kTileRows; ++r) {
          const size_t ri = std::min(i0 + static_cast<size_t>(r), nr - 1);
          pr[r] = PanelRow{s8 + ri * s8_stride, corr + ri * nb, dw + ri * nb};
        }
        __m512 out[kTileRows];
        GemmTile(pr, groups + g * gbytes, nb, out);
        alignas(64) float tmp[kTileRows][16];
        for (int r = 0; r < kTileRows; ++r) _mm512_store_ps(tmp[r], out[r]);
        const size_t nrt = std::min<size_t>(kTileRows, nr - i0);
        for (size_t t = 0; t < nt; ++t)
          for (size_t r = 0; r < nrt; ++r) y[(t0 + t) * y_stride + p0 + i0 + r] = tmp[r][t];
      }
    }
  }
}

// ---- kPanels16 weights (kernels.h): the decode GEMV without shuffles ----
// Per block b of a panel, vector j holds quant bytes 4j..4j+3 of the 16 rows, so vpdpbusd with the
// token's values 4j..4j+3 broadcast leaves row i's partial dot in lane i: the block's integer is
// the same isum_b as GemvPanel's (u8 weights: Q8_0 as q + 128, Q4_0 nibbles; corr removes
// C * sum(y_b)), folded by the same FMA with the same scale product, so the bits are GemvPanel's
// and GemmTile's. Weights stream from one contiguous panel; the only cross-lane work is the
// broadcast of 4 activation bytes from memory. kNt tokens share each weight load (their
// arithmetic does not depend on kNt). The activation pack is in natural order (kPair = false).
// A single token runs two whole panels side by side (PanelGemv's kNp = 2), the same arithmetic.

// Bytes ahead of the panel GEMV's loads that it prefetches: Q4_0 4096, Q8_0 2048 (Zen 5, 1 thread,
// tg128 interleaved: Q8_0 35.3-35.9 tok/s at 2048 against 33.3-33.8 at 4096, Q4_0 1-2 % better at
// 4096; 2 threads indifferent). STRATA_PANEL_PREFETCH overrides both, for tuning.
size_t PrefetchFor(bool q4) { return PanelPrefetchBytes(q4 ? 4096 : 2048); }

// vpdpbusd(acc, w, the 4 bytes at p in every 32-bit lane), the broadcast folded into the
// instruction as a {1to16} memory operand. Compilers emit a separate
// vpbroadcastd for _mm512_set1_epi32 here: one micro-op more per product, and with a GEMV on a
// single core the micro-ops in flight per cache line bound how far ahead of a miss the core gets
// (Zen 5, Q4_0 1 thread, streamed: 19-21 GB/s with it, 22-25 without).
QX_FN __m512i DpBcast(__m512i acc, __m512i w, const char* p) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0"
          : "+v"(acc)
          : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

// Block b of one panel (quants at q, the block's 16 scales at sc) for kNt tokens, folded into acc:
// the arithmetic every panel GEMV path shares.
template <bool kQ4, int kNt>
QX_FN void PanelBlock(const char* q, const char* sc, const char* const (&act)[kNt],
                      const ActLayout& l, size_t b, __m512 (&acc)[kNt]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m4h = _mm512_set1_epi8(static_cast<char>(0xF0));
  // s0 starts at -corr (integer sums are exact, so where corr is removed does not matter).
  __m512i s0[kNt], s1[kNt];
  for (int t = 0; t < kNt; ++t) {
    s0[t] = _mm512_set1_epi32(-reinterpret_cast<const int32_t*>(act[t] + l.corr_off)[b]);
    s1[t] = _mm512_setzero_si512();
  }
  if constexpr (kQ4) {
    // High nibbles in place (16 x q): the sum is 16 x theirs, exact, shifted back below.
    for (size_t j = 0; j < 4; ++j) {
      const __m512i v = _mm512_loadu_si512(q + 64 * j);
      const __m512i lo = _mm512_and_si512(v, m4);
      const __m512i hi = _mm512_and_si512(v, m4h);
      for (int t = 0; t < kNt; ++t) {
        s0[t] = DpBcast(s0[t], lo, act[t] + 32 * b + 4 * j);
        s1[t] = DpBcast(s1[t], hi, act[t] + 32 * b + 16 + 4 * j);
      }
    }
  } else {
    for (size_t j = 0; j < 8; j += 2) {
      const __m512i v0 = _mm512_loadu_si512(q + 64 * j);
      const __m512i v1 = _mm512_loadu_si512(q + 64 * j + 64);
      for (int t = 0; t < kNt; ++t) {
        s0[t] = DpBcast(s0[t], v0, act[t] + 32 * b + 4 * j);
        s1[t] = DpBcast(s1[t], v1, act[t] + 32 * b + 4 * j + 4);
      }
    }
  }
  const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc)));
  for (int t = 0; t < kNt; ++t) {
    const float dx = reinterpret_cast<const float*>(act[t] + l.dx_off)[b];
    const __m512i isum = _mm512_add_epi32(s0[t], kQ4 ? _mm512_srai_epi32(s1[t], 4) : s1[t]);
    acc[t] =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc[t]);
  }
}

// kNp consecutive panels (kNp > 1: one token; block b of each in turn, kNp weight streams in flight
// at once) or one panel for kNt tokens sharing each weight load; acc[p][t]. A single stream
// leaves one core short of the memory's rate however far ahead it prefetches (docs/perf.md); two
// streams reached it (Zen 5, 1 thread, streamed 8192 x 2048: Q8_0 23-26 -> 28-34 GB/s, Q4_0 22-24
// -> 26-28; four streams were no better than two). Every output's arithmetic is PanelBlock's, so
// the bits depend on neither kNt nor kNp.
template <bool kQ4, int kNt, int kNp = 1>
QX_FN void PanelGemv(const char* panel, const PanelGeom& g, const char* const (&act)[kNt],
                     const ActLayout& l, __m512 (&acc)[kNp][kNt]) {
  static_assert(kNp == 1 || kNt == 1, "several streams for one token, or several tokens");
  for (int p = 0; p < kNp; ++p)
    for (int t = 0; t < kNt; ++t) acc[p][t] = _mm512_setzero_ps();
  constexpr size_t kBlockBytes = kPanel * (kQ4 ? 16 : 32);
  const size_t prefetch = PrefetchFor(kQ4);
  for (size_t b = 0; b < g.nb; ++b) {
    for (int p = 0; p < kNp; ++p) {
      const char* pp = panel + static_cast<size_t>(p) * g.stride;
      const char* q = pp + b * kBlockBytes;
      const char* scales = pp + g.scales_off;
      // Ahead of the weights' stream: the arithmetic per byte (Q4_0 above all) otherwise leaves
      // too few cache-line misses in flight for one core to reach the memory's rate. Past the
      // panel's end this touches the next panel (contiguous) or nothing (prefetches do not fault).
      for (size_t k = 0; k < kBlockBytes; k += 64) _mm_prefetch(q + prefetch + k, _MM_HINT_T0);
      // The scales are a second, slower stream at the panel's end: the next group's, a block's
      // worth per block, so that a panel's first blocks do not wait on a miss for their scales.
      _mm_prefetch(scales + kNp * g.stride + 32 * b, _MM_HINT_T0);
      PanelBlock<kQ4, kNt>(q, scales + 32 * b, act, l, b, acc[p]);
    }
  }
}

template <bool kQ4, int kNt>
QX_FN void PanelGemvStore(const char* panel, const PanelGeom& g, const char* pack,
                          const ActLayout& l, size_t t0, __mmask16 mask, float* y,
                          size_t y_stride) {
  const char* act[kNt];
  for (int t = 0; t < kNt; ++t) act[t] = pack + (t0 + static_cast<size_t>(t)) * l.stride;
  __m512 acc[1][kNt];
  PanelGemv<kQ4, kNt>(panel, g, act, l, acc);
  for (int t = 0; t < kNt; ++t)
    _mm512_mask_storeu_ps(y + (t0 + static_cast<size_t>(t)) * y_stride, mask, acc[0][t]);
}

// Rows [r0, r1) of panel-layout weights (any split: a panel cut by the range computes all 16 lanes
// and stores those inside it).
template <bool kQ4>
QX_ENTRY void GemvPanels(const WeightMatrix& w, size_t r0, size_t r1, const char* pack,
                         const ActLayout& l, size_t n_tokens, float* y, size_t y_stride) {
  const PanelGeom g = PanelGeometry(w.type, w.cols);
  const char* wd = static_cast<const char*>(w.data);
  for (size_t p0 = r0 / kPanel * kPanel; p0 < r1; p0 += kPanel) {
    const size_t lo = std::max(p0, r0) - p0, hi = std::min(p0 + kPanel, r1) - p0;
    const auto mask = static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
    const char* panel = wd + p0 / kPanel * g.stride;
    float* yp = y + p0;
    if (n_tokens == 1 && lo == 0 && p0 + 2 * kPanel <= r1) {  // two whole panels, one token
      const char* const act[1] = {pack};
      __m512 acc[2][1];
      PanelGemv<kQ4, 1, 2>(panel, g, act, l, acc);
      _mm512_storeu_ps(yp, acc[0][0]);
      _mm512_storeu_ps(yp + kPanel, acc[1][0]);
      p0 += kPanel;
      continue;
    }
    size_t t = 0;
    for (; t + 4 <= n_tokens; t += 4)
      PanelGemvStore<kQ4, 4>(panel, g, pack, l, t, mask, yp, y_stride);
    for (; t + 2 <= n_tokens; t += 2)
      PanelGemvStore<kQ4, 2>(panel, g, pack, l, t, mask, yp, y_stride);
    for (; t < n_tokens; ++t) PanelGemvStore<kQ4, 1>(panel, g, pack, l, t, mask, yp, y_stride);
  }
}

#if defined(STRATA_KERNELS_AMX)
// ---- AMX-INT8 GEMM (kAmx level, >= kAmxMinTokens tokens) ----
// One tdpbssd computes a 16 x 16 int32 tile C[i][t] = sum_k A[i][k] * B[k/4][4t + k%4] over one
// 32-value block (A: 16 weight rows x 32 int8; B: the block of 16 tokens in the GEMM group layout
// above, signed). The tile is zeroed per block, so C[i][t] is the exact integer dot isum_b of row i
// and token t -- the same integer the vpdpbusd paths get after removing their +128 / +8 offsets.
// C is stored and, row by row, folded into f32 accumulators (lane = token) with
//   acc = fma(float(C[i][t]), dw_b[i] * dx_b[t], acc)   for b = 0, 1, ... in order,
// exactly the GemmTile / GemvPanel instruction sequence, so every output has the same bits as on
// the kAvx512 level.
#define AMX_TARGET QX_TARGET ",amx-tile,amx-int8"
#define AMX_FN static inline __attribute__((target(AMX_TARGET), always_inline))
#define AMX_ENTRY __attribute__((target(AMX_TARGET), noinline))

// Token groups per pass over a weight panel: their activation blocks (nb * kGroupBlockBytes each)
// should stay in L2 while every panel of the thread's rows streams past them.
constexpr size_t kAmxChunkBytes = 1 << 20;
// Blocks per K segment: a panel's segment (512 bytes per block) stays in L1 while the chunk's token
// groups pass over it; accumulators are parked in memory between segments (exact f32 copies, so the
// per-output FMA sequence is unchanged).
constexpr size_t kAmxSegBlocks = 64;
// Panels ahead whose weights are prefetched (to L2) while a panel is multiplied. Measured with
// BM_MatMulStream (weights from DRAM, 16 tokens, 2 threads): 1 ahead 1.11 ms, 2 ahead 1.34,
// 3 ahead 1.40, none 1.82 (best of 3 alternated runs); 1-token GEMV 0.83-1.04 for scale.
constexpr size_t kAmxPrefetchPanels = 1;

// LDTILECFG operand (palette 1). Tiles: 0, 1 = C (16 x 64 B); 2, 3 = A (16 x 32 B);
// 4, 5 = B (8 x 64 B). Even/odd numbers hold blocks b / b + 1 so two blocks are in flight.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 32, 32, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 8, 8};
};
static_assert(sizeof(TileConfig) == 64);

// Per-panel weight data: scales as dwt[b * 16 + i] (f32, row i of the panel) and, unless the tiles
// read the GGUF rows in place (full Q8_0 panels), int8 weights block-major
// at s8 + 512 * b + 32 * i (Q4_0: nibble - 8), so one A tile is 512 contiguous bytes. Rows past the
// matrix repeat its last row (their outputs are dropped).
template <bool kQ4>
AMX_FN void PrepAmxPanel(const char* wd, size_t row_bytes, size_t p0, size_t nr, size_t nb,
                         bool copy_s8, int8_t* s8, float* dwt) {
  constexpr size_t kBlockBytes = kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  alignas(64) int32_t idx[16];
  for (size_t i = 0; i < 16; ++i) idx[i] = static_cast<int32_t>(std::min(i, nr - 1) * row_bytes);
  const __m512i vindex = _mm512_load_si512(idx);
  const char* base = wd + p0 * row_bytes;
  for (size_t b = 0; b < nb; ++b) {
    const __m512i d = _mm512_i32gather_epi32(vindex, base + b * kBlockBytes, 1);
    _mm512_store_ps(dwt + 16 * b, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
  }
  if (!copy_s8) return;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (size_t i = 0; i < 16; ++i) {
    const char* row = base + std::min(i, nr - 1) * row_bytes;
    int8_t* dst = s8 + 32 * i;
    for (size_t b = 0; b < nb; ++b) {
      const char* blk = row + b * kBlockBytes + 2;
      __m256i v;
      if constexpr (kQ4) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
        const __m256i qq =
            _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
        v = _mm256_sub_epi8(_mm256_and_si256(qq, m4), _mm256_set1_epi8(8));
      } else {
        v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk));
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 512 * b), v);
    }
  }
}

// Row layout: acc[i] = fma(float(c[i]), dw_b[i] * dx_b, acc[i]) for the 16 panel rows (lane =
// token; see the section comment). dwt: the panel's scales from the first block on; grp: the token
// group's first block.
struct RowsFold {
  const float* dwt;
  const char* grp;
  __attribute__((target(AMX_TARGET), always_inline)) void operator()(const int32_t (&c)[16][16],
                                                                     size_t b,
                                                                     __m512 (&acc)[16]) const {
    const __m512 dxv =
        _mm512_load_ps(reinterpret_cast<const float*>(grp + b * kGroupBlockBytes + 512));
    const float* dw = dwt + 16 * b;
    for (int i = 0; i < 16; ++i) {
      const __m512 isum = _mm512_cvtepi32_ps(_mm512_load_si512(c[i]));
      acc[i] = _mm512_fmadd_ps(isum, _mm512_mul_ps(_mm512_set1_ps(dw[i]), dxv), acc[i]);
    }
  }
};

// A over nb blocks (block b of A row m at a + m * a_stride + b * a_step) times B (block b's 8 x 64
// bytes at bsrc + b * b_step) by tdpbssd, one zeroed C tile per block, each folded by
// fold(c, b, acc) in block order.
// Software-pipelined over the two C tiles: the product of block b is issued before block b - 1 is
// stored (a tile store waits for its product; with the next product already queued the tile unit
// stays busy meanwhile), and block b - 2, stored one step earlier so its stores have drained, is
// folded between them. The fold order is still b = 0, 1, 2, ...
// pf, if not null, is the part of the next panel to pull toward L2 meanwhile: pf_lines cache lines
// per block, so the DRAM reads of panel p + 1 overlap the tile work of panel p (a tile load that
// misses to DRAM stalls the tile pipeline; nothing else keeps enough reads in flight).
#define STRATA_AMX_PRODUCT(kC, kA, kB, b)   \
  do {                                      \
    _tile_zero(kC);                         \
    _tile_loadd(kA, a + (b)*a_step, as);    \
    _tile_loadd(kB, bsrc + (b)*b_step, 64); \
    _tile_dpbssd(kC, kA, kB);               \
  } while (0)
template <typename Fold>
AMX_FN void AmxTile(const char* a, size_t a_stride, size_t a_step, const char* bsrc, size_t b_step,
                    size_t nb, const char* pf, size_t pf_lines, const Fold& fold,
                    __m512 (&acc)[16]) {
  alignas(64) int32_t c0[16][16];  // even blocks (C tile 0)
  alignas(64) int32_t c1[16][16];  // odd blocks (C tile 1)
  const long as = static_cast<long>(a_stride);
  if (nb == 0) return;
  STRATA_AMX_PRODUCT(0, 2, 4, 0);
  // Loop invariant (b odd): C tile 0 holds block b - 1, not yet stored; c1 holds block b - 2 (b >=
  // 3), stored, not yet folded.
  size_t b = 1;
  for (; b + 2 <= nb; b += 2) {
    if (pf != nullptr) {
      for (size_t k = 0; k < 2 * pf_lines; ++k) _mm_prefetch(pf + 64 * k, _MM_HINT_T1);
      pf += 128 * pf_lines;
    }
    STRATA_AMX_PRODUCT(1, 3, 5, b);
    _tile_stored(0, c0, 64);
    if (b >= 3) fold(c1, b - 2, acc);
    STRATA_AMX_PRODUCT(0, 2, 4, b + 1);
    _tile_stored(1, c1, 64);
    fold(c0, b - 1, acc);
  }
  if (b < nb) {  // one block left
    STRATA_AMX_PRODUCT(1, 3, 5, b);
    _tile_stored(0, c0, 64);
    if (b >= 3) fold(c1, b - 2, acc);
    _tile_stored(1, c1, 64);
    fold(c0, b - 1, acc);
    fold(c1, b, acc);
  } else {
    _tile_stored(0, c0, 64);
    if (b >= 3) fold(c1, b - 2, acc);
    fold(c0, b - 1, acc);
  }
}
#undef STRATA_AMX_PRODUCT

// A token group's 16 accumulators at the start of a K segment: zero for the first, else as parked
// after the previous one (exact f32 copies).
AMX_FN void Unpark(const float* park, bool first, __m512 (&acc)[16]) {
  for (int i = 0; i < 16; ++i) acc[i] = first ? _mm512_setzero_ps() : _mm512_load_ps(park + 16 * i);
}
// At the end of a K segment: parks the accumulators and returns true when segments remain.
AMX_FN bool ParkIfMore(float* park, bool more, const __m512 (&acc)[16]) {
  if (more)
    for (int i = 0; i < 16; ++i) _mm512_store_ps(park + 16 * i, acc[i]);
  return more;
}

template <bool kQ4>
AMX_ENTRY void AmxRows(const WeightMatrix& w, size_t r0, size_t r1, const char* groups,
                       const ActLayout& l, size_t n_tokens, float* y, size_t y_stride) {
  // Tile state is per thread; configure it for this call and release it afterwards (so a context
  // switch does not save 8 KiB of tiles for threads that are done with AMX).
  static const TileConfig kConfig;
  __asm__ volatile("" ::: "memory");
  _tile_loadconfig(&kConfig);
  const char* wd = static_cast<const char*>(w.data);
  const size_t nb = l.nb;
  const size_t gbytes = nb * kGroupBlockBytes;
  const size_t n_groups = (n_tokens + kGroup - 1) / kGroup;
  const size_t chunk = gbytes == 0 ? n_groups : std::max<size_t>(1, kAmxChunkBytes / gbytes);
  thread_local Scratch panel_buf;
  char* buf = panel_buf.Get(nb * 512 + nb * 16 * sizeof(float) + chunk * 16 * 16 * sizeof(float));
  int8_t* s8 = reinterpret_cast<int8_t*>(buf);
  float* dwt = reinterpret_cast<float*>(buf + nb * 512);
  float* parked = dwt + nb * 16;  // accumulators of the chunk's groups between K segments
  for (size_t c0 = 0; c0 < n_groups; c0 += chunk) {
    const size_t c1 = std::min(n_groups, c0 + chunk);
    for (size_t p0 = r0; p0 < r1; p0 += kPanel) {
      const size_t nr = std::min(kPanel, r1 - p0);
      // Full Q8_0 panels feed the tiles in place (16 strided 32-byte rows per tile). A compact
      // copy per panel and chunk measured no faster with many token groups at K = 2048 and slower
      // at K = 8192 (BM_MatMul q8_0 512 tokens, 1 thread, 5 alternated runs: 2048 x 8192
      // 39-51 -> 34-35 ms; 8192 x 2048 33-38 ms either way); Q4_0 nibbles and partial panels need
      // it.
      const bool in_place = !kQ4 && nr == kPanel;
      PrepAmxPanel<kQ4>(wd, w.row_bytes, p0, nr, nb, !in_place, s8, dwt);
      __asm__ volatile("" ::: "memory");  // GCC's tile loads are asm without memory inputs
      const char* a = in_place ? wd + p0 * w.row_bytes + 2 : reinterpret_cast<const char*>(s8);
      const size_t a_stride = in_place ? w.row_bytes : 32;
      const size_t a_step = in_place ? sizeof(BlockQ8_0) : 512;
      // The next panel of this thread's rows, spread over this panel's first token group.
      const size_t pf_row = p0 + kAmxPrefetchPanels * kPanel;
      const size_t next_rows = pf_row < r1 ? std::min(kPanel, r1 - pf_row) : 0;
      const size_t pf_lines = nb == 0 ? 0 : (next_rows * w.row_bytes + 64 * nb - 1) / (64 * nb);
      const char* pf = next_rows == 0 ? nullptr : wd + pf_row * w.row_bytes;
      for (size_t s0 = 0; s0 < std::max<size_t>(nb, 1); s0 += kAmxSegBlocks) {
        const size_t s1 = std::min(nb, s0 + kAmxSegBlocks);
        for (size_t g = c0; g < c1; ++g) {
          float* park = parked + (g - c0) * 256;
          __m512 acc[16];
          Unpark(park, s0 == 0, acc);
          const char* grp = groups + g * gbytes + s0 * kGroupBlockBytes;
          AmxTile(a + s0 * a_step, a_stride, a_step, grp, kGroupBlockBytes, s1 - s0,
                  g == c0 && pf != nullptr ? pf + 64 * pf_lines * s0 : nullptr, pf_lines,
                  RowsFold{dwt + 16 * s0, grp}, acc);
          if (ParkIfMore(park, s1 < nb, acc)) continue;
          alignas(64) float tmp[16][16];
          for (int i = 0; i < 16; ++i) _mm512_store_ps(tmp[i], acc[i]);
          const size_t t0 = g * kGroup;
          const size_t nt = std::min(kGroup, n_tokens - t0);
          for (size_t t = 0; t < nt; ++t)
            for (size_t i = 0; i < nr; ++i) y[(t0 + t) * y_stride + p0 + i] = tmp[i][t];
        }
      }
    }
  }
  _tile_release();
}

// ---- AMX-INT8 on kPanels16 weights (kAmx level, >= kAmxMinTokens tokens) ----
// Block b of a panel is laid out as a B tile: vector j (tile row j) holds bytes 4j..4j+3 of the 16
// rows, i.e. B[k/4][4i + k%4] for weight row i. Once per panel (and chunk of token groups) the
// blocks are made signed into a 512-byte tile each (Q8_0: q + 128 back to q; Q4_0: vectors 0..3
// the low nibbles - 8, values 0..15, vectors 4..7 the high nibbles - 8, values 16..31); the A tile
// is 16 tokens x the block's 32 signed activation values, read in place from the natural-order
// pack (one token per tile row, stride l.stride). So tdpbssd gives C[t][i] = PanelGemv's exact
// integer for token t and row i, folded by PanelGemv's FMA with lane = row: the same bits as the
// GEMV, the VNNI GEMM and the row-layout AMX path.
template <bool kQ4>
AMX_FN void PrepPanelTiles(const char* panel, const PanelGeom& g, char* tiles) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), off = _mm512_set1_epi8(kQ4 ? 8 : -128);
  for (size_t b = 0; b < g.nb; ++b) {
    const char* q = panel + b * kPanel * g.qb;
    char* dst = tiles + 512 * b;
    if constexpr (kQ4) {
      // High nibbles in place (16 x q): the sum is 16 x theirs, exact, shifted back below.
      for (size_t j = 0; j < 4; ++j) {
        const __m512i v = _mm512_loadu_si512(q + 64 * j);
        _mm512_store_si512(dst + 64 * j, _mm512_sub_epi8(_mm512_and_si512(v, m4), off));
        _mm512_store_si512(dst + 256 + 64 * j,
                           _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), off));
      }
    } else {
      for (size_t j = 0; j < 8; ++j)
        _mm512_store_si512(dst + 64 * j, _mm512_xor_si512(_mm512_loadu_si512(q + 64 * j), off));
    }
  }
}

// Panel layout: acc[t] = fma(float(c[t][i]), dw_b[i] * dx_t, acc[t]) for the group's 16 tokens
// (lane i = row i), PanelGemv's fold. scales: the panel's f16 scales from the first block on; dx:
// the first token's dx of that block in the pack (token t at dx + t * stride).
struct PanelFold {
  const char* scales;
  const char* dx;
  size_t stride;
  __attribute__((target(AMX_TARGET), always_inline)) void operator()(const int32_t (&c)[16][16],
                                                                     size_t b,
                                                                     __m512 (&acc)[16]) const {
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 32 * b)));
    for (int t = 0; t < 16; ++t) {
      const float dxt = reinterpret_cast<const float*>(dx + static_cast<size_t>(t) * stride)[b];
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[t])),
                               _mm512_mul_ps(dw, _mm512_set1_ps(dxt)), acc[t]);
    }
  }
};

// Rows [r0, r1) of kPanels16 weights (any split, as GemvPanels). pack: the natural-order pack of
// n_tokens tokens, padded with zero tokens to whole groups of 16 (their outputs are dropped).
template <bool kQ4>
AMX_ENTRY void AmxPanels(const WeightMatrix& w, size_t r0, size_t r1, const char* pack,
                         const ActLayout& l, size_t n_tokens, float* y, size_t y_stride) {
  static const TileConfig kConfig;  // A 16 x 32 B (tokens), B 8 x 64 B (weights), C 16 x 64 B
  __asm__ volatile("" ::: "memory");
  _tile_loadconfig(&kConfig);
  const PanelGeom g = PanelGeometry(w.type, w.cols);
  const char* wd = static_cast<const char*>(w.data);
  const size_t nb = l.nb;
  const size_t gbytes = kGroup * l.stride;
  const size_t n_groups = (n_tokens + kGroup - 1) / kGroup;
  const size_t chunk = gbytes == 0 ? n_groups : std::max<size_t>(1, kAmxChunkBytes / gbytes);
  thread_local Scratch panel_buf;
  char* buf = panel_buf.Get(nb * 512 + chunk * 16 * 16 * sizeof(float));
  float* parked = reinterpret_cast<float*>(buf + nb * 512);
  const size_t pf_lines = nb == 0 ? 0 : (g.stride + 64 * nb - 1) / (64 * nb);
  for (size_t c0 = 0; c0 < n_groups; c0 += chunk) {
    const size_t c1 = std::min(n_groups, c0 + chunk);
    for (size_t p0 = r0 / kPanel * kPanel; p0 < r1; p0 += kPanel) {
      const size_t lo = std::max(p0, r0) - p0, hi = std::min(p0 + kPanel, r1) - p0;
      const auto mask = static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
      const char* panel = wd + p0 / kPanel * g.stride;
      PrepPanelTiles<kQ4>(panel, g, buf);  // the B tiles, block b at buf + 512 b
      __asm__ volatile("" ::: "memory");   // GCC's tile loads are asm without memory inputs
      const char* pf = p0 + kPanel < r1 ? panel + g.stride : nullptr;
      for (size_t s0 = 0; s0 < std::max<size_t>(nb, 1); s0 += kAmxSegBlocks) {
        const size_t s1 = std::min(nb, s0 + kAmxSegBlocks);
        for (size_t grp = c0; grp < c1; ++grp) {
          float* park = parked + (grp - c0) * 256;
          __m512 acc[16];
          Unpark(park, s0 == 0, acc);
          const char* act = pack + grp * gbytes;
          AmxTile(act + 32 * s0, l.stride, 32, buf + 512 * s0, 512, s1 - s0,
                  grp == c0 && pf != nullptr ? pf + 64 * pf_lines * s0 : nullptr, pf_lines,
                  PanelFold{panel + g.scales_off + 32 * s0, act + l.dx_off + 4 * s0, l.stride},
                  acc);
          if (ParkIfMore(park, s1 < nb, acc)) continue;
          const size_t t0 = grp * kGroup;
          const size_t nt = std::min(kGroup, n_tokens - t0);
          for (size_t t = 0; t < nt; ++t)
            _mm512_mask_storeu_ps(y + (t0 + t) * y_stride + p0, mask, acc[t]);
        }
      }
    }
  }
  _tile_release();
}
#endif  // STRATA_KERNELS_AMX

// Jobs share the activations (same cols): they are quantized and grouped once, and one pass over
// the pool covers the rows of all jobs, laid end to end (a job's outputs never depend on which
// thread or row range computes them).
// kPanels: every job's weights are in the kPanels16 layout (activations packed in natural order;
// AMX reads the panels and the pack in place); otherwise every job's are rows.
template <bool kQ4, bool kPanels>
void MatMulQx0(std::span<const QxJob> jobs, const float* x, size_t x_stride, size_t n_tokens,
               ThreadPool* pool, bool amx) {
  constexpr bool kPair = kQ4 && !kPanels;
  const ActLayout l = MakeLayout(jobs[0].w->cols);
  thread_local Scratch pack_buf, group_buf;
  // AMX on panels reads the pack in place, 16 tokens per tile: pad it with zero tokens.
  const bool amx_panels = kPanels && amx && n_tokens >= kAmxMinTokens;
  const size_t pack_tokens = amx_panels ? (n_tokens + kGroup - 1) / kGroup * kGroup : n_tokens;
  char* pack = pack_buf.Get(l.stride * pack_tokens);
  auto run = [&](size_t n, auto&& fn, size_t grain) { RunRange(pool, n, fn, grain); };
  size_t total_rows = 0;
  for (const QxJob& j : jobs) total_rows += j.w->rows;
  // rows_fn(job, r0, r1) over the pool, for every job's rows laid end to end (each thread gets the
  // part of each job inside its global row range).
  auto run_rows = [&](auto&& rows_fn) {
    run(
        total_rows, [&](size_t g0, size_t g1, int) { ForJobRows(jobs, g0, g1, rows_fn); }, kPanel);
  };
  if (n_tokens >= 4) {
    run(
        n_tokens,
        [&](size_t t0, size_t t1, int) { PackTokens<kQ4, kPair>(x, x_stride, t0, t1, l, pack); },
        1);
  } else {
    PackTokens<kQ4, kPair>(x, x_stride, 0, n_tokens, l, pack);
  }
  if (pack_tokens > n_tokens)
    std::memset(pack + n_tokens * l.stride, 0, (pack_tokens - n_tokens) * l.stride);
#if defined(STRATA_KERNELS_AMX)
  if (amx_panels) {
    run_rows([&](const QxJob& j, size_t r0, size_t r1) {
      AmxPanels<kQ4>(*j.w, r0, r1, pack, l, n_tokens, j.y, j.y_stride);
    });
    return;
  }
#endif
  if (n_tokens < kGemmMinTokens && !(amx && n_tokens >= kAmxMinTokens)) {
    run_rows([&](const QxJob& j, size_t r0, size_t r1) {
      if constexpr (kPanels) {
        GemvPanels<kQ4>(*j.w, r0, r1, pack, l, n_tokens, j.y, j.y_stride);
      } else {
        GemvRows<kQ4>(*j.w, r0, r1, pack, l, n_tokens, j.y, j.y_stride);
      }
    });
    return;
  }
  const size_t n_groups = (n_tokens + kGroup - 1) / kGroup;
  char* groups = group_buf.Get(n_groups * l.nb * kGroupBlockBytes);
#if defined(STRATA_KERNELS_AMX)
  if (!kPanels && amx && n_tokens >= kAmxMinTokens) {
    run(
        n_groups,
        [&](size_t g0, size_t g1, int) {
          PackGroups<kPair, false>(pack, l, n_tokens, g0, g1, groups);
        },
        1);
    run_rows([&](const QxJob& j, size_t r0, size_t r1) {
      AmxRows<kQ4>(*j.w, r0, r1, groups, l, n_tokens, j.y, j.y_stride);
    });
    return;
  }
#else
  (void)amx;
#endif
  run(
      n_groups,
      [&](size_t g0, size_t g1, int) {
        PackGroups<kPair, true>(pack, l, n_tokens, g0, g1, groups);
      },
      1);
  run_rows([&](const QxJob& j, size_t r0, size_t r1) {
    GemmRows<kQ4, kPanels>(*j.w, r0, r1, groups, l, n_tokens, j.y, j.y_stride);
  });
}

}  // namespace

bool Avx512MatMul(std::span<const QxJob> jobs, const float* x, size_t x_stride, size_t n_tokens,
                  ThreadPool* pool, bool amx) {
  if (jobs.empty()) return true;
  const DType type = jobs[0].w->type;
  const WeightLayout layout = jobs[0].w->layout;
  for (const QxJob& j : jobs)
    if (j.w->type != type || j.w->cols != jobs[0].w->cols || j.w->layout != layout) return false;
  const bool panels = layout == WeightLayout::kPanels16;
  switch (type) {
    case DType::kQ4_0:
      panels ? MatMulQx0<true, true>(jobs, x, x_stride, n_tokens, pool, amx)
             : MatMulQx0<true, false>(jobs, x, x_stride, n_tokens, pool, amx);
      return true;
    case DType::kQ8_0:
      panels ? MatMulQx0<false, true>(jobs, x, x_stride, n_tokens, pool, amx)
             : MatMulQx0<false, false>(jobs, x, x_stride, n_tokens, pool, amx);
      return true;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      Avx512MatMulKQuant(jobs, x, x_stride, n_tokens, pool);
      return true;
    default:
      return false;
  }
}

}  // namespace strata::kernels::internal
