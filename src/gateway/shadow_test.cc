// Tests of gateway/shadow: the shadow copy, answer texts (JSON and SSE), the tee, the slots and
// the comparison.
#include "gateway/shadow.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "http/sse.h"

namespace strata::gateway {
namespace {

using nlohmann::json;
using Texts = std::optional<std::vector<std::string>>;

TEST(ShadowBody, GreedyAndNotStreaming) {
  auto b = ShadowBody(json{{"prompt", "hi"},
                           {"stream", true},
                           {"temperature", 0.8},
                           {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(b.ok());
  json j = json::parse(*b);
  EXPECT_EQ(j["temperature"], 0);
  EXPECT_FALSE(j.contains("stream"));
  EXPECT_FALSE(j.contains("stream_options"));
  EXPECT_EQ(j["prompt"], "hi");
  EXPECT_FALSE(ShadowBody(json{{"stream", 1}}).ok());
  EXPECT_FALSE(ShadowBody(json::array()).ok());
}

TEST(ShadowBody, IsGreedy) {
  EXPECT_TRUE(IsGreedy(json{{"temperature", 0}}));
  EXPECT_TRUE(IsGreedy(json{{"temperature", 0.0}}));
  EXPECT_FALSE(IsGreedy(json{{"temperature", 0.5}}));
  EXPECT_FALSE(IsGreedy(json::object()));  // the default is 1
  EXPECT_FALSE(IsGreedy(json{{"temperature", "0"}}));
}

TEST(ShadowTexts, JsonAnswers) {
  EXPECT_EQ(AnswerTexts(Endpoint::kCompletions,
                        R"({"choices":[{"index":1,"text":"b"},{"index":0,"text":"a"}]})"),
            Texts(std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(
      AnswerTexts(Endpoint::kChat,
                  R"({"choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]})"),
      Texts(std::vector<std::string>{"hi"}));
  EXPECT_FALSE(AnswerTexts(Endpoint::kChat, "not json"));
  EXPECT_FALSE(AnswerTexts(Endpoint::kChat, R"({"error":{}})"));
  // Wrong types read as empty text, never throw.
  EXPECT_EQ(AnswerTexts(Endpoint::kCompletions, R"({"choices":[{"text":5}]})"),
            Texts(std::vector<std::string>{""}));
}

TEST(ShadowTexts, StreamsAreReassembled) {
  std::string sse =
      http::SseEvent(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})") +
      http::SseEvent(R"({"choices":[{"index":0,"delta":{"content":"Hel"}}]})") +
      http::SseEvent(
          R"({"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]})") +
      http::SseEvent(R"({"choices":[],"usage":{"prompt_tokens":1}})");
  EXPECT_FALSE(StreamTexts(Endpoint::kChat, sse));  // unfinished
  EXPECT_EQ(StreamTexts(Endpoint::kChat, sse + std::string(http::kSseDone)),
            Texts(std::vector<std::string>{"Hello"}));
  std::string comp = http::SseEvent(R"({"choices":[{"index":0,"text":"a"}]})") +
                     http::SseEvent(R"({"choices":[{"index":0,"text":"b"}]})") +
                     std::string(http::kSseDone);
  EXPECT_EQ(StreamTexts(Endpoint::kCompletions, comp), Texts(std::vector<std::string>{"ab"}));
  std::string failed = http::SseEvent(R"({"choices":[{"index":0,"text":"a"}]})") +
                       http::SseEvent(R"({"error":{"message":"x"}})") + std::string(http::kSseDone);
  EXPECT_FALSE(StreamTexts(Endpoint::kCompletions, failed));
}

class NullResponder final : public http::Responder {
 public:
  void Respond(http::HttpResponse r) override { log += "respond " + r.body + ";"; }
  void Begin(std::string, std::vector<std::pair<std::string, std::string>>) override {
    log += "begin;";
  }
  void Write(std::string c) override { log += "write " + c + ";"; }
  void End() override { log += "end;"; }
  void OnClose(std::function<void()>) override {}
  bool closed() const override { return false; }
  void Post(std::function<void()> fn) override { fn(); }
  std::string log;
};

TEST(ShadowTee, RelaysAndKeepsABoundedCopy) {
  auto out = std::make_shared<NullResponder>();
  TeeResponder tee(out, 8);
  EXPECT_FALSE(tee.complete());
  http::HttpResponse r;
  r.status = 201;
  r.body = "body";
  tee.Respond(r);
  EXPECT_EQ(out->log, "respond body;");
  EXPECT_TRUE(tee.complete());
  EXPECT_FALSE(tee.streamed());
  EXPECT_EQ(tee.status(), 201);
  EXPECT_EQ(tee.body(), "body");

  auto out2 = std::make_shared<NullResponder>();
  TeeResponder s(out2, 8);
  s.Begin("text/event-stream", {});
  s.Write("1234");
  s.Write("5678");
  s.End();
  EXPECT_EQ(out2->log, "begin;write 1234;write 5678;end;");
  EXPECT_TRUE(s.complete());
  EXPECT_TRUE(s.streamed());
  EXPECT_EQ(s.body(), "12345678");
  s.Write("9");  // over the bound: relayed, the copy dropped
  EXPECT_EQ(out2->log, "begin;write 1234;write 5678;end;write 9;");
  EXPECT_FALSE(s.complete());
  EXPECT_EQ(s.body(), "");
}

TEST(ShadowSlots, BoundedAndReleased) {
  ShadowSlots slots(2);
  EXPECT_TRUE(slots.TryAcquire());
  EXPECT_TRUE(slots.TryAcquire());
  EXPECT_FALSE(slots.TryAcquire());
  EXPECT_EQ(slots.in_flight(), 2);
  slots.Release();
  EXPECT_TRUE(slots.TryAcquire());
  ShadowSlots none(0);
  EXPECT_FALSE(none.TryAcquire());
}

TEST(ShadowCompare, Outcomes) {
  Texts a = std::vector<std::string>{"x"}, b = std::vector<std::string>{"y"};
  EXPECT_EQ(CompareShadow(true, a, a), ShadowOutcome::kMatch);
  EXPECT_EQ(CompareShadow(true, a, b), ShadowOutcome::kMismatch);
  EXPECT_EQ(CompareShadow(true, a, std::nullopt), ShadowOutcome::kUncompared);
  EXPECT_EQ(CompareShadow(false, a, a), ShadowOutcome::kError);
  EXPECT_EQ(CompareShadow(true, std::nullopt, a), ShadowOutcome::kError);
  EXPECT_EQ(ShadowOutcomeName(ShadowOutcome::kDropped), "dropped");
}

}  // namespace
}  // namespace strata::gateway
