// Server tests of the OpenAI request fields (issue 14): the field table covers every OpenAI
// completions/chat field and refuses unsupported ones by name, logit_bias, n x seed streams,
// created/ids, integer priority and return_token_ids — in process, over the fixture of
// server_test_util.h.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "server/openai_fields.h"
#include "server/openai_request.h"
#include "server/server_test_util.h"

namespace strata::server {
namespace {

using nlohmann::json;
using test::kMaxLen;
using test::ServerTest;
using testing::HttpCall;
using testing::HttpConn;
using testing::SseData;

// --- Issue 14: every OpenAI field does what it says or is refused by name. ---

ModelInfo InfoFor(const tokenizer::Tokenizer* tok, const tokenizer::chat::ChatTemplate* tmpl) {
  ModelInfo info;
  info.name = "fake";
  info.tok = tok;
  info.chat_template = tmpl;
  info.max_model_len = kMaxLen;
  return info;
}

json BaseBody(Endpoint ep) {
  if (ep == Endpoint::kChat) return {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  return {{"prompt", "hi"}};
}

// The OpenAI API reference's request fields (completions; chat) must all be in the table.
TEST_F(ServerTest, FieldTableCoversEveryOpenAiField) {
  const std::vector<std::string> completions = {"model",
                                                "prompt",
                                                "suffix",
                                                "max_tokens",
                                                "temperature",
                                                "top_p",
                                                "n",
                                                "stream",
                                                "stream_options",
                                                "logprobs",
                                                "echo",
                                                "stop",
                                                "presence_penalty",
                                                "frequency_penalty",
                                                "best_of",
                                                "logit_bias",
                                                "user",
                                                "seed"};
  const std::vector<std::string> chat = {"messages",
                                         "model",
                                         "store",
                                         "reasoning_effort",
                                         "metadata",
                                         "frequency_penalty",
                                         "logit_bias",
                                         "logprobs",
                                         "top_logprobs",
                                         "max_tokens",
                                         "max_completion_tokens",
                                         "n",
                                         "modalities",
                                         "prediction",
                                         "audio",
                                         "presence_penalty",
                                         "response_format",
                                         "seed",
                                         "service_tier",
                                         "stop",
                                         "stream",
                                         "stream_options",
                                         "temperature",
                                         "top_p",
                                         "tools",
                                         "tool_choice",
                                         "parallel_tool_calls",
                                         "user",
                                         "function_call",
                                         "functions",
                                         "web_search_options",
                                         "safety_identifier",
                                         "prompt_cache_key",
                                         "prompt_cache_retention",
                                         "verbosity"};
  auto has = [](const std::string& name, Endpoint ep) {
    for (const FieldSpec& s : RequestFieldTable())
      if (s.name == name && OnEndpoint(s, ep)) return true;
    return false;
  };
  for (const auto& f : completions) EXPECT_TRUE(has(f, Endpoint::kCompletions)) << f;
  for (const auto& f : chat) EXPECT_TRUE(has(f, Endpoint::kChat)) << f;
  EXPECT_FALSE(has("suffix", Endpoint::kChat));
  EXPECT_FALSE(has("tools", Endpoint::kCompletions));
}

// Each unsupported / not-yet field: its refused value is a 400 naming it ("not supported"), its
// default-equivalent (or, for ignored fields, any value of the type) is accepted.
TEST_F(ServerTest, UnsupportedFieldsAreRefusedByNameDefaultsAccepted) {
  const ModelInfo info = InfoFor(tok_.get(), tmpl_.get());
  int refused = 0, accepted = 0;
  for (Endpoint ep : {Endpoint::kCompletions, Endpoint::kChat}) {
    for (const FieldSpec& s : RequestFieldTable()) {
      if (!OnEndpoint(s, ep)) continue;
      const std::string name(s.name);
      if (s.support == FieldSupport::kImplemented) {
        EXPECT_EQ(s.check, nullptr) << name;
        continue;
      }
      ASSERT_NE(s.check, nullptr) << name;
      if (!s.refused.empty()) {
        ++refused;
        json body = BaseBody(ep);
        body[name] = json::parse(s.refused);
        auto r = ParseGenRequest(ep, body, info);
        ASSERT_FALSE(r.ok()) << name;
        EXPECT_EQ(r.error().param(), name);
        EXPECT_EQ(r.error().status().code(), StatusCode::kInvalidArgument) << name;
        const std::string want =
            s.support == FieldSupport::kNotYet ? ": not supported yet" : ": not supported";
        EXPECT_EQ(r.error().message().rfind(name + want, 0), 0u) << r.error().message();
      }
      if (!s.accepted.empty()) {
        ++accepted;
        json body = BaseBody(ep);
        body[name] = json::parse(s.accepted);
        auto r = ParseGenRequest(ep, body, info);
        EXPECT_TRUE(r.ok()) << name << ": " << r.error().message();
      }
      json null_body = BaseBody(ep);
      null_body[name] = nullptr;  // null is always the default
      EXPECT_TRUE(ParseGenRequest(ep, null_body, info).ok()) << name;
    }
  }
  EXPECT_GE(refused, 15);
  EXPECT_GE(accepted, 15);
  // Wrong types of ignored fields are still 400s naming them.
  json body = BaseBody(Endpoint::kChat);
  body["user"] = 5;
  EXPECT_EQ(ParseGenRequest(Endpoint::kChat, body, info).error().param(), "user");
  body = BaseBody(Endpoint::kChat);
  body["metadata"] = "x";
  EXPECT_EQ(ParseGenRequest(Endpoint::kChat, body, info).error().param(), "metadata");
  // best_of: == n accepted, < n refused as an error of its own.
  body = BaseBody(Endpoint::kCompletions);
  body["best_of"] = 2;
  body["n"] = 2;
  EXPECT_TRUE(ParseGenRequest(Endpoint::kCompletions, body, info).ok());
  body["n"] = 3;
  auto lt = ParseGenRequest(Endpoint::kCompletions, body, info);
  EXPECT_EQ(lt.error().param(), "best_of");
  EXPECT_NE(lt.error().message().find(">= n"), std::string::npos) << lt.error().message();
}

TEST_F(ServerTest, UnsupportedFieldsOverHttp) {
  StartEngine();
  struct Case {
    std::string path;
    json extra;
    std::string param, message;
  };
  const json tools = json::parse(R"([{"type":"function","function":{"name":"f"}}])");
  const std::vector<Case> cases = {
      {"/v1/chat/completions", {{"tools", tools}}, "tools", "tools: not supported yet"},
      {"/v1/chat/completions",
       {{"response_format", {{"type", "json_schema"}}}},
       "response_format",
       "response_format: not supported yet"},
      {"/v1/chat/completions", {{"tool_choice", "required"}}, "tool_choice", "not supported yet"},
      {"/v1/chat/completions", {{"functions", {{{"name", "f"}}}}}, "functions", "not supported"},
      {"/v1/chat/completions", {{"store", true}}, "store", "store: not supported"},
      {"/v1/chat/completions", {{"audio", {{"voice", "x"}}}}, "audio", "audio: not supported"},
      {"/v1/completions", {{"suffix", "end"}}, "suffix", "suffix: not supported"},
      {"/v1/completions", {{"best_of", 3}}, "best_of", "best_of: not supported"},
      {"/v1/chat/completions", {{"echo", true}}, "echo", "echo: is not supported for chat"},
  };
  for (const auto& c : cases) {
    json body =
        c.path == "/v1/completions" ? BaseBody(Endpoint::kCompletions) : BaseBody(Endpoint::kChat);
    body.update(c.extra);
    int st = 0;
    json r = Post(c.path, body, &st);
    EXPECT_EQ(st, 400) << body;
    EXPECT_EQ(r["error"]["param"], c.param) << r;
    EXPECT_NE(r["error"]["message"].get<std::string>().find(c.message), std::string::npos) << r;
  }
  // Metadata-only and default-equivalent values are served.
  int st = 0;
  json ok = Post("/v1/chat/completions",
                 {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                  {"max_tokens", 2},
                  {"user", "u"},
                  {"metadata", {{"k", "v"}}},
                  {"store", false},
                  {"service_tier", "auto"},
                  {"response_format", {{"type", "text"}}},
                  {"tools", json::array()},
                  {"parallel_tool_calls", true}},
                 &st);
  EXPECT_EQ(st, 200) << ok;
  Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}, {"suffix", ""}, {"best_of", 1}},
       &st);
  EXPECT_EQ(st, 200);
}

