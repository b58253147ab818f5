// Request timing: one generation request's latency breakdown (queue, prefill, decode, inference,
// e2e), computed when it ends from the engine's timelines of its engine requests (one per prompt
// of a batch; engine/sched/timeline.h) plus the server's own arrival and end stamps — what the
// breakdown histograms observe and what `x-strata-timing: 1` returns (response header and
// usage.strata_timing).
//
//   queue      first engine submission -> first scheduled engine step (earliest over the prompts)
//   prefill    first scheduled step -> first token
//   decode     first token -> last token (the engine's; when a stop string ended the request before
//              the engine's terminal event, the last token the server processed)
//   inference  first scheduled step -> last token (= prefill + decode)
//   e2e        arrival in the handler -> the end (as strata:e2e_request_latency_seconds)
// Thread contract: pure functions over values. Errors: none (a phase never reached is 0; `known`
// is false when no engine request reached its first token).
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "engine/sched/timeline.h"

namespace strata::server {

struct RequestBreakdown {
  bool known = false;  // every engine phase below was measured
  double queue_s = 0, prefill_s = 0, decode_s = 0, inference_s = 0, e2e_s = 0;
};

// `timelines`: the latest snapshot per engine request (null: none received); `last_token`: the
// server's time of the last token it processed (used when no terminal timeline came back; zero:
// none); `arrival` / `end`: the server's stamps.
RequestBreakdown ComputeBreakdown(
    std::span<const std::shared_ptr<const engine::sched::RequestTimeline>> timelines,
    std::chrono::steady_clock::time_point arrival, std::chrono::steady_clock::time_point last_token,
    std::chrono::steady_clock::time_point end);

// "queue_ms=1.250;prefill_ms=10.000;decode_ms=80.125;inference_ms=90.125;e2e_ms=93.500"
std::string TimingHeaderValue(const RequestBreakdown& b);
// {"queue_ms":1.25,"prefill_ms":10.0,"decode_ms":80.125,"inference_ms":90.125,"e2e_ms":93.5}
// (milliseconds rounded to microseconds, as the header).
nlohmann::ordered_json TimingJson(const RequestBreakdown& b);

}  // namespace strata::server
