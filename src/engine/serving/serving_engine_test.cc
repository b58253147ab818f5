// End-to-end engine tests with the real model runner on a synthetic model: batch invariance
// (greedy tokens identical alone vs inside a batch of 16 mixed requests), prefix caching and
// preemption do not change tokens.
#include "engine/serving/serving_engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>

#include "reference/reference_model.h"
#include "synth/synth.h"
#include "tokenizer/tokenizer.h"

namespace strata::engine::serving {
namespace {

struct Fixture {
  std::vector<uint8_t> bytes;
  std::shared_ptr<const model::Model> model;
};

Fixture MakeModel(synth::FileType ft) {
  Fixture fx;
  synth::SynthConfig c;
  c.dim = 256;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn = 512;
  c.n_layers = 2;
  c.ctx_len = 1024;
  c.file_type = ft;
  c.seed = 11;
  gguf::GgufWriter w;
  EXPECT_TRUE(synth::BuildModel(c, tokenizer::BuiltinByteVocab(), nullptr, &w).ok());
  fx.bytes = std::move(w.WriteToBuffer()).value();
  auto f = gguf::GgufFile::Parse(fx.bytes);
  EXPECT_TRUE(f.ok());
  auto m = model::Model::FromGguf(std::move(f).value());
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  fx.model = std::move(m).value();
  return fx;
}

std::vector<int32_t> Prompt(size_t n, int n_vocab, uint32_t salt) {
  std::vector<int32_t> t(n);
  uint32_t s = 777u + salt * 7919u;
  for (auto& v : t) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(n_vocab));
  }
  return t;
}

// Runs the prompts through a fresh engine (all submitted at once) and returns each one's tokens.
std::vector<std::vector<int32_t>> RunAll(const Fixture& fx, const ServingConfig& cfg,
                                         const std::vector<std::vector<int32_t>>& prompts,
                                         int max_tokens, int64_t* preemptions = nullptr,
                                         int64_t* prefix_hits = nullptr, bool first_alone = false) {
  auto se = ServingEngine::Create(fx.model, cfg);
  if (!se.ok()) {
    ADD_FAILURE() << se.status().ToString();
    return {};
  }
  (*se)->Start();
  std::vector<sched::RequestHandle> hs;
  std::vector<sched::TokenEvent> first_events;
  for (const auto& p : prompts) {
    sched::SubmitRequest r;
    r.prompt = p;
    r.sampling = sampler::SamplingParams::Greedy();
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    auto h = (*se)->engine().Submit(std::move(r));
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    hs.push_back(std::move(h).value());
    // Let the first request finish before the others arrive (so its blocks are cached).
    if (first_alone && hs.size() == 1) first_events = hs[0].stream->DrainAll();
  }
  std::vector<std::vector<int32_t>> out;
  std::vector<std::vector<sched::TokenEvent>> events(hs.size());
  for (size_t i = 0; i < hs.size(); ++i) events[i] = hs[i].stream->DrainAll();
  if (first_alone && !hs.empty()) events[0] = first_events;
  for (size_t i = 0; i < hs.size(); ++i) {
    std::vector<int32_t> toks;
    for (const auto& ev : events[i]) {
      EXPECT_NE(ev.finish, sched::FinishReason::kError) << ev.error.ToString();
      if (ev.token >= 0) toks.push_back(ev.token);
    }
    out.push_back(std::move(toks));
  }
  auto st = (*se)->engine().Stats();
  if (preemptions) *preemptions = st.preemptions;
  if (prefix_hits) *prefix_hits = st.prefix_hit_tokens;
  (*se)->Stop();
  return out;
}

class ServingEngineTest : public ::testing::TestWithParam<synth::FileType> {};

TEST_P(ServingEngineTest, GreedyTokensIdenticalAloneAndInBatchOf16) {
  Fixture fx = MakeModel(GetParam());
  const int n_vocab = fx.model->config().n_vocab;
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 16; ++i)
    prompts.push_back(Prompt(3 + 11 * i, n_vocab, i));  // 3..168 tokens
  ServingConfig alone;
  alone.kv_cache.memory = "64MiB";
  alone.scheduler.max_num_seqs = 1;
  alone.threads = 1;
  alone.max_model_len = 256;
  std::vector<std::vector<int32_t>> want;
  want.reserve(prompts.size());
  for (const auto& p : prompts) want.push_back(RunAll(fx, alone, {p}, 12)[0]);

  ServingConfig batched = alone;
  batched.scheduler.max_num_seqs = 16;
  batched.scheduler.max_batched_tokens = 40;  // forces chunked prefill mixed with decodes
  batched.threads = 2;
  auto got = RunAll(fx, batched, prompts, 12);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(got[i].size(), 12u);
    EXPECT_EQ(got[i], want[i]) << "request " << i << " differs inside the batch";
  }
}

