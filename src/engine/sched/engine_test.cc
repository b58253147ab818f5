// Deterministic simulation tests of the engine (fake runner, fake clock, Step()-driven), plus one
// end-to-end test with the engine thread.
#include "engine/sched/engine.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <thread>

#include "cachekey/block_hash.h"
#include "engine/sched/sim_testing.h"

namespace strata::engine::sched {
namespace {

using runner::BatchSeq;
using runner::ModelRunner;
using sampler::SamplingParams;
using testing::Cfg;
using testing::Completion;
using testing::GreedyReference;
using testing::MakePrompt;
using testing::Req;
using testing::Sim;

// A mixed random workload: priorities, prompt lengths, temperatures, penalties, n, stop ids.
std::vector<SubmitRequest> Workload(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<SubmitRequest> w;
  for (int i = 0; i < count; ++i) {
    SubmitRequest r = Req(MakePrompt(1 + static_cast<int>(rng() % 90), rng()),
                          1 + static_cast<int>(rng() % 40), static_cast<Priority>(rng() % 3));
    if (rng() % 2) {
      r.sampling = SamplingParams();
      r.sampling.temperature = 1.0f;
      r.sampling.seed = rng();
      r.sampling.repetition_penalty = 1.1f;
    }
    if (rng() % 4 == 0) r.n = 1 + static_cast<int>(rng() % 3);
    if (rng() % 3 == 0) r.eog_ids = {static_cast<int32_t>(rng() % 64)};
    w.push_back(std::move(r));
  }
  return w;
}

std::map<RequestId, std::map<int, Completion>> RunWorkload(int num_blocks,
                                                           const std::vector<SubmitRequest>& w,
                                                           int64_t* preemptions,
                                                           SchedulerConfig sc = Cfg(256, 8)) {
  Sim sim(num_blocks, sc);
  for (const SubmitRequest& r : w) {
    auto id = sim.Submit(r);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
  }
  sim.RunToCompletion();
  if (preemptions) *preemptions = sim.engine->Stats().preemptions;
  return sim.results;
}

TEST(EngineSim, RandomWorkloadKeepsInvariantsAndFreesEverything) {
  auto w = Workload(40, 1);
  int64_t pre = 0;
  auto res = RunWorkload(64, w, &pre);
  ASSERT_EQ(res.size(), w.size());
  size_t i = 0;
  for (auto& [id, comps] : res) {
    const SubmitRequest& r = w[i++];
    ASSERT_EQ(static_cast<int>(comps.size()), r.n) << "request " << id;
    for (auto& [idx, c] : comps) {
      EXPECT_NE(c.finish, FinishReason::kNone);
      EXPECT_LE(static_cast<int>(c.tokens.size()), r.max_tokens);
      if (c.finish == FinishReason::kLength) {
        EXPECT_EQ(static_cast<int>(c.tokens.size()), r.max_tokens);
      }
      if (c.finish == FinishReason::kStop) {
        EXPECT_EQ(c.tokens.back(), r.eog_ids.at(0));
      }
    }
  }
}

TEST(EngineSim, PreemptedRequestsProduceTheSameTokens) {
  auto w = Workload(40, 2);
  int64_t pre_big = -1, pre_small = -1;
  auto big = RunWorkload(4096, w, &pre_big);
  auto small = RunWorkload(24, w, &pre_small);  // 24 blocks of 16: constant preemption
  EXPECT_EQ(pre_big, 0);
  EXPECT_GE(pre_small, 5);
  ASSERT_EQ(big.size(), small.size());
  for (auto& [id, comps] : big) {
    for (auto& [idx, c] : comps) {
      EXPECT_EQ(c.tokens, small[id][idx].tokens) << "request " << id << " completion " << idx;
      EXPECT_EQ(c.finish, small[id][idx].finish);
    }
  }
}

TEST(EngineSim, GreedyTokensMatchIndependentReferenceAloneAndBatched) {
  Sim sim(512, Cfg(64, 16));
  std::vector<std::vector<int32_t>> prompts;
  prompts.reserve(16);
  for (int i = 0; i < 16; ++i) prompts.push_back(MakePrompt(5 + 11 * i, 100 + i));
  for (auto& p : prompts) ASSERT_TRUE(sim.Submit(Req(p, 20)).ok());
  sim.RunToCompletion();
  int i = 0;
  for (auto& [id, comps] : sim.results) {
    EXPECT_EQ(comps[0].tokens, GreedyReference(sim.rcfg, prompts[static_cast<size_t>(i)], 20)) << i;
    ++i;
  }
  // Alone.
  Sim alone(512, Cfg(64, 16));
  ASSERT_TRUE(alone.Submit(Req(prompts[7], 20)).ok());
  alone.RunToCompletion();
  EXPECT_EQ(alone.results.begin()->second[0].tokens, GreedyReference(sim.rcfg, prompts[7], 20));
}

TEST(EngineSim, ChunkedPrefillMixesWithDecodes) {
  Sim sim(256, Cfg(32, 8));
  auto a = sim.Submit(Req(MakePrompt(10, 1), 30));
  ASSERT_TRUE(a.ok());
  sim.Step();  // a's prompt (10 tokens) + first token
  auto b = sim.Submit(Req(MakePrompt(100, 2), 5));
  ASSERT_TRUE(b.ok());
  std::vector<int> b_chunks;
  for (int s = 0; s < 4; ++s) {
    sim.Step();
    const auto& batch = sim.runner->batches().back();
    ASSERT_EQ(batch.size(), 2u);
    EXPECT_EQ(batch[0].num_tokens, 1);  // a's decode comes first
    b_chunks.push_back(batch[1].num_tokens);
    EXPECT_EQ(batch[1].want_logits, s == 3);
  }
  EXPECT_EQ(b_chunks, (std::vector<int>{31, 31, 31, 7}));
  sim.RunToCompletion();
  EXPECT_EQ(sim.results[*b][0].tokens, GreedyReference(sim.rcfg, MakePrompt(100, 2), 5));
}

// With max_prefill_tokens_with_decodes, a long prompt arriving while another request decodes is
// fed in chunks of at most the cap in every step that carries a decode, the full budget once no one
// decodes; the tokens are unchanged.
TEST(EngineSim, PrefillCapBoundsPromptTokensInStepsWithDecodes) {
  SchedulerConfig sc = Cfg(64, 8);
  sc.max_prefill_tokens_with_decodes = 8;
  Sim sim(256, sc);
  auto a = sim.Submit(Req(MakePrompt(10, 1), 12));
  ASSERT_TRUE(a.ok());
  sim.Step();  // a's prompt alone: no decode in the step, so no cap (10 tokens)
  EXPECT_EQ(sim.runner->batches().back().size(), 1u);
  EXPECT_EQ(sim.runner->batches().back()[0].num_tokens, 10);
  const int64_t a_seq = sim.runner->batches().back()[0].seq_id;
  auto b = sim.Submit(Req(MakePrompt(40, 2), 3));
  ASSERT_TRUE(b.ok());
  std::vector<int> b_chunks;
  while (sim.engine->HasWork()) {
    sim.Step();
    const auto& batch = sim.runner->batches().back();
    int decodes = 0, prompt = 0;
    for (const auto& e : batch) {
      if (e.start_pos >= (e.seq_id == a_seq ? 10 : 40)) {  // past its prompt: a decode
        ++decodes;
      } else {
        prompt += e.num_tokens;
      }
    }
    if (decodes > 0) {
      EXPECT_LE(prompt, 8) << "step " << sim.steps;
    }
    if (batch.size() == 2 && batch[1].num_tokens > 1) b_chunks.push_back(batch[1].num_tokens);
  }
  EXPECT_EQ(b_chunks,
            (std::vector<int>{8, 8, 8, 8, 8}));  // while a decodes (a needs 11 more steps)
  EXPECT_EQ(sim.results[*a][0].tokens, GreedyReference(sim.rcfg, MakePrompt(10, 1), 12));
  EXPECT_EQ(sim.results[*b][0].tokens, GreedyReference(sim.rcfg, MakePrompt(40, 2), 3));

  // Without decodes in flight the whole budget goes to prompts.
  Sim idle(256, sc);
  ASSERT_TRUE(idle.Submit(Req(MakePrompt(40, 3), 2)).ok());
  idle.Step();
  EXPECT_EQ(idle.runner->batches().back()[0].num_tokens, 40);

  sc.max_prefill_tokens_with_decodes = -1;
  EXPECT_FALSE(sc.Validate().ok());
}

// A runner whose forward pass takes 1 ms of fake time per fed token.
class TimedRunner final : public ModelRunner {
 public:
  TimedRunner(FakeModelRunner* inner, FakeClock* clock) : inner_(inner), clock_(clock) {}
  int n_vocab() const override { return inner_->n_vocab(); }
  Status Run(std::span<const BatchSeq> batch, std::vector<float>* logits,
             std::vector<float>* hidden) override {
    for (const BatchSeq& b : batch) clock_->Advance(std::chrono::milliseconds(b.tokens.size()));
    return inner_->Run(batch, logits, hidden);
  }

