// End-to-end tests of `strata serve`: the real binary on 127.0.0.1 port 0 with the bundled default
// model, driven over real sockets (http_test_client.h), plus the official OpenAI Node SDK when node
// and tests/integration/openai_client/node_modules are present.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "integration/http_test_client.h"
#include "integration/serve_process.h"

namespace {

using nlohmann::json;
using strata::testing::HttpCall;
using strata::testing::HttpConn;
using strata::testing::ServeProcess;
using strata::testing::SseData;

// A ChatML-style template (written by this test), so chat works on the bundled model.
constexpr const char* kTemplate =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

std::string TemplateFile() {
  auto p = std::filesystem::temp_directory_path() /
           ("strata_serve_test_tmpl_" + std::to_string(getpid()) + ".jinja");
  std::ofstream(p) << kTemplate;
  return p.string();
}

json Post(int port, const std::string& path, const json& body, int* status = nullptr,
          const std::vector<std::string>& headers = {}) {
  auto r = HttpCall(port, "POST", path, body.dump(), headers);
  if (status) *status = r.status;
  return json::parse(r.body, nullptr, false);
}

std::string StreamText(const std::string& sse, bool chat, std::string* finish = nullptr) {
  std::string text;
  for (auto& e : SseData(sse)) {
    if (e == "[DONE]") continue;
    json c = json::parse(e);
    if (c["choices"].empty()) continue;
    auto& ch = c["choices"][0];
    if (chat) {
      if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
    } else {
      text += ch["text"].get<std::string>();
    }
    if (finish && !ch["finish_reason"].is_null()) *finish = ch["finish_reason"];
  }
  return text;
}

TEST(Serve, EveryEndpointOnTheBundledModel) {
  std::string tmpl = TemplateFile();
  ServeProcess s({"--chat-template-file", tmpl, "--served-model-name", "tiny"});
  ASSERT_GT(s.port(), 0);
  const int port = s.port();
  EXPECT_EQ(HttpCall(port, "GET", "/health").status, 200);
  EXPECT_EQ(HttpCall(port, "GET", "/ready").status, 200);
  auto models = HttpCall(port, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "tiny");
  EXPECT_EQ(HttpCall(port, "GET", "/v1/models/tiny").status, 200);
  EXPECT_EQ(HttpCall(port, "GET", "/v1/nothing").status, 404);

  int st = 0;
  json tk = Post(port, "/tokenize", {{"content", "Hello world"}}, &st);
  ASSERT_EQ(st, 200) << tk;
  json dt = Post(port, "/detokenize", {{"tokens", tk["tokens"]}}, &st);
  EXPECT_EQ(st, 200);
  // The bundled model's vocab adds BOS; detokenize renders text only.
  EXPECT_NE(dt["content"].get<std::string>().find("Hello world"), std::string::npos) << dt;

  json at =
      Post(port, "/apply-template", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}, &st);
  EXPECT_EQ(st, 200);
  EXPECT_EQ(at["prompt"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");

  json body = {{"prompt", "Once upon a time"},
               {"max_tokens", 12},
               {"temperature", 0.9},
               {"seed", 7},
               {"ignore_eos", true}};
  json c = Post(port, "/v1/completions", body, &st);
  ASSERT_EQ(st, 200) << c;
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["usage"]["completion_tokens"], 12);
  // Streaming the same seeded request gives the same text (UTF-8 pieces split across tokens are
  // held back, never emitted broken: a broken split would differ from the non-streamed text).
  body["stream"] = true;
  auto sr = HttpCall(port, "POST", "/v1/completions", body.dump());
  ASSERT_EQ(sr.status, 200);
  std::string finish;
  EXPECT_EQ(StreamText(sr.body, false, &finish), c["choices"][0]["text"]);
  EXPECT_EQ(finish, "length");

  json chat = Post(port, "/v1/chat/completions",
                   {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                    {"max_tokens", 5},
                    {"ignore_eos", true}},
                   &st);
  ASSERT_EQ(st, 200) << chat;
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["usage"]["prompt_tokens"],
            Post(port, "/tokenize", {{"content", at["prompt"]}, {"add_special", false}})["count"]);

  json emb = Post(port, "/v1/embeddings", {{"input", {"hello", "world"}}}, &st);
  ASSERT_EQ(st, 200) << emb;
  ASSERT_EQ(emb["data"].size(), 2u);
  double norm = 0;
  for (auto& x : emb["data"][0]["embedding"]) norm += x.get<double>() * x.get<double>();
  EXPECT_NEAR(norm, 1.0, 1e-4);
  EXPECT_NE(emb["data"][0]["embedding"], emb["data"][1]["embedding"]);

  auto metrics = HttpCall(port, "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("strata:request_success_total{model_name=\"tiny\",tier=\"silver\","
                              "finished_reason=\"length\"} 3"),
            std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("strata:http_requests_total{model_name=\"tiny\",route=\"/v1/"
                              "completions\",status=\"200\"} 2"),
            std::string::npos);
  std::filesystem::remove(tmpl);
}

