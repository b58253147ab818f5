// Single-sequence forward pass. Why it is shaped this way:
// - every weight matrix is multiplied once per Eval for all tokens of the batch (MatMul is a GEMM
//   for prefill, a GEMV for decode), so prefill reads the weights once;
// - the KV cache is f32 (as the llama.cpp goldens were computed with F32 K/V), laid out
//   [layer][pos][kv_dim] so a head's keys for consecutive positions are a fixed stride apart;
// - attention is split over (token, head) pairs on the pool; each pair is computed by one thread,
//   so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/model.h"

namespace strata::model {

Context::Context(const Model& model, int n_ctx, ThreadPool* pool)
    : model_(model), cfg_(model.config()), pool_(pool), rope_(model.config()) {
  n_ctx_ = n_ctx > 0 ? std::min(n_ctx, cfg_.ctx_len) : std::min(cfg_.ctx_len, 4096);
  size_t kv = static_cast<size_t>(cfg_.n_layers) * static_cast<size_t>(n_ctx_) *
              static_cast<size_t>(cfg_.kv_dim());
  k_cache_.assign(kv, 0.0f);
  v_cache_.assign(kv, 0.0f);
}

void Context::EnsureScratch(size_t n, bool all_logits) {
  const size_t dim = static_cast<size_t>(cfg_.dim), qd = static_cast<size_t>(cfg_.q_dim());
  const size_t kvd = static_cast<size_t>(cfg_.kv_dim()), ffn = static_cast<size_t>(cfg_.ffn);
  if (n > scratch_tokens_) {
    x_.resize(n * dim);
    xn_.resize(n * dim);
    q_.resize(n * qd);
    k_.resize(n * kvd);
    v_.resize(n * kvd);
    att_.resize(n * qd);
    gate_.resize(n * ffn);
    up_.resize(n * ffn);
    scratch_tokens_ = n;
  }
  size_t threads = pool_ ? static_cast<size_t>(pool_->num_threads()) : 1;
  size_t need_scores = threads * static_cast<size_t>(n_ctx_);
  if (scores_.size() < need_scores) scores_.resize(need_scores);
  size_t need_logits = (all_logits ? n : 1) * static_cast<size_t>(cfg_.n_vocab);
  if (logits_.size() < need_logits) logits_.resize(need_logits);
}

void Context::Attention(int layer, size_t n) {
  const size_t hd = static_cast<size_t>(cfg_.head_dim), qd = static_cast<size_t>(cfg_.q_dim());
  const size_t kvd = static_cast<size_t>(cfg_.kv_dim());
  const size_t group = static_cast<size_t>(cfg_.n_heads / cfg_.n_kv_heads);
  const size_t n_heads = static_cast<size_t>(cfg_.n_heads);
  const size_t layer_off = static_cast<size_t>(layer) * static_cast<size_t>(n_ctx_) * kvd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));
  const float* kc = k_cache_.data() + layer_off;
  const float* vc = v_cache_.data() + layer_off;
  auto body = [&](size_t begin, size_t end, int thread) {
    float* scores = scores_.data() + static_cast<size_t>(thread) * static_cast<size_t>(n_ctx_);
    for (size_t item = begin; item < end; ++item) {
      // Tokens in the order 0, n-1, 1, n-2, ...: causal cost grows with t, so contiguous chunks of
      // items get equal work. Each (t, h) is computed the same way whichever thread runs it.
      const size_t ti = item / n_heads, h = item % n_heads;
      const size_t t = ti % 2 == 0 ? ti / 2 : n - 1 - ti / 2;
      size_t kvh = h / group;
      size_t len = static_cast<size_t>(n_past_) + t + 1;  // causal: positions 0..pos
      const float* q = q_.data() + t * qd + h * hd;
      float* out = att_.data() + t * qd + h * hd;
      kernels::Attend(q, kc + kvh * hd, vc + kvh * hd, kvd, len, hd, scale, scores, out);
    }
  };
  if (pool_) {
    pool_->ParallelFor(n * n_heads, body);
  } else {
    body(0, n * n_heads, 0);
  }
}

