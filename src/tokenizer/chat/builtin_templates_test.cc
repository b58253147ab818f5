// The built-in templates (builtin_templates.h): each one parses, and renders the goldens of the
// model family it is named after (shared/golden/chat, from the publishers' own templates) byte
// for byte — every case of the family, except the few listed below where the family's template
// adds something model-specific that the generic format does not have.
#include "tokenizer/chat/builtin_templates.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "testing/shared_dir.h"
#include "tokenizer/chat/chat_template.h"

namespace strata::tokenizer::chat {
namespace {

struct GoldenFamily {
  std::string_view builtin;
  std::string_view golden_file;
  std::set<std::string> skip;  // case ids the family renders with a model-specific addition
};

const GoldenFamily kFamilies[] = {
    // Qwen3 writes an empty <think></think> block into the last assistant turn; Qwen2.5 adds its
    // own default system prompt when there is none: both beyond plain ChatML.
    {"chatml", "Qwen-Qwen3-0.6B.json", {"no-gen-prompt"}},
    {"chatml", "Qwen-Qwen2.5-7B-Instruct.json", {"one-user", "unicode", "no-gen-prompt"}},
    {"llama3", "meta-llama-Llama-3.1-8B-Instruct.json", {}},
    {"llama3", "meta-llama-Llama-3.2-3B-Instruct.json", {}},
    {"mistral", "mistralai-Mistral-Nemo-Instruct-2407.json", {}},
    {"gemma", "google-gemma-2-2b-it.json", {}},
    {"phi3", "microsoft-Phi-3.5-mini-instruct.json", {}},
    {"deepseek-r1", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.json", {}},
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(BuiltinTemplates, NamesAreUniqueAndEveryOneParses) {
  std::set<std::string_view> names;
  for (const BuiltinTemplate& t : BuiltinTemplates()) {
    EXPECT_TRUE(names.insert(t.name).second) << t.name;
    EXPECT_EQ(FindBuiltinTemplate(t.name), &t);
    auto parsed = ChatTemplate::Parse(t.source);
    EXPECT_TRUE(parsed.ok()) << t.name << ": " << parsed.status().ToString();
  }
  EXPECT_EQ(FindBuiltinTemplate("no-such-template"), nullptr);
  EXPECT_EQ(BuiltinTemplateNames(), "chatml, llama3, mistral, gemma, phi3, deepseek-r1");
}

TEST(BuiltinTemplates, RenderTheGoldensOfTheirFamily) {
  STRATA_REQUIRE_SHARED(golden_dir, "golden/chat");
  std::set<std::string_view> covered;
  for (const GoldenFamily& fam : kFamilies) {
    const BuiltinTemplate* bt = FindBuiltinTemplate(fam.builtin);
    ASSERT_NE(bt, nullptr) << fam.builtin;
    auto tpl = ChatTemplate::Parse(bt->source);
    ASSERT_TRUE(tpl.ok()) << tpl.status().ToString();
    const std::string text = ReadFile(golden_dir + "/" + std::string(fam.golden_file));
    ASSERT_FALSE(text.empty()) << fam.golden_file;
    auto golden = nlohmann::ordered_json::parse(text);
    int compared = 0;
    for (const auto& c : golden["cases"]) {
      const std::string id = c["id"].get<std::string>();
      if (fam.skip.count(id)) continue;
      const std::string label =
          std::string(fam.builtin) + " vs " + std::string(fam.golden_file) + " / " + id;
      ChatInputs in;
      in.messages = c["messages"];
      in.add_generation_prompt = c["add_generation_prompt"].get<bool>();
      in.bos_token = c["bos_token"].get<std::string>();
      in.eos_token = c["eos_token"].get<std::string>();
      if (c.contains("variables") && c["variables"].is_object()) in.variables = c["variables"];
      auto ctx = BuildChatContext(in);
      ASSERT_TRUE(ctx.ok()) << label;
      RenderOptions opts;
      opts.strftime_now = FixedClockStrftime(1721995200);  // 2024-07-26, as the goldens
      auto out = (*tpl)->Render(*ctx, opts);
      ++compared;
      if (c["expected"].is_null()) {
        ASSERT_FALSE(out.ok()) << label << ": expected an error, got " << *out;
        EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << label;
        EXPECT_EQ(out.status().message(), c["expected_error"].get<std::string>()) << label;
        continue;
      }
      ASSERT_TRUE(out.ok()) << label << ": " << out.status().ToString();
      EXPECT_EQ(*out, c["expected"].get<std::string>()) << label;
    }
    EXPECT_GT(compared, 0) << fam.golden_file;
    covered.insert(fam.builtin);
  }
  EXPECT_EQ(covered.size(), BuiltinTemplates().size()) << "a built-in without a golden family";
}

// llama3 without a date_string variable takes today's date from strftime_now.
TEST(BuiltinTemplates, Llama3DatesTheSystemTurnFromTheClock) {
  auto tpl = ChatTemplate::Parse(FindBuiltinTemplate("llama3")->source);
  ASSERT_TRUE(tpl.ok());
  ChatInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role":"user","content":"hi"}])");
  auto ctx = BuildChatContext(in);
  ASSERT_TRUE(ctx.ok());
  RenderOptions opts;
  opts.strftime_now = FixedClockStrftime(1735689600);  // 2025-01-01
  auto out = (*tpl)->Render(*ctx, opts);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_NE(out->find("Today Date: 01 Jan 2025\n\n<|eot_id|>"), std::string::npos) << *out;
}

}  // namespace
}  // namespace strata::tokenizer::chat
