#include "model/rope.h"

#include <cmath>

#include "model/model.h"

namespace strata::model {

Rope::Rope(const ModelConfig& cfg)
    : head_dim_(cfg.head_dim), half_(cfg.rope_dim / 2), neox_(cfg.rope_style == RopeStyle::kNeox) {
  inv_freq_.resize(static_cast<size_t>(half_));
  // Computed in double then rounded once, so the table does not depend on evaluation order.
  for (int i = 0; i < half_; ++i) {
    double inv = std::pow(static_cast<double>(cfg.rope_base), -2.0 * i / cfg.rope_dim);
    inv /= static_cast<double>(cfg.rope_linear_scale);
    if (!cfg.rope_freq_factors.empty())
      inv /= static_cast<double>(cfg.rope_freq_factors[static_cast<size_t>(i)]);
    inv_freq_[static_cast<size_t>(i)] = static_cast<float>(inv);
  }
}

void Rope::Apply(float* x, int n_heads_x, int pos) const {
  for (int i = 0; i < half_; ++i) {
    float theta = static_cast<float>(pos) * inv_freq_[static_cast<size_t>(i)];
    float c = std::cos(theta), s = std::sin(theta);
    const int a = neox_ ? i : 2 * i;
    const int b = neox_ ? i + half_ : 2 * i + 1;
    for (int h = 0; h < n_heads_x; ++h) {
      float* v = x + static_cast<size_t>(h) * static_cast<size_t>(head_dim_);
      float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

}  // namespace strata::model
