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
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// Writes JSON through a raw cursor into `out`'s characters: each piece first makes room for its
// largest possible size (one comparison), then stores without std::string's per-call checks.
// The destructor trims `out` to what was written. The encoder spends most of its time here: a
// replica encodes ~10 spans per request, and std::string's append per piece cost ~2x these
// instructions.
class Writer {
 public:
  explicit Writer(std::string* out) : out_(out), p_(out->data() + out->size()), end_(p_) {}
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  ~Writer() { out_->resize(static_cast<size_t>(p_ - out_->data())); }

  void Char(char c) {
    Room(1);
    *p_++ = c;
  }
  template <size_t kN>  // a string literal (its size known here, so the copy is inlined)
  void Lit(const char (&s)[kN]) {
    Room(kN - 1);
    std::memcpy(p_, s, kN - 1);
    p_ += kN - 1;
  }
  void Raw(std::string_view s) {
    Room(s.size());
    std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
  }
  void String(std::string_view s);  // quoted and escaped
  void Decimal(int64_t v);          // unquoted
  template <size_t kN>
  void HexId(const std::array<uint8_t, kN>& bytes) {  // quoted lower-case hex
    char* p = Room(2 * kN + 2);
    *p++ = '"';
    for (size_t i = 0; i < kN; ++i) {
      *p++ = kHex[bytes[i] >> 4];
      *p++ = kHex[bytes[i] & 0xF];
    }
    *p++ = '"';
    p_ = p;
  }

 private:
  char* Room(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) Grow(n);
    return p_;
  }
  void Grow(size_t n) {
    const size_t used = static_cast<size_t>(p_ - out_->data());
    out_->resize(std::max(used + n, 2 * out_->size() + 1024));  // zero-filled: amortized
    p_ = out_->data() + used;
    end_ = out_->data() + out_->size();
  }
  void Escaped(std::string_view s, size_t from);

  std::string* out_;
  char* p_;
  char* end_;
};

// Whether any of the 8 bytes at p is < 0x20, '"', '\\' or >= 0x80. Each "zero byte" test can
// flag a byte above a real match, never miss one, so false means all 8 are plain.
bool AnyNeedsCare(const char* p) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  uint64_t x;
  std::memcpy(&x, p, 8);
  const uint64_t quote = x ^ (kOnes * '"');
  const uint64_t slash = x ^ (kOnes * '\\');
  return (((x - kOnes * 0x20) | (quote - kOnes) | (slash - kOnes) | x) & kHigh) != 0;
}

// The index of the first byte of s at or after `i` that a JSON string cannot hold as it is (a
// control character, '"', '\\', or any byte >= 0x80, which the slow path checks as UTF-8); s.size()
// when there is none. Eight bytes a step (SWAR) on the common path: nearly every string is plain.
size_t PlainRunEnd(std::string_view s, size_t i) {
  for (; i + 8 <= s.size(); i += 8) {
    if (AnyNeedsCare(s.data() + i)) break;
  }
  // The tail: the string's last 8 bytes at once (overlapping what was checked) when it has 8.
  if (i + 8 > s.size() && s.size() >= 8 && !AnyNeedsCare(s.data() + s.size() - 8)) {
    return s.size();
  }
  for (; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') return i;
  }
  return i;
}

void Writer::String(std::string_view s) {
  const size_t plain = PlainRunEnd(s, 0);
  char* p = Room(plain + 2);
  *p++ = '"';
  std::memcpy(p, s.data(), plain);
  p_ = p + plain;
  if (plain < s.size()) Escaped(s, plain);
  Char('"');
}

// The rest of a string from s[i] (a byte that needs care) on.
void Writer::Escaped(std::string_view s, size_t i) {
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const Utf8Step step = Utf8At(s, i);
      Raw(step.valid == 0 ? kReplacement : s.substr(i, step.valid));
      i += step.consumed;
    } else if (c == '"' || c == '\\') {
      char* p = Room(2);
      p[0] = '\\';
      p[1] = static_cast<char>(c);
      p_ = p + 2;
      ++i;
    } else if (c < 0x20) {
      char* p = Room(6);
      p[0] = '\\';
      p[1] = 'u';
      p[2] = '0';
      p[3] = '0';
      p[4] = kHex[c >> 4];
      p[5] = kHex[c & 0xF];
      p_ = p + 6;
      ++i;
    } else {
      const size_t plain = PlainRunEnd(s, i);
      Raw(s.substr(i, plain - i));
      i = plain;
    }
  }
}

void Writer::Decimal(int64_t v) {
  // fmt's formatter: two digits a step into its own buffer (std::to_chars spent ~3x this on a
  // span's 19-digit nanosecond times).
  const fmt::format_int digits(v);
  Raw(std::string_view(digits.data(), digits.size()));
}

