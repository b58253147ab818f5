// Decode variants of the integer types (kernels.h: DecodeVariant): the CPU family's table, the
// start-up self-timing, STRATA_KERNEL_VARIANT's decode items, and the switch MatMul reads
// (internal::DecodeOnAvx2).
//
// Threads: the decision per type is made once, under a mutex, by the first caller; afterwards
// DecodeOnAvx2 is two relaxed atomic loads. SetDecodeVariant is for tests and benchmarks (as
// SetIsa: not while kernels run).
#include <fmt/format.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

namespace strata::kernels {
namespace {

constexpr std::array<DType, 5> kIntTypes = {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K,
                                            DType::kQ6_K};

int IntTypeIndex(DType t) {
  for (size_t i = 0; i < kIntTypes.size(); ++i)
    if (kIntTypes[i] == t) return static_cast<int>(i);
  return -1;
}

// ---- The CPU's identity (cpuid leaf 0 vendor, leaf 1 family and model) ----
struct CpuFamily {
  bool amd = false, intel = false;
  unsigned family = 0, model = 0;
};

CpuFamily ThisFamily() {
  CpuFamily f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return f;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  f.amd = std::strcmp(vendor, "AuthenticAMD") == 0;
  f.intel = std::strcmp(vendor, "GenuineIntel") == 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const unsigned base_family = (eax >> 8) & 0xf, base_model = (eax >> 4) & 0xf;
  f.family = base_family == 0xf ? base_family + ((eax >> 20) & 0xff) : base_family;
  f.model = base_family == 0x6 || base_family == 0xf ? base_model | (((eax >> 16) & 0xf) << 4)
                                                     : base_model;
#endif
  return f;
}

// ---- The table: per CPU family, the variant measured (or reasoned) to stream fastest ----
// A row applies to every integer type unless `type` is set. First match wins; the last row is the
// default. Add a row when a machine's measurement (docs/perf.md) shows the other variant ahead.
struct TableRow {
  bool amd, intel;  // vendor (both false: any)
  unsigned family, model_lo, model_hi;
  DecodeVariant variant;
  const char* why;
};

constexpr TableRow kTable[] = {
    {true, false, 0x1a, 0x00, 0xff, DecodeVariant::kVnni512,
     "table: AMD Zen 5 (family 26): full-width 512-bit VNNI; vnni512 streamed Q4_0/Q8_0/K-quant "
     "panels at least as fast as avx2 (docs/perf.md)"},
    {true, false, 0x19, 0x00, 0xff, DecodeVariant::kVnni512,
     "table: AMD Zen 4 (family 25): a 512-bit vpdpbusd runs as two 256-bit halves, still one "
     "instruction per 64 bytes against avx2's vpmaddubsw + vpmaddwd per 32; the panels have no "
     "cross-lane moves"},
    {false, true, 0x06, 0x00, 0xff, DecodeVariant::kVnni512,
     "table: Intel with AVX-512 VNNI (Ice Lake, Sapphire/Emerald/Granite Rapids): vnni512 "
     "streamed the panels at 0.90-0.95 of the read bandwidth on Sapphire Rapids (docs/perf.md)"},
    {false, false, 0x00, 0x00, 0xff, DecodeVariant::kVnni512,
     "table: default for AVX-512 VNNI CPUs"},
};

DecodeChoice TableChoice(const CpuFamily& cpu) {
  for (const TableRow& r : kTable) {
    if ((r.amd && !cpu.amd) || (r.intel && !cpu.intel)) continue;
    if ((r.amd || r.intel) &&
        (cpu.family != r.family || cpu.model < r.model_lo || cpu.model > r.model_hi))
      continue;
    return {r.variant, r.why};
  }
  return {DecodeVariant::kVnni512, "table: default"};
}

// ---- Self-timing: both GEMVs on one 64-row matrix in L2, one thread, min of several rounds ----
constexpr size_t kTimingRows = 64, kTimingCols = 2048;
constexpr int kTimingRounds = 5, kTimingCalls = 24;
constexpr double kSwitchMargin = 1.10;  // the other variant must be this much faster

struct TimingMatrix {
  std::unique_ptr<char[]> mem;
  WeightMatrix w;
};

// Random values quantized once and the row repeated (the time does not depend on the values),
// repacked into the panels MatMul reads.
TimingMatrix MakeTimingMatrix(DType t) {
  std::vector<float> row(kTimingCols);
  uint32_t s = 12345;
  for (float& v : row) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int32_t>(s >> 8) % 2001 - 1000) / 1000.0f;
  }
  const size_t row_bytes = *RowBytes(t, kTimingCols);
  std::vector<char> rows(row_bytes * kTimingRows);
  QuantizeRow(t, row.data(), rows.data(), kTimingCols);
  for (size_t r = 1; r < kTimingRows; ++r)
    std::memcpy(rows.data() + r * row_bytes, rows.data(), row_bytes);
  WeightMatrix src{t, rows.data(), kTimingRows, kTimingCols, row_bytes, WeightLayout::kRows};
  TimingMatrix m;
  const size_t bytes = PanelLayoutBytes(t, kTimingRows, kTimingCols);
  m.mem.reset(new char[bytes + 64]);
  char* dst = m.mem.get() + (64 - reinterpret_cast<uintptr_t>(m.mem.get()) % 64) % 64;
  PackPanels(src, dst);
  m.w = src;
  m.w.data = dst;
  m.w.layout = WeightLayout::kPanels16;
  return m;
}

