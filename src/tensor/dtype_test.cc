#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace strata {
namespace {

TEST(DTypeTest, TraitsAndRowBytes) {
  EXPECT_EQ(GetDTypeTraits(DType::kQ4_K)->type_size, 144u);
  EXPECT_EQ(*RowBytes(DType::kQ8_0, 64), 68u);
  EXPECT_FALSE(RowBytes(DType::kQ8_0, 33).has_value());
  EXPECT_FALSE(GetDTypeTraits(4u).has_value());  // retired id
  EXPECT_FALSE(GetDTypeTraits(1000u).has_value());
  EXPECT_EQ(*ParseDType("Q6_K"), DType::kQ6_K);
  EXPECT_EQ(*ParseDType("bf16"), DType::kBF16);
  EXPECT_FALSE(ParseDType("q9_9").has_value());
}

// Reference conversion through double, independent of the bit-twiddling in fp16.h.
double HalfValue(uint16_t h) {
  int s = (h >> 15) ? -1 : 1;
  int e = (h >> 10) & 31;
  int m = h & 1023;
  if (e == 0) return s * std::ldexp(m, -24);
  if (e == 31) return m ? NAN : s * INFINITY;
  return s * std::ldexp(1024 + m, e - 25);
}

TEST(Fp16Test, AllHalvesRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    double v = HalfValue(static_cast<uint16_t>(h));
    float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(f));
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), v) << h;
    uint16_t back = F32ToF16(f);
    ASSERT_EQ(back, h) << h;
  }
}

TEST(Fp16Test, RoundsToNearestEven) {
  // Between 1.0 (0x3c00) and next half 1+2^-10: midpoint rounds to even (1.0).
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(F32ToF16(1e6f), 0x7c00);                   // overflow to inf
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -26)), 0x0000);  // below half of min subnormal... ties to 0
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
  // Brute-force check against double arithmetic on a sweep of floats.
  for (uint32_t bits = 0x33000000u; bits < 0x477ff000u; bits += 4097) {
    float f;
    std::memcpy(&f, &bits, 4);
    uint16_t h = F32ToF16(f);
    double v = HalfValue(h);
    double lo = HalfValue(static_cast<uint16_t>(h - 1)),
           hi = HalfValue(static_cast<uint16_t>(h + 1));
    if (h != 0) {
      ASSERT_LE(std::fabs(v - f), std::fabs(lo - f)) << bits;
    }
    if (h != 0x7bff) {
      ASSERT_LE(std::fabs(v - f), std::fabs(hi - f)) << bits;
    }
  }
}

TEST(Bf16Test, RoundTrip) {
  EXPECT_EQ(BF16ToF32(F32ToBF16(1.0f)), 1.0f);
  EXPECT_EQ(F32ToBF16(1.00390625f), 0x3f80);  // tie -> even
  EXPECT_EQ(F32ToBF16(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(NAN))));
}

}  // namespace
}  // namespace strata