 private:
  FakeModelRunner* inner_;
  FakeClock* clock_;
};

TEST(EngineSim, DecodeStatsCountOnlyStepsWithoutPromptTokens) {
  FakeClock clock;
  FakeRunnerConfig rcfg;
  rcfg.num_blocks = 64;
  FakeModelRunner fake(rcfg);
  TimedRunner runner(&fake, &clock);
  kv::KvManagerConfig kcfg;
  kcfg.num_blocks = 64;
  auto e = Engine::Create(&runner, kcfg, Cfg(32, 8), &clock, nullptr);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  Engine& engine = **e;
  ASSERT_TRUE(engine.Submit(Req(MakePrompt(10, 1), 6)).ok());
  ASSERT_TRUE(engine.Step().ok());  // a: 10 prompt tokens, token 1
  ASSERT_TRUE(engine.Submit(Req(MakePrompt(40, 2), 3)).ok());
  ASSERT_TRUE(engine.Step().ok());  // a: decode (token 2) + b: prompt chunk of 31
  ASSERT_TRUE(engine.Step().ok());  // a: decode (token 3) + b: last 9 prompt tokens, token 1
  EXPECT_EQ(engine.Stats().decode_steps, 0);
  while (engine.HasWork()) ASSERT_TRUE(engine.Step().ok());
  // Then a: tokens 4, 5, 6 and b: tokens 2, 3 in three decode-only steps of 2, 2 and 1 sequences.
  const EngineStats st = engine.Stats();
  EXPECT_EQ(st.decode_steps, 3);
  EXPECT_EQ(st.decode_tokens, 5);
  EXPECT_NEAR(st.decode_seconds, 0.005, 1e-9);
  EXPECT_EQ(st.generated_tokens, 9);
}

TEST(EngineSim, PrefixCacheSkipsCachedBlocks) {
  Sim sim(256, Cfg());
  std::vector<int32_t> shared = MakePrompt(50, 9);
  ASSERT_TRUE(sim.Submit(Req(shared, 4)).ok());
  sim.RunToCompletion();
  std::vector<int32_t> p2 = shared;
  p2.resize(48);
  for (int i = 0; i < 10; ++i) p2.push_back(i);
  auto id = sim.Submit(Req(p2, 6));
  ASSERT_TRUE(id.ok());
  const auto before = sim.engine->Stats();
  sim.RunToCompletion();
  const auto after = sim.engine->Stats();
  EXPECT_EQ(after.prefix_hit_tokens - before.prefix_hit_tokens,
            48);  // 3 full blocks of the shared prefix
  // The first chunk of the second request started at position 48.
  bool found = false;
  for (const auto& batch : sim.runner->batches())
    for (const auto& s : batch)
      if (s.start_pos == 48 && s.num_tokens == 10) found = true;
  EXPECT_TRUE(found);
  EXPECT_EQ(sim.results[*id][0].tokens, GreedyReference(sim.rcfg, p2, 6));

  // A different salt (another tenant) gets no hit.
  SubmitRequest r3 = Req(p2, 2);
  r3.tenant = "another";
  ASSERT_TRUE(sim.Submit(r3).ok());
  const auto b3 = sim.engine->Stats();
  sim.RunToCompletion();
  EXPECT_EQ(sim.engine->Stats().prefix_hit_tokens, b3.prefix_hit_tokens);
}

// Prompt tokens fed to the runner (positions below each request's prompt length).
int64_t PrefillTokens(const Sim& sim, int prompt_len) {
  int64_t n = 0;
  for (const auto& batch : sim.runner->batches())
    for (const auto& s : batch)
      if (s.start_pos < prompt_len) n += std::min(s.num_tokens, prompt_len - s.start_pos);
  return n;
}

std::vector<std::vector<int32_t>> SharedPrefixPrompts(int count, int prefix_len, int suffix_len) {
  const std::vector<int32_t> prefix = MakePrompt(prefix_len, 77);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> p = prefix;
    const std::vector<int32_t> suffix = MakePrompt(suffix_len, 1000 + static_cast<uint32_t>(i));
    p.insert(p.end(), suffix.begin(), suffix.end());
    p[static_cast<size_t>(prefix_len)] =
        static_cast<int32_t>(i);  // suffixes surely differ in their first token
    prompts.push_back(std::move(p));
  }
  return prompts;
}

TEST(EngineSim, SimultaneousSharedPrefixIsComputedOnce) {
  const auto prompts = SharedPrefixPrompts(8, 1024, 32);
  std::map<RequestId, std::map<int, Completion>> res[2];
  int64_t prefill[2] = {0, 0};
  for (int cache = 0; cache < 2; ++cache) {
    Sim sim(1024, Cfg(2048, 16), 16, /*prefix_cache=*/cache == 1);
    for (const auto& p : prompts) ASSERT_TRUE(sim.Submit(Req(p, 8)).ok());
    sim.RunToCompletion();  // checks KV + in-flight invariants after every step
    prefill[cache] = PrefillTokens(sim, 1056);
    res[cache] = sim.results;
    if (cache == 1) {
      EXPECT_EQ(sim.engine->scheduler().num_deferrals(), 7);  // once each, in the first step
      EXPECT_EQ(sim.engine->Stats().prefix_hit_tokens, 7 * 1024);
    }
    int i = 0;
    for (auto& [id, comps] : sim.results)
      EXPECT_EQ(comps[0].tokens, GreedyReference(sim.rcfg, prompts[static_cast<size_t>(i++)], 8))
          << id;
  }
  EXPECT_EQ(prefill[0], 8 * 1056);
  EXPECT_EQ(prefill[1], 1024 + 8 * 32);  // the prefix once (64 full blocks), then each suffix
  ASSERT_EQ(res[0].size(), res[1].size());
  for (auto& [id, comps] : res[0]) EXPECT_EQ(comps[0].tokens, res[1][id][0].tokens) << id;
}

TEST(EngineSim, DeferredRequestIsAdmittedWhenItsProviderIsCancelled) {
  const auto prompts = SharedPrefixPrompts(2, 256, 16);
  Sim sim(256, Cfg(64, 16));  // the 272-token prompt takes 5 steps
  auto a = sim.Submit(Req(prompts[0], 4, Priority::kSilver));
  ASSERT_TRUE(a.ok());
  sim.Step();
  // b ranks first but a is computing its next uncached block: deferred while a runs.
  auto b = sim.Submit(Req(prompts[1], 4, Priority::kGold));
  ASSERT_TRUE(b.ok());
  sim.Step();
  sim.Step();
  EXPECT_EQ(sim.engine->scheduler().Find(*b)->phase, RequestState::Phase::kWaiting);
  EXPECT_EQ(sim.engine->scheduler().num_deferrals(), 2);
  sim.engine->Cancel(*a);
  sim.Step();  // a's blocks freed at the start of this step; b admitted in it
  EXPECT_EQ(sim.engine->scheduler().Find(*b)->phase, RequestState::Phase::kRunning);
  EXPECT_EQ(sim.engine->scheduler().num_deferrals(), 2);
  sim.RunToCompletion();
  EXPECT_EQ(sim.results[*a][0].finish, FinishReason::kCancelled);
  EXPECT_EQ(sim.results[*b][0].tokens, GreedyReference(sim.rcfg, prompts[1], 4));
  EXPECT_EQ(sim.engine->Stats().prefix_hit_tokens,
            192);  // the three chunks a committed (12 blocks)
}

TEST(EngineSim, DifferentSaltIsNotDeferred) {
  const auto prompts = SharedPrefixPrompts(2, 256, 16);
  Sim sim(256, Cfg(2048, 16));
  SubmitRequest ra = Req(prompts[0], 4), rb = Req(prompts[1], 4);
  ra.tenant = "a";
  rb.tenant = "b";
  ASSERT_TRUE(sim.Submit(ra).ok());
  ASSERT_TRUE(sim.Submit(rb).ok());
  sim.Step();
  EXPECT_EQ(sim.engine->scheduler().num_running(), 2);  // both admitted at once
  sim.RunToCompletion();
  EXPECT_EQ(sim.engine->scheduler().num_deferrals(), 0);
  EXPECT_EQ(PrefillTokens(sim, 272), 2 * 272);
}

TEST(EngineSim, CancellationFreesBlocksWithinOneStep) {
  Sim sim(256, Cfg());
  auto a = sim.Submit(Req(MakePrompt(40, 3), 100));
  auto b = sim.Submit(Req(MakePrompt(30, 4), 100));
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 5; ++i) sim.Step();
  const int used_before = sim.engine->kv().Stats().used_blocks;
  sim.engine->Cancel(*a);
  sim.Step();
  const int used_after = sim.engine->kv().Stats().used_blocks;
  EXPECT_EQ(used_before - used_after,
            3);  // a held ceil(45 / 16) = 3 blocks (b grew by none: 35 -> 36)
  EXPECT_EQ(sim.results[*a][0].finish, FinishReason::kCancelled);
  EXPECT_TRUE(sim.streams[*a]->complete());
  // Cancelling a waiting request works too, and unknown ids are ignored.
  auto c = sim.Submit(Req(MakePrompt(30, 5), 10));
  sim.engine->Cancel(*c);
  sim.engine->Cancel(12345);
  sim.Step();
  EXPECT_EQ(sim.results[*c][0].finish, FinishReason::kCancelled);
  sim.engine->Cancel(*b);
  sim.RunToCompletion();
}