void AppendDecimalString(Writer* w, int64_t v) {  // "123" (quoted: OTLP's int64)
  w->Char('"');
  w->Decimal(v);
  w->Char('"');
}

void AppendDouble(Writer* w, double v) {
  if (!std::isfinite(v)) {
    w->Lit("null");
    return;
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round trip
  w->Raw(std::string_view(buf, static_cast<size_t>(end - buf)));
}

void AppendValue(Writer* w, const AttrValue& value) {
  std::visit(
      [w](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          w->Lit("{\"stringValue\":");
          w->String(v);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          w->Lit("{\"intValue\":");
          AppendDecimalString(w, v);
        } else if constexpr (std::is_same_v<T, double>) {
          w->Lit("{\"doubleValue\":");
          AppendDouble(w, v);
        } else if constexpr (std::is_same_v<T, bool>) {
          if (v) {
            w->Lit("{\"boolValue\":true");
          } else {
            w->Lit("{\"boolValue\":false");
          }
        } else {
          w->Lit("{\"arrayValue\":{\"values\":[");
          for (size_t i = 0; i < v.size(); ++i) {
            if (i > 0) w->Char(',');
            w->Lit("{\"stringValue\":");
            w->String(v[i]);
            w->Char('}');
          }
          w->Lit("]}");
        }
        w->Char('}');
      },
      value);
}

void AppendAttributes(Writer* w, const std::vector<Attribute>& attributes) {
  w->Char('[');
  for (size_t i = 0; i < attributes.size(); ++i) {
    if (i > 0) w->Char(',');
    w->Lit("{\"key\":");
    w->String(attributes[i].key);
    w->Lit(",\"value\":");
    AppendValue(w, attributes[i].value);
    w->Char('}');
  }
  w->Char(']');
}

void AppendEvents(Writer* w, const std::vector<SpanEvent>& events) {
  w->Char('[');
  for (size_t i = 0; i < events.size(); ++i) {
    if (i > 0) w->Char(',');
    w->Lit("{\"timeUnixNano\":");
    AppendDecimalString(w, events[i].time_unix_ns);
    w->Lit(",\"name\":");
    w->String(events[i].name);
    if (!events[i].attributes.empty()) {
      w->Lit(",\"attributes\":");
      AppendAttributes(w, events[i].attributes);
    }
    w->Char('}');
  }
  w->Char(']');
}

void AppendSpan(Writer* w, const Span& span) {
  w->Lit("{\"traceId\":");
  w->HexId(span.trace_id.bytes);
  w->Lit(",\"spanId\":");
  w->HexId(span.span_id.bytes);
  if (span.parent_span_id.valid()) {
    w->Lit(",\"parentSpanId\":");
    w->HexId(span.parent_span_id.bytes);
  }
  if (!span.tracestate.empty()) {
    w->Lit(",\"traceState\":");
    w->String(span.tracestate);
  }
  w->Lit(",\"name\":");
  w->String(span.name);
  w->Lit(",\"kind\":");
  w->Char(static_cast<char>('0' + static_cast<int>(span.kind)));  // 1..3
  w->Lit(",\"startTimeUnixNano\":");
  AppendDecimalString(w, span.start_unix_ns);
  w->Lit(",\"endTimeUnixNano\":");
  AppendDecimalString(w, span.end_unix_ns);
  if (!span.attributes.empty()) {
    w->Lit(",\"attributes\":");
    AppendAttributes(w, span.attributes);
  }
  if (!span.events.empty()) {
    w->Lit(",\"events\":");
    AppendEvents(w, span.events);
  }
  if (span.status != SpanStatus::kUnset || !span.status_message.empty()) {
    w->Lit(",\"status\":{\"code\":");
    w->Char(static_cast<char>('0' + static_cast<int>(span.status)));
    if (!span.status_message.empty()) {
      w->Lit(",\"message\":");
      w->String(span.status_message);
    }
    w->Char('}');
  }
  w->Char('}');
}

}  // namespace

void AppendOtlpSpans(std::string* out, std::span<const Span> spans) {
  Writer w(out);
  for (size_t i = 0; i < spans.size(); ++i) {
    if (i > 0) w.Char(',');
    AppendSpan(&w, spans[i]);
  }
}

std::string OtlpRequestHead(const std::vector<Attribute>& resource) {
  std::string out;
  {
    Writer w(&out);
    w.Lit("{\"resourceSpans\":[{\"resource\":{\"attributes\":");
    AppendAttributes(&w, resource);
    w.Lit("},\"scopeSpans\":[{\"scope\":{\"name\":\"strata\"},\"spans\":[");
  }
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
