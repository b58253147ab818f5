#include "engine/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace strata::engine::sampler {

SamplingParams SamplingParams::Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 1;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

Status SamplingParams::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f)
    return Status::InvalidArgument("temperature must be a finite number >= 0");
  if (!std::isfinite(top_p) || top_p <= 0.0f || top_p > 1.0f)
    return Status::InvalidArgument("top_p must be in (0, 1]");
  if (!std::isfinite(min_p) || min_p < 0.0f || min_p > 1.0f)
    return Status::InvalidArgument("min_p must be in [0, 1]");
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f)
    return Status::InvalidArgument("repetition_penalty must be a finite number > 0");
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 2.0f)
    return Status::InvalidArgument("frequency_penalty must be in [-2, 2]");
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 2.0f)
    return Status::InvalidArgument("presence_penalty must be in [-2, 2]");
  if (penalty_last_n < -1) return Status::InvalidArgument("penalty_last_n must be >= -1");
  for (const LogitBias& b : logit_bias) {
    if (b.id < 0) return Status::InvalidArgument("logit_bias: token ids must be >= 0");
    if (!std::isfinite(b.bias) || std::fabs(b.bias) > kMaxLogitBias)
      return Status::InvalidArgument("logit_bias: biases must be in [-100, 100]");
  }
  return Status::Ok();
}

uint64_t ChoiceSeed(uint64_t seed, int index) {
  if (index == 0) return seed;
  // SplitMix64's finaliser over the seed offset by index golden-ratio steps.
  uint64_t z = seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index));
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Sampler::Sampler(const SamplingParams& params, size_t n_vocab)
    : p_(params),
      n_vocab_(n_vocab),
      rng_(params.seed),
      work_(n_vocab),
      idx_(n_vocab),
      probs_(n_vocab),
      counts_(n_vocab, 0) {
  for (const LogitBias& b : p_.logit_bias)
    if (b.bias >= kMaxLogitBias && b.id >= 0 && static_cast<size_t>(b.id) < n_vocab)
      exclusive_.push_back(b.id);
  exclusive_logits_.resize(exclusive_.size());
}

