// The engine's per-request timeline (timeline.h) under the deterministic simulation: each Sim step
// runs at one fake-clock instant and then advances the clock by 10 ms, so every stamp is exact.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>

#include "engine/sched/engine.h"
#include "engine/sched/sim_testing.h"

namespace strata::engine::sched {
namespace {

using sampler::SamplingParams;
using std::chrono::milliseconds;
using testing::Cfg;
using testing::Completion;
using testing::FinalTimeline;
using testing::GreedyReference;
using testing::MakePrompt;
using testing::Req;
using testing::Sim;

int64_t ChunkTokens(const RequestTimeline& t) {
  return std::accumulate(t.prefill_chunks.begin(), t.prefill_chunks.end(), int64_t{0},
                         [](int64_t a, const RequestTimeline::Chunk& c) { return a + c.tokens; });
}

// submitted <= first_scheduled <= every chunk <= first_token <= finished, and each preemption
// between its neighbours.
void ExpectOrdered(const RequestTimeline& t) {
  ASSERT_TRUE(RequestTimeline::Set(t.submitted));
  ASSERT_TRUE(t.scheduled());
  ASSERT_TRUE(t.has_first_token());
  ASSERT_TRUE(RequestTimeline::Set(t.finished));
  EXPECT_LE(t.submitted, t.first_scheduled);
  EXPECT_LE(t.first_scheduled, t.first_token);
  EXPECT_LE(t.first_token, t.finished);
  TimePoint prev = t.first_scheduled;
  for (const auto& c : t.prefill_chunks) {
    EXPECT_LE(prev, c.start);
    EXPECT_LE(c.start, c.end);
    prev = c.end;
  }
  EXPECT_LE(prev, t.first_token);
  ASSERT_EQ(t.preempted_at.size(), t.resumed_at.size());
  prev = t.first_scheduled;
  for (size_t i = 0; i < t.preempted_at.size(); ++i) {
    EXPECT_LE(prev, t.preempted_at[i]);
    EXPECT_LT(t.preempted_at[i], t.resumed_at[i]);
    prev = t.resumed_at[i];
  }
  EXPECT_LE(prev, t.finished);
}

TEST(EngineTimeline, ChunkedPrefillHasOneChunkPerStepSummingToThePrompt) {
  Sim sim(64, Cfg(/*max_batched_tokens=*/32));
  const TimePoint t0 = sim.clock.Now();
  auto id = sim.Submit(Req(MakePrompt(100, 1), 5));
  ASSERT_TRUE(id.ok());
  sim.RunToCompletion();
  const Completion& c = sim.results[*id][0];
  EXPECT_EQ(c.tokens, GreedyReference(sim.rcfg, MakePrompt(100, 1), 5));
  const RequestTimeline& t = FinalTimeline(c);
  ExpectOrdered(t);
  EXPECT_EQ(t.submitted, t0);
  EXPECT_EQ(t.first_scheduled, t0);    // admitted in the first step: no wait
  ASSERT_EQ(t.num_prefill_chunks, 4);  // 32 + 32 + 32 + 4, one step each
  ASSERT_EQ(t.prefill_chunks.size(), 4u);
  EXPECT_EQ(t.prefill_chunks[0].tokens, 32);
  EXPECT_EQ(t.prefill_chunks[3].tokens, 4);
  EXPECT_EQ(ChunkTokens(t), 100);
  EXPECT_EQ(t.prefill_tokens, 100);
  EXPECT_EQ(t.cached_tokens, 0);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(t.prefill_chunks[static_cast<size_t>(i)].start, t0 + milliseconds(10 * i));
  EXPECT_EQ(t.first_token, t0 + milliseconds(30));  // sampled by the last chunk's step
  EXPECT_EQ(t.decode_steps, 4);
  EXPECT_EQ(t.finished, t0 + milliseconds(70));
  EXPECT_EQ(t.preemptions, 0);
  // The first token event carries the timeline up to the first token.
  ASSERT_NE(c.events.front().timeline, nullptr);
  EXPECT_EQ(c.events.front().timeline->first_token, t.first_token);
  EXPECT_FALSE(RequestTimeline::Set(c.events.front().timeline->finished));
  for (size_t i = 1; i + 1 < c.events.size(); ++i) EXPECT_EQ(c.events[i].timeline, nullptr);
}

TEST(EngineTimeline, QueueWaitEndsAtTheFirstScheduledStep) {
  Sim sim(64, Cfg(2048, /*max_num_seqs=*/1));
  const TimePoint t0 = sim.clock.Now();
  auto a = sim.Submit(Req(MakePrompt(10, 1), 3));
  auto b = sim.Submit(Req(MakePrompt(10, 2), 3));
  ASSERT_TRUE(a.ok() && b.ok());
  sim.RunToCompletion();
  const RequestTimeline& ta = FinalTimeline(sim.results[*a][0]);
  const RequestTimeline& tb = FinalTimeline(sim.results[*b][0]);
  ExpectOrdered(ta);
  ExpectOrdered(tb);
  EXPECT_EQ(ta.first_scheduled, t0);
  EXPECT_EQ(ta.finished, t0 + milliseconds(20));  // prefill+first token, then two decodes
  EXPECT_EQ(tb.submitted, t0);
  EXPECT_EQ(tb.first_scheduled, t0 + milliseconds(30));  // the step after A's seat freed
  EXPECT_EQ(tb.first_token, tb.first_scheduled);
}

TEST(EngineTimeline, PreemptedRequestCountsItAndStaysOrdered) {
  Sim sim(256, Cfg(2048, 4));
  std::vector<RequestId> bronze;
  bronze.reserve(4);
  for (int i = 0; i < 4; ++i)
    bronze.push_back(*sim.Submit(Req(MakePrompt(20, i), 30, Priority::kBronze)));
  for (int i = 0; i < 3; ++i) sim.Step();
  const TimePoint preempt_step = sim.clock.Now();
  ASSERT_TRUE(sim.Submit(Req(MakePrompt(20, 50), 5, Priority::kSilver)).ok());
  ASSERT_TRUE(sim.Submit(Req(MakePrompt(20, 51), 5, Priority::kGold)).ok());
  sim.RunToCompletion();
  EXPECT_EQ(sim.engine->Stats().preemptions, 2);  // bronze[2] and bronze[3]
  for (int i = 0; i < 4; ++i) {
    const Completion& c = sim.results[bronze[static_cast<size_t>(i)]][0];
    EXPECT_EQ(c.tokens, GreedyReference(sim.rcfg, MakePrompt(20, i), 30));
    const RequestTimeline& t = FinalTimeline(c);
    ExpectOrdered(t);
    const int want = i >= 2 ? 1 : 0;
    EXPECT_EQ(t.preemptions, want) << i;
    EXPECT_EQ(t.resumptions, want) << i;
    if (want == 0) continue;
    EXPECT_EQ(t.preempted_at[0], preempt_step);
    EXPECT_GT(t.resumed_at[0], preempt_step);
    // Preempted after its first token: the recompute is not a prefill chunk.
    EXPECT_EQ(t.num_prefill_chunks, 1);
    EXPECT_EQ(t.first_token, t.first_scheduled);
  }
}

TEST(EngineTimeline, PrefixCacheHitIsCachedTokensAndSkipsTheirPrefill) {
  Sim sim(64, Cfg());
  const auto prompt = MakePrompt(50, 9);  // 3 full blocks of 16 + 2
  auto first = sim.Submit(Req(prompt, 4));
  ASSERT_TRUE(first.ok());
  sim.RunToCompletion();
  EXPECT_EQ(FinalTimeline(sim.results[*first][0]).cached_tokens, 0);
  const int64_t hits = sim.engine->Stats().prefix_hit_tokens;
  auto again = sim.Submit(Req(prompt, 4));
  ASSERT_TRUE(again.ok());
  sim.RunToCompletion();
  const RequestTimeline& t = FinalTimeline(sim.results[*again][0]);
  ExpectOrdered(t);
  EXPECT_EQ(t.cached_tokens, 48);
  EXPECT_EQ(sim.engine->Stats().prefix_hit_tokens - hits, t.cached_tokens);
  EXPECT_EQ(ChunkTokens(t), 50 - t.cached_tokens);
  EXPECT_EQ(sim.results[*again][0].tokens, sim.results[*first][0].tokens);
}

TEST(EngineTimeline, EveryCompletionOfNEndsWithATimeline) {
  Sim sim(64, Cfg());
  SubmitRequest r = Req(MakePrompt(20, 3), 6);
  r.n = 3;
  r.sampling = SamplingParams();
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 7;
  auto id = sim.Submit(std::move(r));
  ASSERT_TRUE(id.ok());
  sim.RunToCompletion();
  ASSERT_EQ(sim.results[*id].size(), 3u);
  const RequestTimeline* shared_first = nullptr;
  for (auto& [index, c] : sim.results[*id]) {
    ExpectOrdered(FinalTimeline(c));
    ASSERT_NE(c.events.front().timeline, nullptr);
    if (c.events.front().finish != FinishReason::kNone) continue;
    if (shared_first == nullptr) shared_first = c.events.front().timeline.get();
    EXPECT_EQ(c.events.front().timeline.get(), shared_first) << "one snapshot for the n firsts";
  }
}

TEST(EngineTimeline, CancelledRequestEndsWithATimeline) {
  Sim sim(64, Cfg());
  auto id = sim.Submit(Req(MakePrompt(20, 4), 100));
  ASSERT_TRUE(id.ok());
  sim.Step();
  sim.Step();
  const TimePoint cancel_step = sim.clock.Now();
  sim.engine->Cancel(*id);
  sim.RunToCompletion();
  const Completion& c = sim.results[*id][0];
  EXPECT_EQ(c.finish, FinishReason::kCancelled);
  const RequestTimeline& t = FinalTimeline(c);
  ExpectOrdered(t);
  EXPECT_EQ(t.finished, cancel_step);
  EXPECT_EQ(t.decode_steps, 1);
}

}  // namespace
}  // namespace strata::engine::sched
