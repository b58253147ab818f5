// Rope: rotary position embedding tables and rotation for one model, shared by the single-sequence
// Context and the engine's batched runner so both rotate with exactly the same float arithmetic
// (the runner's logits are compared bit-for-bit against Context's).
//
// Ownership: value type, owns its inverse-frequency table. Thread-safety: immutable after
// construction; Apply may run concurrently on distinct vectors.
#pragma once

#include <vector>

namespace strata::model {

struct ModelConfig;

class Rope {
 public:
  Rope() = default;
  // Builds the table from rope_base, rope_dim, rope_linear_scale and rope_freq_factors.
  explicit Rope(const ModelConfig& cfg);

  // Rotates the first rope_dim dims of each of `n_heads_x` head vectors (head_dim apart) in x, in
  // place, for position `pos`.
  void Apply(float* x, int n_heads_x, int pos) const;

 private:
  int head_dim_ = 0;
  int half_ = 0;                 // rope_dim / 2
  bool neox_ = false;            // RopeStyle::kNeox: pairs (i, i + half) instead of (2i, 2i + 1)
  std::vector<float> inv_freq_;  // [half], includes linear scale and freq factors
};

}  // namespace strata::model
