// Deterministic simulation tests of the engine with a tiered KV port: blocks evicted from the pool
// come back from the tier and skip prefill with the same tokens; a slow tier costs at most the
// prefetch timeout; cancellation while prefetching leaks nothing. The fake runner's KV is exported
// and imported byte for byte, and it verifies every position it reads back, so a wrong adopted
// block is an error, not a silent pass.
#include <gtest/gtest.h>

#include <map>

#include "engine/sched/engine.h"
#include "engine/sched/sim_testing.h"
#include "engine/sched/tier_port.h"

namespace strata::engine::sched {
namespace {

using sampler::SamplingParams;
using testing::GreedyReference;
using testing::MakePrompt;
using testing::Sim;

// An in-memory tier: a map from hash to the fake runner's exported block.
class MapTier final : public TierPort {
 public:
  explicit MapTier(FakeModelRunner* runner) : runner(runner) {}

  class MapFetch final : public Fetch {
   public:
    bool ready() const override { return is_ready; }
    std::vector<std::vector<uint8_t>> Take() override { return std::move(payloads); }
    void Cancel() override { was_cancelled = true; }
    bool is_ready = false;
    bool was_cancelled = false;
    std::vector<std::vector<uint8_t>> payloads;
  };

  void Demote(int32_t block, const kv::BlockHash& hash, std::string_view tenant) override {
    store[hash] = runner->ExportBlock(block);
    ++demoted;
    tenants.insert(std::string(tenant));
  }
  bool WantsPublish() const override { return publish; }
  void Publish(int32_t block, const kv::BlockHash& hash, std::string_view) override {
    store[hash] = runner->ExportBlock(block);
    ++published;
  }
  std::shared_ptr<Fetch> Prefetch(std::vector<kv::BlockHash> hashes, std::string_view,
                                  std::function<void()> wake) override {
    auto f = std::make_shared<MapFetch>();
    for (const auto& h : hashes) {
      auto it = store.find(h);
      if (it == store.end()) break;
      f->payloads.push_back(it->second);
    }
    f->is_ready = !stall;
    last = f;
    ++prefetches;
    if (wake) wake();
    return f;
  }
  void Fill(int32_t block, const std::vector<uint8_t>& payload) override {
    runner->ImportBlock(block, payload);
    ++filled;
  }

