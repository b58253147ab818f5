// Tests of gateway/cascade: the first stage's rewrite, the signals, stripping what the client did
// not ask for, and the SSE form of a buffered answer.
#include "gateway/cascade.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "http/sse.h"

namespace strata::gateway {
namespace {

using nlohmann::json;

// A completions answer with one choice whose tokens have these logprobs and, per token, these
// two alternatives (top-1, top-2).
json CompletionAnswer(const std::vector<double>& lps,
                      const std::vector<std::pair<double, double>>& alts) {
  json tokens = json::array(), values = json::array(), tops = json::array(), offs = json::array();
  for (size_t i = 0; i < lps.size(); ++i) {
    tokens.push_back("t" + std::to_string(i));
    values.push_back(lps[i]);
    tops.push_back(
        {{"a" + std::to_string(i), alts[i].first}, {"b" + std::to_string(i), alts[i].second}});
    offs.push_back(i);
  }
  return {{"id", "cmpl-1"},
          {"object", "text_completion"},
          {"created", 7},
          {"model", "small"},
          {"choices", json::array({{{"index", 0},
                                    {"text", "hello world"},
                                    {"logprobs",
                                     {{"tokens", tokens},
                                      {"token_logprobs", values},
                                      {"top_logprobs", tops},
                                      {"text_offset", offs}}},
                                    {"finish_reason", "length"}}})},
          {"usage",
           {{"prompt_tokens", 3},
            {"completion_tokens", lps.size()},
            {"total_tokens", 3 + lps.size()}}}};
}

json ChatAnswer(const std::vector<double>& lps, const std::vector<std::vector<double>>& alts) {
  json content = json::array();
  for (size_t i = 0; i < lps.size(); ++i) {
    json top = json::array();
    for (double a : alts[i]) top.push_back({{"token", "x"}, {"logprob", a}, {"bytes", {120}}});
    content.push_back(
        {{"token", "x"}, {"logprob", lps[i]}, {"bytes", {120}}, {"top_logprobs", top}});
  }
  return {{"id", "chatcmpl-1"},
          {"object", "chat.completion"},
          {"created", 7},
          {"model", "small"},
          {"choices", json::array({{{"index", 0},
                                    {"message", {{"role", "assistant"}, {"content", "Hi there"}}},
                                    {"logprobs", {{"content", content}}},
                                    {"finish_reason", "stop"}}})},
          {"usage",
           {{"prompt_tokens", 5},
            {"completion_tokens", lps.size()},
            {"total_tokens", 5 + lps.size()}}}};
}

TEST(CascadeFirstStage, CompletionsAsksTwoAlternativesNonStreaming) {
  json body = {{"model", "ask"},
               {"prompt", "hi"},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"max_tokens", 8}};
  auto fs = FirstStageRequest(Endpoint::kCompletions, body);
  ASSERT_TRUE(fs.ok());
  json sent = json::parse(fs->body);
  EXPECT_EQ(sent["logprobs"], 2);
  EXPECT_FALSE(sent.contains("stream"));
  EXPECT_FALSE(sent.contains("stream_options"));
  EXPECT_EQ(sent["prompt"], "hi");
  EXPECT_EQ(sent["max_tokens"], 8);
  EXPECT_TRUE(fs->ask.stream);
  EXPECT_TRUE(fs->ask.include_usage);
  EXPECT_FALSE(fs->ask.logprobs);
}

TEST(CascadeFirstStage, CompletionsKeepsALargerClientTopK) {
  auto fs = FirstStageRequest(Endpoint::kCompletions, json{{"prompt", "hi"}, {"logprobs", 4}});
  ASSERT_TRUE(fs.ok());
  EXPECT_EQ(json::parse(fs->body)["logprobs"], 4);
  EXPECT_TRUE(fs->ask.logprobs);
  EXPECT_EQ(fs->ask.top_logprobs, 4);
  auto zero = FirstStageRequest(Endpoint::kCompletions, json{{"prompt", "hi"}, {"logprobs", 0}});
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->ask.logprobs);
  EXPECT_EQ(zero->ask.top_logprobs, 0);
  EXPECT_EQ(json::parse(zero->body)["logprobs"], 2);
}

