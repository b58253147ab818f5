#include "http/sse.h"

#include <gtest/gtest.h>

namespace strata::http {
namespace {

std::vector<std::string> FeedInPieces(const std::string& s, size_t piece) {
  SseParser p;
  std::vector<std::string> ev;
  for (size_t i = 0; i < s.size(); i += piece)
    EXPECT_TRUE(p.Feed(std::string_view(s).substr(i, piece), &ev).ok());
  return ev;
}

TEST(Sse, EventsIdenticalForEverySplit) {
  const std::string stream =
      "data: {\"a\":1}\n\n"
      ": keep-alive comment\n\n"
      "data: {\"text\":\"h\xC3\xA9llo\"}\r\n\r\n"
      "event: ignored\ndata:no-space\n\n"
      "data: line1\ndata: line2\n\n"
      "id: 7\n\n"
      "data: [DONE]\r\r";
  const std::vector<std::string> want = {"{\"a\":1}", "{\"text\":\"h\xC3\xA9llo\"}", "no-space",
                                         "line1\nline2", "[DONE]"};
  for (size_t piece = 1; piece <= stream.size(); ++piece)
    EXPECT_EQ(FeedInPieces(stream, piece), want) << "piece " << piece;
  // Every two-way split point.
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser p;
    std::vector<std::string> ev;
    ASSERT_TRUE(p.Feed(stream.substr(0, cut), &ev).ok());
    ASSERT_TRUE(p.Feed(stream.substr(cut), &ev).ok());
    EXPECT_EQ(ev, want) << "cut " << cut;
  }
}

TEST(Sse, IncompleteEventIsHeldBack) {
  SseParser p;
  std::vector<std::string> ev;
  ASSERT_TRUE(p.Feed("data: x\n", &ev).ok());
  EXPECT_TRUE(ev.empty());
  EXPECT_TRUE(p.pending());
  ASSERT_TRUE(p.Feed("\n", &ev).ok());
  EXPECT_EQ(ev, std::vector<std::string>{"x"});
  EXPECT_FALSE(p.pending());
}

TEST(Sse, OverlongLineIsAnError) {
  SseParser p(16);
  std::vector<std::string> ev;
  EXPECT_FALSE(p.Feed("data: 0123456789abcdef", &ev).ok());
}

}  // namespace
}  // namespace strata::http
