// `strata bench serve` / `strata bench sweep` end to end: the real binary against a real
// `strata serve` on the bundled tiny model (loopback, port 0). Every dataset, both arrival modes,
// the JSON report's schema and counts, failures, and a two-endpoint sweep with its SVG.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "integration/run_strata.h"
#include "integration/serve_process.h"

namespace strata {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

using ::strata::testing::RunResult;

std::string Tmp(const std::string& name) {
  static int n = 0;
  return ::testing::TempDir() + "/bench_serve_" + std::to_string(::getpid()) + "_" +
         std::to_string(n++) + "_" + name;
}

RunResult Bench(const std::string& args) { return ::strata::testing::RunStrata("bench " + args); }

json ReadJson(const std::string& path) {
  std::ifstream f(path);
  json j = json::parse(f, nullptr, false);
  fs::remove(path);
  return j;
}

class BenchServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(STRATA_DEFAULT_MODEL)) << "build the default_model target";
    server_ =
        std::make_unique<testing::ServeProcess>(std::vector<std::string>{"--max-num-seqs", "8"});
    ASSERT_NE(server_->port(), 0) << "strata serve did not start";
    url_ = "http://127.0.0.1:" + std::to_string(server_->port());
  }
  // Runs `bench serve` with --json and returns the parsed report (exit code checked by caller).
  json Serve(const std::string& args, RunResult* out = nullptr) {
    std::string path = Tmp("report.json");
    RunResult r = Bench("serve --base-url " + url_ + " --json " + path + " " + args);
    if (out) *out = r;
    EXPECT_TRUE(fs::exists(path)) << r.out << r.err;
    return ReadJson(path);
  }
  static void CheckSchema(const json& j) {
    for (const char* k : {"schema",
                          "base_url",
                          "model",
                          "endpoint",
                          "dataset",
                          "num_prompts",
                          "request_rate",
                          "burstiness",
                          "max_concurrency",
                          "seed",
                          "completed",
                          "failed",
                          "not_sent",
                          "first_error",
                          "duration_s",
                          "request_throughput",
                          "input_throughput",
                          "output_throughput",
                          "total_input_tokens",
                          "total_output_tokens",
                          "ttft_ms",
                          "tpot_ms",
                          "itl_ms",
                          "e2el_ms",
                          "slo",
                          "goodput"})
      EXPECT_TRUE(j.contains(k)) << k;
    for (const char* m : {"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"})
      for (const char* s : {"mean", "median", "p90", "p99"})
        EXPECT_TRUE(j[m][s].is_number()) << m << "." << s;
    EXPECT_EQ(j["schema"], "strata.bench.serve/1");
  }
  // Every request completed, with exactly the asked output tokens (ignore_eos), and sane latencies.
  static void CheckComplete(const json& j, int64_t n, int64_t out_tokens) {
    CheckSchema(j);
    EXPECT_EQ(j["num_prompts"], n);
    EXPECT_EQ(j["completed"], n) << j["first_error"];
    EXPECT_EQ(j["failed"], 0);
    EXPECT_EQ(j["not_sent"], 0);
    EXPECT_TRUE(j["first_error"].is_null());
    EXPECT_EQ(j["total_output_tokens"], out_tokens);
    EXPECT_GT(j["duration_s"].get<double>(), 0);
    EXPECT_GT(j["ttft_ms"]["p99"].get<double>(), 0);
    EXPECT_GE(j["e2el_ms"]["median"].get<double>(), j["ttft_ms"]["median"].get<double>());
    EXPECT_NEAR(j["request_throughput"].get<double>(), n / j["duration_s"].get<double>(), 1e-6);
    EXPECT_NEAR(j["output_throughput"].get<double>(), out_tokens / j["duration_s"].get<double>(),
                1e-6);
  }

  std::unique_ptr<testing::ServeProcess> server_;
  std::string url_;
};

TEST_F(BenchServeTest, RandomTokenIdsFixedConcurrency) {
  RunResult r;
  json j = Serve(
      "--dataset random --num-prompts 6 --random-input-len 16 --random-output-len 8 "
      "--max-concurrency 3 --seed 1",
      &r);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  CheckComplete(j, 6, 48);
  EXPECT_EQ(j["total_input_tokens"], 6 * 16);  // token-id prompts reach the server as given
  EXPECT_EQ(j["max_concurrency"], 3);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["tpot_ms"]["count"], 6);
  EXPECT_GE(j["itl_ms"]["count"].get<int>(), 1);
  EXPECT_FALSE(j["model"].get<std::string>().empty());  // discovered from /v1/models
  // The console table is printed too.
  EXPECT_NE(r.out.find("Successful requests:"), std::string::npos);
  EXPECT_NE(r.out.find("P99 TTFT (ms):"), std::string::npos);
}

