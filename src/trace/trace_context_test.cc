// trace_context + span: W3C traceparent vectors, ids, bounded setters, the clock bridge.
#include "trace/trace_context.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "trace/span.h"

namespace strata::trace {
namespace {

constexpr const char* kValid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(Traceparent, ParsesTheW3CExample) {
  auto ctx = ParseTraceparent(kValid, "congo=t61rcWkgMzE");
  ASSERT_TRUE(ctx.has_value());
  EXPECT_EQ(ctx->trace_id.Hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(ctx->span_id.Hex(), "00f067aa0ba902b7");
  EXPECT_TRUE(ctx->sampled);
  EXPECT_EQ(ctx->tracestate, "congo=t61rcWkgMzE");
  EXPECT_EQ(FormatTraceparent(*ctx), kValid);
}

TEST(Traceparent, SampledFlagIsBitZero) {
  auto off = ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(off.has_value());
  EXPECT_FALSE(off->sampled);
  EXPECT_EQ(FormatTraceparent(*off), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  auto other_bits = ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03");
  ASSERT_TRUE(other_bits.has_value());
  EXPECT_TRUE(other_bits->sampled);
  auto unsampled_bits = ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02");
  ASSERT_TRUE(unsampled_bits.has_value());
  EXPECT_FALSE(unsampled_bits->sampled);
}

TEST(Traceparent, RejectsInvalidHeaders) {
  const char* bad[] = {
      "",
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // version ff
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   // zero trace id
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   // zero parent id
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   // upper case
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",   // upper case
      "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // upper-case version
      "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",    // short trace id
      "00-4bf92f3577b34da6a3ce929d0e0e47366-00f067aa0ba902b7-01",  // long trace id
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",    // short parent id
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",    // short flags
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",  // v00 with a tail
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // v00 too long
      "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // wrong separator
      "0-04bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // short version
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",   // not hex
      "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // not hex version
  };
  for (const char* h : bad) EXPECT_FALSE(ParseTraceparent(h).has_value()) << h;
}

TEST(Traceparent, FutureVersionParsesItsFirstFourFields) {
  auto plain = ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(plain.has_value());
  EXPECT_TRUE(plain->sampled);
  auto tail = ParseTraceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever");
  ASSERT_TRUE(tail.has_value());
  EXPECT_EQ(tail->trace_id.Hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  // Re-emitted as version 00.
  EXPECT_EQ(FormatTraceparent(*tail), kValid);
  // A future version still needs "-" after the flags when something follows.
  EXPECT_FALSE(
      ParseTraceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01what").has_value());
}

TEST(Traceparent, TracestateIsBounded) {
  const std::string ok(kMaxTracestateBytes, 'a');
  const std::string too_long(kMaxTracestateBytes + 1, 'a');
  EXPECT_EQ(ParseTraceparent(kValid, ok)->tracestate, ok);
  auto dropped = ParseTraceparent(kValid, too_long);
  ASSERT_TRUE(dropped.has_value());  // the traceparent still counts
  EXPECT_EQ(dropped->tracestate, "");
}

TEST(Ids, AreRandomValidAndLowerHex) {
  std::set<std::string> traces, spans;
  for (int i = 0; i < 1000; ++i) {
    TraceId t = NewTraceId();
    SpanId s = NewSpanId();
    EXPECT_TRUE(t.valid());
    EXPECT_TRUE(s.valid());
    traces.insert(t.Hex());
    spans.insert(s.Hex());
  }
  EXPECT_EQ(traces.size(), 1000u);
  EXPECT_EQ(spans.size(), 1000u);
  for (const auto& h : traces) {
    ASSERT_EQ(h.size(), 32u);
    EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos) << h;
  }
  EXPECT_FALSE(TraceId{}.valid());
  EXPECT_FALSE(SpanId{}.valid());
  EXPECT_EQ(TraceId{}.Hex(), std::string(32, '0'));
}

TEST(Span, ChildOfKeepsTheTraceAndPointsAtItsParent) {
  auto parent = ParseTraceparent(kValid, "k=v");
  ASSERT_TRUE(parent.has_value());
  Span child = ChildOf(*parent, "gateway.route", SpanKind::kInternal);
  EXPECT_EQ(child.trace_id, parent->trace_id);
  EXPECT_EQ(child.parent_span_id, parent->span_id);
  EXPECT_TRUE(child.span_id.valid());
  EXPECT_NE(child.span_id, parent->span_id);
  EXPECT_EQ(child.tracestate, "k=v");
  EXPECT_EQ(child.name, "gateway.route");
  EXPECT_EQ(child.kind, SpanKind::kInternal);
  TraceContext ctx = child.Context(true);
  EXPECT_EQ(ctx.trace_id, child.trace_id);
  EXPECT_EQ(ctx.span_id, child.span_id);
  EXPECT_TRUE(ctx.sampled);
  EXPECT_FALSE(child.Context(false).sampled);
}

TEST(Span, ChildOfAnEmptyContextIsARootOfANewTrace) {
  Span root = ChildOf(TraceContext{}, "chat m", SpanKind::kServer);
  EXPECT_TRUE(root.trace_id.valid());
  EXPECT_FALSE(root.parent_span_id.valid());
}

TEST(Span, AttributesAndEventsAreBounded) {
  Span s;
  std::vector<std::string> keys;  // the keys' storage outlives the span (Attribute's contract)
  for (size_t i = 0; i < kMaxAttributes + 10; ++i) keys.push_back("k" + std::to_string(i));
  for (const std::string& k : keys) s.AddAttribute(k, int64_t{1});
  EXPECT_EQ(s.attributes.size(), kMaxAttributes);
  for (size_t i = 0; i < kMaxEvents + 10; ++i) s.AddEvent("tokens", 1);
  EXPECT_EQ(s.events.size(), kMaxEvents);

  Span t;
  t.AddAttribute("long", std::string(kMaxValueBytes * 3, 'x'));
  EXPECT_EQ(std::get<std::string>(t.attributes[0].value).size(), kMaxValueBytes);
  // Truncation never splits a UTF-8 character.
  std::string utf8(kMaxValueBytes - 1, 'x');
  utf8 += "\xc3\xa9\xc3\xa9";  // "éé" straddles the bound
  t.AddAttribute("utf8", utf8);
  EXPECT_EQ(std::get<std::string>(t.attributes[1].value).size(), kMaxValueBytes - 1);
  t.AddAttribute("list", std::vector<std::string>(kMaxAttributes * 2, std::string(2000, 'y')));
  const auto& list = std::get<std::vector<std::string>>(t.attributes[2].value);
  EXPECT_EQ(list.size(), kMaxAttributes);
  EXPECT_EQ(list[0].size(), kMaxValueBytes);
  std::vector<Attribute> many(kMaxAttributes + 5, Attribute{"a", int64_t{2}});
  t.AddEvent("e", 5, many);
  EXPECT_EQ(t.events[0].attributes.size(), kMaxAttributes);
}

TEST(Clock, ToUnixNanosIsMonotonicAndNearWallTime) {
  const auto now = std::chrono::steady_clock::now();
  const int64_t a = ToUnixNanos(now);
  const int64_t b = ToUnixNanos(now + std::chrono::milliseconds(5));
  EXPECT_EQ(b - a, 5'000'000);
  const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  EXPECT_LT(std::abs(wall - a), int64_t{1'000'000'000});
}

}  // namespace
}  // namespace strata::trace
