// End-to-end tests of the `strata` binary as a user runs it (real process, real files).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "integration/run_strata.h"
#include "testing/shared_dir.h"

namespace strata {
namespace {

using ::strata::testing::RunResult;
using ::strata::testing::RunStrata;

TEST(CliTest, GenerateWithBundledDefaultModel) {
  ASSERT_TRUE(std::filesystem::exists(STRATA_DEFAULT_MODEL)) << "build the default_model target";
  RunResult r = RunStrata("generate -p 'Once upon a time' -n 12 --seed 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GE(j["prompt_tokens"].size(), 2u);
  EXPECT_LE(j["tokens"].size(), 12u);
  EXPECT_TRUE(j["timings"].contains("prompt_tps"));
  EXPECT_TRUE(j["timings"].contains("gen_tps"));
  // Same seed -> same output.
  RunResult r2 = RunStrata("generate -p 'Once upon a time' -n 12 --seed 3 --json");
  ASSERT_EQ(r2.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(r2.out)["tokens"], j["tokens"]);
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << "timing line missing: " << r.err;
}

TEST(CliTest, GenerateStreamsTextAndTimingLine) {
  RunResult r = RunStrata("generate -p 'Hello' -n 8 --temperature 0 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  EXPECT_NE(r.err.find("generation:"), std::string::npos);
}

TEST(CliTest, GenerateEverySharedModel) {
  for (const char* m : {"tiny-llama3-Q4_K_M.gguf", "tiny-qwen2-Q8_0.gguf", "llama-2-tiny-random.gguf"}) {
    std::string path = ::strata::testing::SharedPath(std::string("models/") + m);
    if (path.empty()) GTEST_SKIP() << "shared models not found (set STRATA_SHARED_DIR)";
    RunResult r = RunStrata("generate -m " + path + " -p 'The capital of France is' -n 16 --temperature 0 --ignore-eos --json");
    ASSERT_EQ(r.exit_code, 0) << m << ": " << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens"].size(), 16u) << m;
    RunResult ids = RunStrata("generate -m " + path + " --prompt-tokens 1,100,200,300 -n 4 --temperature 0 --ignore-eos --json");
    ASSERT_EQ(ids.exit_code, 0) << ids.err;
    EXPECT_EQ(nlohmann::json::parse(ids.out)["prompt_tokens"], nlohmann::json::parse("[1,100,200,300]"));
  }
}

TEST(CliTest, ClearErrorsOnBadInput) {
  RunResult r = RunStrata("generate -m /nonexistent/model.gguf -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("error:"), std::string::npos);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;

  std::string bad = ::testing::TempDir() + "/not_a_model." + std::to_string(::getpid()) + ".gguf";
  std::ofstream(bad) << "this is not a gguf file at all";
  r = RunStrata("generate -m " + bad + " -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;

  r = RunStrata("info " + bad);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;

  r = RunStrata("generate --prompt-tokens 1,abc -n 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("abc"), std::string::npos) << r.err;

  r = RunStrata("generate --prompt-tokens 999999999 -n 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("out of range"), std::string::npos) << r.err;
}

TEST(CliTest, InfoPrintsMetadataAndTensors) {
  RunResult r = RunStrata(std::string("info ") + STRATA_DEFAULT_MODEL);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("general.architecture"), std::string::npos);
  EXPECT_NE(r.out.find("token_embd.weight"), std::string::npos);
}

TEST(CliTest, TokenizeVocabOnlyFile) {
  std::string path = ::strata::testing::SharedPath("vocab/llama3-vocab.gguf");
  if (path.empty()) GTEST_SKIP() << "shared vocab not found (set STRATA_SHARED_DIR)";
  RunResult r = RunStrata("tokenize -m " + path + " --text 'Hello world' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  // Llama 3: BOS 128000, "Hello" 9906, " world" 1917.
  EXPECT_EQ(j["tokens"], nlohmann::json::parse("[128000, 9906, 1917]"));
  RunResult d = RunStrata("detokenize -m " + path + " --ids 9906,1917");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("Hello world"), std::string::npos);
}

}  // namespace
}  // namespace strata
