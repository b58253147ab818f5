// Redis tier tests against a real redis-server started by the test (skipped visibly when
// /usr/bin/redis-server is absent).
#include "engine/kvtier/redis_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "engine/kvtier/kvtier_test_util.h"
#include "testing/redis_process.h"

namespace strata::engine::kvtier {
namespace {

using testing::Key;
using testing::Payload;
using testing::PrefetchSync;
using testing::WaitFor;

constexpr const char* kRedisServer = "/usr/bin/redis-server";
constexpr uint64_t kBlock = 2048;

// A plain hiredis client for checking and tampering.
class RedisClient {
 public:
  explicit RedisClient(int port) {
    timeval tv{1, 0};
    ctx_ = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (ctx_ != nullptr) redisSetTimeout(ctx_, tv);
  }
  ~RedisClient() {
    if (ctx_) redisFree(ctx_);
  }
  bool ok() const { return ctx_ != nullptr && ctx_->err == 0; }
  // Status/string reply text, integer as decimal, "(nil)" or "(error)".
  std::string Command(const char* fmt, const std::string& a = "", const std::string& b = "") {
    if (!ok()) return "(error)";
    auto* r =
        static_cast<redisReply*>(redisCommand(ctx_, fmt, a.data(), a.size(), b.data(), b.size()));
    if (r == nullptr) return "(error)";
    std::string out;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
      out.assign(r->str, r->len);
    else if (r->type == REDIS_REPLY_INTEGER)
      out = std::to_string(r->integer);
    else if (r->type == REDIS_REPLY_NIL)
      out = "(nil)";
    else
      out = "(error)";
    freeReplyObject(r);
    return out;
  }

 private:
  redisContext* ctx_ = nullptr;
};

class RedisTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kRedisServer, X_OK) != 0) GTEST_SKIP() << kRedisServer << " not installed";
    server_ = std::make_unique<::strata::testing::RedisProcess>();
    ASSERT_TRUE(server_->available()) << "redis-server did not start";
  }

  TieredKvConfig RedisConfig(double ttl_s = 0) {
    TieredKvConfig c;
    c.redis = RedisTierConfig{};
    c.redis->url = server_->url();
    c.redis->key_prefix = "test:kv:";
    c.redis->limits.ttl_s = ttl_s;
    c.redis->timeout_s = 0.5;
    return c;
  }
  std::unique_ptr<TieredKvCache> Make(const TieredKvConfig& c) {
    auto r = TieredKvCache::Create(c, kBlock, "fmt");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  std::string RedisKey(int i) { return "test:kv:" + KeyHex(Key(i)); }

  std::unique_ptr<::strata::testing::RedisProcess> server_;
};

TEST_F(RedisTierTest, PublishedBlocksAreVisibleToAnotherReplica) {
  auto a = Make(RedisConfig());
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->WantsPublish());
  for (int i = 0; i < 3; ++i) a->Publish(Key(i), "", Payload(kBlock, i));
  RedisClient client(server_->port());
  // Two writers may finish the three writes in any order: wait for all of them.
  ASSERT_TRUE(WaitFor([&] { return a->Stats().redis.write_ops == 3; }));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(client.Command("EXISTS %b", RedisKey(i)), "1") << i;
  EXPECT_EQ(client.Command("PTTL %b", RedisKey(0)), "-1") << "no TTL configured";
  auto b = Make(RedisConfig());  // a second replica: its own process state, the same Redis
  ASSERT_TRUE(b);
  auto got = PrefetchSync(*b, {Key(0), Key(1), Key(2), Key(3)});
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], Payload(kBlock, i));
  TieredKvStats s = b->Stats();
  EXPECT_EQ(s.redis.hits, 3);
  EXPECT_EQ(s.redis.misses, 1);
  EXPECT_EQ(a->Stats().redis.write_ops, 3);
}

