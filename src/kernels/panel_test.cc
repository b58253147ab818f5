// The panel weight layouts (kernels.h: kPanels16 for Q4_0/Q8_0, kPanels4 for F16/BF16):
// PackPanels / ReadRow round-trip every row byte for
// byte, and MatMul / MatMulShared on panel-layout weights give the bits of the same weights in
// row layout at every ISA (the avx512 panel GEMV and GEMM, the AMX level's tiles on the panels,
// and the avx2 / scalar tile kernels that read rows back), for every token
// count path, thread count, row count (partial last panel, thread splits inside a panel) and
// stride. Row-layout results are themselves checked against the scalar reference in
// kernels_test.cc, so these memcmps tie the panel paths to the reference too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/test_util.h"
#include "tensor/fp16.h"

namespace strata::kernels {
namespace {

using testing::OwnedWeights;
using testing::Panels;
using testing::RandomBitsWeights;
using testing::RandomFloats;
using testing::ToPanels;

using testing::IsaGuard;

// Row lengths for a test: as given, but rounded up to multiples of 256 for the K-quants (32 -> 256,
// 320 -> 512, 2048 -> 2048).
std::vector<size_t> Cols(DType t, std::initializer_list<size_t> cols) {
  std::vector<size_t> out;
  const bool k_quant = t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
  for (size_t c : cols) out.push_back(k_quant ? (c + 255) / 256 * 256 : c);
  return out;
}

TEST(PanelLayout, ReadRowRoundTripsEveryRowAndSizeStaysNearTheFile) {
  uint32_t seed = 1;
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kF16, DType::kBF16, DType::kQ4_K, DType::kQ5_K,
                  DType::kQ6_K}) {
    const bool half = t == DType::kF16 || t == DType::kBF16;
    const bool k_quant = t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
    const size_t unit = k_quant ? 8 : 1;  // cols: multiples of 256
    for (size_t c : {size_t{32}, size_t{64}, size_t{96}, size_t{352}, size_t{2048}}) {
      const size_t cols = c * unit;
      for (size_t rows : {size_t{1}, size_t{3}, size_t{15}, size_t{16}, size_t{17}, size_t{67}}) {
        const OwnedWeights w = RandomBitsWeights(t, rows, cols, ++seed);
        const Panels p = ToPanels(w.m);
        const size_t panel_rows = half ? 4 : 16, panels = (rows + panel_rows - 1) / panel_rows;
        // The file's bytes for the padded rows, plus < 64 bytes of alignment per panel (Q4_K:
        // its unpacked 6-bit scales and mins, 2368 bytes per 16 rows and 256 values for 2304;
        // Q6_K: 3392 for 3360).
        const size_t file = panels * panel_rows * w.m.row_bytes;
        const size_t bound = t == DType::kQ4_K   ? file / 2304 * 2368
                             : t == DType::kQ5_K ? file / 2816 * 2880
                             : t == DType::kQ6_K ? file / 3360 * 3392
                                                 : file + panels * 63;
        EXPECT_LE(PanelLayoutBytes(t, rows, cols), bound);
        EXPECT_GE(PanelLayoutBytes(t, rows, cols), panels * panel_rows * w.m.row_bytes);
        std::vector<uint8_t> row(w.m.row_bytes);
        for (size_t r = 0; r < rows; ++r) {
          ReadRow(p.m, r, row.data());
          ASSERT_EQ(0, std::memcmp(row.data(), w.bytes.data() + r * w.m.row_bytes, row.size()))
              << DTypeName(t) << " cols " << cols << " rows " << rows << " row " << r;
          ReadRow(w.m, r, row.data());  // row layout: a copy
          ASSERT_EQ(0, std::memcmp(row.data(), w.bytes.data() + r * w.m.row_bytes, row.size()));
        }
      }
    }
  }
  EXPECT_EQ(PanelLayoutBytes(DType::kF32, 16, 256), 0u);
}

