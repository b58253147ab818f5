#include "bench/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace strata::bench {

namespace {
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr double kW = 560, kH = 400, kLeft = 70, kRight = 20, kTop = 40, kBottom = 55;

// "Nice" axis step (1, 2, 5 x 10^k) for about `n` ticks over [0, hi].
double NiceStep(double hi, int n) {
  if (!(hi > 0)) return 1;
  double raw = hi / n;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / mag;
  double nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  return nice * mag;
}

std::string Num(double v) {
  if (v == 0) return "0";
  if (std::fabs(v) >= 1000 || std::fabs(v - std::round(v)) < 1e-9) return fmt::format("{:.0f}", v);
  if (std::fabs(v) >= 1) return fmt::format("{:.1f}", v);
  return fmt::format("{:.3g}", v);
}

std::string RenderChart(const Chart& c, double ox) {
  double xmax = 0, ymax = 0;
  for (const auto& s : c.series)
    for (const auto& p : s.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      xmax = std::max(xmax, p.x);
      ymax = std::max(ymax, p.y);
    }
  double xstep = NiceStep(xmax, 5), ystep = NiceStep(ymax, 5);
  double xtop = std::max(xstep, std::ceil(xmax / xstep) * xstep);
  double ytop = std::max(ystep, std::ceil(ymax / ystep) * ystep);
  double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto X = [&](double x) { return ox + kLeft + x / xtop * pw; };
  auto Y = [&](double y) { return kTop + ph - y / ytop * ph; };
  std::string s;
  s += fmt::format(
      "<g class=\"chart\">\n<text x=\"{:.1f}\" y=\"22\" text-anchor=\"middle\" "
      "font-size=\"15\">{}</text>\n",
      ox + kW / 2, XmlEscape(c.title));
  s += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
      "stroke=\"#444\"/>\n",
      ox + kLeft, kTop, pw, ph);
  for (double v = 0; v <= xtop + xstep / 2; v += xstep) {
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\" font-size=\"11\">{4}</text>\n",
        X(v), kTop, kTop + ph, kTop + ph + 16, Num(v));
  }
  for (double v = 0; v <= ytop + ystep / 2; v += ystep) {
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\" font-size=\"11\">{5}</text>\n",
        ox + kLeft, Y(v), ox + kLeft + pw, ox + kLeft - 6, Y(v) + 4, Num(v));
  }
  s += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"12\">{}</text>\n",
      ox + kLeft + pw / 2, kH - 12, XmlEscape(c.x_label));
  s += fmt::format(
      "<text x=\"{0:.1f}\" y=\"{1:.1f}\" text-anchor=\"middle\" font-size=\"12\" "
      "transform=\"rotate(-90 {0:.1f} {1:.1f})\">{2}</text>\n",
      ox + 16, kTop + ph / 2, XmlEscape(c.y_label));
  for (size_t i = 0; i < c.series.size(); ++i) {
    const auto& ser = c.series[i];
    const char* color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    s += fmt::format("<g class=\"series\" data-name=\"{}\">\n", XmlEscape(ser.name));
    auto front = ParetoFrontier(ser.points);
    if (front.size() > 1) {
      std::string pts;
      for (const auto& p : front) pts += fmt::format("{:.1f},{:.1f} ", X(p.x), Y(p.y));
      s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                       pts, color);
    }
    for (const auto& p : ser.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      s += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"><title>{}: {}</title></circle>",
          X(p.x), Y(p.y), color, XmlEscape(ser.name), XmlEscape(p.label));
      if (!p.label.empty())
        s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" fill=\"{}\">{}</text>",
                         X(p.x) + 6, Y(p.y) - 6, color, XmlEscape(p.label));
      s += "\n";
    }
    // Legend entry, top left: the corner a throughput-vs-latency frontier rarely reaches.
    double ly = kTop + 14 + 16 * static_cast<double>(i);
    s += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"10\" height=\"10\" fill=\"{}\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">{}</text>\n</g>\n",
        ox + kLeft + 10, ly - 9, color, ox + kLeft + 25, ly, XmlEscape(ser.name));
  }
  s += "</g>\n";
  return s;
}
}  // namespace

std::string XmlEscape(std::string_view in) {
  std::string s;
  for (char ch : in) {
    switch (ch) {
      case '&':
        s += "&amp;";
        break;
      case '<':
        s += "&lt;";
        break;
      case '>':
        s += "&gt;";
        break;
      case '"':
        s += "&quot;";
        break;
      case '\'':
        s += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n')
          s += ' ';
        else
          s += ch;
    }
  }
  return s;
}

std::vector<PlotPoint> ParetoFrontier(const std::vector<PlotPoint>& points) {
  std::vector<PlotPoint> out;
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
    bool dominated = false;
    for (size_t j = 0; j < points.size() && !dominated; ++j) {
      const auto& q = points[j];
      if (j == i || !std::isfinite(q.x) || !std::isfinite(q.y)) continue;
      if (q.x <= p.x && q.y >= p.y && (q.x < p.x || q.y > p.y)) dominated = true;
    }
    if (!dominated) out.push_back(p);
  }
  std::sort(out.begin(), out.end(), [](const PlotPoint& a, const PlotPoint& b) {
    return a.x < b.x || (a.x == b.x && a.y < b.y);
  });
  return out;
}

std::string RenderSvg(const std::vector<Chart>& charts) {
  double width = kW * static_cast<double>(std::max<size_t>(1, charts.size()));
  std::string s = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
      "width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\">\n<rect width=\"100%\" "
      "height=\"100%\" fill=\"white\"/>\n",
      width, kH);
  for (size_t i = 0; i < charts.size(); ++i)
    s += RenderChart(charts[i], kW * static_cast<double>(i));
  s += "</svg>\n";
  return s;
}

}  // namespace strata::bench
