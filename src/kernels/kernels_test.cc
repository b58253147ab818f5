// MatMul and vector ops of every ISA against the scalar reference (kernels/ref).
//
// Tolerance: the SIMD integer kernels compute the same integer block sums as the reference; only
// the f32 summation order differs (8/16 lanes, then a horizontal sum). We require
//   |y - y_ref| <= 1e-5 * sum_k |w_k * x_k| + 1e-30
// per output (sum of magnitudes of the dequantized products, in fp64) -- about 80 ulps of the
// magnitude sum at 4352 columns, far above the observed differences (a few ulps) and far below
// any indexing or layout bug (which moves results by O(1) of the magnitude).
#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/quantize_avx2.h"
#include "kernels/kernels_internal.h"
#include "kernels/ref/quants_ref.h"
#include "kernels/test_util.h"
#include "tensor/fp16.h"

namespace strata::kernels {
namespace {

using testing::QuantizedWeights;
using testing::RandomBitsWeights;
using testing::RandomFloats;

constexpr double kRelTol = 1e-5;

using testing::IsaGuard;

std::vector<size_t> ColsFor(DType t) {
  const uint32_t bs = GetDTypeTraits(t)->block_size;
  if (bs == 256) return {256, 17 * 256};
  if (bs == 32) return {32, 17 * 32, 4096 + 256};
  return {32, 17 * 32, 4096 + 256, 7, 100};  // float types: any length, tails included
}

// Reference outputs computed directly from the reference dot products and magnitude sums.
void Reference(const WeightMatrix& w, const std::vector<float>& x, size_t n_tokens,
               std::vector<float>* y, std::vector<double>* mag) {
  const DType act = internal::ActivationType(w.type);
  const size_t xb = *RowBytes(act, w.cols);
  std::vector<uint8_t> xq(xb);
  std::vector<float> wd(w.cols), xd(w.cols);
  y->assign(n_tokens * w.rows, 0.0f);
  mag->assign(n_tokens * w.rows, 0.0);
  const auto dot = internal::RefDotTile(w.type);
  for (size_t t = 0; t < n_tokens; ++t) {
    internal::ConvertActivations(w.type, x.data() + t * w.cols, xq.data(), w.cols);
    DequantizeRow(act, xq.data(), xd.data(), w.cols);
    for (size_t r = 0; r < w.rows; ++r) {
      const void* row = static_cast<const char*>(w.data) + r * w.row_bytes;
      dot(row, xq.data(), 0, 1, w.cols, &(*y)[t * w.rows + r]);
      DequantizeRow(w.type, row, wd.data(), w.cols);
      double m = 0;
      for (size_t k = 0; k < w.cols; ++k) m += std::fabs(static_cast<double>(wd[k]) * xd[k]);
      (*mag)[t * w.rows + r] = m;
    }
  }
}

using MatMulParam = std::tuple<Isa, DType>;

class MatMulTest : public ::testing::TestWithParam<MatMulParam> {
 protected:
  void SetUp() override {
    if (static_cast<int>(std::get<0>(GetParam())) > static_cast<int>(DetectIsa()))
      GTEST_SKIP() << "CPU lacks " << IsaName(std::get<0>(GetParam()));
  }
};

TEST_P(MatMulTest, MatchesReferenceOnOddShapes) {
  const auto [isa, type] = GetParam();
  IsaGuard guard(isa);
  for (const bool dot : testing::Bf16Variants(type)) {
    testing::Bf16DotGuard variant(dot);
    uint32_t seed = 100;
    for (size_t cols : ColsFor(type)) {
      for (size_t rows : {size_t{1}, size_t{3}, size_t{17}, size_t{67}}) {
        for (int mode = 0; mode < 2; ++mode) {
          auto w = mode == 0 ? QuantizedWeights(type, rows, cols, ++seed)
                             : RandomBitsWeights(type, rows, cols, ++seed);
          for (size_t n_tokens : {size_t{1}, size_t{2}, size_t{5}, size_t{33}}) {
            if (rows == 67 && cols > 1000 && n_tokens == 33 && mode == 1)
              continue;  // keep runtime low
            std::vector<float> x = RandomFloats(n_tokens * cols, ++seed);
            std::vector<float> y_ref, y(n_tokens * rows, -1.0f);
            std::vector<double> mag;
            Reference(w.m, x, n_tokens, &y_ref, &mag);
            MatMul(w.m, x.data(), n_tokens, y.data(), nullptr);
            for (size_t i = 0; i < y.size(); ++i) {
              ASSERT_NEAR(y[i], y_ref[i], kRelTol * mag[i] + 1e-30)
                  << DTypeName(type) << " " << IsaName(isa) << " cols " << cols << " rows " << rows
                  << " tokens " << n_tokens << " mode " << mode << " index " << i;
            }
          }
        }
      }
    }
  }
}

TEST_P(MatMulTest, ThreadCountAndTokenGroupingDoNotChangeBits) {
  const auto [isa, type] = GetParam();
  IsaGuard guard(isa);
  for (const bool dot : testing::Bf16Variants(type)) {
    testing::Bf16DotGuard variant(dot);
    const bool k_quant = GetDTypeTraits(type)->block_size == 256;
    // Odd and even block counts; 7 tokens (decode-style path) and 37 (prefill path: token groups
    // with a partial last group). Every token's row must equal the one-token result bit for bit.
    for (size_t cols : {k_quant ? size_t{512} : size_t{320}, k_quant ? size_t{768} : size_t{352}}) {
      for (size_t n_tokens : {size_t{7}, size_t{37}}) {
        const size_t rows = 67;
        auto w = RandomBitsWeights(type, rows, cols, 5);
        std::vector<float> x = RandomFloats(n_tokens * cols, 6);
        std::vector<float> y1(rows * n_tokens), y2(rows * n_tokens), y_single(rows * n_tokens);
        ThreadPool one(1), two(2);
        MatMul(w.m, x.data(), n_tokens, y1.data(), &one);
        MatMul(w.m, x.data(), n_tokens, y2.data(), &two);
        EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)))
            << cols << " " << n_tokens;
        for (size_t t = 0; t < n_tokens; ++t)
          MatMul(w.m, x.data() + t * cols, 1, y_single.data() + t * rows, &two);
        EXPECT_EQ(0, std::memcmp(y1.data(), y_single.data(), y1.size() * sizeof(float)))
            << cols << " " << n_tokens;
      }
    }
  }
}

