// Compute kernels: quantized formats, matrix multiplication and vector ops on CPU.
//
// Every kernel has a plain scalar reference in kernels/ref (the definition of "correct") and SIMD
// versions in kernels/cpu selected at runtime by ISA. Results of MatMul do not depend on the
// number of threads: work is split by output rows, each row is computed by one thread with the
// same code (so 1 and 2 threads are bit-identical).
//
// Activations: for integer-dot weight types the float activations are quantized on the fly, as
// ggml does (Q4_0/Q8_0 weights: activations to Q8_0 blocks; Q4_K/Q5_K/Q6_K: to Q8_K blocks);
// F16/BF16 weights: activations are first rounded to f16/bf16 (as ggml converts them to the weight
// type), then products and accumulation in f32; F32 weights: plain f32.
// Thread contract: functions are reentrant; MatMul uses the given pool (may be null = 1 thread) and
// per-thread scratch buffers that grow once and are reused (no allocation per token at steady
// state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace strata::kernels {

// kAmx = kAvx512 plus AMX-INT8 tiles for Q4_0/Q8_0 MatMul with many tokens (same results bit for
// bit as kAvx512; only faster). Detecting it asks Linux once for permission to use AMX tile state
// (arch_prctl ARCH_REQ_XCOMP_PERM); if refused, the CPU is reported as kAvx512.
enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };
std::string_view IsaName(Isa isa);
// Best ISA this CPU (and OS) supports (cpuid, xgetbv, arch_prctl).
Isa DetectIsa();
// ISA used by the dispatching kernels: min(detected, forced). Initially DetectIsa(), or the value
// of env STRATA_ISA=scalar|avx2|avx512|amx (clamped to what the CPU supports).
Isa ActiveIsa();
// Forces an ISA (clamped to DetectIsa()); for tests and benchmarks. Not thread-safe w.r.t. running
// kernels.
void SetIsa(Isa isa);

// Kernel variants inside an ISA level (listed with the rest by DescribeKernels, `strata info
// --cpu`). Today one choice: BF16 weights multiplied by AVX512-BF16 vdpbf16ps ("bf16-dot") or by
// f32 FMAs on widened weights ("bf16-fma"). Default: bf16-dot where the CPU has AVX512_BF16 and
// the active ISA is avx512 or amx. Env STRATA_KERNEL_VARIANT=bf16-fma|bf16-dot forces one (asking
// for one the CPU lacks warns and falls back). The variants add the same exact products in a
// different order (kernels/README.md); within one, every layout and token count gives the same
// bits.
bool Bf16DotAvailable();   // cpuid AVX512_BF16, and the avx512 level detected
bool Bf16DotActive();      // the variant chosen (applies while the active ISA is avx512 or amx)
void SetBf16Dot(bool on);  // tests, benchmarks (clamped to Bf16DotAvailable); as SetIsa

// Decode GEMV variants of the integer types (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) on kPanels16 weights at
// the avx512 and amx levels. Two GEMVs read the same panel bytes and compute the same exact
// integers and fold, so they give the same bits: "vnni512" (the avx512 level's: 512-bit vpdpbusd,
// 16 rows per vector) and "avx2" (the avx2 level's: 256-bit vpmaddubsw + vpmaddwd, 8 rows per
// half-panel; no VNNI). Which one streams faster depends on the core (how it runs 512-bit
// operations and VNNI), so each type's is decided once per process, at its first decode: the
// CPU family's entry in a table (variants.cc), then, unless STRATA_KERNEL_SELF_TIMING=0, a short
// self-timing (one thread, a 64-row matrix in L2, ~1-2 ms) that moves to the other variant only
// when it is at least 10 % faster. STRATA_KERNEL_VARIANT items `q4_0=avx2`, `q4_K=vnni512`, ...
// force one (all five: `int=avx2`). Only bit-identical variants are chosen by timing: BF16's
// bf16-dot / bf16-fma, which differ in the last bits, follow the CPU's flags alone, so outputs
// stay the same from run to run on one machine.
enum class DecodeVariant { kVnni512 = 0, kAvx2 = 1 };
std::string_view DecodeVariantName(DecodeVariant v);
struct DecodeChoice {
  DecodeVariant variant = DecodeVariant::kVnni512;
  std::string why;  // the table entry, the env item, or the self-timing's figures
};
// t's decode variant (types other than the five: vnni512, "n/a"). Thread-safe; the first call per
// type (per process) may run the self-timing on the calling thread.
DecodeChoice ChosenDecodeVariant(DType t);
// Forces t's variant for this process (tests, benchmarks); std::nullopt goes back to the decided
// one. As SetIsa: not to be called while kernels run.
void SetDecodeVariant(DType t, std::optional<DecodeVariant> v);
// The table's entry for this CPU (no timing): what ChosenDecodeVariant starts from.
DecodeChoice TableDecodeVariant(DType t);
// Parses a STRATA_KERNEL_VARIANT value's decode items (`<type>=vnni512|avx2`, `int=...` for all
// five types; other items such as bf16-dot are skipped): the forced variant per type, or an
// error naming the bad item. Exposed for tests.
struct DecodeOverride {
  DType type;
  DecodeVariant variant;
};
Result<std::vector<DecodeOverride>> ParseDecodeOverrides(std::string_view value);

