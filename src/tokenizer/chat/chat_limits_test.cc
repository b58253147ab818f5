// Error paths and resource limits: hostile templates must fail fast with a clear status, never hang
// or crash; parse errors name their position; raise_exception messages reach the caller intact.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/chat/chat_template.h"

namespace strata::tokenizer::chat {
namespace {

Result<std::string> RenderWith(
    std::string_view src, const ChatTemplateLimits& limits = {},
    const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  auto tpl = ChatTemplate::Parse(src, limits);
  if (!tpl.ok()) return tpl.status();
  return (*tpl)->Render(ctx);
}

bool Contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(ChatLimitsTest, NestedLoopsExhaustStepBudget) {
  auto start = std::chrono::steady_clock::now();
  auto r = RenderWith(
      "{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}x"
      "{% endfor %}{% endfor %}{% endfor %}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(r.status().message(), "steps")) << r.status().message();
  // Generous bound: sanitizer builds are slow; a hang would blow far past it.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST(ChatLimitsTest, HugeRangeFailsBeforeAllocating) {
  auto r = RenderWith("{% for i in range(1000000000000) %}{% endfor %}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
}

TEST(ChatLimitsTest, StepBudgetIsConfigurable) {
  ChatTemplateLimits small;
  small.max_steps = 100;
  EXPECT_FALSE(RenderWith("{% for i in range(200) %}{{ i }}{% endfor %}", small).ok());
  EXPECT_TRUE(RenderWith("{% for i in range(200) %}{{ i }}{% endfor %}").ok());
}

TEST(ChatLimitsTest, RecursiveMacroHitsDepthLimit) {
  auto r = RenderWith("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(r.status().message(), "macro")) << r.status().message();
}

TEST(ChatLimitsTest, OutputSizeIsBounded) {
  ChatTemplateLimits limits;
  limits.max_output_bytes = 1000;
  auto r =
      RenderWith("{% for i in range(100) %}{{ 'abcdefghijklmnopqrstuvwxyz' }}{% endfor %}", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(r.status().message(), "bytes")) << r.status().message();

  auto rep = RenderWith("{{ 'x' * 1000000000000 }}");
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.status().code(), StatusCode::kOutOfRange);

  auto doubling = RenderWith(
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}{{ ns.s|length }}");
  ASSERT_FALSE(doubling.ok());
  EXPECT_EQ(doubling.status().code(), StatusCode::kOutOfRange);
}

TEST(ChatLimitsTest, DeeplyNestedValuesAreRefused) {
  auto r = RenderWith(
      "{% set ns = namespace(v=[]) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}"
      "{% endfor %}{{ ns.v|length }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);

  nlohmann::ordered_json deep = nlohmann::ordered_json::array();
  for (int i = 0; i < 1000; ++i) deep = nlohmann::ordered_json::array({deep});
  nlohmann::ordered_json ctx = {{"x", deep}};
  auto r2 = RenderWith("{{ x|length }}", {}, ctx);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kOutOfRange);
}

TEST(ChatLimitsTest, NamespaceCyclesRenderAndAreBroken) {
  auto r = RenderWith(
      "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me.me is defined }} {{ ns.me }}");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "True <Namespace>");
}

TEST(ChatLimitsTest, DeepSyntaxIsAParseError) {
  std::string src = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  auto r = ChatTemplate::Parse(src);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "nested")) << r.status().message();
  std::string nots = "{{ " + std::string(20000, '-') + "1 }}";
  EXPECT_FALSE(ChatTemplate::Parse(nots).ok());
  std::string ifs;
  for (int i = 0; i < 2000; ++i) ifs += "{% if true %}";
  EXPECT_FALSE(ChatTemplate::Parse(ifs).ok());
}

TEST(ChatLimitsTest, SourceSizeIsBounded) {
  ChatTemplateLimits limits;
  limits.max_source_bytes = 16;
  auto r = ChatTemplate::Parse(std::string(17, 'a'), limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
}

TEST(ChatLimitsTest, InvalidLimitsAreRejected) {
  ChatTemplateLimits limits;
  limits.max_steps = 0;
  EXPECT_FALSE(limits.Validate().ok());
  EXPECT_FALSE(ChatTemplate::Parse("x", limits).ok());
}

struct ParseErrorCase {
  const char* src;
  const char* position;  // expected "line L, column C"
  const char* words;     // expected fragment of the message
};

TEST(ChatParseErrorTest, ErrorsNamePosition) {
  const ParseErrorCase cases[] = {
      {"Hello\n{{ 1 + }}", "line 2, column 8", "unexpected"},
      {"{% if x %}\nabc", "line 2, column 4", "endif"},
      {"a\n\n  {% for x %}{% endfor %}", "line 3, column 12", "expected 'in'"},
      {"{{ 'abc }}", "line 1, column 4", "unterminated string"},
      {"x {# never closed", "line 1, column 3", "unterminated comment"},
      {"{{ x | nosuchfilter }}", "line 1, column 8", "no filter named 'nosuchfilter'"},
      {"{{ x is nosuchtest }}", "line 1, column 6", "no test named"},
      {"{% frobnicate %}", "line 1, column 4", "unknown tag"},
      {"{% break %}", "line 1, column 4", "outside of a loop"},
      {"{{ x $ y }}", "line 1, column 6", "unexpected character"},
      {"{{ x ", "line 1, column 1", "unterminated tag"},
      {"{% endif %}", "line 1, column 4", "unknown tag 'endif'"},
  };
  for (const auto& c : cases) {
    auto r = ChatTemplate::Parse(c.src);
    ASSERT_FALSE(r.ok()) << c.src;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.src;
    EXPECT_TRUE(Contains(r.status().message(), c.position))
        << c.src << " → " << r.status().message();
    EXPECT_TRUE(Contains(r.status().message(), c.words)) << c.src << " → " << r.status().message();
  }
}

TEST(ChatParseErrorTest, IncludeImportExtendsAreUnsupported) {
  for (const char* src : {"{% include 'other.jinja' %}", "{% import 'm' as m %}",
                          "{% extends 'base' %}", "{% from 'x' import y %}"}) {
    auto r = ChatTemplate::Parse(src);
    ASSERT_FALSE(r.ok()) << src;
    EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented) << src;
    EXPECT_TRUE(Contains(r.status().message(), "not supported")) << r.status().message();
  }
}

TEST(ChatRenderErrorTest, RaiseExceptionMessagePropagates) {
  auto r = RenderWith("before{{ raise_exception('Roles must ' ~ 'alternate!') }}after");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "Roles must alternate!");
  // Inside a macro and a loop, too.
  auto r2 = RenderWith(
      "{% macro check(m) %}{% if m == 2 %}{{ raise_exception('bad ' ~ m) }}{% endif %}"
      "{% endmacro %}{% for i in range(5) %}{{ check(i) }}{% endfor %}");
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().message(), "bad 2");
}