// MatMulShared over matrices of one type (Q/K/V-like: different row counts, some not a multiple of
// the 16-row panel), and with a second type mixed in (gate/up of a mixed-quant file): every output
// equals its own MatMul bit for bit, at every token count path (GEMV, GEMM, AMX) and thread count.
TEST_P(MatMulTest, SharedActivationsEqualSeparateCalls) {
  const auto [isa, type] = GetParam();
  IsaGuard guard(isa);
  for (const bool dot : testing::Bf16Variants(type)) {
    testing::Bf16DotGuard variant(dot);
    const size_t cols = GetDTypeTraits(type)->block_size == 256 ? 512 : 320;
    const DType other = type == DType::kQ8_0 ? DType::kQ4_0 : DType::kQ8_0;
    uint32_t seed = 300;
    for (bool mixed : {false, true}) {
      const size_t rows[] = {64, 16, 17};
      std::vector<testing::OwnedWeights> ws;
      for (size_t i = 0; i < 3; ++i)
        ws.push_back(RandomBitsWeights(mixed && i == 2 ? other : type, rows[i], cols, ++seed));
      for (size_t n_tokens : {size_t{1}, size_t{3}, size_t{4}, size_t{6}, size_t{16}, size_t{37}}) {
        const std::vector<float> x = RandomFloats(n_tokens * cols, ++seed);
        ThreadPool two(2);
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
          std::vector<std::vector<float>> shared(3), separate(3);
          std::vector<MatMulOut> outs;
          for (size_t i = 0; i < 3; ++i) {
            shared[i].assign(n_tokens * rows[i], -1.0f);
            separate[i].assign(n_tokens * rows[i], -2.0f);
            MatMul(ws[i].m, x.data(), n_tokens, separate[i].data(), pool);
            outs.push_back(MatMulOut{&ws[i].m, shared[i].data()});
          }
          MatMulShared(outs, x.data(), n_tokens, pool);
          for (size_t i = 0; i < 3; ++i)
            EXPECT_EQ(0, std::memcmp(shared[i].data(), separate[i].data(),
                                     shared[i].size() * sizeof(float)))
                << DTypeName(type) << (mixed ? " mixed" : "") << " matrix " << i << " tokens "
                << n_tokens << (pool ? " 2 threads" : " 1 thread");
        }
      }
    }
  }
}

