#include "engine/kvtier/tiered_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <set>

#include "engine/kvtier/kvtier_test_util.h"
#include "engine/kvtier/tiered_cache_internal.h"

namespace strata::engine::kvtier {
namespace {

using testing::EntryPath;
using testing::Key;
using testing::Payload;
using testing::PrefetchSync;
using testing::TempDir;
using testing::TierEventRecorder;
using testing::WaitFor;

constexpr uint64_t kBlock = 4096;
constexpr uint64_t kEntry = kEntryHeaderBytes + kBlock;  // tenant "" and no compression
constexpr const char* kFormat = "test-format-v1";

bool FileExists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::unique_ptr<TieredKvCache> Make(const TieredKvConfig& c, std::string format = kFormat) {
  auto r = TieredKvCache::Create(c, kBlock, std::move(format));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

TieredKvConfig DiskOnly(const std::string& dir, uint64_t capacity = 1 << 30) {
  TieredKvConfig c;
  c.disk = DiskTierConfig{};
  c.disk->dir = dir;
  c.disk->limits.capacity_bytes = capacity;
  return c;
}

TieredKvConfig RamOnly(uint64_t capacity = 1 << 30) {
  TieredKvConfig c;
  c.ram = RamTierConfig{};
  c.ram->limits.capacity_bytes = capacity;
  return c;
}

TEST(TieredKvCacheTest, DiskPutGetAndRestart) {
  TempDir dir;
  {
    auto cache = Make(DiskOnly(dir.path()));
    ASSERT_TRUE(cache);
    for (int i = 0; i < 3; ++i) cache->Demote(Key(i), "", Payload(kBlock, i));
    ASSERT_TRUE(WaitFor([&] { return cache->Stats().disk.entries == 3; }));
    auto got = PrefetchSync(*cache, {Key(0), Key(1), Key(2)});
    ASSERT_EQ(got.size(), 3u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], Payload(kBlock, i));
    EXPECT_TRUE(FileExists(EntryPath(dir.path(), Key(1))));
  }
  auto again = Make(DiskOnly(dir.path()));  // a restarted server
  ASSERT_TRUE(again);
  EXPECT_EQ(again->Stats().disk.entries, 3);
  EXPECT_EQ(again->Stats().disk.bytes_used, static_cast<int64_t>(3 * kEntry));
  auto got = PrefetchSync(*again, {Key(0), Key(1), Key(2)});
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], Payload(kBlock, i));
  EXPECT_EQ(again->Stats().disk.hits, 3);
}

TEST(TieredKvCacheTest, TruncatedDiskEntryIsAMissDeletedAndCountedCorrupt) {
  TempDir dir;
  auto cache = Make(DiskOnly(dir.path()));
  ASSERT_TRUE(cache);
  cache->Demote(Key(1), "", Payload(kBlock, 1));
  cache->Demote(Key(2), "", Payload(kBlock, 2));
  ASSERT_TRUE(WaitFor([&] { return cache->Stats().disk.entries == 2; }));
  std::string path = EntryPath(dir.path(), Key(1));
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(kEntry / 2)), 0);
  auto got = PrefetchSync(*cache, {Key(1), Key(2)});
  EXPECT_EQ(got.size(), 0u) << "the prefix stops at the corrupt first block";
  EXPECT_EQ(cache->Stats().disk.corrupt, 1);
  EXPECT_FALSE(FileExists(path));
  EXPECT_EQ(cache->Stats().disk.entries, 1);
  EXPECT_EQ(PrefetchSync(*cache, {Key(2)}).size(), 1u);
}

TEST(TieredKvCacheTest, BitFlippedDiskEntryIsAMissDeletedAndCountedCorrupt) {
  TempDir dir;
  {
    auto cache = Make(DiskOnly(dir.path()));
    ASSERT_TRUE(cache);
    cache->Demote(Key(1), "", Payload(kBlock, 1));
    ASSERT_TRUE(WaitFor([&] { return cache->Stats().disk.entries == 1; }));
  }
  std::string path = EntryPath(dir.path(), Key(1));
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(kEntryHeaderBytes + 1000);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(kEntryHeaderBytes + 1000);
    f.write(&c, 1);
  }
  auto cache = Make(DiskOnly(dir.path()));  // the header still parses: found by the scan
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->Stats().disk.entries, 1);
  EXPECT_EQ(PrefetchSync(*cache, {Key(1)}).size(), 0u);
  EXPECT_EQ(cache->Stats().disk.corrupt, 1);
  EXPECT_EQ(cache->Stats().disk.hits, 0);
  EXPECT_FALSE(FileExists(path));
}

