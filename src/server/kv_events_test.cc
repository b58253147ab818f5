// GET /v1/kv/events: the query parser, and in-process HTTP tests (server_test_util.h fixture: the
// real Engine on FakeModelRunner) checking that the published hashes are exactly the keys a
// gateway computes with cachekey from the response's model_salt and block_size.
#include "server/kv_events.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cachekey/block_hash.h"
#include "server/server_test_util.h"

namespace strata::server {
namespace {

using nlohmann::json;
using test::kBlocks;
using test::kBlockSize;
using test::ServerTest;
using testing::HttpCall;

// ---- the query ----

TEST(KvEventsQuery, DefaultsAndValues) {
  auto q = ParseKvEventsQuery("");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->since, 0u);
  EXPECT_EQ(q->max, kKvEventsDefaultMax);
  q = ParseKvEventsQuery("since=1234&max=10");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->since, 1234u);
  EXPECT_EQ(q->max, 10u);
  q = ParseKvEventsQuery("max=99999999&since=18446744073709551615&");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->max, kKvEventsHardMax);  // capped
  EXPECT_EQ(q->since, ~uint64_t{0});
}

TEST(KvEventsQuery, BadValuesNameTheParameter) {
  const std::map<std::string, std::string> bad = {
      {"since=", "since"},
      {"since=-1", "since"},
      {"since=1e3", "since"},
      {"since=0x10", "since"},
      {"since=+5", "since"},
      {"since", "since"},
      {"since=18446744073709551616", "since"},
      {"max=0", "max"},
      {"max=abc", "max"},
      {"max=", "max"},
      {"since=1&since=2", "since"},
      {"max=1&max=1", "max"},
      {"limit=5", "limit"},
      {"since=1&cursor=2", "cursor"},
  };
  for (const auto& [query, param] : bad) {
    auto q = ParseKvEventsQuery(query);
    ASSERT_FALSE(q.ok()) << query;
    EXPECT_EQ(q.error().param(), param) << query;
    EXPECT_EQ(q.error().status().code(), StatusCode::kInvalidArgument) << query;
  }
}

// ---- over HTTP ----

// Token ids in the byte vocabulary (1..200); prompts with different `start` differ in their first
// block, so they share no block.
std::vector<int32_t> Ids(int32_t start, int n) {
  std::vector<int32_t> v;
  v.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v.push_back(1 + (start + i) % 200);
  return v;
}

std::vector<uint8_t> FromHex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::set<std::string> HexSet(const std::vector<cachekey::BlockHash>& hashes) {
  std::set<std::string> out;
  for (const auto& h : hashes) out.insert(cachekey::HashToHex(h));
  return out;
}

class KvEventsServerTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    // A non-trivial model salt, as serving_engine.cc sets it (before the engine runs).
    engine_->SetModelSalt(cachekey::ModelSalt({"fingerprint-of-the-test", "f16", kBlockSize}));
    StartEngine();
  }

  json Poll(const std::string& query, int* status = nullptr) {
    auto r = HttpCall(port_, "GET", "/v1/kv/events" + query);
    if (status) *status = r.status;
    return json::parse(r.body, nullptr, false);
  }

  // Completes a prompt of token ids (max_tokens 1: only the prompt's full blocks are computed).
  void Complete(const std::vector<int32_t>& prompt, const std::string& tenant = "") {
    std::vector<std::string> headers;
    if (!tenant.empty()) headers.push_back("x-strata-tenant: " + tenant);
    json body = {{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}};
    auto r = HttpCall(port_, "POST", "/v1/completions", body.dump(), headers);
    ASSERT_EQ(r.status, 200) << r.body;
  }

  // What a gateway that follows the stream knows: tier -> hashes.
  struct Follower {
    uint64_t cursor = 0;
    std::string instance;
    std::map<std::string, std::set<std::string>> held;
    std::set<std::string> removed;  // pool hashes seen in remove events
    int resets = 0;
  };
  void Follow(Follower* f, size_t max = 4096) {
    for (int i = 0; i < 1000; ++i) {
      int st = 0;
      json j = Poll("?since=" + std::to_string(f->cursor) + "&max=" + std::to_string(max), &st);
      ASSERT_EQ(st, 200) << j;
      ASSERT_TRUE(j.is_object());
      if (j.at("reset").get<bool>()) {
        f->held.clear();
        f->resets += 1;
      }
      f->instance = j.at("instance").get<std::string>();
      size_t n = 0;
      for (const json& e : j.at("events")) {
        const std::string op = e.at("op").get<std::string>();
        const std::string tier = e.at("tier").get<std::string>();
        for (const json& h : e.at("hashes")) {
          const std::string hex = h.get<std::string>();
          if (op == "add") {
            f->held[tier].insert(hex);
          } else {
            ASSERT_EQ(op, "remove");
            f->held[tier].erase(hex);
            if (tier == "pool") f->removed.insert(hex);
          }
          ++n;
        }
      }
      const uint64_t next = j.at("cursor").get<uint64_t>();
      if (n == 0 && next == f->cursor) return;  // caught up
      f->cursor = next;
    }
    FAIL() << "the stream never caught up";
  }

  // The keys a gateway computes for `prompt` from a poll's model_salt and block_size.
  static std::set<std::string> GatewayKeys(const json& poll, const std::vector<int32_t>& prompt,
                                           const std::string& tenant) {
    const std::vector<uint8_t> model_salt = FromHex(poll.at("model_salt").get<std::string>());
    const int block_size = poll.at("block_size").get<int>();
    return HexSet(cachekey::ComputeBlockHashes(
        prompt, block_size, cachekey::RequestSalt(model_salt, {.adapter = "", .tenant = tenant})));
  }
};