TEST_P(MatMulTest, StridedInputAndOutput) {
  const auto [isa, type] = GetParam();
  IsaGuard guard(isa);
  const size_t cols = GetDTypeTraits(type)->block_size == 256 ? 256 : 64;
  const size_t rows = 5, n_tokens = 3, xs = cols + 9, ys = rows + 4;
  auto w = QuantizedWeights(type, rows, cols, 8);
  std::vector<float> x = RandomFloats(n_tokens * xs, 9);
  std::vector<float> dense_x(n_tokens * cols);
  for (size_t t = 0; t < n_tokens; ++t)
    std::memcpy(&dense_x[t * cols], &x[t * xs], cols * sizeof(float));
  std::vector<float> y(n_tokens * ys, 42.0f), yd(n_tokens * rows);
  MatMul(w.m, x.data(), n_tokens, y.data(), nullptr, xs, ys);
  MatMul(w.m, dense_x.data(), n_tokens, yd.data(), nullptr);
  for (size_t t = 0; t < n_tokens; ++t) {
    for (size_t r = 0; r < rows; ++r) EXPECT_EQ(y[t * ys + r], yd[t * rows + r]);
    for (size_t r = rows; r < ys; ++r) EXPECT_EQ(y[t * ys + r], 42.0f) << "wrote past the row";
  }
}

TEST_P(MatMulTest, ExtremeButFiniteValues) {
  const auto [isa, type] = GetParam();
  IsaGuard guard(isa);
  for (const bool dot : testing::Bf16Variants(type)) {
    testing::Bf16DotGuard variant(dot);
    const size_t cols = 512, rows = 4, n_tokens = 4;
    // Weights with large and tiny magnitudes; activations: huge, tiny, zero row, mixed.
    std::vector<float> wf = RandomFloats(rows * cols, 21, 1.0f);
    for (size_t i = 0; i < wf.size(); i += 7) wf[i] *= 3e3f;  // stays inside the f16 range
    auto w = QuantizedWeights(type, rows, cols, 1);
    for (size_t r = 0; r < rows; ++r)
      QuantizeRow(type, wf.data() + r * cols, w.bytes.data() + r * w.m.row_bytes, cols);
    std::vector<float> x = RandomFloats(n_tokens * cols, 22);
    for (size_t k = 0; k < cols; ++k) {
      x[k] *= 1e4f;
      x[cols + k] *= 1e-20f;
      x[2 * cols + k] = 0.0f;
      if (k % 13 == 0) x[3 * cols + k] = (k & 1) ? 6e4f : -6e4f;
    }
    std::vector<float> y_ref, y(n_tokens * rows);
    std::vector<double> mag;
    Reference(w.m, x, n_tokens, &y_ref, &mag);
    MatMul(w.m, x.data(), n_tokens, y.data(), nullptr);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << i;
      ASSERT_NEAR(y[i], y_ref[i], kRelTol * mag[i] + 1e-30) << DTypeName(type) << " index " << i;
    }
    for (size_t r = 0; r < rows; ++r) EXPECT_EQ(y[2 * rows + r], 0.0f);  // zero activations
  }
}

