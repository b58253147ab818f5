// End-to-end tests of issue 14's request fields and response details against the real `strata
// serve` (port 0, bundled model): unsupported OpenAI fields are 400s naming them, logit_bias,
// n x seed streams, per-response `created` and random ids (unique across processes), integer
// priority, return_token_ids streamed and not.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "integration/http_test_client.h"
#include "integration/serve_process.h"

namespace {

using nlohmann::json;
using strata::testing::HttpCall;
using strata::testing::ServeProcess;
using strata::testing::SseData;

constexpr const char* kTemplate =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

class ApiFields : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    template_path = (std::filesystem::temp_directory_path() /
                     ("strata_api_fields_tmpl_" + std::to_string(getpid()) + ".jinja"))
                        .string();
    std::ofstream(template_path) << kTemplate;
    serve = new ServeProcess({"--chat-template-file", template_path});
  }
  static void TearDownTestSuite() {
    delete serve;
    serve = nullptr;
    std::filesystem::remove(template_path);
  }
  void SetUp() override { ASSERT_GT(serve->port(), 0) << "strata serve did not start"; }

  static json Post(const std::string& path, const json& body, int* status = nullptr,
                   const std::vector<std::string>& headers = {}) {
    auto r = HttpCall(serve->port(), "POST", path, body.dump(), headers);
    if (status) *status = r.status;
    return json::parse(r.body, nullptr, false);
  }
  static json Chat(const json& extra) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"max_tokens", 4}};
    if (extra.is_object()) body.update(extra);
    return body;
  }
  static json Completion(const json& extra) {
    json body = {{"prompt", "Once upon a time"}, {"max_tokens", 4}};
    if (extra.is_object()) body.update(extra);
    return body;
  }

  static inline std::string template_path;
  static inline ServeProcess* serve = nullptr;
};

TEST_F(ApiFields, UnsupportedFieldsAre400sNamingThem) {
  struct Case {
    std::string path;
    json body;
    std::string param, message;
  };
  const json tools =
      json::parse(R"([{"type":"function","function":{"name":"f","parameters":{}}}])");
  const std::vector<Case> cases = {
      {"/v1/chat/completions", Chat({{"tools", tools}}), "tools", "tools: not supported yet"},
      {"/v1/chat/completions", Chat({{"tool_choice", "required"}}), "tool_choice",
       "tool_choice: not supported yet"},
      {"/v1/chat/completions", Chat({{"functions", {{{"name", "f"}}}}}), "functions",
       "functions: not supported yet"},
      {"/v1/chat/completions", Chat({{"function_call", {{"name", "f"}}}}), "function_call",
       "function_call: not supported yet"},
      {"/v1/chat/completions", Chat({{"response_format", {{"type", "json_object"}}}}),
       "response_format", "response_format: not supported yet"},
      {"/v1/chat/completions", Chat({{"store", true}}), "store", "store: not supported"},
      {"/v1/chat/completions", Chat({{"service_tier", "flex"}}), "service_tier",
       "service_tier: not supported"},
      {"/v1/chat/completions", Chat({{"modalities", {"text", "audio"}}}), "modalities",
       "modalities: not supported"},
      {"/v1/chat/completions", Chat({{"audio", {{"voice", "alloy"}, {"format", "wav"}}}}), "audio",
       "audio: not supported"},
      {"/v1/chat/completions", Chat({{"prediction", {{"type", "content"}, {"content", "x"}}}}),
       "prediction", "prediction: not supported"},
      {"/v1/chat/completions", Chat({{"reasoning_effort", "high"}}), "reasoning_effort",
       "reasoning_effort: not supported"},
      {"/v1/chat/completions", Chat({{"web_search_options", json::object()}}), "web_search_options",
       "web_search_options: not supported"},
      {"/v1/completions", Completion({{"suffix", " The end."}}), "suffix", "suffix: not supported"},
      {"/v1/completions", Completion({{"best_of", 2}}), "best_of", "best_of: not supported"},
      {"/v1/completions", Completion({{"best_of", 1}, {"n", 2}}), "best_of",
       "best_of: must be >= n"},
      {"/v1/chat/completions", Chat({{"echo", true}}), "echo", "echo: is not supported for chat"},
  };
  for (const auto& c : cases) {
    int st = 0;
    json r = Post(c.path, c.body, &st);
    EXPECT_EQ(st, 400) << c.body;
    EXPECT_EQ(r["error"]["param"], c.param) << r;
    EXPECT_EQ(r["error"]["type"], "invalid_request_error") << r;
    EXPECT_EQ(r["error"]["message"].get<std::string>().rfind(c.message, 0), 0u) << r;
  }
  // Null, default-equivalent and metadata-only values are served; unknown fields are ignored.
  int st = 0;
  json ok = Post("/v1/chat/completions",
                 Chat({{"tools", nullptr},
                       {"user", "end-user-1"},
                       {"metadata", {{"team", "a"}}},
                       {"store", false},
                       {"service_tier", "default"},
                       {"modalities", {"text"}},
                       {"response_format", {{"type", "text"}}},
                       {"tool_choice", "none"},
                       {"parallel_tool_calls", false},
                       {"prompt_cache_key", "k"},
                       {"safety_identifier", "s"},
                       {"a_field_from_the_future", 1}}),
                 &st);
  EXPECT_EQ(st, 200) << ok;
  Post("/v1/completions",
       Completion({{"suffix", ""}, {"best_of", 2}, {"n", 2}, {"echo", false}, {"user", "u"}}), &st);
  EXPECT_EQ(st, 200);
}

