// trace/span: one finished span as OpenTelemetry models it (trace and span ids, parent, name,
// kind, start/end in Unix nanoseconds, attributes, events, status), and the clock bridge from
// steady_clock (which the engine and servers measure with) to the Unix time OTLP carries.
//
// Attribute conventions (docs/observability.md): OpenTelemetry GenAI semantic conventions
// (`gen_ai.operation.name` "chat" | "text_completion" | "embeddings", `gen_ai.request.model`,
// `gen_ai.request.max_tokens`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`,
// `gen_ai.response.finish_reasons` (string array)), the span name of a request's server span is
// "{operation} {model}"; Strata's own under `strata.` (strata.priority, strata.tenant,
// strata.cached_tokens, strata.preemptions, strata.route, strata.pool, strata.replica,
// strata.decision, ...).
//
// Bounds (so a hostile request cannot grow a span without limit): AddAttribute/AddEvent ignore
// what exceeds kMaxAttributes / kMaxEvents, and truncate string values to kMaxValueBytes.
// Thread contract: value type. Errors: none.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "trace/trace_context.h"

namespace strata::trace {

inline constexpr size_t kMaxAttributes = 64;
inline constexpr size_t kMaxEvents = 128;
inline constexpr size_t kMaxValueBytes = 1024;

using AttrValue = std::variant<std::string, int64_t, double, bool, std::vector<std::string>>;

// `key` names storage that outlives every copy of the attribute: a string literal (every key
// Strata sets is one, so building a span allocates no key). The encoder escapes it as any string.
struct Attribute {
  std::string_view key;
  AttrValue value;
};

struct SpanEvent {
  std::string name;
  int64_t time_unix_ns = 0;
  std::vector<Attribute> attributes;
};

enum class SpanKind : uint8_t { kInternal = 1, kServer = 2, kClient = 3 };  // OTLP's numbers
enum class SpanStatus : uint8_t { kUnset = 0, kOk = 1, kError = 2 };        // OTLP's numbers

struct Span {
  TraceId trace_id;
  SpanId span_id;
  SpanId parent_span_id;  // invalid (all zero): a root span
  std::string tracestate;
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  std::vector<Attribute> attributes;
  std::vector<SpanEvent> events;
  SpanStatus status = SpanStatus::kUnset;
  std::string status_message;

  // Bounded setters (see the header comment).
  void AddAttribute(std::string_view key, AttrValue value);  // key: see Attribute
  void AddEvent(std::string name, int64_t time_unix_ns, std::vector<Attribute> attributes = {});
  // The context its children run in (this span as their parent).
  TraceContext Context(bool sampled = true) const;
};

// A child span of `parent` with a fresh span id.
Span ChildOf(const TraceContext& parent, std::string name, SpanKind kind);

// steady_clock -> Unix nanoseconds, through one offset taken the first time it is called (so the
// spans of one process are consistent with each other; wall-clock steps later do not move them).
int64_t ToUnixNanos(std::chrono::steady_clock::time_point t);

}  // namespace strata::trace
