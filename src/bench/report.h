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
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

}  // namespace strata::bench