TEST_F(ApiFields, LogitBiasForcesBansAndValidates) {
  int st = 0;
  const json greedy = Completion(
      {{"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}, {"return_token_ids", true}});
  json plain = Post("/v1/completions", greedy, &st);
  ASSERT_EQ(st, 200) << plain;
  const auto ids = plain["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 6u);
  // +100 on a token the model did not pick first: every generated token is that one, at any
  // temperature.
  const int32_t forced = ids[0] == 300 ? 301 : 300;
  for (double t : {0.0, 1.0}) {
    json body = greedy;
    body["temperature"] = t;
    body["logit_bias"] = {{std::to_string(forced), 100}};
    json r = Post("/v1/completions", body, &st);
    ASSERT_EQ(st, 200) << r;
    EXPECT_EQ(r["choices"][0]["token_ids"], std::vector<int32_t>(6, forced)) << t;
  }
  // -100 bans: the greedy first token is never generated.
  json ban = greedy;
  ban["logit_bias"] = {{std::to_string(ids[0]), -100}};
  ban["max_tokens"] = 16;
  json b = Post("/v1/completions", ban, &st);
  ASSERT_EQ(st, 200) << b;
  for (const auto& id : b["choices"][0]["token_ids"]) EXPECT_NE(id.get<int32_t>(), ids[0]);
  // Chat too; and no bias keeps the output bit-identical.
  json cb = Post("/v1/chat/completions",
                 Chat({{"temperature", 0},
                       {"ignore_eos", true},
                       {"return_token_ids", true},
                       {"logit_bias", {{std::to_string(forced), 100}}}}),
                 &st);
  ASSERT_EQ(st, 200) << cb;
  EXPECT_EQ(cb["choices"][0]["token_ids"], std::vector<int32_t>(4, forced));
  EXPECT_EQ(Post("/v1/completions", greedy, &st)["choices"][0]["text"],
            plain["choices"][0]["text"]);
  for (const json& bad : {json{{"abc", 5}}, json{{"100000000", 5}}, json{{"-3", 5}},
                          json{{"5", 101}}, json{{"5", "up"}}, json(5)}) {
    json body = greedy;
    body["logit_bias"] = bad;
    json r = Post("/v1/completions", body, &st);
    EXPECT_EQ(st, 400) << bad;
    EXPECT_EQ(r["error"]["param"], "logit_bias") << r;
  }
}

TEST_F(ApiFields, NChoicesOfNearbySeedsShareNoStream) {
  auto choices = [&](int seed) {
    int st = 0;
    json r = Post("/v1/completions",
                  Completion({{"max_tokens", 16},
                              {"temperature", 30.0},  // the tiny model is peaky
                              {"ignore_eos", true},
                              {"n", 4},
                              {"seed", seed},
                              {"return_token_ids", true}}),
                  &st);
    EXPECT_EQ(st, 200) << r;
    std::vector<std::vector<int32_t>> out;
    for (const auto& c : r["choices"]) out.push_back(c["token_ids"].get<std::vector<int32_t>>());
    return out;
  };
  const auto seven = choices(7), eight = choices(8);
  ASSERT_EQ(seven.size(), 4u);
  EXPECT_EQ(std::set(seven.begin(), seven.end()).size(), 4u) << "the 4 choices differ";
  EXPECT_EQ(choices(7), seven);
  for (const auto& c : seven)
    EXPECT_EQ(std::count(eight.begin(), eight.end(), c), 0) << "a choice of seed 7 is in seed 8";
  // Choice 0 of n = 4 is what n = 1 with the same seed gives.
  json one = Post("/v1/completions", Completion({{"max_tokens", 16},
                                                 {"temperature", 30.0},  // the tiny model is peaky
                                                 {"ignore_eos", true},
                                                 {"seed", 7},
                                                 {"return_token_ids", true}}));
  EXPECT_EQ(one["choices"][0]["token_ids"], seven[0]);
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST_F(ApiFields, CreatedIsEachResponsesTimeAndIdsAreRandomAcrossProcesses) {
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // past the server's start second
  const int64_t before = UnixNow();
  const std::regex cmpl("cmpl-[0-9a-f]{32}"), chat("chatcmpl-[0-9a-f]{32}");
  std::set<std::string> ids;
  auto collect = [&](int port) {
    for (int i = 0; i < 3; ++i) {
      auto c = json::parse(HttpCall(port, "POST", "/v1/completions", Completion({}).dump()).body);
      auto h = json::parse(HttpCall(port, "POST", "/v1/chat/completions", Chat({}).dump()).body);
      EXPECT_TRUE(std::regex_match(c["id"].get<std::string>(), cmpl)) << c;
      EXPECT_TRUE(std::regex_match(h["id"].get<std::string>(), chat)) << h;
      for (const json& r : {c, h}) {
        EXPECT_GE(r["created"].get<int64_t>(), before) << r;
        EXPECT_LE(r["created"].get<int64_t>(), UnixNow()) << r;
        ids.insert(r["id"].get<std::string>());
      }
    }
  };
  collect(serve->port());
  {
    ServeProcess second({"--chat-template-file", template_path});  // another process, same flags
    ASSERT_GT(second.port(), 0);
    collect(second.port());
  }
  EXPECT_EQ(ids.size(), 12u) << "ids repeat across requests or processes";
  // Streamed chunks: one id, this response's time.
  auto s =
      HttpCall(serve->port(), "POST", "/v1/completions", Completion({{"stream", true}}).dump());
  std::set<std::string> chunk_ids;
  for (const auto& e : SseData(s.body)) {
    if (e == "[DONE]") continue;
    json c = json::parse(e);
    EXPECT_GE(c["created"].get<int64_t>(), before);
    chunk_ids.insert(c["id"].get<std::string>());
  }
  EXPECT_EQ(chunk_ids.size(), 1u);
}

TEST_F(ApiFields, IntegerPriorityMapsOntoTheClasses) {
  // Fresh counters: a server of its own. Lower runs first: < 0 gold, 0 silver, > 0 bronze.
  ServeProcess s({});
  ASSERT_GT(s.port(), 0);
  const std::vector<std::pair<int, int>> cases = {{-1, 2}, {0, 3}, {10, 5}};
  for (const auto& [priority, tokens] : cases) {
    auto r = HttpCall(
        s.port(), "POST", "/v1/completions",
        Completion({{"max_tokens", tokens}, {"ignore_eos", true}, {"priority", priority}}).dump(),
        {"x-strata-tier: bronze"});
    EXPECT_EQ(r.status, 200) << r.body;
  }
  const std::string m = HttpCall(s.port(), "GET", "/metrics").body;
  for (const auto& [tier, n] : {std::pair{"gold", 2}, {"silver", 3}, {"bronze", 5}}) {
    std::regex re(std::string("strata:generation_tokens_total\\{[^}]*tier=\"") + tier +
                  "\"[^}]*\\} " + std::to_string(n) + "\\b");
    EXPECT_TRUE(std::regex_search(m, re)) << tier << "\n" << m;
  }
  int st = 0;
  auto r = HttpCall(s.port(), "POST", "/v1/completions", Completion({{"priority", 0.5}}).dump());
  st = r.status;
  EXPECT_EQ(st, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "priority");
}

TEST_F(ApiFields, ReturnTokenIdsStreamedAndNot) {
  const std::vector<int32_t> prompt = {567, 79, 110, 297};  // ids of the tiny model's vocab
  for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
    const bool chat = path == "/v1/chat/completions";
    json body = chat ? Chat({}) : Completion({{"prompt", prompt}});
    body.update(
        {{"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}, {"return_token_ids", true}});
    int st = 0;
    json whole = Post(path, body, &st);
    ASSERT_EQ(st, 200) << whole;
    ASSERT_TRUE(whole.contains("prompt_token_ids")) << whole;
    EXPECT_EQ(whole["prompt_token_ids"].size(), whole["usage"]["prompt_tokens"].get<size_t>());
    if (!chat) {
      EXPECT_EQ(whole["prompt_token_ids"], prompt);
      EXPECT_EQ(whole["choices"][0]["prompt_token_ids"], prompt);
    }
    const auto ids = whole["choices"][0]["token_ids"];
    EXPECT_EQ(ids.size(), 8u);
    // The ids decode to the text.
    json d = Post("/detokenize", {{"tokens", ids}}, &st);
    EXPECT_EQ(d["content"],
              chat ? whole["choices"][0]["message"]["content"] : whole["choices"][0]["text"]);
    body["stream"] = true;
    auto s = HttpCall(serve->port(), "POST", path, body.dump());
    ASSERT_EQ(s.status, 200);
    json streamed = json::array();
    int n = 0;
    for (const auto& e : SseData(s.body)) {
      if (e == "[DONE]") continue;
      json c = json::parse(e);
      EXPECT_EQ(c.contains("prompt_token_ids"), n++ == 0) << path << " chunk " << n << ": " << c;
      if (n == 1) {
        EXPECT_EQ(c["prompt_token_ids"], whole["prompt_token_ids"]);
      }
      for (const auto& ch : c["choices"])
        if (ch.contains("token_ids"))
          for (const auto& id : ch["token_ids"]) streamed.push_back(id);
    }
    EXPECT_EQ(streamed, ids) << path;
    // Without the flag the response has no ids.
    body.erase("return_token_ids");
    body["stream"] = false;
    json plain = Post(path, body, &st);
    EXPECT_FALSE(plain.contains("prompt_token_ids"));
    EXPECT_FALSE(plain["choices"][0].contains("token_ids"));
  }
}

}  // namespace