TEST(TieredKvCacheTest, TruncatedFileFoundAtStartupIsDeleted) {
  TempDir dir;
  {
    auto cache = Make(DiskOnly(dir.path()));
    ASSERT_TRUE(cache);
    cache->Demote(Key(1), "", Payload(kBlock, 1));
    ASSERT_TRUE(WaitFor([&] { return cache->Stats().disk.entries == 1; }));
  }
  std::string path = EntryPath(dir.path(), Key(1));
  ASSERT_EQ(::truncate(path.c_str(), 10), 0);
  auto cache = Make(DiskOnly(dir.path()));
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->Stats().disk.entries, 0);
  EXPECT_EQ(cache->Stats().disk.corrupt, 1);
  EXPECT_FALSE(FileExists(path));
  EXPECT_EQ(PrefetchSync(*cache, {Key(1)}).size(), 0u);
}

TEST(TieredKvCacheTest, StaleTempFilesAreRemovedAtStartup) {
  TempDir dir;
  std::string hex = KeyHex(Key(5));
  std::string sub = dir.path() + "/" + hex.substr(0, 2);
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  std::string temp = sub + "/.tmp-12345-0";
  std::ofstream(temp) << "half-written entry";
  std::string unrelated = sub + "/README";
  std::ofstream(unrelated) << "not ours";
  auto cache = Make(DiskOnly(dir.path()));
  ASSERT_TRUE(cache);
  EXPECT_FALSE(FileExists(temp));
  EXPECT_TRUE(FileExists(unrelated)) << "files that are not ours are left alone";
  EXPECT_EQ(cache->Stats().disk.entries, 0);
  EXPECT_EQ(PrefetchSync(*cache, {Key(5)}).size(), 0u);
}

TEST(TieredKvCacheTest, DiskCapacityEvictsLeastRecentlyUsed) {
  TempDir dir;
  auto cache = Make(DiskOnly(dir.path(), 3 * kEntry));
  ASSERT_TRUE(cache);
  for (int i = 0; i < 5; ++i) {
    cache->Demote(Key(i), "", Payload(kBlock, i));
    ASSERT_TRUE(WaitFor([&] { return cache->Stats().disk.write_ops == i + 1; }));
  }
  TieredKvStats s = cache->Stats();
  EXPECT_EQ(s.disk.entries, 3);
  EXPECT_EQ(s.disk.evictions, 2);
  EXPECT_LE(s.disk.bytes_used, static_cast<int64_t>(3 * kEntry));
  EXPECT_FALSE(FileExists(EntryPath(dir.path(), Key(0))));
  EXPECT_FALSE(FileExists(EntryPath(dir.path(), Key(1))));
  EXPECT_EQ(PrefetchSync(*cache, {Key(2), Key(3), Key(4)}).size(), 3u);
}

TEST(TieredKvCacheTest, RamEvictionsDemoteToDisk) {
  TempDir dir;
  TieredKvConfig c = DiskOnly(dir.path());
  c.ram = RamTierConfig{};
  c.ram->limits.capacity_bytes = 2 * kEntry;
  c.io_threads = 1;  // one worker: writes apply in submission order, so "oldest" is well defined
  auto cache = Make(c);
  ASSERT_TRUE(cache);
  for (int i = 0; i < 5; ++i) cache->Demote(Key(i), "", Payload(kBlock, i));
  ASSERT_TRUE(WaitFor([&] {
    auto s = cache->Stats();
    return s.ram.entries == 2 && s.disk.entries == 3 && s.queued_writes == 0;
  }));
  TieredKvStats s = cache->Stats();
  EXPECT_EQ(s.ram.evictions, 3);
  EXPECT_TRUE(FileExists(EntryPath(dir.path(), Key(0))));
  auto got = PrefetchSync(*cache, {Key(0), Key(1), Key(2), Key(3), Key(4)});
  ASSERT_EQ(got.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[i], Payload(kBlock, i));
}

