// End-to-end tests of chat templates on a model without one (the bundled tiny model has none):
// the 400 names the flags that fix it, `--chat-template NAME` selects a built-in template
// (rendered by our interpreter), `serve --help` lists the names, and an unknown name is refused
// at start-up with the list.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "integration/http_test_client.h"
#include "integration/run_strata.h"
#include "integration/serve_process.h"

namespace {

using nlohmann::json;
using strata::testing::HttpCall;
using strata::testing::RunStrata;
using strata::testing::ServeProcess;

const json kMessages = json::array({{{"role", "user"}, {"content", "Hello"}}});

TEST(ChatBuiltin, WithoutATemplateThe400NamesTheFlags) {
  ServeProcess s({});
  ASSERT_GT(s.port(), 0);
  auto r = HttpCall(s.port(), "POST", "/v1/chat/completions",
                    json{{"messages", kMessages}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(r.status, 400);
  json e = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(e.contains("error")) << r.body;
  const std::string msg = e["error"]["message"].get<std::string>();
  EXPECT_NE(msg.find("--chat-template-file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--chat-template NAME"), std::string::npos) << msg;
  EXPECT_NE(msg.find("chatml"), std::string::npos) << msg;
  EXPECT_EQ(e["error"]["param"], "messages");
}

TEST(ChatBuiltin, ChatTemplateByNameRendersTheBuiltinFormat) {
  ServeProcess s({"--chat-template", "chatml"});
  ASSERT_GT(s.port(), 0);
  auto t = HttpCall(s.port(), "POST", "/apply-template", json{{"messages", kMessages}}.dump());
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(json::parse(t.body)["prompt"],
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  auto c = HttpCall(s.port(), "POST", "/v1/chat/completions",
                    json{{"messages", kMessages}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(c.status, 200) << c.body;

  ServeProcess l({"--chat-template", "llama3"});
  ASSERT_GT(l.port(), 0);
  auto lt = HttpCall(l.port(), "POST", "/apply-template", json{{"messages", kMessages}}.dump());
  ASSERT_EQ(lt.status, 200) << lt.body;
  const std::string p = json::parse(lt.body)["prompt"].get<std::string>();
  EXPECT_NE(p.find("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
                   "December 2023\nToday Date: "),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n"),
            std::string::npos)
      << p;
}

TEST(ChatBuiltin, HelpListsTheNamesAndAnUnknownNameIsRefused) {
  auto help = RunStrata("serve --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--chat-template"), std::string::npos);
  EXPECT_NE(help.out.find("chatml, llama3, mistral, gemma, phi3, deepseek-r1"), std::string::npos)
      << help.out;
  auto bad = RunStrata("serve --port 0 --chat-template nosuch");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("unknown built-in chat template 'nosuch' (one of: chatml,"),
            std::string::npos)
      << bad.err;
  auto both = RunStrata("serve --port 0 --chat-template chatml --chat-template-file /dev/null");
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.err.find("not both"), std::string::npos) << both.err;
}

}  // namespace
