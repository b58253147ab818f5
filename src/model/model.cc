#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/checked.h"

namespace strata::model {
namespace {

std::string Key(Arch a, std::string_view suffix) {
  std::string k(ArchName(a));
  k += '.';
  k += suffix;
  return k;
}

Result<int> GetPositiveInt(const gguf::GgufFile& f, const std::string& key, int max_value) {
  ASSIGN_OR_RETURN(uint64_t v, f.GetUint(key));
  if (v == 0 || v > static_cast<uint64_t>(max_value))
    return Status::InvalidArgument("metadata '" + key + "' = " + std::to_string(v) +
                                   " is out of range [1, " + std::to_string(max_value) + "]");
  return static_cast<int>(v);
}

// Looks up a 2-D weight matrix [cols (row length), rows] and checks its shape and type.
Result<kernels::WeightMatrix> GetMatrix(const gguf::GgufFile& f, const std::string& name,
                                        uint64_t cols, uint64_t rows) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return Status::InvalidArgument("missing tensor '" + name + "'");
  uint64_t want_rows = rows;
  bool shape_ok = t->shape.size() >= 1 && t->shape[0] == cols &&
                  (t->shape.size() == 1 ? rows == 1 : t->shape[1] == want_rows);
  for (size_t i = 2; i < t->shape.size(); ++i) shape_ok = shape_ok && t->shape[i] == 1;
  if (!shape_ok) {
    std::string got;
    for (size_t i = 0; i < t->shape.size(); ++i)
      got += (i ? " x " : "") + std::to_string(t->shape[i]);
    return Status::InvalidArgument("tensor '" + name + "' has shape [" + got + "], expected [" +
                                   std::to_string(cols) + " x " + std::to_string(rows) + "]");
  }
  if (!kernels::IsSupported(t->type))
    return Status::Unimplemented("tensor '" + name + "' has type " +
                                 std::string(DTypeName(t->type)) +
                                 ", which is not supported (supported: f32, f16, bf16, q8_0, q4_0, "
                                 "q4_K, q5_K, q6_K)");
  auto rb = RowBytes(t->type, cols);
  if (!rb)
    return Status::InvalidArgument("tensor '" + name +
                                   "': row length not a multiple of the block size");
  kernels::WeightMatrix w;
  w.type = t->type;
  w.data = t->data;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = *rb;
  return w;
}

// Reads a 1-D tensor of n elements as f32 (any supported type).
Result<std::vector<float>> GetVector(const gguf::GgufFile& f, const std::string& name, uint64_t n) {
  ASSIGN_OR_RETURN(kernels::WeightMatrix w, GetMatrix(f, name, n, 1));
  std::vector<float> out(n);
  kernels::DequantizeRow(w.type, w.data, out.data(), n);
  for (float v : out)
    if (!std::isfinite(v))
      return Status::InvalidArgument("tensor '" + name + "' contains a non-finite value");
  return out;
}

std::string BlkName(int layer, std::string_view what) {
  return "blk." + std::to_string(layer) + "." + std::string(what);
}

}  // namespace

std::string_view ArchName(Arch a) { return a == Arch::kQwen2 ? "qwen2" : "llama"; }

Status ModelConfig::Validate() const {
  auto bad = [](const std::string& m) { return Status::InvalidArgument("model config: " + m); };
  if (n_layers <= 0 || dim <= 0 || n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 || ffn <= 0 ||
      n_vocab <= 0 || ctx_len <= 0)
    return bad("every dimension must be positive");
  if (n_heads % n_kv_heads != 0)
    return bad("head_count (" + std::to_string(n_heads) + ") is not a multiple of head_count_kv (" +
               std::to_string(n_kv_heads) + ")");
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    return bad("rope dimension " + std::to_string(rope_dim) + " must be even and <= head dim " +
               std::to_string(head_dim));
  if (!(rms_eps > 0.0f) || !std::isfinite(rms_eps)) return bad("rms eps must be positive");
  if (!(rope_base > 0.0f) || !std::isfinite(rope_base))
    return bad("rope freq_base must be positive");
  if (!(rope_linear_scale > 0.0f)) return bad("rope scaling factor must be positive");
  if (!rope_freq_factors.empty() && static_cast<int>(rope_freq_factors.size()) != rope_dim / 2)
    return bad("rope_freqs has " + std::to_string(rope_freq_factors.size()) +
               " entries, expected " + std::to_string(rope_dim / 2));
  for (float f : rope_freq_factors)
    if (!(f > 0.0f) || !std::isfinite(f)) return bad("rope_freqs entries must be positive");
  return Status::Ok();
}

