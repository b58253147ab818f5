// Renders every real template in shared/templates against the goldens in shared/golden/chat
// (produced by the reference Jinja2 configured as transformers does) and compares byte for byte.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "testing/shared_dir.h"
#include "tokenizer/chat/chat_template.h"

namespace strata::tokenizer::chat {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ChatGoldenTest, AllGoldensMatch) {
  STRATA_REQUIRE_SHARED(golden_dir, "golden/chat");
  STRATA_REQUIRE_SHARED(template_dir, "templates");
  int files = 0, cases = 0, passed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(golden_dir)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    auto golden = nlohmann::ordered_json::parse(ReadFile(entry.path().string()));
    std::string tpl_name = golden["template_file"].get<std::string>();
    std::string source = ReadFile(template_dir + "/" + tpl_name);
    ASSERT_FALSE(source.empty()) << tpl_name;
    auto tpl = ChatTemplate::Parse(source);
    ASSERT_TRUE(tpl.ok()) << tpl_name << ": " << tpl.status().ToString();
    for (const auto& c : golden["cases"]) {
      ++cases;
      ChatInputs in;
      in.messages = c["messages"];
      in.add_generation_prompt = c.value("add_generation_prompt", false);
      in.bos_token = c.value("bos_token", "");
      in.eos_token = c.value("eos_token", "");
      if (c.contains("tools") && !c["tools"].is_null()) in.tools = c["tools"];
      if (c.contains("variables") && c["variables"].is_object()) in.variables = c["variables"];
      auto ctx = BuildChatContext(in);
      ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
      RenderOptions opts;
      opts.strftime_now = FixedClockStrftime(1721995200);  // 2024-07-26T12:00:00Z
      auto out = (*tpl)->Render(*ctx, opts);
      std::string label = tpl_name + " / " + c.value("id", "?");
      if (c["expected"].is_null()) {
        EXPECT_FALSE(out.ok()) << label << ": expected an error, got output";
        if (!out.ok()) {
          EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << label;
          if (c.contains("expected_error") && c["expected_error"].is_string()) {
            EXPECT_EQ(out.status().message(), c["expected_error"].get<std::string>()) << label;
            if (out.status().message() == c["expected_error"].get<std::string>()) ++passed;
          } else {
            ++passed;
          }
        }
        continue;
      }
      ASSERT_TRUE(out.ok()) << label << ": " << out.status().ToString();
      EXPECT_EQ(*out, c["expected"].get<std::string>()) << label;
      if (*out == c["expected"].get<std::string>()) ++passed;
    }
  }
  EXPECT_GT(files, 0);
  std::printf("chat goldens: %d/%d cases passed over %d templates\n", passed, cases, files);
  EXPECT_EQ(passed, cases);
}

}  // namespace
}  // namespace strata::tokenizer::chat
