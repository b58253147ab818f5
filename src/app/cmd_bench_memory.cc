// `strata bench memory`: this machine's roofline for CPU inference — memory read bandwidth and
// the peak fp32 / int8 / bf16 multiply-add rates of its widest vector unit — on -t threads,
// medians of --reps runs of control/device_probe's loops (the ones `strata devices` runs once
// on every core). `bench model --json` divides decode's streamed bytes by the same bandwidth
// measurement (roofline_fraction).
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/cli_common.h"
#include "app/commands.h"
#include "base/memory_size.h"
#include "base/thread_pool.h"
#include "control/device_probe.h"
#include "control/devices.h"
#include "kernels/kernels.h"

namespace strata::app {
namespace {

struct BenchMemoryOptions {
  int threads = 0;
  int reps = 5;
  std::string bytes = "1GiB";
  bool json = false;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Figure {
  std::string name, unit, how;
  std::vector<double> samples;
};

Status RunBenchMemory(const BenchMemoryOptions& o) {
  if (o.reps < 1) return Status::InvalidArgument("--reps must be >= 1");
  ASSIGN_OR_RETURN(const uint64_t bytes, ParseMemorySize(o.bytes));
  if (bytes < (uint64_t{64} << 20) || bytes > (uint64_t{64} << 30))
    return Status::InvalidArgument("--bytes must be between 64MiB and 64GiB (got " + o.bytes + ")");
  const int threads = o.threads > 0 ? o.threads : DefaultThreadCount();
  const control::DeviceProfile cpu = control::ProbeCpu();
  std::vector<Figure> figs = {{"read_bandwidth", "GB/s", "", {}},
                              {"fp32", "TFLOPS", "", {}},
                              {"int8", "TOPS", "", {}},
                              {"bf16", "TFLOPS", "", {}}};
  for (int r = 0; r < o.reps; ++r) {
    const control::probe::Rate rates[] = {
        control::probe::MemoryBandwidthGbps(threads, static_cast<size_t>(bytes)),
        control::probe::Fp32Tflops(threads, cpu.features),
        control::probe::Int8Tops(threads, cpu.features),
        control::probe::Bf16Tflops(threads, cpu.features)};
    for (size_t i = 0; i < figs.size(); ++i) {
      figs[i].samples.push_back(rates[i].value);
      figs[i].how = rates[i].how;
    }
  }
  const std::string isa(kernels::IsaName(kernels::ActiveIsa()));
  if (o.json) {
    nlohmann::json j = {{"cpu", cpu.model}, {"features", cpu.features}, {"threads", threads},
                        {"isa", isa},       {"reps", o.reps},           {"bytes", bytes}};
    for (const Figure& f : figs) {
      j[f.name] = Median(f.samples);
      j[f.name + "_samples"] = f.samples;
      j[f.name + "_how"] = f.how;
    }
    std::cout << j.dump(2) << std::endl;
    return Status::Ok();
  }
  std::cout << fmt::format("cpu {} ({}), {} threads, kernels {}\n", cpu.model, cpu.arch, threads,
                           isa);
  for (const Figure& f : figs) {
    const auto [lo, hi] = std::minmax_element(f.samples.begin(), f.samples.end());
    std::cout << fmt::format("{:<15} {:10.3f} {:<6} (min {:.3f}, max {:.3f}, {} reps; {})\n",
                             f.name, Median(f.samples), f.unit, *lo, *hi, o.reps, f.how);
  }
  return Status::Ok();
}

}  // namespace

void RegisterBenchMemory(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<BenchMemoryOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "memory", "The machine's read bandwidth and peak fp32/int8/bf16 rates (the decode roofline)");
  AddThreadsFlag(cmd, &o->threads);
  AddRepsFlag(cmd, &o->reps);
  AddDefaulted(cmd, "--bytes", o->bytes,
               "Buffer read by the bandwidth test (larger than the caches)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o, exit_code] { ReportError(RunBenchMemory(*o), exit_code); });
}

}  // namespace strata::app
