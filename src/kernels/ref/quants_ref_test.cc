// Known-answer and accuracy tests of the scalar reference kernels. Expected values come from the
// GGUF/ggml format definitions (block layouts, nibble order, scale packing), computed by hand here.
#include "kernels/ref/quants_ref.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/test_util.h"
#include "tensor/fp16.h"

namespace strata::kernels {
namespace {

constexpr uint16_t kHalf = 0x3800;  // 0.5 in f16
constexpr uint16_t kOne = 0x3C00;   // 1.0 in f16

TEST(RefKnownAnswer, Q4_0Block) {
  BlockQ4_0 b;
  b.d = kHalf;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  DequantizeRow(DType::kQ4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;       // low nibbles: elements 0..15
    EXPECT_EQ(y[j + 16], (7 - j) * 0.5f) << j;  // high nibbles: elements 16..31
  }
}

TEST(RefKnownAnswer, Q8_0Block) {
  BlockQ8_0 b;
  b.d = 0x3400;  // 0.25
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  float y[32];
  DequantizeRow(DType::kQ8_0, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j * 8 - 128) * 0.25f);
}

// 12-byte K-quant scale field written from the format definition: bytes 0-3 hold scales 0-3 (low
// 6 bits) and the top 2 bits of scales 4-7; bytes 4-7 the same for mins; bytes 8-11 the low 4 bits
// of scale j+4 (low nibble) and min j+4 (high nibble).
void HandPackScales(const int sc[8], const int mn[8], uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

constexpr int kSc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
constexpr int kMn[8] = {0, 1, 2, 63, 20, 40, 9, 5};

TEST(RefKnownAnswer, KScalePacking) {
  uint8_t hand[12], packed[12];
  HandPackScales(kSc, kMn, hand);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j)
    sc[j] = static_cast<uint8_t>(kSc[j]), mn[j] = static_cast<uint8_t>(kMn[j]);
  ref::PackScaleMinK4(sc, mn, packed);
  EXPECT_EQ(0, std::memcmp(hand, packed, 12));
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    ref::UnpackScaleMinK4(j, hand, &s, &m);
    EXPECT_EQ(s, kSc[j]);
    EXPECT_EQ(m, kMn[j]);
  }
}

TEST(RefKnownAnswer, Q4_KBlock) {
  BlockQ4_K b;
  b.d = kOne;
  b.dmin = kHalf;
  HandPackScales(kSc, kMn, b.scales);
  std::memset(b.qs, 0x31, sizeof(b.qs));  // low nibble 1, high nibble 3
  float y[256];
  DequantizeRow(DType::kQ4_K, &b, y, 256);
  // Each 32-byte chunk k of qs: low nibbles are sub-block 2k, high nibbles sub-block 2k+1.
  for (int i = 0; i < 256; ++i) {
    const int sub = i / 32;
    const int level = (sub % 2 == 0) ? 1 : 3;
    EXPECT_EQ(y[i], 1.0f * kSc[sub] * level - 0.5f * kMn[sub]) << i;
  }
}

TEST(RefKnownAnswer, Q5_KBlock) {
  BlockQ5_K b;
  b.d = kOne;
  b.dmin = kHalf;
  HandPackScales(kSc, kMn, b.scales);
  std::memset(b.qs, 0x31, sizeof(b.qs));
  std::memset(b.qh, 0x55, sizeof(b.qh));  // bit s of qh[l] is the 5th bit of sub-block s: even set
  float y[256];
  DequantizeRow(DType::kQ5_K, &b, y, 256);
  for (int i = 0; i < 256; ++i) {
    const int sub = i / 32;
    const int level = (sub % 2 == 0) ? 1 + 16 : 3;
    EXPECT_EQ(y[i], 1.0f * kSc[sub] * level - 0.5f * kMn[sub]) << i;
  }
}

