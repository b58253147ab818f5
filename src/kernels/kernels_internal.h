// Internal plumbing shared by kernels.cc, the reference kernels (ref/) and the SIMD kernels (cpu/).
// Not part of the public API. Thread-safe: plain functions and a table of function pointers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

// Set when the compiler can build the AMX-INT8 kernels (target attributes amx-tile/amx-int8).
#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 12) || \
                            (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define STRATA_KERNELS_AMX 1
#endif

namespace strata::kernels::internal {

// Largest number of tokens a tile kernel handles per pass over a weight row.
constexpr int kMaxTileTokens = 4;

// The avx512 level's integer MatMuls (Q4_0/Q8_0, K-quants) run fewer than kGemmMinTokens tokens
// through the GEMV (the decode path), more through the GEMM; with AMX, Q4_0/Q8_0 take the tiles
// from kAmxMinTokens tokens.
constexpr size_t kGemmMinTokens = 6;
constexpr size_t kAmxMinTokens = 4;

// True when MatMul should run this integer-type decode (n_tokens through the GEMV) on the avx2
// level's 256-bit panel GEMV instead of the avx512 one: the type's decode variant (variants.cc;
// kernels.h: ChosenDecodeVariant). Both give the same bits. The first call per type may time them.
bool DecodeOnAvx2(DType t);
// MatMuls at the avx512 / amx level that DecodeOnAvx2 sent to the avx2 GEMV (tests check that the
// switch reaches the kernels: both variants give the same bits, so outputs cannot tell).
uint64_t Avx2DecodeCount();
void CountAvx2Decode();

// Storage format of the converted activations that are multiplied with weights of type `w`:
// Q4_0/Q8_0 -> Q8_0, Q4_K/Q5_K/Q6_K -> Q8_K, F16/BF16/F32 -> F32. For F16 (BF16) weights the f32
// values are first rounded to f16 (bf16), as ggml converts activations to the weight's type; they
// are kept as f32 so the kernels convert only the weights.
DType ActivationType(DType w);

// Converts n floats into the activations for weights of type `weight_type` (see ActivationType).
// Every ISA uses this same function, so SIMD and reference dot products see identical activations.
void ConvertActivations(DType weight_type, const float* x, void* dst, size_t n);
// ConvertActivations for F16 / BF16 weights with AVX2 + F16C (8 values per instruction): the same
// f32 values for every input but NaN (a NaN either way). Other types: the scalar function.
void Avx2RoundActivations(DType weight_type, const float* x, float* out, size_t n);
// F32ToF16 of n values with F16C (the same halves but for NaN payloads). The avx512 level's F16
// kernels (row tile and kPanels4) read their activations as these halves: the f16-rounded values
// ConvertActivations gives, at half the bytes.
void Avx2ToF16(const float* x, uint16_t* out, size_t n);
// F32ToBF16 of n values (the same halves but for NaN payloads): the activations of the avx512
// level's bf16-fma kernels.
void Avx2ToBf16(const float* x, uint16_t* out, size_t n);

// out[t] = dot(weight row w, activation row t) for t < nt (1 <= nt <= kMaxTileTokens), where
// activation row t starts at (const char*)x + t * x_stride; n = number of elements (multiple of the
// block size). For every (row, token) pair the arithmetic does not depend on nt or on which other
// tokens share the tile, so results are the same however tokens are grouped.
using DotTileFn = void (*)(const void* w, const void* x, size_t x_stride, int nt, size_t n,
                           float* out);

struct VecOps {
  void (*rms_norm)(const float* x, const float* weight, float* out, size_t n, float eps);
  void (*silu_mul)(const float* gate, const float* up, float* out, size_t n);
  void (*add)(float* x, const float* y, size_t n);
  float (*dot_f32)(const float* a, const float* b, size_t n);
  void (*axpy)(float a, const float* x, float* y, size_t n);
  void (*softmax)(float* x, size_t n);
  void (*attend)(const float* q, const float* k, const float* v, size_t kv_stride, size_t len,
                 size_t hd, float scale, float* scores, float* out);
  void (*attend_f16)(const float* q, size_t group, const uint16_t* k, const uint16_t* v,
                     size_t kv_stride, size_t len, size_t hd, float scale, float* scores,
                     float* out);
  void (*attend_f16_paged)(const float* q, size_t group, const uint16_t* const* k_blocks,
                           const uint16_t* const* v_blocks, unsigned block_shift, size_t row_stride,
                           size_t len, size_t hd, float scale, float* scores, float* out);
};

// Geometry of the kPanels16 layout (kernels.h) for one type and row length: a panel of 16 rows
// holds nb blocks of 16 * qb quant bytes (qb = 32 for Q8_0, 16 for Q4_0), then nb * 32 bytes of
// f16 scales, and panels are `stride` bytes apart (64-byte multiples).
constexpr size_t kPanelRows = 16;
struct PanelGeom {
  size_t nb = 0;          // blocks per row
  size_t qb = 0;          // quant bytes per row and block
  size_t scales_off = 0;  // offset of the scales in a panel (nb * 16 * qb)
  size_t stride = 0;      // bytes per panel
};
// Zero qb when t has no panel layout.
PanelGeom PanelGeometry(DType t, size_t cols);

// kPanels16 for Q4_K (kernels.h): per panel of 16 rows, super-block b is one record of
// kQ4KRecordBytes at b * kQ4KRecordBytes (PanelGeometry: nb super-blocks, qb = 128, stride =
// nb * kQ4KRecordBytes):
//   [0, 2048)      quants: 64-byte vector v = 8 j + k (j < 4: the 32-byte chunk j of qs, k < 8)
//                  holds bytes 4k..4k+3 of chunk j of rows 0..15 (row i at 64 v + 4 i): low
//                  nibbles are values 64 j + 4 k .. + 3 (sub-block 2 j), high nibbles the values 32
//                  further (sub-block 2 j + 1)
//   [2048, 2176)   byte 16 s + i: the 6-bit scale of sub-block s of row i
//   [2176, 2304)   byte 16 s + i: the 6-bit min of sub-block s of row i
//   [2304, 2336)   the 16 rows' d (f16), [2336, 2368) their dmin (f16)
// 2368 bytes per 16 rows and 256 values against the file's 2304: +2.8 %.
constexpr size_t kQ4KRecordBytes = 2368;
constexpr size_t kQ4KScalesOff = 2048, kQ4KMinsOff = 2176, kQ4KDOff = 2304, kQ4KDminOff = 2336;
// kPanels16 for Q5_K: the Q4_K record (same offsets: the low 4 bits of each level as Q4_K's
// nibbles), then [2368, 2880): qh, vector k (< 8) holding qh bytes 4k..4k+3 of rows 0..15 (bit
// 2j / 2j + 1 of qh byte l: bit 4 of value 64 j + l / 64 j + 32 + l). 2880 bytes for the file's
// 2816: +2.3 %.
constexpr size_t kQ5KRecordBytes = 2880, kQ5KQhOff = 2368;
// kPanels16 for Q6_K: per panel of 16 rows, super-block b is one record of kQ6KRecordBytes:
//   [0, 2048)     ql: vector v (< 32) holds bytes 4v..4v+3 of ql of rows 0..15 (row i at
//                 64 v + 4 i)
//   [2048, 3072)  qh: vector v (< 16) holds bytes 4v..4v+3 of qh, likewise
//   [3072, 3328)  byte 16 g + i: the int8 scale of 16-value group g of row i
//   [3328, 3360)  the 16 rows' d (f16); 32 bytes of padding to a 64-byte multiple
// 3392 bytes per 16 rows and 256 values against the file's 3360: +0.95 %.
constexpr size_t kQ6KRecordBytes = 3392;
constexpr size_t kQ6KQhOff = 2048, kQ6KScalesOff = 3072, kQ6KDOff = 3328;
// Writes the kPanels16 panel of rows [p0, p0 + 16) of the kRows Q4_0, Q8_0, Q4_K, Q5_K or Q6_K
// matrix w (rows past w.rows as zeros) to dst (PanelGeometry(w.type, w.cols).stride bytes).
// PackPanels is this for every panel; the row-layout paths of the panel kernels call it per panel.
void PackPanel16(const WeightMatrix& w, size_t p0, void* dst);
// kPanels4 (F16 / BF16): rows per panel.
constexpr size_t kFloatPanelRows = 4;

// Where the F16 / BF16 kernels find 16-value chunk c of row r, and the row's last n % 16 values:
// a row as stored (one row), or a kPanels4 panel (chunk c of its 4 rows consecutive, then each
// row's tail, row by row).
struct HalfRowSrc {
  const uint16_t* w;
  const uint16_t* Chunk(int /*r*/, size_t c) const { return w + 16 * c; }
  const uint16_t* Tail(int /*r*/, size_t chunks, size_t /*tail*/) const { return w + 16 * chunks; }
};
struct HalfPanelSrc {
  const uint16_t* p;
  const uint16_t* Chunk(int r, size_t c) const {
    return p + (kFloatPanelRows * c + static_cast<size_t>(r)) * 16;
  }
  const uint16_t* Tail(int r, size_t chunks, size_t tail) const {
    return p + kFloatPanelRows * 16 * chunks + static_cast<size_t>(r) * tail;
  }
};

// Tokens per call of a DotPanelFn: a 4-row x 6-token tile is 24 accumulators, which the 32
// AVX-512 registers hold with the panel's 4 weight vectors and one activation vector; per 16-value
// chunk it converts 4 + 6 vectors for 24 FMAs, against 4 + 4 for 16 at 4 tokens (F16 prefill
// +14 % in a loop of the kernel's shape on Zen 5, docs/perf.md).
constexpr int kMaxPanelTileTokens = 6;

// out[r * kMaxPanelTileTokens + t] = dot(row r of the kPanels4 panel at `panel`, activation row t)
// for r < 4, t < nt, 1 <= nt <= kMaxPanelTileTokens; n = cols. The bits of the same level's
// DotTileFn on each row in row layout (every output's arithmetic is its own: the token grouping
// does not change it).
using DotPanelFn = void (*)(const void* panel, const void* x, size_t x_stride, int nt, size_t n,
                            float* out);
// The avx512 level's kPanels4 kernels (F16, BF16); nullptr for other types.
DotPanelFn Avx512DotPanel4(DType t);
// The avx2 level's (f32 activations, the avx2 row tile's bits); nullptr for other types.
DotPanelFn Avx2DotPanel4(DType t);
// The bf16-dot variant's BF16 kernels (cpu/bf16_avx512.cc, vdpbf16ps): call only when the CPU has
// AVX512_BF16 (kernels::Bf16DotAvailable()). Row tile and kPanels4 tile give the same bits.
// Their activations are bf16 (rows of uint16_t), converted by Avx512ToBf16.
DotTileFn Avx512Bf16DotTile();
DotPanelFn Avx512Bf16DotPanel4();
void Avx512ToBf16(const float* x, uint16_t* out, size_t n);

// Returns the tile kernel for weight type t at this ISA level, or nullptr when that level has no
// specialised kernel for t (the caller then falls back to a lower level).
DotTileFn RefDotTile(DType t);
DotTileFn Avx2DotTile(DType t);
DotTileFn Avx512DotTile(DType t);

// Whole-MatMul fast paths of the AVX-512 level (cpu/matmul_*_avx512.cc): return false when they
// do not handle the weights' type (the caller then uses the tile kernels). w.row_bytes must be set.
// `amx`: the caller checked that AMX-INT8 is usable (DetectIsa() == kAmx); the kernels may then use
// tiles for large token counts, with results identical bit for bit to the non-AMX code. One weight
// matrix of a shared-activation MatMul: y[t * y_stride + r] for r < w->rows.
struct QxJob {
  const WeightMatrix* w;  // row_bytes set
  float* y;
  size_t y_stride;
};

// 64-byte aligned growable scratch (one per thread: thread_local at the user; not thread-safe).
// Get may reallocate: a pointer from an earlier Get is valid only until the next larger one.
struct Scratch {
  std::unique_ptr<char[]> mem;
  size_t cap = 0;
  char* Get(size_t bytes) {
    if (bytes + 64 > cap) {
      cap = (bytes + 64) * 5 / 4;
      mem.reset(new char[cap]);
    }
    char* p = mem.get();
    return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64;
  }
};

// Calls rows_fn(job, r0, r1) (job-local rows, r0 < r1) for the part of each job inside [g0, g1)
// of all the jobs' rows laid end to end: one pool range covers several matrices.
template <typename Fn>
void ForJobRows(std::span<const QxJob> jobs, size_t g0, size_t g1, Fn&& rows_fn) {
  size_t off = 0;
  for (const QxJob& j : jobs) {
    const size_t lo = std::max(g0, off), hi = std::min(g1, off + j.w->rows);
    if (lo < hi) rows_fn(j, lo - off, hi - off);
    off += j.w->rows;
  }
}

// How far ahead of its loads (bytes) a panel GEMV prefetches: `fallback` (the kernel's measured
// choice), or STRATA_PANEL_PREFETCH when set (read once; for tuning runs).
inline size_t PanelPrefetchBytes(size_t fallback) {
  static const long kEnv = [] {
    const char* env = std::getenv("STRATA_PANEL_PREFETCH");
    return env != nullptr ? static_cast<long>(std::strtoul(env, nullptr, 10)) : -1L;
  }();
  return kEnv >= 0 ? static_cast<size_t>(kEnv) : fallback;
}

// fn(begin, end, thread) over [0, n): split over the pool when there is one and n > grain, else
// fn(0, n, 0) on the calling thread. fn is called by reference (no allocating wrapper).
template <typename Fn>
void RunRange(ThreadPool* pool, size_t n, Fn&& fn, size_t grain) {
  if (pool != nullptr && n > grain) {
    pool->ParallelFor(n, fn, grain);
  } else {
    fn(0, n, 0);
  }
}

// Several jobs over the same activations (all of one type and one cols, else false): the
// activations are converted once; each job's outputs are those of a MatMul of its own.
bool Avx512MatMul(std::span<const QxJob> jobs, const float* x, size_t x_stride, size_t n_tokens,
                  ThreadPool* pool, bool amx);

// Q4_0 or Q8_0 jobs (one type and cols; each job kRows or kPanels16) at the avx2 level
// (cpu/matmul_qx0_avx2.cc): a 256-bit GEMV on kPanels16 panels (row-layout weights packed a panel
// at a time) for every token count, with the avx512 level's arithmetic, so the same bits as
// Avx512MatMul for finite activations. False (nothing done) for other types or mixed jobs.
bool Avx2MatMulQx0(std::span<const QxJob> jobs, const float* x, size_t x_stride, size_t n_tokens,
                   ThreadPool* pool);

// Q4_K, Q5_K or Q6_K jobs (one type and cols, cols a multiple of 256; each job kRows or
// kPanels16) at the avx2 level (cpu/matmul_kq_avx2.cc): the 256-bit form of Avx512MatMulKQuant's
// GEMV for every token count, its bits. False (nothing done) for other types or mixed jobs.
bool Avx2MatMulKQuant(std::span<const QxJob> jobs, const float* x, size_t x_stride, size_t n_tokens,
                      ThreadPool* pool);

// Q4_K, Q5_K or Q6_K jobs (one type; kRows or kPanels16, cols a multiple of 256) at the avx512
// level (cpu/matmul_kq_avx512.cc): the panel GEMV / GEMM; their bits, not the avx2 tile's.
void Avx512MatMulKQuant(std::span<const QxJob> jobs, const float* x, size_t x_stride,
                        size_t n_tokens, ThreadPool* pool);

const VecOps& RefVecOps();
const VecOps& Avx2VecOps();
const VecOps& Avx512VecOps();

}  // namespace strata::kernels::internal