TEST(TieredKvCacheTest, ShutdownPersistsRamIntoDisk) {
  TempDir dir;
  TieredKvConfig c = DiskOnly(dir.path());
  c.ram = RamTierConfig{};
  c.ram->limits.capacity_bytes = 100 * kEntry;
  auto cache = Make(c);
  ASSERT_TRUE(cache);
  for (int i = 0; i < 3; ++i) cache->Demote(Key(i), "acme", Payload(kBlock, i));
  ASSERT_TRUE(WaitFor([&] { return cache->Stats().ram.entries == 3; }));
  EXPECT_EQ(cache->Stats().disk.entries, 0);
  cache->Shutdown();
  EXPECT_EQ(cache->Stats().disk.entries, 3);
  cache->Shutdown();                              // idempotent
  cache->Demote(Key(9), "", Payload(kBlock, 9));  // ignored after shutdown
  std::atomic<bool> called{false};
  auto h = cache->Prefetch({Key(0)}, "", [&] { called = true; });
  EXPECT_TRUE(h->ready());
  EXPECT_TRUE(called.load());
  EXPECT_TRUE(h->Take().empty());
  cache.reset();
  auto restarted = Make(DiskOnly(dir.path()));
  ASSERT_TRUE(restarted);
  auto got = PrefetchSync(*restarted, {Key(0), Key(1), Key(2)});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2], Payload(kBlock, 2));
}

TEST(TieredKvCacheTest, FullQueueDropsAndCounts) {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, release = false;
  TieredKvTestHooks hooks;
  hooks.before_write = [&] {
    std::unique_lock<std::mutex> lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  };
  TieredKvConfig c = RamOnly();
  c.max_queued_writes = 4;
  c.io_threads = 1;
  auto r = CreateTieredKvCacheWithHooks(c, kBlock, kFormat, hooks);
  ASSERT_TRUE(r.ok());
  auto& cache = *r;
  cache->Demote(Key(0), "", Payload(kBlock, 0));
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return entered; }));
  }
  auto start = std::chrono::steady_clock::now();
  for (int i = 1; i <= 100; ++i) cache->Demote(Key(i), "", Payload(kBlock, i));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 10.0) << "Demote must not wait for the worker";
  TieredKvStats s = cache->Stats();
  EXPECT_EQ(s.queued_writes, 4);
  EXPECT_EQ(s.queue_drops, 96);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(WaitFor([&] { return cache->Stats().ram.entries == 5; }));
  EXPECT_EQ(cache->Stats().queued_writes, 0);
  EXPECT_EQ(PrefetchSync(*cache, {Key(0), Key(1), Key(2), Key(3), Key(4)}).size(), 5u);
}

TEST(TieredKvCacheTest, PrefetchStopsAtFirstMissAndCallsOnDone) {
  auto cache = Make(RamOnly());
  ASSERT_TRUE(cache);
  for (int i : {0, 1, 3}) cache->Demote(Key(i), "", Payload(kBlock, i));
  ASSERT_TRUE(WaitFor([&] { return cache->Stats().ram.entries == 3; }));
  std::atomic<int> calls{0};
  auto h = cache->Prefetch({Key(0), Key(1), Key(2), Key(3)}, "", [&] { calls++; });
  ASSERT_TRUE(WaitFor([&] { return h->ready() && calls.load() == 1; }));
  auto got = h->Take();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], Payload(kBlock, 0));
  EXPECT_EQ(got[1], Payload(kBlock, 1));
  TieredKvStats s = cache->Stats();
  EXPECT_EQ(s.prefetches, 1);
  EXPECT_EQ(s.prefetched_blocks, 2);
  EXPECT_EQ(s.ram.hits, 2);
  EXPECT_EQ(s.ram.misses, 1);
  // Empty key list: ready with nothing, on_done still called.
  auto empty = cache->Prefetch({}, "", [&] { calls++; });
  ASSERT_TRUE(WaitFor([&] { return empty->ready() && calls.load() == 2; }));
  EXPECT_TRUE(empty->Take().empty());
}

