#include "bench/svg.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>

#include "bench/sweep.h"

namespace strata::bench {
namespace {

// Minimal well-formedness check: every tag closes in order, attributes are quoted, one root <svg>.
::testing::AssertionResult WellFormed(const std::string& s) {
  std::vector<std::string> stack;
  size_t i = 0;
  int roots = 0;
  while ((i = s.find('<', i)) != std::string::npos) {
    size_t end = s.find('>', i);
    if (end == std::string::npos)
      return ::testing::AssertionFailure() << "unterminated tag at " << i;
    std::string tag = s.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) return ::testing::AssertionFailure() << "empty tag";
    if (tag[0] == '?' || tag[0] == '!') continue;
    if (std::count(tag.begin(), tag.end(), '"') % 2)
      return ::testing::AssertionFailure() << "unbalanced quotes: " << tag;
    if (tag[0] == '/') {
      std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name)
        return ::testing::AssertionFailure() << "mismatched </" << name << ">";
      stack.pop_back();
      continue;
    }
    std::string name = tag.substr(0, tag.find_first_of(" \n/"));
    if (stack.empty()) ++roots;
    if (tag.back() != '/') stack.push_back(name);
  }
  if (!stack.empty()) return ::testing::AssertionFailure() << "unclosed <" << stack.back() << ">";
  if (roots != 1) return ::testing::AssertionFailure() << roots << " root elements";
  // Text content must not carry raw '&' that is not an entity.
  if (std::regex_search(s, std::regex("&(?!amp;|lt;|gt;|quot;|apos;)")))
    return ::testing::AssertionFailure() << "raw &";
  return ::testing::AssertionSuccess();
}

TEST(Pareto, KeepsOnlyUndominatedPoints) {
  // (latency, throughput): (1,10) (2,20) (3,15) dominated by (2,20); (4,30); (5,30) dominated by
  // (4,30).
  std::vector<PlotPoint> pts = {
      {3, 15, "c"}, {1, 10, "a"}, {5, 30, "e"}, {2, 20, "b"}, {4, 30, "d"}};
  auto f = ParetoFrontier(pts);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].label, "a");
  EXPECT_EQ(f[1].label, "b");
  EXPECT_EQ(f[2].label, "d");
  EXPECT_TRUE(ParetoFrontier({}).empty());
  EXPECT_EQ(ParetoFrontier({{NAN, 1, "x"}, {1, 1, "y"}}).size(), 1u);
}

TEST(Svg, WellFormedWithEverySeriesAndEscapedText) {
  Chart c{"A <title> & more",
          "x",
          "y",
          {{"strata <A>", {{1, 2, "c=1"}, {2, 3, "c=2"}}}, {"llama & co", {{1.5, 2.5, "c=1"}}}}};
  std::string s = RenderSvg({c, c});
  EXPECT_TRUE(WellFormed(s)) << s;
  EXPECT_NE(s.find("data-name=\"strata &lt;A&gt;\""), std::string::npos);
  EXPECT_NE(s.find("data-name=\"llama &amp; co\""), std::string::npos);
  EXPECT_NE(s.find("<polyline"), std::string::npos);
  EXPECT_TRUE(WellFormed(RenderSvg({})));
}

TEST(Svg, SweepPlotHasOneSeriesPerEndpointInBothCharts) {
  std::vector<SweepRun> runs;
  for (int level : {1, 2, 4})
    for (const char* label : {"A", "B"}) {
      SweepRun r;
      r.label = label;
      r.level = level;
      r.report.agg.completed = 3;
      r.report.agg.output_throughput = 10.0 * level;
      r.report.agg.ttft_ms.p99 = 5.0 * level;
      r.report.agg.tpot_ms.p99 = 1.0 * level;
      runs.push_back(r);
    }
  std::string s = SweepSvg(runs, false);
  EXPECT_TRUE(WellFormed(s));
  std::regex series("data-name=\"(A|B)\"");
  int n = static_cast<int>(
      std::distance(std::sregex_iterator(s.begin(), s.end(), series), std::sregex_iterator()));
  EXPECT_EQ(n, 4);  // 2 endpoints x 2 charts
  EXPECT_NE(s.find("c=4"), std::string::npos);
  std::string table = SweepTable(runs, false);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2 + 6);
}

TEST(Levels, ParseAndReject) {
  auto v = ParseLevels("1,2, 4,8", "--rates", true);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, (std::vector<double>{1, 2, 4, 8}));
  EXPECT_TRUE(std::isinf((*ParseLevels("inf", "--rates", true))[0]));
  for (const char* bad : {"", "1,,2", "abc", "-1", "0", "1e999", "2x"})
    EXPECT_FALSE(ParseLevels(bad, "--rates", true).ok()) << bad;
  EXPECT_FALSE(ParseLevels("inf", "--concurrency", false).ok());
}

}  // namespace
}  // namespace strata::bench