void Sampler::ApplyLogitBias(size_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (const LogitBias& b : p_.logit_bias) {
    if (b.id < 0 || static_cast<size_t>(b.id) >= n) continue;
    float& v = work_[static_cast<size_t>(b.id)];
    if (b.bias <= -kMaxLogitBias)
      v = kNegInf;
    else if (b.bias < kMaxLogitBias)
      v += b.bias;
  }
  if (exclusive_.empty()) return;
  for (size_t k = 0; k < exclusive_.size(); ++k)
    exclusive_logits_[k] = static_cast<size_t>(exclusive_[k]) < n
                               ? work_[static_cast<size_t>(exclusive_[k])]
                               : kNegInf;
  std::fill(work_.begin(), work_.begin() + static_cast<std::ptrdiff_t>(n), kNegInf);
  for (size_t k = 0; k < exclusive_.size(); ++k)
    if (static_cast<size_t>(exclusive_[k]) < n)
      work_[static_cast<size_t>(exclusive_[k])] = exclusive_logits_[k];
}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> history,
                        std::span<const int32_t> banned) {
  const size_t n = std::min(n_vocab_, logits.size());
  std::copy(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(n), work_.begin());
  if (!p_.logit_bias.empty()) ApplyLogitBias(n);

  // Penalties over the window of recent tokens.
  bool penalise =
      p_.repetition_penalty != 1.0f || p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f;
  if (penalise && p_.penalty_last_n != 0 && !history.empty()) {
    size_t window = p_.penalty_last_n < 0
                        ? history.size()
                        : std::min(history.size(), static_cast<size_t>(p_.penalty_last_n));
    auto recent = history.subspan(history.size() - window);
    for (int32_t t : recent)
      if (t >= 0 && static_cast<size_t>(t) < n) counts_[static_cast<size_t>(t)]++;
    for (int32_t t : recent) {
      if (t < 0 || static_cast<size_t>(t) >= n) continue;
      size_t i = static_cast<size_t>(t);
      uint32_t c = counts_[i];
      if (c == 0) continue;  // already applied
      float& v = work_[i];
      if (p_.repetition_penalty != 1.0f)
        v = v > 0 ? v / p_.repetition_penalty : v * p_.repetition_penalty;
      v -= static_cast<float>(c) * p_.frequency_penalty + p_.presence_penalty;
      counts_[i] = 0;
    }
  }
  for (int32_t b : banned)
    if (b >= 0 && static_cast<size_t>(b) < n)
      work_[static_cast<size_t>(b)] = -std::numeric_limits<float>::infinity();

  last_n_ = n;
  lse_valid_ = false;  // the log-sum-exp for logprobs is computed on demand (LastLogprob)

  if (p_.temperature <= 0.0f || p_.top_k == 1) {
    size_t best = 0;
    for (size_t i = 1; i < n; ++i)
      if (work_[i] > work_[best]) best = i;
    return static_cast<int32_t>(best);
  }

  // Candidates sorted by logit (descending, ties -> lower id).
  size_t m = n;
  for (size_t i = 0; i < n; ++i) idx_[i] = static_cast<int32_t>(i);
  auto cmp = [&](int32_t a, int32_t b) {
    float va = work_[static_cast<size_t>(a)], vb = work_[static_cast<size_t>(b)];
    return va > vb || (va == vb && a < b);
  };
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    m = static_cast<size_t>(p_.top_k);
    std::partial_sort(idx_.begin(), idx_.begin() + static_cast<std::ptrdiff_t>(m),
                      idx_.begin() + static_cast<std::ptrdiff_t>(n), cmp);
  } else {
    std::sort(idx_.begin(), idx_.begin() + static_cast<std::ptrdiff_t>(n), cmp);
  }
  // Drop banned (-inf) candidates.
  while (m > 1 && std::isinf(work_[static_cast<size_t>(idx_[m - 1])])) --m;

  // Softmax at temperature 1 over candidates for top-p / min-p.
  float top = work_[static_cast<size_t>(idx_[0])];
  double total = 0.0;
  for (size_t i = 0; i < m; ++i) {
    probs_[i] = std::exp(work_[static_cast<size_t>(idx_[i])] - top);
    total += probs_[i];
  }
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = m;
    for (size_t i = 0; i < m; ++i) {
      cum += probs_[i] / total;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    m = keep;
  }
  if (p_.min_p > 0.0f) {
    // probs_[0] == 1 (relative to the top), so min-p keeps p_i >= min_p * p_top.
    size_t keep = 1;
    while (keep < m && probs_[keep] >= p_.min_p) ++keep;
    m = keep;
  }
  // Temperature, then draw.
  double z = 0.0;
  for (size_t i = 0; i < m; ++i) {
    probs_[i] =
        static_cast<float>(std::exp((work_[static_cast<size_t>(idx_[i])] - top) / p_.temperature));
    z += probs_[i];
  }
  // Uniform double in [0, 1) from 53 random bits (independent of the library's distributions).
  double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0) * z;
  double acc = 0.0;
  for (size_t i = 0; i < m; ++i) {
    acc += probs_[i];
    if (u < acc) return idx_[i];
  }
  return idx_[m - 1];
}

float Sampler::LastLogprob(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= n_vocab_) return -std::numeric_limits<float>::infinity();
  if (!lse_valid_) {
    const size_t n = last_n_;
    float mx = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) mx = std::max(mx, work_[i]);
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(work_[i] - mx));
    last_lse_ = mx + static_cast<float>(std::log(sum));
    lse_valid_ = true;
  }
  return work_[static_cast<size_t>(id)] - last_lse_;
}

}  // namespace strata::engine::sampler
