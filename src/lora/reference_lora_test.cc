// The fp64 reference with an adapter (tests/reference, set_lora): scale 0 is the base bit for bit,
// a synth-lora adapter visibly changes greedy outputs, and the reference's merge agrees with a
// model whose weights were merged (W + scale·B·A) from lora::Adapter's pairs — two independent
// readings of the format (the reference reads the GGUF itself) that must agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lora/adapter.h"
#include "reference/reference_model.h"
#include "testing/lora_files.h"

namespace strata::lora {
namespace {

using strata::testing::ReferenceModel;
using testing::TempPath;
using testing::TinyBase;
using testing::WriteSynthLora;

const std::vector<int32_t> kTokens = {1, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100};

std::vector<size_t> AllPositions() {
  std::vector<size_t> p(kTokens.size());
  for (size_t i = 0; i < p.size(); ++i) p[i] = i;
  return p;
}

size_t Argmax(const std::vector<double>& v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// A copy of the (all-F32) base file with every matrix the adapter has a pair for merged in fp64:
// W[o][i] += scale * sum_r B[o][r] A[r][i]; token_embd row t: E[t][d] += scale * sum_r B[d][r]
// a_t[r].
std::vector<uint8_t> MergedModel(const gguf::GgufFile& base, const Adapter& ad, int n_layers) {
  auto pair_for = [&](const std::string& name) -> const LoraPair* {
    if (name == "output.weight") return ad.output();
    if (name == "token_embd.weight") return ad.token_embd();
    for (int l = 0; l < n_layers; ++l)
      for (int t = 0; t < kNumTargets; ++t)
        if (name == "blk." + std::to_string(l) + "." +
                        std::string(TargetTensorSuffix(static_cast<Target>(t))))
          return ad.Find(l, static_cast<Target>(t));
    return nullptr;
  };
  gguf::GgufWriter w;
  for (const auto& kv : base.metadata()) w.Set(kv.key, kv.value);
  for (const gguf::TensorInfo& t : base.tensors()) {
    EXPECT_EQ(t.type, DType::kF32) << t.name;
    std::vector<float> v(t.n_elements);
    std::memcpy(v.data(), t.data, t.n_bytes);
    if (const LoraPair* p = pair_for(t.name)) {
      const bool embd = t.name == "token_embd.weight";
      const size_t rows = embd ? static_cast<size_t>(p->in) : static_cast<size_t>(p->out);
      const size_t cols = embd ? static_cast<size_t>(p->out) : static_cast<size_t>(p->in);
      const size_t rank = static_cast<size_t>(p->rank);
      for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c) {
          double d = 0;
          for (size_t k = 0; k < rank; ++k)
            d += embd ? double{p->b[c * rank + k]} * p->a[r * rank + k]
                      : double{p->b[r * rank + k]} * p->a[k * cols + c];
          v[r * cols + c] = static_cast<float>(v[r * cols + c] + double{p->scale} * d);
        }
    }
    std::vector<uint8_t> bytes(t.n_bytes);
    std::memcpy(bytes.data(), v.data(), t.n_bytes);
    EXPECT_TRUE(w.AddTensor(t.name, t.type, t.shape, std::move(bytes)).ok());
  }
  auto buf = w.WriteToBuffer();
  EXPECT_TRUE(buf.ok());
  return buf.ok() ? std::move(buf).value() : std::vector<uint8_t>{};
}

class ReferenceLoraTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = TinyBase(synth::FileType::kF32);
    ASSERT_NE(base_.model, nullptr);
    synth::SynthLoraOptions o;
    o.rank = 8;
    o.alpha = 16;
    o.seed = 11;
    o.include_output = true;
    o.include_embd = true;
    path_ = TempPath("adapter");
    WriteSynthLora(*base_.model, o, path_);
    auto f = gguf::GgufFile::Open(path_);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    adapter_file_ = std::move(f).value();
  }

