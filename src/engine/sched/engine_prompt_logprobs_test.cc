// Prompt logprobs (SubmitRequest::prompt_logprobs, for `echo`): deterministic simulation over the
// fake runner. The logprob of prompt token i must equal what decoding reported when that very token
// was generated (same logits row, same log-softmax), the request must compute every prompt position
// (no prefix-cache read) and the values reach every completion's first event.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/sched/engine.h"
#include "engine/sched/sim_testing.h"

namespace strata::engine::sched {
namespace {

using sampler::SamplingParams;
using testing::MakePrompt;
using testing::Sim;

SubmitRequest Greedy(std::vector<int32_t> prompt, int max_tokens) {
  SubmitRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = SamplingParams::Greedy();
  return r;
}

SchedulerConfig Cfg(int max_batched_tokens) {
  SchedulerConfig c;
  c.max_batched_tokens = max_batched_tokens;
  c.max_num_seqs = 8;
  return c;
}

// Generates `gen` greedy tokens after `prompt` with logprobs (top 4); returns the events.
std::vector<TokenEvent> Decode(Sim& sim, const std::vector<int32_t>& prompt, int gen) {
  SubmitRequest r = Greedy(prompt, gen);
  r.logprobs = true;
  r.top_logprobs = 4;
  r.ignore_eos = true;
  auto id = sim.Submit(r);
  EXPECT_TRUE(id.ok());
  sim.RunToCompletion();
  return sim.results[*id][0].events;
}

TEST(EnginePromptLogprobs, EqualTheDecodeLogprobsOfTheSamePositions) {
  for (int chunk : {512, 5, 1}) {  // one chunk, chunked prefill, token by token
    Sim sim(256, Cfg(chunk), 16, /*prefix_cache=*/false);
    const std::vector<int32_t> prompt = MakePrompt(9, 3);
    const std::vector<TokenEvent> dec = Decode(sim, prompt, 12);
    ASSERT_EQ(dec.size(), 12u);
    std::vector<int32_t> full = prompt;
    for (const TokenEvent& ev : dec) full.push_back(ev.token);

    SubmitRequest r = Greedy(full, 1);
    r.prompt_logprobs = 4;
    auto id = sim.Submit(r);
    ASSERT_TRUE(id.ok());
    sim.RunToCompletion();
    const auto& events = sim.results[*id][0].events;
    ASSERT_EQ(events.size(), 1u);
    ASSERT_NE(events[0].prompt_logprobs, nullptr);
    const PromptLogprobs& lp = *events[0].prompt_logprobs;
    ASSERT_EQ(lp.logprob.size(), full.size());
    EXPECT_TRUE(std::isnan(lp.logprob[0]));
    for (size_t i = 0; i < dec.size(); ++i) {
      const size_t pos = prompt.size() + i;
      EXPECT_EQ(lp.logprob[pos], dec[i].logprob) << "chunk " << chunk << " position " << pos;
      ASSERT_EQ(lp.top_k, 4);
      for (size_t k = 0; k < 4; ++k) {
        EXPECT_EQ(lp.TopAt(pos)[k].id, dec[i].top[k].id) << pos << " " << k;
        EXPECT_EQ(lp.TopAt(pos)[k].logprob, dec[i].top[k].logprob) << pos << " " << k;
      }
    }
    // Positions inside the original prompt: the log-softmax of the fake model's logits there.
    std::vector<float> row(64);
    for (size_t pos = 1; pos < prompt.size(); ++pos) {
      std::vector<int32_t> hist(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(pos));
      sim.runner->Logits(FakeModelRunner::Chain(hist), static_cast<int>(pos) - 1, row);
      double mx = *std::max_element(row.begin(), row.end()), sum = 0;
      for (float v : row) sum += std::exp(v - mx);
      EXPECT_NEAR(lp.logprob[pos], row[static_cast<size_t>(full[pos])] - (mx + std::log(sum)),
                  1e-4);
      for (size_t k = 1; k < 4; ++k)
        EXPECT_GE(lp.TopAt(pos)[k - 1].logprob, lp.TopAt(pos)[k].logprob);
    }
    // The sampled token is the one greedy decoding picks after the whole prompt (the last row of
    // the all-logits chunk is the usual sampling row).
    EXPECT_EQ(events[0].token, testing::GreedyReference(sim.rcfg, full, 1).at(0));
  }
}

TEST(EnginePromptLogprobs, ReadNoCachedPrefixButRegisterTheirBlocks) {
  Sim sim(256, Cfg(512));
  const std::vector<int32_t> prompt = MakePrompt(40, 5);  // 2 full blocks of 16
  auto first = sim.Submit(Greedy(prompt, 2));
  ASSERT_TRUE(first.ok());
  sim.RunToCompletion();
  const int64_t hits_before = sim.engine->Stats().prefix_hit_tokens;

  SubmitRequest r = Greedy(prompt, 2);
  r.prompt_logprobs = 0;
  const size_t batches_before = sim.runner->batches().size();
  auto id = sim.Submit(r);
  ASSERT_TRUE(id.ok());
  sim.RunToCompletion();
  EXPECT_EQ(sim.engine->Stats().prefix_hit_tokens, hits_before) << "a cached prefix was read";
  // Its prompt ran from position 0, with every row's logits.
  const auto& b = sim.runner->batches()[batches_before];
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].start_pos, 0);
  EXPECT_EQ(b[0].num_tokens, 40);
  EXPECT_TRUE(b[0].want_all_logits);
  // Decodes after the first token never ask for all logits.
  for (size_t i = batches_before + 1; i < sim.runner->batches().size(); ++i)
    for (const auto& s : sim.runner->batches()[i]) EXPECT_FALSE(s.want_all_logits);
  const auto& ev = sim.results[*id][0].events;
  ASSERT_FALSE(ev.empty());
  ASSERT_NE(ev[0].prompt_logprobs, nullptr);
  EXPECT_EQ(ev[0].prompt_logprobs->top_k, 0);
  EXPECT_TRUE(ev[0].prompt_logprobs->top.empty());
  for (size_t i = 1; i < ev.size(); ++i) EXPECT_EQ(ev[i].prompt_logprobs, nullptr);
  EXPECT_EQ(sim.results[*id][0].tokens, sim.results[*first][0].tokens);

