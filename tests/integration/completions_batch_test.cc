// End-to-end tests of batch prompts and echo on /v1/completions: the real `strata serve` binary on
// 127.0.0.1 port 0 with the bundled default model (http_test_client.h over real sockets).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "integration/http_test_client.h"
#include "integration/serve_process.h"

namespace {

using nlohmann::json;
using strata::testing::HttpCall;
using strata::testing::HttpConn;
using strata::testing::ServeProcess;
using strata::testing::SseData;

json Post(int port, const json& body, int* status = nullptr) {
  auto r = HttpCall(port, "POST", "/v1/completions", body.dump());
  if (status) *status = r.status;
  return json::parse(r.body, nullptr, false);
}

size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

TEST(CompletionsBatch, OneChoicePerPromptAndSampleStreamedAndNot) {
  ServeProcess s({});
  ASSERT_GT(s.port(), 0);
  const int port = s.port();
  int st = 0;
  json tk =
      json::parse(HttpCall(port, "POST", "/tokenize", json{{"content", "The cat"}}.dump()).body,
                  nullptr, false);
  ASSERT_TRUE(tk["tokens"].is_array()) << tk;
  const json prompts = {"Once upon a time", "Hello", tk["tokens"]};
  const json base = {{"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}};
  std::vector<std::string> singles;
  int prompt_tokens = 0;
  for (const json& p : prompts) {
    json b = base;
    b["prompt"] = p;
    json r = Post(port, b, &st);
    ASSERT_EQ(st, 200) << r;
    singles.push_back(r["choices"][0]["text"]);
    prompt_tokens += r["usage"]["prompt_tokens"].get<int>();
  }
  json b = base;
  b["prompt"] = prompts;
  b["n"] = 2;
  json r = Post(port, b, &st);
  ASSERT_EQ(st, 200) << r;
  ASSERT_EQ(r["choices"].size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(r["choices"][i]["index"], i);
    EXPECT_EQ(r["choices"][i]["text"], singles[i / 2]) << i;  // greedy: both samples alike
  }
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(r["usage"]["completion_tokens"], 60);
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  auto sse = HttpCall(port, "POST", "/v1/completions", b.dump());
  ASSERT_EQ(sse.status, 200);
  std::map<int, std::string> texts;
  json usage;
  for (auto& e : SseData(sse.body)) {
    if (e == "[DONE]") continue;
    json c = json::parse(e);
    if (c["choices"].empty()) {
      usage = c["usage"];
      continue;
    }
    texts[c["choices"][0]["index"].get<int>()] += c["choices"][0]["text"].get<std::string>();
  }
  ASSERT_EQ(texts.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(texts[i], singles[static_cast<size_t>(i / 2)]) << i;
  EXPECT_EQ(usage["completion_tokens"], 60);
  EXPECT_EQ(usage["prompt_tokens"], prompt_tokens);
}

TEST(CompletionsBatch, BadPromptsAre400NamingPrompt) {
  ServeProcess s({});
  ASSERT_GT(s.port(), 0);
  int st = 0;
  json r = Post(s.port(), {{"prompt", json::array({"fine", json::array({1, 99999999})})}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(r["error"]["param"], "prompt");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("prompt[1]"), std::string::npos) << r;
  r = Post(s.port(), {{"prompt", std::vector<std::string>(65, "x")}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(r["error"]["param"], "prompt");
  r = Post(s.port(), {{"prompt", json::array({"a", json::array()})}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(r["error"]["param"], "prompt");
  // Nothing of a refused batch ran.
  auto m = HttpCall(s.port(), "GET", "/metrics").body;
  EXPECT_EQ(m.find("strata:prompt_tokens_total{"), std::string::npos) << m;
}

TEST(CompletionsBatch, EchoLogprobsOfThePromptEqualDecodingAtTheSamePositions) {
  ServeProcess s({});
  ASSERT_GT(s.port(), 0);
  const int port = s.port();
  int st = 0;
  json tk = json::parse(
      HttpCall(port, "POST", "/tokenize", json{{"content", "Once upon a time there was"}}.dump())
          .body);
  const std::vector<int> ids = tk["tokens"].get<std::vector<int>>();
  ASSERT_GE(ids.size(), 6u);
  json echo =
      Post(port, {{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 5}}, &st);
  ASSERT_EQ(st, 200) << echo;
  const json& lp = echo["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), ids.size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_EQ(echo["usage"]["completion_tokens"], 0);
  // The distribution at position k (after ids[0, k)) is what decoding reports for the first token
  // generated after the prompt ids[0, k): same logits row, same log-softmax.
  for (size_t k = 1; k < ids.size(); ++k) {
    std::vector<int> prefix(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k));
    json d = Post(port, {{"prompt", prefix}, {"max_tokens", 1}, {"logprobs", 5}}, &st);
    ASSERT_EQ(st, 200) << d;
    EXPECT_EQ(lp["top_logprobs"][k], d["choices"][0]["logprobs"]["top_logprobs"][0]) << k;
  }
  // Text and offsets: the echoed text is the prompt's, tokens spell it, offsets count characters.
  std::string joined;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), CodePoints(joined));
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, echo["choices"][0]["text"]);
  EXPECT_NE(joined.find("Once upon a time there was"), std::string::npos) << joined;
  // With a completion: the prompt first, then what a plain request generates.
  json plain = Post(port, {{"prompt", "Hello"}, {"max_tokens", 8}, {"temperature", 0}}, &st);
  json both =
      Post(port, {{"prompt", "Hello"}, {"max_tokens", 8}, {"temperature", 0}, {"echo", true}}, &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(both["choices"][0]["text"].get<std::string>(),
            "Hello" + plain["choices"][0]["text"].get<std::string>());
}

TEST(CompletionsBatch, DisconnectCancelsEveryPromptOfTheBatch) {
  ServeProcess s({});
  ASSERT_GT(s.port(), 0);
  const int port = s.port();
  {
    HttpConn c(port);
    json body = {{"prompt", json::array({"Tell me a story", "Another one", "And a third"})},
                 {"max_tokens", 1500},
                 {"ignore_eos", true},
                 {"stream", true}};
    ASSERT_TRUE(c.Send("POST", "/v1/completions", body.dump()));
    ASSERT_TRUE(
        c.ReadUntil([](const std::string& b) { return b.find("\"text\"") != std::string::npos; }));
  }
  std::string m;
  bool freed = false;
  for (int i = 0; i < 300 && !freed; ++i) {
    m = HttpCall(port, "GET", "/metrics").body;
    freed =
        m.find("strata:kv_cache_usage_perc{model_name=\"strata-tiny\"} 0\n") != std::string::npos &&
        m.find("strata:num_requests_running{model_name=\"strata-tiny\"} 0\n") !=
            std::string::npos &&
        m.find("strata:num_requests_waiting{model_name=\"strata-tiny\"} 0\n") !=
            std::string::npos &&
        m.find("finished_reason=\"abort\"} 1") != std::string::npos;
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(freed) << m;
}

}  // namespace