std::string ParamName(const ::testing::TestParamInfo<MatMulParam>& info) {
  return std::string(IsaName(std::get<0>(info.param))) + "_" +
         std::string(DTypeName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(
    AllIsasAllTypes, MatMulTest,
    ::testing::Combine(::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx),
                       ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                         DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K)),
    ParamName);

// The activation rounding MatMul runs at avx2 and above for F16/BF16 weights gives the scalar
// ConvertActivations' values bit for bit: random bit patterns of every exponent (f16 subnormals,
// overflow to inf, bf16 carries into the exponent), edge values, and every length's tail.
TEST(Activations, Avx2RoundingEqualsTheScalarConversion) {
  if (static_cast<int>(DetectIsa()) < static_cast<int>(Isa::kAvx2)) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(11);
  std::vector<float> x;
  for (int i = 0; i < (1 << 20); ++i) {
    uint32_t bits = rng();
    if ((bits & 0x7fffffffu) > 0x7f800000u) bits &= 0xff7fffffu;  // NaN -> a finite value
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    x.push_back(f);
  }
  for (float f :
       {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 6.0e-8f, 2.9e-8f, 3.0e-8f,
        1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 3.4e38f, std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()})
    x.push_back(f);
  for (DType t : {DType::kF16, DType::kBF16}) {
    for (size_t n : {x.size(), size_t{1}, size_t{7}, size_t{9}, size_t{15}}) {
      std::vector<float> want(n), got(n, -1.0f);
      internal::ConvertActivations(t, x.data(), want.data(), n);
      internal::Avx2RoundActivations(t, x.data(), got.data(), n);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), n * sizeof(float))) << DTypeName(t) << n;
    }
    // The 16-bit form the avx512 F16 / bf16-fma kernels read: the scalar conversions' halves.
    std::vector<uint16_t> want16(x.size()), got16(x.size(), 0xdead);
    for (size_t i = 0; i < x.size(); ++i)
      want16[i] = t == DType::kF16 ? F32ToF16(x[i]) : F32ToBF16(x[i]);
    if (t == DType::kF16) {
      internal::Avx2ToF16(x.data(), got16.data(), x.size());
    } else {
      internal::Avx2ToBf16(x.data(), got16.data(), x.size());
    }
    ASSERT_EQ(want16, got16) << DTypeName(t);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    float got = 0;
    internal::Avx2RoundActivations(t, &nan, &got, 1);
    EXPECT_TRUE(std::isnan(got));
  }
}

// The Q8_K activation quantizer of the K-quant tiles at avx2 and above writes ref::QuantizeQ8_K's
// bytes: Gaussian blocks of several scales, a zero block, ties of equal magnitude and opposite sign
// (the first one sets the sign of the scale), values that land exactly on .5 after scaling.
TEST(Activations, Avx2Q8KEqualsTheReference) {
  if (static_cast<int>(DetectIsa()) < static_cast<int>(Isa::kAvx2)) GTEST_SKIP() << "no AVX2";
  constexpr size_t kBlocks = 64, kN = kBlocks * 256;
  std::vector<float> x = RandomFloats(kN, 31);
  for (size_t b = 0; b < kBlocks; ++b)
    for (size_t i = 0; i < 256; ++i)
      x[b * 256 + i] *= std::ldexp(1.0f, static_cast<int>(b % 40) - 20);
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // block 1: zero
  x[2 * 256 + 7] = 100.0f;                            // block 2: a tie, +100 first
  x[2 * 256 + 200] = -100.0f;
  x[3 * 256 + 3] = -100.0f;  // block 3: a tie, -100 first
  x[3 * 256 + 250] = 100.0f;
  for (size_t i = 0; i < 256; ++i)
    x[4 * 256 + i] = static_cast<float>(static_cast<int>(i) - 127) * 0.5f;
  std::vector<BlockQ8_K> want(kBlocks), got(kBlocks);
  ref::QuantizeQ8_K(x.data(), want.data(), kN);
  internal::Avx2QuantizeQ8_K(x.data(), got.data(), kN);
  for (size_t b = 0; b < kBlocks; ++b) {
    ASSERT_EQ(std::bit_cast<uint32_t>(want[b].d), std::bit_cast<uint32_t>(got[b].d)) << b;
    ASSERT_EQ(0, std::memcmp(want[b].qs, got[b].qs, sizeof(want[b].qs))) << "block " << b;
    ASSERT_EQ(0, std::memcmp(want[b].bsums, got[b].bsums, sizeof(want[b].bsums))) << b;
  }
}