TEST(RefKnownAnswer, Q6_KBlock) {
  BlockQ6_K b;
  b.d = kHalf;
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(g - 8);
  std::memset(b.ql, 0x21, sizeof(b.ql));  // low nibble 1, high nibble 2
  std::memset(b.qh, 0xE4, sizeof(b.qh));  // 2-bit fields 0,1,2,3 (from the low bits up)
  // Per 128-value half: values 0-31 = ql low | qh bits 0-1, 32-63 = ql[+32] low | bits 2-3,
  // 64-95 = ql high | bits 4-5, 96-127 = ql[+32] high | bits 6-7; stored level minus 32.
  const int level[4] = {1 - 32, (1 | 16) - 32, (2 | 32) - 32, (2 | 48) - 32};
  float y[256];
  DequantizeRow(DType::kQ6_K, &b, y, 256);
  for (int i = 0; i < 256; ++i) {
    const int quarter = (i % 128) / 32;
    EXPECT_EQ(y[i], 0.5f * static_cast<float>(i / 16 - 8) * static_cast<float>(level[quarter]))
        << i;
  }
}

TEST(RefKnownAnswer, Q8_KQuantization) {
  std::vector<float> x(256, 0.0f);
  x[0] = -2.0f;   // largest magnitude: iscale = -127 / -2 = 63.5
  x[1] = 1.0f;    // 63.5 -> tie, rounds to even 64
  x[2] = 0.5f;    // 31.75 -> 32
  x[3] = -1.5f;   // -95.25 -> -95
  x[17] = 0.01f;  // 0.635 -> 1
  BlockQ8_K b;
  QuantizeRow(DType::kQ8_K, x.data(), &b, 256);
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], 64);
  EXPECT_EQ(b.qs[2], 32);
  EXPECT_EQ(b.qs[3], -95);
  EXPECT_EQ(b.qs[17], 1);
  EXPECT_FLOAT_EQ(b.d, 1.0f / 63.5f);
  EXPECT_EQ(b.bsums[0], -127 + 64 + 32 - 95);
  EXPECT_EQ(b.bsums[1], 1);
  for (int g = 2; g < 16; ++g) EXPECT_EQ(b.bsums[g], 0);
}

TEST(RefKnownAnswer, Q8_0Quantization) {
  float x[32] = {};
  x[0] = 127.0f;  // amax 127: d = 1, x/d exact so the rounding rule shows
  x[1] = -63.5f;  // tie -> even -64
  x[2] = 0.5f;    // tie -> 0
  x[3] = 1.5f;    // tie -> 2
  x[4] = 2.5f;    // tie -> 2
  x[5] = -3.7f;   // -> -4
  BlockQ8_0 b;
  QuantizeRow(DType::kQ8_0, x, &b, 32);
  EXPECT_EQ(b.d, kOne);
  const int expected[6] = {127, -64, 0, 2, 2, -4};
  for (int j = 0; j < 6; ++j) EXPECT_EQ(b.qs[j], expected[j]) << j;
}

TEST(RefKnownAnswer, Q4_0Quantization) {
  float x[32] = {};
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j % 16 - 8) * 0.25f;  // -2 .. 1.75
  BlockQ4_0 b;
  QuantizeRow(DType::kQ4_0, x, &b, 32);
  EXPECT_EQ(F16ToF32(b.d), 0.25f);  // d = (value of largest magnitude, -2) / -8
  float y[32];
  DequantizeRow(DType::kQ4_0, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]);
}

// ggml multiplies F16 (BF16) weights with activations converted to F16 (BF16).
TEST(RefKnownAnswer, FloatWeightActivationsAreRoundedToWeightType) {
  const float x[2] = {1.0f + 0x1p-12f, 1.0f + 0x1p-9f};  // below half an f16 / bf16 ulp of 1.0
  float f16[2], bf16[2], f32[2];
  internal::ConvertActivations(DType::kF16, x, f16, 2);
  internal::ConvertActivations(DType::kBF16, x, bf16, 2);
  internal::ConvertActivations(DType::kF32, x, f32, 2);
  EXPECT_EQ(f16[0], 1.0f);
  EXPECT_EQ(f16[1], 1.0f + 0x1p-9f);  // representable in f16 (10 mantissa bits)
  EXPECT_EQ(bf16[0], 1.0f);
  EXPECT_EQ(bf16[1], 1.0f);  // bf16 has 7 mantissa bits
  EXPECT_EQ(f32[0], x[0]);
}

TEST(RefKnownAnswer, ZeroRowsQuantizeToZero) {
  for (DType t :
       {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K}) {
    std::vector<float> x(256, 0.0f), y(256, 1.0f);
    std::vector<uint8_t> q(*RowBytes(t, 256));
    QuantizeRow(t, x.data(), q.data(), 256);
    DequantizeRow(t, q.data(), y.data(), 256);
    for (float v : y) ASSERT_EQ(v, 0.0f) << DTypeName(t);
  }
}

