// Test helpers: a deterministic engine simulation (FakeModelRunner + FakeClock, driven by Step())
// that checks KV invariants, the token budget and the sequence cap after every step, and an
// independent greedy reference computed straight from the fake model (no engine involved).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/sched/engine.h"
#include "engine/sched/fake_runner.h"

namespace strata::engine::sched::testing {

struct Completion {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  std::vector<TokenEvent> events;
};

// Pops every available event of a stream into per-index completions.
inline void Collect(RequestStream& s, std::map<int, Completion>* out) {
  while (auto ev = s.TryNext()) {
    Completion& c = (*out)[ev->index];
    c.events.push_back(*ev);
    if (ev->token >= 0) c.tokens.push_back(ev->token);
    if (ev->finish != FinishReason::kNone) c.finish = ev->finish;
  }
}

struct Sim {
  FakeClock clock;
  FakeRunnerConfig rcfg;
  kv::KvManagerConfig kcfg;
  SchedulerConfig scfg;
  std::unique_ptr<FakeModelRunner> runner;
  std::unique_ptr<Engine> engine;
  std::map<RequestId, std::shared_ptr<RequestStream>> streams;
  std::map<RequestId, std::map<int, Completion>> results;
  std::chrono::milliseconds step_time{10};
  int steps = 0;
  int max_step_loras = 0;  // the most distinct adapters seen in one step

  Sim(int num_blocks, SchedulerConfig sc, int block_size = 16, bool prefix_cache = true,
      int n_vocab = 64) {
    rcfg.n_vocab = n_vocab;
    rcfg.num_blocks = num_blocks;
    rcfg.block_size = block_size;
    kcfg.num_blocks = num_blocks;
    kcfg.block_size = block_size;
    kcfg.enable_prefix_cache = prefix_cache;
    scfg = sc;
    runner = std::make_unique<FakeModelRunner>(rcfg);
    FakeModelRunner* r = runner.get();
    auto e = Engine::Create(runner.get(), kcfg, scfg, &clock,
                            [r](std::span<const BlockCopy> c) { r->CopyBlocks(c); });
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engine = std::move(e).value();
  }

  Result<RequestId> Submit(SubmitRequest req) {
    auto h = engine->Submit(std::move(req));
    if (!h.ok()) return h.status();
    streams[h->id] = h->stream;
    return h->id;
  }

  // One step + every per-step check.
  void Step() {
    const size_t before = runner->batches().size();
    Status s = engine->Step();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ++steps;
    clock.Advance(step_time);
    ASSERT_TRUE(engine->kv().CheckInvariants().ok()) << engine->kv().CheckInvariants().ToString();
    ASSERT_TRUE(engine->scheduler().CheckInflight().ok())
        << engine->scheduler().CheckInflight().ToString();
    ASSERT_TRUE(engine->scheduler().CheckLoras().ok())
        << engine->scheduler().CheckLoras().ToString();
    const SchedulerOutput& out = engine->last_schedule();
    ASSERT_LE(out.num_tokens, scfg.max_batched_tokens);
    ASSERT_LE(static_cast<int>(out.seqs.size()), scfg.max_num_seqs);
    ASSERT_LE(engine->scheduler().num_running_seqs(), scfg.max_num_seqs);
    if (runner->batches().size() > before) {
      int tokens = 0;
      for (const auto& rs : runner->batches().back()) tokens += rs.num_tokens;
      ASSERT_LE(tokens, scfg.max_batched_tokens);
      ASSERT_LE(static_cast<int>(runner->batches().back().size()), scfg.max_num_seqs);
      std::vector<std::string> loras;  // distinct adapters (by digest) in the step
      for (const auto& rs : runner->batches().back())
        if (rs.lora != nullptr) loras.push_back(rs.lora->digest());
      std::sort(loras.begin(), loras.end());
      loras.erase(std::unique(loras.begin(), loras.end()), loras.end());
      ASSERT_LE(static_cast<int>(loras.size()), scfg.max_loras);
      max_step_loras = std::max(max_step_loras, static_cast<int>(loras.size()));
    }
    ASSERT_EQ(runner->num_errors(), 0);
    for (auto& [id, st] : streams) Collect(*st, &results[id]);
  }

  void RunToCompletion(int max_steps = 100000) {
    while (engine->HasWork()) {
      ASSERT_LT(steps, max_steps) << "no progress";
      Step();
      if (::testing::Test::HasFatalFailure()) return;
    }
    for (auto& [id, st] : streams) EXPECT_TRUE(st->complete()) << "request " << id;
    EXPECT_EQ(engine->kv().Stats().used_blocks, 0) << "block leak";
    EXPECT_TRUE(engine->kv().CheckInvariants().ok());
  }
};

// Greedy tokens of the fake model, computed directly (independent of the engine): argmax of the
// logits after the whole history, ties to the lower id; stops after an id in `stop`. `lora`: the
// fake model under that adapter (FakeModelRunner::ChainInit).
inline std::vector<int32_t> GreedyReference(const FakeRunnerConfig& rcfg,
                                            std::vector<int32_t> tokens, int max_tokens,
                                            const std::vector<int32_t>& stop = {},
                                            const lora::Adapter* lora = nullptr) {
  FakeModelRunner model(
      FakeRunnerConfig{rcfg.n_vocab, 0, rcfg.block_size, rcfg.peak, rcfg.seed, true});
  std::vector<float> row(static_cast<size_t>(rcfg.n_vocab));
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) {
    model.Logits(FakeModelRunner::Chain(tokens, lora), static_cast<int>(tokens.size()) - 1, row);
    const int32_t t = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    out.push_back(t);
    tokens.push_back(t);
    if (std::find(stop.begin(), stop.end(), t) != stop.end()) break;
  }
  return out;
}

inline std::vector<int32_t> MakePrompt(int len, uint32_t seed, int n_vocab = 64) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  uint64_t x = seed * 2654435761u + 12345;
  for (auto& t : p) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(n_vocab));
  }
  return p;
}

// A greedy request of `max_tokens` for `prompt` (the tests' common case).
inline SubmitRequest Req(std::vector<int32_t> prompt, int max_tokens,
                         Priority priority = Priority::kSilver) {
  SubmitRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = sampler::SamplingParams::Greedy();
  r.priority = priority;
  return r;
}

// A scheduler configuration with the given token budget and sequence cap.
inline SchedulerConfig Cfg(int max_batched_tokens = 2048, int max_num_seqs = 16) {
  SchedulerConfig c;
  c.max_batched_tokens = max_batched_tokens;
  c.max_num_seqs = max_num_seqs;
  return c;
}

// The terminal event's timeline of a completion (a test failure, and an empty timeline, when the
// completion has not finished or carries none).
inline const RequestTimeline& FinalTimeline(const Completion& c) {
  EXPECT_FALSE(c.events.empty());
  EXPECT_TRUE(!c.events.empty() && c.events.back().finish != FinishReason::kNone);
  EXPECT_TRUE(!c.events.empty() && c.events.back().timeline != nullptr);
  static const RequestTimeline kEmpty;
  return c.events.empty() || c.events.back().timeline == nullptr ? kEmpty
                                                                 : *c.events.back().timeline;
}

}  // namespace strata::engine::sched::testing