TEST_F(KvEventsServerTest, ResponseShapeAndIdentity) {
  int st = 0;
  json j = Poll("", &st);
  ASSERT_EQ(st, 200) << j;
  // The keys in the documented order (read from the raw body: json objects are unordered).
  const auto raw = HttpCall(port_, "GET", "/v1/kv/events");
  EXPECT_EQ(raw.body.find("{\"instance\":"), 0u) << raw.body;
  EXPECT_LT(raw.body.find("\"block_size\""), raw.body.find("\"model_salt\""));
  EXPECT_LT(raw.body.find("\"cursor\""), raw.body.find("\"reset\""));
  EXPECT_LT(raw.body.find("\"reset\""), raw.body.find("\"events\""));
  EXPECT_EQ(j.at("instance").get<std::string>().size(), 32u);
  EXPECT_EQ(j.at("instance"), engine_->kv_events().instance());
  EXPECT_EQ(j.at("block_size"), kBlockSize);
  EXPECT_EQ(FromHex(j.at("model_salt").get<std::string>()), engine_->model_salt());
  EXPECT_TRUE(j.at("reset").get<bool>());  // no cursor: a snapshot
  EXPECT_TRUE(j.at("events").is_array());
  // The same cursor again: no reset, nothing new, same cursor.
  const uint64_t c = j.at("cursor").get<uint64_t>();
  json k = Poll("?since=" + std::to_string(c));
  EXPECT_FALSE(k.at("reset").get<bool>());
  EXPECT_TRUE(k.at("events").empty());
  EXPECT_EQ(k.at("cursor").get<uint64_t>(), c);
  // Another instance's cursor (or one from the future): a reset.
  EXPECT_TRUE(Poll("?since=" + std::to_string(c + 1)).at("reset").get<bool>());
  EXPECT_TRUE(Poll("?since=1").at("reset").get<bool>());
}

TEST_F(KvEventsServerTest, BadQueriesAre400NamingTheParameter) {
  for (const char* q : {"?since=abc", "?max=0", "?since=1&since=2", "?foo=1", "?max=-3"}) {
    int st = 0;
    json j = Poll(q, &st);
    EXPECT_EQ(st, 400) << q;
    EXPECT_EQ(j.at("error").at("type"), "invalid_request_error") << q;
    EXPECT_FALSE(j.at("error").at("param").is_null()) << q;
  }
  EXPECT_EQ(HttpCall(port_, "POST", "/v1/kv/events", "{}").status, 405);
}

