// LoRA adapters in the engine (fake runner, fake clock, Step()-driven): the adapter reaches the
// runner (BatchSeq::lora), its digest keys the prefix cache, and the scheduler's active set of
// max_loras adapters (LRU, pinning, no head-of-line blocking) holds in every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/sched/engine.h"
#include "engine/sched/sim_testing.h"
#include "lora/adapter.h"

namespace strata::engine::sched {
namespace {

using sampler::SamplingParams;
using testing::GreedyReference;
using testing::MakePrompt;
using testing::Sim;
using AdapterPtr = std::shared_ptr<const lora::Adapter>;

AdapterPtr MakeAdapter(const std::string& name, const std::string& digest) {
  return lora::Adapter::FromParts(name, digest, {});
}

SubmitRequest Req(std::vector<int32_t> prompt, int max_tokens, AdapterPtr lora = nullptr,
                  Priority priority = Priority::kSilver) {
  SubmitRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = SamplingParams::Greedy();
  r.priority = priority;
  r.lora = std::move(lora);
  return r;
}

SchedulerConfig Cfg(int max_loras, int max_batched_tokens = 256, int max_num_seqs = 16) {
  SchedulerConfig c;
  c.max_batched_tokens = max_batched_tokens;
  c.max_num_seqs = max_num_seqs;
  (void)max_loras;  // the active set comes with the next change
  return c;
}

// Distinct adapters (by digest) in one recorded batch; the base model is not counted.
[[maybe_unused]] size_t DistinctAdapters(const FakeModelRunner::RecordedBatch& batch) {
  std::set<std::string> digests;
  for (const auto& s : batch)
    if (s.lora != nullptr) digests.insert(s.lora->digest());
  return digests.size();
}

TEST(EngineLora, AdapterReachesTheRunnerAndSelectsItsModel) {
  Sim sim(256, Cfg(4));
  const AdapterPtr a = MakeAdapter("a", "digest-a");
  const AdapterPtr b = MakeAdapter("b", "digest-b");
  const std::vector<int32_t> prompt = MakePrompt(40, 7);
  auto base_id = sim.Submit(Req(prompt, 12));
  auto a_id = sim.Submit(Req(prompt, 12, a));
  auto b_id = sim.Submit(Req(prompt, 12, b));
  ASSERT_TRUE(base_id.ok() && a_id.ok() && b_id.ok());
  sim.RunToCompletion();
  // Each request's tokens are its own model's (the fake model keys on the digest), batched
  // together.
  EXPECT_EQ(sim.results[*base_id][0].tokens, GreedyReference(sim.rcfg, prompt, 12));
  EXPECT_EQ(sim.results[*a_id][0].tokens, GreedyReference(sim.rcfg, prompt, 12, {}, a.get()));
  EXPECT_EQ(sim.results[*b_id][0].tokens, GreedyReference(sim.rcfg, prompt, 12, {}, b.get()));
  EXPECT_NE(sim.results[*a_id][0].tokens, sim.results[*base_id][0].tokens);
  EXPECT_NE(sim.results[*a_id][0].tokens, sim.results[*b_id][0].tokens);
  // The runner saw each request's own adapter object, all three in one step.
  bool mixed = false;
  for (const auto& batch : sim.runner->batches()) mixed |= batch.size() == 3;
  EXPECT_TRUE(mixed);
  for (const auto& batch : sim.runner->batches()) {
    for (const auto& s : batch)
      EXPECT_TRUE(s.lora == nullptr || s.lora == a.get() || s.lora == b.get());
  }
}

TEST(EngineLora, SubmitKeysTheSaltOnTheDigestNotTheCallersString) {
  Sim sim(256, Cfg(2));
  const std::vector<int32_t> prompt = MakePrompt(48, 3);
  SubmitRequest r = Req(prompt, 4, MakeAdapter("a", "digest-a"));
  r.adapter = "a";  // a name: overridden by the digest
  ASSERT_TRUE(sim.Submit(std::move(r)).ok());
  sim.RunToCompletion();
  const int64_t hits = sim.engine->Stats().prefix_hit_tokens;
  // The same prompt under the plain `adapter` fact equal to the digest shares the blocks.
  SubmitRequest same = Req(prompt, 4);
  same.adapter = "digest-a";
  same.lora = MakeAdapter("other-name", "digest-a");
  ASSERT_TRUE(sim.Submit(std::move(same)).ok());
  sim.RunToCompletion();
  EXPECT_GT(sim.engine->Stats().prefix_hit_tokens, hits);
}

TEST(EngineLora, PrefixCacheNeverCrossesAdapters) {
  Sim sim(256, Cfg(2));
  const std::vector<int32_t> prompt = MakePrompt(48, 5);
  const AdapterPtr a = MakeAdapter("a", "digest-a");
  const AdapterPtr b = MakeAdapter("b", "digest-b");
  const AdapterPtr a_reloaded = MakeAdapter("a", "digest-a2");  // same name, other content
  auto hits = [&] { return sim.engine->Stats().prefix_hit_tokens; };
  ASSERT_TRUE(sim.Submit(Req(prompt, 4, a)).ok());
  sim.RunToCompletion();
  ASSERT_EQ(hits(), 0);
  ASSERT_TRUE(sim.Submit(Req(prompt, 4, b)).ok());  // A then B: no hit
  sim.RunToCompletion();
  EXPECT_EQ(hits(), 0);
  ASSERT_TRUE(sim.Submit(Req(prompt, 4)).ok());  // the base model: no hit either
  sim.RunToCompletion();
  EXPECT_EQ(hits(), 0);
  auto reloaded = sim.Submit(Req(prompt, 4, a_reloaded));  // same name, new digest: no hit
  ASSERT_TRUE(reloaded.ok());
  sim.RunToCompletion();
  EXPECT_EQ(hits(), 0);
  EXPECT_EQ(sim.results[*reloaded][0].tokens,
            GreedyReference(sim.rcfg, prompt, 4, {}, a_reloaded.get()));
  auto again = sim.Submit(Req(prompt, 4, a));  // A then A: hits the full blocks
  ASSERT_TRUE(again.ok());
  sim.RunToCompletion();
  EXPECT_EQ(hits(), 32);  // two full blocks (MatchPrefix leaves the last token to compute)
  EXPECT_EQ(sim.results[*again][0].tokens, GreedyReference(sim.rcfg, prompt, 4, {}, a.get()));
}

TEST(EngineLora, AdapterWithoutDigestIsRefused) {
  Sim sim(64, Cfg(1));
  auto h = sim.engine->Submit(Req(MakePrompt(8, 1), 4, MakeAdapter("nameless", "")));
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("lora"), std::string::npos) << h.status().ToString();
}

}  // namespace
}  // namespace strata::engine::sched
