// `strata bench model`: llama-bench-style prefill (pp) and decode (tg) throughput of one sequence
// (engine::runner::SequenceRunner: the batched runner with a batch of one; F16 KV by default, as
// llama-bench, `--kv-dtype f32` as `strata generate`). tg is measured after the pp prefill, so its
// steps attend over pp..pp+tg positions (llama-bench's tg starts from an empty context).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "app/cli_common.h"
#include "app/commands.h"
#include "app/replica_flags.h"
#include "base/memory_size.h"
#include "base/thread_pool.h"
#include "bench/metrics.h"
#include "control/device_probe.h"
#include "control/devices.h"
#include "engine/runner/sequence_runner.h"
#include "engine/serving/serving_engine.h"
#include "kernels/kernels.h"
#include "lora/adapter.h"
#include "model/model.h"
#include "replica/replica.h"
#include "tokenizer/tokenizer.h"

namespace strata::app {
namespace {

struct BenchModelOptions {
  std::string model;
  int pp = 512;
  int tg = 128;
  int threads = 0;
  int reps = 5;
  bool json = false;
  double bandwidth_gbps = 0;     // 0: measured after every repetition (control/device_probe)
  std::string kv_dtype = "f16";  // llama-bench's default cache type
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

// Parse: the checks the flags need before anything loads.
Status CheckBenchModelOptions(const BenchModelOptions& o) {
  if (o.pp < 1 || o.tg < 0 || o.reps < 1)
    return Status::InvalidArgument("--pp must be >= 1, --tg >= 0, --reps >= 1");
  if (!(o.bandwidth_gbps >= 0))
    return Status::InvalidArgument("--bandwidth-gbps must be >= 0 (0: measure it)");
  return Status::Ok();
}

// Build: the model (timed), the threads and a sequence runner sized for pp + tg.
struct BenchModelSetup {
  std::string path;
  double load_s = 0;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<engine::runner::SequenceRunner> seq;
};

Result<BenchModelSetup> BuildBenchModel(const BenchModelOptions& o) {
  BenchModelSetup b;
  b.path = o.model.empty() ? DefaultModelPath() : o.model;
  auto t_load0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(b.model, model::Model::Load(b.path));
  b.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load0).count();
  const int n_ctx = o.pp + o.tg;
  if (n_ctx > b.model->config().ctx_len)
    return Status::InvalidArgument(
        fmt::format("pp + tg = {} exceeds the model context {}", n_ctx, b.model->config().ctx_len));
  b.pool = std::make_unique<ThreadPool>(o.threads > 0 ? o.threads : DefaultThreadCount());
  ASSIGN_OR_RETURN(const engine::kv::KvDType kv_dtype, engine::kv::ParseKvDType(o.kv_dtype));
  ASSIGN_OR_RETURN(b.seq,
                   engine::runner::SequenceRunner::Create(*b.model, n_ctx, b.pool.get(), kv_dtype));
  return b;
}

// Run: what the repetitions measured (the warm-up's figures are dropped).
struct BenchModelSamples {
  std::vector<double> pp_tps, tg_tps;
  std::vector<double> bw_gbps, rooflines;  // bandwidth measurements; decode roofline fractions
  control::probe::Rate bw;                 // the bandwidth reported (given, or the median)
};

// One repetition: prefill the prompt, then tg greedy decode steps; the seconds of each part.
struct RepSeconds {
  double pp = 0, tg = 0;
};

Result<RepSeconds> TimeOneRep(engine::runner::SequenceRunner& seq,
                              const std::vector<int32_t>& prompt, int tg) {
  seq.Reset();
  auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto logits, seq.Eval(prompt));
  auto t1 = std::chrono::steady_clock::now();
  int32_t next =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  for (int i = 0; i < tg; ++i) {
    ASSIGN_OR_RETURN(logits, seq.Eval(std::span<const int32_t>(&next, 1)));
    next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  auto t2 = std::chrono::steady_clock::now();
  return RepSeconds{std::chrono::duration<double>(t1 - t0).count(),
                    std::chrono::duration<double>(t2 - t1).count()};
}

Result<BenchModelSamples> MeasureBenchModel(const BenchModelOptions& o, BenchModelSetup& b) {
  std::mt19937 rng(1234);
  std::vector<int32_t> prompt(static_cast<size_t>(o.pp));
  const auto n_vocab = static_cast<uint32_t>(b.model->config().n_vocab);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % n_vocab);
  // The decode roofline: the bytes a token streams over the machine's read bandwidth on these
  // threads. Unless given, the bandwidth is measured right after every repetition's decode, and
  // each repetition's fraction divides by its own measurement: on a shared host the bandwidth
  // moves by a quarter within minutes, and one probe at another moment would carry that into the
  // fraction. Reported: the medians of the fractions and of the measurements.
  const double decode_gb = static_cast<double>(b.model->decode_bytes()) / 1e9;
  const bool given_bw = o.bandwidth_gbps > 0;
  BenchModelSamples s;
  s.bw = {o.bandwidth_gbps, "given (--bandwidth-gbps)"};
  auto probe = [&] {
    s.bw = control::probe::MemoryBandwidthGbps(b.pool->num_threads(), size_t{1} << 30);
    if (s.bw.value > 0) s.bw_gbps.push_back(s.bw.value);
    return s.bw.value;
  };
  for (int r = -1; r < o.reps; ++r) {  // r = -1: warm-up
    ASSIGN_OR_RETURN(const RepSeconds t, TimeOneRep(*b.seq, prompt, o.tg));
    if (r < 0) continue;
    s.pp_tps.push_back(o.pp / t.pp);
    if (o.tg > 0) {
      s.tg_tps.push_back(o.tg / t.tg);
      const double rate = given_bw ? o.bandwidth_gbps : probe();
      if (rate > 0) s.rooflines.push_back(s.tg_tps.back() * decode_gb / rate);
    }
  }
  if (!given_bw && o.tg == 0) probe();  // no decode: the machine's figure alone
  if (!given_bw) s.bw.value = Summarize(s.bw_gbps).median;
  return s;
}

// A Stats as JSON keys: KEY (the median), KEY_min, KEY_max, KEY_stddev.
void AddStatsJson(nlohmann::json* j, const std::string& key, const Stats& s) {
  (*j)[key] = s.median;
  (*j)[key + "_min"] = s.min;
  (*j)[key + "_max"] = s.max;
  (*j)[key + "_stddev"] = s.stddev;
}

// Report: JSON (every sample) or two or three lines of text.
void PrintBenchModel(const BenchModelOptions& o, const BenchModelSetup& b,
                     const BenchModelSamples& s) {
  const Stats pp = Summarize(s.pp_tps), tg = Summarize(s.tg_tps);
  const double gb = static_cast<double>(b.model->weight_bytes()) / 1e9;
  const double decode_gb = static_cast<double>(b.model->decode_bytes()) / 1e9;
  const double roofline = Summarize(s.rooflines).median;
  const control::CpuIdentity cpu_id = control::ThisCpu();
  const std::string cpu =
      fmt::format("{} (family {}, model {})", cpu_id.brand, cpu_id.family, cpu_id.model);
  const int threads = b.pool->num_threads();
  const std::string_view isa = kernels::IsaName(kernels::ActiveIsa());
  if (o.json) {
    nlohmann::json j = {{"model", b.path},
                        {"cpu", cpu},
                        {"threads", threads},
                        {"kv_dtype", o.kv_dtype},
                        {"isa", isa},
                        {"pp", o.pp},
                        {"tg", o.tg},
                        {"reps", o.reps},
                        {"load_s", b.load_s},
                        {"weight_gb", gb},
                        {"decode_gb_per_token", decode_gb},
                        {"bandwidth_gbps", s.bw.value},
                        {"bandwidth_how", s.bw.how},
                        {"roofline_fraction", roofline},
                        {"repacked_gb", static_cast<double>(b.model->repacked_bytes()) / 1e9},
                        {"pp_samples", s.pp_tps},
                        {"tg_samples", s.tg_tps},
                        {"bandwidth_samples", s.bw_gbps},
                        {"roofline_samples", s.rooflines}};
    AddStatsJson(&j, "pp_tps", pp);
    AddStatsJson(&j, "tg_tps", tg);
    std::cout << j.dump(2) << std::endl;
    return;
  }
  std::cout << fmt::format(
      "model {} ({:.3f} GB weights, load {:.2f} s), threads {}, isa {}, kv {}\ncpu {}\n", b.path,
      gb, b.load_s, threads, isa, o.kv_dtype, cpu);
  std::cout << fmt::format("pp{:<5} {:10.2f} tok/s  (min {:.2f}, max {:.2f}, sd {:.2f}, {} reps)\n",
                           o.pp, pp.median, pp.min, pp.max, pp.stddev, o.reps);
  if (o.tg > 0)
    std::cout << fmt::format(
        "tg{:<5} {:10.2f} tok/s  (min {:.2f}, max {:.2f}, sd {:.2f}, {} reps; {:.1f} GB/s of "
        "weights, {:.0f} % of the read bandwidth; median {:.1f} GB/s)\n",
        o.tg, tg.median, tg.min, tg.max, tg.stddev, o.reps, tg.median * decode_gb, 100 * roofline,
        s.bw.value);
}

// Parse (CheckBenchModelOptions) -> build (model, threads, runner) -> run -> report.
Status RunBenchModel(const BenchModelOptions& o) {
  RETURN_IF_ERROR(CheckBenchModelOptions(o));
  ASSIGN_OR_RETURN(BenchModelSetup setup, BuildBenchModel(o));
  ASSIGN_OR_RETURN(const BenchModelSamples samples, MeasureBenchModel(o, setup));
  PrintBenchModel(o, setup, samples);
  return Status::Ok();
}

struct BenchOfflineOptions {
  int num_prompts = 16;
  int input_len = 128;
  int output_len = 64;
  int shared_prefix = 0;
  int reps = 1;
  int warmup = 0;
  uint64_t seed = 1;
  bool json = false;
  // --lora-adapters N: N random in-memory adapters of rank --lora-rank on --lora-targets, requests
  // assigned round-robin (request i -> adapter i % N); 0 = the base model only.
  int lora_adapters = 0;
  int lora_rank = 16;
  std::vector<std::string> lora_targets = {"q", "k", "v", "o", "gate", "up", "down"};
  // The replica config's model path and engine part (defaults, --config, then the flags passed).
  ReplicaFlags replica;
};

using AdapterList = std::vector<std::shared_ptr<const lora::Adapter>>;

// splitmix64: the bench adapters' values are a function of (seed, adapter, tensor, index) only.
uint64_t SplitMix(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void FillUniform(std::vector<float>* v, size_t n, double half_width, uint64_t seed) {
  v->resize(n);
  for (float& x : *v)
    x = static_cast<float>(half_width *
                           (static_cast<double>(SplitMix(&seed) >> 11) * 0x1.0p-52 - 1.0));
}

// --lora-adapters: adapters built in memory (lora::Adapter::FromParts, no file) for every layer's
// targeted matrices: A ~ U(+-1/sqrt(in)), B ~ U(+-0.5/sqrt(rank)), scale 1 (synth-lora's shape of
// values, B a third as large), deterministic in the seed.
// The targets --lora-targets names; errors name the flag.
Result<std::array<bool, lora::kNumTargets>> BenchLoraTargets(const BenchOfflineOptions& o) {
  if (o.lora_adapters < 0 || o.lora_adapters > 1024 || o.lora_rank < 1 || o.lora_rank > 1024)
    return Status::InvalidArgument(
        "--lora-adapters must be in [0, 1024], --lora-rank in [1, 1024]");
  std::array<bool, lora::kNumTargets> on{};
  for (const std::string& name : o.lora_targets) {
    int t = 0;
    while (t < lora::kNumTargets && lora::TargetName(static_cast<lora::Target>(t)) != name) ++t;
    if (t == lora::kNumTargets)
      return Status::InvalidArgument("--lora-targets: unknown target '" + name +
                                     "' (q, k, v, o, gate, up, down)");
    on[static_cast<size_t>(t)] = true;
  }
  return on;
}

Result<AdapterList> BenchAdapters(const model::Model& m, const BenchOfflineOptions& o) {
  ASSIGN_OR_RETURN(const auto on, BenchLoraTargets(o));
  const model::ModelConfig& c = m.config();
  const int shapes[lora::kNumTargets][2] = {
      {c.dim, c.q_dim()}, {c.dim, c.kv_dim()}, {c.dim, c.kv_dim()}, {c.q_dim(), c.dim},
      {c.dim, c.ffn},     {c.dim, c.ffn},      {c.ffn, c.dim}};
  AdapterList out;
  for (int k = 0; k < o.lora_adapters; ++k) {
    std::vector<std::array<lora::LoraPair, lora::kNumTargets>> layers(
        static_cast<size_t>(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l)
      for (int t = 0; t < lora::kNumTargets; ++t) {
        if (!on[static_cast<size_t>(t)]) continue;
        lora::LoraPair& p = layers[static_cast<size_t>(l)][static_cast<size_t>(t)];
        p.rank = o.lora_rank;
        p.in = shapes[t][0];
        p.out = shapes[t][1];
        p.scale = 1.0f;
        const uint64_t key = o.seed * 1000003u + static_cast<uint64_t>((k * 4096 + l) * 8 + t);
        const size_t rank = static_cast<size_t>(p.rank);
        FillUniform(&p.a, rank * static_cast<size_t>(p.in), 1.0 / std::sqrt(p.in), key * 2);
        FillUniform(&p.b, static_cast<size_t>(p.out) * rank, 0.5 / std::sqrt(p.rank), key * 2 + 1);
      }
    const std::string name = "bench-lora-" + std::to_string(k);
    out.push_back(lora::Adapter::FromParts(
        name, fmt::format("bench-{}-seed{}-rank{}", k, o.seed, o.lora_rank), std::move(layers)));
  }
  return out;
}

using bench::Percentile;  // numpy "linear", one copy (bench/metrics.h)

nlohmann::json PercentileJson(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean = v.empty() ? 0 : mean / static_cast<double>(v.size());
  return {{"mean", mean},
          {"p50", Percentile(v, 50)},
          {"p90", Percentile(v, 90)},
          {"p99", Percentile(v, 99)}};
}

struct OfflineRun {
  double duration_s = 0;
  int64_t output_tokens = 0;
  int completed = 0, failed = 0;
  std::vector<double> ttft_ms, tpot_ms;
  int64_t prefix_hit_tokens = 0, prefix_query_tokens = 0, preemptions = 0;
  int64_t decode_steps = 0, decode_tokens = 0;  // decode-only engine steps (EngineStats)
  int64_t tier_hit_tokens = 0;  // prompt/recompute tokens restored from the RAM tier
  double decode_seconds = 0;
  double decode_tps() const {
    return decode_seconds > 0 ? static_cast<double>(decode_tokens) / decode_seconds : 0.0;
  }
  double decode_mean_batch() const {
    return decode_steps > 0 ? static_cast<double>(decode_tokens) / static_cast<double>(decode_steps)
                            : 0.0;
  }
};

Result<OfflineRun> RunOffline(engine::serving::ServingEngine& se, const BenchOfflineOptions& o,
                              const std::vector<std::vector<int32_t>>& prompts,
                              const AdapterList& adapters) {
  using Clock = std::chrono::steady_clock;
  struct Live {
    engine::sched::RequestHandle h;
    Clock::time_point submit, first, last;
    int tokens = 0;
    bool done = false, failed = false;
  };
  std::vector<Live> live(prompts.size());
  auto before = se.engine().Stats();
  auto t0 = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::sched::SubmitRequest r;
    r.prompt = prompts[i];
    r.sampling = engine::sampler::SamplingParams::Greedy();
    r.max_tokens = o.output_len;
    r.ignore_eos = true;
    if (!adapters.empty()) r.lora = adapters[i % adapters.size()];  // round-robin
    live[i].submit = Clock::now();
    auto h = se.engine().Submit(std::move(r));
    if (!h.ok()) return h.status().WithContext("submit");
    live[i].h = std::move(h).value();
  }
  size_t remaining = live.size();
  while (remaining > 0) {
    bool progressed = false;
    for (auto& l : live) {
      if (l.done) continue;
      while (auto ev = l.h.stream->TryNext()) {
        progressed = true;
        auto now = Clock::now();
        if (ev->token >= 0) {
          if (l.tokens == 0) l.first = now;
          l.last = now;
          ++l.tokens;
        }
        if (ev->finish == engine::sched::FinishReason::kError ||
            ev->finish == engine::sched::FinishReason::kCancelled)
          l.failed = true;
      }
      if (l.h.stream->complete()) {
        l.done = true;
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  OfflineRun run;
  run.duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
  for (const auto& l : live) {
    if (l.failed || l.tokens == 0) {
      ++run.failed;
      continue;
    }
    ++run.completed;
    run.output_tokens += l.tokens;
    run.ttft_ms.push_back(std::chrono::duration<double, std::milli>(l.first - l.submit).count());
    if (l.tokens > 1)
      run.tpot_ms.push_back(std::chrono::duration<double, std::milli>(l.last - l.first).count() /
                            (l.tokens - 1));
  }
  auto after = se.engine().Stats();
  run.prefix_hit_tokens = after.prefix_hit_tokens - before.prefix_hit_tokens;
  run.prefix_query_tokens = after.prefix_query_tokens - before.prefix_query_tokens;
  run.preemptions = after.preemptions - before.preemptions;
  run.decode_steps = after.decode_steps - before.decode_steps;
  run.tier_hit_tokens = after.tier_hit_tokens - before.tier_hit_tokens;
  run.decode_tokens = after.decode_tokens - before.decode_tokens;
  run.decode_seconds = after.decode_seconds - before.decode_seconds;
  return run;
}

// The replica config of the run: defaults, --config, the flags passed, then what the workload
// decides where the config leaves it open. The options are checked before anything loads.
Result<replica::ReplicaConfig> OfflineConfig(const BenchOfflineOptions& o) {
  if (o.num_prompts < 1 || o.input_len < 1 || o.output_len < 1 || o.shared_prefix < 0 ||
      o.reps < 1 || o.warmup < 0)
    return Status::InvalidArgument(
        "--num-prompts, --input-len, --output-len and --reps must be >= 1; --shared-prefix and "
        "--warmup >= 0");
  RETURN_IF_ERROR(BenchLoraTargets(o).status());
  ASSIGN_OR_RETURN(replica::ReplicaConfig replica, o.replica.Resolve());
  if (replica.model.path.empty()) replica.model.path = DefaultModelPath();
  engine::serving::ServingConfig& serving = replica.engine;
  // The context its prompts need, and a queue bound that admits every prompt (they are all
  // submitted at once).
  if (serving.max_model_len == 0)
    serving.max_model_len = o.shared_prefix + o.input_len + o.output_len;
  if (!o.replica.Passed("--max-queued-requests"))
    serving.scheduler.max_queued_requests =
        std::max(serving.scheduler.max_queued_requests, o.num_prompts);
  // Every adapter may share a step unless --max-loras says otherwise (the active set's bound).
  if (o.lora_adapters > 0 && !o.replica.Passed("--max-loras"))
    serving.lora.max_loras = std::max(serving.lora.max_loras, std::min(o.lora_adapters, 64));
  return replica;
}

// --warmup + --reps runs of --num-prompts prompts (a shared prefix + random tokens each); the
// warm-up runs fill caches and are not returned.
Result<std::vector<OfflineRun>> RunOfflineReps(engine::serving::ServingEngine& se,
                                               const BenchOfflineOptions& o,
                                               const AdapterList& adapters) {
  const int n_vocab = se.model().config().n_vocab;
  std::mt19937_64 rng(o.seed);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& v : t) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab));
    return t;
  };
  std::vector<int32_t> prefix = random_tokens(o.shared_prefix);
  std::vector<OfflineRun> runs;
  for (int rep = 0; rep < o.warmup + o.reps; ++rep) {
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < o.num_prompts; ++i) {
      std::vector<int32_t> p = prefix;
      auto suffix = random_tokens(o.input_len);
      p.insert(p.end(), suffix.begin(), suffix.end());
      prompts.push_back(std::move(p));
    }
    ASSIGN_OR_RETURN(OfflineRun run, RunOffline(se, o, prompts, adapters));
    if (rep >= o.warmup) runs.push_back(std::move(run));
  }
  return runs;
}

