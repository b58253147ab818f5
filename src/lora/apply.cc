// AddLowRank: shrink (t = A x) then expand (y += scale * B t) over row groups. The shrink is
// kernels::MatMul on F32 weights over a slice of a job's rows (no pool inside: the slices
// themselves are the parallel items); the expand, whose dots are only `rank` long, is an AVX2
// kernel here that reduces 8 outputs at once (MatMul's per-row call and horizontal sum cost more
// than such a dot: measured 3-4x slower on a decode step's shapes).
#include "lora/apply.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"

namespace strata::lora {
namespace {

kernels::WeightMatrix F32Matrix(const float* data, size_t rows, size_t cols) {
  kernels::WeightMatrix w;
  w.type = DType::kF32;
  w.data = data;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = cols * sizeof(float);
  return w;
}

bool Active(const LowRankJob& j) {
  return j.pair != nullptr && !j.pair->Inert() && !j.rows.empty() && j.y != nullptr;
}

// t rows [i0, i1) of a job: row i of t = A x_{rows[i]} (or row tokens[rows[i]] of A). Rows that
// are consecutive in x are one MatMul over x in place; others are first gathered into `xg`
// (kRowSlice x in floats), so A is read once per slice, not once per row. MatMul's per-token
// result does not depend on where the token's row lies or how many share the call.
void Shrink(const LowRankJob& j, uint32_t i0, uint32_t i1, float* t, float* xg) {
  const LoraPair& p = *j.pair;
  const size_t rank = static_cast<size_t>(p.rank), in = static_cast<size_t>(p.in);
  if (j.tokens != nullptr) {
    for (uint32_t i = i0; i < i1; ++i) {
      const size_t tok = static_cast<size_t>(j.tokens[j.rows[i]]);
      std::memcpy(t + i * rank, p.a.data() + tok * rank, rank * sizeof(float));
    }
    return;
  }
  const kernels::WeightMatrix a = F32Matrix(p.a.data(), rank, in);
  bool consecutive = true;
  for (uint32_t i = i0 + 1; i < i1 && consecutive; ++i)
    consecutive = j.rows[i] == j.rows[i - 1] + 1;
  if (consecutive) {
    kernels::MatMul(a, j.x + j.rows[i0] * j.x_stride, i1 - i0, t + i0 * rank, nullptr, j.x_stride,
                    rank);
    return;
  }
  for (uint32_t i = i0; i < i1; ++i)
    std::memcpy(xg + (i - i0) * in, j.x + j.rows[i] * j.x_stride, in * sizeof(float));
  kernels::MatMul(a, xg, i1 - i0, t + i0 * rank, nullptr, in, rank);
}

// Expand of one row, outputs [o0, o1): y[o] += scale * dot(B_o, t), B = [out x rank].
// Scalar form (ISA below AVX2): one sum over r in order.
void ExpandRowScalar(const float* b, size_t rank, const float* t, size_t o0, size_t o1, float scale,
                     float* y) {
  for (size_t o = o0; o < o1; ++o) {
    const float* row = b + o * rank;
    float s = 0.0f;
    for (size_t r = 0; r < rank; ++r) s += row[r] * t[r];
    y[o] += scale * s;
  }
}

// AVX2: the dot of output o is 8 lanes of FMA chains over rank in chunks of 8 (a partial chunk
// masked to zeros), then the lanes summed ((0+1)+(2+3)) + ((4+5)+(6+7)) by one hadd/permute tree
// that reduces 8 outputs at once. Every output goes through exactly that sequence whatever its
// place in a block of 8 (a block past o1 repeats the last row and drops those lanes), so a
// value depends only on (B_o, t, rank): not on o0, o1 or the rows around it.
__attribute__((target("avx2,fma"))) void ExpandRowAvx2(const float* b, size_t rank, const float* t,
                                                       size_t o0, size_t o1, float scale,
                                                       float* y) {
  const size_t full = rank / 8, rem = rank % 8;
  alignas(32) static constexpr int32_t kLanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                     0,  0,  0,  0,  0,  0,  0,  0};
  const __m256i rem_mask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanes + 8 - rem));
  const __m256 vscale = _mm256_set1_ps(scale);
  for (size_t o = o0; o < o1; o += 8) {
    const size_t n = std::min<size_t>(8, o1 - o);
    __m256 p[8];
    for (size_t j = 0; j < 8; ++j) {
      const float* row = b + (o + std::min(j, n - 1)) * rank;
      __m256 acc = _mm256_setzero_ps();
      for (size_t c = 0; c < full; ++c)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(row + 8 * c), _mm256_loadu_ps(t + 8 * c), acc);
      if (rem != 0)
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(row + 8 * full, rem_mask),
                              _mm256_maskload_ps(t + 8 * full, rem_mask), acc);
      p[j] = acc;
    }
    const __m256 h0123 = _mm256_hadd_ps(_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3]));
    const __m256 h4567 = _mm256_hadd_ps(_mm256_hadd_ps(p[4], p[5]), _mm256_hadd_ps(p[6], p[7]));
    const __m256 sum = _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20),
                                     _mm256_permute2f128_ps(h0123, h4567, 0x31));
    const __m256 delta = _mm256_mul_ps(vscale, sum);  // scale * d rounded, then the add
    if (n == 8) {
      _mm256_storeu_ps(y + o, _mm256_add_ps(_mm256_loadu_ps(y + o), delta));
    } else {
      const __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanes + 8 - n));
      _mm256_maskstore_ps(y + o, m, _mm256_add_ps(_mm256_maskload_ps(y + o, m), delta));
    }
  }
}

