// An independent, deliberately simple fp64 reference forward pass for llama/qwen2 GGUF models.
//
// It shares nothing with src/model: its own metadata reading, plain loops in double precision,
// no KV cache (every call recomputes the whole sequence), no threads. Weights are dequantized
// row by row with the scalar reference kernels (kernels/ref, tested separately on hand-built
// blocks); activations are never quantized. It exists to be obviously right, not fast.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"

namespace strata::testing {

class ReferenceModel {
 public:
  // `file` must outlive the ReferenceModel.
  static Result<ReferenceModel> Create(const gguf::GgufFile& file);

  // Runs the whole sequence and returns the logits at each position in `positions`
  // (indexes into tokens; empty = last position only).
  std::vector<std::vector<double>> Forward(const std::vector<int32_t>& tokens,
                                           std::vector<size_t> positions = {}) const;

  // The final-normed hidden state (the output projection's input, dim values) at every position.
  std::vector<std::vector<double>> FinalHidden(const std::vector<int32_t>& tokens) const;

  int n_vocab() const { return n_vocab_; }

  // When on, the input of every matrix product is first rounded to the activation format the
  // engine (and ggml) multiplies that weight type with: Q8_0 blocks for Q4_0/Q8_0 weights, Q8_K
  // blocks for K-quants, f16/bf16 for F16/BF16 weights. Everything else stays fp64. This isolates
  // the engine's arithmetic from the (legitimate) activation-quantization error, so the comparison
  // can be tight.
  void set_round_activations(bool on) { round_activations_ = on; }

 private:
  explicit ReferenceModel(const gguf::GgufFile& f) : f_(&f) {}
  // y = W x for a GGUF matrix [cols = x.size(), rows].
  std::vector<double> MatVec(const std::string& name, const std::vector<double>& x) const;
  std::vector<double> Vec(const std::string& name) const;
  std::vector<double> Row(const std::string& name, size_t row) const;

  const gguf::GgufFile* f_;
  bool neox_ = false;
  bool bias_ = false;
  int n_layers_ = 0, dim_ = 0, n_heads_ = 0, n_kv_ = 0, head_dim_ = 0, ffn_ = 0, n_vocab_ = 0,
      rope_dim_ = 0;
  double eps_ = 1e-5, base_ = 10000.0, linear_scale_ = 1.0;
  std::vector<double> freq_factors_;
  std::string output_name_;
  bool round_activations_ = false;
};

}  // namespace strata::testing
