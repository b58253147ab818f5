// End-to-end tests of the tiered KV cache with the real `strata serve` binary: a warm restart
// answers from the disk tier, two replicas share blocks through a real redis-server, a dead Redis
// only costs recomputation, and after kill -9 during writes plus corrupted files a restarted server
// never serves a bad block. "Correct" always means: the same greedy completion as a server with no
// tiers (recompute), which the tests run side by side.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "cachekey/block_hash.h"
#include "integration/http_test_client.h"
#include "integration/serve_process.h"
#include "testing/redis_process.h"

namespace {

using nlohmann::json;
using strata::testing::HttpCall;
using strata::testing::RedisProcess;
using strata::testing::ServeProcess;
namespace fs = std::filesystem;

// A prompt of `len` token ids in the bundled model's byte range, distinct per seed.
std::vector<int> Prompt(int len, uint32_t seed) {
  std::vector<int> p;
  uint64_t x = seed * 2654435761u + 7;
  for (int i = 0; i < len; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    p.push_back(3 + static_cast<int>((x >> 33) % 240));
  }
  return p;
}

// Greedy completion text, or "<status N>" on failure.
std::string Complete(int port, const std::vector<int>& prompt, int max_tokens = 8) {
  json body = {
      {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
  auto r = HttpCall(port, "POST", "/v1/completions", body.dump());
  if (r.status != 200) return "<status " + std::to_string(r.status) + ">";
  json j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) return "<bad json>";
  return j["choices"][0]["text"].get<std::string>();
}

// Sum of every sample of metric `name` whose labels contain `label` (e.g. kv_tier="disk").
double Metric(int port, const std::string& name, const std::string& label = "") {
  auto r = HttpCall(port, "GET", "/metrics");
  double sum = 0;
  std::istringstream in(r.body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    if (!label.empty() && line.find(label) == std::string::npos) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

// Waits until the server's tier write queue is empty and `name{label}` >= min (writes are async).
bool WaitMetric(int port, const std::string& name, const std::string& label, double min,
                double timeout_s = 20) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Metric(port, name, label) >= min && Metric(port, "strata:kv_tier_queued_writes") == 0)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Waits until `name{label}` > 0, the write queue is empty and the value has not moved for 300 ms
// (a write taken off the queue may still be in progress).
bool WaitSettled(int port, const std::string& name, const std::string& label,
                 double timeout_s = 30) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  double last = -1;
  auto since = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() < deadline) {
    const double v = Metric(port, name, label);
    const auto now = std::chrono::steady_clock::now();
    if (v != last) {
      last = v;
      since = now;
    } else if (v > 0 && Metric(port, "strata:kv_tier_queued_writes") == 0 &&
               now - since >= std::chrono::milliseconds(300)) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string TempDir(const std::string& stem) {
  fs::path p = fs::temp_directory_path() / (stem + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::vector<fs::path> BlockFiles(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file() && it->path().extension() == ".kvb") out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

// 200-token prompts: (200 - 1) / 16 = 12 reusable full blocks = 192 tokens each.
constexpr int kLen = 200;
constexpr int kReusable = 192;

TEST(KvTier, WarmRestartAnswersFromDisk) {
  const std::string dir = TempDir("strata-kvtier-warm");
  ServeProcess ref({});
  ASSERT_GT(ref.port(), 0);
  const auto p1 = Prompt(kLen, 1), p2 = Prompt(kLen, 2);
  const std::string want1 = Complete(ref.port(), p1), want2 = Complete(ref.port(), p2);
  {
    ServeProcess a(
        {"--kv-tier-ram", "16MiB", "--kv-tier-disk", dir, "--kv-tier-disk-size", "64MiB"});
    ASSERT_GT(a.port(), 0);
    EXPECT_EQ(Complete(a.port(), p1), want1);
    EXPECT_EQ(Complete(a.port(), p2), want2);
    a.Signal(SIGTERM);
    ASSERT_EQ(a.Wait(60), 0);  // graceful: the pool's cached blocks are persisted to the disk tier
  }
  EXPECT_GE(BlockFiles(dir).size(), 24u);
  {
    ServeProcess b(
        {"--kv-tier-ram", "16MiB", "--kv-tier-disk", dir, "--kv-tier-disk-size", "64MiB"});
    ASSERT_GT(b.port(), 0);
    EXPECT_EQ(Complete(b.port(), p1), want1);
    EXPECT_EQ(Metric(b.port(), "strata:kv_tier_hit_tokens_total"), kReusable);
    EXPECT_GE(Metric(b.port(), "strata:kv_tier_hits_total", "kv_tier=\"disk\""), 12);
    EXPECT_EQ(Metric(b.port(), "strata:prefix_cache_pool_hits_total"),
              0);  // the pool started empty
    // The hit rate counts the tokens the tiers served: hits / queries is not 0 % here.
    EXPECT_EQ(Metric(b.port(), "strata:prefix_cache_hits_total"), kReusable);
    EXPECT_GE(Metric(b.port(), "strata:prefix_cache_queries_total"), kReusable);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(KvTier, KillNineDuringWritesAndCorruptFilesNeverServeABadBlock) {
  const std::string dir = TempDir("strata-kvtier-crash");
  const std::string yaml = dir + ".yaml";
  std::ofstream(yaml) << "disk:\n  dir: " << dir << "\n  capacity: 256MiB\n  write_through: true\n";
  ServeProcess ref({});
  ASSERT_GT(ref.port(), 0);
  std::vector<std::vector<int>> prompts;
  std::vector<std::string> want;
  for (uint32_t i = 0; i < 6; ++i) {
    prompts.push_back(Prompt(kLen, 100 + i));
    want.push_back(Complete(ref.port(), prompts.back()));
  }
  {
    ServeProcess a({"--kv-tier-config", yaml});
    ASSERT_GT(a.port(), 0);
    for (size_t i = 0; i + 1 < prompts.size(); ++i)
      EXPECT_EQ(Complete(a.port(), prompts[i]), want[i]);
    // Let the first five prompts' blocks reach the disk (writes are asynchronous and fsynced; a
    // slow disk must not make the test flaky); the last request's blocks are in flight when it
    // dies.
    ASSERT_TRUE(WaitMetric(a.port(), "strata:kv_tier_bytes_in_total", "kv_tier=\"disk\"", 1, 60));
    std::thread last([&] { Complete(a.port(), prompts.back()); });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    a.Signal(SIGKILL);
    a.Wait(10);
    last.join();
  }
  auto files = BlockFiles(dir);
  ASSERT_GE(files.size(), 12u);
  // Damage some entries: bit flips in the payload and the header, a truncation, a stray temp file.
  for (size_t i = 0; i < files.size(); i += 3) {
    std::fstream f(files[i], std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(fs::file_size(files[i]));
    const std::streamoff at = (i / 3) % 2 == 0 ? size / 2 : 8;
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(at);
    f.write(&c, 1);
  }
  fs::resize_file(files[1], fs::file_size(files[1]) / 3);
  std::ofstream(files[2].parent_path() / "partial.kvb.tmp.123") << "garbage";
  {
    ServeProcess b({"--kv-tier-config", yaml});
    ASSERT_GT(b.port(), 0);
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(Complete(b.port(), prompts[i]), want[i]) << "prompt " << i;
    EXPECT_GE(Metric(b.port(), "strata:kv_tier_corrupt_total", "kv_tier=\"disk\""), 1);
    EXPECT_GT(Metric(b.port(), "strata:kv_tier_hit_tokens_total"), 0);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::remove(yaml, ec);
}

TEST(KvTier, TwoReplicasShareBlocksThroughRedis) {
  RedisProcess redis;
  if (!redis.available())
    GTEST_SKIP() << "redis-server not available (apt-get install redis-server)";
  ServeProcess a({"--kv-tier-redis", redis.url()});
  ServeProcess b({"--kv-tier-redis", redis.url()});
  ASSERT_GT(a.port(), 0);
  ASSERT_GT(b.port(), 0);
  const auto p = Prompt(kLen, 7);
  const std::string want = Complete(a.port(), p);
  ASSERT_TRUE(WaitSettled(a.port(), "strata:kv_tier_bytes_in_total", "kv_tier=\"redis\""));
  EXPECT_EQ(Complete(b.port(), p), want);
  EXPECT_EQ(Metric(b.port(), "strata:kv_tier_hit_tokens_total"), kReusable);
  EXPECT_GE(Metric(b.port(), "strata:kv_tier_hits_total", "kv_tier=\"redis\""), 12);
  EXPECT_EQ(Metric(b.port(), "strata:prefix_cache_hits_total"), kReusable);
  EXPECT_EQ(Metric(b.port(), "strata:kv_tier_up", "kv_tier=\"redis\""), 1);
}

// `strata serve <flags>` with stderr joined to stdout, so startup_output() has the warnings.
ServeProcess ServeWithStderr(const std::vector<std::string>& extra) {
  std::vector<std::string> base = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1"};
  for (const std::string& a : ServeProcess::DefaultArgs()) base.push_back(a);
  return ServeProcess(base, extra);
}

TEST(KvTier, UnreachableRedisAtStartIsAWarningAndAMetric) {
  RedisProcess redis;
  if (!redis.available())
    GTEST_SKIP() << "redis-server not available (apt-get install redis-server)";
  redis.Kill();  // nothing listens on its port now
  ServeProcess a = ServeWithStderr({"--kv-tier-redis", redis.url()});
  ASSERT_GT(a.port(), 0);
  const std::string want = "WARNING: KV tier redis at 127.0.0.1:" + std::to_string(redis.port()) +
                           " is unreachable (Connection refused)";
  EXPECT_NE(a.startup_output().find(want), std::string::npos) << a.startup_output();
  EXPECT_EQ(Metric(a.port(), "strata:kv_tier_up", "kv_tier=\"redis\""), 0);
  EXPECT_GE(Metric(a.port(), "strata:kv_tier_errors_total", "kv_tier=\"redis\""), 1);
  // Serving works without it, and once Redis is back the tier reconnects and reports up.
  ServeProcess ref({});
  ASSERT_GT(ref.port(), 0);
  EXPECT_EQ(Complete(a.port(), Prompt(kLen, 31)), Complete(ref.port(), Prompt(kLen, 31)));
  redis.Restart();
  ASSERT_TRUE(redis.available());
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    EXPECT_EQ(Complete(a.port(), Prompt(kLen, 40 + i)), Complete(ref.port(), Prompt(kLen, 40 + i)));
    up = Metric(a.port(), "strata:kv_tier_up", "kv_tier=\"redis\"") == 1;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(up);
  // A reachable Redis at start: no warning.
  ServeProcess b = ServeWithStderr({"--kv-tier-redis", redis.url()});
  ASSERT_GT(b.port(), 0);
  EXPECT_EQ(b.startup_output().find("WARNING"), std::string::npos) << b.startup_output();
  EXPECT_EQ(Metric(b.port(), "strata:kv_tier_up", "kv_tier=\"redis\""), 1);
}

TEST(KvTier, BlocksServedFromDiskAreWrittenThroughToRedis) {
  RedisProcess redis;
  if (!redis.available())
    GTEST_SKIP() << "redis-server not available (apt-get install redis-server)";
  const std::string dir = TempDir("strata-kvtier-disk2redis");
  const std::vector<std::string> disk = {"--kv-tier-ram",       "16MiB", "--kv-tier-disk", dir,
                                         "--kv-tier-disk-size", "64MiB"};
  const auto p = Prompt(kLen, 51);
  std::string want;
  {
    ServeProcess a(disk);  // no Redis yet: the blocks reach only the disk (on SIGTERM)
    ASSERT_GT(a.port(), 0);
    want = Complete(a.port(), p);
    a.Signal(SIGTERM);
    ASSERT_EQ(a.Wait(60), 0);
  }
  ASSERT_GE(BlockFiles(dir).size(), 12u);
  {
    std::vector<std::string> flags = disk;
    flags.insert(flags.end(), {"--kv-tier-redis", redis.url()});  // write-through by default
    ServeProcess b(flags);
    ASSERT_GT(b.port(), 0);
    EXPECT_EQ(Complete(b.port(), p), want);
    EXPECT_GE(Metric(b.port(), "strata:kv_tier_hits_total", "kv_tier=\"disk\""), 12);
    ASSERT_TRUE(WaitSettled(b.port(), "strata:kv_tier_bytes_in_total", "kv_tier=\"redis\""));
  }
  // A replica with only Redis finds every block the disk served.
  ServeProcess c({"--kv-tier-redis", redis.url()});
  ASSERT_GT(c.port(), 0);
  EXPECT_EQ(Complete(c.port(), p), want);
  EXPECT_GE(Metric(c.port(), "strata:kv_tier_hits_total", "kv_tier=\"redis\""), 12);
  EXPECT_EQ(Metric(c.port(), "strata:kv_tier_hit_tokens_total"), kReusable);
  EXPECT_EQ(Metric(c.port(), "strata:prefix_cache_hits_total"), kReusable);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(KvTier, NoTierFamiliesWithoutTiers) {
  ServeProcess a({});
  ASSERT_GT(a.port(), 0);
  ASSERT_EQ(Complete(a.port(), Prompt(kLen, 61)), Complete(a.port(), Prompt(kLen, 61)));
  const std::string body = HttpCall(a.port(), "GET", "/metrics").body;
  // No HELP/TYPE (and no samples) for the tier families.
  EXPECT_EQ(body.find("# HELP strata:kv_tier"), std::string::npos) << body;
  EXPECT_EQ(body.find("# TYPE strata:kv_tier"), std::string::npos) << body;
  EXPECT_EQ(body.find("\nstrata:kv_tier"), std::string::npos) << body;
  EXPECT_NE(body.find("# TYPE strata:prefix_cache_hits_total counter"), std::string::npos);
  EXPECT_EQ(Metric(a.port(), "strata:prefix_cache_hits_total"), kReusable);  // the second request
  EXPECT_EQ(Metric(a.port(), "strata:prefix_cache_pool_hits_total"), kReusable);
}

TEST(KvTier, DeadRedisOnlyCostsRecompute) {
  RedisProcess redis;
  if (!redis.available())
    GTEST_SKIP() << "redis-server not available (apt-get install redis-server)";
  ServeProcess ref({});
  ServeProcess a({"--kv-tier-redis", redis.url()});
  ASSERT_GT(ref.port(), 0);
  ASSERT_GT(a.port(), 0);
  const auto p1 = Prompt(kLen, 11), p2 = Prompt(kLen, 12);
  EXPECT_EQ(Complete(a.port(), p1), Complete(ref.port(), p1));
  redis.Kill();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Complete(a.port(), p2), Complete(ref.port(), p2));
  EXPECT_EQ(Complete(a.port(), p1), Complete(ref.port(), p1));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_EQ(HttpCall(a.port(), "GET", "/ready").status, 200);
  redis.Restart();  // the tier reconnects; requests keep working
  ASSERT_TRUE(redis.available());
  EXPECT_EQ(Complete(a.port(), Prompt(kLen, 13)), Complete(ref.port(), Prompt(kLen, 13)));
}

TEST(KvTier, TenantsDoNotShareBlocks) {
  ServeProcess a({"--kv-tier-ram", "16MiB"});
  ASSERT_GT(a.port(), 0);
  const auto p = Prompt(kLen, 21);
  json body = {{"prompt", p}, {"max_tokens", 2}, {"temperature", 0}};
  ASSERT_EQ(
      HttpCall(a.port(), "POST", "/v1/completions", body.dump(), {"x-strata-tenant: acme"}).status,
      200);
  const double hits = Metric(a.port(), "strata:prefix_cache_hits_total");
  ASSERT_EQ(HttpCall(a.port(), "POST", "/v1/completions", body.dump(), {"x-strata-tenant: globex"})
                .status,
            200);
  EXPECT_EQ(Metric(a.port(), "strata:prefix_cache_hits_total"), hits);  // no cross-tenant hit
  ASSERT_EQ(
      HttpCall(a.port(), "POST", "/v1/completions", body.dump(), {"x-strata-tenant: acme"}).status,
      200);
  EXPECT_EQ(Metric(a.port(), "strata:prefix_cache_hits_total"), hits + kReusable);
  EXPECT_EQ(
      HttpCall(a.port(), "POST", "/v1/completions", body.dump(), {"x-strata-tenant: bad tenant"})
          .status,
      400);
}

// What a gateway following GET /v1/kv/events knows: tier -> hex hashes.
struct KvView {
  uint64_t cursor = 0;
  std::string model_salt_hex;
  int block_size = 0;
  std::map<std::string, std::set<std::string>> held;
};

// Polls until caught up; false on a bad answer.
bool FollowEvents(int port, KvView* v) {
  for (int i = 0; i < 10000; ++i) {
    auto r = HttpCall(port, "GET", "/v1/kv/events?since=" + std::to_string(v->cursor));
    json j = json::parse(r.body, nullptr, false);
    if (r.status != 200 || !j.is_object()) return false;
    if (j.at("reset").get<bool>()) v->held.clear();
    v->model_salt_hex = j.at("model_salt").get<std::string>();
    v->block_size = j.at("block_size").get<int>();
    size_t n = 0;
    for (const json& e : j.at("events")) {
      auto& set = v->held[e.at("tier").get<std::string>()];
      const bool add = e.at("op").get<std::string>() == "add";
      for (const json& h : e.at("hashes")) {
        if (add)
          set.insert(h.get<std::string>());
        else
          set.erase(h.get<std::string>());
        ++n;
      }
    }
    const uint64_t next = j.at("cursor").get<uint64_t>();
    if (n == 0 && next == v->cursor) return true;
    v->cursor = next;
  }
  return false;
}

// The keys a gateway computes for an id prompt (no tenant) from the answer's salt and block size.
std::set<std::string> GatewayKeys(const KvView& v, const std::vector<int>& prompt) {
  std::vector<uint8_t> salt;
  for (size_t i = 0; i + 1 < v.model_salt_hex.size(); i += 2)
    salt.push_back(static_cast<uint8_t>(std::stoi(v.model_salt_hex.substr(i, 2), nullptr, 16)));
  const std::vector<int32_t> ids(prompt.begin(), prompt.end());
  std::set<std::string> out;
  for (const auto& h : strata::cachekey::ComputeBlockHashes(
           ids, v.block_size, strata::cachekey::RequestSalt(salt, {.adapter = "", .tenant = ""})))
    out.insert(strata::cachekey::HashToHex(h));
  return out;
}

// Block events through the real binary: blocks the pool evicts are removed from "pool" and show
// up in "ram" (demotion); at a warm restart the disk tier's snapshot holds what was persisted.
TEST(KvTier, BlockEventsFollowBlocksThroughTheTiers) {
  const std::string dir = TempDir("strata-kvtier-events");
  // strata-tiny: 4 KiB per block, so 160 KiB is 40 blocks: five 13-block prompts overflow it.
  const std::vector<std::string> base = {STRATA_BIN,  "serve",   "--port",
                                         "0",         "--model", STRATA_DEFAULT_MODEL,
                                         "--threads", "2"};  // no default --kv-cache-memory
  const std::vector<std::string> flags = {
      "--max-model-len", "256", "--kv-cache-memory",   "160KiB", "--kv-tier-ram", "16MiB",
      "--kv-tier-disk",  dir,   "--kv-tier-disk-size", "64MiB"};
  std::set<std::string> first, all;
  {
    ServeProcess a(base, flags);
    ASSERT_GT(a.port(), 0) << a.startup_output();
    ASSERT_NE(a.startup_output().find(" 40 KV blocks"), std::string::npos) << a.startup_output();
    KvView v;
    ASSERT_TRUE(FollowEvents(a.port(), &v));
    std::vector<std::vector<int>> prompts;
    for (uint32_t seed = 30; seed < 35; ++seed) {
      prompts.push_back(Prompt(kLen, seed));
      ASSERT_EQ(Complete(a.port(), prompts.back(), 2).rfind('<', 0), std::string::npos);
    }
    first = GatewayKeys(v, prompts[0]);
    ASSERT_EQ(first.size(), 12u);
    for (const auto& p : prompts) {
      auto k = GatewayKeys(v, p);
      all.insert(k.begin(), k.end());
    }
    // Demotions are asynchronous: wait until every block of the first prompt is in RAM.
    bool in_ram = false;
    for (int i = 0; i < 500 && !in_ram; ++i) {
      ASSERT_TRUE(FollowEvents(a.port(), &v));
      in_ram =
          std::includes(v.held["ram"].begin(), v.held["ram"].end(), first.begin(), first.end());
      if (!in_ram) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(in_ram);
    for (const std::string& h : first) EXPECT_EQ(v.held["pool"].count(h), 0u) << h;  // evicted
    EXPECT_LE(v.held["pool"].size(), 40u);
    for (const std::string& h : GatewayKeys(v, prompts.back()))
      EXPECT_EQ(v.held["pool"].count(h), 1u) << h;  // the newest prompt is still in the pool
    // Every published hash is one of the prompts' keys.
    for (const auto& [tier, set] : v.held)
      for (const std::string& h : set) EXPECT_EQ(all.count(h), 1u) << tier << " " << h;
    KvView fresh;  // a snapshot agrees with the followed stream
    ASSERT_TRUE(FollowEvents(a.port(), &fresh));
    EXPECT_EQ(fresh.held, v.held);
    a.Signal(SIGTERM);
    ASSERT_EQ(a.Wait(60), 0);  // persists the pool and RAM into the disk tier
  }
  ServeProcess b(base, flags);
  ASSERT_GT(b.port(), 0);
  KvView v;
  ASSERT_TRUE(FollowEvents(b.port(), &v));
  EXPECT_TRUE(v.held["pool"].empty());
  EXPECT_TRUE(std::includes(v.held["disk"].begin(), v.held["disk"].end(), all.begin(), all.end()))
      << v.held["disk"].size() << " disk blocks";
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(KvTier, BadTierFlagsAreClearErrors) {
  // Startup errors end the process with status 1 before "ready".
  ServeProcess bad({"--kv-tier-disk-size", "1GiB"});
  EXPECT_EQ(bad.port() == 0 || bad.Wait(10) == 1, true);
}

}  // namespace
