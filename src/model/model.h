// Model: a GGUF decoder-only transformer (llama family: Llama 2/3/3.x, Mistral, TinyLlama; qwen2)
// loaded for CPU inference. The forward pass over it is engine/runner's CpuModelRunner (the only
// one); this module holds the weights and hyper-parameters.
//
// Ownership: Model owns the GgufFile (the mmap). Weights stay in their stored (possibly quantized)
// form and are read in place, except the matrices whose type has a faster layout at this CPU's
// kernel level (kernels::PreferredLayout: Q4_0/Q8_0, F16/BF16 at avx512): those are repacked once
// at load into buffers the Model owns, and their pages of the mapping are released, so resident
// memory stays about the file's size. Only small vectors (norm weights, biases, rope frequency
// factors) are converted to f32 copies at load. STRATA_WEIGHT_LAYOUT=rows keeps every matrix as
// stored. Thread-safety: a Model is immutable after Load() and may be shared by any number of
// forward passes (engine/runner) on any threads. Errors: Load() returns InvalidArgument naming the
// key/tensor that is missing or malformed, or Unimplemented for an architecture / tensor type we do
// not support (listing what is supported).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/page_memory.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/rope.h"

namespace strata::model {

enum class Arch { kLlama, kQwen2 };
std::string_view ArchName(Arch a);

enum class RopeStyle {
  kNorm,  // rotate adjacent pairs (x[2i], x[2i+1]) — llama (GGUF Q/K rows are permuted for this)
  kNeox,  // rotate (x[i], x[i + n_rot/2]) — qwen2
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  int n_layers = 0;
  int dim = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int ffn = 0;
  int n_vocab = 0;
  int ctx_len = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  int rope_dim = 0;  // number of rotated dims per head (<= head_dim)
  RopeStyle rope_style = RopeStyle::kNorm;
  float rope_linear_scale = 1.0f;  // positions are divided by this (rope.scaling.type = linear)
  std::vector<float> rope_freq_factors;  // rope_freqs.weight: theta_i /= factor[i]; empty = none
  bool tied_embeddings = false;
  bool qkv_bias = false;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  // Checks internal consistency (divisibility, positivity, ranges).
  Status Validate() const;
};

// Reads the hyper-parameters from GGUF metadata and tensor shapes.
Result<ModelConfig> ConfigFromGguf(const gguf::GgufFile& file);

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;      // [dim]
  std::vector<float> bq, bk, bv;               // qwen2 only: [q_dim], [kv_dim], [kv_dim]
  kernels::WeightMatrix wq, wk, wv, wo;        // [q_dim x dim], [kv_dim x dim] x2, [dim x q_dim]
  kernels::WeightMatrix w_gate, w_up, w_down;  // [ffn x dim] x2, [dim x ffn]
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> Load(const std::string& path);
  // Builds from an already-open file (takes ownership).
  static Result<std::unique_ptr<Model>> FromGguf(std::unique_ptr<gguf::GgufFile> file);

  const ModelConfig& config() const { return config_; }
  const gguf::GgufFile& gguf() const { return *file_; }
  const kernels::WeightMatrix& token_embd() const { return token_embd_; }
  const kernels::WeightMatrix& output() const { return output_; }  // == token_embd when tied
  const std::vector<float>& output_norm() const { return output_norm_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  // Bytes of all tensor data (what one decode step streams at most).
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Bytes of the matrices one decode step multiplies (every layer's 7 and the output matrix, as
  // stored in the file): what a token's decode streams from memory, the numerator of its roofline.
  uint64_t decode_bytes() const;

  // Writes the f32 embedding of `token` into out[0..dim). token must be in [0, n_vocab).
  void Embed(int32_t token, float* out) const;
  // Bytes of the repacked matrices (kernels::WeightLayout other than kRows); 0 when none.
  uint64_t repacked_bytes() const { return repacked_bytes_; }

 private:
  Model() = default;
  // Moves each matrix to kernels::PreferredLayout(w->type) where that is not the stored layout,
  // all of them into one mapping (repacked_).
  Status RepackAll(const std::vector<kernels::WeightMatrix*>& ws);
  std::unique_ptr<gguf::GgufFile> file_;
  ModelConfig config_;
  kernels::WeightMatrix token_embd_, output_;
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;
  uint64_t weight_bytes_ = 0;
  uint64_t repacked_bytes_ = 0;
  PageMemory repacked_;  // storage of the repacked matrices
};

}  // namespace strata::model
