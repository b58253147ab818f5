// Decode variants of the integer types (kernels.h: DecodeVariant): forcing either GEMV reaches the
// kernels (the avx2 route's counter moves) and gives the other's bits for every type, token count
// of the decode path, thread count, odd row count and shared-activation call;
// STRATA_KERNEL_VARIANT's decode items parse, and bad ones are named; every choice says why.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/test_util.h"

namespace strata::kernels {
namespace {

using testing::DecodeVariantGuard;
using testing::IsaGuard;
using testing::OwnedWeights;
using testing::Panels;
using testing::RandomBitsWeights;
using testing::RandomFloats;
using testing::ToPanels;

constexpr DType kIntTypes[] = {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K,
                               DType::kQ6_K};

bool HasAvx512() { return static_cast<int>(DetectIsa()) >= static_cast<int>(Isa::kAvx512); }

// y of MatMul with t's decode variant forced to v, and how many MatMuls took the avx2 route.
std::vector<float> RunForced(const WeightMatrix& m, const std::vector<float>& x, size_t n_tokens,
                             ThreadPool* pool, DecodeVariant v, uint64_t* avx2_routes) {
  DecodeVariantGuard guard(m.type, v);
  std::vector<float> y(n_tokens * m.rows, -7.0f);
  const uint64_t before = internal::Avx2DecodeCount();
  MatMul(m, x.data(), n_tokens, y.data(), pool);
  *avx2_routes = internal::Avx2DecodeCount() - before;
  return y;
}

TEST(DecodeVariant, BothGemvsGiveTheSameBitsAndTheSwitchReachesTheKernels) {
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks avx512 VNNI: one decode GEMV only";
  ThreadPool two(2);
  uint32_t seed = 900;
  for (Isa isa : {Isa::kAvx512, Isa::kAmx}) {
    if (static_cast<int>(DetectIsa()) < static_cast<int>(isa)) continue;
    IsaGuard isa_guard(isa);
    for (DType t : kIntTypes) {
      const bool kq = t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
      const bool qx0 = !kq;
      for (size_t cols : {size_t{512}, size_t{2048}}) {
        for (size_t rows : {size_t{5}, size_t{67}}) {
          const OwnedWeights w = RandomBitsWeights(t, rows, cols, ++seed);
          const Panels p = ToPanels(w.m);
          const size_t gemv_tokens = qx0 && isa == Isa::kAmx ? 3 : 5;
          for (size_t n_tokens = 1; n_tokens <= gemv_tokens + 1; ++n_tokens) {
            const std::vector<float> x = RandomFloats(n_tokens * cols, ++seed);
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
              uint64_t r512 = 0, r2 = 0;
              const auto y512 = RunForced(p.m, x, n_tokens, pool, DecodeVariant::kVnni512, &r512);
              const auto y2 = RunForced(p.m, x, n_tokens, pool, DecodeVariant::kAvx2, &r2);
              const std::string what = std::string(DTypeName(t)) + " " + std::string(IsaName(isa)) +
                                       " cols " + std::to_string(cols) + " rows " +
                                       std::to_string(rows) + " tokens " +
                                       std::to_string(n_tokens) + (pool ? " 2 threads" : "");
              ASSERT_EQ(0, std::memcmp(y512.data(), y2.data(), y2.size() * sizeof(float))) << what;
              EXPECT_EQ(r512, 0u) << what;
              // The avx2 GEMV takes the decode's token counts only; the GEMM (or AMX) the rest.
              EXPECT_EQ(r2, n_tokens <= gemv_tokens ? 1u : 0u) << what;
              EXPECT_NE(y2[0], -7.0f) << what;
            }
          }
        }
      }
    }
  }
}

// Q/K/V-style shared activations: the jobs of one type go to the avx2 GEMV together; a matrix in
// row layout is not routed (the avx2 GEMV would repack it per call) and keeps its bits.
TEST(DecodeVariant, SharedActivationsFollowTheVariant) {
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks avx512 VNNI: one decode GEMV only";
  IsaGuard isa_guard(Isa::kAvx512);
  ThreadPool two(2);
  for (DType t : kIntTypes) {
    const size_t cols = 512;
    const OwnedWeights a = RandomBitsWeights(t, 40, cols, 11),
                       b = RandomBitsWeights(t, 17, cols, 12);
    const Panels pa = ToPanels(a.m), pb = ToPanels(b.m);
    const std::vector<float> x = RandomFloats(2 * cols, 13);
    std::vector<float> ya512(2 * 40), yb512(2 * 17), ya2(2 * 40), yb2(2 * 17);
    {
      DecodeVariantGuard g(t, DecodeVariant::kVnni512);
      const MatMulOut outs[] = {{&pa.m, ya512.data()}, {&pb.m, yb512.data()}};
      MatMulShared(outs, x.data(), 2, &two);
    }
    {
      DecodeVariantGuard g(t, DecodeVariant::kAvx2);
      const uint64_t before = internal::Avx2DecodeCount();
      const MatMulOut outs[] = {{&pa.m, ya2.data()}, {&pb.m, yb2.data()}};
      MatMulShared(outs, x.data(), 2, &two);
      EXPECT_EQ(internal::Avx2DecodeCount() - before, 1u) << DTypeName(t);
      std::vector<float> y_rows(2 * 40);
      const uint64_t rows_before = internal::Avx2DecodeCount();
      MatMul(a.m, x.data(), 2, y_rows.data(), &two);
      EXPECT_EQ(internal::Avx2DecodeCount(), rows_before) << DTypeName(t) << " row layout";
      EXPECT_EQ(0, std::memcmp(y_rows.data(), ya2.data(), ya2.size() * sizeof(float)))
          << DTypeName(t);
    }
    EXPECT_EQ(0, std::memcmp(ya512.data(), ya2.data(), ya2.size() * sizeof(float))) << DTypeName(t);
    EXPECT_EQ(0, std::memcmp(yb512.data(), yb2.data(), yb2.size() * sizeof(float))) << DTypeName(t);
  }
}

TEST(DecodeVariant, OverridesParseAndBadItemsAreNamed) {
  auto r = ParseDecodeOverrides("bf16-fma,q4_0=avx2,Q4_K=vnni512");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  bool q4_0 = false, q4_k = false;
  for (const DecodeOverride& o : *r) {
    q4_0 |= o.type == DType::kQ4_0 && o.variant == DecodeVariant::kAvx2;
    q4_k |= o.type == DType::kQ4_K && o.variant == DecodeVariant::kVnni512;
  }
  EXPECT_TRUE(q4_0 && q4_k);

  r = ParseDecodeOverrides("int=avx2,q6_K=vnni512");  // a later item wins
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 5u);
  for (const DecodeOverride& o : *r)
    EXPECT_EQ(o.variant, o.type == DType::kQ6_K ? DecodeVariant::kVnni512 : DecodeVariant::kAvx2)
        << DTypeName(o.type);