TEST(PanelLayout, PreferredFromAvx2Up) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    IsaGuard guard(isa);
    const bool kq_panels = static_cast<int>(ActiveIsa()) >= static_cast<int>(Isa::kAvx2);
    const bool qx0_panels = kq_panels;
    const bool half_panels = kq_panels;
    for (DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K})
      EXPECT_EQ(PreferredLayout(t), kq_panels ? WeightLayout::kPanels16 : WeightLayout::kRows)
          << IsaName(ActiveIsa());
    for (DType t : {DType::kQ8_0, DType::kQ4_0})
      EXPECT_EQ(PreferredLayout(t), qx0_panels ? WeightLayout::kPanels16 : WeightLayout::kRows)
          << IsaName(ActiveIsa());
    for (DType t : {DType::kF16, DType::kBF16})
      EXPECT_EQ(PreferredLayout(t), half_panels ? WeightLayout::kPanels4 : WeightLayout::kRows)
          << IsaName(ActiveIsa());
    for (DType t : {DType::kF32}) EXPECT_EQ(PreferredLayout(t), WeightLayout::kRows);
  }
}

// The avx2 level's Q4_0/Q8_0 and K-quant GEMVs (cpu/matmul_qx0_avx2.cc, cpu/matmul_kq_avx2.cc) do
// the avx512 level's arithmetic: the same bits for every token count, thread count and layout
// (checked where the CPU runs both). 40 and 67 rows: the avx512 GEMV runs whole panel pairs
// side by side (PanelGemv's kNp = 2) and an odd or partial panel alone.
TEST(PanelLayout, QuantsAtAvx2GiveTheAvx512LevelsBits) {
  if (static_cast<int>(DetectIsa()) < static_cast<int>(Isa::kAvx512))
    GTEST_SKIP() << "CPU lacks avx512: no second level to compare with";
  ThreadPool two(2);
  uint32_t seed = 300;
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (size_t cols : Cols(type, {32, 96, 2048})) {
      for (size_t rows : {size_t{1}, size_t{17}, size_t{40}, size_t{67}}) {
        const OwnedWeights w = RandomBitsWeights(type, rows, cols, ++seed);
        const Panels p = ToPanels(w.m);
        for (size_t n_tokens : {1, 2, 3, 7, 20}) {
          const std::vector<float> x = RandomFloats(n_tokens * cols, ++seed);
          for (const WeightMatrix* m : {&w.m, &p.m}) {
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
              std::vector<float> y512(n_tokens * rows, -1.0f), y2(n_tokens * rows, -2.0f);
              {
                IsaGuard guard(Isa::kAvx512);
                MatMul(*m, x.data(), n_tokens, y512.data(), pool);
              }
              {
                IsaGuard guard(Isa::kAvx2);
                MatMul(*m, x.data(), n_tokens, y2.data(), pool);
              }
              ASSERT_EQ(0, std::memcmp(y512.data(), y2.data(), y2.size() * sizeof(float)))
                  << DTypeName(type) << " cols " << cols << " rows " << rows << " tokens "
                  << n_tokens << (m == &p.m ? " panels" : " rows") << (pool ? " 2 threads" : "");
            }
          }
        }
      }
    }
  }
}

// `strata info --cpu`'s table names, per type, the layout PreferredLayout gives at each level.
TEST(PanelLayout, DescribeKernelsAgreesWithPreferredLayout) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    IsaGuard guard(isa);
    const std::vector<KernelVariant> table = DescribeKernels();
    ASSERT_EQ(table.size(), 8u);
    for (const KernelVariant& v : table) {
      const WeightLayout want = PreferredLayout(v.type);
      const std::string prefix = want == WeightLayout::kPanels16  ? "panels16"
                                 : want == WeightLayout::kPanels4 ? "panels4"
                                                                  : "rows";
      EXPECT_EQ(v.layout.rfind(prefix, 0), 0u)
          << DTypeName(v.type) << " at " << IsaName(ActiveIsa()) << ": " << v.layout;
      EXPECT_FALSE(v.decode.empty() || v.prefill.empty() || v.why.empty()) << DTypeName(v.type);
    }
  }
}

// The BF16 variant switch reaches MatMul in both layouts: bf16-dot and bf16-fma add the same exact
// products in different orders, so over many long rows some outputs differ in their last bits,
// and every output of both stays within f32 rounding of the exact sum.
TEST(Bf16Variant, TheSwitchReachesMatMulAndBothVariantsStayClose) {
  if (!Bf16DotAvailable()) GTEST_SKIP() << "CPU lacks AVX512_BF16: only bf16-fma here";
  IsaGuard guard(Isa::kAvx512);
  const size_t rows = 64, cols = 2048 + 16 + 5, n_tokens = 5;
  const OwnedWeights w = RandomBitsWeights(DType::kBF16, rows, cols, 3);
  const Panels p = ToPanels(w.m);
  const std::vector<float> x = RandomFloats(n_tokens * cols, 4);
  std::vector<float> wf(cols), xr(cols);
  int differ = 0;
  for (const WeightMatrix* m : {&w.m, &p.m}) {
    std::vector<float> y_fma(n_tokens * rows), y_dot(n_tokens * rows);
    {
      testing::Bf16DotGuard fma(false);
      MatMul(*m, x.data(), n_tokens, y_fma.data(), nullptr);
    }
    {
      testing::Bf16DotGuard dot(true);
      MatMul(*m, x.data(), n_tokens, y_dot.data(), nullptr);
    }
    for (size_t t = 0; t < n_tokens; ++t) {
      for (size_t k = 0; k < cols; ++k) xr[k] = BF16ToF32(F32ToBF16(x[t * cols + k]));
      for (size_t r = 0; r < rows; ++r) {
        DequantizeRow(DType::kBF16, w.bytes.data() + r * w.m.row_bytes, wf.data(), cols);
        double exact = 0, mag = 0;
        for (size_t k = 0; k < cols; ++k) {
          exact += static_cast<double>(wf[k]) * xr[k];
          mag += std::fabs(static_cast<double>(wf[k]) * xr[k]);
        }
        const size_t i = t * rows + r;
        EXPECT_NEAR(y_fma[i], exact, 1e-5 * mag) << "fma row " << r << " token " << t;
        EXPECT_NEAR(y_dot[i], exact, 1e-5 * mag) << "dot row " << r << " token " << t;
        differ += y_fma[i] != y_dot[i];
      }
    }
  }
  EXPECT_GT(differ, 0) << "bf16-dot gave the FMA variant's bits everywhere: not selected?";
}

using PanelParam = std::tuple<Isa, DType>;

class PanelMatMulTest : public ::testing::TestWithParam<PanelParam> {
 protected:
  void SetUp() override {
    if (static_cast<int>(std::get<0>(GetParam())) > static_cast<int>(DetectIsa()))
      GTEST_SKIP() << "CPU lacks " << IsaName(std::get<0>(GetParam()));
  }
};

TEST_P(PanelMatMulTest, SameBitsAsRowLayout) {
  const auto [isa, type] = GetParam();
  IsaGuard guard(isa);
  for (const bool dot : testing::Bf16Variants(type)) {
    testing::Bf16DotGuard variant(dot);
    ThreadPool two(2), three(3);
    uint32_t seed = 50;
    for (size_t cols : Cols(type, {32, 320, 352, 2048})) {
      for (size_t rows : {size_t{1}, size_t{3}, size_t{16}, size_t{17}, size_t{67}}) {
        const OwnedWeights w = RandomBitsWeights(type, rows, cols, ++seed);
        const Panels p = ToPanels(w.m);
        for (size_t n_tokens : {1, 2, 3, 4, 5, 6, 7, 16, 37}) {
          const std::vector<float> x = RandomFloats(n_tokens * cols, ++seed);
          for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two, &three}) {
            std::vector<float> y_rows(n_tokens * rows, -1.0f), y_panels(n_tokens * rows, -2.0f);
            MatMul(w.m, x.data(), n_tokens, y_rows.data(), pool);
            MatMul(p.m, x.data(), n_tokens, y_panels.data(), pool);
            ASSERT_EQ(0, std::memcmp(y_rows.data(), y_panels.data(), y_rows.size() * sizeof(float)))
                << DTypeName(type) << " " << IsaName(isa) << " cols " << cols << " rows " << rows
                << " tokens " << n_tokens << " threads " << (pool ? pool->num_threads() : 1);
          }
        }
      }
    }
  }
}

