// LoRA in the server (in process over FakeModelRunner, adapters from Adapter::FromParts in a fake
// store): a request names its adapter in `model` or `lora`, unknown ones are 404 model_not_found,
// /v1/load_lora_adapter and /v1/unload_lora_adapter (bodies, status codes, the loader's message),
// /v1/models, the LoRA metrics, and an unload that leaves a request holding the adapter intact.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "server/lora_adapters.h"
#include "server/server_test_util.h"

namespace strata::server::test {
namespace {

// An in-memory AdapterStore: Add() makes a FromParts adapter (digest = the path) unless the path
// is "bad.gguf" (refused with a message naming a tensor, as the loader does).
class FakeStore final : public AdapterStore {
 public:
  Status Add(const std::string& name, const std::string& path) override {
    MutexLock lock(&mu_);
    if (path == "bad.gguf") {
      ++counters_.load_errors;
      return Status::InvalidArgument("bad.gguf: tensor blk.0.attn_q.weight.lora_b is missing");
    }
    if (adapters_.count(name)) return Status::InvalidArgument("'" + name + "' is taken");
    ++counters_.loads;
    adapters_[name] = {path, lora::Adapter::FromParts(name, path, {})};
    return Status::Ok();
  }
  Status Remove(const std::string& name) override {
    MutexLock lock(&mu_);
    if (!adapters_.erase(name)) return Status::NotFound("'" + name + "' is not loaded");
    ++counters_.unloads;
    return Status::Ok();
  }
  Result<std::shared_ptr<const lora::Adapter>> Get(const std::string& name) override {
    MutexLock lock(&mu_);
    auto it = adapters_.find(name);
    if (it == adapters_.end()) return Status::NotFound("'" + name + "' is not loaded");
    return it->second.second;
  }
  bool Contains(const std::string& name) const override {
    MutexLock lock(&mu_);
    return adapters_.count(name) > 0;
  }
  std::vector<lora::AdapterInfo> List() const override {
    MutexLock lock(&mu_);
    std::vector<lora::AdapterInfo> out;
    for (const auto& [name, e] : adapters_)
      out.push_back({.name = name, .path = e.first, .digest = e.first, .loaded = true});
    return out;
  }
  lora::RegistryCounters counters() const override {
    MutexLock lock(&mu_);
    return counters_;
  }