void RunVariant(DecodeVariant v, const internal::QxJob& job, const float* x) {
  const std::span<const internal::QxJob> jobs(&job, 1);
  if (v == DecodeVariant::kAvx2) {
    if (!internal::Avx2MatMulQx0(jobs, x, kTimingCols, 1, nullptr))
      internal::Avx2MatMulKQuant(jobs, x, kTimingCols, 1, nullptr);
  } else {
    internal::Avx512MatMul(jobs, x, kTimingCols, 1, nullptr, false);
  }
}

// Best seconds per call of each variant.
std::array<double, 2> TimeVariants(DType t) {
  TimingMatrix m = MakeTimingMatrix(t);
  std::vector<float> x(kTimingCols), y(kTimingRows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  const internal::QxJob job{&m.w, y.data(), kTimingRows};
  std::array<double, 2> best = {1e30, 1e30};
  for (int v = 0; v < 2; ++v) RunVariant(static_cast<DecodeVariant>(v), job, x.data());  // warm
  for (int round = 0; round < kTimingRounds; ++round) {
    for (int v = 0; v < 2; ++v) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int c = 0; c < kTimingCalls; ++c)
        RunVariant(static_cast<DecodeVariant>(v), job, x.data());
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      best[v] = std::min(best[v], dt.count() / kTimingCalls);
    }
  }
  return best;
}

// STRATA_KERNEL_SELF_TIMING: unset or 1 on, 0 off; anything else is reported and read as on.
bool SelfTimingEnabled() {
  static const bool kOn = [] {
    const char* env = std::getenv("STRATA_KERNEL_SELF_TIMING");
    if (env == nullptr || *env == '\0' || std::string_view(env) == "1") return true;
    if (std::string_view(env) == "0") return false;
    std::fprintf(stderr, "strata: ignoring STRATA_KERNEL_SELF_TIMING=%s (use 0 or 1)\n", env);
    return true;
  }();
  return kOn;
}

// ---- STRATA_KERNEL_VARIANT's decode items ----
std::optional<DecodeVariant> VariantByName(std::string_view name) {
  if (name == "vnni512") return DecodeVariant::kVnni512;
  if (name == "avx2") return DecodeVariant::kAvx2;
  return std::nullopt;
}

// One of the five integer types by its GGUF name, any case (tensor/dtype.h: ParseDType).
std::optional<DType> IntTypeByName(std::string_view name) {
  const std::optional<DType> t = ParseDType(name);
  return t && IntTypeIndex(*t) >= 0 ? t : std::nullopt;
}

// The decision per type: forced (SetDecodeVariant; -1 none), decided (-1 not yet), and why.
struct Decisions {
  Mutex mu;
  std::array<std::atomic<int>, kIntTypes.size()> forced{};
  std::array<std::atomic<int>, kIntTypes.size()> decided{};
  std::array<std::string, kIntTypes.size()> why GUARDED_BY(mu);
  Decisions() {
    for (auto& f : forced) f.store(-1, std::memory_order_relaxed);
    for (auto& d : decided) d.store(-1, std::memory_order_relaxed);
  }
};

Decisions& State() {
  static Decisions d;
  return d;
}

// The env's overrides, parsed once (a bad item is reported and ignored).
const std::vector<DecodeOverride>& EnvOverrides() {
  static const std::vector<DecodeOverride> kOverrides = [] {
    const char* env = std::getenv("STRATA_KERNEL_VARIANT");
    if (env == nullptr) return std::vector<DecodeOverride>{};
    Result<std::vector<DecodeOverride>> r = ParseDecodeOverrides(env);
    if (r.ok()) return *r;
    std::fprintf(stderr, "strata: ignoring STRATA_KERNEL_VARIANT's decode items: %s\n",
                 r.status().message().c_str());
    return std::vector<DecodeOverride>{};
  }();
  return kOverrides;
}