TEST(ChatRenderErrorTest, RuntimeErrorsNamePosition) {
  auto r = RenderWith("ok\n  {{ missing.attr }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_TRUE(Contains(r.status().message(), "line 2")) << r.status().message();
  EXPECT_TRUE(Contains(r.status().message(), "'missing' is undefined")) << r.status().message();

  auto add = RenderWith("{{ 'a' + 1 }}");
  ASSERT_FALSE(add.ok());
  EXPECT_TRUE(Contains(add.status().message(), "unsupported operand")) << add.status().message();

  auto call = RenderWith("{{ nothing() }}");
  ASSERT_FALSE(call.ok());
  EXPECT_EQ(call.status().code(), StatusCode::kInternal);
}

TEST(ChatRenderErrorTest, SandboxRefusesMutationAndInternals) {
  nlohmann::ordered_json ctx = {{"msgs", {1, 2}}};
  auto r = RenderWith("{{ msgs.append(3) }}", {}, ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "not allowed")) << r.status().message();
  // Python internals are not reachable: they are plain undefined attributes.
  auto r2 = RenderWith("{{ msgs.__class__ is defined }} {{ ''.__class__ is defined }}", {}, ctx);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(*r2, "False False");
}

TEST(ChatRenderTest, StrftimeNowUsesCallerClock) {
  auto tpl = ChatTemplate::Parse("{{ strftime_now('%d %b %Y') }}");
  ASSERT_TRUE(tpl.ok());
  RenderOptions opts;
  opts.strftime_now = FixedClockStrftime(1721995200);  // 2024-07-26 12:00 UTC
  auto r = (*tpl)->Render(nlohmann::ordered_json::object(), opts);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "26 Jul 2024");
}

TEST(ChatRenderTest, BuildChatContextFollowsTransformers) {
  ChatInputs in;
  in.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}}});
  in.bos_token = "<s>";
  in.variables = {{"date_string", "1 Jan 2025"}, {"bos_token", "<B>"}};
  auto ctx = BuildChatContext(in);
  ASSERT_TRUE(ctx.ok());
  auto tpl = ChatTemplate::Parse(
      "{{ bos_token }}|{{ tools is none }}|{{ tools is defined }}|{{ add_generation_prompt }}|"
      "{{ date_string }}|{{ messages[0].content }}");
  ASSERT_TRUE(tpl.ok());
  auto r = (*tpl)->Render(*ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "<B>|True|True|True|1 Jan 2025|hi");

  in.messages = "not a list";
  EXPECT_FALSE(BuildChatContext(in).ok());
}

TEST(ChatRenderTest, KeyOrderFollowsOrderedJson) {
  auto tpl = ChatTemplate::Parse("{{ x|tojson }}");
  ASSERT_TRUE(tpl.ok());
  nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(R"({"x": {"z": 1, "a": 2}})");
  EXPECT_EQ(*(*tpl)->Render(ordered), R"({"z": 1, "a": 2})");
  nlohmann::json sorted = nlohmann::json::parse(R"({"x": {"z": 1, "a": 2}})");
  EXPECT_EQ(*(*tpl)->Render(sorted), R"({"a": 2, "z": 1})");
}

TEST(ChatRenderTest, ConcurrentRendersShareNothing) {
  auto tpl = ChatTemplate::Parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m %}{% endfor %}"
      "{{ ns.n }}");
  ASSERT_TRUE(tpl.ok());
  std::vector<std::thread> threads;
  threads.reserve(8);
  std::vector<std::string> results(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      nlohmann::ordered_json ctx = {{"messages", nlohmann::ordered_json::array()}};
      for (int i = 0; i <= t * 10; ++i) ctx["messages"].push_back(i);
      for (int rep = 0; rep < 50; ++rep) {
        auto r = (*tpl)->Render(ctx);
        results[t] = r.ok() ? *r : r.status().ToString();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) {
    int n = t * 10;
    EXPECT_EQ(results[t], std::to_string(n * (n + 1) / 2));
  }
}

}  // namespace
}  // namespace strata::tokenizer::chat
