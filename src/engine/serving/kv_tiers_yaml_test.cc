// The older `--kv-tier-config` file: the `engine.kv_tiers` section of the replica config as a
// document of its own (moved here from engine/kvtier with its loader).
#include <gtest/gtest.h>

#include "engine/serving/serving_config.h"

namespace strata::engine::serving {
namespace {

using kvtier::Compression;

TEST(KvTierConfigYamlTest, ParsesTheDocumentedExample) {
  auto c = ParseKvTiersYaml(R"(
ram:   { capacity: 2GiB, ttl_s: 3600, tenant_quota: { acme: 512MiB }, default_tenant_quota: 1GiB }
disk:  { dir: /var/cache/strata/kv, capacity: 50GiB, ttl_s: 86400, write_through: false }
redis: { url: "redis://127.0.0.1:6379", ttl_s: 600, key_prefix: "strata:kv:", write_through: true }
compression: lz4
max_queued_writes: 256
io_threads: 2
)");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->ram && c->disk && c->redis);
  EXPECT_EQ(c->ram->limits.capacity_bytes, 2ull << 30);
  EXPECT_EQ(c->ram->limits.ttl_s, 3600);
  ASSERT_EQ(c->ram->limits.tenant_quota_bytes.size(), 1u);
  EXPECT_EQ(c->ram->limits.tenant_quota_bytes[0].first, "acme");
  EXPECT_EQ(c->ram->limits.tenant_quota_bytes[0].second, 512ull << 20);
  EXPECT_EQ(c->ram->limits.default_tenant_quota_bytes, 1ull << 30);
  EXPECT_EQ(c->disk->dir, "/var/cache/strata/kv");
  EXPECT_EQ(c->disk->limits.capacity_bytes, 50ull << 30);
  EXPECT_FALSE(c->disk->write_through);
  EXPECT_TRUE(c->disk->fsync);
  EXPECT_EQ(c->redis->url, "redis://127.0.0.1:6379");
  EXPECT_EQ(c->redis->limits.ttl_s, 600);
  EXPECT_EQ(c->redis->key_prefix, "strata:kv:");
  EXPECT_EQ(c->compression, Compression::kLz4);
  EXPECT_EQ(c->max_queued_writes, 256u);
  EXPECT_EQ(c->io_threads, 2);
}

TEST(KvTierConfigYamlTest, EmptyMeansNoTiers) {
  auto c = ParseKvTiersYaml("");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->enabled());
}

TEST(KvTierConfigYamlTest, ErrorsNameTheKey) {
  struct Case {
    const char* yaml;
    const char* needle;
  } cases[] = {
      {"ram: { capacity: 2GiB, colour: red }", "ram.colour"},
      {"bogus: 1", "bogus"},
      {"ram: { capacity: lots }", "ram.capacity"},
      {"ram: { capacity: [1, 2] }", "ram.capacity"},
      {"ram: { ttl_s: 5 }", "ram.capacity"},
      {"ram: { capacity: 1GiB, ttl_s: -1 }", "ram.ttl_s"},
      {"ram: { capacity: 1GiB, tenant_quota: { a: nope } }", "ram.tenant_quota.a"},
      {"disk: { capacity: 1GiB }", "disk.dir"},
      {"disk: { dir: /tmp/x, capacity: 1GiB, fsync: maybe }", "disk.fsync"},
      {"redis: { url: \"http://x\" }", "redis.url"},
      {"redis: { url: \"redis://h:1\", capacity: 1GiB }", "redis.capacity"},
      {"compression: brotli", "compression"},
      {"io_threads: 0", "io_threads"},
      {"max_queued_writes: x", "max_queued_writes"},
      {"ram: [1, 2", "YAML"},
      {"- 1\n- 2", "top level"},
  };
  for (const Case& k : cases) {
    auto c = ParseKvTiersYaml(k.yaml);
    ASSERT_FALSE(c.ok()) << k.yaml;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << k.yaml;
    EXPECT_NE(c.status().message().find(k.needle), std::string::npos)
        << k.yaml << " → " << c.status().ToString();
  }
}

TEST(KvTierConfigYamlTest, MissingFileIsAnError) {
  auto c = LoadKvTiersFile("/nonexistent/kv-tiers.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/kv-tiers.yaml"), std::string::npos);
}

}  // namespace
}  // namespace strata::engine::serving
