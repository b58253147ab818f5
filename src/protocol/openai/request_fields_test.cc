#include "protocol/openai/request_fields.h"

#include <gtest/gtest.h>

namespace strata::protocol {
namespace {

using nlohmann::json;

TEST(RequestFields, ModelAndLora) {
  auto m = ReadModelFields(json{{"model", "base"}, {"lora", "sql"}});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->model, "base");
  EXPECT_EQ(m->lora, "sql");
  auto none = ReadModelFields(json::object());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->model, "");
  auto bad = ReadModelFields(json{{"lora", 3}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().param(), "lora");
}

TEST(RequestFields, PriorityBodyWinsOverHeader) {
  auto p = ReadPriority(json{{"priority", "gold"}}, "bronze");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(**p, Priority::kGold);
  p = ReadPriority(json{{"priority", 5}}, "gold");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(**p, Priority::kBronze);
  p = ReadPriority(json{{"priority", -1}}, "");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(**p, Priority::kGold);
  p = ReadPriority(json::object(), "bronze");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(**p, Priority::kBronze);
  p = ReadPriority(json::object(), "");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->has_value());
}

TEST(RequestFields, PriorityErrorsNameTheFieldOrHeader) {
  for (const json& v : {json("platinum"), json(1.5), json::array(), json(true)}) {
    auto p = ReadPriority(json{{"priority", v}}, "");
    ASSERT_FALSE(p.ok()) << v;
    EXPECT_EQ(p.error().param(), "priority") << v;
    EXPECT_EQ(p.error().status().code(), StatusCode::kInvalidArgument);
  }
  auto h = ReadPriority(json::object(), "Gold");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.error().param(), kHeaderTier);
  EXPECT_NE(h.error().message().find("'Gold'"), std::string::npos);
}

TEST(RequestFields, MaxTokensPrecedenceAndBounds) {
  const MaxTokensBounds b{1, 100};
  auto m = ReadMaxTokens(json{{"max_tokens", 7}}, /*chat=*/false, b);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(**m, 7);
  // Chat: max_completion_tokens wins; completions ignore it.
  m = ReadMaxTokens(json{{"max_tokens", 7}, {"max_completion_tokens", 9}}, true, b);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(**m, 9);
  m = ReadMaxTokens(json{{"max_tokens", 7}, {"max_completion_tokens", 9}}, false, b);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(**m, 7);
  m = ReadMaxTokens(json::object(), true, b);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->has_value());
  auto over = ReadMaxTokens(json{{"max_tokens", 101}}, false, b);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().param(), "max_tokens");
  auto zero = ReadMaxTokens(json{{"max_completion_tokens", 0}}, true, {0, 100});
  ASSERT_FALSE(zero.ok());  // 0 is for echo, which chat does not have
  EXPECT_EQ(zero.error().param(), "max_completion_tokens");
  auto echo = ReadMaxTokens(json{{"max_tokens", 0}}, false, {0, 100});
  ASSERT_TRUE(echo.ok());
  EXPECT_EQ(**echo, 0);
  auto text = ReadMaxTokens(json{{"max_tokens", "5"}}, false, b);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.error().param(), "max_tokens");
}

}  // namespace
}  // namespace strata::protocol
