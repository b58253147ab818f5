// TierStaging on its own: when it asks the tiers, what it stages, timeouts, cancellation.
#include "engine/sched/tier_staging.h"

#include <gtest/gtest.h>

#include "cachekey/block_hash.h"

namespace strata::engine::sched {
namespace {

class FakeFetch final : public TierPort::Fetch {
 public:
  bool ready() const override { return is_ready; }
  std::vector<std::vector<uint8_t>> Take() override { return std::move(payloads); }
  void Cancel() override { ++cancels; }
  bool is_ready = false;
  int cancels = 0;
  std::vector<std::vector<uint8_t>> payloads;
};

class FakePort final : public TierPort {
 public:
  void Demote(int32_t, const kv::BlockHash&, std::string_view) override {}
  bool WantsPublish() const override { return false; }
  void Publish(int32_t, const kv::BlockHash&, std::string_view) override {}
  std::shared_ptr<Fetch> Prefetch(std::vector<kv::BlockHash> hashes, std::string_view tenant,
                                  std::function<void()>) override {
    asked = std::move(hashes);
    asked_tenant = std::string(tenant);
    last = std::make_shared<FakeFetch>();
    return last;
  }
  void Fill(int32_t, const std::vector<uint8_t>&) override {}
  std::vector<kv::BlockHash> asked;
  std::string asked_tenant;
  std::shared_ptr<FakeFetch> last;
};

constexpr int kBs = 4;

std::vector<int32_t> Tokens(int n) {
  std::vector<int32_t> t;
  t.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t.push_back(i + 1);
  return t;
}

struct Fixture {
  kv::KvManager kv{kv::KvManagerConfig{16, kBs, true}};
  FakePort port;
  TierStaging staging{kBs};
  std::vector<uint8_t> salt{1, 2, 3};
  FakeClock clock;
};

TEST(TierStaging, AsksForTheMissingBlocksStagesThemAndDoesNotRetryAMiss) {
  Fixture f;
  const auto tokens = Tokens(13);  // 3 full blocks + 1 token: all 3 may come from the tiers
  const auto hashes = cachekey::ComputeBlockHashes(tokens, kBs, f.salt);
  ASSERT_TRUE(f.staging.WantsPrefetch(tokens, /*started=*/false, hashes, f.salt, f.kv));
  f.staging.Start(&f.port, "acme", nullptr, f.clock.Now() + std::chrono::seconds(1));
  EXPECT_EQ(f.port.asked, hashes);
  EXPECT_EQ(f.port.asked_tenant, "acme");
  EXPECT_TRUE(f.staging.fetching());
  EXPECT_FALSE(f.staging.WantsPrefetch(tokens, false, hashes, f.salt, f.kv));  // in flight
  EXPECT_EQ(f.staging.Poll(f.clock.Now()), TierStaging::PollResult::kPending);
  f.port.last->payloads = {{7}, {8}};  // the tiers hold the first two blocks
  f.port.last->is_ready = true;
  EXPECT_EQ(f.staging.Poll(f.clock.Now()), TierStaging::PollResult::kLoaded);
  EXPECT_FALSE(f.staging.fetching());
  TierStaging::Staged staged = f.staging.StagedFrom(0, 13);
  ASSERT_EQ(staged.hashes.size(), 2u);
  EXPECT_EQ(staged.hashes[1], hashes[1]);
  EXPECT_EQ(staged.payloads[1], std::vector<uint8_t>{8});
  staged = f.staging.StagedFrom(1, 13);  // the pool already has block 0
  ASSERT_EQ(staged.hashes.size(), 1u);
  EXPECT_EQ(staged.payloads[0], std::vector<uint8_t>{8});
  EXPECT_TRUE(f.staging.StagedFrom(2, 13).hashes.empty());  // nothing staged continues there
  EXPECT_TRUE(f.staging.StagedFrom(0, 14).hashes.empty());  // other tokens
  // The third block was a miss: it is not asked again (the pool lost nothing since).
  EXPECT_FALSE(f.staging.WantsPrefetch(tokens, false, hashes, f.salt, f.kv));
  f.staging.Adopted();
  EXPECT_TRUE(f.staging.StagedFrom(0, 13).hashes.empty());
}

TEST(TierStaging, APreemptedRequestIsAskedAgainOnlyForBlocksThePoolLost) {
  Fixture f;
  auto tokens = Tokens(9);  // 2 full blocks + 1
  // Started (preempted) with its blocks in the pool: nothing to ask.
  kv::KvPlan plan = f.kv.Plan();
  plan.MatchPrefix(1, tokens, f.salt);
  plan.Allocate(1, 9);
  ASSERT_TRUE(f.kv.Apply(plan));
  f.kv.CommitComputed(1, tokens, 9, f.salt);
  EXPECT_FALSE(f.staging.WantsPrefetch(tokens, /*started=*/true, {}, f.salt, f.kv));
  // The pool recycles them (another sequence needs every block): now they are asked for.
  f.kv.Free(1);
  plan = f.kv.Plan();
  plan.Allocate(2, 16 * kBs);
  ASSERT_TRUE(f.kv.Apply(plan));
  ASSERT_TRUE(f.staging.WantsPrefetch(tokens, true, {}, f.salt, f.kv));
  f.staging.Start(&f.port, "", nullptr, f.clock.Now());
  EXPECT_EQ(f.port.asked, cachekey::ComputeBlockHashes(tokens, kBs, f.salt));
}

TEST(TierStaging, ASlowFetchTimesOutAndACancelledOneIsCancelledOnce) {
  Fixture f;
  const auto tokens = Tokens(9);
  const auto hashes = cachekey::ComputeBlockHashes(tokens, kBs, f.salt);
  ASSERT_TRUE(f.staging.WantsPrefetch(tokens, false, hashes, f.salt, f.kv));
  f.staging.Start(&f.port, "", nullptr, f.clock.Now() + std::chrono::milliseconds(50));
  std::shared_ptr<FakeFetch> fetch = f.port.last;
  f.clock.Advance(std::chrono::milliseconds(49));
  EXPECT_EQ(f.staging.Poll(f.clock.Now()), TierStaging::PollResult::kPending);
  f.clock.Advance(std::chrono::milliseconds(1));
  EXPECT_EQ(f.staging.Poll(f.clock.Now()), TierStaging::PollResult::kTimedOut);
  EXPECT_EQ(fetch->cancels, 1);
  EXPECT_FALSE(f.staging.fetching());
  EXPECT_TRUE(f.staging.StagedFrom(0, 9).hashes.empty());  // computed instead
  // A fetch in flight is cancelled when its staging goes away (the request ended).
  std::shared_ptr<FakeFetch> second;
  {
    TierStaging other(kBs);
    ASSERT_TRUE(other.WantsPrefetch(tokens, false, hashes, f.salt, f.kv));
    other.Start(&f.port, "", nullptr, f.clock.Now() + std::chrono::seconds(1));
    second = f.port.last;
  }
  EXPECT_EQ(second->cancels, 1);
}

}  // namespace
}  // namespace strata::engine::sched
