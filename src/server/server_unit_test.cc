// Unit tests of the server pieces (StopMatcher, the loading answer) plus in-process HTTP tests: a
// real HttpServer on 127.0.0.1:0, the real Engine driven by FakeModelRunner, the builtin byte-level
// tokenizer, and a raw-socket client (tests/integration/http_test_client.h).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <thread>

#include "engine/sched/engine.h"
#include "engine/sched/fake_runner.h"
#include "http/prometheus.h"
#include "http/server.h"
#include "integration/http_test_client.h"
#include "server/api.h"
#include "server/openai_fields.h"
#include "server/openai_request.h"
#include "server/server_test_util.h"

namespace strata::server {
namespace {

using http::HttpRequest;
using nlohmann::json;
using test::kMaxLen;
using test::ServerTest;
using testing::HttpCall;
using testing::HttpConn;
using testing::SseData;

TEST(StopMatcher, HoldsBackPartialMatchesAcrossPushes) {
  StopMatcher m({"STOP", "xyz"});
  EXPECT_EQ(m.Push("hello S"), "hello ");  // "S" could start STOP
  EXPECT_EQ(m.Push("T"), "");              // "ST"
  EXPECT_EQ(m.Push("Ox"), "STO");          // "STOx": no longer STOP, but "x" may start xyz
  EXPECT_FALSE(m.matched());
  EXPECT_EQ(m.Push("y"), "");
  EXPECT_EQ(m.Push("z tail"), "");  // "xyz" -> stop; nothing before it was held
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.Push("more"), "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcher, FlushReleasesHeldText) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.Push("abcE"), "abc");
  EXPECT_EQ(m.Push("N"), "");
  EXPECT_EQ(m.Flush(), "EN");
  StopMatcher none({});
  EXPECT_EQ(none.Push("anything"), "anything");
}

TEST(StopMatcher, StopAtTheVeryStart) {
  StopMatcher m({"a"});
  EXPECT_EQ(m.Push("abc"), "");
  EXPECT_TRUE(m.matched());
}

TEST(LoadingResponse, HealthIsUpEverythingElse503) {
  HttpRequest r;
  r.path = "/health";
  EXPECT_EQ(LoadingResponse(r).status, 200);
  for (const char* p : {"/ready", "/v1/completions", "/metrics"}) {
    r.path = p;
    EXPECT_EQ(LoadingResponse(r).status, 503) << p;
  }
}

TEST(ApplyChatTemplate, WithoutATemplateThe400NamesTheFlagsThatGiveOne) {
  ModelInfo info;
  info.name = "m";
  auto r = ApplyChatTemplate(json::array({{{"role", "user"}, {"content", "hi"}}}), true, info,
                             json(nullptr));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().param(), "messages");
  EXPECT_EQ(r.error().status().code(), StatusCode::kInvalidArgument);
  const std::string msg(r.error().message());
  EXPECT_NE(msg.find("--chat-template-file FILE"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--chat-template NAME (built-in: chatml, llama3,"), std::string::npos) << msg;
}

TEST_F(ServerTest, HealthReadyModelsAnd404) {
  auto h = HttpCall(port_, "GET", "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(HttpCall(port_, "GET", "/ready").status, 200);
  auto m = HttpCall(port_, "GET", "/v1/models");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(json::parse(m.body)["data"][0]["id"], "fake");
  auto nf = HttpCall(port_, "GET", "/nope");
  EXPECT_EQ(nf.status, 404);
  auto e = json::parse(nf.body);
  ASSERT_TRUE(e.contains("error"));
  for (const char* k : {"message", "type", "param", "code"})
    EXPECT_TRUE(e["error"].contains(k)) << k;
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/models/other").status, 404);
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/completions").status, 405);
  api_->StartDraining();
  EXPECT_EQ(HttpCall(port_, "GET", "/ready").status, 503);
  EXPECT_EQ(HttpCall(port_, "GET", "/health").status, 200);
  EXPECT_EQ(HttpCall(port_, "POST", "/v1/completions", R"({"prompt":"x"})").status, 503);
}

TEST_F(ServerTest, TokenizeDetokenizeRoundTripAndTemplate) {
  int st = 0;
  json t = Post("/tokenize", {{"content", "hello world"}, {"add_special", false}}, &st);
  ASSERT_EQ(st, 200) << t;
  auto ids = t["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(ids, tok_->Encode("hello world", false, true));
  json d = Post("/detokenize", {{"tokens", ids}}, &st);
  EXPECT_EQ(st, 200);
  EXPECT_EQ(d["content"], "hello world");
  json bad = Post("/detokenize", {{"tokens", {999999}}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(bad["error"]["param"], "tokens");
  json a = Post("/apply-template", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}, &st);
  EXPECT_EQ(st, 200);
  EXPECT_EQ(a["prompt"], "<user>hi\n<assistant>");
  json r = Post("/apply-template", {{"messages", {{{"role", "bad"}, {"content", "hi"}}}}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(r["error"]["message"], "role bad is not allowed");
}

TEST_F(ServerTest, BadParametersNameTheParam) {
  StartEngine();
  struct Case {
    json body;
    std::string param;
  };
  std::vector<Case> cases = {
      {{{"prompt", "x"}, {"temperature", "hot"}}, "temperature"},
      {{{"prompt", "x"}, {"max_tokens", 0}}, "max_tokens"},
      {{{"prompt", "x"}, {"n", 1000}}, "n"},
      {{{"prompt", "x"}, {"top_p", 0}}, "top_p"},
      {{{"prompt", "x"}, {"stop", 5}}, "stop"},
      {{{"prompt", "x"}, {"priority", "platinum"}}, "priority"},
      {{{"prompt", {1, -4}}}, "prompt"},
      {{{"max_tokens", 3}}, "prompt"},
  };
  for (const auto& c : cases) {
    int st = 0;
    json r = Post("/v1/completions", c.body, &st);
    EXPECT_EQ(st, 400) << c.body;
    EXPECT_EQ(r["error"]["param"], c.param) << r;
  }
  int st = 0;
  json r = Post("/v1/completions", {{"prompt", std::string(400, 'q')}}, &st);
  EXPECT_EQ(st, 400);
  std::string msg = r["error"]["message"];
  EXPECT_NE(msg.find(std::to_string(kMaxLen)), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(tok_->Encode(std::string(400, 'q'), true, true).size())),
            std::string::npos)
      << msg;
  // Extra fields are ignored; an unknown model is 404.
  Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}, {"some_future_field", {1, 2}}}, &st);
  EXPECT_EQ(st, 200);
  Post("/v1/completions", {{"prompt", "x"}, {"model", "gpt-9"}}, &st);
  EXPECT_EQ(st, 404);
  auto raw = HttpCall(port_, "POST", "/v1/completions", "{not json");
  EXPECT_EQ(raw.status, 400);
}

// Generated token pieces as exact bytes (chat logprobs carry `bytes`; pieces may be partial UTF-8).
std::vector<std::string> PieceBytes(const json& content) {
  std::vector<std::string> out;
  for (const auto& e : content) {
    std::string b;
    for (auto& x : e["bytes"]) b += static_cast<char>(x.get<int>());
    out.push_back(b);
  }
  return out;
}

TEST_F(ServerTest, CompletionNonStreamingMatchesEngineTokens) {
  StartEngine();
  int st = 0;
  json r = Post("/v1/completions",
                {{"prompt", "hello"},
                 {"max_tokens", 8},
                 {"temperature", 0},
                 {"ignore_eos", true},
                 {"logprobs", 2}},
                &st);
  ASSERT_EQ(st, 200) << r;
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 8);
  EXPECT_EQ(r["usage"]["prompt_tokens"], tok_->Encode("hello", true, true).size());
  EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"].size(), 8u);
  EXPECT_EQ(r["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
  // Chat with logprobs: the content's bytes are the generated pieces' bytes, decoded.
  json c = Post("/v1/chat/completions",
                {{"messages", {{{"role", "user"}, {"content", "hello"}}}},
                 {"max_tokens", 8},
                 {"temperature", 0},
                 {"ignore_eos", true},
                 {"logprobs", true},
                 {"top_logprobs", 3}},
                &st);
  ASSERT_EQ(st, 200) << c;
  auto pieces = PieceBytes(c["choices"][0]["logprobs"]["content"]);
  ASSERT_EQ(pieces.size(), 8u);
  std::string joined;
  for (auto& p : pieces) joined += p;
  std::vector<int32_t> ids;
  for (auto& p : pieces) {
    auto t = tok_->Encode(p, false, false);
    ids.insert(ids.end(), t.begin(), t.end());
  }
  EXPECT_EQ(
      c["choices"][0]["message"]["content"],
      json::parse(json(tok_->Decode(ids)).dump(-1, ' ', false, json::error_handler_t::replace))
          .get<std::string>());
  EXPECT_EQ(c["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 3u);
  // Same request -> same text (temperature 0).
  json r2 =
      Post("/v1/completions",
           {{"prompt", "hello"}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}}, &st);
  EXPECT_EQ(r2["choices"][0]["text"], r["choices"][0]["text"]);
}

TEST_F(ServerTest, StreamingSseFramingAndUsage) {
  StartEngine();
  json body = {{"prompt", "hello"}, {"max_tokens", 6},
               {"temperature", 0},  {"ignore_eos", true},
               {"stream", true},    {"stream_options", {{"include_usage", true}}}};
  auto r = HttpCall(port_, "POST", "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  // Raw framing: every event is "data: ...\n\n" and the last is [DONE].
  EXPECT_EQ(r.body.substr(0, 6), "data: ");
  EXPECT_EQ(r.body.substr(r.body.size() - 14), "data: [DONE]\n\n");
  auto events = SseData(r.body);
  ASSERT_GE(events.size(), 3u);
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json c = json::parse(events[i]);
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(finish, "length");
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
  json ns =
      Post("/v1/completions",
           {{"prompt", "hello"}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(text, ns["choices"][0]["text"]);
}

// --- Batch prompts and echo (/v1/completions) ---

size_t CodePointCount(const std::string& s) {
  size_t n = 0;
  for (char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

// The legacy logprobs invariants: the token strings, concatenated, are the start of the text (the
// end may hold a flushed partial character), and each text_offset is the code points before it.
void ExpectTokensSpellTheText(const json& choice) {
  const json& lp = choice["logprobs"];
  std::string joined;
  ASSERT_EQ(lp["tokens"].size(), lp["text_offset"].size());
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), CodePointCount(joined)) << i;
    joined += lp["tokens"][i].get<std::string>();
  }
  const std::string text = choice["text"].get<std::string>();
  EXPECT_EQ(text.substr(0, joined.size()), joined);
}

TEST_F(ServerTest, BatchPromptsGiveOneChoicePerPromptAndSampleInOpenAIOrder) {
  StartEngine();
  const json prompts = {"hello", "world", json::array({5, 6, 7})};
  json base = {{"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}, {"n", 2}};
  std::vector<std::string> singles;
  int st = 0;
  int prompt_tokens = 0;
  for (const json& p : prompts) {
    json b = base;
    b["prompt"] = p;
    b["n"] = 1;
    json r = Post("/v1/completions", b, &st);
    ASSERT_EQ(st, 200) << r;
    singles.push_back(r["choices"][0]["text"]);
    prompt_tokens += r["usage"]["prompt_tokens"].get<int>();
  }
  json b = base;
  b["prompt"] = prompts;
  json r = Post("/v1/completions", b, &st);
  ASSERT_EQ(st, 200) << r;
  ASSERT_EQ(r["choices"].size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(r["choices"][i]["index"], i);
    EXPECT_EQ(r["choices"][i]["text"], singles[i / 2]) << "choice " << i;  // prompt i / n
    EXPECT_EQ(r["choices"][i]["finish_reason"], "length");
  }
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(r["usage"]["completion_tokens"], 30);
  // Streamed: chunks carry their choice's index; per index the same text, one finish each.
  b["stream"] = true;
  auto s = HttpCall(port_, "POST", "/v1/completions", b.dump());
  ASSERT_EQ(s.status, 200);
  std::map<int, std::string> texts;
  std::map<int, int> finishes;
  for (auto& e : SseData(s.body)) {
    if (e == "[DONE]") continue;
    json c = json::parse(e);
    ASSERT_EQ(c["choices"].size(), 1u);
    const int idx = c["choices"][0]["index"];
    texts[idx] += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finishes[idx] += 1;
  }
  ASSERT_EQ(texts.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(texts[i], singles[static_cast<size_t>(i / 2)]) << i;
    EXPECT_EQ(finishes[i], 1) << i;
  }
  // A one-element batch is a single prompt.
  b = base;
  b["prompt"] = json::array({"hello"});
  b["n"] = 1;
  r = Post("/v1/completions", b, &st);
  ASSERT_EQ(st, 200);
  ASSERT_EQ(r["choices"].size(), 1u);
  EXPECT_EQ(r["choices"][0]["text"], singles[0]);
}

TEST_F(ServerTest, BatchPromptErrorsNamePromptBeforeAnythingRuns) {
  // The engine is not started: a request that got submitted would hang, so a 400 proves it was
  // refused at the edge.
  auto expect_400 = [&](const json& body, const std::string& param, const std::string& what) {
    int st = 0;
    json r = Post("/v1/completions", body, &st);
    EXPECT_EQ(st, 400) << body;
    EXPECT_EQ(r["error"]["param"], param) << r;
    EXPECT_NE(r["error"]["message"].get<std::string>().find(what), std::string::npos) << r;
  };
  expect_400({{"prompt", json::array({json::array({1, 2}), json::array()})}}, "prompt",
             "prompt[1]: is empty");
  expect_400({{"prompt", json::array({json::array({1}), json::array({1, 100000})})}}, "prompt",
             "prompt[1]: token id 100000 is outside the vocabulary");
  expect_400({{"prompt", json::array({"a", 7})}}, "prompt", "prompt[1]: must be a string");
  expect_400({{"prompt", json::array()}}, "prompt", "non-empty");
  expect_400({{"prompt", std::vector<std::string>(65, "x")}}, "prompt", "at most 64 prompts");
  expect_400({{"prompt", std::vector<std::string>(9, "x")}, {"n", 16}}, "n", "144 choices");
  std::vector<int32_t> too_long(kMaxLen, 5);
  expect_400({{"prompt", json::array({json::array({1}), too_long})}}, "prompt",
             "prompt[1]: the prompt has 256 tokens");
  EXPECT_EQ(api_->live_jobs(), 0);
}

TEST_F(ServerTest, EchoPrependsThePromptWithItsLogprobs) {
  StartEngine();
  int st = 0;
  json plain = Post("/v1/completions",
                    {{"prompt", "hello"},
                     {"max_tokens", 6},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"logprobs", 3}},
                    &st);
  ASSERT_EQ(st, 200);
  json r = Post("/v1/completions",
                {{"prompt", "hello"},
                 {"max_tokens", 6},
                 {"temperature", 0},
                 {"ignore_eos", true},
                 {"logprobs", 3},
                 {"echo", true}},
                &st);
  ASSERT_EQ(st, 200) << r;
  const json& c = r["choices"][0];
  EXPECT_EQ(c["text"].get<std::string>().substr(0, 5), "hello");
  const std::vector<int32_t> ids = tok_->Encode("hello", true, true);
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), ids.size() + 6);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());  // the first prompt token has no context
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  // Each prompt position's logprob is the fake model's log-softmax after the tokens before it.
  std::vector<float> row(tok_->n_vocab());
  for (size_t i = 1; i < ids.size(); ++i) {
    std::vector<int32_t> hist(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(i));
    runner_->Logits(engine::sched::FakeModelRunner::Chain(hist), static_cast<int>(i) - 1, row);
    double mx = *std::max_element(row.begin(), row.end()), sum = 0;
    for (float v : row) sum += std::exp(v - mx);
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(),
                row[static_cast<size_t>(ids[i])] - (mx + std::log(sum)), 1e-4)
        << i;
    EXPECT_EQ(lp["top_logprobs"][i].size(), 3u) << i;
  }
  // The completion part is the plain request's, shifted by the prompt.
  EXPECT_EQ(c["text"].get<std::string>(), "hello" + plain["choices"][0]["text"].get<std::string>());
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(lp["tokens"][ids.size() + i], plain["choices"][0]["logprobs"]["tokens"][i]);
    EXPECT_EQ(lp["token_logprobs"][ids.size() + i],
              plain["choices"][0]["logprobs"]["token_logprobs"][i]);
  }
  ExpectTokensSpellTheText(c);
  ExpectTokensSpellTheText(plain["choices"][0]);

  // Streamed, n = 2: the first chunk of each choice carries the prompt and its logprobs; the
  // concatenation equals the non-streamed choice.
  auto s = HttpCall(port_, "POST", "/v1/completions",
                    json{{"prompt", "hello"},
                         {"max_tokens", 6},
                         {"temperature", 0},
                         {"ignore_eos", true},
                         {"logprobs", 3},
                         {"echo", true},
                         {"n", 2},
                         {"stream", true}}
                        .dump());
  ASSERT_EQ(s.status, 200);
  std::map<int, std::string> texts;
  std::map<int, json> tokens;
  for (auto& e : SseData(s.body)) {
    if (e == "[DONE]") continue;
    json ch = json::parse(e)["choices"][0];
    const int idx = ch["index"];
    if (!texts.count(idx)) {
      EXPECT_EQ(ch["text"].get<std::string>().substr(0, 5), "hello");
    }
    texts[idx] += ch["text"].get<std::string>();
    if (!ch["logprobs"].is_null())
      for (auto& t : ch["logprobs"]["tokens"]) tokens[idx].push_back(t);
  }
  ASSERT_EQ(texts.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(texts[i], c["text"]) << i;
    EXPECT_EQ(tokens[i], lp["tokens"]) << i;
  }
}

TEST_F(ServerTest, EchoWithZeroMaxTokensReturnsThePromptAlone) {
  StartEngine();
  int st = 0;
  json r = Post("/v1/completions",
                {{"prompt", json::array({"hello", "abc"})},
                 {"max_tokens", 0},
                 {"echo", true},
                 {"logprobs", 1}},
                &st);
  ASSERT_EQ(st, 200) << r;
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][0]["text"], "hello");
  EXPECT_EQ(r["choices"][1]["text"], "abc");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"].size(), tok_->Encode("hello", true, true).size());
  EXPECT_EQ(r["usage"]["completion_tokens"], 0);
  ExpectTokensSpellTheText(r["choices"][1]);
  auto s = HttpCall(
      port_, "POST", "/v1/completions",
      json{{"prompt", "hello"}, {"max_tokens", 0}, {"echo", true}, {"stream", true}}.dump());
  ASSERT_EQ(s.status, 200);
  std::string text;
  for (auto& e : SseData(s.body))
    if (e != "[DONE]") text += json::parse(e)["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "hello");
  // Without echo, 0 stays out of range; chat has no echo.
  Post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 0}}, &st);
  EXPECT_EQ(st, 400);
  json cr = Post("/v1/chat/completions",
                 {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"echo", true}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(cr["error"]["param"], "echo");
}

TEST_F(ServerTest, CompletionTopLogprobsAreOrderedByProbability) {
  StartEngine();
  auto r =
      HttpCall(port_, "POST", "/v1/completions",
               json{{"prompt", "hello"}, {"max_tokens", 8}, {"logprobs", 5}, {"seed", 3}}.dump());
  ASSERT_EQ(r.status, 200);
  // Parsed keeping the key order as sent.
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(r.body);
  const auto& tops = body["choices"][0]["logprobs"]["top_logprobs"];
  ASSERT_EQ(tops.size(), 8u);
  bool some_unsorted_by_key = false;
  for (const auto& m : tops) {
    ASSERT_GE(m.size(), 1u);
    double prev = 1;
    std::string prev_key;
    for (const auto& [k, v] : m.items()) {
      EXPECT_LE(v.get<double>(), prev) << m.dump();
      prev = v.get<double>();
      if (!prev_key.empty() && k < prev_key) some_unsorted_by_key = true;
      prev_key = k;
    }
  }
  EXPECT_TRUE(some_unsorted_by_key) << "the order should differ from a map's (by token string)";
  ExpectTokensSpellTheText(json::parse(r.body)["choices"][0]);
}

bool Ascii(const std::string& s) {
  if (s.empty()) return false;
  for (char ch : s)
    if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f)
      return false;
  return true;
}

TEST_F(ServerTest, StopStringAcrossTokenBoundaries) {
  StartEngine();
  // What the fake model generates without stops, then a stop string spanning two of its tokens.
  json base = {{"messages", {{{"role", "user"}, {"content", "abc"}}}},
               {"max_tokens", 40},
               {"temperature", 0},
               {"ignore_eos", true}};
  json lp = base;
  lp["logprobs"] = true;
  json r = Post("/v1/chat/completions", lp);
  auto pieces = PieceBytes(r["choices"][0]["logprobs"]["content"]);
  std::string full = r["choices"][0]["message"]["content"];
  size_t i = 1;
  while (i + 1 < pieces.size() && !(Ascii(pieces[i]) && Ascii(pieces[i + 1]))) ++i;
  ASSERT_LT(i + 1, pieces.size()) << "no two adjacent ASCII tokens in " << full;
  std::string stop = pieces[i].substr(pieces[i].size() - 1) + pieces[i + 1].substr(0, 1);
  size_t expect_at = full.find(stop);
  ASSERT_NE(expect_at, std::string::npos);
  for (bool stream : {false, true}) {
    json b = base;
    b["stop"] = {stop, "\u0001never"};
    b["stream"] = stream;
    auto resp = HttpCall(port_, "POST", "/v1/chat/completions", b.dump());
    ASSERT_EQ(resp.status, 200);
    std::string text, finish;
    if (stream) {
      for (auto& e : SseData(resp.body)) {
        if (e == "[DONE]") continue;
        json c = json::parse(e);
        if (c["choices"][0]["delta"].contains("content"))
          text += c["choices"][0]["delta"]["content"].get<std::string>();
        if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
      }
    } else {
      json c = json::parse(resp.body);
      text = c["choices"][0]["message"]["content"];
      finish = c["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(text, full.substr(0, expect_at)) << "stream=" << stream << " stop='" << stop << "'";
    EXPECT_EQ(finish, "stop");
  }
  // The stopped request was cancelled in the engine: nothing left running.
  for (int k = 0; k < 200 && engine_->Stats().running_requests != 0; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine_->Stats().running_requests, 0);
}

TEST_F(ServerTest, ChatCompletionStreamsRoleThenContent) {
  StartEngine();
  json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
               {"max_completion_tokens", 4},
               {"stream", true},
               {"ignore_eos", true},
               {"temperature", 0}};
  auto r = HttpCall(port_, "POST", "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200);
  auto events = SseData(r.body);
  ASSERT_GE(events.size(), 2u);
  json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events.back(), "[DONE]");
  int st = 0;
  json ns = Post("/v1/chat/completions",
                 {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                  {"max_tokens", 4},
                  {"ignore_eos", true},
                  {"n", 2}},
                 &st);
  ASSERT_EQ(st, 200) << ns;
  EXPECT_EQ(ns["choices"].size(), 2u);
  EXPECT_EQ(ns["choices"][1]["message"]["role"], "assistant");
  EXPECT_EQ(ns["usage"]["completion_tokens"], 8);
  EXPECT_EQ(ns["usage"]["prompt_tokens"],
            tok_->Encode("<user>hi\n<assistant>", false, true).size());
}

TEST_F(ServerTest, BodyLimitIs413) {
  std::string big(70000, 'a');
  auto r = HttpCall(port_, "POST", "/v1/completions", big);
  EXPECT_EQ(r.status, 413);
}

TEST_F(ServerTest, ExpectContinueGetsInterimResponse) {
  HttpConn c(port_);
  std::string body = R"({"content":"hi"})";
  ASSERT_TRUE(
      c.SendRaw("POST /tokenize HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n"));
  ASSERT_TRUE(
      c.ReadUntil([](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; }, 5));
  EXPECT_EQ(c.buffer().rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << c.buffer();
  c.buffer().clear();
  ASSERT_TRUE(c.SendRaw(body));
  EXPECT_EQ(c.ReadResponse().status, 200);
}

TEST_F(ServerTest, SlowClientTimesOut) {
  HttpConn c(port_);
  ASSERT_TRUE(
      c.SendRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"));
  // read_timeout is 500 ms in this fixture: the server answers 408 or closes.
  bool closed = c.ReadUntil([](const std::string&) { return false; }, 3.0);
  EXPECT_FALSE(closed);
  EXPECT_TRUE(c.eof());
}

TEST_F(ServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  HttpConn c(port_);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.Send("GET", "/health"));
    auto r = c.ReadResponse();
    EXPECT_EQ(r.status, 200);
  }
}

TEST_F(ServerTest, DisconnectCancelsTheRequest) {
  StartEngine();
  {
    HttpConn c(port_);
    json body = {{"prompt", "hello"}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", true}};
    ASSERT_TRUE(c.Send("POST", "/v1/completions", body.dump()));
    ASSERT_TRUE(
        c.ReadUntil([](const std::string& b) { return b.find("\"text\"") != std::string::npos; }));
  }  // closes the socket mid-stream
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  engine::sched::EngineStats s;
  while (std::chrono::steady_clock::now() < deadline) {
    s = engine_->Stats();
    if (s.running_requests == 0 && s.kv_used_blocks == 0 && api_->live_jobs() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(s.running_requests, 0);
  EXPECT_EQ(s.kv_used_blocks, 0);
  EXPECT_LT(s.generated_tokens, 200);
  EXPECT_EQ(api_->live_jobs(), 0);
  auto m = HttpCall(port_, "GET", "/metrics");
  EXPECT_NE(m.body.find("strata:request_success_total{model_name=\"fake\",tier=\"silver\",finished_"
                        "reason=\"abort\"} 1"),
            std::string::npos)
      << m.body;
}

TEST_F(ServerTest, ConcurrentStreams) {
  StartEngine();
  constexpr int kClients = 8;
  std::vector<std::thread> threads;
  threads.reserve(kClients);
  std::vector<std::string> texts(kClients);
  std::vector<int> statuses(kClients);
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      json body = {{"prompt", "abc"},
                   {"max_tokens", 16},
                   {"ignore_eos", true},
                   {"stream", true},
                   {"temperature", 0}};
      auto r = HttpCall(port_, "POST", "/v1/completions", body.dump());
      statuses[i] = r.status;
      for (auto& e : SseData(r.body))
        if (e != "[DONE]") texts[i] += json::parse(e)["choices"][0]["text"].get<std::string>();
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(statuses[i], 200);
    EXPECT_EQ(texts[i], texts[0]);  // greedy, same prompt: identical regardless of batching
  }
  EXPECT_FALSE(texts[0].empty());
}

TEST_F(ServerTest, MetricsScrapeHasTheDocumentedFamilies) {
  StartEngine();
  Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 3}, {"ignore_eos", true}});
  // Per-request counters are recorded when the request's bookkeeping ends, which may be just after
  // the response reached the client: scrape until they show up (bounded).
  const std::string want_gen =
      "strata:generation_tokens_total{model_name=\"fake\",tier=\"silver\"} 3";
  auto m = HttpCall(port_, "GET", "/metrics");
  for (int i = 0; i < 500 && m.body.find(want_gen) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    m = HttpCall(port_, "GET", "/metrics");
  }
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.headers["content-type"].rfind("text/plain", 0), 0u);
  for (const char* name :
       {"time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
        "request_queue_time_seconds", "request_prompt_tokens", "request_generation_tokens",
        "num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
        "prompt_tokens_total", "generation_tokens_total", "prefix_cache_queries_total",
        "prefix_cache_hits_total", "num_preemptions_total", "engine_steps_total",
        "engine_tokens_computed_total", "request_success_total", "http_requests_total"})
    EXPECT_NE(m.body.find(std::string("# TYPE strata:") + name + " "), std::string::npos) << name;
  EXPECT_NE(m.body.find("strata:generation_tokens_total{model_name=\"fake\",tier=\"silver\"} 3"),
            std::string::npos)
      << m.body;
  // Every sample line parses as `name{labels} value`.
  size_t pos = 0;
  while (pos < m.body.size()) {
    size_t e = m.body.find('\n', pos);
    std::string line = m.body.substr(pos, e - pos);
    pos = e + 1;
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    EXPECT_EQ(line.rfind("strata:", 0), 0u) << line;
    std::string v = line.substr(sp + 1);
    char* end = nullptr;
    std::strtod(v.c_str(), &end);
    EXPECT_TRUE(*end == '\0' || v == "+Inf") << line;
  }
}

