// Test helpers for lora/ (adapter_test, registry_test, reference_lora_test): a tiny in-memory
// base model, temp paths, synth-lora files, and hand-built adapter files (any metadata, any
// tensors) for the rejection tests. Test-only, header-only; not thread-safe. It lives here, not in
// src/lora/, because it builds models and adapters with synth, a module above lora.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/checked.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "synth/synth.h"
#include "testing/synth_model.h"

namespace strata::lora::testing {

// The "tiny" preset (llama, 2 layers, dim 64, 4/2 heads, ffn 128, byte vocabulary).
inline strata::testing::SynthModel TinyBase(synth::FileType type = synth::FileType::kQ8_0,
                                            bool tied = false, uint64_t seed = 1) {
  auto cfg = synth::Preset("tiny");
  EXPECT_TRUE(cfg.ok());
  cfg->file_type = type;
  cfg->tied = tied;
  cfg->seed = seed;
  return strata::testing::BuildSynthModel(*cfg);
}

// <TempDir>/lora_<suite>_<test>_<tag>.gguf: unique per test (ctest runs tests in parallel).
inline std::string TempPath(const std::string& tag) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "/lora_" + info->test_suite_name() + "_" + info->name() + "_" +
         tag + ".gguf";
}

inline void WriteSynthLora(const model::Model& base, const synth::SynthLoraOptions& o,
                           const std::string& path) {
  gguf::GgufWriter w;
  auto st = synth::BuildLora(base.gguf(), o, &w);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  Status s = w.WriteFile(path);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;  // ggml ne
  DType type = DType::kF32;
  std::vector<float> values;  // empty: a deterministic non-zero fill
};

// A hand-built adapter file: metadata (defaults: a valid llama LoRA header) and tensors.
struct AdapterSpec {
  std::vector<std::pair<std::string, gguf::Value>> kv = {
      {"general.architecture", gguf::Value::String("llama")},
      {"general.type", gguf::Value::String("adapter")},
      {"adapter.type", gguf::Value::String("lora")},
      {"adapter.lora.alpha", gguf::Value::Float32(0.0f)}};
  std::vector<TensorSpec> tensors;

  void Set(const std::string& key, gguf::Value v) {
    for (auto& [k, val] : kv)
      if (k == key) {
        val = std::move(v);
        return;
      }
    kv.emplace_back(key, std::move(v));
  }
  void Erase(const std::string& key) {
    std::erase_if(kv, [&key](const auto& p) { return p.first == key; });
  }
  // A pair "<base>.lora_a" ne [in, rank] / ".lora_b" ne [rank, out].
  void AddPair(const std::string& base, uint64_t in, uint64_t rank, uint64_t out,
               DType type = DType::kF32) {
    tensors.push_back({base + ".lora_a", {in, rank}, type, {}});
    tensors.push_back({base + ".lora_b", {rank, out}, type, {}});
  }
};

inline std::vector<uint8_t> TensorBytes(const TensorSpec& t) {
  uint64_t n = 1;
  for (uint64_t d : t.shape) n *= d;
  std::vector<float> v = t.values;
  if (v.empty()) {
    v.resize(n);
    for (uint64_t i = 0; i < n; ++i) v[i] = 0.05f * static_cast<float>(std::sin(0.37 * i + 1.0));
  }
  const uint64_t cols = t.shape[0];
  const auto rb = RowBytes(t.type, cols);
  EXPECT_TRUE(rb.has_value()) << t.name;
  if (!rb) return {};
  std::vector<uint8_t> out(*rb * (n / cols));
  for (uint64_t r = 0; r < n / cols; ++r)
    kernels::QuantizeRow(t.type, v.data() + r * cols, out.data() + r * *rb, cols);
  return out;
}

inline void WriteAdapter(const AdapterSpec& spec, const std::string& path) {
  gguf::GgufWriter w;
  for (const auto& [k, v] : spec.kv) w.Set(k, v);
  for (const TensorSpec& t : spec.tensors) {
    Status s = w.AddTensor(t.name, t.type, t.shape, TensorBytes(t));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  Status s = w.WriteFile(path);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

}  // namespace strata::lora::testing
