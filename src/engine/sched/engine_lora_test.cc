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

using testing::GreedyReference;
using testing::MakePrompt;
using testing::Sim;
using AdapterPtr = std::shared_ptr<const lora::Adapter>;

AdapterPtr MakeAdapter(const std::string& name, const std::string& digest) {
  return lora::Adapter::FromParts(name, digest, {});
}

SubmitRequest Req(std::vector<int32_t> prompt, int max_tokens, AdapterPtr lora = nullptr,
                  Priority priority = Priority::kSilver) {
  SubmitRequest r = testing::Req(std::move(prompt), max_tokens, priority);
  r.lora = std::move(lora);
  return r;
}

SchedulerConfig Cfg(int max_loras, int max_batched_tokens = 256, int max_num_seqs = 16) {
  SchedulerConfig c = testing::Cfg(max_batched_tokens, max_num_seqs);
  c.max_loras = max_loras;
  return c;
}

// Distinct adapters (by digest) in one recorded batch; the base model is not counted.
size_t DistinctAdapters(const FakeModelRunner::RecordedBatch& batch) {
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
  for (const auto& batch : sim.runner->batches())
    mixed |= batch.size() == 3 && DistinctAdapters(batch) == 2;
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

// The digests of the active slots, sorted ("" for free ones left out).
std::vector<std::string> ActiveDigests(const Sim& sim) {
  std::vector<std::string> d;
  for (const LoraSlot& s : sim.engine->scheduler().lora_slots())
    if (s.active()) d.push_back(s.digest);
  std::sort(d.begin(), d.end());
  return d;
}

// Whether request `id` has produced a token (or finished) by now.
bool Started(const Sim& sim, RequestId id) {
  auto it = sim.results.find(id);
  return it != sim.results.end() && !it->second.empty() &&
         !it->second.begin()->second.events.empty();
}

bool Finished(const Sim& sim, RequestId id) {
  auto it = sim.results.find(id);
  if (it == sim.results.end() || it->second.empty()) return false;
  return it->second.begin()->second.finish != FinishReason::kNone;
}

TEST(EngineLora, ConfigBoundsMaxLoras) {
  SchedulerConfig c;
  EXPECT_EQ(c.max_loras, 1);  // vLLM's --max-loras default
  EXPECT_TRUE(c.Validate().ok());
  c.max_loras = 0;
  EXPECT_NE(c.Validate().message().find("max_loras"), std::string::npos);
  c.max_loras = SchedulerConfig::kMaxLoras + 1;
  EXPECT_FALSE(c.Validate().ok());
  c.max_loras = SchedulerConfig::kMaxLoras;
  EXPECT_TRUE(c.Validate().ok());
}

// More adapters than slots, mixed with the base model and priorities: every step carries at most
// max_loras adapters (Sim checks it after each step, with the active-set invariants), slots are
// used to the full, and every request gets its own model's tokens.
void RunManyAdapters(int max_loras, int num_adapters, uint32_t seed) {
  Sim sim(512, Cfg(max_loras, 128, 8));
  std::vector<AdapterPtr> adapters;
  adapters.reserve(static_cast<size_t>(num_adapters));
  for (int i = 0; i < num_adapters; ++i)
    adapters.push_back(MakeAdapter("ad" + std::to_string(i), "digest-" + std::to_string(i)));
  struct Sent {
    RequestId id;
    std::vector<int32_t> prompt;
    int max_tokens;
    AdapterPtr lora;
  };
  std::vector<Sent> sent;
  sent.reserve(40);
  uint32_t x = seed;
  auto next = [&x] { return x = x * 1664525u + 1013904223u; };
  for (int i = 0; i < 40; ++i) {
    const int pick = static_cast<int>(next() % static_cast<uint32_t>(num_adapters + 1));
    AdapterPtr lora = pick == num_adapters ? nullptr : adapters[static_cast<size_t>(pick)];
    std::vector<int32_t> prompt = MakePrompt(1 + static_cast<int>(next() % 60), next());
    const int max_tokens = 1 + static_cast<int>(next() % 12);
    auto id = sim.Submit(Req(prompt, max_tokens, lora, static_cast<Priority>(next() % 3)));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    sent.push_back({*id, prompt, max_tokens, lora});
    if (i % 4 == 3) sim.Step();  // arrivals spread over the run
    if (::testing::Test::HasFatalFailure()) return;
  }
  sim.RunToCompletion();
  EXPECT_EQ(sim.max_step_loras, max_loras);
  for (const Sent& s : sent) {
    EXPECT_EQ(sim.results[s.id][0].tokens,
              GreedyReference(sim.rcfg, s.prompt, s.max_tokens, {}, s.lora.get()))
        << "request " << s.id;
  }
  for (const LoraSlot& slot : sim.engine->scheduler().lora_slots()) EXPECT_EQ(slot.pins, 0);
}

TEST(EngineLora, MaxLorasHoldsInEveryStepWithMoreAdaptersThanSlots) {
  RunManyAdapters(1, 5, 1);
  RunManyAdapters(2, 6, 2);
  RunManyAdapters(3, 8, 3);
}

TEST(EngineLora, LeastRecentlyUsedUnpinnedAdapterIsEvicted) {
  Sim sim(256, Cfg(2));
  const AdapterPtr a = MakeAdapter("a", "digest-a");
  const AdapterPtr b = MakeAdapter("b", "digest-b");
  const AdapterPtr c = MakeAdapter("c", "digest-c");
  auto run = [&](const AdapterPtr& l) {
    ASSERT_TRUE(sim.Submit(Req(MakePrompt(10, 1), 3, l)).ok());
    sim.RunToCompletion();
  };
  run(a);
  run(b);
  EXPECT_EQ(ActiveDigests(sim), (std::vector<std::string>{"digest-a", "digest-b"}));
  run(a);  // a is now more recently used than b
  run(c);  // evicts b, not a
  EXPECT_EQ(ActiveDigests(sim), (std::vector<std::string>{"digest-a", "digest-c"}));
  run(b);  // evicts a
  EXPECT_EQ(ActiveDigests(sim), (std::vector<std::string>{"digest-b", "digest-c"}));
}

TEST(EngineLora, RequestWaitsWhileEverySlotIsPinnedAndRunsWhenOneFrees) {
  Sim sim(256, Cfg(2));
  auto a = sim.Submit(Req(MakePrompt(10, 1), 20, MakeAdapter("a", "digest-a")));
  auto b = sim.Submit(Req(MakePrompt(10, 2), 6, MakeAdapter("b", "digest-b")));
  sim.Step();
  ASSERT_TRUE(Started(sim, *a) && Started(sim, *b));
  // c is gold, yet both slots are pinned: it waits, keeping its place.
  auto c = sim.Submit(Req(MakePrompt(10, 3), 4, MakeAdapter("c", "digest-c"), Priority::kGold));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  while (!Finished(sim, *b)) {
    sim.Step();
    ASSERT_FALSE(Started(sim, *c)) << "c ran while every slot was pinned";
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
  }
  sim.Step();  // b's slot is unpinned: c takes it at once, while a is still running
  EXPECT_TRUE(Started(sim, *c));
  EXPECT_FALSE(Finished(sim, *a));
  EXPECT_EQ(ActiveDigests(sim), (std::vector<std::string>{"digest-a", "digest-c"}));
  sim.RunToCompletion();
}

TEST(EngineLora, BaseModelAndActiveAdaptersAreNotBlockedByAWaitingAdapter) {
  Sim sim(256, Cfg(2));
  const AdapterPtr a = MakeAdapter("a", "digest-a");
  const AdapterPtr c = MakeAdapter("c", "digest-c");
  auto a1 = sim.Submit(Req(MakePrompt(10, 1), 30, a));
  auto c1 = sim.Submit(Req(MakePrompt(10, 2), 30, c));
  auto c2 = sim.Submit(Req(MakePrompt(10, 3), 30, c));
  sim.Step();
  ASSERT_TRUE(a1.ok() && c1.ok() && c2.ok());
  // Both slots pinned; the gold request for b waits and reserves the slot with the fewest running
  // requests (a's). Behind it, the base model and the other active adapter (c) still go; a new
  // request for a does not (that slot is draining for b).
  auto blocked =
      sim.Submit(Req(MakePrompt(10, 4), 4, MakeAdapter("b", "digest-b"), Priority::kGold));
  auto base = sim.Submit(Req(MakePrompt(10, 5), 4, nullptr, Priority::kBronze));
  auto c3 = sim.Submit(Req(MakePrompt(10, 6), 4, c, Priority::kBronze));
  auto a2 = sim.Submit(Req(MakePrompt(10, 7), 4, a, Priority::kBronze));
  ASSERT_TRUE(blocked.ok() && base.ok() && c3.ok() && a2.ok());
  sim.Step();
  EXPECT_FALSE(Started(sim, *blocked));
  EXPECT_TRUE(Started(sim, *base)) << "a base-model request waited behind an adapter request";
  EXPECT_TRUE(Started(sim, *c3)) << "an active adapter's request waited behind another adapter";
  EXPECT_FALSE(Started(sim, *a2)) << "a request renewed the pin of the slot b is waiting for";
  sim.RunToCompletion();
  EXPECT_TRUE(Finished(sim, *blocked) && Finished(sim, *a2));
}

TEST(EngineLora, BusyAdapterCannotStarveAWaitingOne) {
  // A stream of requests for the active adapter `a` keeps it pinned; the waiting request for `b`
  // reserves that slot, so the stream behind it cannot renew the pin and b gets the slot.
  Sim sim(1024, Cfg(1, 256, 16));
  const AdapterPtr a = MakeAdapter("a", "digest-a");
  ASSERT_TRUE(sim.Submit(Req(MakePrompt(10, 1), 8, a)).ok());
  sim.Step();
  auto b = sim.Submit(Req(MakePrompt(10, 2), 4, MakeAdapter("b", "digest-b")));
  ASSERT_TRUE(b.ok());
  int steps = 0;
  for (; steps < 200 && !Started(sim, *b); ++steps) {
    sim.clock.Advance(std::chrono::milliseconds(1));  // each newcomer arrives after b
    ASSERT_TRUE(sim.Submit(Req(MakePrompt(10, 100 + static_cast<uint32_t>(steps)), 8, a)).ok());
    sim.Step();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
  }
  EXPECT_TRUE(Started(sim, *b)) << "b starved behind a busy adapter";
  EXPECT_LE(steps, 10);  // the first a finishes within its 8 tokens
  sim.RunToCompletion();
}

TEST(EngineLora, PreemptionUnpinsTheAdapter) {
  // A small pool: the gold base request preempts the bronze adapter-a request, which unpins a's
  // slot, so the silver request for b takes it in the same step.
  Sim sim(8, Cfg(1));
  auto a = sim.Submit(Req(MakePrompt(30, 1), 30, MakeAdapter("a", "digest-a"), Priority::kBronze));
  ASSERT_TRUE(a.ok());
  for (int i = 0; i < 4; ++i) sim.Step();
  auto gold = sim.Submit(Req(MakePrompt(90, 2), 2, nullptr, Priority::kGold));
  auto b = sim.Submit(Req(MakePrompt(4, 3), 2, MakeAdapter("b", "digest-b")));
  ASSERT_TRUE(gold.ok() && b.ok());
  const int64_t before = sim.engine->Stats().preemptions;
  sim.Step();
  EXPECT_GT(sim.engine->Stats().preemptions, before);
  EXPECT_TRUE(Started(sim, *gold));
  EXPECT_TRUE(Started(sim, *b)) << "the preempted request kept its adapter pinned";
  EXPECT_EQ(ActiveDigests(sim), (std::vector<std::string>{"digest-b"}));
  sim.RunToCompletion();
  EXPECT_TRUE(Finished(sim, *a));
}

TEST(EngineLora, CancelAndEmbeddingsUnpinTheirAdapter) {
  Sim sim(256, Cfg(1));
  auto a = sim.Submit(Req(MakePrompt(10, 1), 50, MakeAdapter("a", "digest-a")));
  sim.Step();
  auto b = sim.Submit(Req(MakePrompt(10, 2), 3, MakeAdapter("b", "digest-b")));
  ASSERT_TRUE(a.ok() && b.ok());
  sim.Step();
  ASSERT_FALSE(Started(sim, *b));
  sim.engine->Cancel(*a);  // a running request's cancel unpins its slot
  sim.Step();
  EXPECT_TRUE(Started(sim, *b));
  sim.RunToCompletion();
  // An embedding request pins the slot while it runs and unpins it when it finishes.
  SubmitRequest e = Req(MakePrompt(40, 3), 1, MakeAdapter("c", "digest-c"));
  e.kind = RequestKind::kEmbed;
  auto emb = sim.Submit(std::move(e));
  ASSERT_TRUE(emb.ok()) << emb.status().ToString();
  sim.RunToCompletion();
  EXPECT_TRUE(Finished(sim, *emb));
  EXPECT_EQ(ActiveDigests(sim), (std::vector<std::string>{"digest-c"}));
  EXPECT_EQ(sim.engine->scheduler().lora_slots()[0].pins, 0);
  bool embedded_with_c = false;
  for (const auto& batch : sim.runner->batches())
    for (const auto& rs : batch) embedded_with_c |= rs.want_hidden && rs.lora != nullptr;
  EXPECT_TRUE(embedded_with_c);
}

TEST(EngineLora, TwoNamesOfOneDigestShareASlotAndTheirBlocks) {
  Sim sim(256, Cfg(1));
  const std::vector<int32_t> prompt = MakePrompt(48, 9);
  auto x = sim.Submit(Req(prompt, 4, MakeAdapter("x", "digest-same")));
  sim.RunToCompletion();
  auto y = sim.Submit(Req(prompt, 4, MakeAdapter("y", "digest-same")));
  auto y2 = sim.Submit(Req(MakePrompt(20, 10), 4, MakeAdapter("x", "digest-same")));
  sim.Step();
  ASSERT_TRUE(x.ok() && y.ok() && y2.ok());
  EXPECT_TRUE(Started(sim, *y) && Started(sim, *y2));  // one slot, both run
  EXPECT_EQ(sim.engine->Stats().prefix_hit_tokens, 32);
  sim.RunToCompletion();
  EXPECT_EQ(sim.results[*x][0].tokens, sim.results[*y][0].tokens);
  const LoraSlot& slot = sim.engine->scheduler().lora_slots()[0];
  EXPECT_EQ(slot.digest, "digest-same");
  std::vector<std::string> names = slot.names;
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"x", "y"}));
}

