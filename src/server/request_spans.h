// Request spans: the replica's span tree of one traced generation request, built on the request's
// I/O strand when it ends from the server's own steady-clock stamps and the engine's timelines
// (engine/sched/timeline.h) — the engine thread never traces.
//
// Tree (all children of the SERVER span; times are steady_clock through trace::ToUnixNanos):
//   "{op} {model}"  SERVER  arrival in the handler -> the answer handed to the connection.
//                   gen_ai.operation.name (chat | text_completion), gen_ai.request.model,
//                   gen_ai.request.max_tokens, gen_ai.response.id, gen_ai.usage.input_tokens,
//                   gen_ai.usage.output_tokens, gen_ai.response.finish_reasons, strata.priority,
//                   strata.tenant, strata.cached_tokens, strata.preemptions, strata.stream,
//                   http.response.status_code; status error (with the message) on an error answer.
//   strata.parse     arrival -> the prompt's turn (body checks before the prompt)
//   strata.template  the chat template render (chat only)
//   strata.tokenize  the prompt's tokenization (and its length checks)
//   strata.queue     end of tokenize -> first scheduled engine step (the remaining field checks and
//                    Engine::Submit, microseconds, then the engine's queue wait; attribute
//                    strata.queue_ms is the engine's own: submission -> first step); its children
//                    are the strata.kv_tier.fetch spans (strata.tier, strata.blocks,
//                    strata.blocks_requested, strata.timed_out) — a prefetch is part of the wait
//   strata.prefill   one per prefill chunk (strata.chunk_index, strata.chunk_tokens,
//                    strata.cached_tokens; strata.prompt_index in a batch)
//   strata.decode    first token -> last token; events "first_token", "preempted", "resumed" (from
//                    the timeline) and "tokens" every kTokensEvery tokens the server received
//                    (strata.tokens = the count so far); strata.decode_steps
//   strata.stream    last token -> the answer handed over (the final detokenize, render and write;
//                    strata.detokenize_ms = all detokenize + stop-string time of the request)
// The phases are sequential and contiguous: together they cover the SERVER span up to the engine's
// step overhead between two prefill chunks of one request (microseconds). A phase never reached is
// left out (an error before scheduling has no prefill/decode; a request cancelled while queued ends
// its queue span at the cancel). Thread contract: pure function over values. Errors: none.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/sched/timeline.h"
#include "trace/span.h"
#include "trace/trace_context.h"

namespace strata::server {

using SteadyClockTime = std::chrono::steady_clock::time_point;

inline constexpr int kTokensEvery = 16;  // a "tokens" event per this many tokens

// What the server stamps for a traced request (only when it is sampled).
struct TraceStamps {
  SteadyClockTime arrival{}, prompt_start{}, template_end{}, tokenize_end{};
  std::vector<std::pair<SteadyClockTime, int>> token_marks;  // every kTokensEvery tokens
  int64_t detokenize_ns = 0;
};

// The request's trace identity: the SERVER span's ids, its parent (invalid: a root) and the
// tracestate it continues.
struct RequestTrace {
  trace::TraceId trace_id;
  trace::SpanId span_id;
  trace::SpanId parent_span_id;
  std::string tracestate;
  TraceStamps stamps;
};

// The answer's facts for the SERVER span's attributes.
struct SpanFacts {
  bool chat = false;
  bool stream = false;
  std::string model;  // the request's model (adapter name or the base model)
  int max_tokens = 0;
  std::string response_id;
  int input_tokens = 0, output_tokens = 0;
  std::vector<std::string> finish_reasons;
  std::string priority, tenant;
  int http_status = 200;
  std::string error;  // non-empty: status error with this message
};

// The spans of the request, SERVER span first. `timelines`: the latest snapshot per engine request
// (null entries allowed); `last_token`: the server's time of the last token (zero: none); `end`:
// when the answer was handed over.
std::vector<trace::Span> BuildRequestSpans(
    const RequestTrace& t, const SpanFacts& facts,
    std::span<const std::shared_ptr<const engine::sched::RequestTimeline>> timelines,
    SteadyClockTime last_token, SteadyClockTime end);

}  // namespace strata::server