// ---- vector ops ----
class VecOpsTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(DetectIsa()))
      GTEST_SKIP() << "CPU lacks ISA";
  }
};

// Attend against attention computed in double precision from its definition.
TEST_P(VecOpsTest, AttendMatchesDefinition) {
  IsaGuard guard(GetParam());
  for (size_t hd : {size_t{7}, size_t{64}, size_t{80}, size_t{128}}) {
    for (size_t len : {size_t{1}, size_t{2}, size_t{5}, size_t{37}}) {
      const size_t stride = hd * 3 + 5;
      std::vector<float> q = RandomFloats(hd, 41, 1.0f), k = RandomFloats(len * stride, 42, 1.0f);
      std::vector<float> v = RandomFloats(len * stride, 43, 2.0f), scores(len), out(hd);
      const float scale = 0.3f;
      Attend(q.data(), k.data(), v.data(), stride, len, hd, scale, scores.data(), out.data());
      std::vector<double> p(len);
      double mx = -1e300, sum = 0;
      for (size_t j = 0; j < len; ++j) {
        double d = 0;
        for (size_t i = 0; i < hd; ++i) d += static_cast<double>(q[i]) * k[j * stride + i];
        p[j] = d * scale;
        mx = std::max(mx, p[j]);
      }
      for (double& e : p) sum += (e = std::exp(e - mx));
      for (size_t i = 0; i < hd; ++i) {
        double want = 0, mag = 0;
        for (size_t j = 0; j < len; ++j) {
          want += p[j] / sum * v[j * stride + i];
          mag += std::fabs(p[j] / sum * v[j * stride + i]);
        }
        ASSERT_NEAR(out[i], want, 1e-5 * mag + 1e-6) << "hd " << hd << " len " << len << " i " << i;
      }
    }
  }
}

