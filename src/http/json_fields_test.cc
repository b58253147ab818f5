#include "http/json_fields.h"

#include <gtest/gtest.h>

namespace strata::http {
namespace {

using nlohmann::json;

// Every reader, given every JSON type it does not accept, answers a 400 naming the field.
TEST(JsonFields, WrongTypesAreErrorsNamingTheField) {
  const json values[] = {json(true), json(1), json(1.5), json("s"), json::array(), json::object()};
  for (const json& v : values) {
    json body = {{"f", v}};
    Fields f(body, "outer.");
    bool b = false;
    int i = 0;
    float x = 0;
    std::string s;
    const json* o = nullptr;
    auto check = [&](const ApiError& e, bool accepted) {
      if (accepted) {
        EXPECT_TRUE(e.ok()) << v.dump();
      } else {
        ASSERT_FALSE(e.ok()) << v.dump();
        EXPECT_EQ(e.param(), "outer.f");
        EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
        EXPECT_EQ(e.message().rfind("outer.f: ", 0), 0u) << e.message();
      }
    };
    check(f.Bool("f", &b), v.is_boolean());
    check(f.Int("f", -10, 10, &i), v.is_number_integer());
    check(f.Float("f", {-10, 10}, &x), v.is_number() && !v.is_boolean());
    check(f.String("f", &s), v.is_string());
    check(f.Object("f", &o), v.is_object());
    check(f.Array("f", &o), v.is_array());
  }
}

TEST(JsonFields, AbsentAndNullKeepTheDefault) {
  json body = {{"n", nullptr}};
  for (const json& b : {body, json::object(), json::array(), json(3)}) {
    Fields f(b);
    int i = 7;
    EXPECT_TRUE(f.Int("n", 0, 10, &i).ok());
    EXPECT_EQ(i, 7);
    EXPECT_FALSE(f.Has("n"));
    EXPECT_FALSE(f.Required("n").ok());
  }
}

TEST(JsonFields, RangesAndBigIntegers) {
  json body = {{"a", 11}, {"b", 18446744073709551615ull}, {"c", -1}, {"t", 0}, {"e", "x"}};
  Fields f(body);
  int64_t v = 0;
  EXPECT_FALSE(f.Int("a", 0, 10, &v).ok());
  EXPECT_FALSE(f.Int("b", 0, INT64_MAX - 1, &v).ok());
  EXPECT_TRUE(f.Int("b", 0, INT64_MAX, &v).ok());
  EXPECT_EQ(v, INT64_MAX);
  int small = 0;
  EXPECT_FALSE(f.Int("c", 0, 10, &small).ok());
  float x = 1;
  auto e = f.Float("t", {.lo = 0, .hi = 1, .lo_open = true}, &x);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("(0, 1]"), std::string::npos) << e.message();
  constexpr std::string_view kAllowed[] = {"x", "y"};
  std::string s;
  EXPECT_TRUE(f.Enum("e", kAllowed, &s).ok());
  EXPECT_EQ(s, "x");
  EXPECT_FALSE(f.Enum("a", kAllowed, &s).ok());
}

TEST(JsonFields, TokenIdsCheckTheVocabulary) {
  EXPECT_TRUE(TokenIds(json::array({0, 9}), "p", 10).ok());
  EXPECT_FALSE(TokenIds(json::array({10}), "p", 10).ok());
  EXPECT_FALSE(TokenIds(json::array({-1}), "p", 10).ok());
  EXPECT_FALSE(TokenIds(json::array({1.0}), "p", 10).ok());
  EXPECT_FALSE(TokenIds(json::array({18446744073709551615ull}), "p", 10).ok());
  auto e = TokenIds(json("x"), "p", 10);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().param(), "p");
}

}  // namespace
}  // namespace strata::http