// Block events of Redis: the keys this replica wrote or found, forgotten on a miss, a delete of
// its own, or when the TTL has passed.
TEST_F(RedisTierTest, BlockEventsTrackWhatThisReplicaKnows) {
  testing::TierEventRecorder ra, rb;
  auto a = TieredKvCache::Create(RedisConfig(0.4), kBlock, "fmt", ra.Observer());
  ASSERT_TRUE(a.ok());
  for (int i = 0; i < 2; ++i) (*a)->Publish(Key(i), "", Payload(kBlock, i));
  ASSERT_TRUE(WaitFor([&] { return ra.Held(TierId::kRedis).size() == 2; }));
  // The TTL passes: Redis expires the keys itself and the tracker forgets them (its sweep).
  ASSERT_TRUE(WaitFor([&] { return ra.Held(TierId::kRedis).empty(); }));
  auto b = TieredKvCache::Create(RedisConfig(), kBlock, "fmt", rb.Observer());
  ASSERT_TRUE(b.ok());
  auto c = Make(RedisConfig());  // a third replica writes; b learns of the key by finding it
  c->Publish(Key(5), "", Payload(kBlock, 5));
  RedisClient client(server_->port());
  ASSERT_TRUE(WaitFor([&] { return client.Command("EXISTS %b", RedisKey(5)) == "1"; }));
  EXPECT_TRUE(rb.Held(TierId::kRedis).empty());
  ASSERT_EQ(PrefetchSync(**b, {Key(5)}).size(), 1u);
  EXPECT_TRUE(rb.Holds(TierId::kRedis, Key(5)));
  // Deleted behind its back: the next lookup misses and b forgets it.
  ASSERT_EQ(client.Command("DEL %b", RedisKey(5)), "1");
  EXPECT_EQ(PrefetchSync(**b, {Key(5)}).size(), 0u);
  EXPECT_FALSE(rb.Holds(TierId::kRedis, Key(5)));
  EXPECT_EQ(rb.redundant(), 0);
}

TEST_F(RedisTierTest, TenantQuotaDeletesThatTenantsOldestKeysOnly) {
  TieredKvConfig c = RedisConfig();
  c.redis->limits.tenant_quota_bytes = {{"acme", kBlock * 5 / 2}};  // room for two entries
  // One writer: "oldest" is the order the quota index sees the writes in. With two, a write can be
  // visible in Redis (and the queue empty) while its worker has not yet accounted it, so the next
  // write may be accounted first (seen once in a fresh-clone ctest -j2 run).
  c.io_threads = 1;
  auto a = Make(c);
  ASSERT_TRUE(a);
  RedisClient client(server_->port());
  a->Publish(Key(10), "globex", Payload(kBlock, 10));
  ASSERT_TRUE(WaitFor([&] { return client.Command("EXISTS %b", RedisKey(10)) == "1"; }));
  for (int i = 0; i < 4; ++i) {  // one at a time, so "oldest" is well defined
    a->Publish(Key(i), "acme", Payload(kBlock, i));
    ASSERT_TRUE(WaitFor([&] { return client.Command("EXISTS %b", RedisKey(i)) == "1"; }));
    ASSERT_TRUE(WaitFor([&] { return a->Stats().queued_writes == 0; }));
  }
  ASSERT_TRUE(WaitFor([&] { return client.Command("EXISTS %b", RedisKey(1)) == "0"; }));
  EXPECT_EQ(client.Command("EXISTS %b", RedisKey(0)), "0");
  EXPECT_EQ(client.Command("EXISTS %b", RedisKey(2)), "1");
  EXPECT_EQ(client.Command("EXISTS %b", RedisKey(3)), "1");
  EXPECT_EQ(client.Command("EXISTS %b", RedisKey(10)), "1");  // another tenant's key is untouched
  EXPECT_EQ(a->Stats().redis.evictions, 2);
}