TEST_F(KvEventsServerTest, PublishedHashesAreTheGatewaysKeysWithAndWithoutTenant) {
  Follower f;
  Follow(&f);
  const uint64_t start = f.cursor;
  const std::vector<int32_t> prompt = Ids(40, 40);  // 2 full blocks of 16 + 8 tokens
  Complete(prompt);
  json j = Poll("?since=" + std::to_string(start));
  ASSERT_FALSE(j.at("reset").get<bool>());
  const std::set<std::string> plain = GatewayKeys(j, prompt, "");
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_EQ(j.at("events").size(), 1u) << j;
  EXPECT_EQ(j.at("events")[0].at("op"), "add");
  EXPECT_EQ(j.at("events")[0].at("tier"), "pool");
  std::set<std::string> got;
  for (const json& h : j.at("events")[0].at("hashes")) got.insert(h.get<std::string>());
  EXPECT_EQ(got, plain);
  // The same prompt for a tenant: other keys (the tenant is in the salt), also published.
  Complete(prompt, "acme");
  Follow(&f);
  const std::set<std::string> acme = GatewayKeys(j, prompt, "acme");
  ASSERT_EQ(acme.size(), 2u);
  for (const std::string& h : acme) EXPECT_FALSE(plain.count(h)) << h;
  std::set<std::string> want = plain;
  want.insert(acme.begin(), acme.end());
  EXPECT_EQ(f.held["pool"], want);
  // A shared prefix: the new prompt's first two blocks are hits (no new add), the third is new.
  const std::vector<int32_t> longer = Ids(40, 56);  // 3 full blocks
  Complete(longer);
  Follow(&f);
  want = plain;
  want.insert(acme.begin(), acme.end());
  const std::set<std::string> longer_keys = GatewayKeys(j, longer, "");
  want.insert(longer_keys.begin(), longer_keys.end());
  EXPECT_EQ(longer_keys.size(), 3u);
  EXPECT_EQ(f.held["pool"], want);
  EXPECT_EQ(f.resets, 1);  // only the first poll
  // A fresh follower's snapshot is the same set.
  Follower fresh;
  Follow(&fresh);
  EXPECT_EQ(fresh.held["pool"], want);
  EXPECT_EQ(fresh.instance, f.instance);
}

TEST_F(KvEventsServerTest, EvictionsAreRemoveEvents) {
  Follower f;
  Follow(&f);
  // Distinct prompts of 12 full blocks each: five of them need more than the pool's 64 blocks, so
  // the oldest cached blocks are recycled.
  std::vector<std::set<std::string>> keys;
  json j = Poll("");
  for (int p = 0; p < 7; ++p) {
    const std::vector<int32_t> prompt = Ids(13 * p, 12 * kBlockSize);
    Complete(prompt);
    keys.push_back(GatewayKeys(j, prompt, ""));
  }
  Follow(&f, /*max=*/7);  // small pages: the stream is read in many answers
  ASSERT_FALSE(f.removed.empty());
  for (const std::string& h : f.removed) EXPECT_TRUE(keys[0].count(h) || keys[1].count(h)) << h;
  // What the follower holds is what the pool holds: at most the pool's blocks, the newest prompt
  // entirely.
  EXPECT_LE(f.held["pool"].size(), static_cast<size_t>(kBlocks));
  for (const std::string& h : keys.back()) EXPECT_TRUE(f.held["pool"].count(h)) << h;
  for (const std::string& h : f.removed) EXPECT_FALSE(f.held["pool"].count(h)) << h;
  // The engine's own view (read once its thread is stopped; the log still answers).
  engine_->Stop();
  std::set<std::string> cached;
  engine_->kv().ForEachCached([&](int32_t, const cachekey::BlockHash& h, uint32_t) {
    cached.insert(cachekey::HashToHex(h));
  });
  EXPECT_EQ(f.held["pool"], cached);
  Follower fresh;
  Follow(&fresh);
  EXPECT_EQ(fresh.held["pool"], cached);
}

TEST_F(KvEventsServerTest, NeedsNoReadiness) {
  api_->SetReady(false);
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/models").status, 503);
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/kv/events").status, 200);
  api_->StartDraining();
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/kv/events").status, 200);
}

class KvEventsAuthTest : public ServerTest {
 protected:
  void SetUp() override { Boot(1024, {"sekrit"}); }
};

TEST_F(KvEventsAuthTest, BearerKeyRequired) {
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/kv/events").status, 401);
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/kv/events", "", {"Authorization: Bearer nope"}).status,
            401);
  EXPECT_EQ(
      HttpCall(port_, "GET", "/v1/kv/events?since=0", "", {"Authorization: Bearer sekrit"}).status,
      200);
}

}  // namespace
}  // namespace strata::server