// ---- quantize -> dequantize error bounds ----
struct RoundTripCase {
  DType type;
  double max_rel_rms;  // RMS(error) / RMS(x) for Gaussian rows
};

class RoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(RoundTripTest, ErrorWithinBound) {
  const auto c = GetParam();
  const size_t n = 4352;
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    std::vector<float> x = testing::RandomFloats(n, seed, seed == 3 ? 1e3f : 1.0f);
    std::vector<uint8_t> q(*RowBytes(c.type, n));
    std::vector<float> y(n);
    QuantizeRow(c.type, x.data(), q.data(), n);
    DequantizeRow(c.type, q.data(), y.data(), n);
    double e2 = 0, x2 = 0;
    for (size_t i = 0; i < n; ++i) {
      e2 += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
      x2 += static_cast<double>(x[i]) * x[i];
    }
    EXPECT_LT(std::sqrt(e2 / x2), c.max_rel_rms) << DTypeName(c.type) << " seed " << seed;
  }
}

// Bounds: a b-bit uniform quantizer over a Gaussian block range gives RMS error ~ step/sqrt(12);
// the bounds leave ~1.5x headroom over what these quantizers reach.
INSTANTIATE_TEST_SUITE_P(
    AllTypes, RoundTripTest,
    ::testing::Values(RoundTripCase{DType::kF16, 5e-4}, RoundTripCase{DType::kBF16, 4e-3},
                      RoundTripCase{DType::kQ8_0, 0.01}, RoundTripCase{DType::kQ4_0, 0.15},
                      RoundTripCase{DType::kQ4_K, 0.12}, RoundTripCase{DType::kQ5_K, 0.06},
                      RoundTripCase{DType::kQ6_K, 0.03}, RoundTripCase{DType::kQ8_K, 0.01}),
    [](const auto& info) { return std::string(DTypeName(info.param.type)); });

// Q8_0: every element within half a step (plus the f16 rounding of d) of its input.
TEST(RefRoundTrip, Q8_0ElementBound) {
  std::vector<float> x = testing::RandomFloats(1024, 7);
  std::vector<BlockQ8_0> q(1024 / 32);
  std::vector<float> y(1024);
  QuantizeRow(DType::kQ8_0, x.data(), q.data(), 1024);
  DequantizeRow(DType::kQ8_0, q.data(), y.data(), 1024);
  for (size_t i = 0; i < 1024; ++i) {
    const float d = F16ToF32(q[i / 32].d);
    EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f * d + 127.0f * d * 1e-3f) << i;
  }
}

// ---- reference dot products vs an fp64 dot of the dequantized operands ----
class RefDotTest : public ::testing::TestWithParam<DType> {};

TEST_P(RefDotTest, MatchesFp64OfDequantized) {
  const DType t = GetParam();
  const DType act = internal::ActivationType(t);
  for (size_t cols : {size_t{256}, size_t{4352}}) {
    for (int mode = 0; mode < 2; ++mode) {
      auto w = mode == 0 ? testing::QuantizedWeights(t, 1, cols, 11)
                         : testing::RandomBitsWeights(t, 1, cols, 12);
      std::vector<float> x = testing::RandomFloats(cols, 13);
      std::vector<uint8_t> xq(*RowBytes(act, cols));
      internal::ConvertActivations(t, x.data(), xq.data(), cols);
      std::vector<float> wd(cols), xd(cols);
      DequantizeRow(t, w.m.data, wd.data(), cols);
      DequantizeRow(act, xq.data(), xd.data(), cols);
      double exact = 0, mag = 0;
      for (size_t i = 0; i < cols; ++i) {
        exact += static_cast<double>(wd[i]) * xd[i];
        mag += std::fabs(static_cast<double>(wd[i]) * xd[i]);
      }
      float got;
      internal::RefDotTile(t)(w.m.data, xq.data(), 0, 1, cols, &got);
      // f32 products/accumulation (and K-quants' f32 per-block scale products) vs fp64.
      EXPECT_NEAR(got, exact, 2e-5 * mag + 1e-30)
          << DTypeName(t) << " cols " << cols << " mode " << mode;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, RefDotTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                           DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace strata::kernels
