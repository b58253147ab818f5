// Dispatch: ISA selection, row (de)quantization and the MatMul driver.
//
// MatMul converts the activation rows once per call into the format the weight type multiplies
// with (Q8_0, Q8_K, f16, bf16 or f32) into a thread_local scratch buffer of the calling thread,
// then splits the output rows across the pool. Within a thread, rows are processed in blocks that
// fit in L2 and, for every block, tokens in tiles of up to kMaxTileTokens (kMaxPanelTileTokens for
// the F16/BF16 panels): each tile kernel reads a weight row once for all tokens of the tile, so
// prefill is a GEMM rather than n GEMVs.
#include "kernels/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "base/enum_names.h"
#include "kernels/cpu/quantize_avx2.h"
#include "kernels/kernels_internal.h"
#include "kernels/ref/quants_ref.h"

namespace strata::kernels {
namespace {

using internal::DotTileFn;

// AMX-TILE + AMX-INT8 in cpuid, tile state enabled by the OS in XCR0, and (Linux) the process
// allowed to use it. The permission is process-wide, so asking once covers every thread.
bool DetectAmx() {
#if defined(__linux__) && defined(__x86_64__) && defined(STRATA_KERNELS_AMX)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || (ecx & (1u << 27)) == 0) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if ((edx & (1u << 24)) == 0 || (edx & (1u << 25)) == 0) return false;  // AMX-TILE, AMX-INT8
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  constexpr unsigned kTileBits = (1u << 17) | (1u << 18);  // XTILECFG, XTILEDATA
  return (lo & kTileBits) == kTileBits;
#else
  return false;
#endif
}

Isa DetectIsaUncached() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C via cpuid leaf 1 (ecx bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  if (!avx2) return Isa::kScalar;
  // Our AVX-512 level needs VNNI (vpdpbusd); CPUs with AVX-512 but without VNNI (Skylake-X) use
  // AVX2.
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vnni");
  if (!avx512) return Isa::kAvx2;
  return DetectAmx() ? Isa::kAmx : Isa::kAvx512;
#else
  return Isa::kScalar;
#endif
}

Isa ClampIsa(Isa isa) {
  return static_cast<int>(isa) <= static_cast<int>(DetectIsa()) ? isa : DetectIsa();
}

Isa InitialIsa() {
  const char* env = std::getenv("STRATA_ISA");
  if (env == nullptr || *env == '\0') return DetectIsa();
  const std::string v(env);
  if (v == "scalar") return Isa::kScalar;
  if (v == "avx2") return ClampIsa(Isa::kAvx2);
  if (v == "avx512") return ClampIsa(Isa::kAvx512);
  if (v == "amx") return ClampIsa(Isa::kAmx);
  std::fprintf(stderr, "strata: ignoring unknown STRATA_ISA=%s (use scalar|avx2|avx512|amx)\n",
               env);
  return DetectIsa();
}

std::atomic<int>& ActiveIsaSlot() {
  static std::atomic<int> slot{static_cast<int>(InitialIsa())};
  return slot;
}

// AVX512_BF16: cpuid leaf 7 sub-leaf 1, eax bit 5.
bool DetectAvx512Bf16() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || eax < 1) return false;  // sub-leaves
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 5)) != 0;
#else
  return false;
#endif
}

// STRATA_KERNEL_VARIANT: a comma-separated list; today's only choice is bf16-dot | bf16-fma.
bool InitialBf16Dot() {
  const char* env = std::getenv("STRATA_KERNEL_VARIANT");
  bool on = Bf16DotAvailable();
  if (env == nullptr) return on;
  std::string_view rest(env);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.find('=') != std::string_view::npos) {
      // a decode item (`q4_0=avx2`): variants.cc
    } else if (item == "bf16-fma") {
      on = false;
    } else if (item == "bf16-dot") {
      on = Bf16DotAvailable();
      if (!on)
        std::fprintf(stderr, "strata: STRATA_KERNEL_VARIANT=bf16-dot: no AVX512_BF16 here\n");
    } else if (!item.empty()) {
      std::fprintf(
          stderr,
          "strata: ignoring unknown STRATA_KERNEL_VARIANT item %.*s (use bf16-dot|bf16-fma)\n",
          static_cast<int>(item.size()), item.data());
    }
  }
  return on;
}

std::atomic<bool>& Bf16DotSlot() {
  static std::atomic<bool> slot{InitialBf16Dot()};
  return slot;
}

// `bf16_dot`: MatMul's one decision for the bf16-dot variant (it also sets the activations'
// format, so the tile, the panel kernel and the conversion must follow the same flag).
DotTileFn SelectDot(DType t, Isa isa, bool bf16_dot) {
  DotTileFn fn = nullptr;
  if (bf16_dot) return internal::Avx512Bf16DotTile();
  if (static_cast<int>(isa) >= static_cast<int>(Isa::kAvx512)) fn = internal::Avx512DotTile(t);
  if (fn == nullptr && static_cast<int>(isa) >= static_cast<int>(Isa::kAvx2))
    fn = internal::Avx2DotTile(t);
  if (fn == nullptr) fn = internal::RefDotTile(t);
  return fn;
}

const internal::VecOps& Ops() {
  switch (ActiveIsa()) {
    case Isa::kAmx:
    case Isa::kAvx512:
      return internal::Avx512VecOps();
    case Isa::kAvx2:
      return internal::Avx2VecOps();
    default:
      return internal::RefVecOps();
  }
}

[[noreturn]] void Fatal(const char* what, DType t) {
  // Only reachable through a caller bug: the model loader validates types and shapes first.
  std::fprintf(stderr, "strata::kernels: %s (type %.*s)\n", what,
               static_cast<int>(DTypeName(t).size()), DTypeName(t).data());
  std::abort();
}