TEST_F(ServerTest, TierFromBodyOrHeaderAndNChoicesStream) {
  StartEngine();
  auto r = HttpCall(port_, "POST", "/v1/completions",
                    json{{"prompt", "x"}, {"max_tokens", 2}, {"ignore_eos", true}}.dump(),
                    {"x-strata-tier: gold"});
  EXPECT_EQ(r.status, 200);
  int st = 0;
  Post("/v1/completions",
       {{"prompt", "x"},
        {"max_tokens", 3},
        {"ignore_eos", true},
        {"priority", "bronze"},
        {"deadline_ms", 5000}},
       &st);
  EXPECT_EQ(st, 200);
  auto bad = HttpCall(port_, "POST", "/v1/completions", json{{"prompt", "x"}}.dump(),
                      {"x-strata-deadline-ms: soon"});
  EXPECT_EQ(bad.status, 400);
  auto m = HttpCall(port_, "GET", "/metrics").body;
  EXPECT_NE(m.find("strata:generation_tokens_total{model_name=\"fake\",tier=\"gold\"} 2"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("strata:generation_tokens_total{model_name=\"fake\",tier=\"bronze\"} 3"),
            std::string::npos)
      << m;
  // n = 3 streamed: every index gets its own finish_reason.
  auto s = HttpCall(
      port_, "POST", "/v1/completions",
      json{{"prompt", "x"}, {"max_tokens", 4}, {"ignore_eos", true}, {"n", 3}, {"stream", true}}
          .dump());
  ASSERT_EQ(s.status, 200);
  std::set<int> finished;
  for (auto& e : SseData(s.body)) {
    if (e == "[DONE]") continue;
    json c = json::parse(e);
    if (!c["choices"][0]["finish_reason"].is_null())
      finished.insert(c["choices"][0]["index"].get<int>());
  }
  EXPECT_EQ(finished, (std::set<int>{0, 1, 2}));
}

// ---------------------------------------------------------------------------------------------
// The last-resort guard, fired on purpose from inside the Api: a 500 with the OpenAI body, counted
// in strata:internal_errors_total, and the server keeps serving (same and other connections).

std::string MetricLine(const std::string& body, const std::string& prefix) {
  size_t p = body.find(prefix);
  if (p == std::string::npos) return "";
  return body.substr(p, body.find('\n', p) - p);
}

TEST_F(ServerTest, InternalErrorIsA500CountedAndTheServerKeepsServing) {
  StartEngine();
  HttpConn c(port_);
  ASSERT_TRUE(c.Send("GET", "/v1/models", "", {"x-test-throw: respond"}));
  auto r = c.ReadResponse(10);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 500);
  json e = json::parse(r.body, nullptr, false);
  ASSERT_FALSE(e.is_discarded()) << r.body;
  EXPECT_EQ(e["error"]["type"], "server_error");
  EXPECT_EQ(e["error"]["code"], "internal_error");
  ASSERT_TRUE(c.Send("GET", "/v1/models"));  // the same connection still serves
  r = c.ReadResponse(10);
  EXPECT_EQ(r.status, 200);
  // A stream whose drain throws (on the response's work strand): ended, counted.
  json body = {{"prompt", "hello"}, {"max_tokens", 4}, {"ignore_eos", true}, {"stream", true}};
  auto s = HttpCall(port_, "POST", "/v1/completions", body.dump(), {"x-test-throw: write"});
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(s.body.find("[DONE]"), std::string::npos) << s.body;  // cut short, not completed
  // Another connection, a full generation.
  json ok = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}, {"ignore_eos", true}});
  EXPECT_EQ(ok["choices"][0]["finish_reason"], "length") << ok;
  auto m = HttpCall(port_, "GET", "/metrics");
  EXPECT_NE(m.body.find("# TYPE strata:internal_errors_total counter"), std::string::npos);
  EXPECT_NE(m.body.find("# HELP strata:internal_errors_total "), std::string::npos);
  EXPECT_EQ(
      MetricLine(m.body, "strata:internal_errors_total{model_name=\"fake\",route=\"/v1/models\"}"),
      "strata:internal_errors_total{model_name=\"fake\",route=\"/v1/models\"} 1");
  EXPECT_EQ(
      MetricLine(m.body,
                 "strata:internal_errors_total{model_name=\"fake\",route=\"/v1/completions\"}"),
      "strata:internal_errors_total{model_name=\"fake\",route=\"/v1/completions\"} 1");
  EXPECT_NE(m.body.find("strata:http_requests_total{model_name=\"fake\",route=\"/v1/models\","
                        "status=\"500\"} 1"),
            std::string::npos);
}

