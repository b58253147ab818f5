// base/capped_copy.h: bytes are kept up to the cap; past it the copy is dropped for good.
#include "base/capped_copy.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(CappedCopyTest, KeepsUpToTheCap) {
  CappedCopy c;
  c.Append("abc", 5);
  c.Append("de", 5);
  EXPECT_EQ(c.bytes, "abcde");
  EXPECT_FALSE(c.over);
}

TEST(CappedCopyTest, PastTheCapDropsTheCopyForGood) {
  CappedCopy c;
  c.Append("abc", 4);
  c.Append("de", 4);
  EXPECT_TRUE(c.over);
  EXPECT_EQ(c.bytes, "");
  c.Append("x", 4);  // small enough alone, but the copy stays dropped
  EXPECT_TRUE(c.over);
  EXPECT_EQ(c.bytes, "");
}

}  // namespace
}  // namespace strata