TEST(CascadeFirstStage, ChatAsksLogprobsAndTopTwo) {
  json body = {{"model", "ask"},
               {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  auto fs = FirstStageRequest(Endpoint::kChat, body);
  ASSERT_TRUE(fs.ok());
  json sent = json::parse(fs->body);
  EXPECT_EQ(sent["logprobs"], true);
  EXPECT_EQ(sent["top_logprobs"], 2);
  EXPECT_EQ(sent["messages"], body["messages"]);
  EXPECT_FALSE(fs->ask.logprobs);
  EXPECT_FALSE(fs->ask.stream);
  auto with = FirstStageRequest(Endpoint::kChat, json{{"logprobs", true}, {"top_logprobs", 5}});
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(json::parse(with->body)["top_logprobs"], 5);
  EXPECT_TRUE(with->ask.logprobs);
  EXPECT_EQ(with->ask.top_logprobs, 5);
}

TEST(CascadeFirstStage, WrongTypesAreClientErrors) {
  EXPECT_FALSE(FirstStageRequest(Endpoint::kChat, json{{"logprobs", 3}}).ok());
  EXPECT_FALSE(FirstStageRequest(Endpoint::kCompletions, json{{"logprobs", true}}).ok());
  EXPECT_FALSE(FirstStageRequest(Endpoint::kCompletions, json{{"stream", "yes"}}).ok());
  EXPECT_FALSE(FirstStageRequest(Endpoint::kCompletions, json{{"stream_options", 1}}).ok());
  EXPECT_FALSE(FirstStageRequest(Endpoint::kCompletions, json::array()).ok());
  auto e = FirstStageRequest(Endpoint::kCompletions, json{{"logprobs", -1}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().param(), "logprobs");
}

TEST(CascadeSignals, CompletionMeanMinAndMargin) {
  json a = CompletionAnswer({-0.5, -1.5, -1.0}, {{-0.5, -2.0}, {-1.0, -1.5}, {-0.2, -3.2}});
  auto s = ComputeSignals(Endpoint::kCompletions, a);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->tokens, 3);
  EXPECT_DOUBLE_EQ(s->mean_logprob, -1.0);
  EXPECT_DOUBLE_EQ(s->min_logprob, -1.5);
  EXPECT_EQ(s->margin_tokens, 3);
  EXPECT_DOUBLE_EQ(s->margin, (1.5 + 0.5 + 3.0) / 3);
  EXPECT_EQ(s->completion_tokens, 3);
}

TEST(CascadeSignals, NullLogprobsAndShortAlternativesAreSkipped) {
  json a = CompletionAnswer({-1.0, -3.0}, {{-1.0, -2.0}, {-3.0, -4.0}});
  auto& lp = a["choices"][0]["logprobs"];
  lp["token_logprobs"].insert(lp["token_logprobs"].begin(), nullptr);  // an echoed first token
  lp["top_logprobs"].insert(lp["top_logprobs"].begin(), nullptr);
  lp["top_logprobs"].push_back({{"only", -0.1}});
  auto s = ComputeSignals(Endpoint::kCompletions, a);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->tokens, 2);
  EXPECT_DOUBLE_EQ(s->mean_logprob, -2.0);
  EXPECT_EQ(s->margin_tokens, 2);
  EXPECT_DOUBLE_EQ(s->margin, 1.0);
}

TEST(CascadeSignals, ChatUnorderedAlternatives) {
  json a = ChatAnswer({-0.1, -2.0}, {{-3.0, -0.1, -5.0}, {-2.0, -2.5}});
  auto s = ComputeSignals(Endpoint::kChat, a);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->tokens, 2);
  EXPECT_DOUBLE_EQ(s->mean_logprob, -1.05);
  EXPECT_DOUBLE_EQ(s->min_logprob, -2.0);
  EXPECT_DOUBLE_EQ(s->margin, (2.9 + 0.5) / 2);
}

TEST(CascadeSignals, NoLogprobsOrNoChoices) {
  json a = CompletionAnswer({}, {});
  a["choices"][0]["logprobs"] = nullptr;
  auto s = ComputeSignals(Endpoint::kCompletions, a);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->tokens, 0);
  EXPECT_EQ(s->margin_tokens, 0);
  EXPECT_FALSE(ComputeSignals(Endpoint::kCompletions, json{{"error", "x"}}).ok());
  EXPECT_FALSE(ComputeSignals(Endpoint::kChat, json("text")).ok());
  // Wrong types inside are skipped, never thrown.
  json bad = {
      {"choices",
       json::array({{{"logprobs", {{"content", json::array({1, "x", {{"logprob", "y"}}})}}}}})}};
  auto b = ComputeSignals(Endpoint::kChat, bad);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->tokens, 0);
}

