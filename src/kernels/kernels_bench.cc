// MatMul throughput per weight type, on the weights as Model::Load keeps them (repacked into the
// active ISA's PreferredLayout; STRATA_WEIGHT_LAYOUT=rows for the file's layout). Reports weight
// GB/s (decode-like, n_tokens = 1) and GFLOP/s (2 * rows * cols * n_tokens per call; batched decode
// n_tokens = 4..64, prefill-like 512). Runs with 1 and 2 threads; set
// STRATA_ISA=scalar|avx2|avx512|amx to pick the kernels.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "base/page_memory.h"
#include "kernels/kernels.h"
#include "kernels/test_util.h"

namespace strata::kernels {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A copy of w in PreferredLayout(w.type) (64-byte aligned), or w's own bytes when that is rows.
struct Loaded {
  std::unique_ptr<void, FreeDeleter> mem;
  WeightMatrix m;
};

Loaded Load(const WeightMatrix& w) {
  Loaded l;
  l.m = w;
  const WeightLayout layout = PreferredLayout(w.type);
  if (layout == WeightLayout::kRows) return l;
  const size_t bytes = PanelLayoutBytes(w.type, w.rows, w.cols);
  l.mem.reset(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  PackPanels(w, l.mem.get());
  l.m.data = l.mem.get();
  l.m.layout = layout;
  return l;
}

void BM_MatMul(benchmark::State& state, DType type) {  // NOLINT(readability-identifier-naming)
  const size_t rows = static_cast<size_t>(state.range(0));
  const size_t cols = static_cast<size_t>(state.range(1));
  const size_t n_tokens = static_cast<size_t>(state.range(2));
  const int threads = static_cast<int>(state.range(3));
  ThreadPool pool(threads);
  auto w = testing::QuantizedWeights(type, rows, cols, 1);
  const Loaded loaded = Load(w.m);
  std::vector<float> x = testing::RandomFloats(n_tokens * cols, 2);
  std::vector<float> y(n_tokens * rows);
  for (auto _ : state) {
    MatMul(loaded.m, x.data(), n_tokens, y.data(), &pool);
    benchmark::DoNotOptimize(y.data());
  }
  const double weight_bytes = static_cast<double>(w.bytes.size());
  state.counters["GB/s"] =
      benchmark::Counter(weight_bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * n_tokens / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(IsaName(ActiveIsa())) +
                 " threads=" + std::to_string(pool.num_threads()));
}

void Shapes(benchmark::internal::Benchmark* b) {
  // Llama-3.2-1B shapes: attention / FFN up (cols 2048) and FFN down (cols 8192).
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{2048, 2048}, {8192, 2048}, {2048, 8192}})
    for (int64_t n_tokens : {1, 4, 8, 16, 64, 512})
      for (int64_t threads : {1, 2}) b->Args({rows, cols, n_tokens, threads});
  b->ArgNames({"rows", "cols", "tokens", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

// Weights streamed from DRAM, as in a decode step: copies of one matrix (~0.8 GB of Q8_0 in all,
// more than this machine's L3) are multiplied in turn; reports weight GB/s per call. The copies
// live in the memory Model repacks weights into (PageMemory: huge pages where the system allows),
// so the figure compares with `bench model`'s decode (docs/perf.md: on 4 KiB pages it read lower).
void BM_MatMulStream(benchmark::State& state,  // NOLINT(readability-identifier-naming)
                     DType type) {
  const size_t rows = static_cast<size_t>(state.range(2)),
               cols = static_cast<size_t>(state.range(3));
  const size_t copies = (768u << 20) / (rows * cols);  // ~0.8 GB of Q8_0 in all
  const size_t n_tokens = static_cast<size_t>(state.range(0));
  ThreadPool pool(static_cast<int>(state.range(1)));
  auto w = testing::QuantizedWeights(type, rows, cols, 1);
  const Loaded loaded = Load(w.m);
  const size_t layout_bytes = loaded.mem ? PanelLayoutBytes(type, rows, cols) : w.bytes.size();
  const size_t bytes = (layout_bytes + 63) / 64 * 64;  // copies 64-byte aligned, as loaded panels
  Result<PageMemory> mem = PageMemory::Allocate(bytes * copies);
  if (!mem.ok()) {
    state.SkipWithError(mem.status().ToString().c_str());
    return;
  }
  uint8_t* big = mem->data();
  const auto* src = static_cast<const uint8_t*>(loaded.m.data);
  for (size_t c = 0; c < copies; ++c) std::copy(src, src + layout_bytes, big + c * bytes);
  std::vector<float> x = testing::RandomFloats(n_tokens * cols, 2);
  std::vector<float> y(n_tokens * rows);
  size_t c = 0;
  for (auto _ : state) {
    WeightMatrix m = loaded.m;
    m.data = big + c * bytes;
    c = (c + 1) % copies;
    MatMul(m, x.data(), n_tokens, y.data(), &pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.bytes.size()) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(IsaName(ActiveIsa())) +
                 " threads=" + std::to_string(pool.num_threads()));
}

void StreamShapes(benchmark::internal::Benchmark* b) {
  // Llama-3.2-1B FFN up (8192 x 2048) and the 134M model's FFN up / down (2048 x 768, 768 x 2048).
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{8192, 2048}, {2048, 768}, {768, 2048}})
    for (int64_t n_tokens : {1, 8, 16, 32, 64})
      for (int64_t threads : {1, 2}) b->Args({n_tokens, threads, rows, cols});
  b->ArgNames({"tokens", "threads", "rows", "cols"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_CAPTURE(BM_MatMulStream, q8_0, DType::kQ8_0)->Apply(StreamShapes);
BENCHMARK_CAPTURE(BM_MatMulStream, q4_0, DType::kQ4_0)->Apply(StreamShapes);
BENCHMARK_CAPTURE(BM_MatMulStream, q4_K, DType::kQ4_K)->Apply(StreamShapes);
BENCHMARK_CAPTURE(BM_MatMulStream, q6_K, DType::kQ6_K)->Apply(StreamShapes);
BENCHMARK_CAPTURE(BM_MatMulStream, f16, DType::kF16)->Apply(StreamShapes);
BENCHMARK_CAPTURE(BM_MatMulStream, bf16, DType::kBF16)->Apply(StreamShapes);

BENCHMARK_CAPTURE(BM_MatMul, q4_0, DType::kQ4_0)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_MatMul, q8_0, DType::kQ8_0)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_MatMul, q4_K, DType::kQ4_K)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_MatMul, q5_K, DType::kQ5_K)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_MatMul, q6_K, DType::kQ6_K)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_MatMul, f16, DType::kF16)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_MatMul, bf16, DType::kBF16)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_MatMul, f32, DType::kF32)->Apply(Shapes);

}  // namespace
}  // namespace strata::kernels

BENCHMARK_MAIN();