TEST(TieredKvCacheTest, DiskHitsArePromotedIntoRam) {
  TempDir dir;
  {
    auto writer = Make(DiskOnly(dir.path()));
    ASSERT_TRUE(writer);
    for (int i = 0; i < 3; ++i) writer->Demote(Key(i), "", Payload(kBlock, i));
    ASSERT_TRUE(WaitFor([&] { return writer->Stats().disk.entries == 3; }));
  }
  TieredKvConfig c = DiskOnly(dir.path());
  c.ram = RamTierConfig{};
  c.ram->limits.capacity_bytes = 100 * kEntry;
  auto cache = Make(c);
  ASSERT_TRUE(cache);
  ASSERT_EQ(PrefetchSync(*cache, {Key(0), Key(1), Key(2)}).size(), 3u);
  TieredKvStats s = cache->Stats();
  EXPECT_EQ(s.disk.hits, 3);
  EXPECT_EQ(s.ram.entries, 3);
  auto got = PrefetchSync(*cache, {Key(0), Key(1), Key(2)});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[1], Payload(kBlock, 1));
  EXPECT_EQ(cache->Stats().ram.hits, 3);
  EXPECT_EQ(cache->Stats().disk.hits, 3);
}

TEST(TieredKvCacheTest, OtherFormatIdIsRejectedAndDeleted) {
  TempDir dir;
  {
    auto writer = Make(DiskOnly(dir.path()), "model-A");
    ASSERT_TRUE(writer);
    writer->Demote(Key(1), "", Payload(kBlock, 1));
    ASSERT_TRUE(WaitFor([&] { return writer->Stats().disk.entries == 1; }));
  }
  auto reader = Make(DiskOnly(dir.path()), "model-B");
  ASSERT_TRUE(reader);
  EXPECT_EQ(PrefetchSync(*reader, {Key(1)}).size(), 0u);
  EXPECT_EQ(reader->Stats().disk.corrupt, 1);
  EXPECT_FALSE(FileExists(EntryPath(dir.path(), Key(1))));
}

TEST(TieredKvCacheTest, CompressionRoundTripsThroughTheTiers) {
  for (Compression comp : {Compression::kLz4, Compression::kZstd}) {
    TempDir dir;
    TieredKvConfig c = DiskOnly(dir.path());
    c.ram = RamTierConfig{};
    c.ram->limits.capacity_bytes = 1 * kEntry;  // the second entry pushes the first to disk
    c.io_threads = 1;                           // one worker: writes apply in submission order
    c.compression = comp;
    auto cache = Make(c);
    ASSERT_TRUE(cache);
    std::vector<uint8_t> compressible(kBlock);
    for (size_t i = 0; i < kBlock; ++i) compressible[i] = static_cast<uint8_t>((i / 100) % 3);
    std::vector<uint8_t> noise = Payload(kBlock, 7);
    cache->Demote(Key(0), "", compressible);
    cache->Demote(Key(1), "", noise);
    ASSERT_TRUE(
        WaitFor([&] { return cache->Stats().ram.entries + cache->Stats().disk.entries == 2; }));
    TieredKvStats s = cache->Stats();
    EXPECT_EQ(s.disk.entries, 1);
    EXPECT_LT(s.disk.bytes_used, static_cast<int64_t>(kBlock / 2))
        << "compressible block stored compressed";
    EXPECT_EQ(s.ram.bytes_used, static_cast<int64_t>(kEntry)) << "incompressible block stays raw";
    auto got = PrefetchSync(*cache, {Key(0), Key(1)});
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], compressible);
    EXPECT_EQ(got[1], noise);
  }
}

TEST(TieredKvCacheTest, RamTtlWithInjectedClock) {
  std::atomic<double> now{5000};
  TieredKvTestHooks hooks;
  hooks.clock = [&now] { return now.load(); };
  TieredKvConfig c = RamOnly();
  c.ram->limits.ttl_s = 60;
  auto r = CreateTieredKvCacheWithHooks(c, kBlock, kFormat, hooks);
  ASSERT_TRUE(r.ok());
  auto& cache = *r;
  cache->Demote(Key(1), "", Payload(kBlock, 1));
  ASSERT_TRUE(WaitFor([&] { return cache->Stats().ram.entries == 1; }));
  now = 5059;
  EXPECT_EQ(PrefetchSync(*cache, {Key(1)}).size(), 1u);
  now = 5061;  // expired: removed by the lookup or by the background sweep, whichever runs first
  EXPECT_EQ(PrefetchSync(*cache, {Key(1)}).size(), 0u);
  EXPECT_TRUE(WaitFor([&] { return cache->Stats().ram.expirations == 1; }));
  EXPECT_EQ(cache->Stats().ram.entries, 0);
  cache->Shutdown();  // before `now` goes out of scope
}

