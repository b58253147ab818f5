// trace/otlp_json: the OTLP/JSON ExportTraceServiceRequest of a batch of spans (see tracer.h).
// OTLP's JSON mapping: lowerCamelCase field names, trace/span ids as lower-case hex (not base64),
// 64-bit integers (times, intValue) as decimal strings, enums as their numbers. Fields at their
// default value are left out, as the protobuf JSON mapping allows: an empty attribute list, an
// unset status without a message (receivers read both as absent).
//
// Written straight into one string (no JSON object tree): this runs on the exporter's thread for
// every span of every sampled request, and a tree of nlohmann values cost ~15x more per span.
// Strings are escaped per RFC 8259; invalid UTF-8 (a client's model name, say) is replaced by
// U+FFFD, never an exception; a non-finite double is written as null.
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "trace/tracer.h"

namespace strata::trace {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
constexpr char kHex[] = "0123456789abcdef";

// The UTF-8 sequence at s[i]: `valid` its length when it is well-formed (0: not), `consumed` how
// many bytes it spans — for an ill-formed one its maximal subpart (at least 1; Unicode's
// "substitution of maximal subparts", which nlohmann-json's `replace` follows too), replaced by
// one U+FFFD.
struct Utf8Step {
  size_t valid = 0, consumed = 1;
};
Utf8Step Utf8At(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {1, 1};
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlongs
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // no overlongs
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {0, 1};
  }
  size_t k = 1;
  for (; k < n && i + k < s.size(); ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) break;
  }
  return k == n ? Utf8Step{n, n} : Utf8Step{0, k};
}

void AppendString(std::string* out, std::string_view s) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    // The run of characters that need no escape (nearly every string here) in one append.
    size_t plain = i;
    while (plain < s.size()) {
      const auto p = static_cast<unsigned char>(s[plain]);
      if (p < 0x20 || p >= 0x80 || p == '"' || p == '\\') break;
      ++plain;
    }
    out->append(s.data() + i, plain - i);
    i = plain;
    if (i == s.size()) break;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const Utf8Step step = Utf8At(s, i);
      if (step.valid == 0) {
        out->append(kReplacement);
      } else {
        out->append(s.substr(i, step.valid));
      }
      i += step.consumed;
      continue;
    }
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      out->append("\\u00");
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 0xF]);
    } else {
      out->push_back(static_cast<char>(c));
    }
    ++i;
  }
  out->push_back('"');
}

// A trace or span id as its quoted lower-case hex (no escapes to check, no temporary string).
template <size_t kN>
void AppendHexId(std::string* out, const std::array<uint8_t, kN>& bytes) {
  char buf[2 * kN + 2];
  buf[0] = '"';
  for (size_t i = 0; i < kN; ++i) {
    buf[1 + 2 * i] = kHex[bytes[i] >> 4];
    buf[2 + 2 * i] = kHex[bytes[i] & 0xF];
  }
  buf[2 * kN + 1] = '"';
  out->append(buf, sizeof(buf));
}

void AppendDecimalString(std::string* out, int64_t v) {  // "123" (quoted: OTLP's int64)
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->push_back('"');
  out->append(buf, end);
  out->push_back('"');
}

