// trace/otlp_json: the OTLP/JSON ExportTraceServiceRequest of a batch of spans (see tracer.h).
// OTLP's JSON mapping: lowerCamelCase field names, trace/span ids as lower-case hex (not base64),
// 64-bit integers (times, intValue) as decimal strings, enums as their numbers.
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "trace/tracer.h"

namespace strata::trace {
namespace {

using nlohmann::json;

json EncodeValue(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return json{{"stringValue", v}};
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return json{{"intValue", std::to_string(v)}};
        } else if constexpr (std::is_same_v<T, double>) {
          return json{{"doubleValue", v}};
        } else if constexpr (std::is_same_v<T, bool>) {
          return json{{"boolValue", v}};
        } else {
          json values = json::array();
          for (const auto& s : v) values.push_back(json{{"stringValue", s}});
          return json{{"arrayValue", json{{"values", std::move(values)}}}};
        }
      },
      value);
}

json EncodeAttributes(const std::vector<Attribute>& attributes) {
  json out = json::array();
  for (const auto& a : attributes)
    out.push_back(json{{"key", a.key}, {"value", EncodeValue(a.value)}});
  return out;
}

json EncodeSpan(const Span& span) {
  json out = {
      {"traceId", span.trace_id.Hex()},
      {"spanId", span.span_id.Hex()},
      {"name", span.name},
      {"kind", static_cast<int>(span.kind)},
      {"startTimeUnixNano", std::to_string(span.start_unix_ns)},
      {"endTimeUnixNano", std::to_string(span.end_unix_ns)},
      {"attributes", EncodeAttributes(span.attributes)},
  };
  if (span.parent_span_id.valid()) out["parentSpanId"] = span.parent_span_id.Hex();
  if (!span.tracestate.empty()) out["traceState"] = span.tracestate;
  if (!span.events.empty()) {
    json events = json::array();
    for (const auto& e : span.events) {
      events.push_back(json{{"timeUnixNano", std::to_string(e.time_unix_ns)},
                            {"name", e.name},
                            {"attributes", EncodeAttributes(e.attributes)}});
    }
    out["events"] = std::move(events);
  }
  json status = {{"code", static_cast<int>(span.status)}};
  if (!span.status_message.empty()) status["message"] = span.status_message;
  out["status"] = std::move(status);
  return out;
}

}  // namespace

std::string EncodeOtlpJson(const std::vector<Attribute>& resource, const std::vector<Span>& spans) {
  json encoded = json::array();
  for (const auto& s : spans) encoded.push_back(EncodeSpan(s));
  json scope_spans = json::array();
  scope_spans.push_back(json{{"scope", json{{"name", "strata"}}}, {"spans", std::move(encoded)}});
  json resource_spans = json::array();
  resource_spans.push_back(json{{"resource", json{{"attributes", EncodeAttributes(resource)}}},
                                {"scopeSpans", std::move(scope_spans)}});
  const json request = {{"resourceSpans", std::move(resource_spans)}};
  // Invalid UTF-8 (a client's model name, say) is replaced, never an exception.
  return request.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace strata::trace
