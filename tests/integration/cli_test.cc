// End-to-end tests of the `strata` binary as a user runs it (real process, real files).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

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

// The streamed text is exactly the generated text followed by one newline (the --json text of the
// same greedy run), so the shell prompt or the next output starts on its own line.
TEST(CliTest, GenerateTextEndsWithANewline) {
  for (const char* prompt : {"Hello", "Once upon a time"}) {
    const std::string args = std::string("generate -p '") + prompt + "' -n 8 --temperature 0";
    RunResult text = RunStrata(args);
    RunResult json = RunStrata(args + " --json");
    ASSERT_EQ(text.exit_code, 0) << text.err;
    ASSERT_EQ(json.exit_code, 0) << json.err;
    ASSERT_FALSE(text.out.empty());
    EXPECT_EQ(text.out.back(), '\n');
    EXPECT_EQ(text.out, nlohmann::json::parse(json.out)["text"].get<std::string>() + "\n");
  }
}

TEST(CliTest, GenerateEverySharedModel) {
  for (const char* m :
       {"tiny-llama3-Q4_K_M.gguf", "tiny-qwen2-Q8_0.gguf", "llama-2-tiny-random.gguf"}) {
    std::string path = ::strata::testing::SharedPath(std::string("models/") + m);
    if (path.empty()) GTEST_SKIP() << "shared models not found (set STRATA_SHARED_DIR)";
    RunResult r =
        RunStrata("generate -m " + path +
                  " -p 'The capital of France is' -n 16 --temperature 0 --ignore-eos --json");
    ASSERT_EQ(r.exit_code, 0) << m << ": " << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens"].size(), 16u) << m;
    RunResult ids =
        RunStrata("generate -m " + path +
                  " --prompt-tokens 1,100,200,300 -n 4 --temperature 0 --ignore-eos --json");
    ASSERT_EQ(ids.exit_code, 0) << ids.err;
    EXPECT_EQ(nlohmann::json::parse(ids.out)["prompt_tokens"],
              nlohmann::json::parse("[1,100,200,300]"));
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

// `bench offline` on the bundled model: the JSON keys, and counts that follow from the
// workload.
TEST(CliTest, BenchOfflineReportsTheWorkload) {
  RunResult r = RunStrata("bench offline --num-prompts 4 --input-len 8 --output-len 5 -t 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["failed"], 0);
  for (const char* k : {"ttft_ms", "tpot_ms"})
    for (const char* p : {"p50", "p90", "p99"}) EXPECT_TRUE(j[k].contains(p)) << k << "." << p;
  const double duration = j["duration_s"];
  ASSERT_GT(duration, 0.0);
  EXPECT_NEAR(j["output_tps"].get<double>(), 4 * 5 / duration, 1e-6 * (4 * 5 / duration));
  EXPECT_NEAR(j["requests_per_s"].get<double>(), 4 / duration, 1e-6 * (4 / duration));
  // Tokens 2..5 of each request are decode tokens; those sampled in a step that also ran another
  // request's prompt chunk are not counted (submission races the engine thread). The request
  // admitted last decodes after every prompt chunk: at least its 4 steps are decode-only.
  EXPECT_GE(j["decode_steps"].get<int>(), 4);
  EXPECT_LE(j["decode_tokens"].get<int>(), 4 * 4);
  EXPECT_GE(j["decode_tokens"].get<int>(), j["decode_steps"].get<int>());
  EXPECT_NEAR(j["decode_mean_batch"].get<double>(),
              j["decode_tokens"].get<double>() / j["decode_steps"].get<double>(), 1e-9);
  EXPECT_GT(j["decode_tps"].get<double>(), 0.0);
  EXPECT_LE(j["ttft_ms"]["p50"].get<double>(), 1000.0 * duration);

  // A warm-up run caches the 32-token shared prefix (two 16-token blocks), so the reported run
  // hits it for every prompt.
  r = RunStrata(
      "bench offline --num-prompts 4 --input-len 8 --output-len 2 --shared-prefix 32 --warmup 1 -t "
      "1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prefix_hit_tokens"], 4 * 32);
  EXPECT_EQ(j["prefix_query_tokens"], 4 * 40);
  r = RunStrata(
      "bench offline --num-prompts 4 --input-len 8 --output-len 2 --shared-prefix 32 -t 1 "
      "--no-prefix-cache --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["prefix_hit_tokens"], 0);

  r = RunStrata("bench offline --num-prompts 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--num-prompts"), std::string::npos) << r.err;
}

// `bench model`'s decode roofline: every repetition's decode rate over the bandwidth measured right
// after it, the median of those fractions reported; a given bandwidth replaces the measurements.
TEST(CliTest, BenchModelPairsEachRepetitionWithItsBandwidth) {
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  RunResult r = RunStrata("bench model --pp 4 --tg 3 -t 1 --reps 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const double gb = j["decode_gb_per_token"];
  ASSERT_GT(gb, 0.0);
  const auto tg = j["tg_samples"].get<std::vector<double>>();
  const auto bw = j["bandwidth_samples"].get<std::vector<double>>();
  const auto roof = j["roofline_samples"].get<std::vector<double>>();
  ASSERT_EQ(tg.size(), 3u);
  ASSERT_EQ(bw.size(), 3u);
  ASSERT_EQ(roof.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_GT(bw[i], 0.0);
    EXPECT_NEAR(roof[i], tg[i] * gb / bw[i], 1e-9 * roof[i]) << "repetition " << i;
  }
  EXPECT_DOUBLE_EQ(j["roofline_fraction"].get<double>(), median(roof));
  EXPECT_DOUBLE_EQ(j["bandwidth_gbps"].get<double>(), median(bw));

  r = RunStrata("bench model --pp 4 --tg 3 -t 1 --reps 2 --bandwidth-gbps 10 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["bandwidth_samples"].empty());
  EXPECT_DOUBLE_EQ(j["bandwidth_gbps"].get<double>(), 10.0);
  const auto tg2 = j["tg_samples"].get<std::vector<double>>();
  const auto roof2 = j["roofline_samples"].get<std::vector<double>>();
  ASSERT_EQ(roof2.size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_NEAR(roof2[i], tg2[i] * j["decode_gb_per_token"].get<double>() / 10, 1e-9 * roof2[i]);

  // No decode: no fractions, one measurement for the machine's figure.
  r = RunStrata("bench model --pp 4 --tg 0 -t 1 --reps 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["roofline_samples"].empty());
  EXPECT_EQ(j["roofline_fraction"].get<double>(), 0.0);
  EXPECT_EQ(j["bandwidth_samples"].size(), 1u);
}

// Engine flags are validated before the port is bound: the error names the flag and the server
// never reports listening.
TEST(CliTest, ServeRefusesBadEngineFlagsBeforeListening) {
  for (const char* flag :
       {"--max-prefill-tokens-with-decodes -5", "--max-num-seqs 0", "--max-batched-tokens 0"}) {
    RunResult r = RunStrata(std::string("serve --port 0 ") + flag);
    EXPECT_NE(r.exit_code, 0) << flag;
    EXPECT_NE(r.err.find(std::string(flag).substr(0, std::string(flag).find(' '))),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << flag << ": " << r.out;
  }
}

// `serve --config FILE`: the file fills the tree, only flags actually passed override it,
// `--print-config` prints the effective config and exits (nothing listens), and its output loads
// back to the same config.
TEST(CliTest, ServeConfigFileFlagsOverrideAndPrintRoundTrips) {
  const std::string dir = ::testing::TempDir();
  const std::string file = dir + "/cli_replica_" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(file)
      << "server:\n  port: 0\n  io_threads: 3\nengine:\n  scheduler:\n    max_num_seqs: 8\n"
         "  kv_tiers:\n    ram: {capacity: 256MiB}\n";
  RunResult r = RunStrata("serve --config " + file + " --print-config");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("listening"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max_num_seqs: 8\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("io_threads: 3\n"), std::string::npos)
      << r.out;  // --io-threads' default does not override
  EXPECT_NE(r.out.find("capacity: 256MiB\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max_queued_requests: 256\n"), std::string::npos) << r.out;  // the default

  RunResult o = RunStrata("serve --config " + file +
                          " --max-num-seqs 4 --kv-tier-ram 1GiB --port 9 --print-config");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("max_num_seqs: 4\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("capacity: 1GiB\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("port: 9\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("io_threads: 3\n"), std::string::npos) << o.out;

  const std::string printed = dir + "/cli_replica_printed_" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(printed) << o.out;
  RunResult back = RunStrata("serve --config " + printed + " --print-config");
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out, o.out);

  // The example file is the defaults.
  RunResult example = RunStrata(std::string("serve --config ") + STRATA_SOURCE_DIR +
                                "/examples/replica.yaml --print-config");
  ASSERT_EQ(example.exit_code, 0) << example.err;
  EXPECT_EQ(example.out, RunStrata("serve --print-config").out);

  // A bad key in the file: refused with its path, before listening.
  std::ofstream(file) << "engine:\n  scheduler:\n    max_num_seq: 8\n";
  RunResult bad = RunStrata("serve --port 0 --config " + file);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("engine.scheduler.max_num_seq: unknown key (did you mean max_num_seqs?)"),
            std::string::npos)
      << bad.err;
  EXPECT_EQ(bad.out.find("listening"), std::string::npos) << bad.out;
  // bench offline reads the same file.
  RunResult bench = RunStrata("bench offline --num-prompts 1 --config " + file);
  EXPECT_NE(bench.exit_code, 0);
  EXPECT_NE(bench.err.find("max_num_seq: unknown key"), std::string::npos) << bench.err;
  std::filesystem::remove(file);
  std::filesystem::remove(printed);
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
