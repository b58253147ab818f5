// The probe loops of control/device_probe.h. Every rate loop keeps several independent
// accumulator chains in registers (so it measures throughput, not latency), runs a fixed amount
// of work per thread, and returns a value that depends on every step (so nothing is optimised
// away). Time is the wall time from releasing all threads to the last one finishing.
#include "control/device_probe.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <thread>

#include "base/page_memory.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata::control::probe {
namespace {

using Clock = std::chrono::steady_clock;

bool Has(const std::vector<std::string>& f, std::string_view name) {
  return std::find(f.begin(), f.end(), name) != f.end();
}

std::atomic<uint64_t> g_sink{0};  // results land here so the loops cannot be elided

// Runs `work(thread_index)` on `threads` threads released together; returns the wall seconds.
double TimeParallel(int threads, const std::function<uint64_t(int)>& work) {
  std::atomic<bool> go{false};
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      g_sink.fetch_add(work(t), std::memory_order_relaxed);
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  const auto start = Clock::now();
  go.store(true, std::memory_order_release);
  for (std::thread& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- the loops, per ISA level (each returns a value depending on all its work) ----

uint64_t ReadScalar(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) a += p[i], b += p[i + 1], c += p[i + 2], d += p[i + 3];
  return a + b + c + d;
}

uint64_t FmaScalar(int64_t iters) {
  float a[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  const float m = 0.9999999F, c = 1e-7F;
  for (int64_t i = 0; i < iters; ++i) {
    for (float& x : a) x = x * m + c;
  }
  float s = 0;
  for (float x : a) s += x;
  return static_cast<uint64_t>(s);
}

#if defined(__x86_64__)

__attribute__((target("avx2"))) uint64_t ReadAvx2(const uint64_t* p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  const auto* v = reinterpret_cast<const __m256i*>(p);
  for (size_t i = 0; i + 4 <= n / 4; i += 4) {
    a = _mm256_add_epi64(a, _mm256_load_si256(v + i));
    b = _mm256_add_epi64(b, _mm256_load_si256(v + i + 1));
    c = _mm256_add_epi64(c, _mm256_load_si256(v + i + 2));
    d = _mm256_add_epi64(d, _mm256_load_si256(v + i + 3));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
  return static_cast<uint64_t>(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 3));
}

// `N` independent chains `x = STEP` from `x = INIT`, `iters` steps each (enough chains to cover
// the instruction's latency at its issue rate), then summed with ADD into `SUM`. A macro, not a
// template: the intrinsics need the target attribute of the function they are written in.
#define STRATA_CHAINS(VEC, N, INIT, STEP, ADD, SUM)           \
  VEC acc[N];                                                 \
  for (auto& x : acc) x = (INIT);                             \
  for (int64_t i = 0; i < iters; ++i) {                       \
    for (auto& x : acc) x = (STEP);                           \
  }                                                           \
  for (int k = 1; k < (N); ++k) acc[0] = ADD(acc[0], acc[k]); \
  const VEC SUM = acc[0]

// The first lane of vector `v` read as a `Lane` (memcpy: no intrinsic, so any vector type works).
template <typename Lane, typename Vec>
Lane FirstLane(const Vec& v) {
  Lane lane;
  std::memcpy(&lane, &v, sizeof(lane));
  return lane;
}

// 12 chains of a = a * m + c.
__attribute__((target("avx512f"))) uint64_t FmaAvx512(int64_t iters) {
  const __m512 m = _mm512_set1_ps(0.9999999F), c = _mm512_set1_ps(1e-7F);
  STRATA_CHAINS(__m512, 12, _mm512_set1_ps(1.0F), _mm512_fmadd_ps(x, m, c), _mm512_add_ps, s);
  return static_cast<uint64_t>(FirstLane<float>(s));
}
__attribute__((target("avx2,fma"))) uint64_t FmaAvx2(int64_t iters) {
  const __m256 m = _mm256_set1_ps(0.9999999F), c = _mm256_set1_ps(1e-7F);
  STRATA_CHAINS(__m256, 12, _mm256_set1_ps(1.0F), _mm256_fmadd_ps(x, m, c), _mm256_add_ps, s);
  return static_cast<uint64_t>(FirstLane<float>(s));
}

// int8 dot products into int32: 16 chains, as the bf16 loop below (two issued a cycle at a latency
// of several cycles need more than 8 chains to reach the peak).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) uint64_t Int8Vnni512(int64_t iters) {
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  STRATA_CHAINS(__m512i, 16, _mm512_setzero_si512(), _mm512_dpbusd_epi32(x, a, b), _mm512_add_epi32,
                s);
  return static_cast<uint64_t>(FirstLane<int32_t>(s));
}
__attribute__((target("avx2,avxvnni"))) uint64_t Int8AvxVnni(int64_t iters) {
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  STRATA_CHAINS(__m256i, 8, _mm256_setzero_si256(), _mm256_dpbusd_avx_epi32(x, a, b),
                _mm256_add_epi32, s);
  return static_cast<uint64_t>(FirstLane<int32_t>(s));
}
// maddubs (u8 x s8 -> pairs summed in int16), madd with ones (-> int32), add: 32 MACs per step.
__attribute__((target("avx2"))) uint64_t Int8Avx2(int64_t iters) {
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  STRATA_CHAINS(__m256i, 8, _mm256_setzero_si256(),
                _mm256_add_epi32(x, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones)),
                _mm256_add_epi32, s);
  return static_cast<uint64_t>(FirstLane<int32_t>(s));
}

// bf16 pairs dotted into fp32: 16 chains of 32 multiply-adds per instruction (8 chains read
// 0.28 TFLOPS on a Zen 5 core whose vdpbf16ps peak is 0.43: two a cycle at latency 6).
__attribute__((target("avx512f,avx512bf16"))) uint64_t Bf16Native512(int64_t iters) {
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // (1.0, 1.0)
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x33d633d6);  // (~1e-7, ~1e-7)
  STRATA_CHAINS(__m512, 16, _mm512_setzero_ps(), _mm512_dpbf16_ps(x, a, b), _mm512_add_ps, s);
  return static_cast<uint64_t>(FirstLane<float>(s) * 1e6F);
}
#undef STRATA_CHAINS
// bf16 through conversion: both halves of each 32-bit lane widened to fp32 (shift / mask),
// then two FMAs; the lane toggles each step so the conversion stays in the loop.
__attribute__((target("avx2,fma"))) uint64_t Bf16Converted(int64_t iters) {
  __m256i v[4] = {_mm256_set1_epi32(0x3f803f80), _mm256_set1_epi32(0x3f813f81),
                  _mm256_set1_epi32(0x3f823f82), _mm256_set1_epi32(0x3f833f83)};
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000U));
  const __m256i flip = _mm256_set1_epi32(0x00010001);
  const __m256 w = _mm256_set1_ps(1e-7F);
  __m256 acc[8];
  for (__m256& x : acc) x = _mm256_setzero_ps();
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_xor_si256(v[k], flip);
      const __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(v[k], 16));
      const __m256 hi = _mm256_castsi256_ps(_mm256_and_si256(v[k], hi_mask));
      acc[2 * k] = _mm256_fmadd_ps(lo, w, acc[2 * k]);
      acc[2 * k + 1] = _mm256_fmadd_ps(hi, w, acc[2 * k + 1]);
    }
  }
  __m256 s = acc[0];
  for (int k = 1; k < 8; ++k) s = _mm256_add_ps(s, acc[k]);
  return static_cast<uint64_t>(FirstLane<float>(s) * 1e6F);
}