TEST(EngineSim, AdmissionBoundIsResourceExhausted) {
  SchedulerConfig sc = Cfg();
  sc.max_queued_requests = 3;
  sc.max_queued_prompt_tokens = 100;
  Sim sim(256, sc);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(sim.Submit(Req(MakePrompt(10, i), 2)).ok());
  auto over = sim.Submit(Req(MakePrompt(10, 9), 2));
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("max_queued_requests"), std::string::npos);
  sim.Step();  // all three start: the queue empties
  auto big = sim.Submit(Req(MakePrompt(101, 9), 2));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("max_queued_prompt_tokens"), std::string::npos);
  EXPECT_TRUE(sim.Submit(Req(MakePrompt(100, 9), 2)).ok());
  sim.RunToCompletion();
}

TEST(EngineSim, WaitingRequestPastItsDeadlineEndsWithDeadlineExceeded) {
  Sim sim(256, Cfg(2048, 1));  // one seat: the second request waits
  auto running = sim.Submit(Req(MakePrompt(10, 1), 20, Priority::kGold));  // ahead of any deadline
  SubmitRequest late = Req(MakePrompt(10, 2), 4);
  late.deadline = sim.clock.Now() + std::chrono::milliseconds(25);
  auto waiting = sim.Submit(late);
  SubmitRequest early_admit = Req(MakePrompt(10, 3), 4, Priority::kBronze);
  ASSERT_TRUE(running.ok() && waiting.ok());
  sim.Step();  // t = 0: `running` admitted; `waiting` waits
  sim.Step();  // t = 10 ms
  sim.Step();  // t = 20 ms
  EXPECT_EQ(sim.results[*waiting][0].finish, FinishReason::kNone);
  sim.Step();  // t = 30 ms: past the deadline before this step's admission
  const Completion& c = sim.results[*waiting][0];
  EXPECT_EQ(c.finish, FinishReason::kError);
  EXPECT_TRUE(c.tokens.empty());
  ASSERT_FALSE(c.events.empty());
  EXPECT_EQ(c.events.back().error.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(c.events.back().error.message().find("deadline_ms"), std::string::npos);
  EXPECT_TRUE(sim.streams[*waiting]->complete());
  EXPECT_EQ(sim.engine->Stats().deadline_expired, 1);
  EXPECT_EQ(sim.engine->Stats().queued_requests, 0);
  // A request admitted before its deadline runs to the end.
  sim.RunToCompletion();
  early_admit.deadline = sim.clock.Now() + std::chrono::milliseconds(1);
  auto admitted = sim.Submit(early_admit);
  ASSERT_TRUE(admitted.ok());
  sim.RunToCompletion();
  EXPECT_EQ(sim.results[*running][0].finish, FinishReason::kLength);
  EXPECT_EQ(sim.results[*admitted][0].finish, FinishReason::kLength);
  EXPECT_EQ(sim.engine->Stats().deadline_expired, 1);
}

TEST(EngineSim, FullQueueGoldDisplacesTheNewestWaitingLowerClass) {
  SchedulerConfig sc = Cfg();
  sc.max_queued_requests = 3;
  Sim sim(256, sc);
  auto bronze_old = sim.Submit(Req(MakePrompt(10, 1), 2, Priority::kBronze));
  auto bronze_new = sim.Submit(Req(MakePrompt(10, 2), 2, Priority::kBronze));
  auto silver = sim.Submit(Req(MakePrompt(10, 3), 2, Priority::kSilver));
  ASSERT_TRUE(bronze_old.ok() && bronze_new.ok() && silver.ok());
  // Bronze cannot displace bronze (same class): refused as before.
  auto bronze_over = sim.Submit(Req(MakePrompt(10, 4), 2, Priority::kBronze));
  ASSERT_FALSE(bronze_over.ok());
  EXPECT_EQ(bronze_over.status().code(), StatusCode::kResourceExhausted);
  // Gold displaces the newest bronze; then silver displaces the remaining bronze.
  auto gold = sim.Submit(Req(MakePrompt(10, 5), 2, Priority::kGold));
  ASSERT_TRUE(gold.ok()) << gold.status().ToString();
  auto silver2 = sim.Submit(Req(MakePrompt(10, 6), 2, Priority::kSilver));
  ASSERT_TRUE(silver2.ok()) << silver2.status().ToString();
  EXPECT_EQ(sim.engine->Stats().queued_requests, 0);  // stats as of the last step (none yet)
  // Nothing lower than the queued silvers and gold is left for a third silver.
  EXPECT_FALSE(sim.Submit(Req(MakePrompt(10, 7), 2, Priority::kSilver)).ok());
  sim.Step();
  for (RequestId id : {*bronze_new, *bronze_old}) {
    const Completion& c = sim.results[id][0];
    EXPECT_EQ(c.finish, FinishReason::kError) << id;
    EXPECT_TRUE(c.tokens.empty()) << id;
    ASSERT_FALSE(c.events.empty());
    EXPECT_EQ(c.events.back().error.code(), StatusCode::kResourceExhausted);
    EXPECT_NE(c.events.back().error.message().find("displaced"), std::string::npos);
  }
  EXPECT_EQ(sim.engine->Stats().displaced, 2);
  sim.RunToCompletion();
  for (RequestId id : {*silver, *gold, *silver2})
    EXPECT_EQ(sim.results[id][0].finish, FinishReason::kLength) << id;
}

TEST(EngineSim, DisplacementNeverEndsAStartedRequest) {
  SchedulerConfig sc = Cfg(2048, 1);  // one seat
  sc.max_queued_requests = 1;
  Sim sim(256, sc);
  auto running = sim.Submit(Req(MakePrompt(10, 1), 10, Priority::kBronze));
  ASSERT_TRUE(running.ok());
  sim.Step();  // admitted: no longer queued
  auto waiting = sim.Submit(Req(MakePrompt(10, 2), 2, Priority::kBronze));
  ASSERT_TRUE(waiting.ok());
  auto gold = sim.Submit(Req(MakePrompt(10, 3), 2, Priority::kGold));
  ASSERT_TRUE(gold.ok());  // displaces the waiting bronze, not the running one
  sim.RunToCompletion();
  EXPECT_EQ(sim.results[*running][0].finish, FinishReason::kLength);
  EXPECT_EQ(sim.results[*waiting][0].finish, FinishReason::kError);
  EXPECT_EQ(sim.results[*gold][0].finish, FinishReason::kLength);
  EXPECT_EQ(sim.engine->Stats().displaced, 1);
  // With only the running bronze left, a gold at a full queue of golds is refused.
  SchedulerConfig sc2 = Cfg(2048, 1);
  sc2.max_queued_requests = 1;
  Sim sim2(256, sc2);
  ASSERT_TRUE(sim2.Submit(Req(MakePrompt(10, 1), 2, Priority::kGold)).ok());
  EXPECT_FALSE(sim2.Submit(Req(MakePrompt(10, 2), 2, Priority::kGold)).ok());
  sim2.RunToCompletion();
}

TEST(EngineSim, GoldArrivingAtFullEngineGetsFirstTokenBeforeBronzeDecodes) {
  Sim sim(256, Cfg(2048, 4));
  std::vector<RequestId> bronze;
  bronze.reserve(4);
  for (int i = 0; i < 4; ++i)
    bronze.push_back(*sim.Submit(Req(MakePrompt(20, i), 200, Priority::kBronze)));
  for (int i = 0; i < 3; ++i) sim.Step();
  for (RequestId id : bronze) ASSERT_EQ(sim.results[id][0].tokens.size(), 3u);
  auto silver = sim.Submit(Req(MakePrompt(20, 50), 5, Priority::kSilver));
  auto gold = sim.Submit(Req(MakePrompt(20, 51), 5, Priority::kGold));
  sim.Step();
  EXPECT_EQ(sim.results[*gold][0].tokens.size(), 1u) << "gold's first token in the very next step";
  EXPECT_EQ(sim.results[*silver][0].tokens.size(), 1u);
  EXPECT_EQ(sim.engine->Stats().preemptions, 2);  // the two latest bronze requests
  EXPECT_EQ(sim.results[bronze[3]][0].tokens.size(), 3u);
  EXPECT_EQ(sim.results[bronze[2]][0].tokens.size(), 3u);
  EXPECT_EQ(sim.results[bronze[0]][0].tokens.size(), 4u);
  sim.RunToCompletion();
  // Preempted bronze requests still finish with the reference tokens.
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(sim.results[bronze[static_cast<size_t>(i)]][0].tokens,
              GreedyReference(sim.rcfg, MakePrompt(20, i), 200));
}

// Sustained gold flood: a gold request arrives every step, more than the engine can serve. A bronze
// request must still finish within a bound thanks to aging; without aging it starves.
int BronzeFinishStep(double aging_s, int max_steps) {
  SchedulerConfig sc = Cfg(2048, 2);
  sc.aging_s = aging_s;
  sc.max_queued_requests = 100000;
  sc.max_queued_prompt_tokens = 1 << 30;
  Sim sim(256, sc);
  sim.step_time = std::chrono::milliseconds(100);
  auto bronze = sim.Submit(Req(MakePrompt(8, 7), 10, Priority::kBronze));
  for (int s = 0; s < max_steps; ++s) {
    for (int k = 0; k < 2; ++k)
      EXPECT_TRUE(sim.Submit(Req(MakePrompt(8, 1000 + 2 * s + k), 4, Priority::kGold)).ok());
    sim.Step();
    if (sim.results[*bronze][0].finish != FinishReason::kNone) return s;
  }
  return -1;
}

TEST(EngineSim, NoStarvationUnderGoldFlood) {
  // Golds age too, so bronze ranks like a gold that arrived priority * aging_s = 2 s after it: it
  // waits for at most the golds that arrived in its first 2 s (40, served ~2 per 4 steps) and then
  // needs its 10 tokens — a bound set by aging_s, not by how long the flood lasts.
  const int step = BronzeFinishStep(1.0, 400);
  EXPECT_GE(step, 0);
  EXPECT_LE(step, 100);
  EXPECT_EQ(BronzeFinishStep(0.0, 400), -1) << "without aging bronze starves (the test can fail)";
}

TEST(EngineSim, NCompletionsSharePromptBlocksAndMatchSeededSingles) {
  const std::vector<int32_t> prompt =
      MakePrompt(40, 77);  // 40 % 16 = 8: the last prompt block is shared
  SubmitRequest r = Req(prompt, 12);
  r.sampling = SamplingParams();
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 1000;
  r.n = 4;
  Sim sim(256, Cfg());
  auto id = sim.Submit(r);
  ASSERT_TRUE(id.ok());
  sim.Step();  // prompt + 4 first tokens, fork
  EXPECT_EQ(sim.engine->kv().Stats().used_blocks, 3) << "4 completions share the prompt's 3 blocks";
  sim.Step();  // each completion writes position 40: copy-on-write of the shared partial block
  EXPECT_EQ(sim.runner->num_copies(), 3);
  EXPECT_EQ(sim.engine->kv().Stats().used_blocks, 2 + 4);
  sim.RunToCompletion();
  std::set<std::vector<int32_t>> distinct;
  for (int i = 0; i < 4; ++i) {
    SubmitRequest single = r;
    single.n = 1;
    single.sampling.seed = sampler::ChoiceSeed(1000, i);
    Sim one(256, Cfg());
    auto sid = one.Submit(single);
    one.RunToCompletion();
    EXPECT_EQ(sim.results[*id][i].tokens, one.results[*sid][0].tokens) << "completion " << i;
    distinct.insert(sim.results[*id][i].tokens);
  }
  EXPECT_GT(distinct.size(), 1u);
}

// Completion i's stream comes from ChoiceSeed(seed, i): the completions of seed 7 and seed 8 share
// no stream (with seed + i, seed 8's completion 0 was seed 7's completion 1).
TEST(EngineSim, NearbySeedsShareNoCompletionStream) {
  auto run = [](uint64_t seed) {
    Sim sim(256, Cfg());
    SubmitRequest r = Req(MakePrompt(16, 3), 16);
    r.sampling = SamplingParams();
    r.sampling.temperature = 1.5f;
    r.sampling.top_k = 0;
    r.sampling.min_p = 0;
    r.sampling.top_p = 1;
    r.sampling.seed = seed;
    r.n = 4;
    auto id = sim.Submit(r);
    sim.RunToCompletion();
    std::set<std::vector<int32_t>> out;
    for (int i = 0; i < 4; ++i) out.insert(sim.results[*id][i].tokens);
    return out;
  };
  const auto a = run(7), b = run(8);
  EXPECT_EQ(a.size(), 4u);
  EXPECT_EQ(b.size(), 4u);
  for (const auto& t : a) EXPECT_EQ(b.count(t), 0u) << "a completion of seed 7 reappears in seed 8";
}

TEST(EngineSim, StopIdsMaxTokensAndIgnoreEos) {
  Sim sim(256, Cfg());
  const auto prompt = MakePrompt(12, 5);
  const auto ref = GreedyReference(sim.rcfg, prompt, 30);
  // Pick a token whose first occurrence is at index k >= 2.
  size_t k = 2;
  while (std::find(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(k), ref[k]) !=
         ref.begin() + static_cast<std::ptrdiff_t>(k))
    ++k;
  SubmitRequest stop = Req(prompt, 30);
  stop.stop_token_ids = {ref[k]};
  SubmitRequest eog = Req(prompt, 30);
  eog.eog_ids = {ref[k]};
  SubmitRequest ignore = eog;
  ignore.ignore_eos = true;
  SubmitRequest len = Req(prompt, 5);
  auto a = sim.Submit(stop), b = sim.Submit(eog), c = sim.Submit(ignore), d = sim.Submit(len);
  sim.RunToCompletion();
  const std::vector<int32_t> upto(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(k + 1));
  EXPECT_EQ(sim.results[*a][0].tokens, upto);
  EXPECT_EQ(sim.results[*a][0].finish, FinishReason::kStop);
  EXPECT_EQ(sim.results[*b][0].tokens, upto);
  EXPECT_EQ(sim.results[*b][0].finish, FinishReason::kStop);
  const auto& ig = sim.results[*c][0];
  EXPECT_EQ(ig.finish, FinishReason::kLength);
  EXPECT_EQ(ig.tokens.size(), 30u);
  EXPECT_EQ(std::count(ig.tokens.begin(), ig.tokens.end(), ref[k]), 0)
      << "EOG is banned with ignore_eos";
  EXPECT_EQ(
      std::vector<int32_t>(ig.tokens.begin(), ig.tokens.begin() + static_cast<std::ptrdiff_t>(k)),
      std::vector<int32_t>(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(k)));
  EXPECT_EQ(sim.results[*d][0].tokens, std::vector<int32_t>(ref.begin(), ref.begin() + 5));
  EXPECT_EQ(sim.results[*d][0].finish, FinishReason::kLength);
}

TEST(EngineSim, SeedsAreReproducible) {
  auto run = [](uint64_t seed) {
    Sim sim(256, Cfg());
    SubmitRequest r = Req(MakePrompt(16, 3), 24);
    r.sampling = SamplingParams();
    r.sampling.temperature = 1.5f;
    r.sampling.top_k = 0;
    r.sampling.min_p = 0;
    r.sampling.top_p = 1;
    r.sampling.seed = seed;
    auto id = sim.Submit(r);
    sim.RunToCompletion();
    return sim.results[*id][0].tokens;
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));
}