// AttendF16 on half keys/values gives exactly Attend's bits on the same values widened to f32 (the
// runner relies on it: F16 KV attention must not depend on which path ran), and both follow the
// double-precision definition (checked above for Attend).
TEST_P(VecOpsTest, AttendF16EqualsAttendOnWidenedRows) {
  IsaGuard guard(GetParam());
  for (size_t hd :
       {size_t{7}, size_t{16}, size_t{32}, size_t{48}, size_t{64}, size_t{80}, size_t{128}}) {
    for (size_t len : {size_t{1}, size_t{2}, size_t{5}, size_t{37}, size_t{300}}) {
      const size_t stride = hd * 3 + 5;
      std::vector<float> q = RandomFloats(hd, 51, 1.0f), kf = RandomFloats(len * stride, 52, 1.0f);
      std::vector<float> vf = RandomFloats(len * stride, 53, 2.0f);
      std::vector<uint16_t> k16(kf.size()), v16(vf.size());
      for (size_t i = 0; i < kf.size(); ++i) {
        k16[i] = F32ToF16(kf[i]);
        kf[i] = F16ToF32(k16[i]);  // the widened values
        v16[i] = F32ToF16(vf[i]);
        vf[i] = F16ToF32(v16[i]);
      }
      std::vector<float> s1(len), s2(len), o1(hd), o2(hd);
      Attend(q.data(), kf.data(), vf.data(), stride, len, hd, 0.3f, s1.data(), o1.data());
      AttendF16(q.data(), 1, k16.data(), v16.data(), stride, len, hd, 0.3f, s2.data(), o2.data());
      ASSERT_EQ(0, std::memcmp(o1.data(), o2.data(), hd * sizeof(float)))
          << "hd " << hd << " len " << len;
      ASSERT_EQ(0, std::memcmp(s1.data(), s2.data(), len * sizeof(float)))
          << "hd " << hd << " len " << len;
      // Query heads sharing the rows (GQA): each head's bits as on its own.
      for (size_t group : {size_t{2}, size_t{4}, size_t{7}}) {
        const std::vector<float> qg = RandomFloats(group * hd, 54 + group, 1.0f);
        std::vector<float> sg(group * len), og(group * hd, -1.0f);
        AttendF16(qg.data(), group, k16.data(), v16.data(), stride, len, hd, 0.3f, sg.data(),
                  og.data());
        for (size_t h = 0; h < group; ++h) {
          Attend(qg.data() + h * hd, kf.data(), vf.data(), stride, len, hd, 0.3f, s1.data(),
                 o1.data());
          ASSERT_EQ(0, std::memcmp(o1.data(), og.data() + h * hd, hd * sizeof(float)))
              << "hd " << hd << " len " << len << " group " << group << " head " << h;
          ASSERT_EQ(0, std::memcmp(s1.data(), sg.data() + h * len, len * sizeof(float)))
              << "hd " << hd << " len " << len << " group " << group << " head " << h;
        }
      }
    }
  }
}

// Rows spread over blocks (shuffled, each block's rows row_stride apart, heads at an offset), and
// 1-8 query heads sharing them: AttendF16Paged gives every head the bits of AttendF16 on the same
// rows copied contiguous, for that head alone.
TEST_P(VecOpsTest, AttendF16PagedEqualsAttendF16OnCopiedRows) {
  IsaGuard guard(GetParam());
  for (unsigned shift : {0u, 2u, 4u, 5u}) {
    const size_t bs = size_t{1} << shift;
    for (size_t hd :
         {size_t{7}, size_t{16}, size_t{32}, size_t{48}, size_t{64}, size_t{80}, size_t{128}}) {
      for (size_t len : {size_t{1}, size_t{3}, size_t{17}, size_t{37}, size_t{300}}) {
        const size_t n_blocks = (len + bs - 1) / bs, row_stride = 2 * hd + 3, head_off = hd + 1;
        const size_t block_elems = bs * row_stride;
        const std::vector<float> kf = RandomFloats(n_blocks * block_elems, 62, 1.0f);
        const std::vector<float> vf = RandomFloats(n_blocks * block_elems, 63, 2.0f);
        std::vector<uint16_t> kpool(kf.size()), vpool(vf.size());
        for (size_t i = 0; i < kf.size(); ++i) {
          kpool[i] = F32ToF16(kf[i]);
          vpool[i] = F32ToF16(vf[i]);
        }
        // Logical block b lives in pool block (b * 7 + 3) % n_blocks (a permutation: 7 is coprime
        // to every n_blocks here except multiples of 7, which then repeat blocks -- still valid).
        std::vector<const uint16_t*> kb(n_blocks), vb(n_blocks);
        std::vector<uint16_t> kc(len * hd), vc(len * hd);
        for (size_t b = 0; b < n_blocks; ++b) {
          const size_t p = (b * 7 + 3) % n_blocks;
          kb[b] = kpool.data() + p * block_elems + head_off;
          vb[b] = vpool.data() + p * block_elems + head_off;
        }
        for (size_t j = 0; j < len; ++j) {
          std::memcpy(&kc[j * hd], kb[j / bs] + (j % bs) * row_stride, hd * sizeof(uint16_t));
          std::memcpy(&vc[j * hd], vb[j / bs] + (j % bs) * row_stride, hd * sizeof(uint16_t));
        }
        for (size_t group : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{5}, size_t{8}}) {
          const std::vector<float> q = RandomFloats(group * hd, 61 + group, 1.0f);
          std::vector<float> s2(group * len), o2(group * hd, -1.0f);
          AttendF16Paged(q.data(), group, kb.data(), vb.data(), shift, row_stride, len, hd, 0.3f,
                         s2.data(), o2.data());
          for (size_t h = 0; h < group; ++h) {
            std::vector<float> s1(len), o1(hd);
            AttendF16(q.data() + h * hd, 1, kc.data(), vc.data(), hd, len, hd, 0.3f, s1.data(),
                      o1.data());
            ASSERT_EQ(0, std::memcmp(o1.data(), o2.data() + h * hd, hd * sizeof(float)))
                << "block " << bs << " hd " << hd << " len " << len << " group " << group
                << " head " << h;
            ASSERT_EQ(0, std::memcmp(s1.data(), s2.data() + h * len, len * sizeof(float)))
                << "block " << bs << " hd " << hd << " len " << len << " group " << group
                << " head " << h;
          }
        }
      }
    }
  }
}