using ExpandRowFn = void (*)(const float*, size_t, const float*, size_t, size_t, float, float*);

// Outputs [o0, o1) of rows [i0, i1) of a job: y_row += scale * B[o0:o1] t_row.
void Expand(const LowRankJob& j, const float* t_job, const LowRankScratch::Item& it,
            ExpandRowFn expand_row) {
  const LoraPair& p = *j.pair;
  const size_t rank = static_cast<size_t>(p.rank);
  for (uint32_t i = it.i0; i < it.i1; ++i)
    expand_row(p.b.data(), rank, t_job + i * rank, it.o0, it.o1, p.scale,
               j.y + j.rows[i] * j.y_stride);
}

}  // namespace

size_t LowRankScratch::capacity_bytes() const {
  size_t b = t.capacity() * sizeof(float);
  for (const auto& v : xg) b += v.capacity() * sizeof(float);
  return b + (shrink.capacity() + expand.capacity()) * sizeof(Item);
}

void AddLowRank(std::span<const LowRankJob> jobs, LowRankScratch* s, ThreadPool* pool) {
  // Plan: t offsets per job, shrink items (row slices), expand items (row x out slices).
  s->t_offset.clear();
  s->shrink.clear();
  s->expand.clear();
  size_t t_floats = 0, macs = 0, max_in = 0;
  for (uint32_t ji = 0; ji < jobs.size(); ++ji) {
    const LowRankJob& j = jobs[ji];
    s->t_offset.push_back(t_floats);
    if (!Active(j)) continue;
    const LoraPair& p = *j.pair;
    const uint32_t n = static_cast<uint32_t>(j.rows.size()), out = static_cast<uint32_t>(p.out);
    t_floats += static_cast<size_t>(n) * static_cast<size_t>(p.rank);
    if (j.tokens == nullptr) max_in = std::max(max_in, static_cast<size_t>(p.in));
    macs += static_cast<size_t>(n) * static_cast<size_t>(p.rank) *
            (static_cast<size_t>(out) + (j.tokens != nullptr ? 0 : static_cast<size_t>(p.in)));
    for (uint32_t i0 = 0; i0 < n; i0 += kRowSlice) {
      const uint32_t i1 = std::min(n, i0 + kRowSlice);
      s->shrink.push_back({ji, i0, i1, 0, 0});
      for (uint32_t o0 = 0; o0 < out; o0 += kOutSlice)
        s->expand.push_back({ji, i0, i1, o0, std::min(out, o0 + kOutSlice)});
    }
  }
  if (s->expand.empty()) return;
  if (s->t.size() < t_floats) s->t.resize(t_floats);
  const bool parallel = pool != nullptr && pool->num_threads() > 1 && macs >= kParallelMacs;
  const size_t threads = parallel ? static_cast<size_t>(pool->num_threads()) : 1;
  if (s->xg.size() < threads) s->xg.resize(threads);
  for (size_t th = 0; th < threads; ++th)
    if (s->xg[th].size() < kRowSlice * max_in) s->xg[th].resize(kRowSlice * max_in);

  float* t = s->t.data();
  auto shrink = [&](size_t k, int thread) {
    const LowRankScratch::Item& it = s->shrink[k];
    Shrink(jobs[it.job], it.i0, it.i1, t + s->t_offset[it.job],
           s->xg[static_cast<size_t>(thread)].data());
  };
  const ExpandRowFn expand_row =
      static_cast<int>(kernels::ActiveIsa()) >= static_cast<int>(kernels::Isa::kAvx2)
          ? ExpandRowAvx2
          : ExpandRowScalar;
  auto expand = [&](size_t k, int) {
    const LowRankScratch::Item& it = s->expand[k];
    Expand(jobs[it.job], t + s->t_offset[it.job], it, expand_row);
  };
  if (!parallel) {
    for (size_t k = 0; k < s->shrink.size(); ++k) shrink(k, 0);
    for (size_t k = 0; k < s->expand.size(); ++k) expand(k, 0);
    return;
  }
  // Dynamic hand-out (items differ in cost by the pair shapes); every item's bits are fixed.
  s->next.store(0, std::memory_order_relaxed);
  auto shrink_all = [&](int thread) {
    for (size_t k; (k = s->next.fetch_add(1, std::memory_order_relaxed)) < s->shrink.size();)
      shrink(k, thread);
  };
  pool->RunOnAll(shrink_all);
  s->next.store(0, std::memory_order_relaxed);
  auto expand_all = [&](int thread) {
    for (size_t k; (k = s->next.fetch_add(1, std::memory_order_relaxed)) < s->expand.size();)
      expand(k, thread);
  };
  pool->RunOnAll(expand_all);
}

}  // namespace strata::lora
