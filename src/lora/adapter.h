// LoRA adapters (llama.cpp's GGUF LoRA format) in the f32 form the runner applies them in.
//
// File format (what llama.cpp's loader accepts; its rules are the contract):
//   - metadata: general.type = "adapter", adapter.type = "lora", general.architecture equal to the
//     base model's, adapter.lora.alpha (f32; absent or 0 = no alpha scaling);
//   - tensors "<base tensor name>.lora_a" and ".lora_b" in pairs (a lone half is an error naming
//     the tensor); "*_norm.weight" tensors are ignored; any other name is an error;
//   - for a base matrix W with ggml shape ne = [in, out]: lora_a ne = [in, rank], lora_b
//     ne = [rank, out] (so A is rank rows of `in`, B is `out` rows of `rank`, row-major);
//     token_embd.weight (ne = [dim, n_vocab]) is flipped: lora_a ne = [rank, n_vocab], lora_b
//     ne = [rank, dim];
//   - the base tensor must exist in the model, the shapes must match it, rank <= max_rank;
//   - weight types F32, F16, BF16, Q8_0 (converted to f32 at load).
//   - scale of every pair = user_scale * (alpha != 0 ? alpha / rank : 1), rank = lora_b ne[0].
// The product applied: y = W x + scale * B (A x) for the rows of requests using the adapter; for
// token_embd: e(t) += scale * B a_t, a_t = row t of A.
//
// Ownership: an Adapter owns its f32 copies (the file is closed after Load). Immutable and shared
// (shared_ptr<const Adapter>) between the registry, queued/running requests and the runner; a
// request holds its adapter alive, so unloading it never affects a running request.
// Thread-safety: immutable after construction; any thread.
// Errors: Load() returns InvalidArgument naming the file and the tensor/key that is wrong
// (missing pair half, unknown suffix, base tensor absent, shape mismatch, rank above max_rank,
// wrong general.type / adapter.type / architecture, unsupported weight type), NotFound when the
// file does not exist; never crashes or over-allocates on a corrupt file (the GGUF reader bounds
// every count and offset).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model.h"

namespace strata::lora {

// The per-layer matrices an adapter may target, in LayerWeights order.
enum class Target : uint8_t { kQ = 0, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumTargets = 7;
// "q", "k", "v", "o", "gate", "up", "down" (the names `strata synth-lora --targets` takes) and
// the GGUF base tensor suffix of each ("attn_q.weight", ..., "ffn_down.weight").
std::string_view TargetName(Target t);
std::string_view TargetTensorSuffix(Target t);

// One low-rank pair in f32, row-major: a = [rank x in], b = [out x rank].
// token_embd's pair is stored flipped as in the file: a = [n_vocab x rank], b = [dim x rank].
struct LoraPair {
  int rank = 0;
  int in = 0;   // columns of A (the base matrix's input width); n_vocab for token_embd
  int out = 0;  // rows of B (the base matrix's output height)
  float scale = 0.0f;
  std::vector<float> a, b;
  // A pair that changes nothing (rank 0 or scale 0): the runner skips it, so such an adapter
  // gives the base model's bits.
  bool Inert() const { return rank == 0 || scale == 0.0f; }
};

struct LoadOptions {
  float scale = 1.0f;  // the user's scale (llama.cpp --lora-scaled); 1 by default
  int max_rank = 16;   // --max-lora-rank: a pair of higher rank is refused
};

class Adapter {
 public:
  // Reads, validates against `base` and converts the adapter at `path`. `name` is what requests
  // call it (the registry's key).
  static Result<std::shared_ptr<const Adapter>> Load(const std::string& name,
                                                     const std::string& path,
                                                     const model::Model& base,
                                                     const LoadOptions& options);
  // An in-memory adapter (tests): layers.size() must equal the base's n_layers or be empty;
  // a missing target is a pair with rank 0. `digest` is taken as given.
  static std::shared_ptr<const Adapter> FromParts(
      std::string name, std::string digest, std::vector<std::array<LoraPair, kNumTargets>> layers,
      LoraPair output = {}, LoraPair token_embd = {});

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  // Identity of what the adapter computes: XXH3-128 (hex) of the file's bytes and the user scale.
  // Bound into the prefix-cache salt (SubmitRequest::adapter), so blocks never cross adapters and
  // a different file reloaded under the same name never reuses the old one's blocks.
  const std::string& digest() const { return digest_; }
  float alpha() const { return alpha_; }
  int max_rank() const { return max_rank_; }    // largest rank of any pair (0 when inert)
  size_t bytes() const { return bytes_; }       // f32 bytes held
  int num_pairs() const { return num_pairs_; }  // non-inert pairs

  // The pair for (layer, target), or nullptr when the adapter does not change that matrix (absent
  // or inert). layer must be in [0, n_layers).
  const LoraPair* Find(int layer, Target t) const;
  const LoraPair* output() const;      // output.weight (lm head), or nullptr
  const LoraPair* token_embd() const;  // token_embd.weight (flipped layout), or nullptr

 private:
  Adapter() = default;
  void Finish();  // computes max_rank_, bytes_, num_pairs_
  std::string name_, path_, digest_;
  float alpha_ = 0.0f;
  int max_rank_ = 0, num_pairs_ = 0;
  size_t bytes_ = 0;
  std::vector<std::array<LoraPair, kNumTargets>> layers_;
  LoraPair output_, token_embd_;
};

}  // namespace strata::lora
