#include "synth/synth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <tuple>

#include "base/ascii.h"
#include "base/checked.h"
#include "base/mapped_file.h"
#include "kernels/kernels.h"
#include "lora/adapter.h"

namespace strata::synth {
namespace {

// ---- Random numbers: splitmix64 to derive seeds, xoshiro256** streams, ziggurat normals ----

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

class RowRng {
 public:
  // One independent stream per (tensor key, row): rows can be generated in any order/thread.
  RowRng(uint64_t tensor_key, uint64_t row) {
    uint64_t sm = tensor_key ^ (row * 0xD1B54A32D192ED03ull);
    SplitMix64(&sm);
    for (auto& w : s_) w = SplitMix64(&sm);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // A standard normal by the ziggurat method (Marsaglia & Tsang's construction with 128 layers);
  // about 5x faster than Box-Muller here. Layer, sign and magnitude come from disjoint bits of
  // one 64-bit draw, so they are independent.
  inline double Normal();

 private:
  [[gnu::noinline]] double NormalSlow(uint64_t w);
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// Ziggurat tables for f(x) = exp(-x^2/2): 128 layers of equal area kZigV; layer 0 is the
// base rectangle [0, kZigR] plus the tail, with virtual width kZigV / f(kZigR).
constexpr int kZigLayers = 128;
constexpr double kZigR = 3.442619855899;
constexpr double kZigV = 9.91256303526217e-3;

struct ZigTables {
  double x[kZigLayers + 1];  // right edges, decreasing; x[kZigLayers] = 0
  double f[kZigLayers + 1];  // f(x[i]); f[0] = f(r), the base layer's top
  double ratio[kZigLayers];  // x[i + 1] / x[i]: below it the point lies in the inner box
  ZigTables() {
    auto fx = [](double v) { return std::exp(-0.5 * v * v); };
    x[0] = kZigV / fx(kZigR);
    x[1] = kZigR;
    for (int i = 1; i < kZigLayers - 1; ++i) {
      const double y = fx(x[i]) + kZigV / x[i];
      x[i + 1] = y >= 1.0 ? 0.0 : std::sqrt(-2.0 * std::log(y));
    }
    x[kZigLayers] = 0.0;
    for (int i = 0; i <= kZigLayers; ++i) f[i] = fx(x[i]);
    f[0] = fx(kZigR);
    for (int i = 0; i < kZigLayers; ++i) ratio[i] = x[i + 1] / x[i];
  }
};

const ZigTables& Zig() {
  static const ZigTables kTables;
  return kTables;
}

double RowRng::Normal() {
  const ZigTables& z = Zig();
  const uint64_t w = Next();
  const int i = static_cast<int>(w & (kZigLayers - 1));
  const double u = static_cast<double>(w >> 11) * 0x1.0p-53;  // [0, 1)
  // Fast path (~99% of draws): the point lies in the box under layer i.
  if (u < z.ratio[i]) [[likely]]
    return (w & kZigLayers) ? -u * z.x[i] : u * z.x[i];
  return NormalSlow(w);
}

double RowRng::NormalSlow(uint64_t w) {
  const ZigTables& z = Zig();
  for (;;) {
    const int i = static_cast<int>(w & (kZigLayers - 1));
    const double sign = (w & kZigLayers) ? -1.0 : 1.0;
    const double u = static_cast<double>(w >> 11) * 0x1.0p-53;
    if (u < z.ratio[i]) return sign * u * z.x[i];
    if (i == 0) {
      // Tail beyond r: exponential proposals accepted against the Gaussian (Marsaglia 1964).
      double a, b;
      do {
        a = -std::log(1.0 - Uniform()) / kZigR;
        b = -std::log(1.0 - Uniform());
      } while (2.0 * b < a * a);
      return sign * (kZigR + a);
    }
    // Wedge of layer i, between heights f(x[i]) and f(x[i + 1]): accept under the curve.
    const double xv = u * z.x[i];
    const double y = z.f[i] + Uniform() * (z.f[i + 1] - z.f[i]);
    if (y < std::exp(-0.5 * xv * xv)) return sign * xv;
    w = Next();
  }
}

uint64_t TensorKey(uint64_t seed, std::string_view name) {
  uint64_t sm = seed;
  uint64_t a = SplitMix64(&sm);
  uint64_t b = Fnv1a64(name);
  uint64_t mix = a ^ (b * 0x9E3779B97F4A7C15ull);
  return SplitMix64(&mix);
}

// ---- Config helpers ----

struct FileTypeEntry {
  FileType type;
  std::string_view name;
};
constexpr FileTypeEntry kFileTypes[] = {
    {FileType::kF32, "f32"},       {FileType::kF16, "f16"},   {FileType::kBF16, "bf16"},
    {FileType::kQ8_0, "q8_0"},     {FileType::kQ4_0, "q4_0"}, {FileType::kQ4_K_S, "q4_k"},
    {FileType::kQ5_K_S, "q5_k"},   {FileType::kQ6_K, "q6_k"}, {FileType::kQ4_K_M, "q4_k_m"},
    {FileType::kQ5_K_M, "q5_k_m"},
};

bool IsQuantized(DType t) { return t != DType::kF32 && t != DType::kF16 && t != DType::kBF16; }

uint32_t BlockSize(DType t) {
  auto tr = GetDTypeTraits(t);
  return tr ? tr->block_size : 1;
}

// llama.cpp's "use more bits" layer pick for the *_M mixes: the first and last eighth of the
// layers and every third layer in between.
bool UseMoreBits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// Row length not a multiple of the block size: llama.cpp falls back Q4_K->Q5_0, Q5_K->Q5_1,
// Q6_K->Q8_0; our kernels have no Q5_0/Q5_1, so every K-quant falls back to Q8_0. When even
// that does not fit (row length not a multiple of 32) the tensor is stored as F16.
DType Fallback(DType t, uint64_t ne0) {
  if (ne0 % BlockSize(t) == 0) return t;
  if (t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K) t = DType::kQ8_0;
  if (ne0 % BlockSize(t) == 0) return t;
  return DType::kF16;
}

constexpr uint32_t kMaxDim = uint32_t{1} << 20;
constexpr uint32_t kMaxLayers = 1024;
constexpr uint64_t kMaxParams = uint64_t{1} << 36;

bool IsMatrix(TensorRole r) {
  switch (r) {
    case TensorRole::kTokenEmbd:
    case TensorRole::kOutput:
    case TensorRole::kAttnQ:
    case TensorRole::kAttnK:
    case TensorRole::kAttnV:
    case TensorRole::kAttnOutput:
    case TensorRole::kFfnGate:
    case TensorRole::kFfnUp:
    case TensorRole::kFfnDown:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string_view ArchName(Arch arch) { return arch == Arch::kQwen2 ? "qwen2" : "llama"; }

std::optional<Arch> ParseArch(std::string_view name) {
  const std::string l = AsciiStrToLower(name);
  if (l == "llama") return Arch::kLlama;
  if (l == "qwen2") return Arch::kQwen2;
  return std::nullopt;
}

std::optional<FileType> ParseFileType(std::string_view name) {
  const std::string l = AsciiStrToLower(name);
  if (l == "q4_k_s") return FileType::kQ4_K_S;
  if (l == "q5_k_s") return FileType::kQ5_K_S;
  for (const auto& e : kFileTypes)
    if (e.name == l) return e.type;
  return std::nullopt;
}

std::string_view FileTypeName(FileType t) {
  for (const auto& e : kFileTypes)
    if (e.type == t) return e.name;
  return "unknown";
}

DType BaseType(FileType t) {
  switch (t) {
    case FileType::kF32:
      return DType::kF32;
    case FileType::kF16:
      return DType::kF16;
    case FileType::kBF16:
      return DType::kBF16;
    case FileType::kQ8_0:
      return DType::kQ8_0;
    case FileType::kQ4_0:
      return DType::kQ4_0;
    case FileType::kQ4_K_S:
    case FileType::kQ4_K_M:
      return DType::kQ4_K;
    case FileType::kQ5_K_S:
    case FileType::kQ5_K_M:
      return DType::kQ5_K;
    case FileType::kQ6_K:
      return DType::kQ6_K;
  }
  return DType::kF32;
}

Status SynthConfig::Validate() const {
  auto bad = [](const std::string& msg) { return Status::InvalidArgument("synth config: " + msg); };
  if (n_layers == 0) return bad("n_layers is 0; use at least 1 layer");
  if (n_layers > kMaxLayers)
    return bad(fmt::format("n_layers {} exceeds {}", n_layers, kMaxLayers));
  for (auto [field, v] : {std::pair<const char*, uint32_t>{"dim", dim},
                          {"n_heads", n_heads},
                          {"n_kv_heads", n_kv_heads},
                          {"ffn", ffn},
                          {"ctx_len", ctx_len}}) {
    if (v == 0) return bad(fmt::format("{} is 0; it must be positive", field));
  }
  for (auto [field, v] : {std::pair<const char*, uint32_t>{"dim", dim},
                          {"n_heads", n_heads},
                          {"n_kv_heads", n_kv_heads},
                          {"ffn", ffn},
                          {"head_dim", head_dim},
                          {"n_vocab", n_vocab},
                          {"rope_dim", rope_dim}}) {
    if (v > kMaxDim) return bad(fmt::format("{} {} exceeds the limit {}", field, v, kMaxDim));
  }
  if (n_heads % n_kv_heads != 0)
    return bad(fmt::format("n_kv_heads {} does not divide n_heads {}", n_kv_heads, n_heads));
  if (head_dim == 0 && dim % n_heads != 0)
    return bad(fmt::format("n_heads {} does not divide dim {}; change --heads or set --head-dim",
                           n_heads, dim));
  const uint32_t hd = EffectiveHeadDim();
  if (hd == 0 || hd % 2 != 0) return bad(fmt::format("head_dim {} must be even and positive", hd));
  const uint32_t rd = EffectiveRopeDim();
  if (rd % 2 != 0 || rd > hd)
    return bad(fmt::format("rope_dim {} must be even and at most head_dim {}", rd, hd));
  if (!(rope_base > 0) || !std::isfinite(rope_base))
    return bad(fmt::format("rope_base {} must be a positive number", rope_base));
  if (!(rms_eps > 0) || !std::isfinite(rms_eps) || rms_eps >= 1)
    return bad(fmt::format("rms_eps {} must be in (0, 1)", rms_eps));
  if (arch == Arch::kQwen2 && !qkv_bias) return bad("arch qwen2 requires q/k/v biases (qkv_bias)");
  if (arch == Arch::kQwen2 && rope_scaling.enabled)
    return bad("llama3 rope scaling (rope_freqs) is only written for arch llama");
  if (rope_scaling.enabled) {
    const auto& s = rope_scaling;
    if (!(s.factor >= 1) || !std::isfinite(s.factor))
      return bad(fmt::format("rope scaling factor {} must be >= 1", s.factor));
    if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor) ||
        !std::isfinite(s.high_freq_factor))
      return bad(fmt::format("rope scaling needs 0 < low_freq_factor ({}) < high_freq_factor ({})",
                             s.low_freq_factor, s.high_freq_factor));
    if (s.original_ctx == 0) return bad("rope scaling original_ctx is 0");
  }
  if (!ParseFileType(FileTypeName(file_type))) return bad("unknown file type");
  if (out_row_sigma > 4 || !std::isfinite(out_row_sigma))
    return bad(fmt::format("out_row_sigma {} must be at most 4", out_row_sigma));
  if (residual_gain > 1000 || !std::isfinite(residual_gain))
    return bad(fmt::format("residual_gain {} must be at most 1000", residual_gain));
  // Parameter count with overflow checks (all factors are below 2^20, layers below 2^10).
  const uint64_t q = uint64_t{n_heads} * hd, kv = uint64_t{n_kv_heads} * hd;
  const uint64_t per_layer = 2 * uint64_t{dim} + uint64_t{dim} * (q + 2 * kv) + q * dim +
                             3 * uint64_t{dim} * ffn + (qkv_bias ? q + 2 * kv : 0);
  const uint64_t embd = uint64_t{dim} * n_vocab * (tied ? 1 : 2);
  const uint64_t total = per_layer * n_layers + embd + dim;
  if (total > kMaxParams)
    return bad(fmt::format("{} parameters exceed the limit of {}; make the model smaller", total,
                           kMaxParams));
  return Status::Ok();
}

namespace {

// The presets other than "tiny" (which is the SynthConfig defaults), each a real model's shape:
// arch, layers, dim, heads, KV heads, FFN, ctx, rope base, rms eps, tied, qkv bias, rope scaling
// (the fields PresetFields ties, in its order).
using PresetShape = std::tuple<Arch, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t,
                               double, double, bool, bool, RopeScaling>;
struct PresetRow {
  std::string_view name;
  PresetShape shape;
};
constexpr PresetRow kPresets[] = {
    {"135m", {Arch::kLlama, 12, 768, 12, 12, 2048, 2048, 10000.0, 1e-5, false, false, {}}},
    {"llama-3.2-1b",
     {Arch::kLlama, 16, 2048, 32, 8, 8192, 131072, 500000.0, 1e-5, false, false,
      RopeScaling{true, 32.0, 1.0, 4.0, 8192}}},
    {"qwen2-0.5b", {Arch::kQwen2, 24, 896, 14, 2, 4864, 32768, 1e6, 1e-6, true, true, {}}},
};

auto PresetFields(SynthConfig& c) {
  return std::tie(c.arch, c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.ffn, c.ctx_len, c.rope_base,
                  c.rms_eps, c.tied, c.qkv_bias, c.rope_scaling);
}

}  // namespace

Result<SynthConfig> Preset(std::string_view name) {
  SynthConfig c;
  c.name = "strata-synth-" + std::string(name);
  // Defaults of SynthConfig: llama, 2 layers, dim 64, 4 heads, 2 KV heads, FFN 128, ctx 2048.
  if (name == "tiny") return c;
  for (const PresetRow& p : kPresets) {
    if (p.name != name) continue;
    PresetFields(c) = p.shape;
    return c;
  }
  std::string known;
  for (std::string_view n : PresetNames()) known += (known.empty() ? "" : ", ") + std::string(n);
  return Status::NotFound(fmt::format("unknown synth preset '{}' (known: {})", name, known));
}

std::vector<std::string_view> PresetNames() {
  std::vector<std::string_view> names = {"tiny"};
  for (const PresetRow& p : kPresets) names.push_back(p.name);
  return names;
}

std::vector<float> Llama3RopeFactors(uint32_t head_dim, double rope_base, const RopeScaling& s) {
  // Computed in float32 like the converter (torch float32 frequencies).
  std::vector<float> out;
  const float base = static_cast<float>(rope_base);
  const float factor = static_cast<float>(s.factor);
  const float lo = static_cast<float>(s.low_freq_factor),
              hi = static_cast<float>(s.high_freq_factor);
  const float old_ctx = static_cast<float>(s.original_ctx);
  const float low_freq_wavelen = old_ctx / lo;
  const float high_freq_wavelen = old_ctx / hi;
  for (uint32_t i = 0; i < head_dim / 2; ++i) {
    const float freq =
        1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(head_dim));
    const float wavelen = 2.0f * std::numbers::pi_v<float> / freq;
    if (wavelen < high_freq_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      out.push_back(factor);
    } else {
      const float smooth = (old_ctx / wavelen - lo) / (hi - lo);
      out.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return out;
}

DType TensorTypeFor(const SynthConfig& config, TensorRole role, int layer, uint64_t ne0) {
  const FileType ft = config.file_type;
  const DType base = BaseType(ft);
  if (!IsQuantized(base)) return base;
  DType t = base;
  const int n = static_cast<int>(config.n_layers);
  const bool output_like =
      role == TensorRole::kOutput || (config.tied && role == TensorRole::kTokenEmbd);
  if (output_like) {
    // The output projection gets more bits: Q6_K unless the file is Q8_0 (kept), or Q8_0 when the
    // row length does not fit the base type's blocks.
    if (ne0 % BlockSize(base) != 0) {
      t = DType::kQ8_0;
    } else if (base != DType::kQ8_0) {
      t = DType::kQ6_K;
    }
  } else if (role == TensorRole::kAttnV) {
    if ((ft == FileType::kQ4_K_M || ft == FileType::kQ5_K_M) && UseMoreBits(layer, n)) {
      t = DType::kQ6_K;
    } else if (ft == FileType::kQ4_K_S && layer < 4) {
      t = DType::kQ5_K;
    }
  } else if (role == TensorRole::kFfnDown) {
    if ((ft == FileType::kQ4_K_M || ft == FileType::kQ5_K_M) && UseMoreBits(layer, n)) {
      t = DType::kQ6_K;
    } else if (ft == FileType::kQ4_K_S && layer < n / 8) {
      t = DType::kQ5_K;
    }
  }
  return Fallback(t, ne0);
}

Result<std::vector<TensorPlan>> PlanTensors(const SynthConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  if (config.n_vocab == 0) return Status::InvalidArgument("synth config: n_vocab is 0");
  const uint64_t dim = config.dim, hd = config.EffectiveHeadDim();
  const uint64_t q = config.n_heads * hd, kv = config.n_kv_heads * hd, ffn = config.ffn;
  std::vector<TensorPlan> plan;
  auto add = [&](std::string name, TensorRole role, int layer, std::vector<uint64_t> shape) {
    DType type = IsMatrix(role) ? TensorTypeFor(config, role, layer, shape[0]) : DType::kF32;
    plan.push_back(TensorPlan{std::move(name), role, layer, type, std::move(shape)});
  };
  add("token_embd.weight", TensorRole::kTokenEmbd, -1, {dim, config.n_vocab});
  if (config.rope_scaling.enabled) add("rope_freqs.weight", TensorRole::kRopeFreqs, -1, {hd / 2});
  for (uint32_t l = 0; l < config.n_layers; ++l) {
    const int li = static_cast<int>(l);
    auto nm = [&](std::string_view what) { return fmt::format("blk.{}.{}", l, what); };
    add(nm("attn_norm.weight"), TensorRole::kAttnNorm, li, {dim});
    add(nm("attn_q.weight"), TensorRole::kAttnQ, li, {dim, q});
    if (config.qkv_bias) add(nm("attn_q.bias"), TensorRole::kAttnQBias, li, {q});
    add(nm("attn_k.weight"), TensorRole::kAttnK, li, {dim, kv});
    if (config.qkv_bias) add(nm("attn_k.bias"), TensorRole::kAttnKBias, li, {kv});
    add(nm("attn_v.weight"), TensorRole::kAttnV, li, {dim, kv});
    if (config.qkv_bias) add(nm("attn_v.bias"), TensorRole::kAttnVBias, li, {kv});
    add(nm("attn_output.weight"), TensorRole::kAttnOutput, li, {q, dim});
    add(nm("ffn_norm.weight"), TensorRole::kFfnNorm, li, {dim});
    add(nm("ffn_gate.weight"), TensorRole::kFfnGate, li, {dim, ffn});
    add(nm("ffn_up.weight"), TensorRole::kFfnUp, li, {dim, ffn});
    add(nm("ffn_down.weight"), TensorRole::kFfnDown, li, {ffn, dim});
  }
  add("output_norm.weight", TensorRole::kOutputNorm, -1, {dim});
  if (!config.tied) add("output.weight", TensorRole::kOutput, -1, {dim, config.n_vocab});
  return plan;
}

namespace {

// How the values of a tensor are drawn.
struct InitSpec {
  enum class Kind { kNormal, kUniform, kRopeFreqs } kind = Kind::kNormal;
  double std = 1.0;           // kNormal
  double row_sigma = 0.0;     // kNormal: each row multiplied by exp(N(0, row_sigma^2))
  double lo = 0.8, hi = 1.2;  // kUniform
};

InitSpec InitFor(const SynthConfig& c, TensorRole role) {
  const double dim = c.dim, hd = c.EffectiveHeadDim();
  const double g = c.EffectiveResidualGain();
  InitSpec s;
  switch (role) {
    case TensorRole::kTokenEmbd:
      s.std = 0.5;
      if (c.tied) s.row_sigma = c.EffectiveOutRowSigma();
      break;
    case TensorRole::kOutput:
      s.std = 0.5;
      s.row_sigma = c.EffectiveOutRowSigma();
      break;
    case TensorRole::kOutputNorm:
    case TensorRole::kAttnNorm:
    case TensorRole::kFfnNorm:
      s.kind = InitSpec::Kind::kUniform;
      break;
    case TensorRole::kRopeFreqs:
      s.kind = InitSpec::Kind::kRopeFreqs;
      break;
    case TensorRole::kAttnQ:
    case TensorRole::kAttnK:
      s.std = 2.0 / std::sqrt(dim);
      break;
    case TensorRole::kAttnV:
    case TensorRole::kFfnGate:
    case TensorRole::kFfnUp:
      s.std = 1.0 / std::sqrt(dim);
      break;
    case TensorRole::kAttnOutput:
      s.std = g / std::sqrt(c.n_heads * hd);
      break;
    case TensorRole::kFfnDown:
      s.std = g / std::sqrt(static_cast<double>(c.ffn));
      break;
    case TensorRole::kAttnQBias:
    case TensorRole::kAttnKBias:
    case TensorRole::kAttnVBias:
      s.std = 0.3;
      break;
  }
  return s;
}

void FillRow(const InitSpec& spec, uint64_t key, uint64_t row, float* out, size_t n) {
  RowRng rng(key, row);
  if (spec.kind == InitSpec::Kind::kUniform) {
    for (size_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(spec.lo + (spec.hi - spec.lo) * rng.Uniform());
    return;
  }
  double scale = spec.std;
  if (spec.row_sigma > 0) scale *= std::exp(spec.row_sigma * rng.Normal());
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(rng.Normal() * scale);
}

Result<std::vector<uint8_t>> MakeTensorData(const SynthConfig& c, const TensorPlan& t,
                                            ThreadPool* pool) {
  const uint64_t ne0 = t.shape[0];
  const uint64_t rows = t.shape.size() > 1 ? t.shape[1] : 1;
  auto rb = RowBytes(t.type, ne0);
  if (!rb)
    return Status::Internal(
        fmt::format("tensor '{}': row of {} not storable as {}", t.name, ne0, DTypeName(t.type)));
  auto total = CheckedMul(*rb, rows);
  if (!total) return Status::InvalidArgument(fmt::format("tensor '{}' is too large", t.name));
  std::vector<uint8_t> data(*total);
  const InitSpec spec = InitFor(c, t.role);
  if (spec.kind == InitSpec::Kind::kRopeFreqs) {
    std::vector<float> f = Llama3RopeFactors(c.EffectiveHeadDim(), c.rope_base, c.rope_scaling);
    if (f.size() * sizeof(float) != data.size())
      return Status::Internal("rope_freqs size mismatch");
    std::memcpy(data.data(), f.data(), data.size());
    return data;
  }
  const uint64_t key = TensorKey(c.seed, t.name);
  const uint64_t row_bytes = *rb;
  const DType type = t.type;
  auto work = [&](size_t begin, size_t end, int) {
    std::vector<float> buf(ne0);
    for (size_t r = begin; r < end; ++r) {
      FillRow(spec, key, r, buf.data(), ne0);
      if (type == DType::kF32) {
        std::memcpy(data.data() + r * row_bytes, buf.data(), row_bytes);
      } else {
        kernels::QuantizeRow(type, buf.data(), data.data() + r * row_bytes, ne0);
      }
    }
  };
  // Small tensors are not worth waking the workers for.
  if (pool == nullptr || rows * ne0 < (uint64_t{1} << 16)) {
    work(0, rows, 0);
  } else {
    pool->ParallelFor(rows, work);
  }
  return data;
}

Status CheckVocab(const tokenizer::Vocab& v) {
  const size_t n = v.tokens.size();
  if (n == 0) return Status::InvalidArgument("synth: the vocabulary has no tokens");
  if (n > kMaxDim)
    return Status::InvalidArgument(fmt::format("synth: vocabulary of {} tokens is too large", n));
  if (!v.scores.empty() && v.scores.size() != n)
    return Status::InvalidArgument(
        fmt::format("synth: vocabulary has {} scores for {} tokens", v.scores.size(), n));
  if (!v.types.empty() && v.types.size() != n)
    return Status::InvalidArgument(
        fmt::format("synth: vocabulary has {} token types for {} tokens", v.types.size(), n));
  for (const tokenizer::SpecialTokenId& t : tokenizer::kSpecialTokenIds) {
    const int32_t id = v.*t.id;
    if (id >= static_cast<int64_t>(n))
      return Status::InvalidArgument(
          fmt::format("synth: vocabulary {} id {} is out of range ({} tokens)", t.name, id, n));
  }
  return Status::Ok();
}

void SetMetadata(const SynthConfig& c, const tokenizer::Vocab& v, gguf::GgufWriter* w) {
  using gguf::Value;
  using gguf::ValueType;
  auto u32 = [](uint64_t x) { return Value::Uint(ValueType::kUint32, x); };
  const std::string a(ArchName(c.arch));
  w->Set("general.architecture", Value::String(a));
  w->Set("general.name", Value::String(c.name));
  w->Set("general.file_type", u32(static_cast<uint32_t>(c.file_type)));
  w->Set("general.quantization_version", u32(2));
  w->Set("general.alignment", u32(32));
  w->Set(a + ".vocab_size", u32(c.n_vocab));
  w->Set(a + ".context_length", u32(c.ctx_len));
  w->Set(a + ".embedding_length", u32(c.dim));
  w->Set(a + ".block_count", u32(c.n_layers));
  w->Set(a + ".feed_forward_length", u32(c.ffn));
  w->Set(a + ".attention.head_count", u32(c.n_heads));
  w->Set(a + ".attention.head_count_kv", u32(c.n_kv_heads));
  if (c.EffectiveHeadDim() * c.n_heads != c.dim) {
    // Only needed when the head size is not dim / n_heads (as the converter does).
    w->Set(a + ".attention.key_length", u32(c.EffectiveHeadDim()));
    w->Set(a + ".attention.value_length", u32(c.EffectiveHeadDim()));
  }
  w->Set(a + ".attention.layer_norm_rms_epsilon", Value::Float32(static_cast<float>(c.rms_eps)));
  w->Set(a + ".rope.freq_base", Value::Float32(static_cast<float>(c.rope_base)));
  w->Set(a + ".rope.dimension_count", u32(c.EffectiveRopeDim()));

  const std::string model =
      !v.model.empty() ? v.model : (v.kind == tokenizer::Vocab::Kind::kBpe ? "gpt2" : "llama");
  w->Set("tokenizer.ggml.model", Value::String(model));
  if (!v.pre.empty()) w->Set("tokenizer.ggml.pre", Value::String(v.pre));
  w->Set("tokenizer.ggml.tokens", Value::StringArray(v.tokens));
  if (!v.scores.empty()) w->Set("tokenizer.ggml.scores", Value::Float32Array(v.scores));
  std::vector<int32_t> types(v.tokens.size(), static_cast<int32_t>(tokenizer::TokenType::kNormal));
  for (size_t i = 0; i < v.types.size(); ++i) types[i] = static_cast<int32_t>(v.types[i]);
  w->Set("tokenizer.ggml.token_type", Value::Int32Array(std::move(types)));
  if (!v.merges.empty()) w->Set("tokenizer.ggml.merges", Value::StringArray(v.merges));
  for (const tokenizer::SpecialTokenId& t : tokenizer::kSpecialTokenIds) {
    const int32_t id = v.*t.id;
    if (id >= 0) w->Set(t.gguf_key, u32(static_cast<uint32_t>(id)));
  }
  w->Set("tokenizer.ggml.add_bos_token", Value::Bool(v.add_bos));
  w->Set("tokenizer.ggml.add_eos_token", Value::Bool(v.add_eos));
  if (v.kind == tokenizer::Vocab::Kind::kSpm)
    w->Set("tokenizer.ggml.add_space_prefix", Value::Bool(v.add_space_prefix));
  if (!v.chat_template.empty()) w->Set("tokenizer.chat_template", Value::String(v.chat_template));
}

}  // namespace

Result<SynthStats> BuildModel(const SynthConfig& config, const tokenizer::Vocab& vocab,
                              ThreadPool* pool, gguf::GgufWriter* writer) {
  RETURN_IF_ERROR(CheckVocab(vocab));
  SynthConfig c = config;
  const auto n_tokens = static_cast<uint32_t>(vocab.tokens.size());
  if (c.n_vocab == 0) {
    c.n_vocab = n_tokens;
  } else if (c.n_vocab != n_tokens) {
    return Status::InvalidArgument(fmt::format(
        "synth config: n_vocab {} does not match the vocabulary's {} tokens", c.n_vocab, n_tokens));
  }
  ASSIGN_OR_RETURN(std::vector<TensorPlan> plan, PlanTensors(c));
  SetMetadata(c, vocab, writer);
  SynthStats stats;
  for (const TensorPlan& t : plan) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> data, MakeTensorData(c, t, pool));
    uint64_t ne = 1;
    for (uint64_t d : t.shape) ne *= d;
    stats.n_params += ne;
    stats.tensor_bytes += data.size();
    ++stats.n_tensors;
    RETURN_IF_ERROR(writer->AddTensor(t.name, t.type, t.shape, std::move(data)));
  }
  return stats;
}

Result<SynthStats> WriteModel(const SynthConfig& config, const tokenizer::Vocab& vocab,
                              ThreadPool* pool, const std::string& path) {
  gguf::GgufWriter writer;
  ASSIGN_OR_RETURN(SynthStats stats, BuildModel(config, vocab, pool, &writer));
  RETURN_IF_ERROR(writer.WriteFile(path));
  return stats;
}

namespace {

constexpr double kLoraGain = 1.5;       // B's half-width is g / sqrt(rank)
constexpr double kLoraEmbdGain = 0.75;  // token_embd: the delta is about half the embedding's std
constexpr uint32_t kMaxLoraRank = 65536;

struct LoraTensorSpec {
  std::string name;
  std::vector<uint64_t> shape;  // ggml ne
  double half_width;            // values ~ U(-half_width, half_width)
};

// The pairs' tensors for one base matrix of ne [in, out] (token_embd: [dim, n_vocab], flipped).
void AddLoraSpecs(const std::string& base, uint64_t in, uint64_t out, uint32_t rank, bool embd,
                  std::vector<LoraTensorSpec>* specs) {
  const double r = rank;
  if (embd) {
    specs->push_back({base + ".lora_a", {rank, out}, 1.0});
    specs->push_back({base + ".lora_b", {rank, in}, kLoraEmbdGain / std::sqrt(r)});
  } else {
    specs->push_back({base + ".lora_a", {in, rank}, 1.0 / std::sqrt(static_cast<double>(in))});
    specs->push_back({base + ".lora_b", {rank, out}, kLoraGain / std::sqrt(r)});
  }
}

Result<std::vector<std::string_view>> LoraTargetSuffixes(const std::vector<std::string>& names) {
  std::vector<std::string_view> out;
  for (const std::string& n : names) {
    std::optional<std::string_view> suffix;
    for (int t = 0; t < lora::kNumTargets; ++t)
      if (lora::TargetName(static_cast<lora::Target>(t)) == n)
        suffix = lora::TargetTensorSuffix(static_cast<lora::Target>(t));
    if (!suffix)
      return Status::InvalidArgument(
          fmt::format("synth-lora: unknown target '{}' (known: q, k, v, o, gate, up, down)", n));
    if (std::find(out.begin(), out.end(), *suffix) != out.end())
      return Status::InvalidArgument(fmt::format("synth-lora: target '{}' given twice", n));
    out.push_back(*suffix);
  }
  return out;
}

Result<std::vector<LoraTensorSpec>> PlanLora(const gguf::GgufFile& base, const SynthLoraOptions& o,
                                             const std::string& arch) {
  ASSIGN_OR_RETURN(std::vector<std::string_view> suffixes, LoraTargetSuffixes(o.targets));
  ASSIGN_OR_RETURN(uint64_t n_layers, base.GetUint(arch + ".block_count"));
  std::vector<LoraTensorSpec> specs;
  auto add = [&](const std::string& name, bool embd) -> Status {
    const gguf::TensorInfo* t = base.FindTensor(name);
    if (t == nullptr || t->shape.size() != 2)
      return Status::InvalidArgument(
          fmt::format("synth-lora: the base model has no 2-D tensor '{}'{}", name,
                      name == "output.weight" ? " (tied embeddings: drop --include-output)" : ""));
    AddLoraSpecs(name, t->shape[0], t->shape[1], o.rank, embd, &specs);
    return Status::Ok();
  };
  if (o.include_embd) RETURN_IF_ERROR(add("token_embd.weight", true));
  for (uint64_t l = 0; l < n_layers && l < kMaxLayers; ++l)
    for (std::string_view suffix : suffixes)
      RETURN_IF_ERROR(add(fmt::format("blk.{}.{}", l, suffix), false));
  if (o.include_output) RETURN_IF_ERROR(add("output.weight", false));
  return specs;
}

Result<std::vector<uint8_t>> MakeLoraTensor(const LoraTensorSpec& spec, uint64_t seed, DType type) {
  const uint64_t ne0 = spec.shape[0], rows = spec.shape[1];
  auto rb = RowBytes(type, ne0);
  auto total = rb ? CheckedMul(*rb, rows) : std::nullopt;
  if (!total)
    return Status::InvalidArgument(fmt::format("synth-lora: tensor '{}' is too large", spec.name));
  std::vector<uint8_t> data(*total);
  std::vector<float> buf(ne0);
  const uint64_t key = TensorKey(seed, spec.name);
  for (uint64_t r = 0; r < rows; ++r) {
    RowRng rng(key, r);
    for (float& v : buf) v = static_cast<float>((2.0 * rng.Uniform() - 1.0) * spec.half_width);
    if (type == DType::kF32) {
      std::memcpy(data.data() + r * *rb, buf.data(), *rb);
    } else {
      kernels::QuantizeRow(type, buf.data(), data.data() + r * *rb, ne0);
    }
  }
  return data;
}

}  // namespace

Result<SynthLoraStats> BuildLora(const gguf::GgufFile& base, const SynthLoraOptions& o,
                                 gguf::GgufWriter* writer) {
  if (o.rank == 0 || o.rank > kMaxLoraRank)
    return Status::InvalidArgument(
        fmt::format("synth-lora: rank {} is out of range [1, {}]", o.rank, kMaxLoraRank));
  if (o.type != DType::kF32 && o.type != DType::kF16 && o.type != DType::kBF16 &&
      o.type != DType::kQ8_0)
    return Status::InvalidArgument(fmt::format(
        "synth-lora: type {} is not an adapter type (f32, f16, bf16, q8_0)", DTypeName(o.type)));
  if (!std::isfinite(o.alpha)) return Status::InvalidArgument("synth-lora: alpha must be finite");
  ASSIGN_OR_RETURN(std::string arch, base.GetString("general.architecture"));
  ASSIGN_OR_RETURN(std::vector<LoraTensorSpec> specs, PlanLora(base, o, arch));
  using gguf::Value;
  writer->Set("general.architecture", Value::String(arch));
  writer->Set("general.type", Value::String("adapter"));
  writer->Set("general.name", Value::String("strata-synth-lora"));
  writer->Set("general.alignment", Value::Uint(gguf::ValueType::kUint32, 32));
  writer->Set("adapter.type", Value::String("lora"));
  writer->Set("adapter.lora.alpha", Value::Float32(o.alpha));
  SynthLoraStats stats;
  for (const LoraTensorSpec& spec : specs) {
    // lora_b rows hold `rank` values: Q8_0 needs 32 per block, else F16 (as llama.cpp converts).
    const DType type = Fallback(o.type, spec.shape[0]);
    ASSIGN_OR_RETURN(std::vector<uint8_t> data, MakeLoraTensor(spec, o.seed, type));
    stats.n_params += spec.shape[0] * spec.shape[1];
    stats.tensor_bytes += data.size();
    RETURN_IF_ERROR(writer->AddTensor(spec.name, type, spec.shape, std::move(data)));
  }
  stats.n_pairs = specs.size() / 2;
  return stats;
}

Result<SynthLoraStats> SynthLora(const SynthLoraOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> base, gguf::GgufFile::Open(options.base_path));
  gguf::GgufWriter writer;
  ASSIGN_OR_RETURN(SynthLoraStats stats, BuildLora(*base, options, &writer));
  RETURN_IF_ERROR(writer.WriteFile(options.out_path));
  return stats;
}

Result<tokenizer::Vocab> LoadVocab(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  const auto bytes = file->bytes();
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "GGUF", 4) == 0) {
    ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> g, gguf::GgufFile::Open(path));
    auto v = tokenizer::VocabFromGguf(*g);
    if (!v.ok()) return v.status().WithContext(path);
    return std::move(v).value();
  }
  auto v = tokenizer::VocabFromSentencePieceModel(bytes);
  if (!v.ok()) return v.status().WithContext(path + " (read as a SentencePiece .model)");
  return std::move(v).value();
}

}  // namespace strata::synth
