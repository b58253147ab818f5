// Benchmark metrics: per-request records, percentiles and the aggregate report numbers.
//
// Definitions (milliseconds unless named otherwise):
//   TTFT  time from sending the request to the first token chunk of the SSE stream.
//   TPOT  (e2e - ttft) / (output_tokens - 1); only defined for requests with > 1 output token.
//   ITL   gaps between consecutive token chunks of one stream (all requests pooled).
//   E2EL  time from sending the request to the end of the response.
//   Goodput (DistServe): completed requests that meet every given SLO, divided by the duration.
//     A request whose TPOT is undefined (one output token) counts as TPOT 0.
// Percentiles use linear interpolation between closest ranks (numpy's default "linear" method):
//   rank = p/100 * (n - 1).
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata::bench {

// What one request measured. Times are seconds relative to the request's own send time.
struct RequestRecord {
  bool success = false;
  std::string error;          // first error of this request when !success
  int64_t prompt_tokens = 0;  // from the server's usage when present, else the dataset's count
  int64_t output_tokens = 0;  // from the server's usage when present, else the token chunk count
  double ttft_s = 0;
  double e2el_s = 0;
  std::vector<double> itl_s;   // gaps between token chunks
  std::string generated_text;  // concatenated deltas (multi-turn history needs it)
  double start_s = 0;          // send time relative to the run's start
};

// Linear-interpolated percentile of `v` (need not be sorted); 0 for an empty list. p in [0, 100].
double Percentile(std::vector<double> v, double p);

struct Summary {
  double mean = 0, median = 0, p90 = 0, p99 = 0, min = 0, max = 0;
  double std = 0;  // population standard deviation (numpy's np.std, as vLLM's std_*_ms)
  int64_t count = 0;
};
Summary Summarize(const std::vector<double>& v);

struct Slo {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  std::optional<double> e2el_ms;
  bool any() const { return ttft_ms || tpot_ms || e2el_ms; }
};

struct Aggregate {
  int64_t num_requests = 0;  // requests attempted (completed + failed)
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t failed_before_first_token = 0;  // failed without a token received (a retry was safe)
  std::string first_error;
  double duration_s = 0;
  int64_t total_input_tokens = 0;   // completed requests only
  int64_t total_output_tokens = 0;  // completed requests only
  double request_throughput = 0;    // completed / duration
  double input_throughput = 0;      // tokens/s
  double output_throughput = 0;     // tokens/s
  Summary ttft_ms, tpot_ms, itl_ms, e2el_ms;
  int64_t good_requests = 0;      // meeting every SLO (only when slo.any())
  std::optional<double> goodput;  // good_requests / duration (only when slo.any())
};

// Aggregates completed and failed records over a run of `duration_s` seconds.
Aggregate ComputeAggregate(const std::vector<RequestRecord>& records, double duration_s,
                           const Slo& slo);

// TPOT of one record in ms; nullopt when output_tokens <= 1.
std::optional<double> TpotMs(const RequestRecord& r);

}  // namespace strata::bench
