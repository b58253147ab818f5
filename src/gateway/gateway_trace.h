// gateway_trace: the spans of one request through the gateway (README.md "Tracing") and the
// trace context it sends to replicas.
//
//   "{op} {model}"      SERVER, root or child of the client's traceparent: the whole request
//                       (gen_ai.* request and usage attributes, strata.route/pool/tenant/priority)
//     "gateway.route"   INTERNAL: admission + routing, to the first dispatch (strata.route, pool,
//                       replica, decision, predicted_cached_tokens)
//     "gateway.upstream" CLIENT: one per upstream attempt (http.response.status_code,
//                       server.address, server.port, strata.replica, strata.attempt); its span id
//                       is the traceparent the replica gets.
//
// Propagation: with a tracer, every upstream attempt carries `traceparent` = this trace, the
// attempt's span id, the sampling decision (head sampling, parent-based), plus the client's
// `tracestate`. Without a tracer the gateway does not touch them: the client's headers are passed
// through unchanged (ForwardedHeaders).
// Thread contract: a RequestTrace belongs to one request and is touched by one callback at a time
// (the RequestFlow's rule, gateway_flow.h). Errors: none.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gateway/balancer.h"
#include "gateway/prompt.h"
#include "gateway/proxy.h"
#include "gateway/types.h"
#include "http/server.h"
#include "trace/tracer.h"

namespace strata::gateway {

// Upstream attempts recorded as spans, at most (retries are bounded by config far below this).
inline constexpr size_t kMaxUpstreamSpans = 16;

// What the request's server span says about it, filled in at the end.
struct TraceFacts {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string_view model, route, pool, tenant;
  Priority priority = Priority::kSilver;
  std::optional<int64_t> max_tokens;  // as the client asked (absent: not given)
  int attempts = 0;
};

struct RequestTrace {
  bool sampled = false;  // spans are built and exported (false: only propagated)
  trace::TraceId trace_id;
  std::string tracestate;
  trace::Span server, route;  // valid when sampled
  bool route_open = false;
  std::vector<trace::Span> upstreams;  // the attempts (the last may still be open)
  bool upstream_open = false;
};

// The request's trace (tracer present): the client's traceparent continued or a new trace,
// sampled by `tracer`. `start` is when the gateway took the request.
std::unique_ptr<RequestTrace> StartRequestTrace(const trace::Tracer& tracer,
                                                const http::HttpRequest& req,
                                                Clock::time_point start);

// One upstream attempt to `pick` begins now: ends the route span (first attempt), opens a CLIENT
// span, and sets `headers`' traceparent/tracestate to it (replacing the client's).
void BeginUpstream(RequestTrace* t, const Pick& pick, int attempt, std::string_view route,
                   std::string_view pool, Clock::time_point now,
                   std::vector<std::pair<std::string, std::string>>* headers);
// The attempt's outcome.
void EndUpstream(RequestTrace* t, const UpstreamResult& r, Clock::time_point now);
// The request ended with `status` (`r`: the last upstream result, may be null): the spans to
// export (empty when not sampled).
std::vector<trace::Span> FinishRequestTrace(RequestTrace* t, const TraceFacts& facts, int status,
                                            const UpstreamResult* r, Clock::time_point now);

// "chat" | "text_completion" | "embeddings" (gen_ai.operation.name).
std::string_view GenAiOperation(Endpoint e);

}  // namespace strata::gateway
