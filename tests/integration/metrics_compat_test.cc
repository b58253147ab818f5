// `strata serve --metrics-compat vllm` against the real binary: /metrics also carries vLLM's
// families (names, types, labels, buckets as vLLM's Prometheus logger writes them), counting the
// same events as the strata: families, and the whole scrape passes `promtool check metrics`
// (Debian's prometheus package, installed by scripts/install-deps.sh).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "integration/http_test_client.h"
#include "integration/serve_process.h"

namespace {

using nlohmann::json;
using strata::testing::HttpCall;
using strata::testing::ServeProcess;

// The value of the sample line that starts with `series` exactly ("name{labels}"), or -1.
double Sample(const std::string& body, const std::string& series) {
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return -1;
}

// Scrapes until `series` reaches `min` (per-request counters land just after the response).
std::string ScrapeUntil(int port, const std::string& series, double min) {
  std::string body;
  for (int i = 0; i < 500; ++i) {
    body = HttpCall(port, "GET", "/metrics").body;
    if (Sample(body, series) >= min) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return body;
}

// Runs `promtool check metrics` on `text`: its exit status and output.
std::pair<int, std::string> Promtool(const std::string& text) {
  const std::string path = ::testing::TempDir() + "metrics-" + std::to_string(::getpid()) + ".txt";
  std::ofstream(path) << text;
  FILE* p = ::popen(("promtool check metrics < " + path + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n = 0;
  while (p != nullptr && (n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = p == nullptr ? -1 : ::pclose(p);
  std::remove(path.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

const char* const kModel = "model_name=\"strata-tiny\"";

TEST(MetricsCompat, VllmFamiliesNamesLabelsAndBuckets) {
  ServeProcess s({"--metrics-compat", "vllm"});
  ASSERT_GT(s.port(), 0);
  // Before any request every vLLM family is there (dashboards and autoscalers see zeros).
  const std::string idle = HttpCall(s.port(), "GET", "/metrics").body;
  const std::string eng = std::string("{") + kModel + ",engine=\"0\"}";
  EXPECT_EQ(Sample(idle, "vllm:num_requests_waiting" + eng), 0) << idle;
  EXPECT_EQ(Sample(idle, "vllm:time_to_first_token_seconds_count" + eng), 0) << idle;
  json body = {{"prompt", "hello there"}, {"max_tokens", 5}, {"ignore_eos", true}};
  ASSERT_EQ(HttpCall(s.port(), "POST", "/v1/completions", body.dump()).status, 200);
  const std::string success = std::string("vllm:request_success_total{") + kModel +
                              ",finished_reason=\"length\",engine=\"0\"}";
  const std::string m = ScrapeUntil(s.port(), success, 1);
  EXPECT_EQ(Sample(m, success), 1) << m;
  for (const char* reason : {"stop", "abort", "error"})
    EXPECT_EQ(Sample(m, std::string("vllm:request_success_total{") + kModel +
                            ",finished_reason=\"" + reason + "\",engine=\"0\"}"),
              0)
        << reason;
  // name -> TYPE, as vLLM exports them (prometheus_client adds _total to counters).
  const std::pair<const char*, const char*> families[] = {
      {"vllm:num_requests_running", "gauge"},
      {"vllm:num_requests_waiting", "gauge"},
      {"vllm:kv_cache_usage_perc", "gauge"},
      {"vllm:gpu_cache_usage_perc", "gauge"},
      {"vllm:prefix_cache_queries_total", "counter"},
      {"vllm:prefix_cache_hits_total", "counter"},
      {"vllm:num_preemptions_total", "counter"},
      {"vllm:prompt_tokens_total", "counter"},
      {"vllm:generation_tokens_total", "counter"},
      {"vllm:request_success_total", "counter"},
      {"vllm:request_prompt_tokens", "histogram"},
      {"vllm:request_generation_tokens", "histogram"},
      {"vllm:time_to_first_token_seconds", "histogram"},
      {"vllm:inter_token_latency_seconds", "histogram"},
      {"vllm:time_per_output_token_seconds", "histogram"},
      {"vllm:e2e_request_latency_seconds", "histogram"},
      {"vllm:request_queue_time_seconds", "histogram"},
      {"vllm:request_prefill_time_seconds", "histogram"},
      {"vllm:request_decode_time_seconds", "histogram"},
      {"vllm:request_inference_time_seconds", "histogram"},
  };
  for (const auto& [name, type] : families)
    EXPECT_NE(m.find(std::string("# TYPE ") + name + " " + type + "\n"), std::string::npos) << name;
  // The same events as the strata: families (which carry the priority tier label vLLM lacks).
  const std::string strata_gen =
      std::string("strata:generation_tokens_total{") + kModel + ",tier=\"silver\"}";
  EXPECT_EQ(Sample(m, "vllm:generation_tokens_total" + eng), 5);
  EXPECT_EQ(Sample(m, strata_gen), 5);
  EXPECT_EQ(Sample(m, "vllm:prompt_tokens_total" + eng),
            Sample(m, std::string("strata:prompt_tokens_total{") + kModel + ",tier=\"silver\"}"));
  EXPECT_EQ(Sample(m, "vllm:time_to_first_token_seconds_count" + eng), 1);
  EXPECT_EQ(Sample(m, "vllm:inter_token_latency_seconds_count" + eng), 4);  // 5 tokens, 4 gaps
  EXPECT_EQ(Sample(m, "vllm:e2e_request_latency_seconds_count" + eng), 1);
  EXPECT_EQ(Sample(m, "vllm:request_generation_tokens_sum" + eng), 5);
  // vLLM's buckets: TTFT up to 2560 s, TPOT/ITL up to 80 s, request latency up to 7680 s, token
  // counts 1-2-5 up to the context size (2048 for the bundled model).
  const std::string le = std::string("{") + kModel + ",engine=\"0\",le=";
  EXPECT_EQ(Sample(m, "vllm:time_to_first_token_seconds_bucket" + le + "\"2560\"}"), 1);
  EXPECT_EQ(Sample(m, "vllm:time_per_output_token_seconds_bucket" + le + "\"0.025\"}") >= 0, true);
  EXPECT_EQ(Sample(m, "vllm:e2e_request_latency_seconds_bucket" + le + "\"7680\"}"), 1);
  EXPECT_EQ(Sample(m, "vllm:request_generation_tokens_bucket" + le + "\"5\"}"), 1);
  EXPECT_EQ(Sample(m, "vllm:request_generation_tokens_bucket" + le + "\"2\"}"), 0);
  EXPECT_EQ(Sample(m, "vllm:request_prompt_tokens_bucket" + le + "\"1000\"}"), 1);
  EXPECT_EQ(Sample(m, "vllm:request_prompt_tokens_bucket" + le + "\"5000\"}"), -1);  // > 2048

  // promtool parses the scrape; the only lint it may report is the colon in names (recording-rule
  // style), which vLLM's own names have too.
  auto [rc, out] = Promtool(m);
  ASSERT_TRUE(rc == 0 || rc == 3) << "promtool exit " << rc << ":\n" << out;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line))
    EXPECT_NE(line.find("metric names should not contain ':'"), std::string::npos) << line;
}

TEST(MetricsCompat, OffByDefaultAndRejectsUnknownSchemes) {
  ServeProcess s({});
  ASSERT_GT(s.port(), 0);
  const std::string m = HttpCall(s.port(), "GET", "/metrics").body;
  EXPECT_EQ(m.find("vllm:"), std::string::npos) << m;
  EXPECT_NE(m.find("# TYPE strata:num_requests_running gauge"), std::string::npos) << m;
  auto [rc, out] = Promtool(m);
  EXPECT_TRUE(rc == 0 || rc == 3) << "promtool exit " << rc << ":\n" << out;
  ServeProcess bad({"--metrics-compat", "sglang"});
  EXPECT_TRUE(bad.port() == 0 || bad.Wait(10) == 1);
}

}  // namespace
