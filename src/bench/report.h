// Benchmark reports: the console table and the JSON document of one run.
//
// JSON schema "strata.bench.serve/1" (all times in ms, throughputs per second):
//   schema, base_url, model, endpoint, dataset, num_prompts (requests in the dataset), request_rate
//   (number, or the string "inf"), burstiness, max_concurrency (0 = unbounded), seed, ignore_eos,
//   completed, failed, not_sent, first_error (string or null), duration_s, request_throughput,
//   input_throughput, output_throughput, total_token_throughput, total_input_tokens,
//   total_output_tokens, ttft_ms / tpot_ms / itl_ms / e2el_ms: {mean, median, p90, p99, min, max,
//   count}, slo: {ttft_ms, tpot_ms, e2el_ms} (null when not given), good_requests, goodput
//   (null without SLOs).
// Plus vLLM's flat result keys (benchmark_serving's --save-result, same names and units), so
// scripts that read vLLM results read ours: duration (s), completed, failed, total_input_tokens,
//   total_output_tokens, request_throughput, request_goodput (null without SLOs),
//   output_throughput, total_token_throughput, backend ("openai" | "openai-chat"), model_id, and
//   for m in ttft, tpot, itl, e2el: mean_<m>_ms, median_<m>_ms, std_<m>_ms, p90_<m>_ms, p99_<m>_ms.
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/load_gen.h"
#include "bench/metrics.h"

namespace strata::bench {

struct Report {
  LoadOptions options;
  std::string dataset;
  std::string model;
  int64_t num_prompts = 0;
  int64_t not_sent = 0;
  Slo slo;
  Aggregate agg;
};

Report MakeReport(const LoadOptions& o, const Dataset& d, const LoadResult& r, const Slo& slo);
nlohmann::json ReportToJson(const Report& r);
std::string FormatReport(const Report& r);

// The top-level keys ReportToJson always writes (for schema checks).
const std::vector<std::string>& ReportJsonKeys();
// The vLLM-named keys among them (see above).
const std::vector<std::string>& VllmResultKeys();

}  // namespace strata::bench