// What the report prints besides the runs: the config and the adapters.
struct OfflineSetup {
  const replica::ReplicaConfig& replica;
  int kv_blocks = 0;
  const AdapterList& adapters;
};

// The adapters' names and their f32 bytes.
std::pair<std::vector<std::string>, size_t> Names(const AdapterList& adapters) {
  std::pair<std::vector<std::string>, size_t> out;
  for (const auto& a : adapters) {
    out.first.push_back(a->name());
    out.second += a->bytes();
  }
  return out;
}

double OutputTps(const OfflineRun& r) {
  return static_cast<double>(r.output_tokens) / r.duration_s;
}

void PrintOfflineJson(const BenchOfflineOptions& o, const OfflineSetup& setup,
                      const std::vector<OfflineRun>& runs, const OfflineRun& m) {
  const engine::serving::ServingConfig& serving = setup.replica.engine;
  nlohmann::json all = nlohmann::json::array();
  for (const OfflineRun& r : runs) all.push_back(OutputTps(r));
  nlohmann::json j = {
      {"model", setup.replica.model.path},
      {"num_prompts", o.num_prompts},
      {"input_len", o.input_len},
      {"output_len", o.output_len},
      {"shared_prefix", o.shared_prefix},
      {"max_num_seqs", serving.scheduler.max_num_seqs},
      {"threads", serving.threads},
      {"prefix_cache", serving.kv_cache.prefix_cache},
      {"kv_dtype", engine::kv::KvDTypeName(serving.kv_cache.dtype)},
      {"kv_blocks", setup.kv_blocks},
      {"reps", o.reps},
      {"warmup", o.warmup},
      {"completed", m.completed},
      {"failed", m.failed},
      {"duration_s", m.duration_s},
      {"requests_per_s", m.completed / m.duration_s},
      {"output_tps", OutputTps(m)},
      {"output_tps_runs", all},
      {"ttft_ms", PercentileJson(m.ttft_ms)},
      {"tpot_ms", PercentileJson(m.tpot_ms)},
      {"prefix_hit_tokens", m.prefix_hit_tokens},
      {"prefix_query_tokens", m.prefix_query_tokens},
      {"preemptions", m.preemptions},
      {"tier_hit_tokens", m.tier_hit_tokens},
      {"kv_tier_ram",
       serving.kv_tiers.ram ? FormatMemorySize(serving.kv_tiers.ram->limits.capacity_bytes) : ""},
      {"decode_tps", m.decode_tps()},
      {"decode_steps", m.decode_steps},
      {"decode_tokens", m.decode_tokens},
      {"decode_mean_batch", m.decode_mean_batch()}};
  j["lora"] = nullptr;
  if (!setup.adapters.empty()) {
    const auto [adapter_names, adapter_bytes] = Names(setup.adapters);
    j["lora"] = {{"adapters", adapter_names},           {"rank", o.lora_rank},
                 {"targets", o.lora_targets},           {"assignment", "round-robin"},
                 {"max_loras", serving.lora.max_loras}, {"adapter_bytes", adapter_bytes}};
  }
  std::cout << j.dump(2) << std::endl;
}

