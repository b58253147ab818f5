// `strata bench model`: llama-bench-style prefill (pp) and decode (tg) throughput of one sequence.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "model/model.h"

namespace strata::app {
namespace {

struct BenchModelOptions {
  std::string model;
  int pp = 512;
  int tg = 128;
  int threads = 0;
  int reps = 5;
  bool json = false;
};

struct Stats {
  double median = 0, min = 0, max = 0, stddev = 0;
};

Stats Summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(n);
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  s.stddev = n > 1 ? std::sqrt(var / static_cast<double>(n - 1)) : 0.0;
  return s;
}

Status RunBenchModel(const BenchModelOptions& o) {
  if (o.pp < 1 || o.tg < 0 || o.reps < 1) return Status::InvalidArgument("--pp must be >= 1, --tg >= 0, --reps >= 1");
  std::string path = o.model.empty() ? DefaultModelPath() : o.model;
  auto t_load0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto model, model::Model::Load(path));
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load0).count();
  const auto& cfg = model->config();
  int n_ctx = o.pp + o.tg;
  if (n_ctx > cfg.ctx_len) return Status::InvalidArgument(fmt::format("pp + tg = {} exceeds the model context {}", n_ctx, cfg.ctx_len));
  ThreadPool pool(o.threads > 0 ? o.threads : DefaultThreadCount());
  model::Context ctx(*model, n_ctx, &pool);
  std::mt19937 rng(1234);
  std::vector<int32_t> prompt(static_cast<size_t>(o.pp));
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(cfg.n_vocab));
  std::vector<double> pp_tps, tg_tps;
  for (int r = -1; r < o.reps; ++r) {  // r = -1: warm-up
    ctx.Reset();
    auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(auto logits, ctx.Eval(prompt));
    auto t1 = std::chrono::steady_clock::now();
    int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    for (int i = 0; i < o.tg; ++i) {
      ASSIGN_OR_RETURN(logits, ctx.Eval(std::span<const int32_t>(&next, 1)));
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    auto t2 = std::chrono::steady_clock::now();
    if (r < 0) continue;
    pp_tps.push_back(o.pp / std::chrono::duration<double>(t1 - t0).count());
    if (o.tg > 0) tg_tps.push_back(o.tg / std::chrono::duration<double>(t2 - t1).count());
  }
  Stats pp = Summarize(pp_tps), tg = Summarize(tg_tps);
  double gb = static_cast<double>(model->weight_bytes()) / 1e9;
  if (o.json) {
    nlohmann::json j = {{"model", path}, {"threads", pool.num_threads()}, {"isa", kernels::IsaName(kernels::ActiveIsa())},
                        {"pp", o.pp}, {"tg", o.tg}, {"reps", o.reps}, {"load_s", load_s}, {"weight_gb", gb},
                        {"pp_tps", pp.median}, {"pp_tps_min", pp.min}, {"pp_tps_max", pp.max}, {"pp_tps_stddev", pp.stddev},
                        {"tg_tps", tg.median}, {"tg_tps_min", tg.min}, {"tg_tps_max", tg.max}, {"tg_tps_stddev", tg.stddev},
                        {"pp_samples", pp_tps}, {"tg_samples", tg_tps}};
    std::cout << j.dump(2) << std::endl;
  } else {
    std::cout << fmt::format("model {} ({:.3f} GB weights, load {:.2f} s), threads {}, isa {}\n", path, gb, load_s,
                             pool.num_threads(), kernels::IsaName(kernels::ActiveIsa()));
    std::cout << fmt::format("pp{:<5} {:10.2f} tok/s  (min {:.2f}, max {:.2f}, sd {:.2f}, {} reps)\n", o.pp, pp.median,
                             pp.min, pp.max, pp.stddev, o.reps);
    if (o.tg > 0)
      std::cout << fmt::format("tg{:<5} {:10.2f} tok/s  (min {:.2f}, max {:.2f}, sd {:.2f}, {} reps; {:.1f} GB/s of weights)\n",
                               o.tg, tg.median, tg.min, tg.max, tg.stddev, o.reps, tg.median * gb);
  }
  return Status::Ok();
}

}  // namespace

void RegisterBench(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto o = std::make_shared<BenchModelOptions>();
  CLI::App* cmd = bench->add_subcommand("model", "Single-sequence prefill (pp) and decode (tg) throughput, like llama-bench");
  cmd->add_option("-m,--model", o->model, "GGUF model file (default: the bundled tiny model)");
  cmd->add_option("--pp", o->pp, "Prompt tokens per prefill test")->capture_default_str();
  cmd->add_option("--tg", o->tg, "Decode steps after the prefill")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  cmd->add_option("-r,--reps", o->reps, "Repetitions (median reported)")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o, exit_code] {
    Status s = RunBenchModel(*o);
    if (!s.ok()) {
      std::cerr << "error: " << s.message() << "\n";
      *exit_code = 1;
    }
  });
}

}  // namespace strata::app
