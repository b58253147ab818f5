// Embedding requests (RequestKind::kEmbed) through the engine, on the deterministic simulation
// (fake runner, fake clock, Step()-driven): the pooled vector equals one computed straight from the
// fake model (no engine involved) bit for bit, whatever the chunking, the batch or preemptions; the
// request is counted, cancellable (its blocks are freed) and stays out of the prefix cache.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/sched/engine.h"
#include "engine/sched/sim_testing.h"

namespace strata::engine::sched {
namespace {

using sampler::SamplingParams;
using testing::Cfg;
using testing::GreedyReference;
using testing::MakePrompt;
using testing::Sim;

SubmitRequest Embed(std::vector<int32_t> prompt) {
  SubmitRequest r;
  r.kind = RequestKind::kEmbed;
  r.prompt = std::move(prompt);
  return r;
}

SubmitRequest Gen(std::vector<int32_t> prompt, int max_tokens) {
  SubmitRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = SamplingParams::Greedy();
  return r;
}

// The expected embedding, from the fake model directly: the hidden row of every position (a
// function of the history up to it), summed in double in position order, L2-normalised.
std::vector<float> ExpectedEmbedding(const FakeRunnerConfig& rcfg,
                                     const std::vector<int32_t>& prompt) {
  FakeModelRunner model(FakeRunnerConfig{rcfg.n_vocab, 0, rcfg.block_size, rcfg.peak, rcfg.seed,
                                         true, rcfg.hidden_dim});
  const size_t dim = static_cast<size_t>(rcfg.hidden_dim);
  std::vector<double> sum(dim, 0.0);
  std::vector<float> row(dim);
  for (size_t p = 0; p < prompt.size(); ++p) {
    const std::span<const int32_t> history(prompt.data(), p + 1);
    model.Hidden(FakeModelRunner::Chain(history), static_cast<int>(p), row);
    for (size_t i = 0; i < dim; ++i) sum[i] += row[i];
  }
  double norm = 0;
  for (double x : sum) norm += x * x;
  norm = std::sqrt(norm);
  std::vector<float> out(dim);
  for (size_t i = 0; i < dim; ++i) out[i] = static_cast<float>(sum[i] / norm);
  return out;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The one event of a finished embedding request.
const TokenEvent& OnlyEvent(Sim& sim, RequestId id) {
  const auto& events = sim.results[id][0].events;
  EXPECT_EQ(events.size(), 1u);
  return events.back();
}

TEST(EngineEmbed, OneFinalEventWithThePooledVector) {
  Sim sim(64, Cfg());
  const auto prompt = MakePrompt(37, 1);
  int notified = 0;
  auto id = sim.Submit(Embed(prompt));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  sim.streams[*id]->SetNotify([&notified] { ++notified; });
  sim.RunToCompletion();
  const TokenEvent& ev = OnlyEvent(sim, *id);
  EXPECT_EQ(ev.finish, FinishReason::kStop);
  EXPECT_EQ(ev.token, -1);
  EXPECT_TRUE(ev.error.ok());
  EXPECT_TRUE(BitEqual(ev.embedding, ExpectedEmbedding(sim.rcfg, prompt)));
  double norm = 0;
  for (float x : ev.embedding) norm += static_cast<double>(x) * x;
  EXPECT_NEAR(norm, 1.0, 1e-6);
  EXPECT_EQ(notified, 1);
  // The runner was asked for hidden rows of every prompt token and for no logits.
  int hidden_tokens = 0;
  for (const auto& batch : sim.runner->batches())
    for (const auto& s : batch) {
      EXPECT_TRUE(s.want_hidden);
      EXPECT_FALSE(s.want_logits);
      hidden_tokens += s.num_tokens;
    }
  EXPECT_EQ(hidden_tokens, 37);
  const EngineStats st = sim.engine->Stats();
  EXPECT_EQ(st.embeddings, 1);
  EXPECT_EQ(st.finished_requests, 1);
  EXPECT_EQ(st.tokens_computed, 37);
  EXPECT_EQ(st.generated_tokens, 0);
  EXPECT_EQ(sim.engine->hidden_dim(), sim.rcfg.hidden_dim);
}

// A prompt chunked over many steps (budget 7) gives the bits of one chunk.
TEST(EngineEmbed, ChunkedPromptGivesTheSameBits) {
  const auto prompt = MakePrompt(90, 2);
  Sim sim(64, Cfg(7, 4));
  auto id = sim.Submit(Embed(prompt));
  ASSERT_TRUE(id.ok());
  sim.RunToCompletion();
  EXPECT_GE(sim.runner->batches().size(), 13u);
  EXPECT_TRUE(BitEqual(OnlyEvent(sim, *id).embedding, ExpectedEmbedding(sim.rcfg, prompt)));
}

// 16 embeddings and 4 generations submitted together are batched into shared steps; every
// embedding has the bits it has alone, every generation its reference tokens.
TEST(EngineEmbed, BatchedEqualsAloneBitForBit) {
  std::vector<std::vector<int32_t>> prompts;
  prompts.reserve(16);
  for (int i = 0; i < 16; ++i)
    prompts.push_back(MakePrompt(1 + 7 * i, 100 + static_cast<uint32_t>(i)));
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) {
    Sim one(64, Cfg(64, 16));
    auto id = one.Submit(Embed(p));
    ASSERT_TRUE(id.ok());
    one.RunToCompletion();
    alone.push_back(OnlyEvent(one, *id).embedding);
  }
  Sim sim(128, Cfg(64, 16));
  std::vector<RequestId> gen_ids, emb_ids;
  std::vector<std::vector<int32_t>> gen_prompts;
  for (int i = 0; i < 4; ++i) {
    gen_prompts.push_back(MakePrompt(20 + i, 500 + static_cast<uint32_t>(i)));
    auto id = sim.Submit(Gen(gen_prompts.back(), 12));
    ASSERT_TRUE(id.ok());
    gen_ids.push_back(*id);
  }
  for (const auto& p : prompts) {
    auto id = sim.Submit(Embed(p));
    ASSERT_TRUE(id.ok());
    emb_ids.push_back(*id);
  }
  sim.RunToCompletion();
  size_t most_embeds = 0;
  bool mixed = false;
  for (const auto& batch : sim.runner->batches()) {
    size_t embeds = 0, logits = 0;
    for (const auto& s : batch) {
      embeds += s.want_hidden ? 1 : 0;
      logits += s.want_logits ? 1 : 0;
    }
    most_embeds = std::max(most_embeds, embeds);
    mixed |= embeds > 0 && logits > 0;
  }
  EXPECT_GE(most_embeds, 4u) << "embedding requests were not batched together";
  EXPECT_TRUE(mixed) << "no step mixed embeddings with generation";
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("embedding " + std::to_string(i));
    const TokenEvent& ev = OnlyEvent(sim, emb_ids[i]);
    EXPECT_EQ(ev.finish, FinishReason::kStop);
    EXPECT_TRUE(BitEqual(ev.embedding, alone[i]));
    EXPECT_TRUE(BitEqual(ev.embedding, ExpectedEmbedding(sim.rcfg, prompts[i])));
  }
  for (size_t i = 0; i < gen_ids.size(); ++i)
    EXPECT_EQ(sim.results[gen_ids[i]][0].tokens, GreedyReference(sim.rcfg, gen_prompts[i], 12))
        << "generation " << i;
  EXPECT_EQ(sim.engine->Stats().embeddings, 16);
  EXPECT_EQ(sim.engine->Stats().finished_requests, 20);
}

// A gold generation arriving while a bronze embedding is half computed preempts it (the pool holds
// 10 blocks); the embedding is recomputed from position 0 and still gives its exact vector.
TEST(EngineEmbed, PreemptedEmbeddingRecomputesTheSameBits) {
  Sim sim(10, Cfg(64, 8));
  const auto prompt = MakePrompt(150, 12);
  SubmitRequest e = Embed(prompt);
  e.priority = Priority::kBronze;
  auto eid = sim.Submit(std::move(e));
  ASSERT_TRUE(eid.ok()) << eid.status().ToString();
  sim.Step();  // 64 of its 150 tokens
  const auto gen_prompt = MakePrompt(100, 13);
  SubmitRequest g = Gen(gen_prompt, 5);
  g.priority = Priority::kGold;
  auto gid = sim.Submit(std::move(g));
  ASSERT_TRUE(gid.ok());
  sim.RunToCompletion();
  EXPECT_GT(sim.engine->Stats().preemptions, 0);
  EXPECT_TRUE(BitEqual(OnlyEvent(sim, *eid).embedding, ExpectedEmbedding(sim.rcfg, prompt)));
  EXPECT_EQ(sim.results[*gid][0].tokens, GreedyReference(sim.rcfg, gen_prompt, 5));
  // Prompt tokens computed: the embedding's first 64 twice.
  EXPECT_EQ(sim.engine->Stats().tokens_computed, 150 + 64 + 100 + 4);
}

// Cancelling an embedding mid-prompt ends its stream with kCancelled and frees its blocks.
TEST(EngineEmbed, CancelFreesItsBlocks) {
  Sim sim(64, Cfg(16, 4));
  auto id = sim.Submit(Embed(MakePrompt(100, 7)));
  ASSERT_TRUE(id.ok());
  sim.Step();
  sim.Step();
  ASSERT_GT(sim.engine->kv().Stats().used_blocks, 0);
  sim.engine->Cancel(*id);
  sim.Step();
  EXPECT_EQ(sim.engine->kv().Stats().used_blocks, 0);
  EXPECT_EQ(sim.engine->kv().Stats().cached_blocks, 0);
  const TokenEvent& ev = OnlyEvent(sim, *id);
  EXPECT_EQ(ev.finish, FinishReason::kCancelled);
  EXPECT_TRUE(ev.embedding.empty());
  EXPECT_TRUE(sim.streams[*id]->complete());
  EXPECT_FALSE(sim.engine->HasWork());
  EXPECT_EQ(sim.engine->Stats().embeddings, 0);
}

// Embeddings neither use nor fill the prefix cache: a generation's cached prompt is not a hit for
// an embedding of the same prompt, and an embedding leaves nothing cached for a generation.
TEST(EngineEmbed, StaysOutOfThePrefixCache) {
  const auto prompt = MakePrompt(64, 9);
  Sim sim(64, Cfg());
  auto g = sim.Submit(Gen(prompt, 2));
  ASSERT_TRUE(g.ok());
  sim.RunToCompletion();
  const int cached = sim.engine->kv().Stats().cached_blocks;
  ASSERT_GT(cached, 0);
  const EngineStats before = sim.engine->Stats();
  auto e = sim.Submit(Embed(prompt));
  ASSERT_TRUE(e.ok());
  sim.RunToCompletion();
  EXPECT_TRUE(BitEqual(OnlyEvent(sim, *e).embedding, ExpectedEmbedding(sim.rcfg, prompt)));
  const EngineStats after = sim.engine->Stats();
  EXPECT_EQ(after.prefix_query_tokens, before.prefix_query_tokens);
  EXPECT_EQ(after.prefix_hit_tokens, before.prefix_hit_tokens);
  EXPECT_EQ(after.tokens_computed - before.tokens_computed, 64);
  EXPECT_EQ(sim.engine->kv().Stats().cached_blocks, cached);

  Sim fresh(64, Cfg());
  auto e2 = fresh.Submit(Embed(prompt));
  ASSERT_TRUE(e2.ok());
  fresh.RunToCompletion();
  EXPECT_EQ(fresh.engine->kv().Stats().cached_blocks, 0);
  auto g2 = fresh.Submit(Gen(prompt, 2));
  ASSERT_TRUE(g2.ok());
  fresh.RunToCompletion();
  EXPECT_EQ(fresh.engine->Stats().prefix_hit_tokens, 0);
}

TEST(EngineEmbed, Validation) {
  Sim sim(8, Cfg());
  SubmitRequest r = Embed(MakePrompt(10, 1));
  r.n = 2;
  EXPECT_EQ(sim.engine->Submit(r).status().code(), StatusCode::kInvalidArgument);
  r.n = 1;
  r.logprobs = true;
  EXPECT_EQ(sim.engine->Submit(r).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sim.engine->Submit(Embed({})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sim.engine->Submit(Embed({1, 64})).status().code(),
            StatusCode::kInvalidArgument);  // id out of range
  // max_tokens and the sampling fields do not apply: a prompt of max_model_len tokens is fine.
  SubmitRequest full = Embed(MakePrompt(sim.scfg.max_model_len, 3));
  EXPECT_TRUE(full.Validate(64, sim.scfg.max_model_len).ok());
  EXPECT_EQ(
      Embed(MakePrompt(sim.scfg.max_model_len + 1, 3)).Validate(64, sim.scfg.max_model_len).code(),
      StatusCode::kInvalidArgument);
  // Larger than the KV pool (8 blocks of 16): refused at Submit.
  EXPECT_EQ(sim.engine->Submit(Embed(MakePrompt(200, 4))).status().code(),
            StatusCode::kInvalidArgument);
  // A runner without hidden-state output refuses embeddings.
  FakeRunnerConfig rc;
  rc.num_blocks = 8;
  rc.hidden_dim = 0;
  FakeModelRunner runner(rc);
  FakeClock clock;
  kv::KvManagerConfig kc;
  kc.num_blocks = 8;
  auto e = Engine::Create(&runner, kc, Cfg(), &clock);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->hidden_dim(), 0);
  EXPECT_EQ((*e)->Submit(Embed(MakePrompt(10, 1))).status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace strata::engine::sched