  // A plain request afterwards hits the cache as usual.
  auto plain = sim.Submit(Greedy(prompt, 2));
  ASSERT_TRUE(plain.ok());
  sim.RunToCompletion();
  EXPECT_GT(sim.engine->Stats().prefix_hit_tokens, hits_before);
}

TEST(EnginePromptLogprobs, EveryCompletionsFirstEventCarriesThem) {
  Sim sim(256, Cfg(512));
  SubmitRequest r = Greedy(MakePrompt(20, 7), 3);
  r.n = 3;
  r.sampling = SamplingParams();
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 11;
  r.prompt_logprobs = 2;
  auto id = sim.Submit(r);
  ASSERT_TRUE(id.ok());
  sim.RunToCompletion();
  const auto& comps = sim.results[*id];
  ASSERT_EQ(comps.size(), 3u);
  const PromptLogprobs* shared = comps.at(0).events.at(0).prompt_logprobs.get();
  ASSERT_NE(shared, nullptr);
  for (const auto& [idx, c] : comps) {
    EXPECT_EQ(c.events.at(0).prompt_logprobs.get(), shared) << idx;
    for (size_t i = 1; i < c.events.size(); ++i) EXPECT_EQ(c.events[i].prompt_logprobs, nullptr);
  }
  for (size_t pos = 1; pos < 20; ++pos) EXPECT_FALSE(std::isnan(shared->logprob[pos]));
}

TEST(EnginePromptLogprobs, PreemptedBeforeTheFirstTokenRecomputesTheSameValues) {
  // A pool so small that the long prompt-logprobs request is preempted by the gold requests.
  const std::vector<int32_t> prompt = MakePrompt(60, 9);
  std::vector<float> alone;
  {
    Sim sim(64, Cfg(512));
    SubmitRequest r = Greedy(prompt, 1);
    r.prompt_logprobs = 1;
    auto id = sim.Submit(r);
    sim.RunToCompletion();
    alone = sim.results[*id][0].events.at(0).prompt_logprobs->logprob;
  }
  // 6 blocks of 16, 16 tokens a step: the bronze holds 2 blocks when the gold arrives; the gold's
  // prompt takes 4, and its decode needs a 5th, so the bronze is preempted before its first token.
  Sim sim(6, Cfg(16));
  SubmitRequest r = Greedy(prompt, 1);
  r.priority = Priority::kBronze;
  r.prompt_logprobs = 1;
  auto id = sim.Submit(r);
  ASSERT_TRUE(id.ok());
  for (int i = 0; i < 2; ++i) sim.Step();
  SubmitRequest gold = Greedy(MakePrompt(60, 10), 30);
  gold.priority = Priority::kGold;
  ASSERT_TRUE(sim.Submit(gold).ok());
  sim.RunToCompletion();
  EXPECT_GE(sim.engine->Stats().preemptions, 1);
  const auto& lp = sim.results[*id][0].events.at(0).prompt_logprobs->logprob;
  ASSERT_EQ(lp.size(), alone.size());
  for (size_t i = 1; i < lp.size(); ++i) EXPECT_EQ(lp[i], alone[i]) << i;
}

TEST(EnginePromptLogprobs, ValidateBoundsTheTopCount) {
  SubmitRequest r = Greedy({1, 2, 3}, 1);
  r.prompt_logprobs = kMaxTopLogprobs + 1;
  EXPECT_EQ(r.Validate(64, 4096).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Validate(64, 4096).message().substr(0, 16), "prompt_logprobs:");
  r.prompt_logprobs = -2;
  EXPECT_FALSE(r.Validate(64, 4096).ok());
  r.prompt_logprobs = kMaxTopLogprobs;
  EXPECT_TRUE(r.Validate(64, 4096).ok());
}

}  // namespace
}  // namespace strata::engine::sched