TEST(Serve, ErrorStatuses) {
  ServeProcess s({"--api-key", "k-123", "--max-body-bytes", "1000", "--max-model-len", "64"});
  ASSERT_GT(s.port(), 0);
  const int port = s.port();
  const std::vector<std::string> auth = {"Authorization: Bearer k-123"};
  EXPECT_EQ(HttpCall(port, "GET", "/health").status, 200);
  EXPECT_EQ(HttpCall(port, "GET", "/v1/models").status, 401);
  EXPECT_EQ(HttpCall(port, "GET", "/v1/models", "", {"Authorization: Bearer k-12"}).status, 401);
  EXPECT_EQ(HttpCall(port, "GET", "/v1/models", "", auth).status, 200);
  EXPECT_EQ(HttpCall(port, "POST", "/v1/completions", std::string(5000, ' '), auth).status, 413);
  int st = 0;
  json e = Post(port, "/v1/chat/completions",
                {{"messages", {{{"role", "user"}, {"content", "x"}}}}}, &st, auth);
  EXPECT_EQ(st, 400);  // no chat template
  EXPECT_NE(e["error"]["message"].get<std::string>().find("no chat template"), std::string::npos);
  e = Post(port, "/v1/completions", {{"prompt", "x"}, {"temperature", -1}}, &st, auth);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(e["error"]["param"], "temperature");
  e = Post(port, "/v1/completions", {{"prompt", std::string(300, 'z')}}, &st, auth);
  EXPECT_EQ(st, 400);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("64"), std::string::npos) << e;
  e = Post(port, "/v1/completions", {{"prompt", "x"}, {"model", "other"}}, &st, auth);
  EXPECT_EQ(st, 404);
}

TEST(Serve, DisconnectFreesKvBlocksVisibleInMetrics) {
  ServeProcess s({});
  ASSERT_GT(s.port(), 0);
  const int port = s.port();
  {
    HttpConn c(port);
    json body = {{"prompt", "Tell me a long story"},
                 {"max_tokens", 1500},
                 {"ignore_eos", true},
                 {"stream", true}};
    ASSERT_TRUE(c.Send("POST", "/v1/completions", body.dump()));
    ASSERT_TRUE(
        c.ReadUntil([](const std::string& b) { return b.find("\"text\"") != std::string::npos; }));
    // Engine stats are a snapshot as of the end of the last step, and the first token can reach
    // the client (pushed mid-step) before that step has published it: poll briefly.
    const std::string running = "strata:num_requests_running{model_name=\"strata-tiny\"} 1";
    auto m = HttpCall(port, "GET", "/metrics");
    for (int i = 0; i < 100 && m.body.find(running) == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      m = HttpCall(port, "GET", "/metrics");
    }
    EXPECT_NE(m.body.find(running), std::string::npos) << m.body;
  }
  // The engine frees the blocks (within one step) and the HTTP side counts the abort when it sees
  // the request end; the two land in /metrics in either order, so wait for both.
  std::string body;
  bool freed = false, counted = false;
  for (int i = 0; i < 200 && !(freed && counted); ++i) {
    body = HttpCall(port, "GET", "/metrics").body;
    freed = body.find("strata:kv_cache_usage_perc{model_name=\"strata-tiny\"} 0\n") !=
                std::string::npos &&
            body.find("strata:num_requests_running{model_name=\"strata-tiny\"} 0\n") !=
                std::string::npos;
    counted = body.find("finished_reason=\"abort\"} 1") != std::string::npos;
    if (!(freed && counted)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(freed) << body;
  EXPECT_TRUE(counted) << body;
}

TEST(Serve, SigtermDrainsLiveStreamsThenExitsZero) {
  ServeProcess s({"--shutdown-timeout", "60"});
  ASSERT_GT(s.port(), 0);
  const int port = s.port();
  constexpr int kStreams = 3;
  std::vector<std::unique_ptr<HttpConn>> conns;
  for (int i = 0; i < kStreams; ++i) {
    conns.push_back(std::make_unique<HttpConn>(port));
    json body = {{"prompt", "Count"}, {"max_tokens", 60}, {"ignore_eos", true}, {"stream", true}};
    ASSERT_TRUE(conns.back()->Send("POST", "/v1/completions", body.dump()));
    ASSERT_TRUE(conns.back()->ReadUntil(
        [](const std::string& b) { return b.find("\"text\"") != std::string::npos; }));
  }
  s.Signal(SIGTERM);
  // Draining: readiness is 503 and new work is refused with 503, while the streams continue.
  int ready = 0;
  for (int i = 0; i < 100 && ready != 503; ++i) {
    ready = HttpCall(port, "GET", "/ready").status;
    if (ready != 503) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ready, 503);
  EXPECT_EQ(HttpCall(port, "POST", "/v1/completions", json{{"prompt", "x"}}.dump()).status, 503);
  for (auto& c : conns) {
    auto r = c->ReadResponse();
    ASSERT_TRUE(r.ok);
    EXPECT_EQ(r.body.substr(r.body.size() - 14), "data: [DONE]\n\n");
    std::string finish;
    StreamText(r.body, false, &finish);
    EXPECT_EQ(finish, "length");
  }
  EXPECT_EQ(s.Wait(30), 0);
}

TEST(Serve, OfficialOpenAINodeClient) {
  const std::string dir = STRATA_SOURCE_DIR "/tests/integration/openai_client";
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  if (!std::filesystem::exists(dir + "/node_modules/openai/package.json"))
    GTEST_SKIP() << "openai npm package not installed: run `npm ci` in " << dir
                 << " (.ci/run does)";
  std::string tmpl = TemplateFile();
  ServeProcess s(
      {"--chat-template-file", tmpl, "--api-key", "sk-test", "--served-model-name", "strata-tiny"});
  ASSERT_GT(s.port(), 0);
  std::string cmd = "node " + dir +
                    "/client_test.mjs http://127.0.0.1:" + std::to_string(s.port()) +
                    "/v1 sk-test strata-tiny 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  std::filesystem::remove(tmpl);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
}

}  // namespace