  strata::testing::SynthModel base_;
  std::string path_;
  std::unique_ptr<gguf::GgufFile> adapter_file_;
};

TEST_F(ReferenceLoraTest, ScaleZeroIsTheBaseBitForBit) {
  for (bool round : {false, true}) {
    auto ref = ReferenceModel::Create(base_.model->gguf());
    ASSERT_TRUE(ref.ok());
    ref->set_round_activations(round);
    const auto want = ref->Forward(kTokens, AllPositions());
    ref->set_lora(adapter_file_.get(), 0.0);
    EXPECT_EQ(ref->Forward(kTokens, AllPositions()), want) << "round " << round;
    ref->set_lora(nullptr, 1.0);
    EXPECT_EQ(ref->Forward(kTokens, AllPositions()), want) << "round " << round;
  }
}

TEST_F(ReferenceLoraTest, AnAdapterVisiblyChangesGreedyOutputs) {
  auto ref = ReferenceModel::Create(base_.model->gguf());
  ASSERT_TRUE(ref.ok());
  const auto base_logits = ref->Forward(kTokens, AllPositions());
  ref->set_lora(adapter_file_.get(), 1.0);
  const auto lora_logits = ref->Forward(kTokens, AllPositions());
  int changed = 0;
  double max_diff = 0;
  for (size_t p = 0; p < kTokens.size(); ++p) {
    changed += Argmax(base_logits[p]) != Argmax(lora_logits[p]);
    for (size_t i = 0; i < base_logits[p].size(); ++i)
      max_diff = std::max(max_diff, std::fabs(base_logits[p][i] - lora_logits[p][i]));
  }
  EXPECT_GT(max_diff, 0.5);
  EXPECT_GE(changed, static_cast<int>(kTokens.size()) / 2) << "greedy tokens changed";
  // Scaled down, it changes less.
  ref->set_lora(adapter_file_.get(), 0.1);
  const auto small = ref->Forward(kTokens, AllPositions());
  double small_diff = 0;
  for (size_t p = 0; p < kTokens.size(); ++p)
    for (size_t i = 0; i < small[p].size(); ++i)
      small_diff = std::max(small_diff, std::fabs(base_logits[p][i] - small[p][i]));
  EXPECT_GT(small_diff, 0.0);
  EXPECT_LT(small_diff, max_diff);
}

TEST_F(ReferenceLoraTest, AgreesWithWeightsMergedFromTheLoadedAdapter) {
  for (float scale : {1.0f, 0.5f}) {
    auto ad = Adapter::Load("a", path_, *base_.model, LoadOptions{scale, 16});
    ASSERT_TRUE(ad.ok()) << ad.status().ToString();
    const std::vector<uint8_t> merged_bytes =
        MergedModel(base_.model->gguf(), **ad, base_.model->config().n_layers);
    auto merged_file = gguf::GgufFile::Parse(merged_bytes);
    ASSERT_TRUE(merged_file.ok()) << merged_file.status().ToString();
    auto merged = ReferenceModel::Create(**merged_file);
    auto ref = ReferenceModel::Create(base_.model->gguf());
    ASSERT_TRUE(merged.ok() && ref.ok());
    ref->set_lora(adapter_file_.get(), scale);
    const auto want = merged->Forward(kTokens, AllPositions());
    const auto got = ref->Forward(kTokens, AllPositions());
    double mx = 0, err = 0;
    for (size_t p = 0; p < want.size(); ++p)
      for (size_t i = 0; i < want[p].size(); ++i) {
        mx = std::max(mx, std::fabs(want[p][i]));
        err = std::max(err, std::fabs(want[p][i] - got[p][i]));
      }
    // The merged file rounds each merged weight to f32; nothing else differs.
    EXPECT_LE(err, 1e-5 * mx) << "scale " << scale << " max " << mx;
  }
}

}  // namespace
}  // namespace strata::lora
