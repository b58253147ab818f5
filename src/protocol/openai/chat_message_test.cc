#include "protocol/openai/chat_message.h"

#include <gtest/gtest.h>

namespace strata::protocol {
namespace {

using nlohmann::json;

TEST(ChatMessage, TextPartsJoinedOtherFieldsKept) {
  json m = {{"role", "user"},
            {"content",
             json::array({{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}})},
            {"name", "n"}};
  auto om = TemplateMessage(m, 0);
  ASSERT_TRUE(om.ok()) << om.status().message();
  EXPECT_EQ((*om)["content"], "ab");
  EXPECT_EQ((*om)["name"], "n");
  auto null_content = TemplateMessage(json{{"role", "assistant"}}, 0);
  ASSERT_TRUE(null_content.ok());
  EXPECT_FALSE(null_content->contains("content"));
}

TEST(ChatMessage, ErrorsNameTheMessageAndCarryTheField) {
  struct Case {
    json m;
    std::string message;
  };
  const Case cases[] = {
      {json(3), "messages[2]: must be an object"},
      {json{{"content", "x"}}, "messages[2].role: must be a string"},
      {json{{"role", "user"}, {"content", 5}},
       "messages[2].content: must be a string, an array of text parts or null"},
      {json{{"role", "user"}, {"content", json::array({{{"type", "image_url"}}})}},
       "messages[2].content: only text content parts are supported"},
  };
  for (const Case& c : cases) {
    auto r = TemplateMessage(c.m, 2);
    ASSERT_FALSE(r.ok()) << c.m;
    EXPECT_EQ(r.status().message(), c.message);
    EXPECT_EQ(r.status().field(), "messages");
  }
}

TEST(ChatMessage, ListBounds) {
  EXPECT_EQ(TemplateMessages(json("x")).status().message(), "messages: must be an array");
  EXPECT_EQ(TemplateMessages(json::array()).status().message(),
            "messages: must contain at least one message");
  json two = json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "user"}}});
  EXPECT_EQ(TemplateMessages(two, 1).status().message(), "messages: more than 1 messages");
  auto ok = TemplateMessages(two, 2);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->size(), 2u);
}

}  // namespace
}  // namespace strata::protocol