TEST(EngineSim, LogprobsMatchLogSoftmaxOfTheModel) {
  Sim sim(256, Cfg());
  const auto prompt = MakePrompt(9, 8);
  SubmitRequest r = Req(prompt, 3);
  r.logprobs = true;
  r.top_logprobs = 5;
  auto id = sim.Submit(r);
  sim.RunToCompletion();
  const auto& c = sim.results[*id][0];
  ASSERT_EQ(c.events.size(), 3u);
  std::vector<int32_t> hist = prompt;
  std::vector<float> row(64);
  for (const TokenEvent& ev : c.events) {
    sim.runner->Logits(FakeModelRunner::Chain(hist), static_cast<int>(hist.size()) - 1, row);
    double mx = *std::max_element(row.begin(), row.end()), sum = 0;
    for (float v : row) sum += std::exp(v - mx);
    const double lse = mx + std::log(sum);
    EXPECT_NEAR(ev.logprob, row[static_cast<size_t>(ev.token)] - lse, 1e-4);
    ASSERT_EQ(ev.num_top, 5);
    EXPECT_EQ(ev.top[0].id, ev.token);  // greedy picks the most likely token
    for (int i = 0; i < 5; ++i) {
      EXPECT_NEAR(ev.top[static_cast<size_t>(i)].logprob,
                  row[static_cast<size_t>(ev.top[static_cast<size_t>(i)].id)] - lse, 1e-4);
      if (i > 0) {
        EXPECT_GE(ev.top[static_cast<size_t>(i - 1)].logprob,
                  ev.top[static_cast<size_t>(i)].logprob);
      }
    }
    hist.push_back(ev.token);
  }
}

