// An independent, deliberately simple fp64 reference forward pass for llama/qwen2 GGUF models.
//
// It shares nothing with src/model: its own metadata reading, plain loops in double precision,
// no KV cache (every call recomputes the whole sequence), no threads. Weights are dequantized
// row by row with the scalar reference kernels (kernels/ref, tested separately on hand-built
// blocks); activations are never quantized. It exists to be obviously right, not fast.
//
// LoRA (set_lora): an adapter in llama.cpp's GGUF format is merged in fp64 — the product of a
// weight W with a pair "<W>.lora_a"/"<W>.lora_b" uses W + scale·B·A row by row, the embedding of
// token t adds scale·B·a_t (token_embd's flipped pair). It reads the adapter file itself and shares
// nothing with src/lora.
#pragma once

#include <cstdint>
#include <map>
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
  // (With an adapter, W sees the rounded input and the merged delta scale·B·A the unrounded one:
  // the engine multiplies the adapter's f32 matrices with f32 activations.)

  // Merges `adapter` (nullptr: none; it must outlive this object) at user scale `user_scale`:
  // scale = user_scale * alpha / rank, or user_scale when adapter.lora.alpha is absent or 0, as
  // llama.cpp. The pair on token_embd.weight applies to the embedding only (also when the output
  // projection is tied to it). The adapter must be valid for this model (what lora::Adapter::Load
  // accepts); a pair of the wrong shape aborts the test. Pairs on tensors that are not multiplied
  // (norms, biases) have no effect, as in llama.cpp.
  void set_lora(const gguf::GgufFile* adapter, double user_scale);

 private:
  explicit ReferenceModel(const gguf::GgufFile& f) : f_(&f) {}
  // y = W x for a GGUF matrix [cols = x.size(), rows].
  std::vector<double> MatVec(const std::string& name, const std::vector<double>& x) const;
  std::vector<double> Vec(const std::string& name) const;
  std::vector<double> Row(const std::string& name, size_t row) const;

  // One merged pair: a = [rank x in], b = [out x rank] (token_embd: a = [n_vocab x rank],
  // b = [dim x rank]), row-major, fp64.
  struct LoraPair {
    size_t rank = 0, in = 0, out = 0;
    double scale = 0;
    std::vector<double> a, b;
  };
  const LoraPair* FindLora(const std::string& name) const;

  const gguf::GgufFile* f_;
  std::map<std::string, LoraPair> lora_;  // by base tensor name
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