TEST(CascadeStrip, UnaskedLogprobsBecomeNull) {
  json a = ChatAnswer({-0.1}, {{-0.1, -2.0}});
  StripLogprobs(CascadeAsk{Endpoint::kChat, false, false, false, 0, false}, &a);
  EXPECT_TRUE(a["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(a["choices"][0]["message"]["content"], "Hi there");
  json c = CompletionAnswer({-1.0}, {{-1.0, -2.0}});
  StripLogprobs(CascadeAsk{}, &c);
  EXPECT_TRUE(c["choices"][0]["logprobs"].is_null());
}

TEST(CascadeStrip, FewerAlternativesThanTheFirstStageAsked) {
  json a = ChatAnswer({-0.1, -0.3}, {{-0.1, -2.0}, {-0.3, -1.0}});
  StripLogprobs(CascadeAsk{Endpoint::kChat, false, false, true, 1, false}, &a);
  const json& content = a["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  ASSERT_EQ(content[0]["top_logprobs"].size(), 1u);
  EXPECT_DOUBLE_EQ(content[0]["top_logprobs"][0]["logprob"].get<double>(), -0.1);
  json c = CompletionAnswer({-1.0}, {{-2.0, -1.0}});
  StripLogprobs(CascadeAsk{Endpoint::kCompletions, false, false, true, 1, false}, &c);
  const json& top = c["choices"][0]["logprobs"]["top_logprobs"][0];
  ASSERT_EQ(top.size(), 1u);
  EXPECT_TRUE(top.contains("b0"));  // -1.0, the likelier
  json z = CompletionAnswer({-1.0}, {{-2.0, -1.0}});
  StripLogprobs(CascadeAsk{Endpoint::kCompletions, false, false, true, 0, false}, &z);
  EXPECT_TRUE(z["choices"][0]["logprobs"]["top_logprobs"][0].empty());
  EXPECT_EQ(z["choices"][0]["logprobs"]["token_logprobs"].size(), 1u);
  json keep = CompletionAnswer({-1.0}, {{-2.0, -1.0}});
  StripLogprobs(CascadeAsk{Endpoint::kCompletions, false, false, true, 2, false}, &keep);
  EXPECT_EQ(keep["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
}

std::vector<json> Events(const std::string& sse, bool* done) {
  http::SseParser p(1u << 20);
  std::vector<std::string> events;
  EXPECT_TRUE(p.Feed(sse, &events).ok());
  std::vector<json> out;
  *done = false;
  for (const std::string& e : events) {
    EXPECT_FALSE(*done) << "an event after [DONE]";
    if (e == "[DONE]") {
      *done = true;
      continue;
    }
    out.push_back(json::parse(e));
  }
  return out;
}

TEST(CascadeSse, CompletionChunksThenDone) {
  json a = CompletionAnswer({-1.0}, {{-1.0, -2.0}});
  StripLogprobs(CascadeAsk{}, &a);
  CascadeAsk ask{Endpoint::kCompletions, true, true, false, 0, false};
  bool done = false;
  auto ev = Events(AnswerAsSse(ask, a), &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0]["object"], "text_completion");
  EXPECT_EQ(ev[0]["id"], "cmpl-1");
  EXPECT_EQ(ev[0]["model"], "small");
  EXPECT_EQ(ev[0]["choices"][0]["text"], "hello world");
  EXPECT_EQ(ev[0]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(ev[0]["choices"][0]["logprobs"].is_null());
  EXPECT_TRUE(ev[1]["choices"].empty());
  EXPECT_EQ(ev[1]["usage"]["completion_tokens"], 1);
  ask.include_usage = false;
  EXPECT_EQ(Events(AnswerAsSse(ask, a), &done).size(), 1u);
}

TEST(CascadeSse, ChatRoleFirstThenContent) {
  json a = ChatAnswer({-0.1}, {{-0.1, -2.0}});
  json second = a["choices"][0];
  second["index"] = 1;
  second["message"]["content"] = "Second";
  a["choices"].push_back(second);
  CascadeAsk ask{Endpoint::kChat, true, false, true, 2, false};
  bool done = false;
  auto ev = Events(AnswerAsSse(ask, a), &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(ev.size(), 3u);
  for (const json& e : ev) EXPECT_EQ(e["object"], "chat.completion.chunk");
  ASSERT_EQ(ev[0]["choices"].size(), 2u);
  EXPECT_EQ(ev[0]["choices"][1]["delta"]["role"], "assistant");
  EXPECT_TRUE(ev[0]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(ev[1]["choices"][0]["delta"]["content"], "Hi there");
  EXPECT_FALSE(ev[1]["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(ev[1]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(ev[1]["choices"][0]["logprobs"]["content"].size(), 1u);
  EXPECT_EQ(ev[2]["choices"][0]["index"], 1);
  EXPECT_EQ(ev[2]["choices"][0]["delta"]["content"], "Second");
}

TEST(CascadeSse, ToolCallsCarryAnIndex) {
  json a = ChatAnswer({}, {});
  a["choices"][0]["message"] = {
      {"role", "assistant"},
      {"content", nullptr},
      {"tool_calls", json::array({{{"id", "c1"}, {"type", "function"}}})}};
  bool done = false;
  auto ev =
      Events(AnswerAsSse(CascadeAsk{Endpoint::kChat, true, false, false, 0, false}, a), &done);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1]["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
  EXPECT_EQ(ev[1]["choices"][0]["delta"]["tool_calls"][0]["id"], "c1");
}

TEST(CascadeSse, NotAnAnswerStillEndsWithDone) {
  bool done = false;
  auto ev = Events(AnswerAsSse(CascadeAsk{Endpoint::kCompletions, true}, json("x")), &done);
  EXPECT_TRUE(done);
  EXPECT_TRUE(ev.empty());
}

}  // namespace
}  // namespace strata::gateway
