// Model: a GGUF decoder-only transformer (llama family: Llama 2/3/3.x, Mistral, TinyLlama; qwen2)
// loaded for CPU inference.
//
// Ownership: Model owns the GgufFile (the mmap). Weights stay in their stored (possibly quantized)
// form and are read in place; only small vectors (norm weights, biases, rope frequency factors)
// are converted to f32 copies at load.
// Thread-safety: a Model is immutable after Load() and may be shared by many Contexts.
// Errors: Load() returns InvalidArgument naming the key/tensor that is missing or malformed, or
// Unimplemented for an architecture / tensor type we do not support (listing what is supported).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "gguf/gguf.h"
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
  int rope_dim = 0;                   // number of rotated dims per head (<= head_dim)
  RopeStyle rope_style = RopeStyle::kNorm;
  float rope_linear_scale = 1.0f;     // positions are divided by this (rope.scaling.type = linear)
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
  std::vector<float> attn_norm, ffn_norm;  // [dim]
  std::vector<float> bq, bk, bv;           // qwen2 only: [q_dim], [kv_dim], [kv_dim]
  kernels::WeightMatrix wq, wk, wv, wo;    // [q_dim x dim], [kv_dim x dim] x2, [dim x q_dim]
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

  // Writes the f32 embedding of `token` into out[0..dim). token must be in [0, n_vocab).
  void Embed(int32_t token, float* out) const;

 private:
  Model() = default;
  std::unique_ptr<gguf::GgufFile> file_;
  ModelConfig config_;
  kernels::WeightMatrix token_embd_, output_;
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;
  uint64_t weight_bytes_ = 0;
};

// Context: the state of one sequence (a contiguous f32 KV cache) and the scratch buffers of the
// forward pass. Single-threaded owner; uses the given pool for parallel work inside a step.
// After warm-up, Eval() of one token performs no heap allocation.
class Context {
 public:
  // n_ctx <= 0 means the model's context length capped at 4096.
  Context(const Model& model, int n_ctx, ThreadPool* pool);

  // Appends `tokens` at position n_past() and runs the forward pass.
  // Returns the logits of the last token ([n_vocab]) — or of every token ([n x n_vocab], row-major)
  // when all_logits. The span stays valid until the next Eval/Reset.
  // Errors: InvalidArgument for an empty batch or a token id out of range; OutOfRange when the
  // sequence would exceed n_ctx (message has both numbers).
  Result<std::span<const float>> Eval(std::span<const int32_t> tokens, bool all_logits = false);

  int n_past() const { return n_past_; }
  // Final-normed hidden states of the rows the last Eval returned logits for ([rows x dim]: every
  // token with all_logits, else the last one). Valid until the next Eval/Reset. (Used for embeddings.)
  std::span<const float> last_hidden() const { return {xn_.data(), hidden_rows_ * static_cast<size_t>(cfg_.dim)}; }
  int n_ctx() const { return n_ctx_; }
  void Reset() { n_past_ = 0; }

 private:
  void EnsureScratch(size_t n_tokens, bool all_logits);
  void Attention(int layer, size_t n_tokens);

  const Model& model_;
  const ModelConfig& cfg_;
  ThreadPool* pool_;
  int n_ctx_;
  int n_past_ = 0;
  std::vector<float> k_cache_, v_cache_;  // [layer][pos][kv_dim]
  Rope rope_;
  // Scratch: x [n x dim], xn [n x dim], q [n x q_dim], k,v [n x kv_dim], att [n x q_dim],
  // gate/up [n x ffn], logits, per-thread score rows.
  std::vector<float> x_, xn_, q_, k_, v_, att_, gate_, up_, logits_, scores_;
  size_t scratch_tokens_ = 0;
  size_t hidden_rows_ = 0;
};

}  // namespace strata::model
