// Plain SVG charts (our own writer): scatter points per series and each series' Pareto frontier.
//
// Used by `strata bench sweep` for output tokens/s (y, higher is better) against a latency
// percentile (x, lower is better). Several charts are laid out side by side in one document.
// Text is XML-escaped; non-finite values are dropped.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

namespace strata::bench {

struct PlotPoint {
  double x = 0, y = 0;
  std::string label;  // drawn next to the point (e.g. the concurrency level)
};

struct PlotSeries {
  std::string name;
  std::vector<PlotPoint> points;
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
};

// Points not dominated by another (x <= and y >= with one strict), sorted by x.
std::vector<PlotPoint> ParetoFrontier(const std::vector<PlotPoint>& points);

// One SVG document with the charts in a row.
std::string RenderSvg(const std::vector<Chart>& charts);

std::string XmlEscape(std::string_view s);

}  // namespace strata::bench
