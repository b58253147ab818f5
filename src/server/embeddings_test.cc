// /v1/embeddings through the engine, in process (FakeStack): a real HttpServer on 127.0.0.1:0, the
// real Engine driven by FakeModelRunner (whose hidden rows are a known function of the token
// history), the builtin byte-level tokenizer and a raw-socket client. Checks that the I/O threads
// return at once (17 requests are accepted while the engine is stopped), that the engine batches
// them, that every vector equals the one computed straight from the fake model, and that a
// disconnect cancels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/sched/fake_runner.h"
#include "http/server.h"
#include "integration/http_test_client.h"
#include "server/api.h"
#include "server/fake_stack_test_util.h"

namespace strata::server {
namespace {

using nlohmann::json;
using testing::HttpCall;
using testing::HttpConn;

constexpr int kBlocks = 128, kBlockSize = 16, kMaxLen = 256;

// The fake model, 2 ms of wall time per step (so a test can act while the engine is busy).
class SlowRunner final : public engine::runner::ModelRunner {
 public:
  explicit SlowRunner(engine::sched::FakeModelRunner* inner) : inner_(inner) {}
  int n_vocab() const override { return inner_->n_vocab(); }
  int hidden_dim() const override { return inner_->hidden_dim(); }
  Status Run(std::span<const engine::runner::BatchSeq> batch, std::vector<float>* logits,
             std::vector<float>* hidden) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return inner_->Run(batch, logits, hidden);
  }