TEST_P(ServingEngineTest, PreemptionAndPrefixCacheKeepTokens) {
  Fixture fx = MakeModel(GetParam());
  const int n_vocab = fx.model->config().n_vocab;
  auto common = Prompt(64, n_vocab, 99);
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 8; ++i) {
    auto p = common;
    auto s = Prompt(5 + i, n_vocab, 100 + i);
    p.insert(p.end(), s.begin(), s.end());
    prompts.push_back(p);
  }
  ServingConfig big;
  big.kv_cache.memory = "64MiB";
  big.scheduler.max_num_seqs = 8;
  big.max_model_len = 128;
  big.kv_cache.prefix_cache = false;
  auto want = RunAll(fx, big, prompts, 16);

  ServingConfig cached = big;
  cached.kv_cache.prefix_cache = true;
  int64_t hits = 0;
  auto got_cached = RunAll(fx, cached, prompts, 16, nullptr, &hits, /*first_alone=*/true);
  EXPECT_EQ(got_cached, want);
  EXPECT_GT(hits, 0) << "the shared 64-token prefix should hit the prefix cache";

  // A pool of 16 blocks of 16 tokens: 8 sequences of ~90 tokens cannot all fit -> preemption.
  ServingConfig tiny = big;
  const auto& mc = fx.model->config();
  uint64_t block_bytes =
      static_cast<uint64_t>(mc.n_layers) * 2 * 16 * static_cast<uint64_t>(mc.kv_dim()) * 2;
  tiny.kv_cache.memory = std::to_string(block_bytes * 16 / 1024) + "KiB";
  int64_t preemptions = 0;
  auto got_tiny = RunAll(fx, tiny, prompts, 16, &preemptions);
  EXPECT_EQ(got_tiny, want);
  EXPECT_GT(preemptions, 0) << "the tiny pool should have forced preemptions";
}

// Submits every prompt as an embedding request at once (plus `generations` generation requests of
// 12 tokens) and returns the vectors.
std::vector<std::vector<float>> EmbedAll(const Fixture& fx, const ServingConfig& cfg,
                                         const std::vector<std::vector<int32_t>>& prompts,
                                         int generations = 0) {
  auto se = ServingEngine::Create(fx.model, cfg);
  if (!se.ok()) {
    ADD_FAILURE() << se.status().ToString();
    return {};
  }
  (*se)->Start();
  std::vector<sched::RequestHandle> hs, gens;
  for (int i = 0; i < generations; ++i) {
    sched::SubmitRequest r;
    r.prompt = Prompt(30, fx.model->config().n_vocab, 1000 + static_cast<uint32_t>(i));
    r.sampling = sampler::SamplingParams::Greedy();
    r.max_tokens = 12;
    r.ignore_eos = true;
    auto h = (*se)->engine().Submit(std::move(r));
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (h.ok()) gens.push_back(std::move(h).value());
  }
  for (const auto& p : prompts) {
    sched::SubmitRequest r;
    r.kind = sched::RequestKind::kEmbed;
    r.prompt = p;
    auto h = (*se)->engine().Submit(std::move(r));
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (h.ok()) hs.push_back(std::move(h).value());
  }
  std::vector<std::vector<float>> out;
  for (auto& h : hs) {
    auto events = h.stream->DrainAll();
    EXPECT_EQ(events.size(), 1u);
    if (events.empty()) continue;
    EXPECT_EQ(events.back().finish, sched::FinishReason::kStop) << events.back().error.ToString();
    out.push_back(events.back().embedding);
  }
  for (auto& g : gens) g.stream->DrainAll();
  (*se)->Stop();  // the last step has published its stats
  EXPECT_EQ((*se)->engine().Stats().embeddings, static_cast<int64_t>(prompts.size()));
  return out;
}

// The expected embedding from the independent fp64 reference: its final-normed hidden rows (with
// activations rounded to the engine's formats when `rounded`) summed and L2-normalised in double.
std::vector<double> ReferenceEmbedding(const Fixture& fx, const std::vector<int32_t>& tokens,
                                       bool rounded) {
  auto f = gguf::GgufFile::Parse(fx.bytes);
  EXPECT_TRUE(f.ok());
  auto ref = ::strata::testing::ReferenceModel::Create(**f);
  EXPECT_TRUE(ref.ok()) << ref.status().ToString();
  ref->set_round_activations(rounded);
  const auto rows = ref->FinalHidden(tokens);
  std::vector<double> acc(rows[0].size(), 0.0);
  for (const auto& r : rows)
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += r[i];
  double norm = 0;
  for (double x : acc) norm += x * x;
  for (double& x : acc) x /= std::sqrt(norm);
  return acc;
}