#endif  // __x86_64__

// A loop choice: the per-thread iteration count, the operations per iteration, the loop.
struct Loop {
  const char* how;
  int64_t iters;
  double ops_per_iter;
  uint64_t (*run)(int64_t);
};

// A calibration run of 1/20 of the work sizes the measured run to about kTargetSeconds (never
// more than l.iters), so a slow or loaded machine still finishes the probe quickly.
constexpr double kTargetSeconds = 0.04;

Rate RunLoop(int threads, const Loop& l, double unit) {
  if (l.run == nullptr) return {};
  const int64_t calib = std::max<int64_t>(1, l.iters / 20);
  const double t0 = TimeParallel(threads, [&](int) { return l.run(calib); });
  int64_t iters = l.iters;
  if (t0 > 0) {
    const double scaled = static_cast<double>(calib) * kTargetSeconds / t0;
    iters = std::clamp<int64_t>(static_cast<int64_t>(scaled), calib, l.iters);
  }
  const double s = TimeParallel(threads, [&](int) { return l.run(iters); });
  if (s <= 0) return {0, l.how};
  return {l.ops_per_iter * static_cast<double>(iters) * threads / s / unit, l.how};
}

// A loop and the features it needs (every one named; "" names none).
struct Candidate {
  std::array<std::string_view, 2> needs;
  Loop loop;
};
constexpr Loop kNoLoop{"none", 0, 0, nullptr};

