// Token sampling: logit bias, greedy, temperature, top-k, top-p, min-p,
// repetition/frequency/presence penalties, seeded randomness (same seed + same logits -> same
// tokens).
//
// Order of operations (as llama.cpp's default chain and vLLM apply them): logit bias (added; -100
// bans, +100 selects exclusively: LogitBias) -> penalties over the recent history -> banned tokens
// -> (temperature == 0: argmax, ties to the lower id) -> top-k -> top-p -> min-p -> temperature ->
// softmax -> draw with the seeded generator. LastLogprob reports the biased, penalised distribution
// (vLLM applies the bias as a logits processor, so its logprobs reflect it too). Thread contract:
// one Sampler per sequence, single-threaded. No heap allocation per token after construction.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace strata::engine::sampler {

// OpenAI's logit_bias entry for token `id`, `bias` in [-100, 100]. A bias strictly inside the range
// is added to the token's logit (as OpenAI and vLLM do). The ends are exact, so they hold on any
// logit scale (a peaky model can put the runner-up 100+ nats below the top): -100 bans the token
// (its logit becomes -inf), +100 selects exclusively among the +100 tokens (every other logit
// becomes -inf; the +100 tokens keep their own logits). OpenAI documents the ends as "a ban or
// exclusive selection of the relevant token".
struct LogitBias {
  int32_t id = 0;
  float bias = 0.0f;
};
inline constexpr float kMaxLogitBias = 100.0f;

struct SamplingParams {
  float temperature = 0.8f;  // 0 = greedy
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // 1: off
  float min_p = 0.05f;       // 0: off
  float repetition_penalty =
      1.0f;  // 1: off (llama.cpp/CTRL style: divide positive logits, multiply negative)
  float frequency_penalty = 0.0f;  // OpenAI style: - count * f
  float presence_penalty = 0.0f;   // OpenAI style: - (count > 0) * p
  int penalty_last_n = 64;         // history window for penalties (-1: whole history, 0: off)
  uint64_t seed = 0xC0FFEE;
  // Applied to the logits before everything else (LogitBias); ids must be < n_vocab (checked by
  // the request's Validate; the sampler skips ids outside its vocabulary). Empty: logits untouched.
  std::vector<LogitBias> logit_bias;

  static SamplingParams Greedy();
  // Rejects NaN/negative temperature, top_p outside (0, 1], min_p outside [0, 1], penalties that
  // are non-finite or repetition_penalty <= 0, logit_bias entries with a negative id or a bias
  // outside [-100, 100]; the message names the parameter.
  Status Validate() const;
};

// The seed of completion `index` (0-based) of a request seeded with `seed`: completion 0 uses
// `seed` itself (so a single completion samples exactly as with that seed alone); completion
// i > 0 uses SplitMix64(seed ^ (golden ratio * i)), so the streams of nearby seeds never overlap
// (with seed + i, seed 8's completions were seed 7's shifted by one).
uint64_t ChoiceSeed(uint64_t seed, int index);

class Sampler {
 public:
  Sampler(const SamplingParams& params, size_t n_vocab);

  // Picks the next token from `logits` (n_vocab values). `history` = all tokens so far (prompt +
  // generated) for the penalties; `banned` tokens are never chosen (e.g. EOG with --ignore-eos).
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> history,
                 std::span<const int32_t> banned = {});

  // Log-probabilities of the last Sample() call's distribution before truncation (log-softmax of
  // the penalised logits at temperature 1): filled on demand for `logprobs`. Not thread-safe (the
  // first call after Sample() caches the normaliser), like the rest of the sampler.
  float LastLogprob(int32_t id) const;

 private:
  SamplingParams p_;
  size_t n_vocab_;
  std::mt19937_64 rng_;
  std::vector<float> work_;   // penalised logits
  std::vector<int32_t> idx_;  // candidate ids
  std::vector<float> probs_;
  std::vector<uint32_t> counts_;  // token counts in the penalty window
  std::vector<int32_t>
      exclusive_;  // logit_bias +100 ids (in the vocabulary), fixed at construction
  std::vector<float> exclusive_logits_;  // their logits, saved while the others are masked
  void ApplyLogitBias(size_t n);
  // Log-sum-exp of work_ at the last call, computed by the first LastLogprob() after it (one pass
  // of n_vocab exps that requests without logprobs never pay).
  mutable float last_lse_ = 0.0f;
  mutable bool lse_valid_ = false;
  size_t last_n_ = 0;  // logits given to the last call
};

}  // namespace strata::engine::sampler