size_t BlockSize(DType t) {
  auto tr = GetDTypeTraits(t);
  return tr ? tr->block_size : 1;
}

}  // namespace

std::string_view IsaName(Isa isa) {
  static constexpr auto kIsaNames = EnumNames<Isa::kAmx>("scalar", "avx2", "avx512", "amx");
  return EnumName(kIsaNames, isa, "scalar");
}

Isa DetectIsa() {
  static const Isa kDetected = DetectIsaUncached();
  return kDetected;
}

Isa ActiveIsa() { return static_cast<Isa>(ActiveIsaSlot().load(std::memory_order_relaxed)); }

void SetIsa(Isa isa) {
  ActiveIsaSlot().store(static_cast<int>(ClampIsa(isa)), std::memory_order_relaxed);
}

bool Bf16DotAvailable() {
  static const bool kAvailable =
      static_cast<int>(DetectIsa()) >= static_cast<int>(Isa::kAvx512) && DetectAvx512Bf16();
  return kAvailable;
}

bool Bf16DotActive() { return Bf16DotSlot().load(std::memory_order_relaxed); }

void SetBf16Dot(bool on) {
  Bf16DotSlot().store(on && Bf16DotAvailable(), std::memory_order_relaxed);
}

bool IsSupported(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

namespace {

// Q8_0 rows (KV rows, the tile kernels' activations): the AVX2 quantizer where `isa` has it (the
// reference's bytes for finite values), else the reference.
void QuantizeQ8_0Row(Isa isa, const float* src, void* dst, size_t n) {
  if (static_cast<int>(isa) >= static_cast<int>(Isa::kAvx2)) {
    internal::Avx2QuantizeQ8_0(src, static_cast<BlockQ8_0*>(dst), n);
  } else {
    ref::QuantizeQ8_0(src, static_cast<BlockQ8_0*>(dst), n);
  }
}

void QuantizeQ8_0Active(const float* src, BlockQ8_0* dst, size_t n) {
  QuantizeQ8_0Row(ActiveIsa(), src, dst, n);
}

void CopyF32(const float* src, float* dst, size_t n) { std::memcpy(dst, src, n * sizeof(float)); }

// One row format: how its rows are read into f32 and written from f32.
struct RowCodec {
  DType type;
  void (*dequantize)(const void* src, float* dst, size_t n);
  void (*quantize)(const float* src, void* dst, size_t n);
};

template <typename Block, void (*kFn)(const Block*, float*, size_t)>
void DequantizeAs(const void* src, float* dst, size_t n) {
  kFn(static_cast<const Block*>(src), dst, n);
}

template <typename Block, void (*kFn)(const float*, Block*, size_t)>
void QuantizeAs(const float* src, void* dst, size_t n) {
  kFn(src, static_cast<Block*>(dst), n);
}

template <typename Block, void (*kDequantize)(const Block*, float*, size_t),
          void (*kQuantize)(const float*, Block*, size_t)>
constexpr RowCodec Codec(DType t) {
  return {t, DequantizeAs<Block, kDequantize>, QuantizeAs<Block, kQuantize>};
}

constexpr RowCodec kRowCodecs[] = {
    Codec<float, CopyF32, CopyF32>(DType::kF32),
    Codec<uint16_t, ref::DequantizeF16, ref::QuantizeF16>(DType::kF16),
    Codec<uint16_t, ref::DequantizeBF16, ref::QuantizeBF16>(DType::kBF16),
    Codec<BlockQ8_0, ref::DequantizeQ8_0, QuantizeQ8_0Active>(DType::kQ8_0),
    Codec<BlockQ4_0, ref::DequantizeQ4_0, ref::QuantizeQ4_0>(DType::kQ4_0),
    Codec<BlockQ4_K, ref::DequantizeQ4_K, ref::QuantizeQ4_K>(DType::kQ4_K),
    Codec<BlockQ5_K, ref::DequantizeQ5_K, ref::QuantizeQ5_K>(DType::kQ5_K),
    Codec<BlockQ6_K, ref::DequantizeQ6_K, ref::QuantizeQ6_K>(DType::kQ6_K),
    Codec<BlockQ8_K, ref::DequantizeQ8_K, ref::QuantizeQ8_K>(DType::kQ8_K),
};

const RowCodec* FindRowCodec(DType t) {
  for (const RowCodec& c : kRowCodecs)
    if (c.type == t) return &c;
  return nullptr;
}

}  // namespace

void DequantizeRow(DType t, const void* src, float* dst, size_t n) {
  if (n % BlockSize(t) != 0) Fatal("DequantizeRow: n is not a multiple of the block size", t);
  const RowCodec* c = FindRowCodec(t);
  if (c == nullptr) Fatal("DequantizeRow: unsupported type", t);
  c->dequantize(src, dst, n);
}

void QuantizeRow(DType t, const float* src, void* dst, size_t n) {
  if (n % BlockSize(t) != 0) Fatal("QuantizeRow: n is not a multiple of the block size", t);
  const RowCodec* c = FindRowCodec(t);
  if (c == nullptr) Fatal("QuantizeRow: unsupported type", t);
  c->quantize(src, dst, n);
}

namespace internal {

PanelGeom PanelGeometry(DType t, size_t cols) {
  PanelGeom g;
  if (t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K) {
    g.nb = cols / static_cast<size_t>(kQK_K);
    g.qb = t == DType::kQ4_K   ? sizeof(BlockQ4_K)
           : t == DType::kQ5_K ? sizeof(BlockQ5_K)
                               : sizeof(BlockQ6_K);
    g.stride = g.nb * (t == DType::kQ4_K   ? kQ4KRecordBytes
                       : t == DType::kQ5_K ? kQ5KRecordBytes
                                           : kQ6KRecordBytes);
    return g;
  }
  if (t == DType::kQ8_0) g.qb = 32;
  if (t == DType::kQ4_0) g.qb = 16;
  if (g.qb == 0) return g;
  g.nb = cols / 32;
  g.scales_off = g.nb * kPanelRows * g.qb;
  g.stride = (g.scales_off + g.nb * 2 * kPanelRows + 63) / 64 * 64;
  return g;
}

}  // namespace internal

WeightLayout PreferredLayout(DType t) {
  const bool qx0 = t == DType::kQ4_0 || t == DType::kQ8_0;
  const bool half = t == DType::kF16 || t == DType::kBF16;
  const bool kq = t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
  if (!qx0 && !half && !kq) return WeightLayout::kRows;
  const WeightLayout panels = half ? WeightLayout::kPanels4 : WeightLayout::kPanels16;
  const char* env = std::getenv("STRATA_WEIGHT_LAYOUT");
  if (env != nullptr && std::string_view(env) == "rows") return WeightLayout::kRows;
  if (env != nullptr && std::string_view(env) == "panels") return panels;
  if (env != nullptr && *env != '\0') {
    static const bool kWarned = [env] {
      std::fprintf(stderr, "strata: ignoring unknown STRATA_WEIGHT_LAYOUT=%s (use rows|panels)\n",
                   env);
      return true;
    }();
    (void)kWarned;
  }
  // avx2 and up (on AMX CPUs the Q4_0/Q8_0 tiles read the panels in place).
  const Isa isa = ActiveIsa();
  return static_cast<int>(isa) >= static_cast<int>(Isa::kAvx2) ? panels : WeightLayout::kRows;
}

namespace {

// The weight layout a K-quant type gets: its panels (with their overhead) or `rows` as stored.
const char* KqLayout(DType t, const char* rows) {
  if (PreferredLayout(t) != WeightLayout::kPanels16) return rows;
  switch (t) {
    case DType::kQ4_K:
      return "panels16 (repacked at load, unpacked scales: +2.8 %)";
    case DType::kQ5_K:
      return "panels16 (repacked at load, unpacked scales: +2.3 %)";
    default:
      return "panels16 (repacked at load, +0.95 % padding)";
  }
}

}  // namespace

std::vector<KernelVariant> DescribeKernels() {
  const Isa isa = ActiveIsa();
  const bool avx512 = isa == Isa::kAvx512 || isa == Isa::kAmx, avx2 = isa == Isa::kAvx2;
  std::vector<KernelVariant> out;
  for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF16,
                  DType::kBF16, DType::kF32}) {
    KernelVariant v{t, "scalar reference", "scalar reference", "rows (as stored)",
                    "no AVX2+FMA+F16C: the reference kernels"};
    const bool qx0 = t == DType::kQ4_0 || t == DType::kQ8_0;
    const bool kq = t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
    if (qx0 && avx512 && PreferredLayout(t) == WeightLayout::kPanels16) {
      v = {t, "avx512-vnni GEMV on 16-row interleaved panels (no shuffles)",
           isa == Isa::kAmx ? "amx-int8 tdpbssd: a panel block is a B tile (made signed once "
                              "per panel), activations read in place (>= 4 tokens)"
                            : "avx512-vnni GEMM, 4 rows x 16 tokens",
           "panels16 (repacked at load)",
           "the interleaved panel feeds vpdpbusd without cross-lane moves (slow on Zen 4, "
           "whose 512-bit ops run as two halves); on AMX a panel block is also a B tile"};
    } else if (qx0 && avx512) {
      v = {t, "avx512-vnni GEMV, 16 rows + transposing reduction",
           isa == Isa::kAmx ? "amx-int8 tdpbssd (>= 4 tokens)"
                            : "avx512-vnni GEMM, 4 rows x 16 tokens",
           "rows (as stored)", "STRATA_WEIGHT_LAYOUT=rows"};
    } else if (qx0 && avx2) {
      const bool p16 = PreferredLayout(t) == WeightLayout::kPanels16;
      v = {t, "avx2 GEMV on 16-row interleaved panels (vpmaddubsw, no shuffles)",
           "the same GEMV, 2 tokens per weight read",
           p16 ? "panels16 (repacked at load)" : "rows (as stored; packed a panel at a time)",
           "AVX2: 8 rows per 256-bit half-panel, the avx512 level's exact per-block integers "
           "(its bits), no cross-lane moves"};
    } else if (kq && avx512) {
      v = {t, "avx512-vnni GEMV on 16-row K-quant panels (no shuffles)",
           "avx512-vnni GEMM, 4 rows x 16 tokens (rows unpacked to int8 per panel)",
           KqLayout(t, "rows (as stored)"),
           "AVX-512 VNNI: an exact integer per super-block (vpdpbusd + vpmulld by the scales) "
           "folded once; lanes are rows in the GEMV and tokens in the GEMM, the same bits"};
    } else if (kq && avx2) {
      v = {t, "avx2 GEMV on 16-row K-quant panels (vpmaddubsw, no shuffles)",
           "the same GEMV, 2 tokens per weight read",
           KqLayout(t, "rows (as stored; packed a panel at a time)"),
           "AVX2: 8 rows per 256-bit half-panel, int16 sums widened by vpmaddwd with the rows' "
           "scales; the avx512 level's exact integers and fold (its bits)"};
    } else if (t == DType::kBF16 && avx512 && Bf16DotActive()) {
      const bool p4 = PreferredLayout(t) == WeightLayout::kPanels4;
      v = {t, "avx512-bf16 vdpbf16ps, 4 rows x 1 token, 2 rows per vector",
           p4 ? "avx512-bf16 vdpbf16ps, 4 rows x 6 tokens (24 accumulators)"
              : "avx512-bf16 vdpbf16ps, 1 row x 4 tokens (8 accumulators)",
           p4 ? "panels4 (repacked at load)" : "rows (as stored)",
           "AVX512_BF16 (variant bf16-dot; STRATA_KERNEL_VARIANT=bf16-fma for f32 FMAs): "
           "32 products per instruction on bf16-exact activations, no weight widening"};
    } else if (avx512 && PreferredLayout(t) == WeightLayout::kPanels4) {
      v = {t, "512-bit FMA, 4 rows x 1 token from one panel stream",
           "512-bit FMA, 4 rows x 6 tokens (24 accumulators)", "panels4 (repacked at load)",
           "one accumulator per output: 4-row tiles need 4 rows in one sequential stream"};
    } else if (avx2 && PreferredLayout(t) == WeightLayout::kPanels4) {
      v = {t, "256-bit FMA, 4 rows x 1 token from one panel stream (4 FMA chains)",
           "256-bit FMA, 2 rows x 6 tokens per pass (12 accumulators)",
           "panels4 (repacked at load)",
           "one 8-lane accumulator per output and 16-bit activations (the row tile's bits): 16 "
           "registers hold 12 outputs, and 4 rows share each activation load"};
    } else if (avx512 || avx2) {
      const std::string w = avx512 ? "512-bit" : "256-bit";
      v = {t, w + " FMA tile", w + " FMA tile, 4 tokens per weight read", "rows (as stored)",
           t == DType::kF32 ? "f32 FMA" : "weights widened to f32 in registers, f32 FMA"};
    }
    if ((qx0 || kq) && avx512 && PreferredLayout(t) == WeightLayout::kPanels16) {
      const DecodeChoice c = ChosenDecodeVariant(t);
      if (c.variant == DecodeVariant::kAvx2)
        v.decode = kq ? "avx2 GEMV on 16-row K-quant panels (vpmaddubsw + vpmaddwd, the same bits)"
                      : "avx2 GEMV on 16-row interleaved panels (vpmaddubsw, the same bits)";
      v.decode +=
          " [decode variant " + std::string(DecodeVariantName(c.variant)) + ": " + c.why + "]";
    }
    out.push_back(std::move(v));
  }
  return out;
}