// /tokenize as llama.cpp's server: add_special false, parse_special true, with_pieces false; a
// piece that is not valid UTF-8 comes as its bytes. Wrong types are 400s naming the field.
TEST_F(ServerTest, TokenizeDefaultsAndPiecesAsLlamaCpp) {
  int st = 0;
  json t = Post("/tokenize", {{"content", "hi"}}, &st);
  ASSERT_EQ(st, 200) << t;
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), tok_->Encode("hi", false, true));
  t = Post("/tokenize", {{"content", "hi"}, {"add_special", true}}, &st);
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), tok_->Encode("hi", true, true));
  t = Post("/tokenize", {{"content", "hi"}, {"parse_special", false}}, &st);
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), tok_->Encode("hi", false, false));
  // "é" is two bytes, each its own token in the byte-level vocabulary: neither is valid UTF-8.
  t = Post("/tokenize", {{"content", "a\xc3\xa9"}, {"with_pieces", true}}, &st);
  ASSERT_EQ(st, 200) << t;
  ASSERT_EQ(t["tokens"].size(), 3u) << t;
  EXPECT_EQ(t["tokens"][0]["piece"], "a");
  EXPECT_EQ(t["tokens"][1]["piece"], json::array({0xc3})) << t;
  EXPECT_EQ(t["tokens"][2]["piece"], json::array({0xa9})) << t;
  EXPECT_EQ(t["tokens"][0]["id"], tok_->Encode("a", false, true)[0]);
  for (const char* field : {"add_special", "parse_special", "with_pieces"}) {
    json bad = Post("/tokenize", {{"content", "x"}, {field, "yes"}}, &st);
    EXPECT_EQ(st, 400) << field;
    EXPECT_EQ(bad["error"]["param"], field);
  }
  json bad = Post("/tokenize", {{"content", 5}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(bad["error"]["param"], "content");
  bad = Post("/tokenize", json::object(), &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(bad["error"]["param"], "content");
  bad = Post("/detokenize", {{"tokens", {1, "x"}}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(bad["error"]["param"], "tokens");
  bad = Post("/detokenize", {{"tokens", "x"}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(bad["error"]["param"], "tokens");
}

TEST_F(ServerTest, ApplyTemplateValidatesLikeChat) {
  int st = 0;
  const json msgs = {{{"role", "user"}, {"content", "hi"}}};
  json a = Post("/apply-template", {{"messages", msgs}, {"add_generation_prompt", false}}, &st);
  EXPECT_EQ(st, 200);
  EXPECT_EQ(a["prompt"], "<user>hi\n");
  for (const json& kw : {json("x"), json(1), json::array()}) {
    json bad = Post("/apply-template", {{"messages", msgs}, {"chat_template_kwargs", kw}}, &st);
    EXPECT_EQ(st, 400) << kw;
    EXPECT_EQ(bad["error"]["param"], "chat_template_kwargs");
    json chat =
        Post("/v1/chat/completions", {{"messages", msgs}, {"chat_template_kwargs", kw}}, &st);
    EXPECT_EQ(st, 400) << kw;
    EXPECT_EQ(chat["error"]["param"], "chat_template_kwargs");
  }
  json bad = Post("/apply-template", {{"messages", msgs}, {"add_generation_prompt", 1}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(bad["error"]["param"], "add_generation_prompt");
  bad = Post("/apply-template", {{"messages", {{{"role", "user"}, {"content", {{{"type", 5}}}}}}}},
             &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(bad["error"]["param"], "messages");
}

TEST_F(ServerTest, DeeplyNestedBodyIs400NamingTheBody) {
  std::string deep = "{\"prompt\":" + std::string(10000, '[') + std::string(10000, ']') + "}";
  auto r = HttpCall(port_, "POST", "/v1/completions", deep);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "body");
  // Brackets inside strings are not nesting.
  json ok = Post("/tokenize", {{"content", std::string(1000, '[')}});
  EXPECT_EQ(ok["count"], 1000);
}

class AuthServerTest : public ServerTest {
 protected:
  void SetUp() override { Boot(1024, {"k1", "sekrit"}); }
};

TEST_F(AuthServerTest, BearerKeyRequiredExceptHealthAndReady) {
  EXPECT_EQ(HttpCall(port_, "GET", "/health").status, 200);
  EXPECT_EQ(HttpCall(port_, "GET", "/ready").status, 200);
  auto r = HttpCall(port_, "GET", "/v1/models");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "authentication_error");
  EXPECT_EQ(r.headers["www-authenticate"], "Bearer");
  EXPECT_EQ(HttpCall(port_, "GET", "/metrics", "", {"Authorization: Bearer wrong"}).status, 401);
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/models", "", {"Authorization: Bearer sekrit"}).status, 200);
  EXPECT_EQ(HttpCall(port_, "GET", "/metrics", "", {"Authorization: Bearer k1"}).status, 200);
}

class TinyQueueTest : public ServerTest {
 protected:
  void SetUp() override { Boot(1, {}); }
};

TEST_F(TinyQueueTest, AdmissionBoundGives429WithRetryAfter) {
  // Engine not started: the first request stays queued, the second hits the bound.
  HttpConn first(port_);
  ASSERT_TRUE(
      first.Send("POST", "/v1/completions", json{{"prompt", "x"}, {"max_tokens", 2}}.dump()));
  for (int i = 0; i < 10000 && api_->live_jobs() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(api_->live_jobs(), 1);  // the first request is queued in the engine
  testing::HttpReply r =
      HttpCall(port_, "POST", "/v1/completions", json{{"prompt", "y"}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.headers["retry-after"], "1");
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "rate_limit_error");
  StartEngine();
  EXPECT_EQ(first.ReadResponse().status, 200);
}

// Waits (up to 20 s) until the Api holds `n` live jobs.
void WaitForJobs(const Api& api, int n) {
  for (int i = 0; i < 10000 && api.live_jobs() != n; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// The error object of a streamed response cut by an engine error: [error event, "[DONE]"].
json StreamedError(const std::string& body) {
  auto events = SseData(body);
  if (events.size() < 2 || events.back() != "[DONE]") return json();
  return json::parse(events[events.size() - 2], nullptr, false);
}

TEST_F(ServerTest, DeadlinePassedWhileQueuedIs504OrAStreamedErrorEvent) {
  // Engine not started: both requests stay queued until the test steps the engine.
  HttpConn plain(port_), streamed(port_);
  ASSERT_TRUE(plain.Send("POST", "/v1/completions",
                         json{{"prompt", "x"}, {"max_tokens", 2}, {"deadline_ms", 1}}.dump()));
  ASSERT_TRUE(streamed.Send("POST", "/v1/chat/completions",
                            json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                 {"max_tokens", 2},
                                 {"stream", true}}
                                .dump(),
                            {"x-strata-deadline-ms: 1"}));
  WaitForJobs(*api_, 2);
  ASSERT_EQ(api_->live_jobs(), 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // both deadlines pass
  ASSERT_TRUE(engine_->Step().ok());
  testing::HttpReply r = plain.ReadResponse();
  EXPECT_EQ(r.status, 504);
  json e = json::parse(r.body)["error"];
  EXPECT_EQ(e["type"], "timeout_error");
  EXPECT_EQ(e["code"], "deadline_exceeded");
  EXPECT_EQ(e["param"], "deadline_ms");
  testing::HttpReply sr = streamed.ReadResponse();
  EXPECT_EQ(sr.status, 200);
  json se = StreamedError(sr.body);
  ASSERT_TRUE(se.contains("error")) << sr.body;
  EXPECT_EQ(se["error"]["code"], "deadline_exceeded");
  EXPECT_EQ(engine_->Stats().deadline_expired, 2);
  // A deadline that has not passed does not end the request.
  StartEngine();
  int status = 0;
  Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}, {"deadline_ms", 60000}}, &status);
  EXPECT_EQ(status, 200);
  auto m = HttpCall(port_, "GET", "/metrics");
  EXPECT_NE(m.body.find("strata:requests_deadline_exceeded_total{model_name=\"fake\",tier="
                        "\"silver\"} 2"),
            std::string::npos)
      << m.body;
  EXPECT_NE(m.body.find("route=\"/v1/completions\",status=\"504\"} 1"), std::string::npos);
}

TEST_F(TinyQueueTest, GoldDisplacesTheQueuedBronzeWhichGets429) {
  // Engine not started; the queue holds one request.
  HttpConn bronze(port_);
  ASSERT_TRUE(bronze.Send("POST", "/v1/completions",
                          json{{"prompt", "x"}, {"max_tokens", 2}, {"priority", "bronze"}}.dump()));
  WaitForJobs(*api_, 1);
  ASSERT_EQ(api_->live_jobs(), 1);
  // Silver over bronze: accepted; the bronze is displaced at the next step.
  HttpConn silver(port_);
  ASSERT_TRUE(silver.Send("POST", "/v1/completions",
                          json{{"prompt", "y"}, {"max_tokens", 2}, {"stream", true}}.dump()));
  WaitForJobs(*api_, 2);
  ASSERT_EQ(api_->live_jobs(), 2);
  ASSERT_TRUE(engine_->Step().ok());  // ends the bronze; admits the silver
  testing::HttpReply r = bronze.ReadResponse();
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.headers["retry-after"], "1");
  json e = json::parse(r.body)["error"];
  EXPECT_EQ(e["type"], "rate_limit_error");
  EXPECT_EQ(e["code"], "displaced");
  // The bronze's job is forgotten after its answer went out: wait for it, so that the count of 3
  // below means the gold was submitted (else the engine could admit the streamed bronze first).
  WaitForJobs(*api_, 1);
  ASSERT_EQ(api_->live_jobs(), 1);
  // Streamed (headers already sent): a gold displaces a queued streamed bronze -> error + [DONE].
  HttpConn bronze_stream(port_);
  ASSERT_TRUE(bronze_stream.Send(
      "POST", "/v1/completions",
      json{{"prompt", "z"}, {"max_tokens", 2}, {"priority", "bronze"}, {"stream", true}}.dump()));
  ASSERT_TRUE(bronze_stream.ReadUntil(
      [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; }));
  testing::HttpReply same =
      HttpCall(port_, "POST", "/v1/completions",
               json{{"prompt", "w"}, {"max_tokens", 2}, {"priority", "bronze"}}.dump());
  EXPECT_EQ(same.status, 429);  // bronze never displaces bronze: refused at once
  HttpConn gold(port_);
  ASSERT_TRUE(gold.Send("POST", "/v1/completions",
                        json{{"prompt", "g"}, {"max_tokens", 2}, {"priority", "gold"}}.dump()));
  WaitForJobs(*api_, 3);  // silver (admitted), bronze stream, gold
  StartEngine();
  testing::HttpReply bs = bronze_stream.ReadResponse();
  json se = StreamedError(bs.body);
  ASSERT_TRUE(se.contains("error")) << bs.body;
  EXPECT_EQ(se["error"]["code"], "displaced");
  EXPECT_EQ(gold.ReadResponse().status, 200);
  EXPECT_EQ(silver.ReadResponse().status, 200);
  EXPECT_EQ(engine_->Stats().displaced, 2);
  auto m = HttpCall(port_, "GET", "/metrics");
  EXPECT_NE(m.body.find("strata:requests_displaced_total{model_name=\"fake\",tier=\"bronze\"} 2"),
            std::string::npos)
      << m.body;
}

}  // namespace
}  // namespace strata::server
