#include "server/request_timing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace strata::server {

using engine::sched::RequestTimeline;
using engine::sched::TimePoint;

namespace {

double Seconds(TimePoint a, TimePoint b) {
  return b > a ? std::chrono::duration<double>(b - a).count() : 0.0;
}

double RoundedMs(double s) { return std::round(s * 1e6) / 1e3; }

// Earliest set time point (a zero one is "not reached").
void Earliest(TimePoint t, TimePoint* out) {
  if (RequestTimeline::Set(t) && (!RequestTimeline::Set(*out) || t < *out)) *out = t;
}
void Latest(TimePoint t, TimePoint* out) {
  if (RequestTimeline::Set(t) && t > *out) *out = t;
}

}  // namespace

RequestBreakdown ComputeBreakdown(std::span<const std::shared_ptr<const RequestTimeline>> timelines,
                                  TimePoint arrival, TimePoint last_token, TimePoint end) {
  RequestBreakdown b;
  b.e2e_s = Seconds(arrival, end);
  TimePoint submitted{}, scheduled{}, first_token{}, finished{};
  bool all_finished = true;
  for (const auto& t : timelines) {
    if (t == nullptr) {
      all_finished = false;
      continue;
    }
    Earliest(t->submitted, &submitted);
    Earliest(t->first_scheduled, &scheduled);
    Earliest(t->first_token, &first_token);
    Latest(t->finished, &finished);
    Latest(t->first_token, &finished);  // at least its first token
    all_finished = all_finished && RequestTimeline::Set(t->finished);
  }
  if (!RequestTimeline::Set(scheduled) || !RequestTimeline::Set(first_token)) return b;
  // A stop string ended the request before the engine's terminal event came back.
  if (!all_finished) Latest(last_token, &finished);
  b.known = true;
  b.queue_s = Seconds(submitted, scheduled);
  b.prefill_s = Seconds(scheduled, first_token);
  b.decode_s = Seconds(first_token, finished);
  b.inference_s = Seconds(scheduled, finished);
  return b;
}

std::string TimingHeaderValue(const RequestBreakdown& b) {
  return fmt::format(
      "queue_ms={:.3f};prefill_ms={:.3f};decode_ms={:.3f};inference_ms={:.3f};"
      "e2e_ms={:.3f}",
      b.queue_s * 1e3, b.prefill_s * 1e3, b.decode_s * 1e3, b.inference_s * 1e3, b.e2e_s * 1e3);
}

nlohmann::ordered_json TimingJson(const RequestBreakdown& b) {
  return {{"queue_ms", RoundedMs(b.queue_s)},
          {"prefill_ms", RoundedMs(b.prefill_s)},
          {"decode_ms", RoundedMs(b.decode_s)},
          {"inference_ms", RoundedMs(b.inference_s)},
          {"e2e_ms", RoundedMs(b.e2e_s)}};
}

}  // namespace strata::server