void PrintOfflineText(const BenchOfflineOptions& o, const OfflineSetup& setup,
                      const OfflineRun& m) {
  const engine::serving::ServingConfig& serving = setup.replica.engine;
  std::cout << fmt::format(
      "model {}  prompts {} x ({} shared + {} in, {} out)  max-num-seqs {}  prefix cache {}\n",
      setup.replica.model.path, o.num_prompts, o.shared_prefix, o.input_len, o.output_len,
      serving.scheduler.max_num_seqs, serving.kv_cache.prefix_cache ? "on" : "off");
  std::cout << fmt::format(
      "completed {}  failed {}  duration {:.2f} s  requests/s {:.2f}  output tokens/s {:.2f}\n",
      m.completed, m.failed, m.duration_s, m.completed / m.duration_s, OutputTps(m));
  std::cout << fmt::format("TTFT ms  p50 {:.1f}  p90 {:.1f}  p99 {:.1f}\n",
                           Percentile(m.ttft_ms, 50), Percentile(m.ttft_ms, 90),
                           Percentile(m.ttft_ms, 99));
  std::cout << fmt::format("TPOT ms  p50 {:.1f}  p90 {:.1f}  p99 {:.1f}\n",
                           Percentile(m.tpot_ms, 50), Percentile(m.tpot_ms, 90),
                           Percentile(m.tpot_ms, 99));
  std::cout << fmt::format(
      "prefix cache hits {} / {} tokens, preemptions {}, RAM-tier hits {} tokens\n",
      m.prefix_hit_tokens, m.prefix_query_tokens, m.preemptions, m.tier_hit_tokens);
  std::cout << fmt::format("decode-only steps {}  mean batch {:.1f}  decode tokens/s {:.2f}\n",
                           m.decode_steps, m.decode_mean_batch(), m.decode_tps());
  if (!setup.adapters.empty()) {
    const auto [adapter_names, adapter_bytes] = Names(setup.adapters);
    std::cout << fmt::format(
        "LoRA adapters {} ({}), rank {}, targets {}, requests round-robin, max-loras {}, {:.1f} "
        "MiB f32\n",
        setup.adapters.size(), fmt::join(adapter_names, ","), o.lora_rank,
        fmt::join(o.lora_targets, ","), serving.lora.max_loras,
        static_cast<double>(adapter_bytes) / (1024.0 * 1024.0));
  }
}