TEST(TieredKvCacheTest, WrongPayloadSizeIsIgnoredAndCounted) {
  auto cache = Make(RamOnly());
  ASSERT_TRUE(cache);
  cache->Demote(Key(1), "", Payload(kBlock - 1, 1));
  EXPECT_EQ(cache->Stats().ram.errors, 1);
  EXPECT_EQ(cache->Stats().queued_writes, 0);
  EXPECT_FALSE(cache->WantsPublish());
}

TEST(TieredKvCacheTest, CreateRejectsBadConfig) {
  TieredKvConfig c = RamOnly(0);
  auto r = TieredKvCache::Create(c, kBlock, kFormat);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("ram.capacity"), std::string::npos) << r.status().ToString();
  c = RamOnly();
  c.io_threads = 0;
  EXPECT_NE(TieredKvCache::Create(c, kBlock, kFormat).status().message().find("io_threads"),
            std::string::npos);
  EXPECT_FALSE(TieredKvCache::Create(RamOnly(), 0, kFormat).ok());
  TempDir dir;
  std::string file = dir.path() + "/plain-file";
  std::ofstream(file) << "x";
  auto bad_dir = TieredKvCache::Create(DiskOnly(file + "/sub"), kBlock, kFormat);
  ASSERT_FALSE(bad_dir.ok());
  EXPECT_EQ(bad_dir.status().code(), StatusCode::kIoError) << bad_dir.status().ToString();
  TieredKvConfig none;
  auto disabled = TieredKvCache::Create(none, kBlock, kFormat);
  ASSERT_TRUE(disabled.ok());
  EXPECT_EQ(PrefetchSync(**disabled, {Key(1)}).size(), 0u);
}

TEST(TieredKvCacheTest, TenantQuotaInRamDemotesOnlyThatTenant) {
  TempDir dir;
  TieredKvConfig c = DiskOnly(dir.path());
  c.ram = RamTierConfig{};
  c.ram->limits.capacity_bytes = 100 * kEntry;
  c.ram->limits.tenant_quota_bytes = {{"small", 2 * (kEntry + 5)}};
  c.io_threads = 1;  // one worker: writes apply in submission order, so "oldest" is well defined
  auto cache = Make(c);
  ASSERT_TRUE(cache);
  cache->Demote(Key(100), "big", Payload(kBlock, 100));
  for (int i = 0; i < 4; ++i) cache->Demote(Key(i), "small", Payload(kBlock, i));
  ASSERT_TRUE(
      WaitFor([&] { return cache->Stats().ram.entries == 3 && cache->Stats().disk.entries == 2; }));
  EXPECT_FALSE(FileExists(EntryPath(dir.path(), Key(100))));
  EXPECT_TRUE(FileExists(EntryPath(dir.path(), Key(0))));
  EXPECT_TRUE(FileExists(EntryPath(dir.path(), Key(1))));
}

}  // namespace
}  // namespace strata::engine::kvtier

// ---- block events (TierObserver) ----

