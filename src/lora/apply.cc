// AddLowRank: shrink (t = A x) then expand (y += scale * B t) over row groups. Both steps are
// kernels::MatMul calls on F32 weights over a slice of a job's rows (no pool inside: the slices
// themselves are the parallel items), so every value is computed by MatMul's per-token code.
#include "lora/apply.h"

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

// t rows [i0, i1) of a job: row i of t = A x_{rows[i]} (or row tokens[rows[i]] of A). Consecutive
// row indices are one MatMul over x in place (x_stride apart).
void Shrink(const LowRankJob& j, uint32_t i0, uint32_t i1, float* t) {
  const LoraPair& p = *j.pair;
  const size_t rank = static_cast<size_t>(p.rank);
  if (j.tokens != nullptr) {
    for (uint32_t i = i0; i < i1; ++i) {
      const size_t tok = static_cast<size_t>(j.tokens[j.rows[i]]);
      std::memcpy(t + i * rank, p.a.data() + tok * rank, rank * sizeof(float));
    }
    return;
  }
  const kernels::WeightMatrix a = F32Matrix(p.a.data(), rank, static_cast<size_t>(p.in));
  for (uint32_t i = i0; i < i1;) {
    uint32_t e = i + 1;
    while (e < i1 && j.rows[e] == j.rows[e - 1] + 1) ++e;
    kernels::MatMul(a, j.x + j.rows[i] * j.x_stride, e - i, t + i * rank, nullptr, j.x_stride,
                    rank);
    i = e;
  }
}

// Outputs [o0, o1) of rows [i0, i1) of a job: d = B[o0:o1] t, then y += scale * d.
void Expand(const LowRankJob& j, const float* t_job, const LowRankScratch::Item& it, float* d) {
  const LoraPair& p = *j.pair;
  const size_t rank = static_cast<size_t>(p.rank), no = it.o1 - it.o0;
  const kernels::WeightMatrix b = F32Matrix(p.b.data() + it.o0 * rank, no, rank);
  kernels::MatMul(b, t_job + it.i0 * rank, it.i1 - it.i0, d, nullptr, rank, no);
  const float scale = p.scale;
  for (uint32_t i = it.i0; i < it.i1; ++i) {
    float* y = j.y + j.rows[i] * j.y_stride + it.o0;
    const float* di = d + (i - it.i0) * no;
    for (size_t o = 0; o < no; ++o) y[o] += scale * di[o];
  }
}

}  // namespace

size_t LowRankScratch::capacity_bytes() const {
  size_t b = t.capacity() * sizeof(float);
  for (const auto& v : d) b += v.capacity() * sizeof(float);
  return b + (shrink.capacity() + expand.capacity()) * sizeof(Item);
}

void AddLowRank(std::span<const LowRankJob> jobs, LowRankScratch* s, ThreadPool* pool) {
  // Plan: t offsets per job, shrink items (row slices), expand items (row x out slices).
  s->t_offset.clear();
  s->shrink.clear();
  s->expand.clear();
  size_t t_floats = 0, macs = 0;
  for (uint32_t ji = 0; ji < jobs.size(); ++ji) {
    const LowRankJob& j = jobs[ji];
    s->t_offset.push_back(t_floats);
    if (!Active(j)) continue;
    const LoraPair& p = *j.pair;
    const uint32_t n = static_cast<uint32_t>(j.rows.size()), out = static_cast<uint32_t>(p.out);
    t_floats += static_cast<size_t>(n) * static_cast<size_t>(p.rank);
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
  if (s->d.size() < threads) s->d.resize(threads);
  for (size_t th = 0; th < threads; ++th)
    if (s->d[th].size() < size_t{kRowSlice} * kOutSlice) s->d[th].resize(kRowSlice * kOutSlice);

  float* t = s->t.data();
  auto shrink = [&](size_t k) {
    const LowRankScratch::Item& it = s->shrink[k];
    Shrink(jobs[it.job], it.i0, it.i1, t + s->t_offset[it.job]);
  };
  auto expand = [&](size_t k, int thread) {
    const LowRankScratch::Item& it = s->expand[k];
    Expand(jobs[it.job], t + s->t_offset[it.job], it, s->d[static_cast<size_t>(thread)].data());
  };
  if (!parallel) {
    for (size_t k = 0; k < s->shrink.size(); ++k) shrink(k);
    for (size_t k = 0; k < s->expand.size(); ++k) expand(k, 0);
    return;
  }
  // Dynamic hand-out (items differ in cost by the pair shapes); every item's bits are fixed.
  s->next.store(0, std::memory_order_relaxed);
  auto shrink_all = [&](int) {
    for (size_t k; (k = s->next.fetch_add(1, std::memory_order_relaxed)) < s->shrink.size();)
      shrink(k);
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
