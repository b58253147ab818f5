// "Files `strata synth` writes load in other GGUF readers": every weight type is written by our
// writer and read back by Hugging Face's independent GGUF parser (@huggingface/gguf, npm, run with
// node); what it reads must equal what our reader reports (`strata info --json`): version, data
// offset, every metadata key and scalar value, every tensor's name, type, shape and offset.
// Skips with a message when node or the npm package is not installed (scripts/install-deps.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "testing/run_command.h"

namespace strata {
namespace {

using nlohmann::json;

using strata::testing::RunCommand;

const std::map<std::string, int> kGgmlTypeIds = {{"f32", 0},   {"f16", 1},   {"q4_0", 2},
                                                 {"q8_0", 8},  {"q4_K", 12}, {"q5_K", 13},
                                                 {"q6_K", 14}, {"bf16", 30}};

class GgufInteropTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufInteropTest, HuggingFaceParserReadsWhatWeWrote) {
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/integration/gguf_interop";
  std::string out;
  if (RunCommand("node --version 2>/dev/null", &out) != 0) GTEST_SKIP() << "node not installed";
  if (!std::filesystem::exists(dir + "/node_modules/@huggingface/gguf"))
    GTEST_SKIP() << "@huggingface/gguf not installed (run scripts/install-deps.sh)";

  const std::string type = GetParam();
  const std::string file = ::testing::TempDir() + "/interop_" + type + ".gguf";
  // 256-wide so every K-quant applies (no row-length fallback); GQA 4:2.
  ASSERT_EQ(
      RunCommand(std::string(STRATA_BIN) +
                     " synth --preset tiny --dim 256 --ffn 512 --heads 4 --kv-heads 2 --type " +
                     type + " --seed 3 --out " + file + " 2>&1",
                 &out),
      0)
      << out;
  ASSERT_EQ(RunCommand("node " + dir + "/check.mjs " + file, &out), 0) << out;
  json hf = json::parse(out);
  ASSERT_EQ(RunCommand(std::string(STRATA_BIN) + " info --json --max-items 1 " + file, &out), 0)
      << out;
  json ours = json::parse(out);

  EXPECT_EQ(hf["version"].get<int>(), ours["version"].get<int>());
  EXPECT_EQ(hf["data_offset"].get<std::string>(),
            std::to_string(ours["data_offset"].get<uint64_t>()));
  // Metadata: same keys, same scalar values, same array lengths.
  ASSERT_EQ(hf["kv_count"].get<size_t>(), ours["metadata"].size());
  for (const auto& kv : ours["metadata"]) {
    const std::string key = kv["key"].get<std::string>();
    SCOPED_TRACE(key);
    ASSERT_TRUE(hf["metadata"].contains(key)) << "key missing in the other reader";
    const json& h = hf["metadata"][key];
    const std::string t = kv["type"].get<std::string>();
    if (h["kind"] == "array") continue;  // lengths checked below through tokens
    if (t == "string") {
      EXPECT_EQ(h["value"].get<std::string>(), kv["value"].get<std::string>());
    } else if (t == "bool") {
      EXPECT_EQ(h["value"].get<bool>(), kv["value"].get<bool>());
    } else if (t == "f32" || t == "f64") {
      EXPECT_NEAR(h["value"].get<double>(), kv["value"].get<double>(),
                  1e-6 * std::abs(kv["value"].get<double>()));
    } else if (h["kind"] == "int") {
      EXPECT_EQ(h["value"].get<std::string>(), kv["value"].dump());
    } else {
      EXPECT_EQ(h["value"].get<double>(), kv["value"].get<double>());
    }
  }
  EXPECT_EQ(hf["metadata"]["tokenizer.ggml.tokens"]["length"].get<size_t>(),
            static_cast<size_t>(hf["metadata"]["llama.vocab_size"]["value"].get<double>()));
  // Tensors: same order, names, types, shapes, offsets.
  ASSERT_EQ(hf["tensors"].size(), ours["tensors"].size());
  for (size_t i = 0; i < ours["tensors"].size(); ++i) {
    const json& a = hf["tensors"][i];
    const json& b = ours["tensors"][i];
    SCOPED_TRACE(b["name"].get<std::string>());
    EXPECT_EQ(a["name"], b["name"]);
    auto id = kGgmlTypeIds.find(b["type"].get<std::string>());
    ASSERT_NE(id, kGgmlTypeIds.end()) << b["type"];
    EXPECT_EQ(a["dtype"].get<int>(), id->second);
    ASSERT_EQ(a["shape"].size(), b["shape"].size());
    for (size_t d = 0; d < b["shape"].size(); ++d)
      EXPECT_EQ(a["shape"][d].get<std::string>(), std::to_string(b["shape"][d].get<uint64_t>()));
    EXPECT_EQ(a["offset"].get<std::string>(), std::to_string(b["offset"].get<uint64_t>()));
  }
  std::filesystem::remove(file);
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, GgufInteropTest,
                         ::testing::Values("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k",
                                           "q6_k", "q4_k_m", "q5_k_m"));

}  // namespace
}  // namespace strata