Result<ModelConfig> ConfigFromGguf(const gguf::GgufFile& f) {
  ModelConfig c;
  ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  if (arch == "llama") {
    c.arch = Arch::kLlama;
    c.rope_style = RopeStyle::kNorm;
  } else if (arch == "qwen2") {
    c.arch = Arch::kQwen2;
    c.rope_style = RopeStyle::kNeox;
    c.qkv_bias = true;
  } else {
    return Status::Unimplemented(
        "unsupported architecture '" + arch +
        "' (supported: llama [Llama 2/3/3.1/3.2, Mistral, TinyLlama], qwen2)");
  }
  constexpr int kMaxDim = 1 << 20;
  ASSIGN_OR_RETURN(c.n_layers, GetPositiveInt(f, Key(c.arch, "block_count"), 4096));
  ASSIGN_OR_RETURN(c.dim, GetPositiveInt(f, Key(c.arch, "embedding_length"), kMaxDim));
  ASSIGN_OR_RETURN(c.ffn, GetPositiveInt(f, Key(c.arch, "feed_forward_length"), kMaxDim));
  ASSIGN_OR_RETURN(c.n_heads, GetPositiveInt(f, Key(c.arch, "attention.head_count"), 65536));
  c.n_kv_heads = c.n_heads;
  if (f.Has(Key(c.arch, "attention.head_count_kv"))) {
    ASSIGN_OR_RETURN(c.n_kv_heads,
                     GetPositiveInt(f, Key(c.arch, "attention.head_count_kv"), 65536));
  }
  ASSIGN_OR_RETURN(c.ctx_len, GetPositiveInt(f, Key(c.arch, "context_length"), 1 << 24));
  if (c.dim % c.n_heads != 0 && !f.Has(Key(c.arch, "attention.key_length")))
    return Status::InvalidArgument("embedding_length is not a multiple of head_count");
  c.head_dim = c.dim / c.n_heads;
  if (f.Has(Key(c.arch, "attention.key_length"))) {
    ASSIGN_OR_RETURN(c.head_dim, GetPositiveInt(f, Key(c.arch, "attention.key_length"), 65536));
    if (f.Has(Key(c.arch, "attention.value_length"))) {
      ASSIGN_OR_RETURN(int vlen, GetPositiveInt(f, Key(c.arch, "attention.value_length"), 65536));
      if (vlen != c.head_dim)
        return Status::Unimplemented("attention.value_length != key_length is not supported");
    }
  }
  ASSIGN_OR_RETURN(double eps, f.GetFloatOr(Key(c.arch, "attention.layer_norm_rms_epsilon"), 1e-5));
  c.rms_eps = static_cast<float>(eps);
  ASSIGN_OR_RETURN(double base, f.GetFloatOr(Key(c.arch, "rope.freq_base"), 10000.0));
  c.rope_base = static_cast<float>(base);
  ASSIGN_OR_RETURN(uint64_t rope_dim, f.GetUintOr(Key(c.arch, "rope.dimension_count"),
                                                  static_cast<uint64_t>(c.head_dim)));
  if (rope_dim > 65536) return Status::InvalidArgument("rope.dimension_count is out of range");
  c.rope_dim = static_cast<int>(rope_dim);
  ASSIGN_OR_RETURN(std::string scaling, f.GetStringOr(Key(c.arch, "rope.scaling.type"), "none"));
  if (scaling == "linear") {
    ASSIGN_OR_RETURN(double factor, f.GetFloatOr(Key(c.arch, "rope.scaling.factor"), 1.0));
    c.rope_linear_scale = static_cast<float>(factor);
  } else if (scaling != "none" && !scaling.empty()) {
    return Status::Unimplemented(
        "rope scaling type '" + scaling +
        "' is not supported (supported: none, linear, llama3 via rope_freqs)");
  }
  const gguf::TensorInfo* emb = f.FindTensor("token_embd.weight");
  if (emb == nullptr) return Status::InvalidArgument("missing tensor 'token_embd.weight'");
  if (emb->shape.size() != 2 || emb->shape[1] == 0 || emb->shape[1] > (1u << 24))
    return Status::InvalidArgument("tensor 'token_embd.weight' must be 2-D [dim x n_vocab]");
  c.n_vocab = static_cast<int>(emb->shape[1]);
  c.tied_embeddings = f.FindTensor("output.weight") == nullptr;
  if (f.FindTensor("rope_freqs.weight") != nullptr) {
    ASSIGN_OR_RETURN(
        c.rope_freq_factors,
        GetVector(f, "rope_freqs.weight", static_cast<uint64_t>(std::max(0, c.rope_dim / 2))));
  }
  if (c.arch == Arch::kLlama) c.qkv_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  RETURN_IF_ERROR(c.Validate());
  return c;
}