// Each rate's loops, best first.
#if defined(__x86_64__)
constexpr Candidate kFp32Loops[] = {
    {{"avx512f"}, {"avx512f fma", 5'000'000, 12 * 16 * 2, FmaAvx512}},
    {{"avx2", "fma"}, {"avx2 fma", 5'000'000, 12 * 8 * 2, FmaAvx2}},
};
constexpr Candidate kInt8Loops[] = {
    {{"avx512_vnni", "avx512bw"}, {"avx512_vnni vpdpbusd", 5'000'000, 16 * 64 * 2, Int8Vnni512}},
    {{"avx_vnni"}, {"avx_vnni vpdpbusd", 10'000'000, 8 * 32 * 2, Int8AvxVnni}},
    {{"avx2"}, {"avx2 maddubs", 5'000'000, 8 * 32 * 2, Int8Avx2}},
};
constexpr Candidate kBf16Loops[] = {
    {{"avx512_bf16"}, {"avx512_bf16 vdpbf16ps", 5'000'000, 16 * 32 * 2, Bf16Native512}},
    {{"avx2", "fma"}, {"avx2 fma via conversion", 2'000'000, 8 * 8 * 2, Bf16Converted}},
};
#else
constexpr std::span<const Candidate> kFp32Loops, kInt8Loops, kBf16Loops;
#endif

// The first of `candidates` whose features `f` has (none: `fallback`), on `threads` threads (at
// least one), in tera-operations a second.
Rate RunFirst(int threads, const std::vector<std::string>& f, std::span<const Candidate> candidates,
              const Loop& fallback) {
  const Loop* l = &fallback;
  for (const Candidate& c : candidates) {
    if (std::all_of(c.needs.begin(), c.needs.end(),
                    [&](std::string_view n) { return n.empty() || Has(f, n); })) {
      l = &c.loop;
      break;
    }
  }
  return RunLoop(std::max(1, threads), *l, 1e12);
}

}  // namespace

Rate MemoryBandwidthGbps(int threads, size_t bytes) {
  threads = std::max(1, threads);
  const size_t words = bytes / sizeof(uint64_t) / static_cast<size_t>(threads * 64) *
                       static_cast<size_t>(threads * 64);
  if (words == 0) return {};
  // The memory the repacked weights live in (base/page_memory.h: 2 MiB aligned, advised for
  // transparent huge pages), so that decode's roofline compares like with like; huge pages also
  // keep the first touch to a few hundred faults, not tens of thousands.
  Result<PageMemory> mem = PageMemory::Allocate(words * sizeof(uint64_t));
  if (!mem.ok()) return {};
  auto* base = reinterpret_cast<uint64_t*>(mem->data());
  const size_t per = words / static_cast<size_t>(threads);
  // First touch from the threads that will read (pages land near them).
  TimeParallel(threads, [&](int t) {
    uint64_t* p = base + per * static_cast<size_t>(t);
    for (size_t i = 0; i < per; ++i) p[i] = i;
    return uint64_t{0};
  });
#if defined(__x86_64__)
  const bool avx2 = __builtin_cpu_supports("avx2");
#else
  const bool avx2 = false;
#endif
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const double s = TimeParallel(threads, [&](int t) {
      const uint64_t* p = base + per * static_cast<size_t>(t);
#if defined(__x86_64__)
      if (avx2) return ReadAvx2(p, per);
#endif
      return ReadScalar(p, per);
    });
    if (s > 0) best = std::max(best, static_cast<double>(words * sizeof(uint64_t)) / s);
  }
  return {best / 1e9, avx2 ? "avx2 loads" : "scalar loads"};
}

Rate Fp32Tflops(int threads, const std::vector<std::string>& f) {
  return RunFirst(threads, f, kFp32Loops, {"scalar", 2'000'000, 8 * 2, FmaScalar});
}

Rate Int8Tops(int threads, const std::vector<std::string>& f) {
  return RunFirst(threads, f, kInt8Loops, kNoLoop);
}

Rate Bf16Tflops(int threads, const std::vector<std::string>& f) {
  return RunFirst(threads, f, kBf16Loops, kNoLoop);
}

}  // namespace strata::control::probe