TEST_F(BenchServeTest, RandomTextPoissonArrivalsWithTokenizerAndGoodput) {
  json j = Serve(
      "--dataset random --num-prompts 6 --random-input-len 12 --random-output-len 5 "
      "--random-range-ratio 0.5 "
      "--prompt-format text --tokenizer " STRATA_DEFAULT_MODEL
      " --request-rate 30 --burstiness 0.5 --slo-ttft-ms 60000 --slo-tpot-ms 60000 --seed 2");
  CheckSchema(j);
  EXPECT_EQ(j["completed"], 6) << j["first_error"];
  EXPECT_EQ(j["request_rate"], 30.0);
  // Generous SLOs: every request is good, so goodput equals request throughput.
  EXPECT_EQ(j["good_requests"], 6);
  EXPECT_NEAR(j["goodput"].get<double>(), j["request_throughput"].get<double>(), 1e-9);
  int64_t out = j["total_output_tokens"];
  EXPECT_GE(out, 6 * 3);  // each in [5*(1-0.5), 5*(1+0.5)] tokens
  EXPECT_LE(out, 6 * 8);
}

TEST_F(BenchServeTest, ImpossibleSloGivesZeroGoodput) {
  json j = Serve(
      "--num-prompts 3 --random-input-len 8 --random-output-len 4 --max-concurrency 3 "
      "--slo-ttft-ms 0.000001");
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["good_requests"], 0);
  EXPECT_EQ(j["goodput"], 0.0);
}

TEST_F(BenchServeTest, SharedPrefixGroups) {
  json j = Serve(
      "--dataset shared-prefix --sp-num-groups 2 --sp-prompts-per-group 3 --sp-system-prompt-len "
      "48 "
      "--sp-question-len 8 --sp-output-len 4 --max-concurrency 2 --seed 3");
  CheckComplete(j, 6, 24);
  EXPECT_EQ(j["total_input_tokens"], 6 * (48 + 8));
  EXPECT_EQ(j["dataset"], "shared-prefix");
}

TEST_F(BenchServeTest, MultiTurnCompletionsHistoryGrows) {
  json j = Serve(
      "--dataset multi-turn --mt-num-conversations 2 --mt-turns 3 --mt-user-len 6 --mt-output-len "
      "4 "
      "--max-concurrency 2 --tokenizer " STRATA_DEFAULT_MODEL);
  CheckComplete(j, 6, 24);
  // Turn k carries the previous turns' prompts and replies, so prompts are longer than the user
  // text.
  EXPECT_GT(j["total_input_tokens"].get<int64_t>(), 6 * 6);
}

TEST_F(BenchServeTest, MultiTurnThinkTimeSpacesAConversationsTurns) {
  json j = Serve(
      "--dataset multi-turn --mt-num-conversations 1 --mt-turns 3 --mt-user-len 6 --mt-output-len "
      "2 "
      "--mt-think-time-s 0.4 --max-concurrency 1");
  CheckComplete(j, 3, 6);
  // Two pauses of 0.4 s between the three turns of the only conversation.
  EXPECT_GE(j["duration_s"].get<double>(), 0.8);
}

TEST_F(BenchServeTest, MultiTurnChatEndpoint) {
  // The tiny model has no chat template: give the server a minimal one.
  std::string tmpl = Tmp("chat.jinja");
  std::ofstream(tmpl)
      << "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}<assistant>";
  server_ = std::make_unique<testing::ServeProcess>(
      std::vector<std::string>{"--chat-template-file", tmpl});
  ASSERT_NE(server_->port(), 0);
  url_ = "http://127.0.0.1:" + std::to_string(server_->port());
  fs::remove(tmpl);
  json j = Serve(
      "--dataset multi-turn --endpoint chat --mt-num-conversations 2 --mt-turns 2 --mt-user-len 5 "
      "--mt-output-len 3 "
      "--request-rate 50");
  CheckComplete(j, 4, 12);
  EXPECT_EQ(j["endpoint"], "chat");
}

