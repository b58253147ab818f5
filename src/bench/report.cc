#include "bench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace strata::bench {

using json = nlohmann::json;

Report MakeReport(const LoadOptions& o, const Dataset& d, const LoadResult& r, const Slo& slo) {
  Report rep;
  rep.options = o;
  rep.dataset = d.name;
  rep.model = r.model;
  rep.num_prompts = d.num_requests();
  rep.not_sent = r.not_sent;
  rep.slo = slo;
  rep.agg = ComputeAggregate(r.records, r.duration_s, slo);
  return rep;
}

namespace {
json SummaryJson(const Summary& s) {
  return {{"mean", s.mean}, {"median", s.median}, {"p90", s.p90},    {"p99", s.p99},
          {"min", s.min},   {"max", s.max},       {"count", s.count}};
}
json Opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }
}  // namespace

const std::vector<std::string>& VllmResultKeys() {
  static const std::vector<std::string> kKeys = [] {
    std::vector<std::string> v = {"duration",
                                  "completed",
                                  "failed",
                                  "total_input_tokens",
                                  "total_output_tokens",
                                  "request_throughput",
                                  "request_goodput",
                                  "output_throughput",
                                  "total_token_throughput",
                                  "backend",
                                  "model_id"};
    for (const char* m : {"ttft", "tpot", "itl", "e2el"})
      for (const char* s : {"mean", "median", "std", "p90", "p99"})
        v.push_back(fmt::format("{}_{}_ms", s, m));
    return v;
  }();
  return kKeys;
}

const std::vector<std::string>& ReportJsonKeys() {
  static const std::vector<std::string> kKeys = [] {
    std::vector<std::string> v = {"schema",
                                  "base_url",
                                  "model",
                                  "endpoint",
                                  "dataset",
                                  "num_prompts",
                                  "request_rate",
                                  "burstiness",
                                  "max_concurrency",
                                  "seed",
                                  "ignore_eos",
                                  "completed",
                                  "failed",
                                  "failed_before_first_token",
                                  "not_sent",
                                  "first_error",
                                  "duration_s",
                                  "request_throughput",
                                  "input_throughput",
                                  "output_throughput",
                                  "total_token_throughput",
                                  "total_input_tokens",
                                  "total_output_tokens",
                                  "ttft_ms",
                                  "tpot_ms",
                                  "itl_ms",
                                  "e2el_ms",
                                  "slo",
                                  "good_requests",
                                  "goodput"};
    for (const std::string& key : VllmResultKeys())
      if (std::find(v.begin(), v.end(), key) == v.end()) v.push_back(key);
    return v;
  }();
  return kKeys;
}

namespace {
void AddVllmKeys(const Report& r, json* j) {
  const Aggregate& a = r.agg;
  (*j)["duration"] = a.duration_s;
  (*j)["request_goodput"] = Opt(a.goodput);
  (*j)["backend"] = r.options.endpoint == "chat" ? "openai-chat" : "openai";
  (*j)["model_id"] = r.model;
  const std::pair<const char*, const Summary*> metrics[] = {
      {"ttft", &a.ttft_ms}, {"tpot", &a.tpot_ms}, {"itl", &a.itl_ms}, {"e2el", &a.e2el_ms}};
  for (const auto& [m, s] : metrics) {
    (*j)[fmt::format("mean_{}_ms", m)] = s->mean;
    (*j)[fmt::format("median_{}_ms", m)] = s->median;
    (*j)[fmt::format("std_{}_ms", m)] = s->std;
    (*j)[fmt::format("p90_{}_ms", m)] = s->p90;
    (*j)[fmt::format("p99_{}_ms", m)] = s->p99;
  }
}
}  // namespace

