// trace/trace_context: W3C Trace Context (https://www.w3.org/TR/trace-context/) — the
// `traceparent` / `tracestate` headers a request carries from the client through the gateway to a
// replica, and fresh ids for new traces and spans.
//
// traceparent = version "-" trace-id "-" parent-id "-" trace-flags, lower-case hex:
//   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01". Version ff is invalid; a higher
//   version than 00 is parsed by its first four fields (the W3C forward-compatibility rule); an
//   all-zero trace id or parent id, upper-case or wrong-length hex is invalid. An invalid header
//   is ignored (a new trace starts), never an error to the client. tracestate is passed on as it
//   came (at most kMaxTracestateBytes; longer is dropped), only when traceparent was valid.
//
// Thread contract: value types; NewTraceId/NewSpanId are thread-safe (a thread-local generator
// seeded from std::random_device). Errors: none (parsing returns nullopt).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata::trace {

inline constexpr size_t kMaxTracestateBytes = 512;

struct TraceId {
  std::array<uint8_t, 16> bytes{};
  bool valid() const;       // not all zero
  std::string Hex() const;  // 32 lower-case hex digits
  friend bool operator==(const TraceId&, const TraceId&) = default;
};

struct SpanId {
  std::array<uint8_t, 8> bytes{};
  bool valid() const;       // not all zero
  std::string Hex() const;  // 16 lower-case hex digits
  friend bool operator==(const SpanId&, const SpanId&) = default;
};

// The context a span runs in: its trace, the span that is the parent of what is started next,
// and whether the trace is sampled (trace-flags bit 0).
struct TraceContext {
  TraceId trace_id;
  SpanId span_id;
  bool sampled = false;
  std::string tracestate;
};

std::optional<TraceContext> ParseTraceparent(std::string_view traceparent,
                                             std::string_view tracestate = {});
std::string FormatTraceparent(const TraceContext& ctx);  // version 00

TraceId NewTraceId();  // random, valid
SpanId NewSpanId();    // random, valid

}  // namespace strata::trace
