// base/random_bytes.h: ids from FillRandomBytes differ; AppendHexLower spells bytes as lower hex.
#include "base/random_bytes.h"

#include <gtest/gtest.h>

#include <array>
#include <string>

namespace strata {
namespace {

TEST(RandomBytesTest, FillsAndDiffers) {
  std::array<unsigned char, 16> a{}, b{};
  FillRandomBytes(a);
  FillRandomBytes(b);
  EXPECT_NE(a, b);                     // 2^-128 chance of a false failure
  std::array<unsigned char, 7> odd{};  // a size that is not a multiple of 4
  FillRandomBytes(odd);
}

TEST(RandomBytesTest, HexLower) {
  const std::array<unsigned char, 4> bytes = {0x00, 0x0f, 0xa5, 0xff};
  std::string s = "id-";
  AppendHexLower(bytes, &s);
  EXPECT_EQ(s, "id-000fa5ff");
}

}  // namespace
}  // namespace strata