 private:
  mutable Mutex mu_;
  std::map<std::string, std::pair<std::string, std::shared_ptr<const lora::Adapter>>> adapters_
      GUARDED_BY(mu_);
  lora::RegistryCounters counters_ GUARDED_BY(mu_);
};

class LoraServerTest : public ServerTest {
 protected:
  void SetUp() override {
    ASSERT_TRUE(store_.Add("sql", "/adapters/sql.gguf").ok());
    adapters_ = &store_;
    Boot(1024, {});
  }
  testing::HttpReply Raw(const std::string& path, const json& body) {
    return HttpCall(port_, "POST", path, body.dump());
  }
  std::string Scrape() { return HttpCall(port_, "GET", "/metrics").body; }
  FakeStore store_;
};

const json kPrompt = {{"prompt", "hi"}, {"max_tokens", 3}, {"ignore_eos", true}};

json With(json body, const char* key, const char* value) {
  body[key] = value;
  return body;
}

TEST_F(LoraServerTest, ModelOrLoraFieldNamesTheAdapterAndTheResponseEchoesIt) {
  StartEngine();
  int status = 0;
  json r = Post("/v1/completions", With(kPrompt, "model", "sql"), &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["model"], "sql");
  r = Post("/v1/completions", With(With(kPrompt, "model", "fake"), "lora", "sql"), &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["model"], "sql");
  r = Post("/v1/completions", kPrompt, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["model"], "fake");
  json chat = {{"model", "sql"},
               {"messages", json::array({{{"role", "user"}, {"content", "x"}}})},
               {"max_tokens", 2}};
  r = Post("/v1/chat/completions", chat, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["model"], "sql");
  // Streamed: every chunk names the adapter.
  json streamed = With(kPrompt, "model", "sql");
  streamed["stream"] = true;
  auto sse = HttpCall(port_, "POST", "/v1/completions", streamed.dump());
  ASSERT_EQ(sse.status, 200);
  auto events = SseData(sse.body);
  ASSERT_GE(events.size(), 2u);
  for (size_t i = 0; i + 1 < events.size(); ++i)
    EXPECT_EQ(json::parse(events[i])["model"], "sql") << events[i];
  r = Post("/v1/embeddings", {{"model", "sql"}, {"input", "abc"}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["model"], "sql");
  const std::string m = Scrape();
  EXPECT_NE(m.find("strata:lora_requests_total{model_name=\"fake\",adapter=\"sql\"} 5\n"),
            std::string::npos)
      << m;
}

TEST_F(LoraServerTest, UnknownAdapterIs404ModelNotFoundNamingIt) {
  StartEngine();
  for (const auto& [path, body, param] :
       {std::tuple{"/v1/completions", With(kPrompt, "model", "nope"), "model"},
        std::tuple{"/v1/completions", With(kPrompt, "lora", "nope"), "lora"},
        std::tuple{"/v1/embeddings", json{{"lora", "nope"}, {"input", "a"}}, "lora"},
        std::tuple{"/v1/chat/completions",
                   json{{"model", "nope"}, {"messages", json::array({{{"role", "user"}}})}},
                   "model"}}) {
    int status = 0;
    json r = Post(path, body, &status);
    EXPECT_EQ(status, 404) << path << " " << r.dump();
    EXPECT_EQ(r["error"]["type"], "NotFoundError") << r.dump();
    EXPECT_EQ(r["error"]["code"], "model_not_found") << r.dump();
    EXPECT_EQ(r["error"]["param"], param) << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find("'nope'"), std::string::npos);
  }
  int status = 0;
  json r = Post("/v1/completions", With(With(kPrompt, "model", "sql"), "lora", "other"), &status);
  EXPECT_EQ(status, 400) << r.dump();
  EXPECT_EQ(r["error"]["param"], "lora");
  json numeric = kPrompt;
  numeric["lora"] = 3;
  r = Post("/v1/completions", numeric, &status);
  EXPECT_EQ(status, 400) << r.dump();
  EXPECT_EQ(r["error"]["param"], "lora");
}

TEST_F(LoraServerTest, ModelsListAdaptersWithParentAndRoot) {
  auto r = HttpCall(port_, "GET", "/v1/models");
  ASSERT_EQ(r.status, 200);
  json j = json::parse(r.body);
  ASSERT_EQ(j["data"].size(), 2u) << r.body;
  EXPECT_EQ(j["data"][0]["id"], "fake");
  EXPECT_EQ(j["data"][1]["id"], "sql");
  EXPECT_EQ(j["data"][1]["object"], "model");
  EXPECT_EQ(j["data"][1]["parent"], "fake");
  EXPECT_EQ(j["data"][1]["root"], "/adapters/sql.gguf");
  r = HttpCall(port_, "GET", "/v1/models/sql");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["parent"], "fake");
  r = HttpCall(port_, "GET", "/v1/models/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "model_not_found");
}

TEST_F(LoraServerTest, LoadUseUnloadThen404) {
  StartEngine();
  auto r = Raw("/v1/load_lora_adapter", {{"lora_name", "chat"}, {"lora_path", "/a/chat.gguf"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"].rfind("text/plain", 0), 0u);
  EXPECT_EQ(r.body, "Success: LoRA adapter 'chat' added successfully.");
  int status = 0;
  json g = Post("/v1/completions", With(kPrompt, "model", "chat"), &status);
  ASSERT_EQ(status, 200) << g.dump();
  EXPECT_EQ(g["model"], "chat");
  EXPECT_EQ(json::parse(HttpCall(port_, "GET", "/v1/models").body)["data"].size(), 3u);
  r = Raw("/v1/unload_lora_adapter", {{"lora_name", "chat"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "Success: LoRA adapter 'chat' removed successfully.");
  g = Post("/v1/completions", With(kPrompt, "model", "chat"), &status);
  EXPECT_EQ(status, 404) << g.dump();
  r = Raw("/v1/unload_lora_adapter", {{"lora_name", "chat"}});
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_NE(r.body.find("The lora adapter 'chat' cannot be found."), std::string::npos);
  const std::string m = Scrape();
  for (const char* want :
       {"strata:lora_adapter_events_total{model_name=\"fake\",event=\"load\"} 2",
        "strata:lora_adapter_events_total{model_name=\"fake\",event=\"unload\"} 1",
        "strata:lora_adapter_events_total{model_name=\"fake\",event=\"evict\"} 0"})
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
}

TEST_F(LoraServerTest, LoadAndUnloadBodiesAndErrors) {
  const std::tuple<json, const char*, const char*> bad_bodies[] = {
      {json::object(), "lora_name", "is required"},
      {{{"lora_name", "x"}}, "lora_path", "is required"},
      {{{"lora_name", 1}, {"lora_path", "p"}}, "lora_name", ""},
      {{{"lora_name", ""}, {"lora_path", "p"}}, "lora_name", "must not be empty"},
      {{{"lora_name", "x"}, {"lora_path", ""}}, "lora_path", "must not be empty"},
      {{{"lora_name", "fake"}, {"lora_path", "p"}}, "lora_name", "base model"},
      {{{"lora_name", "sql"}, {"lora_path", "p"}}, "lora_name", "has already been loaded"},
      // The loader's refusal, its message as is.
      {{{"lora_name", "x"}, {"lora_path", "bad.gguf"}},
       "lora_path",
       "tensor blk.0.attn_q.weight.lora_b is missing"},
  };
  for (const auto& [body, param, what] : bad_bodies) {
    auto r = Raw("/v1/load_lora_adapter", body);
    EXPECT_EQ(r.status, 400) << body.dump() << " " << r.body;
    json e = json::parse(r.body, nullptr, false);
    EXPECT_EQ(e["error"]["param"], param) << body.dump() << " " << r.body;
    EXPECT_NE(r.body.find(what), std::string::npos) << body.dump() << " " << r.body;
  }
  EXPECT_FALSE(store_.Contains("x"));
  EXPECT_EQ(Raw("/v1/unload_lora_adapter", json::object()).status, 400);
  EXPECT_EQ(Raw("/v1/unload_lora_adapter", {{"lora_name", 5}}).status, 400);
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/load_lora_adapter").status, 405);
  const std::string m = Scrape();
  EXPECT_NE(m.find("strata:lora_adapter_events_total{model_name=\"fake\",event=\"load_error\"} 1"),
            std::string::npos)
      << m;
}

TEST_F(LoraServerTest, LoadAndUnloadNeedTheApiKey) {
  Shutdown();
  adapters_ = &store_;
  Boot(1024, {"k"});
  auto r = Raw("/v1/load_lora_adapter", {{"lora_name", "y"}, {"lora_path", "p"}});
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(Raw("/v1/unload_lora_adapter", {{"lora_name", "sql"}}).status, 401);
  EXPECT_FALSE(store_.Contains("y"));
  EXPECT_TRUE(store_.Contains("sql"));
  r = HttpCall(port_, "POST", "/v1/load_lora_adapter",
               json{{"lora_name", "y"}, {"lora_path", "p"}}.dump(), {"Authorization: Bearer k"});
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(LoraServerTest, MetricsPublishEveryRegisteredAdapterAndTheInfoGauge) {
  ASSERT_TRUE(store_.Add("b", "/b.gguf").ok());
  std::string m = Scrape();
  EXPECT_NE(m.find("# TYPE strata:lora_adapter_active gauge\n"), std::string::npos) << m;
  EXPECT_NE(
      m.find(
          "strata:lora_adapter_active{model_name=\"fake\",adapter=\"b\",digest=\"/b.gguf\"} 0\n"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("strata:lora_adapter_active{model_name=\"fake\",adapter=\"sql\",digest=\"/"
                   "adapters/sql.gguf\"} 0\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("strata:lora_requests_info{max_lora=\""), std::string::npos) << m;
  EXPECT_NE(m.find("running_lora_adapters=\"\",waiting_lora_adapters=\"\"}"), std::string::npos)
      << m;
  ASSERT_TRUE(store_.Remove("b").ok());
  m = Scrape();
  EXPECT_EQ(m.find("adapter=\"b\""), std::string::npos) << m;  // an unloaded adapter disappears
}

TEST_F(LoraServerTest, VllmCompatMirrorsTheInfoGauge) {
  // A second Api over the same engine, with --metrics-compat vllm, scraped in process.
  ModelInfo info;
  info.name = "fake";
  info.tok = tok_.get();
  info.max_model_len = kMaxLen;
  ApiOptions ao;
  ao.adapters = &store_;
  ao.metrics_compat = "vllm";
  Api api(info, engine_.get(), ao);
  struct Capture final : Responder {
    void Respond(http::HttpResponse r) override { body = r.body; }
    void Begin(std::string, std::vector<std::pair<std::string, std::string>>) override {}
    void Write(std::string) override {}
    void End() override {}
    void OnClose(std::function<void()>) override {}
    bool closed() const override { return false; }
    void Post(std::function<void()> fn) override { fn(); }
    std::string body;
  };
  auto out = std::make_shared<Capture>();
  http::HttpRequest req;
  req.method = "GET";
  req.path = "/metrics";
  api.Handle(req, out);
  EXPECT_NE(out->body.find("vllm:lora_requests_info{max_lora=\""), std::string::npos) << out->body;
  EXPECT_NE(out->body.find("strata:lora_requests_info{max_lora=\""), std::string::npos)
      << out->body;
}

// A request holds its adapter: unloading it while the request waits (the engine is stopped) or
// runs leaves it intact, and it completes with the adapter.
TEST_F(LoraServerTest, UnloadWhileARequestHoldsTheAdapterLeavesItIntact) {
  auto held = store_.Get("sql");
  ASSERT_TRUE(held.ok());
  std::weak_ptr<const lora::Adapter> weak = *held;
  held = Status::NotFound("dropped");  // only the store (and the request, below) hold it now
  testing::HttpReply reply;
  std::thread client([&] {
    reply = HttpCall(port_, "POST", "/v1/completions", With(kPrompt, "model", "sql").dump());
  });
  for (int i = 0; i < 500 && weak.use_count() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GE(weak.use_count(), 2) << "the submitted request does not hold its adapter";
  auto r = Raw("/v1/unload_lora_adapter", {{"lora_name", "sql"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(weak.expired());  // the waiting request keeps it alive
  StartEngine();
  client.join();
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(json::parse(reply.body)["model"], "sql");
  EXPECT_EQ(json::parse(reply.body)["usage"]["completion_tokens"], 3);
}

TEST_F(ServerTest, WithoutAdaptersLoraRoutesAre501AndAdapterNamesAre404) {
  StartEngine();
  auto r = HttpCall(port_, "POST", "/v1/load_lora_adapter",
                    json{{"lora_name", "a"}, {"lora_path", "p"}}.dump());
  EXPECT_EQ(r.status, 501) << r.body;
  int status = 0;
  json j = Post("/v1/completions", {{"prompt", "x"}, {"lora", "a"}}, &status);
  EXPECT_EQ(status, 404) << j.dump();
  EXPECT_EQ(j["error"]["code"], "model_not_found");
  EXPECT_EQ(HttpCall(port_, "GET", "/metrics").body.find("strata:lora_"), std::string::npos);
}

}  // namespace
}  // namespace strata::server::test