 private:
  engine::sched::FakeModelRunner* inner_;
};

class EmbeddingsServerTest : public ::testing::Test, protected test::FakeStack {
 protected:
  void SetUp() override { Boot(2048, false); }
  void Boot(int max_batched_tokens, bool slow) {
    test::FakeStackConfig c;
    c.num_blocks = kBlocks;
    c.block_size = kBlockSize;
    c.max_model_len = kMaxLen;
    c.scheduler.max_batched_tokens = max_batched_tokens;
    c.copy_blocks = false;
    if (slow) {
      c.runner = [this](engine::sched::FakeModelRunner* fake) -> engine::runner::ModelRunner* {
        slow_ = std::make_unique<SlowRunner>(fake);
        return slow_.get();
      };
    }
    const Status booted = FakeStack::Boot(c);
    ASSERT_TRUE(booted.ok()) << booted.ToString();
    http::HttpServerOptions so;
    so.port = 0;
    so.io_threads = 2;
    const Status started = StartHttp(so);
    ASSERT_TRUE(started.ok()) << started.ToString();
  }
  void TearDown() override { Shutdown(); }  // (keeps engine_ and runner_ for inspection)
  bool WaitFor(const std::function<bool()>& cond) {
    for (int i = 0; i < 5000; ++i) {
      if (cond()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return cond();
  }

  // The pooled vector straight from the fake model (as the engine defines it).
  std::vector<float> Expected(const std::vector<int32_t>& tokens) const {
    const size_t dim = static_cast<size_t>(rc_.hidden_dim);
    std::vector<double> sum(dim, 0.0);
    std::vector<float> row(dim);
    for (size_t p = 0; p < tokens.size(); ++p) {
      runner_->Hidden(
          engine::sched::FakeModelRunner::Chain(std::span<const int32_t>(tokens.data(), p + 1)),
          static_cast<int>(p), row);
      for (size_t i = 0; i < dim; ++i) sum[i] += row[i];
    }
    double norm = 0;
    for (double x : sum) norm += x * x;
    std::vector<float> out(dim);
    for (size_t i = 0; i < dim; ++i) out[i] = static_cast<float>(sum[i] / std::sqrt(norm));
    return out;
  }

  static std::vector<int32_t> Tokens(int n, int seed) {
    std::vector<int32_t> t;
    t.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t.push_back(1 + (seed * 37 + i * 11) % 250);
    return t;
  }

  std::unique_ptr<SlowRunner> slow_;
};

TEST_F(EmbeddingsServerTest, ConcurrentRequestsAreAcceptedAtOnceAndBatched) {
  constexpr int kClients = 16;
  std::vector<std::unique_ptr<HttpConn>> conns;
  std::vector<std::vector<int32_t>> inputs;
  // Engine stopped: every request must be accepted (submitted, I/O thread free again) regardless.
  for (int i = 0; i < kClients; ++i) {
    inputs.push_back(Tokens(10 + i, i));
    conns.push_back(std::make_unique<HttpConn>(port_));
    ASSERT_TRUE(
        conns.back()->Send("POST", "/v1/embeddings", json{{"input", inputs.back()}}.dump()));
  }
  // One more with three inputs (a string, token ids, another string) and base64 output.
  conns.push_back(std::make_unique<HttpConn>(port_));
  const std::vector<int32_t> ids = Tokens(25, 99);
  json multi = {{"input", json::array({"hello", ids, "world"})}, {"encoding_format", "base64"}};
  ASSERT_TRUE(conns.back()->Send("POST", "/v1/embeddings", multi.dump()));
  ASSERT_TRUE(WaitFor([&] { return api_->live_jobs() == kClients + 1; })) << api_->live_jobs();
  engine_->Start();
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE("client " + std::to_string(i));
    auto r = conns[static_cast<size_t>(i)]->ReadResponse();
    ASSERT_EQ(r.status, 200) << r.body;
    json j = json::parse(r.body);
    ASSERT_EQ(j["data"].size(), 1u);
    EXPECT_EQ(j["data"][0]["index"], 0);
    EXPECT_EQ(j["usage"]["prompt_tokens"], inputs[static_cast<size_t>(i)].size());
    std::vector<float> got = j["data"][0]["embedding"].get<std::vector<float>>();
    const std::vector<float> want = Expected(inputs[static_cast<size_t>(i)]);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
  }
  auto r = conns.back()->ReadResponse();
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  ASSERT_EQ(j["data"].size(), 3u);
  const std::vector<std::vector<int32_t>> multi_tokens = {tok_->Encode("hello", true, true), ids,
                                                          tok_->Encode("world", true, true)};
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(j["data"][k]["index"], k);
    const std::vector<float> want = Expected(multi_tokens[k]);
    std::string raw(want.size() * sizeof(float), '\0');
    std::memcpy(raw.data(), want.data(), raw.size());
    // Decode the base64 reply and compare the bytes.
    const std::string b64 = j["data"][k]["embedding"].get<std::string>();
    static const std::string kAlphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string bytes;
    uint32_t acc = 0;
    int bits = 0;
    for (char c : b64) {
      if (c == '=') break;
      acc = (acc << 6) | static_cast<uint32_t>(kAlphabet.find(c));
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        bytes.push_back(static_cast<char>((acc >> bits) & 0xff));
      }
    }
    EXPECT_EQ(bytes, raw) << "input " << k;
  }
  EXPECT_TRUE(WaitFor([&] { return api_->live_jobs() == 0; }));
  Shutdown();  // the engine thread is joined: the runner's record can be read
  size_t most = 0;
  for (const auto& batch : runner_->batches()) {
    size_t n = 0;
    for (const auto& s : batch) n += s.want_hidden ? 1 : 0;
    most = std::max(most, n);
  }
  EXPECT_EQ(most, static_cast<size_t>(kClients + 3))
      << "the 19 inputs were not computed in one batch";
  EXPECT_EQ(engine_->Stats().embeddings, kClients + 3);
}

TEST_F(EmbeddingsServerTest, DisconnectCancelsTheInputsAndFreesTheirBlocks) {
  Shutdown();
  engine_.reset();
  Boot(/*max_batched_tokens=*/4, /*slow=*/true);  // 380 prompt tokens: ~95 steps of >= 2 ms
  engine_->Start();
  {
    HttpConn c(port_);
    json body = {{"input", json::array({Tokens(200, 1), Tokens(180, 2)})}};
    ASSERT_TRUE(c.Send("POST", "/v1/embeddings", body.dump()));
    ASSERT_TRUE(WaitFor([&] { return engine_->Stats().tokens_computed > 0; }));
  }  // closes the socket while the engine computes the inputs
  engine::sched::EngineStats s;
  ASSERT_TRUE(WaitFor([&] {
    s = engine_->Stats();
    return s.finished_requests == 2 && api_->live_jobs() == 0;
  })) << s.finished_requests
      << " " << api_->live_jobs();
  EXPECT_EQ(s.kv_used_blocks, 0);
  EXPECT_EQ(s.embeddings, 0) << "the disconnect came too late to cancel anything";
  EXPECT_LT(s.tokens_computed, 380);
  EXPECT_EQ(s.running_requests + s.waiting_requests, 0);
}