TEST(EngineSim, TheEngineComposesThePrefixSaltFromTheModelAndTheRequestsFacts) {
  Sim sim(64, Cfg());
  const std::vector<uint8_t> model = cachekey::ModelSalt({"fingerprint", "f16", 16});
  sim.engine->SetModelSalt(model);
  const std::vector<int32_t> prompt = MakePrompt(40, 7);  // 2 full blocks + 8 tokens
  auto keys = [&](std::string_view adapter, std::string_view tenant) {
    return cachekey::ComputeBlockHashes(prompt, 16,
                                        cachekey::RequestSalt(model, {adapter, tenant}));
  };
  SubmitRequest a = Req(prompt, 2);
  a.tenant = "acme";
  ASSERT_TRUE(sim.Submit(a).ok());
  sim.RunToCompletion();
  // The pool holds exactly the keys cachekey computes from the same facts (what a gateway
  // computes).
  EXPECT_EQ(sim.engine->kv().ProbeHashes(keys("", "acme")), 2);
  EXPECT_EQ(sim.engine->kv().ProbeHashes(keys("", "")), 0);
  // Another adapter for the same tenant and prompt: other keys, no hit.
  SubmitRequest b = Req(prompt, 2);
  b.tenant = "acme";
  b.adapter = "lora-digest";
  const int64_t hits = sim.engine->Stats().prefix_hit_tokens;
  ASSERT_TRUE(sim.Submit(b).ok());
  sim.RunToCompletion();
  EXPECT_EQ(sim.engine->Stats().prefix_hit_tokens, hits);
  EXPECT_EQ(sim.engine->kv().ProbeHashes(keys("lora-digest", "acme")), 2);
  // The same facts again: a hit.
  ASSERT_TRUE(sim.Submit(a).ok());
  sim.RunToCompletion();
  EXPECT_EQ(sim.engine->Stats().prefix_hit_tokens, hits + 32);
}

