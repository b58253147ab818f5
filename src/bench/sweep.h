// `strata bench sweep`: one benchmark per load level and endpoint, a table, JSON and a Pareto SVG.
//
// Levels are request rates or concurrency limits. With several endpoints the runs are interleaved
// (level 1: A B, level 2: A B, ...) so slow drift of the machine affects every endpoint alike.
// Each level gets its own prompts (seed + level index), shared by every endpoint at that level: a
// server's prefix cache must not turn the next level's prompts into cache hits, and the endpoints
// must see identical work. Writes into out_dir (created if missing):
//   sweep.json  {"schema": "strata.bench.sweep/1", "mode", "levels", "runs": [report + label +
//   level]} sweep.md    a Markdown table of the runs pareto.svg  output tokens/s against p99 TTFT
//   and against p99 TPOT, one series per endpoint
// Errors: InvalidArgument for bad options; IoError when out_dir cannot be written. Failed requests
// inside a run are part of its report, not an error.
// Thread-safety: runs on the calling thread.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/report.h"
#include "bench/svg.h"

namespace strata::bench {

struct SweepOptions {
  LoadOptions base;                    // base_url / rate / concurrency are overridden per run
  std::vector<std::string> base_urls;  // one or more
  std::vector<std::string> labels;     // empty, or one per base URL
  std::vector<double> rates;           // exactly one of rates / concurrency is non-empty
  std::vector<int64_t> concurrency;
  std::string out_dir;
  Slo slo;
};

struct SweepRun {
  std::string label;
  double level = 0;
  Report report;
};

Result<std::vector<SweepRun>> RunSweep(const SweepOptions& o, const DatasetOptions& data,
                                       std::ostream& log);

// Rendering (exposed for tests).
std::string SweepTable(const std::vector<SweepRun>& runs, bool rate_mode);
std::string SweepSvg(const std::vector<SweepRun>& runs, bool rate_mode);

// Parses "1,2,4,8" (values > 0; "inf" allowed when allow_inf). InvalidArgument names the option.
Result<std::vector<double>> ParseLevels(const std::string& s, const char* option, bool allow_inf);

}  // namespace strata::bench