  FakeModelRunner* runner;
  std::map<kv::BlockHash, std::vector<uint8_t>> store;
  std::set<std::string> tenants;
  bool publish = false;
  bool stall = false;  // fetches never become ready
  std::shared_ptr<MapFetch> last;
  int demoted = 0, published = 0, prefetches = 0, filled = 0;
};

SubmitRequest Greedy(std::vector<int32_t> prompt, int max_tokens, std::string tenant = "") {
  SubmitRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = SamplingParams::Greedy();
  r.tenant = std::move(tenant);
  return r;
}

SchedulerConfig Cfg() {
  SchedulerConfig c;
  c.max_batched_tokens = 64;
  c.max_num_seqs = 4;
  return c;
}

TEST(EngineTierSim, TierBlocksNeverCrossLoraAdapters) {
  // The tier's keys are the block hashes, salted with the adapter's digest: blocks demoted under
  // adapter a come back for a, never for b (the fake runner would flag a block read under another
  // adapter) nor for the base model.
  Sim sim(/*num_blocks=*/8, Cfg(), /*block_size=*/16);
  MapTier tier(sim.runner.get());
  sim.engine->AttachKvTier(&tier, 0.05);
  const auto a = lora::Adapter::FromParts("a", "digest-a", {});
  const auto b = lora::Adapter::FromParts("b", "digest-b", {});
  const auto prompt = MakePrompt(70, 1);  // 4 full blocks + 6 tokens
  auto with = [&](std::shared_ptr<const lora::Adapter> l) {
    SubmitRequest r = Greedy(prompt, 4);
    r.lora = std::move(l);
    return r;
  };
  auto evict = [&](uint32_t seed) {  // a long other prompt recycles the pool
    ASSERT_TRUE(sim.Submit(Greedy(MakePrompt(110, seed), 4)).ok());
    sim.RunToCompletion();
  };
  ASSERT_TRUE(sim.Submit(with(a)).ok());
  sim.RunToCompletion();
  evict(2);
  ASSERT_GE(tier.demoted, 4);
  auto for_b = sim.Submit(with(b));
  ASSERT_TRUE(for_b.ok());
  sim.RunToCompletion();
  EXPECT_EQ(sim.engine->Stats().tier_hit_tokens, 0);
  auto for_base = sim.Submit(Greedy(prompt, 4));
  ASSERT_TRUE(for_base.ok());
  sim.RunToCompletion();
  EXPECT_EQ(sim.engine->Stats().tier_hit_tokens, 0);
  evict(3);
  auto for_a = sim.Submit(with(a));
  ASSERT_TRUE(for_a.ok());
  sim.RunToCompletion();
  EXPECT_EQ(sim.engine->Stats().tier_hit_tokens, 64);
  EXPECT_EQ(sim.results[*for_a][0].tokens, GreedyReference(sim.rcfg, prompt, 4, {}, a.get()));
  EXPECT_EQ(sim.results[*for_b][0].tokens, GreedyReference(sim.rcfg, prompt, 4, {}, b.get()));
  EXPECT_EQ(sim.results[*for_base][0].tokens, GreedyReference(sim.rcfg, prompt, 4));
}

TEST(EngineTierSim, EvictedBlocksReturnFromTheTierAndSkipPrefillWithSameTokens) {
  Sim sim(/*num_blocks=*/8, Cfg(), /*block_size=*/16);
  MapTier tier(sim.runner.get());
  sim.engine->AttachKvTier(&tier, 0.05);
  const auto a = MakePrompt(70, 1);  // 4 full blocks + 6 tokens
  auto id1 = sim.Submit(Greedy(a, 8, "acme"));
  ASSERT_TRUE(id1.ok());
  sim.RunToCompletion();
  // A different long prompt recycles the pool: A's cached blocks are demoted to the tier.
  auto id2 = sim.Submit(Greedy(MakePrompt(110, 2), 8));
  ASSERT_TRUE(id2.ok());
  sim.RunToCompletion();
  EXPECT_GE(tier.demoted, 4);
  EXPECT_TRUE(tier.tenants.count("acme"));
  const int64_t computed_before = sim.engine->Stats().tokens_computed;
  // A again: its first four blocks are not in the pool any more; the tier brings them back.
  auto id3 = sim.Submit(Greedy(a, 8, "acme"));
  ASSERT_TRUE(id3.ok());
  sim.RunToCompletion();
  const EngineStats st = sim.engine->Stats();
  EXPECT_EQ(st.tier_hit_tokens, 64);
  EXPECT_EQ(tier.filled, 4);
  EXPECT_EQ(st.tier_prefetch_timeouts, 0);
  // Only the 6-token tail and the decodes were computed.
  EXPECT_EQ(st.tokens_computed - computed_before, 6 + 7);
  const auto ref = GreedyReference(sim.rcfg, a, 8);
  EXPECT_EQ(sim.results[*id1][0].tokens, ref);
  EXPECT_EQ(sim.results[*id3][0].tokens, ref);
}

TEST(EngineTierSim, TimelineRecordsTheFetchAndTheAdoptedBlocksAsCached) {
  Sim sim(/*num_blocks=*/8, Cfg(), /*block_size=*/16);
  MapTier tier(sim.runner.get());
  sim.engine->AttachKvTier(&tier, 0.05);
  const auto a = MakePrompt(70, 1);  // 4 full blocks + 6 tokens
  ASSERT_TRUE(sim.Submit(Greedy(a, 8, "acme")).ok());
  sim.RunToCompletion();
  ASSERT_TRUE(sim.Submit(Greedy(MakePrompt(110, 2), 8)).ok());  // recycles A's blocks
  sim.RunToCompletion();
  auto id = sim.Submit(Greedy(a, 8, "acme"));
  ASSERT_TRUE(id.ok());
  sim.RunToCompletion();
  const RequestTimeline& t = testing::FinalTimeline(sim.results[*id][0]);
  ASSERT_EQ(t.num_tier_fetches, 1);
  ASSERT_EQ(t.tier_fetches.size(), 1u);
  const RequestTimeline::TierFetch& f = t.tier_fetches[0];
  EXPECT_EQ(f.blocks_requested, 4);
  EXPECT_EQ(f.blocks, 4);
  EXPECT_FALSE(f.timed_out);
  EXPECT_LE(t.submitted, f.start);
  EXPECT_LE(f.start, f.end);
  EXPECT_LE(f.end, t.first_scheduled);  // the fetch is part of the wait
  EXPECT_EQ(t.cached_tokens, 64);
  ASSERT_EQ(t.prefill_chunks.size(), 1u);
  EXPECT_EQ(t.prefill_chunks[0].tokens, 70 - 64);
}

TEST(EngineTierSim, TimelineMarksATimedOutFetch) {
  Sim sim(8, Cfg(), 16);
  MapTier tier(sim.runner.get());
  tier.stall = true;
  sim.engine->AttachKvTier(&tier, 0.05);
  auto id = sim.Submit(Greedy(MakePrompt(40, 4), 5));
  ASSERT_TRUE(id.ok());
  sim.RunToCompletion();
  const RequestTimeline& t = testing::FinalTimeline(sim.results[*id][0]);
  ASSERT_EQ(t.tier_fetches.size(), 1u);
  EXPECT_TRUE(t.tier_fetches[0].timed_out);
  EXPECT_EQ(t.tier_fetches[0].blocks, 0);
  EXPECT_GE(t.tier_fetches[0].end - t.tier_fetches[0].start, std::chrono::milliseconds(50));
  EXPECT_EQ(t.cached_tokens, 0);
}

TEST(EngineTierSim, PublishWritesComputedBlocksThrough) {
  Sim sim(16, Cfg(), 16);
  MapTier tier(sim.runner.get());
  tier.publish = true;
  sim.engine->AttachKvTier(&tier, 0.05);
  ASSERT_TRUE(sim.Submit(Greedy(MakePrompt(50, 3), 4)).ok());  // 3 full prompt blocks
  sim.RunToCompletion();
  EXPECT_EQ(tier.published, 3);
  // A second engine ("another replica") with an empty pool finds them in the shared tier.
  Sim other(16, Cfg(), 16);
  MapTier shared(other.runner.get());
  shared.store = tier.store;
  other.engine->AttachKvTier(&shared, 0.05);
  auto id = other.Submit(Greedy(MakePrompt(50, 3), 4));
  ASSERT_TRUE(id.ok());
  other.RunToCompletion();
  EXPECT_EQ(other.engine->Stats().tier_hit_tokens, 48);
  EXPECT_EQ(other.results[*id][0].tokens, GreedyReference(other.rcfg, MakePrompt(50, 3), 4));
}

TEST(EngineTierSim, StalledTierCostsAtMostThePrefetchTimeout) {
  Sim sim(8, Cfg(), 16);  // each step advances the fake clock by 10 ms
  MapTier tier(sim.runner.get());
  tier.stall = true;
  sim.engine->AttachKvTier(&tier, 0.05);
  const auto a = MakePrompt(40, 4);
  auto id = sim.Submit(Greedy(a, 5));
  ASSERT_TRUE(id.ok());
  sim.RunToCompletion();
  EXPECT_EQ(tier.prefetches, 1);
  EXPECT_TRUE(tier.last->was_cancelled);
  EXPECT_EQ(sim.engine->Stats().tier_prefetch_timeouts, 1);
  EXPECT_EQ(sim.engine->Stats().tier_hit_tokens, 0);
  EXPECT_LE(sim.steps, 6 + 5 + 2);  // ~5 held steps (50 ms), then the prompt and decodes
  EXPECT_EQ(sim.results[*id][0].tokens, GreedyReference(sim.rcfg, a, 5));
}

TEST(EngineTierSim, CancelWhilePrefetchingFreesEverything) {
  Sim sim(8, Cfg(), 16);
  MapTier tier(sim.runner.get());
  tier.stall = true;
  sim.engine->AttachKvTier(&tier, 10.0);
  auto id = sim.Submit(Greedy(MakePrompt(40, 5), 5));
  ASSERT_TRUE(id.ok());
  sim.Step();
  sim.Step();
  EXPECT_EQ(sim.engine->Stats().running_requests, 0);  // held while prefetching
  sim.engine->Cancel(*id);
  sim.RunToCompletion();
  EXPECT_TRUE(tier.last->was_cancelled);
  EXPECT_EQ(sim.results[*id][0].finish, FinishReason::kCancelled);
}

TEST(EngineTierSim, ShortPromptsAndPoolHitsDoNotPrefetch) {
  Sim sim(16, Cfg(), 16);
  MapTier tier(sim.runner.get());
  sim.engine->AttachKvTier(&tier, 0.05);
  ASSERT_TRUE(sim.Submit(Greedy(MakePrompt(16, 6), 3)).ok());  // (16-1)/16 = 0 reusable blocks
  sim.RunToCompletion();
  EXPECT_EQ(tier.prefetches, 0);
  ASSERT_TRUE(sim.Submit(Greedy(MakePrompt(40, 7), 3)).ok());
  sim.RunToCompletion();
  EXPECT_EQ(tier.prefetches, 1);  // nothing in the pool yet
  ASSERT_TRUE(sim.Submit(Greedy(MakePrompt(40, 7), 3)).ok());
  sim.RunToCompletion();
  EXPECT_EQ(tier.prefetches, 1);  // the pool has both reusable blocks: no prefetch
}

TEST(EngineTierSim, BlocksEvictedWhileWaitingArePrefetchedAgain) {
  SchedulerConfig c = Cfg();
  c.max_num_seqs = 1;  // the third request waits for a seat while the second one runs
  Sim sim(8, c, 16);
  MapTier tier(sim.runner.get());
  sim.engine->AttachKvTier(&tier, 0.05);
  const auto p = MakePrompt(50, 31);  // 3 full blocks
  ASSERT_TRUE(sim.Submit(Greedy(p, 2)).ok());
  sim.RunToCompletion();
  EXPECT_EQ(tier.prefetches, 1);                           // a miss on the empty tier
  auto big = sim.Submit(Greedy(MakePrompt(100, 32), 20));  // needs all 8 blocks
  std::vector<int32_t> again = p;
  for (int i = 0; i < 10; ++i) again.push_back(static_cast<int32_t>(i));
  auto id = sim.Submit(Greedy(again, 4));
  ASSERT_TRUE(big.ok());
  ASSERT_TRUE(id.ok());
  sim.RunToCompletion();
  // The big request's own arrival prefetch misses. At arrival the third request's 3 blocks were in
  // the pool (no prefetch); the big request's chunks evicted them (demoted), so the engine fetched
  // them back while the request waited (again after each further eviction).
  EXPECT_GE(tier.prefetches, 3);
  EXPECT_EQ(sim.engine->Stats().tier_hit_tokens, 48);
  EXPECT_EQ(sim.results[*id][0].tokens, GreedyReference(sim.rcfg, again, 4));
}

TEST(EngineTierSim, PreemptedRequestGetsItsEvictedBlocksBackFromTheTier) {
  SchedulerConfig c = Cfg();
  c.max_batched_tokens = 32;
  Sim sim(10, c, 16);
  MapTier tier(sim.runner.get());
  sim.engine->AttachKvTier(&tier, 0.05);
  // A bronze request with a long generation runs first...
  SubmitRequest bronze = Greedy(MakePrompt(60, 41), 40);
  bronze.priority = Priority::kBronze;
  auto b = sim.Submit(bronze);
  ASSERT_TRUE(b.ok());
  for (int i = 0; i < 6; ++i) sim.Step();
  // ...then a gold request needing most of the pool preempts it and evicts its cached blocks.
  SubmitRequest gold = Greedy(MakePrompt(120, 42), 20);
  gold.priority = Priority::kGold;
  auto g = sim.Submit(gold);
  ASSERT_TRUE(g.ok());
  sim.RunToCompletion();
  const EngineStats st = sim.engine->Stats();
  EXPECT_GE(st.preemptions, 1);
  EXPECT_GT(st.tier_hit_tokens, 0);
  EXPECT_EQ(sim.results[*b][0].tokens, GreedyReference(sim.rcfg, MakePrompt(60, 41), 40));
  EXPECT_EQ(sim.results[*g][0].tokens, GreedyReference(sim.rcfg, MakePrompt(120, 42), 20));
}

TEST(EngineTierSim, QuickPrefetchAdmitsInTheSameStep) {
  // A cold cache (every lookup a quick miss) must not delay admission by a step.
  Sim sim(8, Cfg(), 16);
  MapTier tier(sim.runner.get());
  sim.engine->AttachKvTier(&tier, 1.0);
  ASSERT_TRUE(sim.Submit(Greedy(MakePrompt(40, 51), 3)).ok());
  sim.Step();
  EXPECT_EQ(tier.prefetches, 1);
  EXPECT_EQ(sim.engine->Stats().running_requests, 1);
  EXPECT_EQ(sim.runner->batches().size(), 1u);  // its prompt ran in the first step
  sim.RunToCompletion();
}

}  // namespace
}  // namespace strata::engine::sched