TEST(EngineSim, SubmitRejectsRequestsThatCannotFit) {
  Sim sim(8, Cfg(2048, 4));
  auto big = sim.Submit(Req(MakePrompt(100, 1), 100));  // 13 blocks > 8
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("KV blocks"), std::string::npos);
  SubmitRequest many = Req(MakePrompt(4, 1), 4);
  many.n = 5;
  auto n = sim.Submit(many);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("max_num_seqs"), std::string::npos);
}

class FailingRunner final : public ModelRunner {
 public:
  int n_vocab() const override { return 64; }
  Status Run(std::span<const BatchSeq>, std::vector<float>*, std::vector<float>*) override {
    return Status::Internal("boom");
  }
};

TEST(EngineSim, RunnerErrorEndsTheBatchWithError) {
  FailingRunner runner;
  FakeClock clock;
  kv::KvManagerConfig kc;
  kc.num_blocks = 32;
  auto e = Engine::Create(&runner, kc, Cfg(), &clock);
  ASSERT_TRUE(e.ok());
  auto h = (*e)->Submit(Req(MakePrompt(10, 1), 4));
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE((*e)->Step().ok());
  auto ev = h->stream->TryNext();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->finish, FinishReason::kError);
  EXPECT_EQ(ev->error.message(), "boom");
  EXPECT_TRUE(h->stream->complete());
  EXPECT_EQ((*e)->kv().Stats().used_blocks, 0);
}

