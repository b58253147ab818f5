// EncodeOtlpJson: the OTLP/JSON mapping, field by field (parsed back with nlohmann-json), and the
// shared test receiver's decoder agreeing with it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "testing/otlp_receiver.h"
#include "trace/tracer.h"

namespace strata::trace {
namespace {

using nlohmann::json;

Span Sample() {
  auto parent = ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=b");
  Span s = ChildOf(*parent, "chat tiny", SpanKind::kServer);
  s.start_unix_ns = 1'700'000'000'123'456'789;
  s.end_unix_ns = 1'700'000'001'000'000'000;
  s.AddAttribute("gen_ai.request.model", std::string("tiny"));
  s.AddAttribute("gen_ai.request.max_tokens", int64_t{9'007'199'254'740'993});  // > 2^53
  s.AddAttribute("strata.ratio", 0.25);
  s.AddAttribute("strata.stream", true);
  s.AddAttribute("gen_ai.response.finish_reasons", std::vector<std::string>{"stop", "length"});
  s.AddEvent("first_token", 1'700'000'000'500'000'000, {Attribute{"strata.tokens", int64_t{1}}});
  s.status = SpanStatus::kError;
  s.status_message = "upstream 503";
  return s;
}

// The one value object of attribute `key` in `attrs` (an OTLP KeyValue list).
json Attr(const json& attrs, const std::string& key) {
  for (const auto& kv : attrs) {
    if (kv.at("key") == key) return kv.at("value");
  }
  ADD_FAILURE() << "no attribute " << key;
  return json::object();
}

TEST(OtlpJson, EncodesTheExportTraceServiceRequestShape) {
  const Span s = Sample();
  const std::string body = EncodeOtlpJson(
      {Attribute{"service.name", std::string("strata-gateway")}, Attribute{"n", int64_t{3}}}, {s});
  const json doc = json::parse(body);
  ASSERT_TRUE(doc.at("resourceSpans").is_array());
  ASSERT_EQ(doc.at("resourceSpans").size(), 1u);
  const json& rs = doc.at("resourceSpans")[0];
  EXPECT_EQ(Attr(rs.at("resource").at("attributes"), "service.name"),
            json({{"stringValue", "strata-gateway"}}));
  EXPECT_EQ(Attr(rs.at("resource").at("attributes"), "n"), json({{"intValue", "3"}}));
  ASSERT_EQ(rs.at("scopeSpans").size(), 1u);
  EXPECT_EQ(rs.at("scopeSpans")[0].at("scope").at("name"), "strata");
  const json& spans = rs.at("scopeSpans")[0].at("spans");
  ASSERT_EQ(spans.size(), 1u);
  const json& j = spans[0];
  EXPECT_EQ(j.at("traceId"), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(j.at("spanId"), s.span_id.Hex());
  EXPECT_EQ(j.at("parentSpanId"), "00f067aa0ba902b7");
  EXPECT_EQ(j.at("traceState"), "a=b");
  EXPECT_EQ(j.at("name"), "chat tiny");
  EXPECT_EQ(j.at("kind"), 2);  // SPAN_KIND_SERVER
  EXPECT_EQ(j.at("startTimeUnixNano"), "1700000000123456789");
  EXPECT_EQ(j.at("endTimeUnixNano"), "1700000001000000000");
  const json& attrs = j.at("attributes");
  EXPECT_EQ(Attr(attrs, "gen_ai.request.model"), json({{"stringValue", "tiny"}}));
  EXPECT_EQ(Attr(attrs, "gen_ai.request.max_tokens"), json({{"intValue", "9007199254740993"}}));
  EXPECT_EQ(Attr(attrs, "strata.ratio"), json({{"doubleValue", 0.25}}));
  EXPECT_EQ(Attr(attrs, "strata.stream"), json({{"boolValue", true}}));
  EXPECT_EQ(Attr(attrs, "gen_ai.response.finish_reasons"),
            json::parse(R"({"arrayValue":{"values":[{"stringValue":"stop"},)"
                        R"({"stringValue":"length"}]}})"));
  ASSERT_EQ(j.at("events").size(), 1u);
  EXPECT_EQ(j.at("events")[0].at("name"), "first_token");
  EXPECT_EQ(j.at("events")[0].at("timeUnixNano"), "1700000000500000000");
  EXPECT_EQ(Attr(j.at("events")[0].at("attributes"), "strata.tokens"), json({{"intValue", "1"}}));
  EXPECT_EQ(j.at("status"), json({{"code", 2}, {"message", "upstream 503"}}));
}

TEST(OtlpJson, SpanListsWrapIntoTheSameRequestAsOneEncoding) {
  Span a = Sample();
  Span b = ChildOf(a.Context(), "strata.decode", SpanKind::kInternal);
  Span c = ChildOf(a.Context(), "strata.stream", SpanKind::kInternal);
  const std::vector<Attribute> resource{Attribute{"service.name", std::string("svc")}};
  const std::string whole = EncodeOtlpJson(resource, std::vector<Span>{a, b, c});
  std::string first, second;
  AppendOtlpSpans(&first, std::vector<Span>{a});
  AppendOtlpSpans(&second, std::vector<Span>{b, c});
  const std::vector<std::string_view> lists{first, "", second};  // an empty list adds nothing
  EXPECT_EQ(EncodeOtlpJson(resource, lists), whole);
  const json doc = json::parse(whole);
  EXPECT_EQ(doc["resourceSpans"][0]["scopeSpans"][0]["spans"].size(), 3u);
  EXPECT_EQ(
      json::parse(EncodeOtlpJson(
          resource, std::vector<std::string_view>{}))["resourceSpans"][0]["scopeSpans"][0]["spans"]
          .size(),
      0u);
}

TEST(OtlpJson, RootSpanHasNoParentAndDefaultsAreLeftOut) {
  Span root = ChildOf(TraceContext{}, "gateway.route", SpanKind::kInternal);
  Span ok = root;
  ok.status = SpanStatus::kOk;
  ok.AddEvent("first_token", 5);
  const json doc = json::parse(EncodeOtlpJson({}, {root, ok}));
  const json& j = doc.at("resourceSpans")[0].at("scopeSpans")[0].at("spans")[0];
  EXPECT_FALSE(j.contains("parentSpanId"));
  EXPECT_FALSE(j.contains("traceState"));
  EXPECT_FALSE(j.contains("events"));
  EXPECT_FALSE(j.contains("attributes"));  // empty: the protobuf JSON mapping's default
  EXPECT_FALSE(j.contains("status"));      // unset, no message: the default
  EXPECT_EQ(j.at("kind"), 1);
  const json& k = doc.at("resourceSpans")[0].at("scopeSpans")[0].at("spans")[1];
  EXPECT_EQ(k.at("status"), json({{"code", 1}}));  // OK is not the default: written
  EXPECT_EQ(k.at("events")[0], json({{"timeUnixNano", "5"}, {"name", "first_token"}}));
}

// The one span of a request that encodes `s` alone, parsed back.
json EncodedAlone(const Span& s) {
  return json::parse(EncodeOtlpJson({}, {s}))
      .at("resourceSpans")[0]
      .at("scopeSpans")[0]
      .at("spans")[0];
}

// What the independent reference (nlohmann-json, invalid UTF-8 replaced) makes of `text`.
std::string ReferenceText(const std::string& text) {
  return json::parse(json(text).dump(-1, ' ', false, json::error_handler_t::replace));
}

TEST(OtlpJson, InvalidUtf8IsReplacedNotThrown) {
  Span s = ChildOf(TraceContext{}, "chat \xff\xfe", SpanKind::kServer);
  s.AddAttribute("gen_ai.request.model", std::string("m\xc3"));
  std::string body;
  ASSERT_NO_THROW(body = EncodeOtlpJson({}, {s}));
  EXPECT_FALSE(json::parse(body, nullptr, false).is_discarded());
}

// Every string survives the hand-written escaping: quotes, backslashes, every control character,
// multi-byte UTF-8; invalid UTF-8 becomes U+FFFD exactly where nlohmann-json's `replace` puts it
// (the independent reference); non-finite doubles are null.
TEST(OtlpJson, StringsRoundTripAndInvalidUtf8IsReplacedLikeTheReference) {
  std::string every_control;
  for (int c = 0; c < 0x20; ++c) every_control.push_back(static_cast<char>(c));
  const std::vector<std::string> valid = {"",
                                          "plain",
                                          "q\"uote\\back/slash",
                                          every_control,
                                          "\x7f del",
                                          "caf\xc3\xa9",
                                          "\xe2\x82\xac euro",
                                          "\xf0\x9f\x98\x80 emoji",
                                          "\xed\x9f\xbf",
                                          "\xf4\x8f\xbf\xbf"};
  const std::vector<std::string> invalid = {"m\xc3",
                                            "\xff\xfe",
                                            "\xc0\xaf",
                                            "\xe0\x80\xaf",
                                            "\xed\xa0\x80",
                                            "\xf4\x90\x80\x80",
                                            std::string("a\x80") + "b",
                                            "\xf0\x9f\x98",
                                            "ok\xe2\x82",
                                            "\xe0\x9f\x80",
                                            "\xf0\x8f\x80\x80",
                                            "\xf8\x88\x80\x80\x80",
                                            "\xc2",
                                            "\xe1\x80\xe1\x80\x80"};
  for (const auto* set : {&valid, &invalid}) {
    for (const std::string& text : *set) {
      Span s = ChildOf(TraceContext{}, text, SpanKind::kInternal);
      s.AddAttribute("k", text);
      s.AddAttribute("nan", std::nan(""));
      const json j = EncodedAlone(s);
      const std::string expected = ReferenceText(text);
      if (set == &valid) {
        EXPECT_EQ(expected, text);  // the reference keeps valid text
      }
      EXPECT_EQ(j.at("name"), expected) << json(expected).dump();
      EXPECT_EQ(Attr(j.at("attributes"), "k"), json({{"stringValue", expected}}));
      EXPECT_TRUE(Attr(j.at("attributes"), "nan").at("doubleValue").is_null());
    }
  }
}

// The escaper scans plain text eight bytes at a time: a character that needs care at every
// offset of a long string (every lane of every block, and the tail) is still found and written
// as the reference writes it.
TEST(OtlpJson, EveryOffsetOfALongStringIsEscaped) {
  const std::vector<std::string> specials = {
      "\"", "\\", "\n", std::string(1, '\0'), "\x1f", "\x7f", "\xc3\xa9", "\xff", "\xe2\x82"};
  const std::string plain = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ";
  for (const std::string& special : specials) {
    for (size_t at = 0; at <= plain.size(); ++at) {
      const std::string text = plain.substr(0, at) + special + plain.substr(at);
      Span s = ChildOf(TraceContext{}, text, SpanKind::kInternal);
      const json j = EncodedAlone(s);
      const std::string expected = ReferenceText(text);
      ASSERT_EQ(j.at("name"), expected) << "special " << json(special).dump() << " at " << at;
    }
  }
}

// int64 values (attribute intValue, times) are decimal strings: every digit count, both signs,
// both limits, as std::to_string writes them.
TEST(OtlpJson, IntegersAreWrittenAsDecimalStrings) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> values = {0, 1, -1, 9, 10, -10, 99, 100, -100, 101, kMax, kMin};
  for (int64_t p = 10; p <= std::numeric_limits<int64_t>::max() / 10; p *= 10) {
    values.insert(values.end(), {p - 1, p, p + 1, -p, 7 * p + 3});
  }
  for (int64_t v : values) {
    Span s = ChildOf(TraceContext{}, "n", SpanKind::kInternal);
    s.start_unix_ns = v;
    s.AddAttribute("v", v);
    const json j = EncodedAlone(s);
    EXPECT_EQ(j.at("startTimeUnixNano"), std::to_string(v));
    EXPECT_EQ(Attr(j.at("attributes"), "v"), json({{"intValue", std::to_string(v)}}));
  }
}

TEST(OtlpJson, TheTestReceiverDecodesWhatTheEncoderWrites) {
  const Span s = Sample();
  Span child = ChildOf(s.Context(), "gateway.route", SpanKind::kInternal);
  child.start_unix_ns = s.start_unix_ns + 1;
  child.end_unix_ns = s.start_unix_ns + 2;
  auto decoded = testing::DecodeOtlpJson(
      EncodeOtlpJson({Attribute{"service.name", std::string("svc")}}, {s, child}));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_EQ(decoded->size(), 2u);
  const auto& d = (*decoded)[0];
  EXPECT_EQ(d.service, "svc");
  EXPECT_EQ(d.trace_id, s.trace_id.Hex());
  EXPECT_EQ(d.span_id, s.span_id.Hex());
  EXPECT_EQ(d.parent_span_id, "00f067aa0ba902b7");
  EXPECT_EQ(d.kind, 2);
  EXPECT_EQ(d.start_unix_ns, s.start_unix_ns);
  EXPECT_EQ(d.end_unix_ns, s.end_unix_ns);
  EXPECT_EQ(d.Str("gen_ai.request.model"), "tiny");
  EXPECT_EQ(d.Int("gen_ai.request.max_tokens"), 9'007'199'254'740'993);
  EXPECT_EQ(d.Double("strata.ratio"), 0.25);
  EXPECT_EQ(d.Bool("strata.stream"), true);
  EXPECT_EQ(d.StrArray("gen_ai.response.finish_reasons"),
            (std::vector<std::string>{"stop", "length"}));
  EXPECT_FALSE(d.Str("gen_ai.request.max_tokens").has_value());  // typed: not a string
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].name, "first_token");
  EXPECT_EQ(d.status_code, 2);
  EXPECT_EQ(d.status_message, "upstream 503");
  EXPECT_EQ((*decoded)[1].parent_span_id, s.span_id.Hex());
  EXPECT_FALSE(testing::DecodeOtlpJson("{\"resourceSpans\": 3}").ok());
  EXPECT_FALSE(testing::DecodeOtlpJson("not json").ok());
}

}  // namespace
}  // namespace strata::trace