void AppendDouble(std::string* out, double v) {
  if (!std::isfinite(v)) {
    out->append("null");
    return;
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round trip
  out->append(buf, end);
}

// `,"key":` (the comma unless it is the object's first member).
void Key(std::string* out, std::string_view key, bool first = false) {
  if (!first) out->push_back(',');
  out->push_back('"');
  out->append(key);
  out->append("\":");
}

void AppendValue(std::string* out, const AttrValue& value) {
  std::visit(
      [out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        out->push_back('{');
        if constexpr (std::is_same_v<T, std::string>) {
          Key(out, "stringValue", true);
          AppendString(out, v);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          Key(out, "intValue", true);
          AppendDecimalString(out, v);
        } else if constexpr (std::is_same_v<T, double>) {
          Key(out, "doubleValue", true);
          AppendDouble(out, v);
        } else if constexpr (std::is_same_v<T, bool>) {
          Key(out, "boolValue", true);
          out->append(v ? "true" : "false");
        } else {
          Key(out, "arrayValue", true);
          out->append("{\"values\":[");
          for (size_t i = 0; i < v.size(); ++i) {
            if (i > 0) out->push_back(',');
            out->append("{\"stringValue\":");
            AppendString(out, v[i]);
            out->push_back('}');
          }
          out->append("]}");
        }
        out->push_back('}');
      },
      value);
}

void AppendAttributes(std::string* out, const std::vector<Attribute>& attributes) {
  out->push_back('[');
  for (size_t i = 0; i < attributes.size(); ++i) {
    if (i > 0) out->push_back(',');
    out->append("{\"key\":");
    AppendString(out, attributes[i].key);
    Key(out, "value");
    AppendValue(out, attributes[i].value);
    out->push_back('}');
  }
  out->push_back(']');
}

void AppendEvents(std::string* out, const std::vector<SpanEvent>& events) {
  out->push_back('[');
  for (size_t i = 0; i < events.size(); ++i) {
    if (i > 0) out->push_back(',');
    out->push_back('{');
    Key(out, "timeUnixNano", /*first=*/true);
    AppendDecimalString(out, events[i].time_unix_ns);
    Key(out, "name");
    AppendString(out, events[i].name);
    if (!events[i].attributes.empty()) {
      Key(out, "attributes");
      AppendAttributes(out, events[i].attributes);
    }
    out->push_back('}');
  }
  out->push_back(']');
}

void AppendSpan(std::string* out, const Span& span) {
  out->push_back('{');
  Key(out, "traceId", true);
  AppendHexId(out, span.trace_id.bytes);
  Key(out, "spanId");
  AppendHexId(out, span.span_id.bytes);
  if (span.parent_span_id.valid()) {
    Key(out, "parentSpanId");
    AppendHexId(out, span.parent_span_id.bytes);
  }
  if (!span.tracestate.empty()) {
    Key(out, "traceState");
    AppendString(out, span.tracestate);
  }
  Key(out, "name");
  AppendString(out, span.name);
  Key(out, "kind");
  out->push_back(static_cast<char>('0' + static_cast<int>(span.kind)));  // 1..3
  Key(out, "startTimeUnixNano");
  AppendDecimalString(out, span.start_unix_ns);
  Key(out, "endTimeUnixNano");
  AppendDecimalString(out, span.end_unix_ns);
  if (!span.attributes.empty()) {
    Key(out, "attributes");
    AppendAttributes(out, span.attributes);
  }
  if (!span.events.empty()) {
    Key(out, "events");
    AppendEvents(out, span.events);
  }
  if (span.status != SpanStatus::kUnset || !span.status_message.empty()) {
    Key(out, "status");
    out->append("{\"code\":");
    out->push_back(static_cast<char>('0' + static_cast<int>(span.status)));
    if (!span.status_message.empty()) {
      Key(out, "message");
      AppendString(out, span.status_message);
    }
    out->push_back('}');
  }
  out->push_back('}');
}

}  // namespace

void AppendOtlpSpans(std::string* out, std::span<const Span> spans) {
  for (size_t i = 0; i < spans.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendSpan(out, spans[i]);
  }
}

std::string OtlpRequestHead(const std::vector<Attribute>& resource) {
  std::string out = "{\"resourceSpans\":[{\"resource\":{\"attributes\":";
  AppendAttributes(&out, resource);
  out.append("},\"scopeSpans\":[{\"scope\":{\"name\":\"strata\"},\"spans\":[");
  return out;
}

std::string_view OtlpRequestTail() { return "]}]}]}"; }

std::string EncodeOtlpJson(const std::vector<Attribute>& resource,
                           std::span<const std::string_view> span_lists) {
  std::string out = OtlpRequestHead(resource);
  size_t bytes = out.size() + OtlpRequestTail().size();
  for (std::string_view l : span_lists) bytes += l.size() + 1;
  out.reserve(bytes);
  bool first = true;
  for (std::string_view l : span_lists) {
    if (l.empty()) continue;
    if (!first) out.push_back(',');
    first = false;
    out.append(l);
  }
  out.append(OtlpRequestTail());
  return out;
}

std::string EncodeOtlpJson(const std::vector<Attribute>& resource, const std::vector<Span>& spans) {
  std::string list;
  list.reserve(spans.size() * 600);
  AppendOtlpSpans(&list, spans);
  const std::string_view one = list;
  return EncodeOtlpJson(resource, std::span<const std::string_view>(&one, 1));
}

}  // namespace strata::trace