TEST_F(RedisTierTest, TtlUsesRedisExpiry) {
  auto a = Make(RedisConfig(0.3));
  ASSERT_TRUE(a);
  a->Publish(Key(1), "", Payload(kBlock, 1));
  RedisClient client(server_->port());
  ASSERT_TRUE(WaitFor([&] { return client.Command("EXISTS %b", RedisKey(1)) == "1"; }));
  std::string pttl = client.Command("PTTL %b", RedisKey(1));
  EXPECT_GT(std::stoll(pttl), 0);
  EXPECT_LE(std::stoll(pttl), 300);
  ASSERT_TRUE(WaitFor([&] { return client.Command("EXISTS %b", RedisKey(1)) == "0"; }));
  EXPECT_EQ(PrefetchSync(*a, {Key(1)}).size(), 0u);
}

TEST_F(RedisTierTest, CorruptValueIsAMissCountedAndDeleted) {
  auto a = Make(RedisConfig());
  ASSERT_TRUE(a);
  a->Publish(Key(1), "", Payload(kBlock, 1));
  RedisClient client(server_->port());
  ASSERT_TRUE(WaitFor([&] { return client.Command("EXISTS %b", RedisKey(1)) == "1"; }));
  ASSERT_EQ(client.Command("SET %b %b", RedisKey(1), std::string("garbage\0bytes", 13)), "OK");
  EXPECT_EQ(PrefetchSync(*a, {Key(1)}).size(), 0u);
  EXPECT_EQ(a->Stats().redis.corrupt, 1);
  EXPECT_EQ(client.Command("EXISTS %b", RedisKey(1)), "0");
  // A huge value (larger than any entry) is refused without being decoded.
  ASSERT_EQ(client.Command("SET %b %b", RedisKey(2), std::string(kBlock * 4, 'x')), "OK");
  EXPECT_EQ(PrefetchSync(*a, {Key(2)}).size(), 0u);
  EXPECT_EQ(a->Stats().redis.corrupt, 2);
}

TEST_F(RedisTierTest, SurvivesRedisDyingAndReconnects) {
  auto a = Make(RedisConfig());
  ASSERT_TRUE(a);
  a->Publish(Key(1), "", Payload(kBlock, 1));
  ASSERT_TRUE(WaitFor([&] { return a->Stats().redis.write_ops == 1; }));
  ASSERT_EQ(PrefetchSync(*a, {Key(1)}).size(), 1u);
  server_->Kill();
  auto start = std::chrono::steady_clock::now();
  a->Publish(Key(2), "", Payload(kBlock, 2));
  auto h = a->Prefetch({Key(1)}, "", nullptr);
  ASSERT_TRUE(WaitFor([&] { return h->ready(); }));
  EXPECT_TRUE(h->Take().empty());
  ASSERT_TRUE(WaitFor([&] { return a->Stats().redis.write_ops == 2; }));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
  EXPECT_GT(a->Stats().redis.errors, 0);
  server_->Restart();  // same port, empty data
  ASSERT_TRUE(server_->available());
  ASSERT_TRUE(WaitFor([&] {
    a->Publish(Key(3), "", Payload(kBlock, 3));
    return PrefetchSync(*a, {Key(3)}).size() == 1;
  }));
}

TEST_F(RedisTierTest, RedisDownAtCreateIsNotAnError) {
  TieredKvConfig c = RedisConfig();
  c.redis->url = "redis://127.0.0.1:" + std::to_string(::strata::testing::RedisProcess::FreePort());
  auto a = Make(c);
  ASSERT_TRUE(a);
  EXPECT_EQ(PrefetchSync(*a, {Key(1)}).size(), 0u);
  EXPECT_GT(a->Stats().redis.errors, 0);
}