TEST_P(VecOpsTest, MatchScalarReference) {
  IsaGuard guard(GetParam());
  const auto& ref = internal::RefVecOps();
  for (size_t n : {size_t{1}, size_t{7}, size_t{16}, size_t{33}, size_t{4096}, size_t{4101}}) {
    std::vector<float> a = RandomFloats(n, 31, 3.0f), b = RandomFloats(n, 32, 3.0f);
    std::vector<float> got(n), want(n);
    // RmsNorm, with and without weight, in place.
    for (const float* wt :
         {static_cast<const float*>(b.data()), static_cast<const float*>(nullptr)}) {
      ref.rms_norm(a.data(), wt, want.data(), n, 1e-5f);
      got = a;
      RmsNorm(got.data(), wt, got.data(), n, 1e-5f);
      for (size_t i = 0; i < n; ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5f * std::fabs(want[i]) + 1e-6f) << n;
    }
    ref.silu_mul(a.data(), b.data(), want.data(), n);
    SiluMul(a.data(), b.data(), got.data(), n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_NEAR(got[i], want[i], 2e-6f * std::fabs(want[i]) + 1e-7f) << n;
    want = a;
    ref.add(want.data(), b.data(), n);
    got = a;
    Add(got.data(), b.data(), n);
    EXPECT_EQ(got, want);
    want = b;
    ref.axpy(0.37f, a.data(), want.data(), n);
    got = b;
    Axpy(0.37f, a.data(), got.data(), n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6f * (std::fabs(b[i]) + std::fabs(a[i])));
    double mag = 0;
    for (size_t i = 0; i < n; ++i) mag += std::fabs(a[i] * b[i]);
    EXPECT_NEAR(DotF32(a.data(), b.data(), n), ref.dot_f32(a.data(), b.data(), n), 1e-5 * mag);
    want = a;
    ref.softmax(want.data(), n);
    got = a;
    Softmax(got.data(), n);
    double sum = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-6f * want[i] + 1e-9f) << n;
      sum += got[i];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

TEST_P(VecOpsTest, ExtremeValues) {
  IsaGuard guard(GetParam());
  std::vector<float> x = {-1e4f,  1e4f, -90.0f, 90.0f, 0.0f,   -0.0f, 1e-30f, -1e-30f, 88.5f,
                          -87.5f, 3.0f, -3.0f,  20.0f, -20.0f, 1.0f,  2.0f,   50.0f};
  std::vector<float> up(x.size(), 1.0f), out(x.size()), want(x.size());
  SiluMul(x.data(), up.data(), out.data(), x.size());
  internal::RefVecOps().silu_mul(x.data(), up.data(), want.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(std::isfinite(out[i])) << x[i];
    EXPECT_NEAR(out[i], want[i], 2e-6f * std::fabs(want[i]) + 1e-30f) << x[i];
  }
  std::vector<float> s = x;
  Softmax(s.data(), s.size());
  EXPECT_NEAR(s[1], 1.0f, 1e-6f);  // 1e4 dominates everything
  for (float v : s) ASSERT_TRUE(std::isfinite(v) && v >= 0.0f);
  std::vector<float> r(x.size());
  RmsNorm(x.data(), nullptr, r.data(), x.size(), 1e-6f);
  for (float v : r) ASSERT_TRUE(std::isfinite(v));
}

INSTANTIATE_TEST_SUITE_P(AllIsas, VecOpsTest,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx),
                         [](const auto& info) { return std::string(IsaName(info.param)); });

TEST(IsaControl, SetIsaClampsToDetected) {
  const Isa saved = ActiveIsa();
  SetIsa(Isa::kScalar);
  EXPECT_EQ(ActiveIsa(), Isa::kScalar);
  SetIsa(Isa::kAvx512);
  EXPECT_LE(static_cast<int>(ActiveIsa()), static_cast<int>(DetectIsa()));
  EXPECT_EQ(ActiveIsa(), static_cast<int>(DetectIsa()) >= static_cast<int>(Isa::kAvx512)
                             ? Isa::kAvx512
                             : DetectIsa());
  SetIsa(Isa::kAmx);
  EXPECT_EQ(ActiveIsa(), DetectIsa());
  SetIsa(saved);
  EXPECT_EQ(IsaName(Isa::kAvx2), "avx2");
  EXPECT_EQ(IsaName(Isa::kAmx), "amx");
}

TEST(IsaControl, SupportedTypes) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K})
    EXPECT_TRUE(IsSupported(t)) << DTypeName(t);
  for (DType t : {DType::kQ4_1, DType::kQ2_K, DType::kIQ4_NL, DType::kQ8_K})
    EXPECT_FALSE(IsSupported(t));
}

// The AVX2 activation quantizer of the tile kernels (Q4_0/Q8_0 weights) writes the reference's
// bytes: amax, the f16 scale and round-half-even of x * 127/amax, also on ties, zeros and blocks
// of one value.
TEST(Avx2QuantizeQ8_0, BitIdenticalToReference) {
  if (static_cast<int>(DetectIsa()) < static_cast<int>(Isa::kAvx2))
    GTEST_SKIP() << "CPU lacks avx2";
  constexpr size_t kBlocks = 67;
  std::vector<float> x = RandomFloats(kBlocks * kQK8_0, 11);
  for (size_t i = 0; i < kQK8_0; ++i) x[i] = 0.0f;            // block 0: zeros
  for (size_t i = 0; i < kQK8_0; ++i) x[kQK8_0 + i] = -3.5f;  // block 1: one value
  for (size_t i = 0; i < kQK8_0; ++i) x[2 * kQK8_0 + i] = (i % 2 ? 0.5f : -0.5f) + i;  // ties
  x[2 * kQK8_0] = 127.0f;  // amax 127: x * id is x, so the .5 values are exact ties
  for (size_t i = 0; i < kQK8_0; ++i) x[3 * kQK8_0 + i] *= 1e-30f;  // tiny
  for (size_t i = 0; i < kQK8_0; ++i) x[4 * kQK8_0 + i] *= 6e4f;    // large
  std::vector<BlockQ8_0> want(kBlocks), got(kBlocks);
  ref::QuantizeQ8_0(x.data(), want.data(), x.size());
  internal::Avx2QuantizeQ8_0(x.data(), got.data(), x.size());
  for (size_t b = 0; b < kBlocks; ++b)
    EXPECT_EQ(std::memcmp(&want[b], &got[b], sizeof(BlockQ8_0)), 0) << "block " << b;
}

}  // namespace
}  // namespace strata::kernels
