#include "bench/sweep.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "http/client.h"

namespace strata::bench {

using json = nlohmann::json;

Result<std::vector<double>> ParseLevels(const std::string& s, const char* option, bool allow_inf) {
  std::vector<double> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    double v = 0;
    if (allow_inf && item == "inf") {
      v = INFINITY;
    } else {
      size_t used = 0;
      bool ok = !item.empty() && item.find_first_not_of("0123456789.eE+-") == std::string::npos;
      if (ok) {
        try {
          v = std::stod(item, &used);
        } catch (...) {
          ok = false;
        }
      }
      if (!ok || used != item.size() || !std::isfinite(v) || !(v > 0))
        return Status::InvalidArgument(fmt::format("{}: '{}' is not a number > 0", option, item));
    }
    out.push_back(v);
    if (out.size() > 64)
      return Status::InvalidArgument(fmt::format("{}: at most 64 levels", option));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (out.empty()) return Status::InvalidArgument(fmt::format("{}: no levels", option));
  return out;
}

namespace {
std::string LevelText(double v) { return std::isinf(v) ? "inf" : fmt::format("{:g}", v); }
}  // namespace

std::string SweepTable(const std::vector<SweepRun>& runs, bool rate_mode) {
  std::string s = fmt::format(
      "| endpoint | {} | ok | failed | req/s | out tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms "
      "| TPOT p99 ms | ITL p99 ms | E2EL p50 ms | goodput req/s |\n",
      rate_mode ? "rate" : "concurrency");
  s += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : runs) {
    const Aggregate& a = r.report.agg;
    s += fmt::format(
        "| {} | {} | {} | {} | {:.2f} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {:.2f} | {:.2f} | "
        "{:.1f} | {} |\n",
        r.label, LevelText(r.level), a.completed, a.failed, a.request_throughput,
        a.output_throughput, a.ttft_ms.median, a.ttft_ms.p99, a.tpot_ms.median, a.tpot_ms.p99,
        a.itl_ms.p99, a.e2el_ms.median,
        a.goodput ? fmt::format("{:.2f}", *a.goodput) : std::string("-"));
  }
  return s;
}

std::string SweepSvg(const std::vector<SweepRun>& runs, bool rate_mode) {
  Chart ttft{"Output tokens/s vs p99 TTFT", "p99 TTFT (ms)", "output tokens/s", {}};
  Chart tpot{"Output tokens/s vs p99 TPOT", "p99 TPOT (ms)", "output tokens/s", {}};
  for (const auto& r : runs) {
    auto find = [&](Chart& c) -> PlotSeries& {
      for (auto& s : c.series)
        if (s.name == r.label) return s;
      c.series.push_back({r.label, {}});
      return c.series.back();
    };
    const Aggregate& a = r.report.agg;
    if (a.completed == 0) continue;
    std::string lab = (rate_mode ? "r=" : "c=") + LevelText(r.level);
    find(ttft).points.push_back({a.ttft_ms.p99, a.output_throughput, lab});
    find(tpot).points.push_back({a.tpot_ms.p99, a.output_throughput, lab});
  }
  return RenderSvg({ttft, tpot});
}