TEST_F(RedisTierTest, RedisHitsArePromotedIntoRam) {
  auto a = Make(RedisConfig());
  ASSERT_TRUE(a);
  a->Publish(Key(1), "t", Payload(kBlock, 1));
  ASSERT_TRUE(WaitFor([&] { return a->Stats().redis.write_ops == 1; }));
  TieredKvConfig c = RedisConfig();
  c.ram = RamTierConfig{};
  c.ram->limits.capacity_bytes = 1 << 20;
  auto b = Make(c);
  ASSERT_TRUE(b);
  ASSERT_EQ(PrefetchSync(*b, {Key(1)}).size(), 1u);
  ASSERT_TRUE(WaitFor([&] { return b->Stats().ram.entries == 1; }));
  ASSERT_EQ(PrefetchSync(*b, {Key(1)}).size(), 1u);
  EXPECT_EQ(b->Stats().ram.hits, 1);
  EXPECT_EQ(b->Stats().redis.hits, 1);
}

TEST_F(RedisTierTest, DiskHitsAreWrittenThroughToRedis) {
  testing::TempDir dir;
  TieredKvConfig disk_only;
  disk_only.disk = DiskTierConfig{};
  disk_only.disk->dir = dir.path();
  disk_only.disk->limits.capacity_bytes = 1 << 24;
  {
    auto writer = Make(disk_only);  // blocks on disk before Redis had them (a warm restart)
    ASSERT_TRUE(writer);
    for (int i = 0; i < 2; ++i) writer->Demote(Key(i), "", Payload(kBlock, i));
    ASSERT_TRUE(WaitFor([&] { return writer->Stats().disk.entries == 2; }));
  }
  RedisClient client(server_->port());
  for (bool write_through : {false, true}) {
    TieredKvConfig c = RedisConfig();
    c.disk = disk_only.disk;
    c.redis->write_through = write_through;
    auto cache = Make(c);
    ASSERT_TRUE(cache);
    ASSERT_EQ(PrefetchSync(*cache, {Key(0), Key(1)}).size(), 2u);
    EXPECT_EQ(cache->Stats().disk.hits, 2);
    if (!write_through) {
      // Promotions run after the result: give a (wrong) write time to land before checking.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      EXPECT_EQ(client.Command("EXISTS %b", RedisKey(0)), "0");
      continue;
    }
    ASSERT_TRUE(WaitFor([&] { return cache->Stats().redis.write_ops == 2; }));
    for (int i = 0; i < 2; ++i) EXPECT_EQ(client.Command("EXISTS %b", RedisKey(i)), "1") << i;
  }
  // Another replica without a disk now finds them in Redis.
  auto other = Make(RedisConfig());
  ASSERT_TRUE(other);
  auto got = PrefetchSync(*other, {Key(0), Key(1)});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1], Payload(kBlock, 1));
  EXPECT_EQ(other->Stats().redis.hits, 2);
}

TEST(RedisTierDownTest, UnreachableRedisIsDownWithTheAddressAndError) {
  // A port nothing listens on: bind one, close it.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  TieredKvConfig c;
  c.redis = RedisTierConfig{};
  c.redis->url = "redis://127.0.0.1:" + std::to_string(port);
  c.redis->timeout_s = 0.2;
  auto cache = TieredKvCache::Create(c, kBlock, "fmt");
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();  // down at start is not an error
  TierStats s = (*cache)->Stats().redis;
  EXPECT_TRUE(s.enabled);
  EXPECT_FALSE(s.up);
  EXPECT_EQ(s.address, "127.0.0.1:" + std::to_string(port));
  EXPECT_NE(s.last_error.find("refused"), std::string::npos) << s.last_error;
  EXPECT_GE(s.errors, 1);
}

TEST(RedisUrlTest, Parses) {
  auto u = ParseRedisUrl("redis://cache.local:6380/3");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "cache.local");
  EXPECT_EQ(u->port, 6380);
  EXPECT_EQ(u->db, 3);
  u = ParseRedisUrl("redis://10.0.0.1");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 6379);
  EXPECT_EQ(u->db, 0);
  for (const char* bad :
       {"http://x:1", "redis://", "redis://:6379", "redis://h:0", "redis://h:70000",
        "redis://h:12x", "redis://h:1/x", "redis://user:pw@h:1"}) {
    auto r = ParseRedisUrl(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("redis.url"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace strata::engine::kvtier