TEST_F(BenchServeTest, JsonlPrompts) {
  std::string path = Tmp("prompts.jsonl");
  std::ofstream(path) << "{\"prompt\": \"Once upon a time\", \"output_len\": 3}\n"
                      << "{\"prompt\": [5, 6, 7, 8], \"max_tokens\": 5}\n"
                      << "{\"prompt\": \"The end\"}\n";
  json j =
      Serve("--dataset jsonl --dataset-path " + path + " --jsonl-output-len 2 --max-concurrency 1");
  fs::remove(path);
  CheckComplete(j, 3, 3 + 5 + 2);
}

TEST_F(BenchServeTest, HttpErrorsAreCountedNotFatal) {
  RunResult r;
  json j = Serve(
      "--num-prompts 3 --random-input-len 4 --random-output-len 2 --max-concurrency 2 --model "
      "no-such-model",
      &r);
  EXPECT_EQ(r.exit_code, 3) << r.err;  // the run finished, but requests failed
  EXPECT_EQ(j["completed"], 0);
  EXPECT_EQ(j["failed"], 3);
  EXPECT_NE(j["first_error"].get<std::string>().find("HTTP 404"), std::string::npos)
      << j["first_error"];
  EXPECT_NE(r.out.find("first error: HTTP 404"), std::string::npos) << r.out;
}