size_t PanelLayoutBytes(DType t, size_t rows, size_t cols) {
  if (t == DType::kF16 || t == DType::kBF16) {
    constexpr size_t kR = internal::kFloatPanelRows;
    return (rows + kR - 1) / kR * kR * cols * 2;
  }
  const internal::PanelGeom g = internal::PanelGeometry(t, cols);
  return g.qb == 0 ? 0 : (rows + internal::kPanelRows - 1) / internal::kPanelRows * g.stride;
}

namespace {

// The byte a kPanels16 panel stores for quant byte k of a row's block: Q8_0 values as q + 128
// (the u8 operand of vpdpbusd), Q4_0 nibble pairs as they are.
uint32_t PanelFlip(DType t) { return t == DType::kQ8_0 ? 0x80808080u : 0u; }

}  // namespace

namespace {

// Where value k of row r lies in a kPanels4 matrix (in values from the start of the data).
size_t Panel4Index(size_t cols, size_t r, size_t k) {
  constexpr size_t kR = internal::kFloatPanelRows;
  const size_t base = r / kR * kR * cols, i = r % kR, chunks = cols / 16;
  if (k < chunks * 16) return base + ((k / 16) * kR + i) * 16 + k % 16;
  return base + chunks * 16 * kR + i * (cols % 16) + (k - chunks * 16);
}

// fn(k, panel index of value k, run) over the runs of row r that are contiguous in both layouts:
// its 16-value chunks, then its tail.
template <typename Fn>
void ForPanel4Runs(size_t cols, size_t r, Fn&& fn) {
  for (size_t k = 0; k < cols;) {
    const size_t run = k < cols / 16 * 16 ? 16 : cols - k;
    fn(k, Panel4Index(cols, r, k), run);
    k += run;
  }
}

}  // namespace