DecodeChoice Decide(DType t) {
  if (static_cast<int>(DetectIsa()) < static_cast<int>(Isa::kAvx512))
    return {DecodeVariant::kAvx2, "no AVX-512 VNNI on this CPU: the avx2 level's GEMV"};
  for (const DecodeOverride& o : EnvOverrides())
    if (o.type == t)
      return {o.variant, fmt::format("STRATA_KERNEL_VARIANT {}={}", DTypeName(t),
                                     DecodeVariantName(o.variant))};
  DecodeChoice c = TableDecodeVariant(t);
  if (!SelfTimingEnabled()) return {c.variant, c.why + "; self-timing off"};
  const std::array<double, 2> s = TimeVariants(t);
  const int chosen = static_cast<int>(c.variant), other = 1 - chosen;
  const std::string figures = fmt::format(
      "self-timing: vnni512 {:.2f} us, avx2 {:.2f} us per "
      "{}x{} GEMV in L2",
      s[0] * 1e6, s[1] * 1e6, kTimingRows, kTimingCols);
  if (s[other] * kSwitchMargin < s[chosen])
    return {static_cast<DecodeVariant>(other), fmt::format("{} ({} was the table's: {})", figures,
                                                           DecodeVariantName(c.variant), c.why)};
  return {c.variant, fmt::format("{}; {}", c.why, figures)};
}

// Decides t (index i) if nobody has; returns the decided variant.
int EnsureDecided(Decisions& d, size_t i) {
  int v = d.decided[i].load(std::memory_order_acquire);
  if (v >= 0) return v;
  MutexLock lock(&d.mu);
  v = d.decided[i].load(std::memory_order_relaxed);
  if (v >= 0) return v;
  DecodeChoice c = Decide(kIntTypes[i]);
  d.why[i] = std::move(c.why);
  v = static_cast<int>(c.variant);
  d.decided[i].store(v, std::memory_order_release);
  return v;
}

}  // namespace

std::string_view DecodeVariantName(DecodeVariant v) {
  return v == DecodeVariant::kAvx2 ? "avx2" : "vnni512";
}

Result<std::vector<DecodeOverride>> ParseDecodeOverrides(std::string_view value) {
  std::vector<DecodeOverride> out;
  while (!value.empty()) {
    const size_t comma = value.find(',');
    const std::string_view item = value.substr(0, comma);
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;  // not a decode item (bf16-dot, bf16-fma)
    const std::string_view type = item.substr(0, eq), name = item.substr(eq + 1);
    const std::optional<DecodeVariant> v = VariantByName(name);
    if (!v)
      return Status::InvalidArgument(
          fmt::format("decode variant '{}' in '{}' is not one of vnni512, avx2", name, item));
    if (type == "int") {
      for (DType t : kIntTypes) out.push_back({t, *v});
      continue;
    }
    const std::optional<DType> t = IntTypeByName(type);
    if (!t)
      return Status::InvalidArgument(
          fmt::format("'{}' in '{}' is not one of q4_0, q8_0, q4_K, q5_K, q6_K, int", type, item));
    out.push_back({*t, *v});
  }
  // A later item wins: keep the last per type.
  std::vector<DecodeOverride> last;
  for (auto it = out.rbegin(); it != out.rend(); ++it)
    if (std::none_of(last.begin(), last.end(), [&](const auto& o) { return o.type == it->type; }))
      last.push_back(*it);
  return last;
}

DecodeChoice TableDecodeVariant(DType t) {
  if (IntTypeIndex(t) < 0) return {DecodeVariant::kVnni512, "n/a"};
  return TableChoice(ThisFamily());
}

DecodeChoice ChosenDecodeVariant(DType t) {
  const int i = IntTypeIndex(t);
  if (i < 0) return {DecodeVariant::kVnni512, "n/a"};
  Decisions& d = State();
  const size_t idx = static_cast<size_t>(i);
  const int forced = d.forced[idx].load(std::memory_order_relaxed);
  if (forced >= 0) return {static_cast<DecodeVariant>(forced), "forced (SetDecodeVariant)"};
  const int v = EnsureDecided(d, idx);
  MutexLock lock(&d.mu);
  return {static_cast<DecodeVariant>(v), d.why[idx]};
}

void SetDecodeVariant(DType t, std::optional<DecodeVariant> v) {
  const int i = IntTypeIndex(t);
  if (i < 0) return;
  State().forced[static_cast<size_t>(i)].store(v ? static_cast<int>(*v) : -1,
                                               std::memory_order_relaxed);
}

namespace internal {

std::atomic<uint64_t>& Avx2Decodes() {
  static std::atomic<uint64_t> n{0};
  return n;
}
uint64_t Avx2DecodeCount() { return Avx2Decodes().load(std::memory_order_relaxed); }
void CountAvx2Decode() { Avx2Decodes().fetch_add(1, std::memory_order_relaxed); }

bool DecodeOnAvx2(DType t) {
  const int i = IntTypeIndex(t);
  if (i < 0) return false;
  Decisions& d = State();
  const size_t idx = static_cast<size_t>(i);
  const int forced = d.forced[idx].load(std::memory_order_relaxed);
  if (forced >= 0) return forced == static_cast<int>(DecodeVariant::kAvx2);
  return EnsureDecided(d, idx) == static_cast<int>(DecodeVariant::kAvx2);
}

}  // namespace internal
}  // namespace strata::kernels
