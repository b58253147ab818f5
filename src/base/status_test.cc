#include "base/status.h"

#include <gtest/gtest.h>

#include "base/checked.h"

namespace strata {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status UseHalf(int x, int* out) {
  ASSIGN_OR_RETURN(int h, Half(x));
  *out = h;
  return Status::Ok();
}

TEST(StatusTest, OkAndErrors) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.ToString(), "OK");
  Status e = Status::NotFound("x").WithContext("loading");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.code(), StatusCode::kNotFound);
  EXPECT_EQ(e.ToString(), "NOT_FOUND: loading: x");
}

TEST(StatusTest, FieldIsCarriedAsAValue) {
  Status e = Status::InvalidField("max_tokens", "must be >= 1");
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.message(), "max_tokens: must be >= 1");
  EXPECT_EQ(e.field(), "max_tokens");
  // Context goes in front of the message; the field stays what it was.
  Status c = e.WithContext("request 7");
  EXPECT_EQ(c.message(), "request 7: max_tokens: must be >= 1");
  EXPECT_EQ(c.field(), "max_tokens");
  // Without a field, nothing is guessed from the message.
  EXPECT_EQ(Status::InvalidArgument("n: bad").field(), "");
  EXPECT_EQ(Status::InvalidArgument("x").WithField("n").field(), "n");
  EXPECT_EQ(Status::InvalidArgument("x").WithField("n").message(), "x");
  // OK stays OK (no field on it).
  EXPECT_TRUE(Status::Ok().WithField("n").ok());
  EXPECT_EQ(Status::Ok().WithField("n").field(), "");
}

TEST(StatusTest, ResultAndMacros) {
  int out = 0;
  EXPECT_TRUE(UseHalf(8, &out).ok());
  EXPECT_EQ(out, 4);
  Status s = UseHalf(7, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd: 7");
}

TEST(CheckedTest, Overflow) {
  EXPECT_FALSE(CheckedMul(UINT64_MAX / 2 + 1, 2).has_value());
  EXPECT_EQ(*CheckedMul(3, 5), 15u);
  EXPECT_FALSE(CheckedAdd(UINT64_MAX, 1).has_value());
  EXPECT_EQ(*CheckedAlignUp(33, 32), 64u);
  EXPECT_FALSE(CheckedAlignUp(UINT64_MAX - 1, 32).has_value());
  EXPECT_FALSE(CheckedAlignUp(5, 0).has_value());
}

}  // namespace
}  // namespace strata