TEST_F(BenchServeTest, BadOptionsFailWithClearErrors) {
  struct Case {
    std::string args, needle;
  };
  for (const Case& c : std::vector<Case>{
           {"--num-prompts 3 --max-concurrency -1", "--max-concurrency"},
           {"--num-prompts abc --max-concurrency 1", "--num-prompts"},
           {"--num-prompts 3 --request-rate -2", "--request-rate"},
           {"--num-prompts 3 --request-rate fast", "--request-rate"},
           {"--num-prompts 1000000 --max-concurrency 1", "--num-prompts"},
           {"--num-prompts 3 --max-concurrency 1 --random-input-len -5", "--random-input-len"},
           {"--num-prompts 3 --max-concurrency 1 --dataset nope", "nope"},
           {"--num-prompts 3 --max-concurrency 1 --endpoint chat --prompt-format ids --dataset "
            "jsonl",
            "--dataset-path"},
           {"--num-prompts 3 --max-concurrency 1 --slo-ttft-ms -1", "--slo-ttft-ms"},
       }) {
    RunResult r = Bench("serve --base-url " + url_ + " " + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
  }
  RunResult r = Bench("serve --base-url https://127.0.0.1:1 --num-prompts 1 --max-concurrency 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("http://"), std::string::npos) << r.err;
}

TEST(BenchServeNoServer, UnreachableServerIsAConnectionErrorNotATable) {
  // Port 1 on loopback: nothing listens there. The run is an error (exit 1) naming the URL and the
  // connection error; no table of zeros, no report file.
  const std::string path = Tmp("unreachable.json");
  for (const std::string& cmd : std::vector<std::string>{
           "serve --base-url http://127.0.0.1:1 --model m --num-prompts 2 --max-concurrency 2 "
           "--json " +
               path,
           "serve --base-url http://127.0.0.1:1 --num-prompts 2",
           "sweep --base-url http://127.0.0.1:1 --concurrency 1 --num-prompts 2 --out " +
               Tmp("sweep-unreachable")}) {
    RunResult r = Bench(cmd);
    EXPECT_EQ(r.exit_code, 1) << cmd << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("cannot connect to http://127.0.0.1:1: Connection refused"),
              std::string::npos)
        << cmd << "\n"
        << r.err;
    EXPECT_EQ(r.out.find("Successful requests:"), std::string::npos) << cmd << "\n" << r.out;
    EXPECT_EQ(r.out.find("Failed requests:"), std::string::npos) << cmd << "\n" << r.out;
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(BenchServeTest, RequestRateDefaultsToInfinityAsInVllm) {
  // No --request-rate and no --max-concurrency: every request is sent at t=0 (vLLM's default).
  RunResult r;
  json j = Serve("--num-prompts 5 --random-input-len 8 --random-output-len 3 --seed 4", &r);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  CheckComplete(j, 5, 15);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["max_concurrency"], 0);
  EXPECT_NE(r.out.find("inf / -"), std::string::npos) << r.out;
}

TEST_F(BenchServeTest, SaveResultWritesVllmResultKeys) {
  const std::string dir = Tmp("results");
  fs::create_directories(dir);
  RunResult r =
      Bench("serve --base-url " + url_ +
            " --num-prompts 4 --random-input-len 8 --random-output-len 4 --max-concurrency 2 "
            "--save-result --result-dir " +
            dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  // vLLM's file name: <backend>-<rate>qps-concurrency<C>-<model>-<date>.json
  const std::string name = files[0].filename().string();
  EXPECT_TRUE(std::regex_match(
      name, std::regex("openai-infqps-concurrency2-strata-tiny-[0-9]{8}-[0-9]{6}\\.json")))
      << name;
  json j = ReadJson(files[0].string());
  fs::remove_all(dir);
  CheckComplete(j, 4, 16);
  // vLLM benchmark_serving's flat keys, same units (ms, seconds, per second).
  for (const char* k :
       {"duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput",
        "output_throughput", "total_token_throughput", "date", "backend", "model_id"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* m : {"ttft", "tpot", "itl", "e2el"})
    for (const char* s : {"mean", "median", "std", "p99"}) {
      const std::string key = std::string(s) + "_" + m + "_ms";
      ASSERT_TRUE(j.contains(key) && j[key].is_number()) << key;
      if (std::string(s) != "std") {
        EXPECT_EQ(j[key], j[std::string(m) + "_ms"][s]) << key;
      }
    }
  EXPECT_EQ(j["duration"], j["duration_s"]);
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["total_output_tokens"], 16);
  EXPECT_GT(j["mean_ttft_ms"].get<double>(), 0);
  EXPECT_GE(j["std_e2el_ms"].get<double>(), 0);
  EXPECT_TRUE(j["request_goodput"].is_null());
  EXPECT_EQ(j["backend"], "openai");
  EXPECT_EQ(j["model_id"], "strata-tiny");
  EXPECT_NEAR(j["total_token_throughput"].get<double>(),
              (j["total_input_tokens"].get<double>() + j["total_output_tokens"].get<double>()) /
                  j["duration"].get<double>(),
              1e-6);
  EXPECT_NE(r.out.find("saved the result to " + dir + "/openai-infqps"), std::string::npos)
      << r.out;
}

TEST_F(BenchServeTest, SweepTwoEndpointsInterleavedWithSvg) {
  testing::ServeProcess second(std::vector<std::string>{"--max-num-seqs", "4"});
  ASSERT_NE(second.port(), 0);
  std::string url_b = "http://127.0.0.1:" + std::to_string(second.port());
  std::string dir = Tmp("sweep");
  RunResult r =
      Bench("sweep --base-url " + url_ + " --base-url " + url_b +
            " --label strata-A --label strata-B "
            "--concurrency 1,2 --num-prompts 4 --random-input-len 8 --random-output-len 4 --out " +
            dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = ReadJson(dir + "/sweep.json");
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["schema"], "strata.bench.sweep/1");
  EXPECT_EQ(j["mode"], "concurrency");
  ASSERT_EQ(j["runs"].size(), 4u);
  const char* labels[] = {"strata-A", "strata-B", "strata-A", "strata-B"};  // interleaved A B A B
  const double levels[] = {1, 1, 2, 2};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(j["runs"][i]["label"], labels[i]);
    EXPECT_EQ(j["runs"][i]["level"], levels[i]);
    EXPECT_EQ(j["runs"][i]["max_concurrency"], levels[i]);
    EXPECT_EQ(j["runs"][i]["completed"], 4);
    EXPECT_EQ(j["runs"][i]["total_output_tokens"], 16);
  }
  // Same prompts for both endpoints at a level, fresh prompts per level (no prefix-cache
  // carry-over).
  EXPECT_EQ(j["runs"][0]["seed"], j["runs"][1]["seed"]);
  EXPECT_EQ(j["runs"][2]["seed"], j["runs"][3]["seed"]);
  EXPECT_NE(j["runs"][0]["seed"], j["runs"][2]["seed"]);
  std::ifstream svg_file(dir + "/pareto.svg");
  std::string svg((std::istreambuf_iterator<char>(svg_file)), {});
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"strata-A\""), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"strata-B\""), std::string::npos);
  EXPECT_NE(svg.find("p99 TTFT"), std::string::npos);
  EXPECT_NE(svg.find("p99 TPOT"), std::string::npos);
  std::ifstream md_file(dir + "/sweep.md");
  std::string md((std::istreambuf_iterator<char>(md_file)), {});
  EXPECT_EQ(std::count(md.begin(), md.end(), '\n'), 2 + 4);
  EXPECT_NE(r.out.find("| strata-B | 2 |"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata
