// AMX-INT8 MatMul (Isa::kAmx, Q4_0 / Q8_0 weights in rows and in kPanels16 panels): bit-identical
// to the AVX-512 VNNI level and to an independent scalar model of the documented arithmetic
// (cpu/matmul_qx0_avx512.cc):
//   activations quantized to Q8_0 by the reference quantizer; per block b in order
//   acc = fma(float(exact integer dot of block b), f16(d_w) * f16(d_x), acc), acc starting at 0.
// Also: independence from the thread count, from how tokens are split into calls, and strides.
// Skipped (with a message) on CPUs or kernels without AMX.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/test_util.h"
#include "tensor/fp16.h"

namespace strata::kernels {
namespace {

using testing::Panels;
using testing::RandomBitsWeights;
using testing::RandomFloats;

using testing::IsaGuard;

// Signed int8 value j (0..31) of block `blk` of a Q4_0 / Q8_0 row.
int WeightQuant(DType t, const uint8_t* blk, int j) {
  if (t == DType::kQ8_0) return static_cast<int8_t>(blk[2 + j]);
  const uint8_t byte = blk[2 + (j % 16)];
  return (j < 16 ? (byte & 0xF) : (byte >> 4)) - 8;
}

// The scalar model: y[t * rows + r] for every token of x (dense).
std::vector<float> Model(const WeightMatrix& w, const std::vector<float>& x, size_t n_tokens) {
  const size_t nb = w.cols / 32;
  const size_t block_bytes = w.type == DType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  std::vector<BlockQ8_0> xq(nb);
  std::vector<float> y(n_tokens * w.rows);
  for (size_t t = 0; t < n_tokens; ++t) {
    QuantizeRow(DType::kQ8_0, x.data() + t * w.cols, xq.data(), w.cols);
    for (size_t r = 0; r < w.rows; ++r) {
      const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
      float acc = 0.0f;
      for (size_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * block_bytes;
        int32_t isum = 0;
        for (int j = 0; j < 32; ++j) isum += WeightQuant(w.type, blk, j) * xq[b].qs[j];
        uint16_t dw16;
        std::memcpy(&dw16, blk, 2);
        const float scale = F16ToF32(dw16) * F16ToF32(xq[b].d);
        acc = std::fma(static_cast<float>(isum), scale, acc);
      }
      y[t * w.rows + r] = acc;
    }
  }
  return y;
}

// Activations: Gaussian, with a few blocks of huge, tiny and zero values.
std::vector<float> Activations(size_t n_tokens, size_t cols, uint32_t seed) {
  std::vector<float> x = RandomFloats(n_tokens * cols, seed);
  for (size_t t = 0; t < n_tokens; t += 5) {
    for (size_t k = 0; k < std::min<size_t>(cols, 32); ++k)
      x[t * cols + k] *= (t % 2 ? 1e4f : 1e-20f);
    if (cols >= 64)
      for (size_t k = 32; k < 64; ++k) x[t * cols + k] = 0.0f;
  }
  return x;
}

std::string Where(DType t, size_t cols, size_t rows, size_t m) {
  return std::string(DTypeName(t)) + " cols " + std::to_string(cols) + " rows " +
         std::to_string(rows) + " tokens " + std::to_string(m);
}

bool SameBits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

class AmxMatMulTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (DetectIsa() != Isa::kAmx)
      GTEST_SKIP()
          << "AMX-INT8 not available (CPU, OS permission or compiler); AMX MatMul not tested";
  }
};

// Every token count 1..70 (GEMV, VNNI GEMM and AMX paths; partial token groups and panels), block
// counts zero, odd and even (0, 1, 3, 11, 65), row counts around the 16-row panel:
// AMX == VNNI == model, with the weights in rows and in kPanels16 panels.
TEST_P(AmxMatMulTest, BitIdenticalToAvx512AndScalarModel) {
  const DType type = GetParam();
  constexpr size_t kMaxTokens = 70;
  uint32_t seed = 1000;
  for (size_t cols : {size_t{0}, size_t{32}, size_t{96}, size_t{352}, size_t{2080}}) {
    for (size_t rows : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{50}}) {
      auto w = RandomBitsWeights(type, rows, cols, ++seed);
      const Panels panels = testing::ToPanels(w.m);
      const std::vector<float> x = Activations(kMaxTokens, cols, ++seed);
      const std::vector<float> want = Model(w.m, x, kMaxTokens);
      ThreadPool two(2);
      for (size_t m = 1; m <= kMaxTokens; ++m) {
        std::vector<float> y_amx(m * rows, -1.0f), y_vnni(m * rows, -2.0f);
        std::vector<float> y_panels(m * rows, -3.0f);
        {
          IsaGuard g(Isa::kAmx);
          MatMul(w.m, x.data(), m, y_amx.data(), m % 2 ? nullptr : &two);
          MatMul(panels.m, x.data(), m, y_panels.data(), m % 3 ? &two : nullptr);
        }
        ASSERT_TRUE(SameBits(y_panels.data(), want.data(), m * rows))
            << Where(type, cols, rows, m) << " amx on panels vs model";
        {
          IsaGuard g(Isa::kAvx512);
          MatMul(w.m, x.data(), m, y_vnni.data(), &two);
        }
        ASSERT_TRUE(SameBits(y_amx.data(), want.data(), m * rows))
            << Where(type, cols, rows, m) << " amx vs model";
        ASSERT_TRUE(SameBits(y_vnni.data(), want.data(), m * rows))
            << Where(type, cols, rows, m) << " vnni vs model";
      }
    }
  }
}

// 1 vs 2 threads, and the batch split into calls of different sizes (some below the AMX
// threshold): every output equals the one-call result bit for bit.
TEST_P(AmxMatMulTest, ThreadsAndTokenSplitsDoNotChangeBits) {
  const DType type = GetParam();
  IsaGuard g(Isa::kAmx);
  const size_t cols = 4096 + 32, rows = 67, n_tokens = 70;
  auto w = RandomBitsWeights(type, rows, cols, 7);
  const Panels panels = testing::ToPanels(w.m);
  const std::vector<float> x = Activations(n_tokens, cols, 8);
  ThreadPool one(1), two(2);
  std::vector<float> y1(n_tokens * rows), y2(n_tokens * rows), ys(n_tokens * rows, -1.0f);
  MatMul(w.m, x.data(), n_tokens, y1.data(), &one);
  for (const WeightMatrix* m : {static_cast<const WeightMatrix*>(&w.m), &panels.m}) {
    const char* layout = m == &w.m ? "rows: " : "panels: ";
    MatMul(*m, x.data(), n_tokens, y2.data(), &two);
    EXPECT_TRUE(SameBits(y1.data(), y2.data(), y1.size())) << layout << "1 vs 2 threads";
    for (const std::vector<size_t>& split :
         {std::vector<size_t>{17, 33, 20}, std::vector<size_t>{1, 16, 5, 48},
          std::vector<size_t>{40, 30}, std::vector<size_t>{69, 1}}) {
      size_t t0 = 0;
      for (size_t n : split) {
        MatMul(*m, x.data() + t0 * cols, n, ys.data() + t0 * rows, &two);
        t0 += n;
      }
      ASSERT_EQ(t0, n_tokens);
      std::string s;
      for (size_t n : split) s += std::to_string(n) + " ";
      EXPECT_TRUE(SameBits(y1.data(), ys.data(), y1.size())) << layout << "split " << s;
    }
  }
}

TEST_P(AmxMatMulTest, StridedInputAndOutput) {
  const DType type = GetParam();
  IsaGuard g(Isa::kAmx);
  const size_t cols = 160, rows = 21, n_tokens = 33, xs = cols + 9, ys = rows + 4;
  auto w = RandomBitsWeights(type, rows, cols, 9);
  std::vector<float> x = RandomFloats(n_tokens * xs, 10);
  std::vector<float> dense_x(n_tokens * cols);
  for (size_t t = 0; t < n_tokens; ++t)
    std::memcpy(&dense_x[t * cols], &x[t * xs], cols * sizeof(float));
  const std::vector<float> want = Model(w.m, dense_x, n_tokens);
  const Panels panels = testing::ToPanels(w.m);
  for (const WeightMatrix* m : {static_cast<const WeightMatrix*>(&w.m), &panels.m}) {
    std::vector<float> y(n_tokens * ys, 42.0f);
    MatMul(*m, x.data(), n_tokens, y.data(), nullptr, xs, ys);
    for (size_t t = 0; t < n_tokens; ++t) {
      EXPECT_TRUE(SameBits(&y[t * ys], &want[t * rows], rows)) << "token " << t;
      for (size_t r = rows; r < ys; ++r) EXPECT_EQ(y[t * ys + r], 42.0f) << "wrote past the row";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Qx0, AmxMatMulTest, ::testing::Values(DType::kQ8_0, DType::kQ4_0),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace strata::kernels
