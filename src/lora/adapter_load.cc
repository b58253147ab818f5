// Adapter::Load: reads a llama.cpp GGUF LoRA adapter, validates it against the base model with
// llama.cpp's loader rules (see adapter.h and README.md) and converts every pair to f32.
//
// Why the checks come in this order: metadata first (a model file given as an adapter fails on
// general.type before anything else), then the tensor names (pairs, suffixes), then for each pair
// the base tensor, the shapes and the rank — all before a single f32 buffer is allocated, so a
// hostile file can make us allocate at most rank * (in + out) floats per pair of shapes that the
// base model itself has (and the GGUF reader has already bounded every tensor by the file size).
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "lora/adapter.h"

namespace strata::lora {
namespace {

constexpr std::string_view kSuffixA = ".lora_a";
constexpr std::string_view kSuffixB = ".lora_b";
constexpr std::string_view kSkippedSuffix = "_norm.weight";
constexpr std::string_view kTokenEmbd = "token_embd.weight";
constexpr std::string_view kOutput = "output.weight";

// What Load() fills: the slots of the Adapter (moved into it at the end).
struct Parts {
  std::vector<std::array<LoraPair, kNumTargets>> layers;
  LoraPair output, token_embd;
};

struct PairTensors {
  const gguf::TensorInfo* a = nullptr;
  const gguf::TensorInfo* b = nullptr;
};

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// ggml's ne[i]: dimensions past the stored ones are 1.
uint64_t Ne(const gguf::TensorInfo& t, size_t i) { return i < t.shape.size() ? t.shape[i] : 1; }

std::string Shape(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

bool IsAdapterType(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0;
}

std::string Digest(std::span<const uint8_t> bytes, float user_scale) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  XXH3_128bits_update(state, bytes.data(), bytes.size());
  unsigned char scale_bytes[sizeof(float)];
  std::memcpy(scale_bytes, &user_scale, sizeof(float));
  XXH3_128bits_update(state, scale_bytes, sizeof(scale_bytes));
  const XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

// "blk.<N>.<suffix>" → (N, target) when suffix is one of the per-layer matrices we apply.
bool ParseLayerTarget(std::string_view name, int* layer, Target* target) {
  constexpr std::string_view kBlk = "blk.";
  if (name.substr(0, kBlk.size()) != kBlk) return false;
  name.remove_prefix(kBlk.size());
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  int n = 0;
  auto [end, ec] = std::from_chars(name.data(), name.data() + dot, n);
  if (ec != std::errc() || end != name.data() + dot || n < 0) return false;
  const std::string_view rest = name.substr(dot + 1);
  for (int t = 0; t < kNumTargets; ++t) {
    if (rest == TargetTensorSuffix(static_cast<Target>(t))) {
      *layer = n;
      *target = static_cast<Target>(t);
      return true;
    }
  }
  return false;
}

// The rules of one Load(): the file's path (for messages), the base model and the options.
class AdapterLoader {
 public:
  AdapterLoader(const std::string& path, const model::Model& base, const LoadOptions& options)
      : path_(path), base_(base), options_(options) {}

  Status Fail(const std::string& msg) const { return Status::InvalidArgument(path_ + ": " + msg); }

  Status CheckMetadata(const gguf::GgufFile& f, float* alpha) const;
  Result<std::map<std::string, PairTensors>> CollectPairs(const gguf::GgufFile& f) const;
  // Validates one pair against its base tensor and, when the runner applies it, converts it into
  // its slot of `out`; a pair whose base is not a matrix we apply is validated and left out.
  Status AddPair(const std::string& base_name, const PairTensors& p, float alpha, Parts* out) const;

 private:
  Status CheckShapes(const std::string& base_name, const gguf::TensorInfo& base,
                     const PairTensors& p, bool token_embd) const;
  Status ToF32(const gguf::TensorInfo& t, std::vector<float>* out) const;
  LoraPair* SlotFor(const std::string& base_name, Parts* out) const;

  const std::string& path_;
  const model::Model& base_;
  const LoadOptions& options_;
};

}  // namespace

Status AdapterLoader::CheckMetadata(const gguf::GgufFile& f, float* alpha) const {
  auto expect = [&](std::string_view key, const std::string& want) -> Status {
    auto got = f.GetStringOr(key, "");
    if (!got.ok()) return Fail(got.status().message());
    if (got->empty()) return Fail(fmt::format("{} is missing, expected '{}'", key, want));
    if (*got != want) return Fail(fmt::format("{} is '{}', expected '{}'", key, *got, want));
    return Status::Ok();
  };
  RETURN_IF_ERROR(expect("general.type", "adapter"));
  auto base_arch = base_.gguf().GetString("general.architecture");
  if (!base_arch.ok()) return Fail("base model: " + base_arch.status().message());
  auto arch = f.GetStringOr("general.architecture", "");
  if (!arch.ok()) return Fail(arch.status().message());
  if (*arch != *base_arch)
    return Fail(
        fmt::format("general.architecture is '{}', the base model's is '{}'", *arch, *base_arch));
  RETURN_IF_ERROR(expect("adapter.type", "lora"));
  auto a = f.GetFloatOr("adapter.lora.alpha", 0.0);
  if (!a.ok()) return Fail(a.status().message());
  if (!std::isfinite(*a) || std::fabs(*a) > 1e30)
    return Fail(fmt::format("adapter.lora.alpha {} is not a finite f32", *a));
  *alpha = static_cast<float>(*a);
  return Status::Ok();
}

Result<std::map<std::string, PairTensors>> AdapterLoader::CollectPairs(
    const gguf::GgufFile& f) const {
  std::map<std::string, PairTensors> pairs;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const std::string_view name = t.name;
    if (EndsWith(name, kSuffixA)) {
      pairs[std::string(name.substr(0, name.size() - kSuffixA.size()))].a = &t;
    } else if (EndsWith(name, kSuffixB)) {
      pairs[std::string(name.substr(0, name.size() - kSuffixB.size()))].b = &t;
    } else if (EndsWith(name, kSkippedSuffix)) {
      continue;  // llama.cpp ignores norm vectors in adapters; so do we
    } else {
      return Fail(
          fmt::format("tensor '{}' has an unexpected suffix (expected .lora_a or .lora_b)", name));
    }
  }
  for (const auto& [base_name, p] : pairs) {
    if (p.a == nullptr)
      return Fail(fmt::format("tensor '{}{}' has no lora_a", base_name, kSuffixB));
    if (p.b == nullptr)
      return Fail(fmt::format("tensor '{}{}' has no lora_b", base_name, kSuffixA));
  }
  return pairs;
}

Status AdapterLoader::CheckShapes(const std::string& base_name, const gguf::TensorInfo& base,
                                  const PairTensors& p, bool token_embd) const {
  const gguf::TensorInfo& a = *p.a;
  const gguf::TensorInfo& b = *p.b;
  for (const gguf::TensorInfo* t : {p.a, p.b}) {
    if (Ne(*t, 2) != 1 || Ne(*t, 3) != 1)
      return Fail(
          fmt::format("tensor '{}' has shape {}; a LoRA tensor is 2-D", t->name, Shape(*t)));
  }
  auto mismatch = [&](const gguf::TensorInfo& t, std::string_view want) {
    return Fail(fmt::format("tensor '{}' shape {} does not match base '{}' {} (expected {})",
                            t.name, Shape(t), base_name, Shape(base), want));
  };
  if (token_embd) {
    // Flipped: a ne = [rank, n_vocab], b ne = [rank, dim].
    if (Ne(a, 1) != Ne(base, 1)) return mismatch(a, fmt::format("[rank, {}]", Ne(base, 1)));
    if (Ne(b, 1) != Ne(base, 0)) return mismatch(b, fmt::format("[rank, {}]", Ne(base, 0)));
    if (Ne(a, 0) != Ne(b, 0))
      return Fail(fmt::format("tensors '{}' {} and '{}' {} disagree on the rank (ne[0])", a.name,
                              Shape(a), b.name, Shape(b)));
  } else {
    if (Ne(a, 0) != Ne(base, 0)) return mismatch(a, fmt::format("[{}, rank]", Ne(base, 0)));
    if (Ne(b, 1) != Ne(base, 1)) return mismatch(b, fmt::format("[rank, {}]", Ne(base, 1)));
    if (Ne(a, 1) != Ne(b, 0))
      return Fail(
          fmt::format("tensor '{}' {} is not transposed: its ne[1] must equal the rank "
                      "ne[0] of '{}' {}",
                      a.name, Shape(a), b.name, Shape(b)));
  }
  const uint64_t rank = Ne(b, 0);
  if (rank > static_cast<uint64_t>(std::max(0, options_.max_rank)))
    return Fail(fmt::format("tensor '{}' has rank {}, above --max-lora-rank {}", b.name, rank,
                            options_.max_rank));
  for (const gguf::TensorInfo* t : {p.a, p.b}) {
    if (!IsAdapterType(t->type))
      return Fail(
          fmt::format("tensor '{}' has type {}; adapter weights must be f32, f16, bf16 or "
                      "q8_0",
                      t->name, DTypeName(t->type)));
  }
  return Status::Ok();
}

Status AdapterLoader::ToF32(const gguf::TensorInfo& t, std::vector<float>* out) const {
  const uint64_t cols = Ne(t, 0);
  const auto row_bytes = RowBytes(t.type, cols);
  if (!row_bytes || t.n_elements % cols != 0 || t.n_bytes != *row_bytes * (t.n_elements / cols))
    return Fail(fmt::format("tensor '{}': data size does not match its shape", t.name));
  const uint64_t rows = t.n_elements / cols;
  out->resize(static_cast<size_t>(t.n_elements));
  for (uint64_t r = 0; r < rows; ++r)
    kernels::DequantizeRow(t.type, t.data + r * *row_bytes, out->data() + r * cols,
                           static_cast<size_t>(cols));
  for (float v : *out)
    if (!std::isfinite(v))
      return Fail(fmt::format("tensor '{}' contains a non-finite value", t.name));
  return Status::Ok();
}

LoraPair* AdapterLoader::SlotFor(const std::string& base_name, Parts* out) const {
  if (base_name == kTokenEmbd) return &out->token_embd;
  // A tied model has no output.weight, so its pair was refused as "does not exist" before here.
  if (base_name == kOutput) return &out->output;
  int layer = 0;
  Target target = Target::kQ;
  if (!ParseLayerTarget(base_name, &layer, &target)) return nullptr;
  if (static_cast<size_t>(layer) >= out->layers.size()) return nullptr;
  return &out->layers[static_cast<size_t>(layer)][static_cast<size_t>(target)];
}

Status AdapterLoader::AddPair(const std::string& base_name, const PairTensors& p, float alpha,
                              Parts* out) const {
  const gguf::TensorInfo* base = base_.gguf().FindTensor(base_name);
  if (base == nullptr)
    return Fail(fmt::format("tensor '{}' has no base tensor '{}' in the model (wrong base model?)",
                            p.a->name, base_name));
  const bool token_embd = base_name == kTokenEmbd;
  RETURN_IF_ERROR(CheckShapes(base_name, *base, p, token_embd));
  // llama.cpp loads a pair on any base tensor but applies it only where a weight is multiplied
  // (llm_build_lora_mm) or embedded; for the rest (norms, biases, rope_freqs) it has no effect.
  LoraPair* slot = SlotFor(base_name, out);
  if (slot == nullptr) return Status::Ok();
  LoraPair pair;
  pair.rank = static_cast<int>(Ne(*p.b, 0));
  pair.in = static_cast<int>(token_embd ? Ne(*p.a, 1) : Ne(*p.a, 0));
  pair.out = static_cast<int>(Ne(*p.b, 1));
  // llama_adapter_lora_weight::get_scale, in the same float order.
  pair.scale =
      alpha != 0.0f ? options_.scale * alpha / static_cast<float>(pair.rank) : options_.scale;
  RETURN_IF_ERROR(ToF32(*p.a, &pair.a));
  RETURN_IF_ERROR(ToF32(*p.b, &pair.b));
  *slot = std::move(pair);
  return Status::Ok();
}

Result<std::shared_ptr<const Adapter>> Adapter::Load(const std::string& name,
                                                     const std::string& path,
                                                     const model::Model& base,
                                                     const LoadOptions& options) {
  if (!std::isfinite(options.scale))
    return Status::InvalidArgument(
        fmt::format("{}: LoRA scale {} is not finite", path, options.scale));
  auto opened = gguf::GgufFile::Open(path);
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kNotFound) return opened.status();
    return Status::InvalidArgument(opened.status().message());  // the reader names path and field
  }
  const gguf::GgufFile& f = **opened;
  AdapterLoader loader(path, base, options);
  std::shared_ptr<Adapter> a(new Adapter());
  a->name_ = name;
  a->path_ = path;
  a->digest_ = Digest(f.bytes(), options.scale);
  RETURN_IF_ERROR(loader.CheckMetadata(f, &a->alpha_));
  ASSIGN_OR_RETURN(auto pairs, loader.CollectPairs(f));
  Parts parts;
  parts.layers.resize(static_cast<size_t>(base.config().n_layers));
  for (const auto& [base_name, p] : pairs)
    RETURN_IF_ERROR(loader.AddPair(base_name, p, a->alpha_, &parts));
  a->layers_ = std::move(parts.layers);
  a->output_ = std::move(parts.output);
  a->token_embd_ = std::move(parts.token_embd);
  a->Finish();
  return std::shared_ptr<const Adapter>(std::move(a));
}

}  // namespace strata::lora