TEST_F(ServerTest, LogitBiasForcesAndBansTokens) {
  StartEngine();
  const int32_t q = tok_->Encode("Q", false, false).at(0);
  int st = 0;
  json base = {
      {"prompt", "hello"}, {"max_tokens", 6}, {"ignore_eos", true}, {"return_token_ids", true}};
  for (double temperature : {0.0, 1.0}) {
    json body = base;
    body["temperature"] = temperature;
    body["logit_bias"] = {{std::to_string(q), 100}};
    json r = Post("/v1/completions", body, &st);
    ASSERT_EQ(st, 200) << r;
    EXPECT_EQ(r["choices"][0]["text"], "QQQQQQ") << temperature;
    EXPECT_EQ(r["choices"][0]["token_ids"], std::vector<int32_t>(6, q));
  }
  // -100 bans: the greedy first token never appears again.
  json plain = base;
  plain["temperature"] = 0;
  json g = Post("/v1/completions", plain, &st);
  ASSERT_EQ(st, 200);
  const int32_t first = g["choices"][0]["token_ids"][0].get<int32_t>();
  json banned = plain;
  banned["logit_bias"] = {{std::to_string(first), -100}};
  json b = Post("/v1/chat/completions",
                {{"messages", {{{"role", "user"}, {"content", "hello"}}}},
                 {"max_tokens", 12},
                 {"temperature", 1.5},
                 {"ignore_eos", true},
                 {"return_token_ids", true},
                 {"logit_bias", {{std::to_string(first), -100}}}},
                &st);
  ASSERT_EQ(st, 200) << b;
  for (const auto& id : b["choices"][0]["token_ids"]) EXPECT_NE(id.get<int32_t>(), first);
  json gb = Post("/v1/completions", banned, &st);
  ASSERT_EQ(st, 200);
  EXPECT_NE(gb["choices"][0]["token_ids"][0].get<int32_t>(), first);
  // No bias (or an empty object) -> the same tokens as before.
  json empty = plain;
  empty["logit_bias"] = json::object();
  EXPECT_EQ(Post("/v1/completions", empty, &st)["choices"][0]["token_ids"],
            g["choices"][0]["token_ids"]);
  // Invalid: 400 naming logit_bias.
  const std::string vocab_end = std::to_string(tok_->n_vocab());
  for (const json& bad : {json{{"abc", 1}}, json{{vocab_end, 1}}, json{{"-1", 1}},
                          json{{"1", 100.5}}, json{{"1", "x"}}, json("x"), json::array({1})}) {
    json body = plain;
    body["logit_bias"] = bad;
    json r = Post("/v1/completions", body, &st);
    EXPECT_EQ(st, 400) << bad;
    EXPECT_EQ(r["error"]["param"], "logit_bias") << r;
  }
}