Result<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  auto file = gguf::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  return FromGguf(std::move(file).value());
}

Result<std::unique_ptr<Model>> Model::FromGguf(std::unique_ptr<gguf::GgufFile> file) {
  std::unique_ptr<Model> m(new Model());
  const gguf::GgufFile& f = *file;
  ASSIGN_OR_RETURN(m->config_, ConfigFromGguf(f));
  const ModelConfig& c = m->config_;
  const uint64_t dim = static_cast<uint64_t>(c.dim);
  ASSIGN_OR_RETURN(m->token_embd_,
                   GetMatrix(f, "token_embd.weight", dim, static_cast<uint64_t>(c.n_vocab)));
  if (c.tied_embeddings) {
    m->output_ = m->token_embd_;
  } else {
    ASSIGN_OR_RETURN(m->output_,
                     GetMatrix(f, "output.weight", dim, static_cast<uint64_t>(c.n_vocab)));
  }
  ASSIGN_OR_RETURN(m->output_norm_, GetVector(f, "output_norm.weight", dim));
  const uint64_t qd = static_cast<uint64_t>(c.q_dim()), kvd = static_cast<uint64_t>(c.kv_dim());
  const uint64_t ffn = static_cast<uint64_t>(c.ffn);
  m->layers_.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = m->layers_[static_cast<size_t>(l)];
    ASSIGN_OR_RETURN(L.attn_norm, GetVector(f, BlkName(l, "attn_norm.weight"), dim));
    ASSIGN_OR_RETURN(L.ffn_norm, GetVector(f, BlkName(l, "ffn_norm.weight"), dim));
    ASSIGN_OR_RETURN(L.wq, GetMatrix(f, BlkName(l, "attn_q.weight"), dim, qd));
    ASSIGN_OR_RETURN(L.wk, GetMatrix(f, BlkName(l, "attn_k.weight"), dim, kvd));
    ASSIGN_OR_RETURN(L.wv, GetMatrix(f, BlkName(l, "attn_v.weight"), dim, kvd));
    ASSIGN_OR_RETURN(L.wo, GetMatrix(f, BlkName(l, "attn_output.weight"), qd, dim));
    ASSIGN_OR_RETURN(L.w_gate, GetMatrix(f, BlkName(l, "ffn_gate.weight"), dim, ffn));
    ASSIGN_OR_RETURN(L.w_up, GetMatrix(f, BlkName(l, "ffn_up.weight"), dim, ffn));
    ASSIGN_OR_RETURN(L.w_down, GetMatrix(f, BlkName(l, "ffn_down.weight"), ffn, dim));
    if (c.qkv_bias) {
      ASSIGN_OR_RETURN(L.bq, GetVector(f, BlkName(l, "attn_q.bias"), qd));
      ASSIGN_OR_RETURN(L.bk, GetVector(f, BlkName(l, "attn_k.bias"), kvd));
      ASSIGN_OR_RETURN(L.bv, GetVector(f, BlkName(l, "attn_v.bias"), kvd));
    }
  }
  for (const auto& t : f.tensors()) m->weight_bytes_ += t.n_bytes;
  m->file_ = std::move(file);
  // The matrices the forward pass multiplies, in the layout the kernels run fastest on. A tied
  // output matrix is the embedding table: repacked once, Embed reads its rows back.
  std::vector<kernels::WeightMatrix*> all;
  for (LayerWeights& L : m->layers_)
    for (kernels::WeightMatrix* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      all.push_back(w);
  all.push_back(&m->output_);
  RETURN_IF_ERROR(m->RepackAll(all));
  if (c.tied_embeddings) m->token_embd_ = m->output_;
  return m;
}