// True if MatMul / DequantizeRow support weights of this type.
bool IsSupported(DType t);

// Converts n elements of `src` (type t, n a multiple of the block size) to float.
void DequantizeRow(DType t, const void* src, float* dst, size_t n);
// Quantizes n floats into type t (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K). n must be a
// multiple of the block size. Used by the GGUF writer (`strata synth`) and by tests.
void QuantizeRow(DType t, const float* src, void* dst, size_t n);

// How a weight matrix's blocks lie in memory.
//   kRows:     as stored in GGUF: row after row, `row_bytes` apart.
//   kPanels16: Q4_0 / Q8_0 (and the K-quants, below), repacked once at load (PackPanels) so that
//              a decode GEMV is loads, dot products and FMAs with no shuffles: rows in panels of
//              16 (the last panel padded with zero rows), each panel PanelBytes() long and
//              64-byte aligned; in a panel, per block b, the quant bytes of the 16 rows
//              interleaved 4 at a time (64-byte vector j holds bytes 4j..4j+3 of row 0, then of
//              row 1, ..., row 15; Q8_0 stored as q + 128), then after all blocks the 16 rows'
//              f16 scales per block. The same bytes as the file, plus at most 63 bytes per panel
//              and the padding rows: resident memory within ~1 %.
//              Q4_K / Q5_K / Q6_K: 16-row panels of one record per super-block: the quant
//              bytes interleaved 4 at a time as above, then the 16 rows' scales (and mins)
//              unpacked to bytes, then their d (and dmin) (kernels_internal.h: kQ4KRecordBytes
//              and the others): +2.8 % / +2.3 % / +0.95 %.
//   kPanels4:  F16 / BF16 only, repacked at load from the avx2 level up: rows in panels of 4 (the
//              last padded with zero rows), each panel 4 * cols values: chunk c (16 values) of its
//              4 rows consecutive (row 0's, row 1's, ...), then each row's last cols % 16 values,
//              row by row. The same bytes as the file (plus < 4 padding rows): one sequential
//              stream for the 4-row GEMV and the 4-row x 6-token prefill tile.
enum class WeightLayout { kRows = 0, kPanels16 = 1, kPanels4 = 2 };

// A weight matrix: `rows` rows of `cols` elements of `type`. row_bytes == RowBytes(type, cols)
// in either layout (for kPanels16 it is the logical row's size, not a stride).
struct WeightMatrix {
  DType type = DType::kF32;
  const void* data = nullptr;
  size_t rows = 0;
  size_t cols = 0;
  size_t row_bytes = 0;
  WeightLayout layout = WeightLayout::kRows;
};

// The layout MatMul runs fastest on for weights of type t at the active ISA: kPanels16 for
// Q4_0/Q8_0 and the K-quants from avx2 up (the shuffle-free GEMVs; on AMX CPUs the Q4_0/Q8_0 tile
// GEMM reads the panels too), kPanels4 for F16/BF16 from avx2 up, else kRows. Env
// STRATA_WEIGHT_LAYOUT=rows forces kRows (A/B runs); =panels forces the type's panel layout at any
// ISA (tests: at scalar MatMul reads the rows back, slower, same bits). Every layout gives the same
// results bit for bit at every ISA.
WeightLayout PreferredLayout(DType t);