Result<std::vector<SweepRun>> RunSweep(const SweepOptions& o, const DatasetOptions& data,
                                       std::ostream& log) {
  if (o.base_urls.empty())
    return Status::InvalidArgument("bench sweep needs at least one --base-url");
  if (o.rates.empty() == o.concurrency.empty())
    return Status::InvalidArgument("give exactly one of --rates or --concurrency");
  if (!o.labels.empty() && o.labels.size() != o.base_urls.size())
    return Status::InvalidArgument("--label must be given once per --base-url");
  if (o.out_dir.empty()) return Status::InvalidArgument("--out DIR is required");
  const bool rate_mode = !o.rates.empty();
  std::vector<double> levels = o.rates;
  for (int64_t c : o.concurrency) levels.push_back(static_cast<double>(c));
  std::vector<std::string> labels = o.labels;
  if (labels.empty()) {
    for (const auto& u : o.base_urls) {
      ASSIGN_OR_RETURN(http::Url url, http::ParseUrl(u));
      labels.push_back(url.host + ":" + url.port + url.path_prefix);
    }
  }
  // Validate every run's options (and the dataset) before sending anything.
  std::vector<Dataset> datasets;
  for (size_t i = 0; i < levels.size(); ++i) {
    DatasetOptions di = data;
    di.seed = data.seed + i;
    ASSIGN_OR_RETURN(Dataset ds, BuildDataset(di));
    datasets.push_back(std::move(ds));
  }
  const Dataset& d = datasets[0];
  for (const auto& u : o.base_urls) {
    LoadOptions lo = o.base;
    lo.base_url = u;
    RETURN_IF_ERROR(ValidateLoadOptions(lo, d));
  }
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec)
    return Status::IoError(fmt::format("cannot create --out {}: {}", o.out_dir, ec.message()));

  std::vector<SweepRun> runs;
  for (size_t li = 0; li < levels.size(); ++li) {
    const double level = levels[li];
    const Dataset& d = datasets[li];
    for (size_t e = 0; e < o.base_urls.size(); ++e) {
      LoadOptions lo = o.base;
      lo.seed = data.seed + li;
      lo.base_url = o.base_urls[e];
      if (rate_mode)
        lo.request_rate = level;
      else
        lo.max_concurrency = static_cast<int64_t>(level);
      lo.progress_label =
          fmt::format("{} {}={} ", labels[e], rate_mode ? "rate" : "concurrency", LevelText(level));
      ASSIGN_OR_RETURN(LoadResult res, RunLoad(lo, d));
      SweepRun run{labels[e], level, MakeReport(lo, d, res, o.slo)};
      const Aggregate& a = run.report.agg;
      log << fmt::format(
          "{:<24} {}={:<6} ok {:>5} failed {:>4}  {:>8.2f} out tok/s  p99 TTFT {:>9.1f} ms  p99 "
          "TPOT {:>8.2f} ms\n",
          labels[e], rate_mode ? "rate" : "conc", LevelText(level), a.completed, a.failed,
          a.output_throughput, a.ttft_ms.p99, a.tpot_ms.p99);
      if (!a.first_error.empty()) log << "  first error: " << a.first_error << "\n";
      log.flush();
      runs.push_back(std::move(run));
    }
  }

  json j = {{"schema", "strata.bench.sweep/1"},
            {"mode", rate_mode ? "rate" : "concurrency"},
            {"levels", json::array()},
            {"endpoints", json::array()},
            {"runs", json::array()}};
  for (double l : levels) j["levels"].push_back(std::isinf(l) ? json("inf") : json(l));
  for (size_t e = 0; e < labels.size(); ++e)
    j["endpoints"].push_back({{"label", labels[e]}, {"base_url", o.base_urls[e]}});
  for (const auto& r : runs) {
    json rj = ReportToJson(r.report);
    rj["label"] = r.label;
    rj["level"] = std::isinf(r.level) ? json("inf") : json(r.level);
    j["runs"].push_back(std::move(rj));
  }
  auto write = [&](const std::string& name, const std::string& text) -> Status {
    std::filesystem::path p = std::filesystem::path(o.out_dir) / name;
    std::ofstream f(p, std::ios::binary);
    f << text;
    f.close();
    if (!f) return Status::IoError("cannot write " + p.string());
    return Status::Ok();
  };
  RETURN_IF_ERROR(
      write("sweep.json", j.dump(2, ' ', false, json::error_handler_t::replace) + "\n"));
  RETURN_IF_ERROR(write("sweep.md", SweepTable(runs, rate_mode)));
  RETURN_IF_ERROR(write("pareto.svg", SweepSvg(runs, rate_mode)));
  return runs;
}

}  // namespace strata::bench