uint64_t Model::decode_bytes() const {
  uint64_t n = output_.rows * output_.row_bytes;
  for (const LayerWeights& L : layers_)
    for (const kernels::WeightMatrix* w :
         {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      n += w->rows * w->row_bytes;
  return n;
}

// Bytes of w in its preferred layout when that differs from the stored one, else 0.
static size_t RepackedBytes(const kernels::WeightMatrix& w) {
  if (w.layout == kernels::PreferredLayout(w.type)) return 0;
  return kernels::PanelLayoutBytes(w.type, w.rows, w.cols);
}

Status Model::RepackAll(const std::vector<kernels::WeightMatrix*>& ws) {
  // One mapping for all of them, each at a 64-byte boundary, on huge pages where the system
  // allows (base/page_memory.h: fewer TLB misses while decode streams them, fewer page faults
  // while they are written here).
  uint64_t total = 0;
  for (const kernels::WeightMatrix* w : ws) total += (RepackedBytes(*w) + 63) / 64 * 64;
  if (total == 0) return Status::Ok();
  Result<PageMemory> mem = PageMemory::Allocate(total);
  if (!mem.ok()) {
    return Status::ResourceExhausted(
        "cannot allocate " + std::to_string(total) +
        " bytes for the repacked weight matrices: " + mem.status().message());
  }
  repacked_ = std::move(*mem);
  uint8_t* dst = repacked_.data();
  for (kernels::WeightMatrix* w : ws) {
    const size_t bytes = RepackedBytes(*w);
    if (bytes == 0) continue;
    kernels::PackPanels(*w, dst);
    file_->ReleasePages(w->data, w->rows * w->row_bytes);
    w->data = dst;
    w->layout = kernels::PreferredLayout(w->type);
    repacked_bytes_ += bytes;
    dst += (bytes + 63) / 64 * 64;
  }
  return Status::Ok();
}

void Model::Embed(int32_t token, float* out) const {
  if (token_embd_.layout != kernels::WeightLayout::kRows) {
    thread_local std::vector<uint8_t> row;  // one row in the stored format; grows once
    if (row.size() < token_embd_.row_bytes) row.resize(token_embd_.row_bytes);
    kernels::ReadRow(token_embd_, static_cast<size_t>(token), row.data());
    kernels::DequantizeRow(token_embd_.type, row.data(), out, token_embd_.cols);
    return;
  }
  const auto* row = static_cast<const uint8_t*>(token_embd_.data) +
                    static_cast<size_t>(token) * token_embd_.row_bytes;
  kernels::DequantizeRow(token_embd_.type, row, out, token_embd_.cols);
}

}  // namespace strata::model
