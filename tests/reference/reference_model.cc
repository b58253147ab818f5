#include "reference/reference_model.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/kernels.h"
#include "kernels/ref/quants_ref.h"

namespace strata::testing {
namespace {

Result<int> Int(const gguf::GgufFile& f, const std::string& key) {
  ASSIGN_OR_RETURN(uint64_t v, f.GetUint(key));
  return static_cast<int>(v);
}

[[noreturn]] void LoraFail(const std::string& msg) {
  std::fprintf(stderr, "reference set_lora: %s\n", msg.c_str());
  std::abort();
}

// The whole tensor in fp64, row-major (ggml ne[0] is the row length).
std::vector<double> AllRows(const gguf::TensorInfo& t) {
  const size_t cols = static_cast<size_t>(t.shape[0]);
  const size_t rows = static_cast<size_t>(t.n_elements) / cols;
  const size_t row_bytes = static_cast<size_t>(*RowBytes(t.type, cols));
  std::vector<float> tmp(cols);
  std::vector<double> out;
  out.reserve(rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    kernels::DequantizeRow(t.type, t.data + r * row_bytes, tmp.data(), cols);
    out.insert(out.end(), tmp.begin(), tmp.end());
  }
  return out;
}

uint64_t Ne(const gguf::TensorInfo& t, size_t i) { return i < t.shape.size() ? t.shape[i] : 1; }

}  // namespace

Result<ReferenceModel> ReferenceModel::Create(const gguf::GgufFile& f) {
  ReferenceModel m(f);
  ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  if (arch != "llama" && arch != "qwen2") return Status::Unimplemented("reference: arch " + arch);
  m.neox_ = arch == "qwen2";
  ASSIGN_OR_RETURN(m.n_layers_, Int(f, arch + ".block_count"));
  ASSIGN_OR_RETURN(m.dim_, Int(f, arch + ".embedding_length"));
  ASSIGN_OR_RETURN(m.n_heads_, Int(f, arch + ".attention.head_count"));
  ASSIGN_OR_RETURN(m.ffn_, Int(f, arch + ".feed_forward_length"));
  m.n_kv_ = m.n_heads_;
  if (f.Has(arch + ".attention.head_count_kv")) {
    ASSIGN_OR_RETURN(m.n_kv_, Int(f, arch + ".attention.head_count_kv"));
  }
  m.head_dim_ = m.dim_ / m.n_heads_;
  if (f.Has(arch + ".attention.key_length")) {
    ASSIGN_OR_RETURN(m.head_dim_, Int(f, arch + ".attention.key_length"));
  }
  m.rope_dim_ = m.head_dim_;
  if (f.Has(arch + ".rope.dimension_count")) {
    ASSIGN_OR_RETURN(m.rope_dim_, Int(f, arch + ".rope.dimension_count"));
  }
  ASSIGN_OR_RETURN(m.eps_, f.GetFloatOr(arch + ".attention.layer_norm_rms_epsilon", 1e-5));
  ASSIGN_OR_RETURN(m.base_, f.GetFloatOr(arch + ".rope.freq_base", 10000.0));
  ASSIGN_OR_RETURN(std::string scaling, f.GetStringOr(arch + ".rope.scaling.type", "none"));
  if (scaling == "linear") {
    ASSIGN_OR_RETURN(m.linear_scale_, f.GetFloatOr(arch + ".rope.scaling.factor", 1.0));
  }
  const auto* emb = f.FindTensor("token_embd.weight");
  if (!emb) return Status::InvalidArgument("reference: no token_embd.weight");
  m.n_vocab_ = static_cast<int>(emb->shape[1]);
  m.output_name_ = f.FindTensor("output.weight") ? "output.weight" : "token_embd.weight";
  m.bias_ = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  if (f.FindTensor("rope_freqs.weight")) m.freq_factors_ = m.Vec("rope_freqs.weight");
  return m;
}

void ReferenceModel::set_lora(const gguf::GgufFile* adapter, double user_scale) {
  lora_.clear();
  if (adapter == nullptr) return;
  auto alpha = adapter->GetFloatOr("adapter.lora.alpha", 0.0);
  if (!alpha.ok()) LoraFail(alpha.status().ToString());
  const std::string suffix_a = ".lora_a";
  for (const gguf::TensorInfo& ta : adapter->tensors()) {
    if (ta.name.size() <= suffix_a.size() ||
        ta.name.compare(ta.name.size() - suffix_a.size(), suffix_a.size(), suffix_a))
      continue;
    const std::string base = ta.name.substr(0, ta.name.size() - suffix_a.size());
    const gguf::TensorInfo* tb = adapter->FindTensor(base + ".lora_b");
    const gguf::TensorInfo* tw = f_->FindTensor(base);
    if (tb == nullptr || tw == nullptr)
      LoraFail("pair '" + base + "' is incomplete or has no base");
    LoraPair p;
    p.rank = static_cast<size_t>(Ne(*tb, 0));
    const bool embd = base == "token_embd.weight";
    p.in = static_cast<size_t>(embd ? Ne(ta, 1) : Ne(ta, 0));
    p.out = static_cast<size_t>(Ne(*tb, 1));
    const bool ok = embd ? (Ne(ta, 0) == p.rank && p.in == Ne(*tw, 1) && p.out == Ne(*tw, 0))
                         : (Ne(ta, 1) == p.rank && p.in == Ne(*tw, 0) && p.out == Ne(*tw, 1));
    if (!ok) LoraFail("pair '" + base + "' does not fit its base tensor");
    p.scale = *alpha != 0.0 ? user_scale * *alpha / static_cast<double>(p.rank) : user_scale;
    p.a = AllRows(ta);
    p.b = AllRows(*tb);
    lora_[base] = std::move(p);
  }
}

const ReferenceModel::LoraPair* ReferenceModel::FindLora(const std::string& name) const {
  if (lora_.empty()) return nullptr;
  auto it = lora_.find(name);
  return it == lora_.end() ? nullptr : &it->second;
}

std::vector<double> ReferenceModel::Row(const std::string& name, size_t row) const {
  const auto* t = f_->FindTensor(name);
  size_t cols = static_cast<size_t>(t->shape[0]);
  size_t row_bytes = static_cast<size_t>(*RowBytes(t->type, cols));
  std::vector<float> tmp(cols);
  kernels::DequantizeRow(t->type, t->data + row * row_bytes, tmp.data(), cols);
  return std::vector<double>(tmp.begin(), tmp.end());
}

std::vector<double> ReferenceModel::Vec(const std::string& name) const { return Row(name, 0); }

std::vector<double> ReferenceModel::MatVec(const std::string& name,
                                           const std::vector<double>& x_in) const {
  const auto* t = f_->FindTensor(name);
  // token_embd's pair is flipped and belongs to the embedding, even when the output is tied.
  const LoraPair* lora = name == "token_embd.weight" ? nullptr : FindLora(name);
  std::vector<double> x = x_in;
  if (round_activations_) {
    std::vector<float> xf(x.begin(), x.end()), back(x.size());
    const size_t n = x.size();
    switch (t->type) {
      case DType::kQ4_0:
      case DType::kQ8_0: {
        std::vector<BlockQ8_0> q(n / kQK8_0);
        kernels::ref::QuantizeQ8_0(xf.data(), q.data(), n);
        kernels::ref::DequantizeQ8_0(q.data(), back.data(), n);
        break;
      }
      case DType::kQ4_K:
      case DType::kQ5_K:
      case DType::kQ6_K: {
        std::vector<BlockQ8_K> q(n / kQK_K);
        kernels::ref::QuantizeQ8_K(xf.data(), q.data(), n);
        kernels::ref::DequantizeQ8_K(q.data(), back.data(), n);
        break;
      }
      case DType::kF16:
        for (size_t i = 0; i < n; ++i) back[i] = F16ToF32(F32ToF16(xf[i]));
        break;
      case DType::kBF16:
        for (size_t i = 0; i < n; ++i) back[i] = BF16ToF32(F32ToBF16(xf[i]));
        break;
      default:
        back = xf;
    }
    for (size_t i = 0; i < n; ++i) x[i] = back[i];
  }
  size_t rows = t->shape.size() > 1 ? static_cast<size_t>(t->shape[1]) : 1;
  std::vector<double> y(rows);
  for (size_t r = 0; r < rows; ++r) {
    std::vector<double> w = Row(name, r);
    double s = 0;
    for (size_t k = 0; k < w.size(); ++k) s += w[k] * x[k];
    if (lora != nullptr) {
      // Row r of the merged delta scale·B·A, times the unrounded input.
      std::vector<double> d(lora->in, 0.0);
      for (size_t j = 0; j < lora->rank; ++j) {
        const double bj = lora->scale * lora->b[r * lora->rank + j];
        const double* aj = lora->a.data() + j * lora->in;
        for (size_t k = 0; k < lora->in; ++k) d[k] += bj * aj[k];
      }
      for (size_t k = 0; k < lora->in; ++k) s += d[k] * x_in[k];
    }
    y[r] = s;
  }
  return y;
}

std::vector<std::vector<double>> ReferenceModel::Forward(const std::vector<int32_t>& tokens,
                                                         std::vector<size_t> positions) const {
  if (positions.empty()) positions.push_back(tokens.size() - 1);
  const auto hidden = FinalHidden(tokens);
  std::vector<std::vector<double>> logits;
  logits.reserve(positions.size());
  for (size_t pos : positions) logits.push_back(MatVec(output_name_, hidden[pos]));
  return logits;
}

std::vector<std::vector<double>> ReferenceModel::FinalHidden(
    const std::vector<int32_t>& tokens) const {
  const size_t n = tokens.size(), D = static_cast<size_t>(dim_),
               hd = static_cast<size_t>(head_dim_);
  auto rmsnorm = [&](const std::vector<double>& x, const std::vector<double>& w) {
    double ss = 0;
    for (double v : x) ss += v * v;
    double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps_);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
    return y;
  };
  auto rope = [&](std::vector<double>& v, int n_heads, size_t pos) {
    for (int h = 0; h < n_heads; ++h) {
      double* x = v.data() + static_cast<size_t>(h) * hd;
      for (int i = 0; i < rope_dim_ / 2; ++i) {
        double freq = std::pow(base_, -2.0 * i / rope_dim_) / linear_scale_;
        if (!freq_factors_.empty()) freq /= freq_factors_[static_cast<size_t>(i)];
        double th = static_cast<double>(pos) * freq;
        size_t a = neox_ ? static_cast<size_t>(i) : static_cast<size_t>(2 * i);
        size_t b = neox_ ? static_cast<size_t>(i + rope_dim_ / 2) : static_cast<size_t>(2 * i + 1);
        double x0 = x[a], x1 = x[b];
        x[a] = x0 * std::cos(th) - x1 * std::sin(th);
        x[b] = x0 * std::sin(th) + x1 * std::cos(th);
      }
    }
  };
  std::vector<std::vector<double>> x(n);
  for (size_t t = 0; t < n; ++t) x[t] = Row("token_embd.weight", static_cast<size_t>(tokens[t]));
  if (const LoraPair* e = FindLora("token_embd.weight")) {
    for (size_t t = 0; t < n; ++t) {
      const double* at = e->a.data() + static_cast<size_t>(tokens[t]) * e->rank;
      for (size_t d = 0; d < e->out; ++d) {
        double s = 0;
        for (size_t j = 0; j < e->rank; ++j) s += e->b[d * e->rank + j] * at[j];
        x[t][d] += e->scale * s;
      }
    }
  }
  for (int l = 0; l < n_layers_; ++l) {
    std::string p = "blk." + std::to_string(l) + ".";
    auto attn_norm = Vec(p + "attn_norm.weight"), ffn_norm = Vec(p + "ffn_norm.weight");
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      auto xn = rmsnorm(x[t], attn_norm);
      q[t] = MatVec(p + "attn_q.weight", xn);
      k[t] = MatVec(p + "attn_k.weight", xn);
      v[t] = MatVec(p + "attn_v.weight", xn);
      if (bias_) {
        auto bq = Vec(p + "attn_q.bias"), bk = Vec(p + "attn_k.bias"), bv = Vec(p + "attn_v.bias");
        for (size_t i = 0; i < q[t].size(); ++i) q[t][i] += bq[i];
        for (size_t i = 0; i < k[t].size(); ++i) k[t][i] += bk[i];
        for (size_t i = 0; i < v[t].size(); ++i) v[t][i] += bv[i];
      }
      rope(q[t], n_heads_, t);
      rope(k[t], n_kv_, t);
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<double> att(static_cast<size_t>(n_heads_) * hd, 0.0);
      for (int h = 0; h < n_heads_; ++h) {
        size_t kvh = static_cast<size_t>(h / (n_heads_ / n_kv_));
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (size_t j = 0; j <= t; ++j) {
          double d = 0;
          for (size_t i = 0; i < hd; ++i)
            d += q[t][static_cast<size_t>(h) * hd + i] * k[j][kvh * hd + i];
          s[j] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (size_t j = 0; j <= t; ++j)
          for (size_t i = 0; i < hd; ++i)
            att[static_cast<size_t>(h) * hd + i] += s[j] / z * v[j][kvh * hd + i];
      }
      auto o = MatVec(p + "attn_output.weight", att);
      for (size_t i = 0; i < D; ++i) x[t][i] += o[i];
      auto xn = rmsnorm(x[t], ffn_norm);
      auto g = MatVec(p + "ffn_gate.weight", xn), u = MatVec(p + "ffn_up.weight", xn);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      auto d = MatVec(p + "ffn_down.weight", g);
      for (size_t i = 0; i < D; ++i) x[t][i] += d[i];
    }
  }
  auto out_norm = Vec("output_norm.weight");
  for (auto& row : x) row = rmsnorm(row, out_norm);
  return x;
}

}  // namespace strata::testing