// `dimensions` as OpenAI's v3 models: the first `dimensions` components, L2-renormalised; the full
// width (or no `dimensions`) is the engine's vector bit for bit. Batched `input` of strings and
// token-id arrays; `user` accepted and ignored; other fields refused by name.
TEST_F(EmbeddingsServerTest, DimensionsTruncateAndRenormaliseAndBatchedInputs) {
  engine_->Start();
  const int dim = rc_.hidden_dim;
  ASSERT_GT(dim, 2);
  const std::vector<int32_t> t1 = Tokens(9, 1), t2 = tok_->Encode("hello", true, true);
  json body = {{"input", json::array({t1, "hello"})}, {"user", "someone"}};
  auto r = HttpCall(port_, "POST", "/v1/embeddings", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json full = json::parse(r.body);
  ASSERT_EQ(full["data"].size(), 2u);
  EXPECT_EQ(full["data"][0]["embedding"].get<std::vector<float>>(), Expected(t1));
  EXPECT_EQ(full["data"][1]["embedding"].get<std::vector<float>>(), Expected(t2));
  EXPECT_EQ(full["data"][1]["index"], 1);
  body["dimensions"] = dim;
  r = HttpCall(port_, "POST", "/v1/embeddings", body.dump());
  EXPECT_EQ(json::parse(r.body)["data"], full["data"]);
  const int d = dim / 2;
  body["dimensions"] = d;
  r = HttpCall(port_, "POST", "/v1/embeddings", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json part = json::parse(r.body);
  for (int i = 0; i < 2; ++i) {
    auto v = part["data"][i]["embedding"].get<std::vector<float>>();
    auto w = full["data"][i]["embedding"].get<std::vector<float>>();
    ASSERT_EQ(v.size(), static_cast<size_t>(d));
    double n2 = 0, w2 = 0;
    for (int k = 0; k < d; ++k) {
      n2 += static_cast<double>(v[k]) * v[k];
      w2 += static_cast<double>(w[k]) * w[k];
    }
    EXPECT_NEAR(n2, 1.0, 1e-5);
    for (int k = 0; k < d; ++k) EXPECT_NEAR(v[k], w[k] / std::sqrt(w2), 1e-6) << k;
  }
  auto refused = [&](const json& b, const char* param) {
    auto e = HttpCall(port_, "POST", "/v1/embeddings", b.dump());
    EXPECT_EQ(e.status, 400) << b;
    EXPECT_EQ(json::parse(e.body)["error"]["param"], param) << b;
  };
  refused({{"input", "x"}, {"dimensions", 0}}, "dimensions");
  refused({{"input", "x"}, {"dimensions", dim + 1}}, "dimensions");
  refused({{"input", "x"}, {"dimensions", "8"}}, "dimensions");
  refused({{"input", "x"}, {"dimensions", 1.5}}, "dimensions");
  refused({{"input", "x"}, {"user", 3}}, "user");
  refused({{"input", "x"}, {"truncate_prompt_tokens", 3}}, "truncate_prompt_tokens");
  refused({{"input", json::array({"a", 3})}}, "input");
  refused({{"input", json::array({"a", json::array({1, "b"})})}}, "input");
  refused({{"input", std::vector<std::string>(257, "a")}}, "input");
  refused({{"input", json::array()}}, "input");
  refused({{"input", json::object()}}, "input");
  refused({{"input", "x"}, {"encoding_format", 1}}, "encoding_format");
  auto cap = HttpCall(port_, "POST", "/v1/embeddings",
                      json({{"input", std::vector<std::string>(256, "a")}}).dump());
  EXPECT_EQ(cap.status, 200);
  EXPECT_EQ(json::parse(cap.body)["data"].size(), 256u);
}

TEST_F(EmbeddingsServerTest, BadInputsAreRefusedBeforeTheEngine) {
  int status = 0;
  auto post = [&](const json& body) {
    auto r = HttpCall(port_, "POST", "/v1/embeddings", body.dump());
    status = r.status;
    return json::parse(r.body, nullptr, false);
  };
  post({{"input", json::array({json::array()})}});  // one empty token list
  EXPECT_EQ(status, 400);
  auto e = post({{"input", Tokens(kMaxLen + 1, 3)}});
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["param"], "input");
  post({{"input", json::array({1, 99999})}});
  EXPECT_EQ(status, 400);
  post({{"input", "x"}, {"encoding_format", "int8"}});
  EXPECT_EQ(status, 400);
  EXPECT_EQ(api_->live_jobs(), 0);
}

}  // namespace
}  // namespace strata::server