  r = ParseDecodeOverrides("");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());

  r = ParseDecodeOverrides("q4_0=avx3");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'avx3'"), std::string::npos) << r.status().message();
  r = ParseDecodeOverrides("bf16-dot,f16=avx2");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'f16'"), std::string::npos) << r.status().message();
}

TEST(DecodeVariant, EveryChoiceSaysWhy) {
  for (DType t : kIntTypes) {
    const DecodeChoice c = ChosenDecodeVariant(t);
    EXPECT_FALSE(c.why.empty()) << DTypeName(t);
    if (!HasAvx512()) {
      EXPECT_EQ(c.variant, DecodeVariant::kAvx2) << DTypeName(t);
      continue;
    }
    const bool explained = c.why.find("table") != std::string::npos ||
                           c.why.find("self-timing") != std::string::npos ||
                           c.why.find("STRATA_KERNEL_VARIANT") != std::string::npos;
    EXPECT_TRUE(explained) << DTypeName(t) << ": " << c.why;
    const DecodeChoice forced = [&] {
      DecodeVariantGuard g(t, DecodeVariant::kAvx2);
      return ChosenDecodeVariant(t);
    }();
    EXPECT_EQ(forced.variant, DecodeVariant::kAvx2);
    EXPECT_EQ(ChosenDecodeVariant(t).variant, c.variant) << "the guard restores the choice";
  }
  EXPECT_EQ(ChosenDecodeVariant(DType::kF16).why, "n/a");
}

}  // namespace
}  // namespace strata::kernels
