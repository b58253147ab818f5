// trace/span: bounded setters, child spans, the steady-clock -> Unix-time bridge (see span.h).
#include "trace/span.h"

#include <utility>

namespace strata::trace {
namespace {

void Truncate(std::string_view* s) {
  if (s->size() <= kMaxValueBytes) return;
  size_t n = kMaxValueBytes;
  while (n > 0 && (static_cast<unsigned char>((*s)[n]) & 0xC0) == 0x80) --n;
  *s = s->substr(0, n);
}

void Truncate(std::string* s) {
  if (s->size() <= kMaxValueBytes) return;
  // Cut at a UTF-8 character boundary so the JSON encoder never sees half a character.
  size_t n = kMaxValueBytes;
  while (n > 0 && (static_cast<unsigned char>((*s)[n]) & 0xC0) == 0x80) --n;
  s->resize(n);
}

void Bound(AttrValue* v) {
  if (auto* s = std::get_if<std::string>(v)) {
    Truncate(s);
  } else if (auto* list = std::get_if<std::vector<std::string>>(v)) {
    if (list->size() > kMaxAttributes) list->resize(kMaxAttributes);
    for (auto& item : *list) Truncate(&item);
  }
}

void BoundAll(std::vector<Attribute>* attributes) {
  if (attributes->size() > kMaxAttributes) attributes->resize(kMaxAttributes);
  for (auto& a : *attributes) {
    Truncate(&a.key);
    Bound(&a.value);
  }
}

}  // namespace

void Span::AddAttribute(std::string_view key, AttrValue value) {
  if (attributes.size() >= kMaxAttributes) return;
  // Room for a typical span's attributes in one allocation (growing 1, 2, 4, 8 moved each value
  // three times).
  if (attributes.capacity() == 0) attributes.reserve(8);
  Truncate(&key);
  Bound(&value);
  attributes.push_back(Attribute{key, std::move(value)});
}

void Span::AddEvent(std::string name, int64_t time_unix_ns, std::vector<Attribute> attributes) {
  if (events.size() >= kMaxEvents) return;
  Truncate(&name);
  BoundAll(&attributes);
  events.push_back(SpanEvent{std::move(name), time_unix_ns, std::move(attributes)});
}

TraceContext Span::Context(bool sampled) const {
  return TraceContext{trace_id, span_id, sampled, tracestate};
}

Span ChildOf(const TraceContext& parent, std::string name, SpanKind kind) {
  Span span;
  span.trace_id = parent.trace_id.valid() ? parent.trace_id : NewTraceId();
  span.span_id = NewSpanId();
  span.parent_span_id = parent.span_id;
  span.tracestate = parent.tracestate;
  span.name = std::move(name);
  Truncate(&span.name);
  span.kind = kind;
  return span;
}

int64_t ToUnixNanos(std::chrono::steady_clock::time_point t) {
  static const int64_t kOffsetNs = [] {
    const auto wall = std::chrono::system_clock::now().time_since_epoch();
    const auto mono = std::chrono::steady_clock::now().time_since_epoch();
    return std::chrono::duration_cast<std::chrono::nanoseconds>(wall).count() -
           std::chrono::duration_cast<std::chrono::nanoseconds>(mono).count();
  }();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count() +
         kOffsetNs;
}

}  // namespace strata::trace