// max |got - want| / max |want|
double NormErr(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(got[i]) - want[i]));
    den = std::max(den, std::fabs(want[i]));
  }
  return num / std::max(den, 1e-30);
}

// Embedding requests through the engine with the real runner: 16 at once, chunked and mixed with
// generations on 2 threads, equal each one alone on 1 thread bit for bit, and agree with the fp64
// reference's pooled hidden states. (With F32 KV they were also checked bit-identical to the former
// model::Context path of /v1/embeddings before that path was deleted.)
TEST_P(ServingEngineTest, EmbeddingsBatchedEqualAloneAndThePreviousPath) {
  Fixture fx = MakeModel(GetParam());
  const int n_vocab = fx.model->config().n_vocab;
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 16; ++i)
    prompts.push_back(Prompt(1 + 9 * i, n_vocab, 40 + i));  // 1..136 tokens
  for (engine::kv::KvDType dtype : {kv::KvDType::kF32, kv::KvDType::kF16}) {
    SCOPED_TRACE(std::string(kv::KvDTypeName(dtype)));
    ServingConfig alone;
    alone.kv_cache.memory = "64MiB";
    alone.kv_cache.dtype = dtype;
    alone.scheduler.max_num_seqs = 1;
    alone.threads = 1;
    alone.max_model_len = 256;
    std::vector<std::vector<float>> want;
    want.reserve(prompts.size());
    for (const auto& p : prompts) want.push_back(EmbedAll(fx, alone, {p})[0]);
    ServingConfig batched = alone;
    batched.scheduler.max_num_seqs = 16;
    batched.scheduler.max_batched_tokens = 40;
    batched.threads = 2;
    auto got = EmbedAll(fx, batched, prompts, /*generations=*/3);
    ASSERT_EQ(got.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(got[i].size(), static_cast<size_t>(fx.model->config().dim));
      EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0)
          << "request " << i;
      if (i % 5 != 0) continue;  // the reference is slow: every fifth request
      // Plain reference: includes the activation-quantization error (as tests/golden); rounded:
      // only summation order, rounding flips and (F16) the KV rounding remain.
      const double plain = NormErr(got[i], ReferenceEmbedding(fx, prompts[i], false));
      const double rounded = NormErr(got[i], ReferenceEmbedding(fx, prompts[i], true));
      EXPECT_LT(plain, GetParam() == synth::FileType::kF16 ? 1e-2 : 0.15) << "request " << i;
      EXPECT_LT(rounded, 5e-2) << "request " << i;
      std::cout << "[ info ] " << synth::FileTypeName(GetParam()) << " kv "
                << kv::KvDTypeName(dtype) << " request " << i << " (" << prompts[i].size()
                << " tokens): error vs fp64 reference " << plain << ", rounded " << rounded << "\n";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, ServingEngineTest,
                         ::testing::Values(synth::FileType::kQ8_0, synth::FileType::kQ4_K_M,
                                           synth::FileType::kF16),
                         [](const auto& info) {
                           return std::string(synth::FileTypeName(info.param));
                         });

TEST(ServingConfigTest, RefusesBudgetTooSmallForOneSequence) {
  Fixture fx = MakeModel(synth::FileType::kQ8_0);
  ServingConfig c;
  c.kv_cache.memory = "1KiB";
  auto se = ServingEngine::Create(fx.model, c);
  ASSERT_FALSE(se.ok());
  EXPECT_NE(se.status().message().find("--kv-cache-memory"), std::string::npos)
      << se.status().message();
}

TEST(ServingConfigTest, NamesTheBadSchedulingFlag) {
  ServingConfig c;
  c.scheduler.max_prefill_tokens_with_decodes = -1;
  Status st = c.Validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--max-prefill-tokens-with-decodes"), std::string::npos)
      << st.message();
  c.scheduler.max_prefill_tokens_with_decodes = 128;
  EXPECT_TRUE(c.Validate().ok());
}

TEST(ServingConfigTest, LoraActiveSetSizeReachesTheScheduler) {
  Fixture fx = MakeModel(synth::FileType::kQ8_0);
  ServingConfig c;
  c.kv_cache.memory = "16MiB";
  c.lora.max_loras = 3;
  c.scheduler.max_loras = 7;  // derived: engine.lora wins
  auto se = ServingEngine::Create(fx.model, c);
  ASSERT_TRUE(se.ok()) << se.status().ToString();
  EXPECT_EQ((*se)->engine().scheduler().config().max_loras, 3);
  EXPECT_EQ((*se)->engine().scheduler().lora_slots().size(), 3u);
  EXPECT_EQ((*se)->engine().Stats().max_loras, 3);
  c.lora.max_loras = 0;
  auto bad = ServingEngine::Create(fx.model, c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("engine.lora.max_loras (--max-loras)"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace strata::engine::serving
