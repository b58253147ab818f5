// `strata synth`: writes GGUF model files with random (but reproducible) weights.
//
// What it owns: a typed model configuration (SynthConfig) with presets and Validate(), the rules
// that pick each tensor's storage type for a file type (the same choices llama.cpp's quantizer
// makes, see README.md), the weight initialisation recipe, and the GGUF metadata the llama.cpp
// converter writes for the `llama` and `qwen2` architectures.
//
// Determinism: every value of a tensor is a function of (seed, tensor name, row) only, so the
// file is byte-identical for the same config + vocabulary + seed, whatever the thread count.
// The generator is our own (splitmix64 seeding, xoshiro256** streams, ziggurat normals), so
// results do not depend on the standard library's distributions.
//
// Threads: functions are reentrant; the ThreadPool passed in (may be null = 1 thread) is used for
// one ParallelFor at a time from the calling thread.
// Memory: quantized tensors are held in memory until the file is written (about the file size);
// float data is generated and quantized one row at a time per thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"
#include "tokenizer/tokenizer.h"

namespace strata::synth {

enum class Arch { kLlama, kQwen2 };
std::string_view ArchName(Arch arch);  // "llama", "qwen2"
std::optional<Arch> ParseArch(std::string_view name);

// A file type: the values are llama.cpp's `llama_ftype` (written as general.file_type). It fixes
// the base type of the weight matrices and the per-tensor mix rules (see TensorTypeFor).
enum class FileType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 7,
  kQ4_K_S = 14,
  kQ4_K_M = 15,
  kQ5_K_S = 16,
  kQ5_K_M = 17,
  kQ6_K = 18,
  kBF16 = 32,
};
// Accepts f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m q5_k_m (and q4_k_s, q5_k_s), any case.
// q4_k / q5_k are the "small" mixes (llama.cpp Q4_K_S / Q5_K_S).
std::optional<FileType> ParseFileType(std::string_view name);
std::string_view FileTypeName(FileType t);  // "q4_k_m", ...
// Element type of the weight matrices before the mix rules (F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q5_K/Q6_K).
DType BaseType(FileType t);

// Llama 3.1-style rope scaling, stored as the `rope_freqs.weight` tensor of per-frequency divisors.
struct RopeScaling {
  bool enabled = false;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  uint32_t original_ctx = 8192;
};

struct SynthConfig {
  Arch arch = Arch::kLlama;
  std::string name = "strata-synth";  // general.name
  uint32_t n_layers = 2;
  uint32_t dim = 64;
  uint32_t n_heads = 4;
  uint32_t n_kv_heads = 2;
  uint32_t head_dim = 0;  // 0: dim / n_heads
  uint32_t ffn = 128;
  uint32_t n_vocab = 0;  // 0: the vocabulary's size (otherwise it must equal it)
  uint32_t ctx_len = 2048;
  double rope_base = 10000.0;
  uint32_t rope_dim = 0;  // 0: head_dim
  double rms_eps = 1e-5;
  bool tied = false;      // no output.weight; token_embd is the output projection
  bool qkv_bias = false;  // attn_{q,k,v}.bias (required by qwen2)
  RopeScaling rope_scaling;
  FileType file_type = FileType::kQ8_0;
  uint64_t seed = 1;
  // Initialisation (see README.md). Negative: automatic (untied 0.8 / 1, tied 0.3 / 10).
  double out_row_sigma = -1.0;  // log-normal row scale of the output projection
  double residual_gain = -1.0;  // g in std(attn_output) = g/sqrt(fan_in), same for ffn_down

  uint32_t EffectiveHeadDim() const {
    return head_dim != 0 ? head_dim : (n_heads ? dim / n_heads : 0);
  }
  uint32_t EffectiveRopeDim() const { return rope_dim != 0 ? rope_dim : EffectiveHeadDim(); }
  double EffectiveOutRowSigma() const {
    return out_row_sigma >= 0 ? out_row_sigma : (tied ? 0.3 : 0.8);
  }
  double EffectiveResidualGain() const {
    return residual_gain >= 0 ? residual_gain : (tied ? 10.0 : 1.0);
  }

  // InvalidArgument naming the field and what to change. n_vocab == 0 is accepted here (it is
  // filled from the vocabulary by Synthesize).
  Status Validate() const;
};

// Presets: "tiny", "135m", "llama-3.2-1b", "qwen2-0.5b". NotFound for other names.
Result<SynthConfig> Preset(std::string_view name);
std::vector<std::string_view> PresetNames();