namespace strata::engine::kvtier {
namespace {

std::unique_ptr<TieredKvCache> MakeObserved(const TieredKvConfig& c, TierEventRecorder* rec,
                                            TieredKvTestHooks hooks = {}) {
  auto r = CreateTieredKvCacheWithHooks(c, kBlock, kFormat, std::move(hooks), rec->Observer());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

std::set<BlockKey> Keys(std::initializer_list<int> ids) {
  std::set<BlockKey> out;
  for (int i : ids) out.insert(Key(i));
  return out;
}

TEST(TierEventsTest, RamAndDiskReportStoresEvictionsAndTheShutdownMove) {
  TempDir dir;
  TieredKvConfig c = DiskOnly(dir.path());
  c.ram = RamTierConfig{};
  c.ram->limits.capacity_bytes = 2 * kEntry;
  c.io_threads = 1;
  TierEventRecorder rec;
  auto cache = MakeObserved(c, &rec);
  ASSERT_TRUE(cache);
  for (int i = 0; i < 5; ++i) cache->Demote(Key(i), "", Payload(kBlock, i));
  ASSERT_TRUE(WaitFor([&] { return rec.Held(TierId::kDisk).size() == 3; }));
  // RAM keeps the newest two; the three it evicted moved down to disk.
  EXPECT_EQ(rec.Held(TierId::kRam), Keys({3, 4}));
  EXPECT_EQ(rec.Held(TierId::kDisk), Keys({0, 1, 2}));
  // A disk hit is promoted into RAM; the RAM entry it evicts moves down to disk.
  ASSERT_EQ(PrefetchSync(*cache, {Key(0)}).size(), 1u);
  ASSERT_TRUE(WaitFor([&] { return rec.Holds(TierId::kRam, Key(0)); }));
  EXPECT_EQ(rec.Held(TierId::kRam).size(), 2u);
  EXPECT_EQ(rec.Held(TierId::kRam).size(), static_cast<size_t>(cache->Stats().ram.entries));
  EXPECT_EQ(rec.Held(TierId::kDisk).size(), static_cast<size_t>(cache->Stats().disk.entries));
  // Shutdown empties RAM into disk: removes for RAM, adds for what disk did not have.
  cache->Shutdown();
  EXPECT_TRUE(rec.Held(TierId::kRam).empty());
  EXPECT_EQ(rec.Held(TierId::kDisk), Keys({0, 1, 2, 3, 4}));
  EXPECT_EQ(rec.redundant(), 0);
  EXPECT_TRUE(rec.Held(TierId::kRedis).empty());
  cache.reset();
  // A restarted cache reports every file its startup scan finds.
  TierEventRecorder again;
  auto restarted = MakeObserved(DiskOnly(dir.path()), &again);
  ASSERT_TRUE(restarted);
  EXPECT_EQ(again.Held(TierId::kDisk), Keys({0, 1, 2, 3, 4}));
}

TEST(TierEventsTest, ExpiryAndCorruptEntriesAreRemoves) {
  std::atomic<double> now{1000};
  TieredKvTestHooks hooks;
  hooks.clock = [&now] { return now.load(); };
  TempDir dir;
  TieredKvConfig c = DiskOnly(dir.path());
  c.ram = RamTierConfig{};
  c.ram->limits.capacity_bytes = 100 * kEntry;
  c.ram->limits.ttl_s = 1;  // sweeps every 0.25 s
  TierEventRecorder rec;
  auto cache = MakeObserved(c, &rec, hooks);
  ASSERT_TRUE(cache);
  cache->Demote(Key(1), "", Payload(kBlock, 1));
  cache->Demote(Key(2), "", Payload(kBlock, 2));
  ASSERT_TRUE(WaitFor([&] { return rec.Held(TierId::kRam) == Keys({1, 2}); }));
  now = 1002;  // both expired: removed by a lookup or by the sweep
  EXPECT_EQ(PrefetchSync(*cache, {Key(1)}).size(), 0u);
  EXPECT_TRUE(WaitFor([&] { return rec.Held(TierId::kRam).empty(); }));
  // A disk entry whose file is damaged is deleted on read: a remove.
  cache->Shutdown();
  cache.reset();
  TierEventRecorder rec2;
  auto disk = MakeObserved(DiskOnly(dir.path()), &rec2);
  ASSERT_TRUE(disk);
  disk->Demote(Key(3), "", Payload(kBlock, 3));
  ASSERT_TRUE(WaitFor([&] { return rec2.Holds(TierId::kDisk, Key(3)); }));
  const std::string path = testing::EntryPath(dir.path(), Key(3));
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(kEntry / 2)), 0);
  EXPECT_EQ(PrefetchSync(*disk, {Key(3)}).size(), 0u);
  EXPECT_FALSE(rec2.Holds(TierId::kDisk, Key(3)));
  disk->Shutdown();  // before `now` goes out of scope
}

TEST(TierEventsTest, WithoutAnObserverNothingChanges) {
  auto cache = Make(RamOnly());  // the plain Create: no observer
  ASSERT_TRUE(cache);
  cache->Demote(Key(1), "", Payload(kBlock, 1));
  ASSERT_TRUE(WaitFor([&] { return cache->Stats().ram.entries == 1; }));
  EXPECT_EQ(PrefetchSync(*cache, {Key(1)}).size(), 1u);
}

}  // namespace
}  // namespace strata::engine::kvtier