// What MatMul runs for weights of one type at the active ISA, and why (`strata info --cpu`).
struct KernelVariant {
  DType type;
  std::string decode;   // the few-token path (GEMV)
  std::string prefill;  // the many-token path (GEMM)
  std::string layout;   // the weights' layout after load
  std::string why;
};
std::vector<KernelVariant> DescribeKernels();
// Bytes PackPanels writes for a rows x cols matrix of type t (0 when t has no panel layout).
size_t PanelLayoutBytes(DType t, size_t rows, size_t cols);
// Repacks a kRows matrix into its type's panel layout at dst (Q4_0/Q8_0/K-quants: kPanels16,
// F16/BF16: kPanels4; 64-byte aligned, PanelLayoutBytes(w.type, w.rows, w.cols) bytes).
// Single-threaded; reads every byte of w once.
void PackPanels(const WeightMatrix& w, void* dst);
// Writes row r of w (any layout) in the GGUF row format (row_bytes bytes) to dst.
void ReadRow(const WeightMatrix& w, size_t r, void* dst);

// y[t * y_stride + r] = sum_k W[r, k] * x[t * x_stride + k]  for t < n_tokens, r < w.rows.
// x_stride >= w.cols, y_stride >= w.rows (pass 0 for "dense": cols / rows).
void MatMul(const WeightMatrix& w, const float* x, size_t n_tokens, float* y, ThreadPool* pool,
            size_t x_stride = 0, size_t y_stride = 0);

// Several matrices of the same cols applied to the same activations (Q/K/V, gate/up): every y is
// bit for bit what MatMul(*w, x, n_tokens, y, pool) gives (dense y). When the matrices share a
// quantized type the activations are converted once and one pass over the pool covers them all.
struct MatMulOut {
  const WeightMatrix* w;
  float* y;
};
void MatMulShared(std::span<const MatMulOut> outs, const float* x, size_t n_tokens,
                  ThreadPool* pool);

// ---- Vector ops (f32) ----
// out = x / sqrt(mean(x^2) + eps) * weight   (weight may be null: no scaling). out may alias x.
void RmsNorm(const float* x, const float* weight, float* out, size_t n, float eps);
// out[i] = silu(gate[i]) * up[i]. out may alias gate or up.
void SiluMul(const float* gate, const float* up, float* out, size_t n);
// x[i] += y[i]
void Add(float* x, const float* y, size_t n);
// dot product of two f32 vectors
float DotF32(const float* a, const float* b, size_t n);
// y[i] += a * x[i]
void Axpy(float a, const float* x, float* y, size_t n);
// In-place softmax over n values; returns nothing. Uses max-subtraction.
void Softmax(float* x, size_t n);
// Attention of one query over `len` cached positions: scores[j] = scale * dot(q, k_j) (k_j = k +
// j * kv_stride, hd values), scores = softmax(scores), out = sum_j scores[j] * v_j (v_j = v +
// j * kv_stride). scores must hold len floats (overwritten); out (hd floats) must not alias inputs.
// Same result for a given (q, keys, values, len) whatever else is in flight (batch-invariant).
void Attend(const float* q, const float* k, const float* v, size_t kv_stride, size_t len, size_t hd,
            float scale, float* scores, float* out);
// Attend over IEEE-half keys/values (strides in elements), widened to f32 as they are read, for
// `group` query heads sharing them (head h: query q + h * hd, scores scores + h * len, output
// out + h * hd). Each head gets the same bits as Attend on the widened rows at the same ISA level
// (widening is exact and the arithmetic order is the same); it saves writing and re-reading an f32
// copy of the KV history, and reads each row once per group. group 0 does nothing.
void AttendF16(const float* q, size_t group, const uint16_t* k, const uint16_t* v, size_t kv_stride,
               size_t len, size_t hd, float scale, float* scores, float* out);
// AttendF16 straight from a paged cache, for `group` query heads that share the key/value head
// (grouped-query attention): key j is k_blocks[j >> block_shift] + (j % 2^block_shift) * row_stride
// (values likewise; strides in elements), so nothing is copied out of the blocks first. Head h's
// query is q + h * hd and its output out + h * hd; scores must hold group * len floats. Each head
// gets the bits of AttendF16 on its own with those rows laid out contiguously (only the addresses
// differ, and the rows are read once per group instead of once per head). group 0 does nothing.
void AttendF16Paged(const float* q, size_t group, const uint16_t* const* k_blocks,
                    const uint16_t* const* v_blocks, unsigned block_shift, size_t row_stride,
                    size_t len, size_t hd, float scale, float* scores, float* out);

}  // namespace strata::kernels