TEST(EngineLora, StatsListActiveRunningAndWaitingAdaptersByName) {
  Sim sim(256, Cfg(2));
  EngineStats st = sim.engine->Stats();
  EXPECT_EQ(st.max_loras, 2);
  EXPECT_TRUE(st.active_loras.empty() && st.running_loras.empty() && st.waiting_loras.empty());
  EXPECT_TRUE(st.lora_requests.empty());
  const AdapterPtr a = MakeAdapter("a", "digest-a");
  const AdapterPtr b = MakeAdapter("b", "digest-b");
  const AdapterPtr c = MakeAdapter("c", "digest-c");
  const AdapterPtr b_alias = MakeAdapter("b-alias", "digest-b");  // one slot with b
  auto b1 = sim.Submit(Req(MakePrompt(10, 1), 20, b));
  auto a1 = sim.Submit(Req(MakePrompt(10, 2), 20, a));
  auto a2 = sim.Submit(Req(MakePrompt(10, 3), 20, a));
  auto b2 = sim.Submit(Req(MakePrompt(10, 4), 20, b_alias));
  auto c1 = sim.Submit(Req(MakePrompt(10, 5), 2, c));
  auto base = sim.Submit(Req(MakePrompt(10, 6), 2));
  ASSERT_TRUE(b1.ok() && a1.ok() && a2.ok() && b2.ok() && c1.ok() && base.ok());
  st = sim.engine->Stats();  // before any step: nothing drained yet
  EXPECT_TRUE(st.waiting_loras.empty());
  sim.Step();
  st = sim.engine->Stats();
  using Names = std::vector<std::string>;
  EXPECT_EQ(st.active_loras, (Names{"a", "b", "b-alias"}));
  EXPECT_EQ(st.running_loras, (Names{"a", "b", "b-alias"}));
  EXPECT_EQ(st.waiting_loras, (Names{"c"}));
  EXPECT_EQ(st.running_requests, 5);
  sim.engine->Cancel(*c1);
  sim.RunToCompletion();
  st = sim.engine->Stats();
  EXPECT_EQ(st.active_loras, (Names{"a", "b", "b-alias"}));  // idle slots stay active
  EXPECT_TRUE(st.running_loras.empty() && st.waiting_loras.empty());
  EXPECT_EQ(st.lora_requests, (std::vector<std::pair<std::string, int64_t>>{
                                  {"a", 2}, {"b", 1}, {"b-alias", 1}, {"c", 1}}));
  ASSERT_TRUE(sim.Submit(Req(MakePrompt(10, 7), 2, c)).ok());
  sim.RunToCompletion();
  st = sim.engine->Stats();
  EXPECT_EQ(st.active_loras, (Names{"b", "b-alias", "c"}));  // a was the least recently used
  EXPECT_EQ(st.lora_requests.back(), (std::pair<std::string, int64_t>{"c", 2}));
}

}  // namespace
}  // namespace strata::engine::sched
