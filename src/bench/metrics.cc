#include "bench/metrics.h"

#include <algorithm>
#include <cmath>

namespace strata::bench {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  p = std::clamp(p, 0.0, 100.0);
  double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, v.size() - 1);
  double frac = rank - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}

Summary Summarize(const std::vector<double>& v) {
  Summary s;
  s.count = static_cast<int64_t>(v.size());
  if (v.empty()) return s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  double sq = 0;
  for (double x : v) sq += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(sq / static_cast<double>(v.size()));
  s.median = Percentile(v, 50);
  s.p90 = Percentile(v, 90);
  s.p99 = Percentile(v, 99);
  auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  s.min = *mn;
  s.max = *mx;
  return s;
}

std::optional<double> TpotMs(const RequestRecord& r) {
  if (r.output_tokens <= 1) return std::nullopt;
  return (r.e2el_s - r.ttft_s) * 1000.0 / static_cast<double>(r.output_tokens - 1);
}

Aggregate ComputeAggregate(const std::vector<RequestRecord>& records, double duration_s,
                           const Slo& slo) {
  Aggregate a;
  a.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  for (const auto& r : records) {
    ++a.num_requests;
    if (!r.success) {
      ++a.failed;
      if (r.ttft_s <= 0) ++a.failed_before_first_token;
      if (a.first_error.empty()) a.first_error = r.error;
      continue;
    }
    ++a.completed;
    a.total_input_tokens += r.prompt_tokens;
    a.total_output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s * 1000.0);
    e2el.push_back(r.e2el_s * 1000.0);
    auto t = TpotMs(r);
    if (t) tpot.push_back(*t);
    for (double g : r.itl_s) itl.push_back(g * 1000.0);
    if (slo.any()) {
      bool good = true;
      if (slo.ttft_ms && r.ttft_s * 1000.0 > *slo.ttft_ms) good = false;
      if (slo.tpot_ms && t.value_or(0.0) > *slo.tpot_ms) good = false;
      if (slo.e2el_ms && r.e2el_s * 1000.0 > *slo.e2el_ms) good = false;
      if (good) ++a.good_requests;
    }
  }
  if (duration_s > 0) {
    a.request_throughput = static_cast<double>(a.completed) / duration_s;
    a.input_throughput = static_cast<double>(a.total_input_tokens) / duration_s;
    a.output_throughput = static_cast<double>(a.total_output_tokens) / duration_s;
  }
  if (slo.any())
    a.goodput = duration_s > 0 ? static_cast<double>(a.good_requests) / duration_s : 0.0;
  a.ttft_ms = Summarize(ttft);
  a.tpot_ms = Summarize(tpot);
  a.itl_ms = Summarize(itl);
  a.e2el_ms = Summarize(e2el);
  return a;
}

}  // namespace strata::bench