// The rope_freqs divisors (head_dim / 2 values) for Llama 3.1 scaling, computed as llama.cpp's
// converter does: frequency i = base^(-2i/head_dim), wavelength 2*pi/freq; short wavelengths keep
// 1, long ones get `factor`, the band in between is interpolated.
std::vector<float> Llama3RopeFactors(uint32_t head_dim, double rope_base, const RopeScaling& s);

// What a tensor is, for the type rules and the initialisation.
enum class TensorRole {
  kTokenEmbd,
  kOutput,
  kOutputNorm,
  kRopeFreqs,
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOutput,
  kAttnQBias,
  kAttnKBias,
  kAttnVBias,
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnDown,
};

// Storage type of a 2-D weight with row length `ne0` in layer `layer` (-1 for non-layer tensors)
// under file type `ft`; 1-D tensors (norms, biases, rope_freqs) are always F32 and not asked here.
DType TensorTypeFor(const SynthConfig& config, TensorRole role, int layer, uint64_t ne0);

struct TensorPlan {
  std::string name;
  TensorRole role;
  int layer = -1;
  DType type = DType::kF32;
  std::vector<uint64_t> shape;  // ggml order: shape[0] = row length
};

// Names, shapes and types of every tensor, in file order. `config.n_vocab` must be set (> 0).
Result<std::vector<TensorPlan>> PlanTensors(const SynthConfig& config);

struct SynthStats {
  uint64_t n_params = 0;
  uint64_t n_tensors = 0;
  uint64_t tensor_bytes = 0;  // sum of tensor data sizes
};

// Fills `writer` with the metadata and tensors of the model. config.n_vocab 0 is taken from
// `vocab`. Errors: invalid config, vocab/n_vocab mismatch, empty vocabulary.
Result<SynthStats> BuildModel(const SynthConfig& config, const tokenizer::Vocab& vocab,
                              ThreadPool* pool, gguf::GgufWriter* writer);

// BuildModel + WriteFile.
Result<SynthStats> WriteModel(const SynthConfig& config, const tokenizer::Vocab& vocab,
                              ThreadPool* pool, const std::string& path);

// ---- `strata synth-lora`: random LoRA adapters (llama.cpp's GGUF LoRA format) for a base model
// ----
//
// Pairs "<base>.lora_a" (ggml ne [in, rank]) / "<base>.lora_b" (ne [rank, out]) for every layer's
// targeted matrices, optionally output.weight and token_embd.weight (flipped: lora_a
// ne [rank, n_vocab], lora_b ne [rank, dim]). Values: A ~ U(-1/sqrt(in), 1/sqrt(in)) (token_embd:
// U(-1, 1)), B ~ U(-g/sqrt(rank), g/sqrt(rank)) with g = 1.5 (token_embd 0.75) — B is NOT zero as
// in PEFT's initialisation, so at scale 1 the adapter changes each product by about half the
// base's magnitude and visibly changes greedy outputs. Deterministic in (seed, tensor name, row).
// Types: f32, f16, bf16, q8_0; a q8_0 tensor whose row length is not a multiple of 32 (lora_b rows
// hold `rank` values) is written as f16, as llama.cpp's converter falls back.
struct SynthLoraOptions {
  std::string base_path;  // --base: the model the adapter is for (read for arch and shapes)
  std::string out_path;   // --out
  uint32_t rank = 8;
  // --targets: any of "q", "k", "v", "o", "gate", "up", "down" (lora::TargetName).
  std::vector<std::string> targets = {"q", "k", "v", "o", "gate", "up", "down"};
  uint64_t seed = 1;
  float alpha = 0.0f;  // adapter.lora.alpha, always written; 0 = no alpha scaling (scale = user's)
  DType type = DType::kF32;
  bool include_output = false;  // output.weight (refused for a tied base: it has none)
  bool include_embd = false;    // token_embd.weight
};

struct SynthLoraStats {
  uint64_t n_pairs = 0;
  uint64_t n_params = 0;
  uint64_t tensor_bytes = 0;
};

// Fills `writer` with the adapter's metadata and tensors for the base model `base`.
// Errors (InvalidArgument): rank 0 or above 65536, unknown / duplicate target, a type other than
// f32/f16/bf16/q8_0, a base tensor missing (e.g. --include-output on a tied model).
Result<SynthLoraStats> BuildLora(const gguf::GgufFile& base, const SynthLoraOptions& options,
                                 gguf::GgufWriter* writer);
// Opens options.base_path, BuildLora, writes options.out_path.
Result<SynthLoraStats> SynthLora(const SynthLoraOptions& options);

// Loads a vocabulary for --vocab-from: a `.gguf` (tokenizer.ggml.* keys) or a SentencePiece
// `.model`; the kind is decided by the file's magic bytes, not its name.
Result<tokenizer::Vocab> LoadVocab(const std::string& path);

}  // namespace strata::synth