// Parse (OfflineConfig) -> build (the replica's engine half) -> run -> report.
Status RunBenchOffline(const BenchOfflineOptions& o) {
  ASSIGN_OR_RETURN(const replica::ReplicaConfig config, OfflineConfig(o));
  ASSIGN_OR_RETURN(auto replica, replica::Replica::EngineOnly(config));
  ASSIGN_OR_RETURN(AdapterList adapters, BenchAdapters(replica->model(), o));
  ASSIGN_OR_RETURN(std::vector<OfflineRun> runs, RunOfflineReps(replica->serving(), o, adapters));
  replica->Stop();
  // Report the median run by output tokens/s (all runs in JSON).
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return OutputTps(runs[a]) < OutputTps(runs[b]); });
  const OfflineRun& m = runs[order[order.size() / 2]];
  const OfflineSetup setup{config, replica->serving().num_blocks(), adapters};
  if (o.json)
    PrintOfflineJson(o, setup, runs, m);
  else
    PrintOfflineText(o, setup, m);
  return m.failed == 0 ? Status::Ok()
                       : Status::Internal(std::to_string(m.failed) + " requests failed");
}

// `bench model`'s flags.
void RegisterBenchModel(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<BenchModelOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "model", "Single-sequence prefill (pp) and decode (tg) throughput, like llama-bench");
  cmd->add_option("-m,--model", o->model, "GGUF model file (default: the bundled tiny model)");
  AddDefaulted(cmd, "--pp", o->pp, "Prompt tokens per prefill test");
  AddDefaulted(cmd, "--tg", o->tg, "Decode steps after the prefill");
  AddThreadsFlag(cmd, &o->threads);
  AddRepsFlag(cmd, &o->reps);
  AddDefaulted(cmd, "--kv-dtype", o->kv_dtype,
               "KV cache type: f16 (llama-bench's default), f32, q8_0");
  cmd->add_option(
      "--bandwidth-gbps", o->bandwidth_gbps,
      "Read bandwidth for roofline_fraction (default: measured on the same threads after "
      "every repetition's decode)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o, exit_code] { ReportError(RunBenchModel(*o), exit_code); });
}