TEST_P(PanelMatMulTest, StridedInputAndOutput) {
  const auto [isa, type] = GetParam();
  IsaGuard guard(isa);
  for (const bool dot : testing::Bf16Variants(type)) {
    testing::Bf16DotGuard variant(dot);
    const size_t cols = Cols(type, {96})[0], rows = 21, xs = cols + 9, ys = rows + 4;
    const OwnedWeights w = RandomBitsWeights(type, rows, cols, 7);
    const Panels p = ToPanels(w.m);
    for (size_t n_tokens : {size_t{1}, size_t{3}, size_t{9}}) {
      const std::vector<float> x = RandomFloats(n_tokens * xs, 8);
      std::vector<float> y_rows(n_tokens * ys, 42.0f), y_panels(n_tokens * ys, 42.0f);
      MatMul(w.m, x.data(), n_tokens, y_rows.data(), nullptr, xs, ys);
      MatMul(p.m, x.data(), n_tokens, y_panels.data(), nullptr, xs, ys);
      EXPECT_EQ(0, std::memcmp(y_rows.data(), y_panels.data(), y_rows.size() * sizeof(float)))
          << n_tokens;
      for (size_t t = 0; t < n_tokens; ++t)
        for (size_t r = rows; r < ys; ++r)
          EXPECT_EQ(y_panels[t * ys + r], 42.0f) << "wrote past the rows";
    }
  }
}

// Q/K/V-like matrices (16, 64 and 17 rows) all in panels, and one left in rows among panels
// (a mixed call runs each matrix on its own): every output is its row-layout MatMul's bits.
TEST_P(PanelMatMulTest, SharedActivationsEqualRowLayoutCalls) {
  const auto [isa, type] = GetParam();
  IsaGuard guard(isa);
  for (const bool dot : testing::Bf16Variants(type)) {
    testing::Bf16DotGuard variant(dot);
    const size_t cols = Cols(type, {320})[0];
    const size_t rows[] = {64, 16, 17};
    uint32_t seed = 900;
    std::vector<OwnedWeights> ws;
    std::vector<Panels> ps;
    for (size_t r : rows) {
      ws.push_back(RandomBitsWeights(type, r, cols, ++seed));
      ps.push_back(ToPanels(ws.back().m));
    }
    ThreadPool two(2);
    for (bool mixed : {false, true}) {
      for (size_t n_tokens : {size_t{1}, size_t{4}, size_t{6}, size_t{37}}) {
        const std::vector<float> x = RandomFloats(n_tokens * cols, ++seed);
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
          std::vector<std::vector<float>> shared(3), separate(3);
          std::vector<MatMulOut> outs;
          for (size_t i = 0; i < 3; ++i) {
            shared[i].assign(n_tokens * rows[i], -1.0f);
            separate[i].assign(n_tokens * rows[i], -2.0f);
            MatMul(ws[i].m, x.data(), n_tokens, separate[i].data(), pool);
            outs.push_back(MatMulOut{mixed && i == 1 ? &ws[i].m : &ps[i].m, shared[i].data()});
          }
          MatMulShared(outs, x.data(), n_tokens, pool);
          for (size_t i = 0; i < 3; ++i)
            EXPECT_EQ(0, std::memcmp(shared[i].data(), separate[i].data(),
                                     shared[i].size() * sizeof(float)))
                << DTypeName(type) << (mixed ? " mixed" : "") << " matrix " << i << " tokens "
                << n_tokens;
        }
      }
    }
  }
}

std::string PanelParamName(const ::testing::TestParamInfo<PanelParam>& info) {
  return std::string(IsaName(std::get<0>(info.param))) + "_" +
         std::string(DTypeName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(
    AllIsas, PanelMatMulTest,
    ::testing::Combine(::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx),
                       ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kF16, DType::kBF16,
                                         DType::kQ4_K, DType::kQ5_K, DType::kQ6_K)),
    PanelParamName);

}  // namespace
}  // namespace strata::kernels
