// A rendered picture of the Grafana dashboard for the docs (no Grafana at hand): the panels'
// range-query data drawn as small line charts, rows of three, one SVG document. Used by
// dashboard_live_test (STRATA_DASHBOARD_SVG=path) to write docs/dashboard.svg. Non-finite points
// are dropped; text is XML-escaped. Pure functions.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace strata::testing {

struct SvgSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (seconds since the first sample, value)
};

struct SvgPanel {
  std::string title;
  std::string unit;  // Grafana unit: s, percentunit, reqps, short
  std::vector<SvgSeries> series;
};

struct SvgRow {
  std::string title;
  std::vector<SvgPanel> panels;
};

inline std::string SvgEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A value with the panel's unit, short: 12.3 ms, 45 %, 3.2/s.
inline std::string SvgValue(double v, const std::string& unit) {
  if (unit == "s") return v < 1 ? fmt::format("{:.3g} ms", v * 1000) : fmt::format("{:.3g} s", v);
  if (unit == "percentunit") return fmt::format("{:.3g} %", v * 100);
  if (unit == "reqps") return fmt::format("{:.3g}/s", v);
  return fmt::format("{:.3g}", v);
}

inline std::string SvgChart(const SvgPanel& p, double x0, double y0, double w, double h) {
  static constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                            "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  const double left = x0 + 56, top = y0 + 26, pw = w - 70, ph = h - 82;
  double tmax = 1, vmin = 0, vmax = 0;
  for (const SvgSeries& s : p.series)
    for (const auto& [t, v] : s.points) {
      if (!std::isfinite(v)) continue;
      tmax = std::max(tmax, t);
      vmax = std::max(vmax, v);
      vmin = std::min(vmin, v);
    }
  if (vmax <= vmin) vmax = vmin + 1;
  std::string out = fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#181b1f\" rx=\"3\"/>\n"
      "<text x=\"{}\" y=\"{}\" fill=\"#d8d9da\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
      x0, y0, w - 8, h - 8, x0 + 8, y0 + 17, SvgEscape(p.title));
  for (int i = 0; i <= 2; ++i) {
    const double v = vmin + (vmax - vmin) * i / 2, y = top + ph - ph * i / 2;
    out += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#2c3235\"/>\n"
        "<text x=\"{}\" y=\"{:.1f}\" fill=\"#8e8e8e\" font-size=\"10\" "
        "text-anchor=\"end\">{}</text>\n",
        left, y, left + pw, y, left - 4, y + 3, SvgEscape(SvgValue(v, p.unit)));
  }
  out += fmt::format(
      "<text x=\"{}\" y=\"{:.1f}\" fill=\"#8e8e8e\" font-size=\"10\">0 s</text>"
      "<text x=\"{}\" y=\"{:.1f}\" fill=\"#8e8e8e\" font-size=\"10\" "
      "text-anchor=\"end\">{:.0f} s</text>\n",
      left, top + ph + 12, left + pw, top + ph + 12, tmax);
  if (p.series.empty())
    out += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#8e8e8e\" font-size=\"12\">No data</text>\n",
                       left + pw / 2 - 24, top + ph / 2);
  size_t k = 0;
  for (const SvgSeries& s : p.series) {
    const char* color = kColors[k % std::size(kColors)];
    std::string pts;
    for (const auto& [t, v] : s.points) {
      if (!std::isfinite(v)) continue;
      pts += fmt::format("{:.1f},{:.1f} ", left + pw * t / tmax,
                         top + ph - ph * (v - vmin) / (vmax - vmin));
    }
    out += fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", color, pts);
    if (k < 4) {  // the legend: four names at most
      const double lx = x0 + 8 + static_cast<double>(k % 2) * (w / 2 - 4);
      const int row = static_cast<int>(k) / 2;  // two legend names per row
      const double ly = top + ph + 28 + row * 14.0;
      std::string name = s.name.size() > 34 ? s.name.substr(0, 33) + "~" : s.name;
      out += fmt::format(
          "<rect x=\"{}\" y=\"{:.1f}\" width=\"10\" height=\"3\" fill=\"{}\"/>"
          "<text x=\"{}\" y=\"{:.1f}\" fill=\"#c7d0d9\" font-size=\"10\">{}</text>\n",
          lx, ly - 4, color, lx + 14, ly, SvgEscape(name));
    }
    ++k;
  }
  if (p.series.size() > 4)
    out += fmt::format(
        "<text x=\"{}\" y=\"{:.1f}\" fill=\"#8e8e8e\" font-size=\"10\">+{} more</text>\n",
        x0 + w - 70, top + ph + 56, p.series.size() - 4);
  return out;
}

// The whole dashboard: a title, then each row's header and its panels three a line.
inline std::string DashboardSvg(const std::string& title, const std::vector<SvgRow>& rows) {
  constexpr double kW = 400, kH = 230, kRowHead = 28;
  double y = 44;
  std::string body;
  for (const SvgRow& r : rows) {
    body += fmt::format("<text x=\"12\" y=\"{}\" fill=\"#d8d9da\" font-size=\"15\">{}</text>\n",
                        y + 18, SvgEscape(r.title));
    y += kRowHead;
    for (size_t i = 0; i < r.panels.size(); ++i) {
      if (i > 0 && i % 3 == 0) y += kH;
      body += SvgChart(r.panels[i], 8 + kW * static_cast<double>(i % 3), y, kW, kH);
    }
    y += kH;
  }
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#111217\"/>\n"
      "<text x=\"12\" y=\"28\" fill=\"#ffffff\" font-size=\"20\">{2}</text>\n{3}</svg>\n",
      8 + 3 * kW, y + 8, SvgEscape(title), body);
}

}  // namespace strata::testing
