// Helpers shared by the kernel tests and the benchmark: random weight matrices in any supported
// format. Not used by production code.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "tensor/dtype.h"
#include "tensor/fp16.h"

namespace strata::kernels::testing {

// Sets the kernels' ISA for a scope (clamped to what the CPU has) and restores it after.
class IsaGuard {
 public:
  explicit IsaGuard(Isa isa) : saved_(ActiveIsa()) { SetIsa(isa); }
  ~IsaGuard() { SetIsa(saved_); }
  IsaGuard(const IsaGuard&) = delete;
  IsaGuard& operator=(const IsaGuard&) = delete;

 private:
  Isa saved_;
};

// Forces type t's decode variant (kernels.h: DecodeVariant) for a scope, then back to the
// process's choice.
class DecodeVariantGuard {
 public:
  DecodeVariantGuard(DType t, DecodeVariant v) : t_(t) { SetDecodeVariant(t, v); }
  ~DecodeVariantGuard() { SetDecodeVariant(t_, std::nullopt); }
  DecodeVariantGuard(const DecodeVariantGuard&) = delete;
  DecodeVariantGuard& operator=(const DecodeVariantGuard&) = delete;

 private:
  DType t_;
};

// Sets the BF16 kernel variant (kernels.h: bf16-dot or bf16-fma) for a scope and restores it.
class Bf16DotGuard {
 public:
  explicit Bf16DotGuard(bool dot) : saved_(Bf16DotActive()) { SetBf16Dot(dot); }
  ~Bf16DotGuard() { SetBf16Dot(saved_); }
  Bf16DotGuard(const Bf16DotGuard&) = delete;
  Bf16DotGuard& operator=(const Bf16DotGuard&) = delete;

 private:
  bool saved_;
};

// The BF16 variants to test on this CPU for weights of type t: bf16-fma, and bf16-dot where the
// CPU has it; for other types only the default (one entry, which leaves the variant as it is).
inline std::vector<bool> Bf16Variants(DType t) {
  if (t != DType::kBF16) return {Bf16DotActive()};
  if (Bf16DotAvailable()) return {false, true};
  return {false};
}

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Owns the bytes of a weight matrix.
struct OwnedWeights {
  std::vector<uint8_t> bytes;
  WeightMatrix m;
};

// Rows quantized from Gaussian floats with QuantizeRow.
inline OwnedWeights QuantizedWeights(DType t, size_t rows, size_t cols, uint32_t seed) {
  OwnedWeights w;
  const size_t rb = *RowBytes(t, cols);
  w.bytes.resize(rows * rb);
  std::vector<float> f = RandomFloats(rows * cols, seed);
  for (size_t r = 0; r < rows; ++r)
    QuantizeRow(t, f.data() + r * cols, w.bytes.data() + r * rb, cols);
  w.m = WeightMatrix{t, w.bytes.data(), rows, cols, rb};
  return w;
}

// Rows of random bits (every quant level, scale code and sign pattern occurs), with the f16 block
// scales replaced by finite values of moderate size so results stay finite.
inline OwnedWeights RandomBitsWeights(DType t, size_t rows, size_t cols, uint32_t seed) {
  if (t == DType::kF32 || t == DType::kF16 || t == DType::kBF16)
    return QuantizedWeights(t, rows, cols, seed);
  OwnedWeights w;
  const size_t rb = *RowBytes(t, cols);
  w.bytes.resize(rows * rb);
  std::mt19937 rng(seed);
  for (auto& b : w.bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> ud(0.001f, 0.05f);
  const auto tr = *GetDTypeTraits(t);
  const size_t nblocks = rows * rb / tr.type_size;
  for (size_t i = 0; i < nblocks; ++i) {
    uint8_t* blk = w.bytes.data() + i * tr.type_size;
    const uint16_t d = F32ToF16(ud(rng) * (rng() & 1 ? 1.0f : -1.0f));
    const uint16_t dmin = F32ToF16(ud(rng));
    if (t == DType::kQ6_K) {
      std::memcpy(blk + offsetof(BlockQ6_K, d), &d, 2);
    } else {
      std::memcpy(blk, &d, 2);
      if (t == DType::kQ4_K || t == DType::kQ5_K) std::memcpy(blk + 2, &dmin, 2);
    }
  }
  w.m = WeightMatrix{t, w.bytes.data(), rows, cols, rb};
  return w;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A panel-layout copy of a row-layout matrix (owns its bytes; kernels.h: PackPanels), in the
// layout Model::Load gives the type: kPanels4 for F16/BF16, kPanels16 for the quants.
struct Panels {
  std::unique_ptr<void, FreeDeleter> mem;
  WeightMatrix m;
};

inline Panels ToPanels(const WeightMatrix& w) {
  const size_t bytes = PanelLayoutBytes(w.type, w.rows, w.cols);
  Panels p;
  p.mem.reset(std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64)));
  PackPanels(w, p.mem.get());
  p.m = w;
  p.m.data = p.mem.get();
  p.m.layout = w.type == DType::kF16 || w.type == DType::kBF16 ? WeightLayout::kPanels4
                                                               : WeightLayout::kPanels16;
  return p;
}

}  // namespace strata::kernels::testing