TEST_F(ServerTest, SeedsOfNChoicesShareNoStream) {
  StartEngine();
  auto texts = [&](int seed) {
    int st = 0;
    json r = Post("/v1/completions",
                  {{"prompt", "hello"},
                   {"max_tokens", 16},
                   {"ignore_eos", true},
                   {"temperature", 1.0},
                   {"n", 4},
                   {"seed", seed},
                   {"return_token_ids", true}},
                  &st);
    EXPECT_EQ(st, 200) << r;
    std::set<std::vector<int32_t>> out;
    for (const auto& c : r["choices"]) out.insert(c["token_ids"].get<std::vector<int32_t>>());
    return out;
  };
  const auto seven = texts(7), eight = texts(8);
  EXPECT_EQ(seven.size(), 4u);
  EXPECT_EQ(texts(7), seven) << "a seed is reproducible";
  for (const auto& t : seven) EXPECT_EQ(eight.count(t), 0u) << "seed 8 repeats a seed-7 choice";
}

TEST_F(ServerTest, CreatedIsTheResponseTimeAndIdsAreRandom) {
  StartEngine();
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // past the server's start second
  const auto now_s = [] {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const int64_t before = now_s();
  int st = 0;
  std::set<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    json c = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}}, &st);
    json h = Post("/v1/chat/completions",
                  {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 1}}, &st);
    for (const json& r : {c, h}) {
      EXPECT_GE(r["created"].get<int64_t>(), before) << r;
      EXPECT_LE(r["created"].get<int64_t>(), now_s()) << r;
      ids.insert(r["id"].get<std::string>());
    }
    const std::string cid = c["id"], hid = h["id"];
    EXPECT_EQ(cid.rfind("cmpl-", 0), 0u) << cid;
    EXPECT_EQ(hid.rfind("chatcmpl-", 0), 0u) << hid;
    for (const std::string& id : {cid.substr(5), hid.substr(9)}) {
      EXPECT_EQ(id.size(), 32u) << id;
      EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    }
  }
  EXPECT_EQ(ids.size(), 6u);
  // Streamed chunks carry the response's id and time too.
  auto s = HttpCall(
      port_, "POST", "/v1/chat/completions",
      json{
          {"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 2}, {"stream", true}}
          .dump());
  std::set<std::string> chunk_ids;
  for (auto& e : SseData(s.body)) {
    if (e == "[DONE]") continue;
    json c = json::parse(e);
    EXPECT_GE(c["created"].get<int64_t>(), before);
    chunk_ids.insert(c["id"].get<std::string>());
  }
  ASSERT_EQ(chunk_ids.size(), 1u);
  EXPECT_EQ(ids.count(*chunk_ids.begin()), 0u);
}

TEST_F(ServerTest, IntegerPriorityMapsOntoTheClasses) {
  StartEngine();
  int st = 0;
  // Lower runs first (vLLM): < 0 gold, 0 silver, > 0 bronze; the body wins over the header.
  const std::vector<std::pair<int, int>> cases = {{-5, 2}, {0, 3}, {7, 4}};
  for (const auto& [priority, tokens] : cases) {
    auto r = HttpCall(
        port_, "POST", "/v1/completions",
        json{{"prompt", "x"}, {"max_tokens", tokens}, {"ignore_eos", true}, {"priority", priority}}
            .dump(),
        {"x-strata-tier: bronze"});
    EXPECT_EQ(r.status, 200) << r.body;
  }
  auto m = HttpCall(port_, "GET", "/metrics").body;
  for (const char* want : {"tier=\"gold\"} 2", "tier=\"silver\"} 3", "tier=\"bronze\"} 4"})
    EXPECT_NE(m.find(std::string("strata:generation_tokens_total{model_name=\"fake\",") + want),
              std::string::npos)
        << want << "\n"
        << m;
  for (const json& bad : {json(1.5), json(true), json("platinum")}) {
    json r = Post("/v1/completions", {{"prompt", "x"}, {"priority", bad}}, &st);
    EXPECT_EQ(st, 400) << bad;
    EXPECT_EQ(r["error"]["param"], "priority");
  }
}

TEST_F(ServerTest, ReturnTokenIdsStreamedAndNot) {
  StartEngine();
  int st = 0;
  const json base = {{"prompt", "hello"},
                     {"max_tokens", 7},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"return_token_ids", true}};
  json r = Post("/v1/completions", base, &st);
  ASSERT_EQ(st, 200) << r;
  const auto prompt = tok_->Encode("hello", true, true);
  EXPECT_EQ(r["prompt_token_ids"], prompt);
  EXPECT_EQ(r["choices"][0]["prompt_token_ids"], prompt);
  const auto ids = r["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 7u);
  EXPECT_EQ(  // the text is the ids decoded (invalid UTF-8 replaced, as the JSON body does)
      json::parse(json(tok_->Decode(ids)).dump(-1, ' ', false, json::error_handler_t::replace)),
      r["choices"][0]["text"]);
  // Without the flag: no ids.
  json plain = base;
  plain.erase("return_token_ids");
  json p = Post("/v1/completions", plain, &st);
  EXPECT_FALSE(p.contains("prompt_token_ids"));
  EXPECT_FALSE(p["choices"][0].contains("token_ids"));
  // Streamed: the first chunk has the prompt's ids, the chunks' ids concatenate to the same ids.
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    json body = base;
    if (std::string(path) == "/v1/chat/completions") {
      body.erase("prompt");
      body["messages"] = {{{"role", "user"}, {"content", "hello"}}};
    }
    json whole = Post(path, body, &st);
    ASSERT_EQ(st, 200) << whole;
    body["stream"] = true;
    auto s = HttpCall(port_, "POST", path, body.dump());
    ASSERT_EQ(s.status, 200);
    std::vector<int32_t> streamed;
    bool first = true;
    for (auto& e : SseData(s.body)) {
      if (e == "[DONE]") continue;
      json c = json::parse(e);
      if (first) {
        EXPECT_EQ(c["prompt_token_ids"], whole["prompt_token_ids"]) << path;
      } else {
        EXPECT_FALSE(c.contains("prompt_token_ids")) << path;
      }
      first = false;
      if (c["choices"].empty() || !c["choices"][0].contains("token_ids")) continue;
      for (const auto& id : c["choices"][0]["token_ids"]) streamed.push_back(id.get<int32_t>());
    }
    EXPECT_EQ(json(streamed), whole["choices"][0]["token_ids"]) << path;
    EXPECT_EQ(whole["choices"][0]["token_ids"].size(), 7u) << path;
  }
}

}  // namespace
}  // namespace strata::server