TEST(EngineThread, SubmitFromSeveralThreads) {
  FakeRunnerConfig rc;
  rc.num_blocks = 128;
  FakeModelRunner runner(rc);
  SteadyClock clock;
  kv::KvManagerConfig kc;
  kc.num_blocks = 128;
  auto e = Engine::Create(&runner, kc, Cfg(64, 8), &clock,
                          [&runner](std::span<const BlockCopy> c) { runner.CopyBlocks(c); });
  ASSERT_TRUE(e.ok());
  Engine& engine = **e;
  engine.Start();
  constexpr int kThreads = 4, kPerThread = 8;
  std::vector<int> mismatches(kThreads, 0), done(kThreads, 0);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const auto prompt = MakePrompt(5 + 7 * i, static_cast<uint32_t>(100 * t + i));
        auto h = engine.Submit(Req(prompt, 10 + i));
        if (!h.ok()) continue;
        std::vector<int32_t> got;
        FinishReason fin = FinishReason::kNone;
        for (const TokenEvent& ev : h->stream->DrainAll()) {
          got.push_back(ev.token);
          fin = ev.finish;
        }
        if (got != GreedyReference(rc, prompt, 10 + i) || fin != FinishReason::kLength)
          ++mismatches[static_cast<size_t>(t)];
        ++done[static_cast<size_t>(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(done[static_cast<size_t>(t)], kPerThread);
    EXPECT_EQ(mismatches[static_cast<size_t>(t)], 0);
  }
  // Stats are published at the end of the step that finished the last request.
  for (int i = 0; i < 200 && engine.Stats().finished_requests < kThreads * kPerThread; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const EngineStats st = engine.Stats();
  EXPECT_EQ(st.finished_requests, kThreads * kPerThread);
  EXPECT_EQ(st.kv_used_blocks, 0);
  EXPECT_EQ(st.running_requests, 0);
  EXPECT_EQ(runner.num_errors(), 0);
  // A request still queued when the engine is destroyed ends cancelled. (Submitted after Stop so
  // the fast fake runner cannot finish it first — that raced and flaked under load.)
  engine.Stop();
  auto h = engine.Submit(Req(MakePrompt(10, 1), 1000));
  ASSERT_TRUE(h.ok());
  e->reset();
  std::optional<TokenEvent> last;
  while (auto ev = h->stream->TryNext()) last = ev;
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->finish, FinishReason::kCancelled);
}

}  // namespace
}  // namespace strata::engine::sched