json ReportToJson(const Report& r) {
  const Aggregate& a = r.agg;
  json j;
  j["schema"] = "strata.bench.serve/1";
  j["base_url"] = r.options.base_url;
  j["model"] = r.model;
  j["endpoint"] = r.options.endpoint;
  j["dataset"] = r.dataset;
  j["num_prompts"] = r.num_prompts;
  j["request_rate"] =
      std::isinf(r.options.request_rate) ? json("inf") : json(r.options.request_rate);
  j["burstiness"] = r.options.burstiness;
  j["max_concurrency"] = r.options.max_concurrency;
  j["seed"] = r.options.seed;
  j["ignore_eos"] = r.options.ignore_eos;
  j["completed"] = a.completed;
  j["failed"] = a.failed;
  j["failed_before_first_token"] = a.failed_before_first_token;
  j["not_sent"] = r.not_sent;
  j["first_error"] = a.first_error.empty() ? json(nullptr) : json(a.first_error);
  j["duration_s"] = a.duration_s;
  j["request_throughput"] = a.request_throughput;
  j["input_throughput"] = a.input_throughput;
  j["output_throughput"] = a.output_throughput;
  j["total_token_throughput"] = a.input_throughput + a.output_throughput;
  j["total_input_tokens"] = a.total_input_tokens;
  j["total_output_tokens"] = a.total_output_tokens;
  j["ttft_ms"] = SummaryJson(a.ttft_ms);
  j["tpot_ms"] = SummaryJson(a.tpot_ms);
  j["itl_ms"] = SummaryJson(a.itl_ms);
  j["e2el_ms"] = SummaryJson(a.e2el_ms);
  j["slo"] = {{"ttft_ms", Opt(r.slo.ttft_ms)},
              {"tpot_ms", Opt(r.slo.tpot_ms)},
              {"e2el_ms", Opt(r.slo.e2el_ms)}};
  j["good_requests"] = r.slo.any() ? json(a.good_requests) : json(nullptr);
  j["goodput"] = Opt(a.goodput);
  AddVllmKeys(r, &j);
  return j;
}

std::string FormatReport(const Report& r) {
  const Aggregate& a = r.agg;
  std::string s;
  auto line = [&](std::string_view k, const std::string& v) {
    s += fmt::format("{:<40}{:>14}\n", k, v);
  };
  auto f2 = [](double x) { return fmt::format("{:.2f}", x); };
  s += fmt::format("{:=^54}\n", " Serving Benchmark Result ");
  line("Endpoint:", r.options.base_url);
  line("Dataset:", r.dataset);
  line("Request rate / concurrency:",
       fmt::format(
           "{} / {}",
           std::isinf(r.options.request_rate) ? std::string("inf") : f2(r.options.request_rate),
           r.options.max_concurrency > 0 ? std::to_string(r.options.max_concurrency)
                                         : std::string("-")));
  line("Successful requests:", std::to_string(a.completed));
  line("Failed requests:", std::to_string(a.failed));
  if (a.failed)
    line("  of them before the first token:", std::to_string(a.failed_before_first_token));
  if (r.not_sent) line("Not sent (max duration):", std::to_string(r.not_sent));
  line("Benchmark duration (s):", f2(a.duration_s));
  line("Total input tokens:", std::to_string(a.total_input_tokens));
  line("Total generated tokens:", std::to_string(a.total_output_tokens));
  line("Request throughput (req/s):", f2(a.request_throughput));
  if (a.goodput) line("Request goodput (req/s):", f2(*a.goodput));
  line("Input token throughput (tok/s):", f2(a.input_throughput));
  line("Output token throughput (tok/s):", f2(a.output_throughput));
  line("Total token throughput (tok/s):", f2(a.input_throughput + a.output_throughput));
  auto block = [&](std::string_view title, std::string_view name, const Summary& m) {
    s += fmt::format("{:-^54}\n", fmt::format(" {} ", title));
    line(fmt::format("Mean {} (ms):", name), f2(m.mean));
    line(fmt::format("Median {} (ms):", name), f2(m.median));
    line(fmt::format("P90 {} (ms):", name), f2(m.p90));
    line(fmt::format("P99 {} (ms):", name), f2(m.p99));
  };
  block("Time to First Token", "TTFT", a.ttft_ms);
  block("Time per Output Token (excl. 1st token)", "TPOT", a.tpot_ms);
  block("Inter-token Latency", "ITL", a.itl_ms);
  block("End-to-end Latency", "E2EL", a.e2el_ms);
  if (r.slo.any()) {
    s += fmt::format("{:-^54}\n", " SLO ");
    if (r.slo.ttft_ms) line("TTFT SLO (ms):", f2(*r.slo.ttft_ms));
    if (r.slo.tpot_ms) line("TPOT SLO (ms):", f2(*r.slo.tpot_ms));
    if (r.slo.e2el_ms) line("E2EL SLO (ms):", f2(*r.slo.e2el_ms));
    line("Requests meeting every SLO:", std::to_string(a.good_requests));
  }
  s += std::string(54, '=') + "\n";
  if (!a.first_error.empty()) s += "first error: " + a.first_error + "\n";
  return s;
}

}  // namespace strata::bench