namespace {

bool IsKPanelType(DType t) { return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K; }

// Row i of a Q4_K (Q5_K) panel record <-> the row's GGUF super-block (layout:
// kernels_internal.h).
template <typename Block>
void PutQ4KRow(const Block& blk, size_t i, unsigned char* rec) {
  if constexpr (std::is_same_v<Block, BlockQ5_K>) {
    for (size_t k = 0; k < 8; ++k)
      std::memcpy(rec + internal::kQ5KQhOff + 64 * k + 4 * i, blk.qh + 4 * k, 4);
  }
  for (size_t v = 0; v < 32; ++v) std::memcpy(rec + 64 * v + 4 * i, blk.qs + 4 * v, 4);
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, mn;
    ref::UnpackScaleMinK4(s, blk.scales, &sc, &mn);
    rec[internal::kQ4KScalesOff + 16 * static_cast<size_t>(s) + i] = sc;
    rec[internal::kQ4KMinsOff + 16 * static_cast<size_t>(s) + i] = mn;
  }
  std::memcpy(rec + internal::kQ4KDOff + 2 * i, &blk.d, 2);
  std::memcpy(rec + internal::kQ4KDminOff + 2 * i, &blk.dmin, 2);
}

void PutQ6KRow(const BlockQ6_K& blk, size_t i, unsigned char* rec) {
  for (size_t v = 0; v < 32; ++v) std::memcpy(rec + 64 * v + 4 * i, blk.ql + 4 * v, 4);
  for (size_t v = 0; v < 16; ++v)
    std::memcpy(rec + internal::kQ6KQhOff + 64 * v + 4 * i, blk.qh + 4 * v, 4);
  for (size_t g = 0; g < 16; ++g)
    std::memcpy(rec + internal::kQ6KScalesOff + 16 * g + i, blk.scales + g, 1);
  std::memcpy(rec + internal::kQ6KDOff + 2 * i, &blk.d, 2);
}

void GetQ6KRow(const unsigned char* rec, size_t i, BlockQ6_K* blk) {
  for (size_t v = 0; v < 32; ++v) std::memcpy(blk->ql + 4 * v, rec + 64 * v + 4 * i, 4);
  for (size_t v = 0; v < 16; ++v)
    std::memcpy(blk->qh + 4 * v, rec + internal::kQ6KQhOff + 64 * v + 4 * i, 4);
  for (size_t g = 0; g < 16; ++g)
    std::memcpy(blk->scales + g, rec + internal::kQ6KScalesOff + 16 * g + i, 1);
  std::memcpy(&blk->d, rec + internal::kQ6KDOff + 2 * i, 2);
}

template <typename Block>
void GetQ4KRow(const unsigned char* rec, size_t i, Block* blk) {
  if constexpr (std::is_same_v<Block, BlockQ5_K>) {
    for (size_t k = 0; k < 8; ++k)
      std::memcpy(blk->qh + 4 * k, rec + internal::kQ5KQhOff + 64 * k + 4 * i, 4);
  }
  for (size_t v = 0; v < 32; ++v) std::memcpy(blk->qs + 4 * v, rec + 64 * v + 4 * i, 4);
  uint8_t sc[8], mn[8];
  for (size_t s = 0; s < 8; ++s) {
    sc[s] = rec[internal::kQ4KScalesOff + 16 * s + i];
    mn[s] = rec[internal::kQ4KMinsOff + 16 * s + i];
  }
  ref::PackScaleMinK4(sc, mn, blk->scales);
  std::memcpy(&blk->d, rec + internal::kQ4KDOff + 2 * i, 2);
  std::memcpy(&blk->dmin, rec + internal::kQ4KDminOff + 2 * i, 2);
}

}  // namespace

namespace internal {

namespace {

// Q4_0 / Q8_0 rows [p0, p0 + 16) into one zeroed kPanels16 panel (layout: kernels.h).
void PackQx0Panel(const WeightMatrix& w, size_t p0, const PanelGeom& g, size_t row_bytes,
                  unsigned char* panel) {
  const size_t block_bytes = 2 + g.qb;
  const uint32_t flip = PanelFlip(w.type);
  const auto* src = static_cast<const unsigned char*>(w.data);
  for (size_t i = 0; i < kPanelRows && p0 + i < w.rows; ++i) {
    const unsigned char* row = src + (p0 + i) * row_bytes;
    for (size_t b = 0; b < g.nb; ++b) {
      const unsigned char* blk = row + b * block_bytes;
      unsigned char* q = panel + b * kPanelRows * g.qb + 4 * i;
      for (size_t j = 0; j < g.qb / 4; ++j) {
        uint32_t v;
        std::memcpy(&v, blk + 2 + 4 * j, 4);
        v ^= flip;
        std::memcpy(q + 64 * j, &v, 4);
      }
      std::memcpy(panel + g.scales_off + 32 * b + 2 * i, blk, 2);
    }
  }
}

}  // namespace

void PackPanel16(const WeightMatrix& w, size_t p0, void* dst) {
  const PanelGeom g = PanelGeometry(w.type, w.cols);
  const size_t row_bytes = w.row_bytes != 0 ? w.row_bytes : *RowBytes(w.type, w.cols);
  auto* panel = static_cast<unsigned char*>(dst);
  std::memset(panel, 0, g.stride);
  if (!IsKPanelType(w.type)) {
    PackQx0Panel(w, p0, g, row_bytes, panel);
    return;
  }
  for (size_t i = 0; i < kPanelRows && p0 + i < w.rows; ++i) {
    const char* row = static_cast<const char*>(w.data) + (p0 + i) * row_bytes;
    for (size_t b = 0; b < g.nb; ++b) {
      if (w.type == DType::kQ4_K) {
        PutQ4KRow(reinterpret_cast<const BlockQ4_K*>(row)[b], i, panel + b * kQ4KRecordBytes);
      } else if (w.type == DType::kQ5_K) {
        PutQ4KRow(reinterpret_cast<const BlockQ5_K*>(row)[b], i, panel + b * kQ5KRecordBytes);
      } else {
        PutQ6KRow(reinterpret_cast<const BlockQ6_K*>(row)[b], i, panel + b * kQ6KRecordBytes);
      }
    }
  }
}

}  // namespace internal

void PackPanels(const WeightMatrix& w, void* dst) {
  if ((w.type == DType::kF16 || w.type == DType::kBF16) && w.layout == WeightLayout::kRows) {
    std::memset(dst, 0, PanelLayoutBytes(w.type, w.rows, w.cols));
    const auto* src = static_cast<const uint16_t*>(w.data);
    auto* out = static_cast<uint16_t*>(dst);
    for (size_t r = 0; r < w.rows; ++r)
      ForPanel4Runs(w.cols, r, [&](size_t k, size_t at, size_t run) {
        std::memcpy(out + at, src + r * w.cols + k, run * 2);
      });
    return;
  }
  const internal::PanelGeom g = internal::PanelGeometry(w.type, w.cols);
  if (g.qb == 0 || w.layout != WeightLayout::kRows || w.cols % BlockSize(w.type) != 0)
    Fatal("PackPanels: needs a Q4_0/Q8_0/K-quant matrix in row layout", w.type);
  auto* out = static_cast<unsigned char*>(dst);
  for (size_t p0 = 0; p0 < w.rows; p0 += internal::kPanelRows)
    internal::PackPanel16(w, p0, out + p0 / internal::kPanelRows * g.stride);
}

void ReadRow(const WeightMatrix& w, size_t r, void* dst) {
  const size_t row_bytes = w.row_bytes != 0 ? w.row_bytes : *RowBytes(w.type, w.cols);
  if (w.layout == WeightLayout::kRows) {
    std::memcpy(dst, static_cast<const char*>(w.data) + r * row_bytes, row_bytes);
    return;
  }
  if (w.layout == WeightLayout::kPanels4) {
    const auto* data = static_cast<const uint16_t*>(w.data);
    auto* out = static_cast<uint16_t*>(dst);
    ForPanel4Runs(w.cols, r, [&](size_t k, size_t at, size_t run) {
      std::memcpy(out + k, data + at, run * 2);
    });
    return;
  }
  const internal::PanelGeom g = internal::PanelGeometry(w.type, w.cols);
  if (IsKPanelType(w.type)) {
    const auto* panel =
        static_cast<const unsigned char*>(w.data) + (r / internal::kPanelRows) * g.stride;
    const size_t i = r % internal::kPanelRows;
    for (size_t b = 0; b < g.nb; ++b) {
      if (w.type == DType::kQ4_K) {
        GetQ4KRow(panel + b * internal::kQ4KRecordBytes, i, static_cast<BlockQ4_K*>(dst) + b);
      } else if (w.type == DType::kQ5_K) {
        GetQ4KRow(panel + b * internal::kQ5KRecordBytes, i, static_cast<BlockQ5_K*>(dst) + b);
      } else {
        GetQ6KRow(panel + b * internal::kQ6KRecordBytes, i, static_cast<BlockQ6_K*>(dst) + b);
      }
    }
    return;
  }
  const size_t block_bytes = 2 + g.qb;
  const uint32_t flip = PanelFlip(w.type);
  const auto* panel =
      static_cast<const unsigned char*>(w.data) + (r / internal::kPanelRows) * g.stride;
  const size_t i = r % internal::kPanelRows;
  auto* out = static_cast<unsigned char*>(dst);
  for (size_t b = 0; b < g.nb; ++b) {
    unsigned char* blk = out + b * block_bytes;
    std::memcpy(blk, panel + g.scales_off + 32 * b + 2 * i, 2);
    const unsigned char* q = panel + b * internal::kPanelRows * g.qb + 4 * i;
    for (size_t j = 0; j < g.qb / 4; ++j) {
      uint32_t v;
      std::memcpy(&v, q + 64 * j, 4);
      v ^= flip;
      std::memcpy(blk + 2 + 4 * j, &v, 4);
    }
  }
}

namespace {

// At the avx512 level: these jobs are a decode (the GEMV's token counts) of one integer type on
// kPanels16 whose decode variant is the avx2 GEMV (kernels.h: DecodeVariant; the same bits).
bool DecodeOnAvx2Variant(std::span<const internal::QxJob> jobs, size_t n_tokens, bool amx) {
  if (jobs.empty()) return false;
  const DType t = jobs[0].w->type;
  const bool qx0 = t == DType::kQ4_0 || t == DType::kQ8_0;
  if (n_tokens >= (qx0 && amx ? internal::kAmxMinTokens : internal::kGemmMinTokens)) return false;
  for (const internal::QxJob& j : jobs)
    if (j.w->type != t || j.w->layout != WeightLayout::kPanels16 || j.w->cols != jobs[0].w->cols)
      return false;
  return internal::DecodeOnAvx2(t);
}

// The whole-MatMul kernels of the SIMD levels (kernels_internal.h: Avx512MatMul, Avx2MatMulQx0):
// false when the level has none for these jobs (the caller then uses the tile kernels).
bool WholeMatMul(Isa isa, std::span<const internal::QxJob> jobs, const float* x, size_t x_stride,
                 size_t n_tokens, ThreadPool* pool) {
  if (static_cast<int>(isa) >= static_cast<int>(Isa::kAvx512)) {
    if (DecodeOnAvx2Variant(jobs, n_tokens, isa == Isa::kAmx)) {
      internal::CountAvx2Decode();
      return internal::Avx2MatMulQx0(jobs, x, x_stride, n_tokens, pool) ||
             internal::Avx2MatMulKQuant(jobs, x, x_stride, n_tokens, pool);
    }
    return internal::Avx512MatMul(jobs, x, x_stride, n_tokens, pool, isa == Isa::kAmx);
  }
  if (isa == Isa::kAvx2)
    return internal::Avx2MatMulQx0(jobs, x, x_stride, n_tokens, pool) ||
           internal::Avx2MatMulKQuant(jobs, x, x_stride, n_tokens, pool);
  return false;
}

// Units [first, end) stepping `step` (a row, or a panel's first row), in blocks of `block` rows:
// every token tile (at most `tile` tokens) passes over a block's units before the next
// block, so the block's weights (~256 KiB) stay in L2 and a tile's activations stay in L1 across
// the block. fn(unit, first_token, tokens).
template <typename Fn>
void ForBlockedTiles(size_t first, size_t end, size_t block, size_t step, size_t n_tokens,
                     size_t tile, Fn&& fn) {
  for (size_t b0 = first; b0 < end; b0 += block) {
    const size_t b1 = std::min(end, b0 + block);
    for (size_t t = 0; t < n_tokens; t += tile) {
      const int nt = static_cast<int>(std::min(tile, n_tokens - t));
      for (size_t u = b0; u < b1; u += step) fn(u, t, nt);
    }
  }
}

}  // namespace

void MatMul(const WeightMatrix& w, const float* x, size_t n_tokens, float* y, ThreadPool* pool,
            size_t x_stride, size_t y_stride) {
  if (w.rows == 0 || n_tokens == 0) return;
  if (!IsSupported(w.type)) Fatal("MatMul: unsupported weight type", w.type);
  if (w.cols % BlockSize(w.type) != 0)
    Fatal("MatMul: cols is not a multiple of the block size", w.type);
  if (x_stride == 0) x_stride = w.cols;
  if (y_stride == 0) y_stride = w.rows;
  const size_t row_bytes = w.row_bytes != 0 ? w.row_bytes : *RowBytes(w.type, w.cols);

  const Isa isa = ActiveIsa();
  if (static_cast<int>(isa) >= static_cast<int>(Isa::kAvx2)) {
    WeightMatrix wm = w;
    wm.row_bytes = row_bytes;
    const internal::QxJob job{&wm, y, y_stride};
    if (WholeMatMul(isa, std::span<const internal::QxJob>(&job, 1), x, x_stride, n_tokens, pool))
      return;
  }

  const DType act = internal::ActivationType(w.type);
  // The bf16-dot variant multiplies bf16 activations (kernels_internal.h: Avx512Bf16DotTile).
  const bool bf16_dot = w.type == DType::kBF16 && Bf16DotActive() &&
                        static_cast<int>(isa) >= static_cast<int>(Isa::kAvx512);
  const DotTileFn dot = SelectDot(w.type, isa, bf16_dot);

  // Activations in the dot-product format (see internal::ActivationType). F32 weights read x in
  // place.
  const char* xq;
  size_t xq_stride;
  // The avx2 and avx512 levels' F16 / bf16-fma kernels read 16-bit activations (Avx2ToF16 /
  // Avx2ToBf16: the values ConvertActivations gives, half the bytes to stream).
  const bool half_x = (w.type == DType::kF16 || w.type == DType::kBF16) && !bf16_dot &&
                      static_cast<int>(isa) >= static_cast<int>(Isa::kAvx2);
  if (w.type == DType::kF32) {
    xq = reinterpret_cast<const char*>(x);
    xq_stride = x_stride * sizeof(float);
  } else {
    xq_stride = ((bf16_dot || half_x ? w.cols * 2 : *RowBytes(act, w.cols)) + 63) / 64 * 64;
    thread_local std::vector<uint64_t> scratch;  // grows once, reused by later calls
    const size_t words = (xq_stride * n_tokens + 7) / 8;
    if (scratch.size() < words) scratch.resize(words);
    char* buf = reinterpret_cast<char*>(scratch.data());
    auto convert = [&](size_t t0, size_t t1, int) {
      for (size_t t = t0; t < t1; ++t) {
        if (bf16_dot) {
          internal::Avx512ToBf16(x + t * x_stride, reinterpret_cast<uint16_t*>(buf + t * xq_stride),
                                 w.cols);
        } else if (half_x) {
          auto* h = reinterpret_cast<uint16_t*>(buf + t * xq_stride);
          if (w.type == DType::kF16) {
            internal::Avx2ToF16(x + t * x_stride, h, w.cols);
          } else {
            internal::Avx2ToBf16(x + t * x_stride, h, w.cols);
          }
        } else if (act == DType::kQ8_0) {
          QuantizeQ8_0Row(isa, x + t * x_stride, buf + t * xq_stride, w.cols);
        } else if (act == DType::kQ8_K && static_cast<int>(isa) >= static_cast<int>(Isa::kAvx2)) {
          internal::Avx2QuantizeQ8_K(x + t * x_stride,
                                     reinterpret_cast<BlockQ8_K*>(buf + t * xq_stride), w.cols);
        } else if (static_cast<int>(isa) >= static_cast<int>(Isa::kAvx2)) {
          internal::Avx2RoundActivations(w.type, x + t * x_stride,
                                         reinterpret_cast<float*>(buf + t * xq_stride), w.cols);
        } else {
          internal::ConvertActivations(w.type, x + t * x_stride, buf + t * xq_stride, w.cols);
        }
      }
    };
    if (pool != nullptr && n_tokens >= 4) {
      pool->ParallelFor(n_tokens, convert);
    } else {
      convert(0, n_tokens, 0);
    }
    xq = buf;
  }

  // Rows per block: keep the block's weight rows in L2 while all token tiles pass over them.
  const size_t rows_per_block = std::max<size_t>(4, (256 * 1024) / std::max<size_t>(row_bytes, 1));
  const char* wdata = static_cast<const char*>(w.data);
  const bool panels = w.layout != WeightLayout::kRows;
  const bool panel4 =
      w.layout == WeightLayout::kPanels4 && static_cast<int>(isa) >= static_cast<int>(Isa::kAvx2);
  const internal::DotPanelFn dot_panel = !panel4             ? nullptr
                                         : isa == Isa::kAvx2 ? internal::Avx2DotPanel4(w.type)
                                         : w.type == DType::kBF16 && Bf16DotActive()
                                             ? internal::Avx512Bf16DotPanel4()
                                             : internal::Avx512DotPanel4(w.type);
  // kPanels4 at avx2 and up: every panel touching [r0, r1) once per token tile (4 rows from one
  // stream), the rows inside the range stored; blocked as the row body (unblocked, every 4-row
  // panel re-read all n_tokens activation rows from L3: BF16 pp512 on Zen 5 ran 28 % slower).
  auto panel_body = [&](size_t r0, size_t r1, int) {
    constexpr size_t kR = internal::kFloatPanelRows;
    const size_t panel_values = kR * w.cols;
    constexpr size_t kTile = internal::kMaxPanelTileTokens;
    float out[kR * kTile];
    const size_t block = (rows_per_block + kR - 1) / kR * kR;
    ForBlockedTiles(r0 / kR * kR, r1, block, kR, n_tokens, kTile, [&](size_t p0, size_t t, int nt) {
      const size_t lo = std::max(p0, r0), hi = std::min(p0 + kR, r1);
      const auto* panel = static_cast<const uint16_t*>(w.data) + p0 / kR * panel_values;
      dot_panel(panel, xq + t * xq_stride, xq_stride, nt, w.cols, out);
      for (size_t r = lo; r < hi; ++r)
        for (int k = 0; k < nt; ++k)
          y[(t + static_cast<size_t>(k)) * y_stride + r] =
              out[(r - p0) * kTile + static_cast<size_t>(k)];
    });
  };
  if (dot_panel != nullptr) {
    if (pool != nullptr) {
      pool->ParallelFor(w.rows, panel_body, 16);
    } else {
      panel_body(0, w.rows, 0);
    }
    return;
  }
  auto body = [&](size_t r0, size_t r1, int) {
    float out[internal::kMaxTileTokens];
    // Panel-layout weights below the avx512 level (a forced ISA): each row is read back into the
    // GGUF format first, so the tile kernels and their bits are the same as for kRows.
    thread_local std::vector<uint64_t> row_buf;
    if (panels && row_buf.size() < (row_bytes + 7) / 8) row_buf.resize((row_bytes + 7) / 8);
    ForBlockedTiles(r0, r1, rows_per_block, 1, n_tokens, internal::kMaxTileTokens,
                    [&](size_t r, size_t t, int nt) {
                      const char* wr = wdata + r * row_bytes;
                      if (panels) {
                        ReadRow(w, r, row_buf.data());
                        wr = reinterpret_cast<const char*>(row_buf.data());
                      }
                      dot(wr, xq + t * xq_stride, xq_stride, nt, w.cols, out);
                      for (int k = 0; k < nt; ++k)
                        y[(t + static_cast<size_t>(k)) * y_stride + r] = out[k];
                    });
  };
  if (pool != nullptr) {
    pool->ParallelFor(w.rows, body, 16);
  } else {
    body(0, w.rows, 0);
  }
}

void MatMulShared(std::span<const MatMulOut> outs, const float* x, size_t n_tokens,
                  ThreadPool* pool) {
  constexpr size_t kMaxShared = 8;
  const Isa isa = ActiveIsa();
  if (n_tokens > 0 && outs.size() > 1 && outs.size() <= kMaxShared &&
      static_cast<int>(isa) >= static_cast<int>(Isa::kAvx2)) {
    WeightMatrix ws[kMaxShared];
    internal::QxJob jobs[kMaxShared];
    bool ok = true;
    for (size_t i = 0; i < outs.size() && ok; ++i) {
      const WeightMatrix& w = *outs[i].w;
      ok = IsSupported(w.type) && w.cols % BlockSize(w.type) == 0 && w.rows > 0;
      if (!ok) break;
      ws[i] = w;
      if (ws[i].row_bytes == 0) ws[i].row_bytes = *RowBytes(w.type, w.cols);
      jobs[i] = internal::QxJob{&ws[i], outs[i].y, w.rows};
    }
    if (ok && WholeMatMul(isa, std::span<const internal::QxJob>(jobs, outs.size()), x,
                          outs[0].w->cols, n_tokens, pool))
      return;
  }
  for (const MatMulOut& o : outs) MatMul(*o.w, x, n_tokens, o.y, pool);
}

void RmsNorm(const float* x, const float* weight, float* out, size_t n, float eps) {
  Ops().rms_norm(x, weight, out, n, eps);
}
void SiluMul(const float* gate, const float* up, float* out, size_t n) {
  Ops().silu_mul(gate, up, out, n);
}
void Add(float* x, const float* y, size_t n) { Ops().add(x, y, n); }
float DotF32(const float* a, const float* b, size_t n) { return Ops().dot_f32(a, b, n); }
void Axpy(float a, const float* x, float* y, size_t n) { Ops().axpy(a, x, y, n); }
void Softmax(float* x, size_t n) { Ops().softmax(x, n); }
void AttendF16(const float* q, size_t group, const uint16_t* k, const uint16_t* v, size_t kv_stride,
               size_t len, size_t hd, float scale, float* scores, float* out) {
  if (group == 0) return;  // no query heads: nothing to compute
  Ops().attend_f16(q, group, k, v, kv_stride, len, hd, scale, scores, out);
}

void AttendF16Paged(const float* q, size_t group, const uint16_t* const* k_blocks,
                    const uint16_t* const* v_blocks, unsigned block_shift, size_t row_stride,
                    size_t len, size_t hd, float scale, float* scores, float* out) {
  if (group == 0) return;  // no query heads: nothing to compute
  Ops().attend_f16_paged(q, group, k_blocks, v_blocks, block_shift, row_stride, len, hd, scale,
                         scores, out);
}

void Attend(const float* q, const float* k, const float* v, size_t kv_stride, size_t len, size_t hd,
            float scale, float* scores, float* out) {
  Ops().attend(q, k, v, kv_stride, len, hd, scale, scores, out);
}

}  // namespace strata::kernels
