#include "lora/adapter.h"

#include <algorithm>
#include <utility>

namespace strata::lora {
namespace {

constexpr std::array<std::string_view, kNumTargets> kTargetNames = {"q",    "k",  "v",   "o",
                                                                    "gate", "up", "down"};
constexpr std::array<std::string_view, kNumTargets> kTargetSuffix = {
    "attn_q.weight",   "attn_k.weight", "attn_v.weight",  "attn_output.weight",
    "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};

}  // namespace

std::string_view TargetName(Target t) { return kTargetNames[static_cast<size_t>(t)]; }
std::string_view TargetTensorSuffix(Target t) { return kTargetSuffix[static_cast<size_t>(t)]; }

std::shared_ptr<const Adapter> Adapter::FromParts(
    std::string name, std::string digest, std::vector<std::array<LoraPair, kNumTargets>> layers,
    LoraPair output, LoraPair token_embd) {
  std::shared_ptr<Adapter> a(new Adapter());
  a->name_ = std::move(name);
  a->digest_ = std::move(digest);
  a->layers_ = std::move(layers);
  a->output_ = std::move(output);
  a->token_embd_ = std::move(token_embd);
  a->Finish();
  return a;
}

void Adapter::Finish() {
  max_rank_ = 0;
  num_pairs_ = 0;
  bytes_ = 0;
  auto count = [this](const LoraPair& p) {
    bytes_ += (p.a.size() + p.b.size()) * sizeof(float);
    if (p.Inert()) return;
    ++num_pairs_;
    max_rank_ = std::max(max_rank_, p.rank);
  };
  for (const auto& layer : layers_)
    for (const LoraPair& p : layer) count(p);
  count(output_);
  count(token_embd_);
}

const LoraPair* Adapter::Find(int layer, Target t) const {
  if (layer < 0 || static_cast<size_t>(layer) >= layers_.size()) return nullptr;
  const LoraPair& p = layers_[static_cast<size_t>(layer)][static_cast<size_t>(t)];
  return p.Inert() ? nullptr : &p;
}

const LoraPair* Adapter::output() const { return output_.Inert() ? nullptr : &output_; }
const LoraPair* Adapter::token_embd() const { return token_embd_.Inert() ? nullptr : &token_embd_; }

// Load() is part `adapter` (adapter_load.cc).

}  // namespace strata::lora