// `bench offline`'s flags: the workload's, then the engine flags of `strata serve`.
void RegisterBenchOffline(CLI::App* bench, int* exit_code) {
  auto f = std::make_shared<BenchOfflineOptions>();
  CLI::App* off = bench->add_subcommand(
      "offline", "Run N requests through the batching engine; throughput, TTFT, TPOT");
  AddDefaulted(off, "--num-prompts", f->num_prompts, "Requests");
  AddDefaulted(off, "--input-len", f->input_len,
               "Prompt tokens per request (after the shared prefix)");
  AddDefaulted(off, "--output-len", f->output_len, "Generated tokens per request");
  AddDefaulted(off, "--shared-prefix", f->shared_prefix,
               "Tokens of a prefix common to every prompt");
  // The engine flags of `strata serve` (same names, same defaults, plus --config); the context
  // length defaults to what the prompts need.
  f->replica.Register(off, ReplicaFlags::kModelPath | ReplicaFlags::kEngine);
  AddRepsFlag(off, &f->reps);
  AddDefaulted(off, "--warmup", f->warmup, "Unreported runs first (e.g. to warm the prefix cache)");
  AddDefaulted(off, "--seed", f->seed, "Prompt generator seed");
  AddDefaulted(off, "--lora-adapters", f->lora_adapters,
               "Random in-memory LoRA adapters; requests use them round-robin (0: base model)");
  AddDefaulted(off, "--lora-rank", f->lora_rank, "Rank of the --lora-adapters");
  off->add_option("--lora-targets", f->lora_targets,
                  "Matrices the --lora-adapters modify (comma-separated: q,k,v,o,gate,up,down)")
      ->delimiter(',')
      ->capture_default_str();
  off->add_flag("--json", f->json, "Print JSON");
  off->callback([f, exit_code] { ReportError(RunBenchOffline(*f), exit_code); });
}

}  // namespace

void RegisterBench(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  RegisterBenchServe(bench, exit_code);
  RegisterBenchFlood(bench, exit_code);
  RegisterBenchMemory(bench, exit_code);
  RegisterBenchModel(bench, exit_code);
  RegisterBenchOffline(bench, exit_code);
}

}  // namespace strata::app