Result<std::span<const float>> Context::Eval(std::span<const int32_t> tokens, bool all_logits) {
  const size_t n = tokens.size();
  if (n == 0) return Status::InvalidArgument("empty batch: at least one token is required");
  if (static_cast<size_t>(n_past_) + n > static_cast<size_t>(n_ctx_))
    return Status::OutOfRange("sequence of " + std::to_string(static_cast<size_t>(n_past_) + n) +
                              " tokens exceeds the context size of " + std::to_string(n_ctx_));
  for (int32_t id : tokens)
    if (id < 0 || id >= cfg_.n_vocab)
      return Status::InvalidArgument("token id " + std::to_string(id) + " is out of range [0, " +
                                     std::to_string(cfg_.n_vocab) + ")");
  EnsureScratch(n, all_logits);
  const size_t dim = static_cast<size_t>(cfg_.dim), qd = static_cast<size_t>(cfg_.q_dim());
  const size_t kvd = static_cast<size_t>(cfg_.kv_dim()), ffn = static_cast<size_t>(cfg_.ffn);
  for (size_t t = 0; t < n; ++t) model_.Embed(tokens[t], x_.data() + t * dim);

  for (int l = 0; l < cfg_.n_layers; ++l) {
    const LayerWeights& L = model_.layers()[static_cast<size_t>(l)];
    for (size_t t = 0; t < n; ++t)
      kernels::RmsNorm(x_.data() + t * dim, L.attn_norm.data(), xn_.data() + t * dim, dim, cfg_.rms_eps);
    kernels::MatMul(L.wq, xn_.data(), n, q_.data(), pool_);
    kernels::MatMul(L.wk, xn_.data(), n, k_.data(), pool_);
    kernels::MatMul(L.wv, xn_.data(), n, v_.data(), pool_);
    if (cfg_.qkv_bias) {
      for (size_t t = 0; t < n; ++t) {
        kernels::Add(q_.data() + t * qd, L.bq.data(), qd);
        kernels::Add(k_.data() + t * kvd, L.bk.data(), kvd);
        kernels::Add(v_.data() + t * kvd, L.bv.data(), kvd);
      }
    }
    const size_t layer_off = static_cast<size_t>(l) * static_cast<size_t>(n_ctx_) * kvd;
    for (size_t t = 0; t < n; ++t) {
      int pos = n_past_ + static_cast<int>(t);
      rope_.Apply(q_.data() + t * qd, cfg_.n_heads, pos);
      rope_.Apply(k_.data() + t * kvd, cfg_.n_kv_heads, pos);
      std::memcpy(k_cache_.data() + layer_off + static_cast<size_t>(pos) * kvd, k_.data() + t * kvd, kvd * sizeof(float));
      std::memcpy(v_cache_.data() + layer_off + static_cast<size_t>(pos) * kvd, v_.data() + t * kvd, kvd * sizeof(float));
    }
    Attention(l, n);
    kernels::MatMul(L.wo, att_.data(), n, xn_.data(), pool_);
    kernels::Add(x_.data(), xn_.data(), n * dim);
    for (size_t t = 0; t < n; ++t)
      kernels::RmsNorm(x_.data() + t * dim, L.ffn_norm.data(), xn_.data() + t * dim, dim, cfg_.rms_eps);
    kernels::MatMul(L.w_gate, xn_.data(), n, gate_.data(), pool_);
    kernels::MatMul(L.w_up, xn_.data(), n, up_.data(), pool_);
    kernels::SiluMul(gate_.data(), up_.data(), gate_.data(), n * ffn);
    kernels::MatMul(L.w_down, gate_.data(), n, xn_.data(), pool_);
    kernels::Add(x_.data(), xn_.data(), n * dim);
  }
  n_past_ += static_cast<int>(n);

  const size_t first = all_logits ? 0 : n - 1;
  const size_t rows = n - first;
  for (size_t t = first; t < n; ++t)
    kernels::RmsNorm(x_.data() + t * dim, model_.output_norm().data(), xn_.data() + (t - first) * dim, dim,
                     cfg_.rms_eps);
  kernels::MatMul(model_.output(), xn_.data(), rows, logits_.data(), pool_);
  hidden_rows_ = rows;
  return std::span<const float>(logits_.data(), rows * static_cast<size_t>(cfg_.n_vocab));
}

}  // namespace strata::model
