// `strata bench serve` and `strata bench sweep`: load generators for OpenAI-compatible endpoints
// (strata serve, llama.cpp's llama-server, vLLM). The work is in src/bench/; this file maps flags.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <memory>

#include "app/cli_common.h"
#include "app/commands.h"
#include "bench/dataset.h"
#include "bench/load_gen.h"
#include "bench/report.h"
#include "bench/sweep.h"

namespace strata::app {
namespace {

struct BenchServeFlags {
  bench::LoadOptions load;
  bench::DatasetOptions data;
  std::vector<std::string> base_urls;
  std::vector<std::string> labels;
  std::string prompt_format = "ids";
  std::string request_rate;  // number or "inf"; empty: not given
  std::vector<double> slo_ttft, slo_tpot,
      slo_e2el;  // 0 or 1 values (CLI11 leaves them empty when absent)
  std::string json_path;
  bool save_result =
      false;  // vLLM's --save-result: the JSON report into result_dir/result_filename
  std::string result_dir = ".";
  std::string result_filename;
  bool no_ignore_eos = false;
  bool no_progress = false;
  std::string rates, concurrency, out_dir;
};

// What is sent where: the model name, the key, the endpoint.
void AddTargetFlags(CLI::App* c, BenchServeFlags* f) {
  c->add_option("--model", f->load.model,
                "model name sent in requests (default: first id of GET /v1/models)");
  c->add_option("--api-key", f->load.api_key, "sent as 'Authorization: Bearer KEY'");
  AddDefaulted(c, "--endpoint", f->load.endpoint, "completions | chat");
}

// The prompts: which dataset, how many, and how they are written.
void AddDatasetFlags(CLI::App* c, BenchServeFlags* f) {
  AddDefaulted(c, "--dataset", f->data.name, "random | shared-prefix | multi-turn | jsonl");
  c->add_option("--num-prompts", f->data.num_prompts,
                "requests (random: required; jsonl: truncate/cycle; shared-prefix: at most G*Q)");
  AddDefaulted(c, "--seed", f->data.seed, "seed for prompts and arrival times");
  AddDefaulted(c, "--prompt-format", f->prompt_format, "ids (token-id prompts) | text");
  c->add_option("--tokenizer", f->data.tokenizer_path,
                "GGUF whose vocabulary makes token ids and text");
  c->add_option("--vocab-size", f->data.vocab_size,
                "token ids are drawn below this (default: ids 100..499)");
}

// One length flag of a dataset kind: its help is prefixed by the kind ("random: prompt tokens").
struct LengthFlag {
  const char* names;
  int64_t bench::DatasetOptions::*field;
  const char* help;
};

void AddLengthFlags(CLI::App* c, bench::DatasetOptions* d, const char* kind,
                    std::initializer_list<LengthFlag> flags) {
  for (const LengthFlag& l : flags)
    AddDefaulted(c, l.names, d->*(l.field), fmt::format("{}: {}", kind, l.help));
}

// The shape of each dataset kind's prompts (random, shared-prefix, multi-turn, jsonl).
void AddDatasetKindFlags(CLI::App* c, BenchServeFlags* f) {
  using D = bench::DatasetOptions;
  bench::DatasetOptions* d = &f->data;
  AddLengthFlags(c, d, "random",
                 {{"--random-input-len", &D::random_input_len, "prompt tokens"},
                  {"--random-output-len", &D::random_output_len, "output tokens"}});
  AddDefaulted(c, "--random-range-ratio", d->random_range_ratio,
               "random: lengths vary in [len*(1-r), len*(1+r)]");
  AddLengthFlags(c, d, "random",
                 {{"--random-prefix-len", &D::random_prefix_len,
                   "tokens of a prefix common to every prompt"}});
  AddLengthFlags(c, d, "shared-prefix",
                 {{"--sp-num-groups", &D::sp_num_groups, "groups (G)"},
                  {"--sp-prompts-per-group", &D::sp_prompts_per_group, "questions per group (Q)"},
                  {"--sp-system-prompt-len", &D::sp_system_prompt_len, "system prompt tokens (P)"},
                  {"--sp-question-len", &D::sp_question_len, "question tokens"},
                  {"--sp-output-len", &D::sp_output_len, "output tokens"}});
  AddLengthFlags(c, d, "multi-turn",
                 {{"--mt-num-conversations", &D::mt_num_conversations, "conversations"},
                  {"--mt-turns", &D::mt_turns, "turns per conversation"},
                  {"--mt-user-len", &D::mt_user_len, "tokens (about) of each new user message"},
                  {"--mt-output-len", &D::mt_output_len, "output tokens per turn"},
                  {"--mt-first-len", &D::mt_first_len,
                   "tokens (about) of each conversation's first message (0: --mt-user-len)"}});
  AddDefaulted(c, "--mt-think-time-s", f->load.think_time_s,
               "multi-turn: seconds between a reply and the next turn of its conversation (user "
               "think time)");
  c->add_option("--dataset-path", d->dataset_path,
                "jsonl: file with one {\"prompt\": ..., \"output_len\": N} per line");
  AddLengthFlags(
      c, d, "jsonl",
      {{"--jsonl-output-len", &D::jsonl_output_len, "output tokens when a line has none"}});
}

// How the load is sent and judged: arrivals, concurrency, SLOs, sampling, time limits.
void AddLoadFlags(CLI::App* c, BenchServeFlags* f) {
  c->add_option(
      "--request-rate", f->request_rate,
      "requests/s (Poisson/gamma arrivals) or inf (the default, as in vLLM: every request at t=0, "
      "bounded by --max-concurrency)");
  AddDefaulted(c, "--burstiness", f->load.burstiness,
               "gamma shape of inter-arrival gaps (1 = Poisson)");
  c->add_option("--max-concurrency", f->load.max_concurrency, "requests in flight at most");
  c->add_option("--slo-ttft-ms", f->slo_ttft, "goodput SLO on TTFT")->expected(1);
  c->add_option("--slo-tpot-ms", f->slo_tpot, "goodput SLO on TPOT")->expected(1);
  c->add_option("--slo-e2el-ms", f->slo_e2el, "goodput SLO on end-to-end latency")->expected(1);
  c->add_flag("--no-ignore-eos", f->no_ignore_eos,
              "let the model stop at EOS (output lengths vary)");
  AddDefaulted(c, "--temperature", f->load.temperature, "sampling temperature");
  AddDefaulted(c, "--request-timeout", f->load.request_timeout_s, "seconds per request");
  AddDefaulted(c, "--max-duration-s", f->load.max_duration_s,
               "stop sending and abort in-flight requests after this");
  c->add_flag("--no-progress", f->no_progress,
              "no progress bar (it is drawn only when stderr is a terminal)");
}

// The flags bench serve and bench sweep share, in --help's order.
void AddCommon(CLI::App* c, BenchServeFlags* f) {
  AddTargetFlags(c, f);
  AddDatasetFlags(c, f);
  AddDatasetKindFlags(c, f);
  AddLoadFlags(c, f);
}

Status Finalize(BenchServeFlags* f, bench::Slo* slo) {
  if (f->prompt_format != "ids" && f->prompt_format != "text")
    return Status::InvalidArgument("--prompt-format must be 'ids' or 'text'");
  f->data.text = f->prompt_format == "text" || f->load.endpoint == "chat";
  f->load.ignore_eos = !f->no_ignore_eos;
  f->load.progress = !f->no_progress && isatty(2);
  f->load.seed = f->data.seed;
  if (f->data.vocab_size < 0) return Status::InvalidArgument("--vocab-size must be > 0");
  if (!f->request_rate.empty()) {
    ASSIGN_OR_RETURN(auto v, bench::ParseLevels(f->request_rate, "--request-rate", true));
    if (v.size() != 1)
      return Status::InvalidArgument("--request-rate takes one value (bench sweep takes --rates)");
    f->load.request_rate = v[0];
  }
  if (f->load.max_concurrency < 0) return Status::InvalidArgument("--max-concurrency must be >= 1");
  auto one = [](const std::vector<double>& v, const char* name,
                std::optional<double>* out) -> Status {
    if (v.empty()) return Status::Ok();
    if (!(v[0] > 0) || !std::isfinite(v[0]))
      return Status::InvalidArgument(fmt::format("{} must be a number > 0", name));
    *out = v[0];
    return Status::Ok();
  };
  RETURN_IF_ERROR(one(f->slo_ttft, "--slo-ttft-ms", &slo->ttft_ms));
  RETURN_IF_ERROR(one(f->slo_tpot, "--slo-tpot-ms", &slo->tpot_ms));
  RETURN_IF_ERROR(one(f->slo_e2el, "--slo-e2el-ms", &slo->e2el_ms));
  return Status::Ok();
}

Status WriteText(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::cout << text;
    return Status::Ok();
  }
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return Status::IoError("cannot write " + path);
  return Status::Ok();
}

// vLLM's result file name: <backend>-<rate>qps[-concurrency<C>]-<model>-<YYYYmmdd-HHMMSS>.json.
std::string VllmResultFilename(const bench::Report& rep, const std::string& date) {
  const bench::LoadOptions& o = rep.options;
  std::string model =
      rep.model.substr(rep.model.rfind('/') == std::string::npos ? 0 : rep.model.rfind('/') + 1);
  return fmt::format(
      "{}-{}qps{}-{}-{}.json", o.endpoint == "chat" ? "openai-chat" : "openai",
      std::isinf(o.request_rate) ? std::string("inf") : fmt::format("{:.1f}", o.request_rate),
      o.max_concurrency > 0 ? fmt::format("-concurrency{}", o.max_concurrency) : std::string(),
      model.empty() ? std::string("model") : model, date);
}

Status SaveResult(const BenchServeFlags& f, const bench::Report& rep, nlohmann::json j) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char date[32];
  std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tm);
  j["date"] = date;
  const std::string name =
      f.result_filename.empty() ? VllmResultFilename(rep, date) : f.result_filename;
  const std::string path = f.result_dir.empty() ? name : f.result_dir + "/" + name;
  RETURN_IF_ERROR(
      WriteText(path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"));
  std::cout << "saved the result to " << path << "\n";
  return Status::Ok();
}

// 0: every request completed; 3: the run finished but some requests failed or were not sent.
// A server that cannot be reached at all is an error (exit 1) before anything is sent.
Result<int> RunServe(BenchServeFlags f) {
  bench::Slo slo;
  RETURN_IF_ERROR(Finalize(&f, &slo));
  if (f.base_urls.size() != 1)
    return Status::InvalidArgument("bench serve takes one --base-url (bench sweep takes several)");
  f.load.base_url = f.base_urls[0];
  ASSIGN_OR_RETURN(auto data, bench::BuildDataset(f.data));
  RETURN_IF_ERROR(bench::ValidateLoadOptions(f.load, data));
  RETURN_IF_ERROR(bench::ProbeServer(f.load.base_url, std::min(10.0, f.load.request_timeout_s)));
  ASSIGN_OR_RETURN(auto res, bench::RunLoad(f.load, data));
  bench::Report rep = bench::MakeReport(f.load, data, res, slo);
  if (f.json_path != "-") std::cout << bench::FormatReport(rep) << std::flush;
  if (!f.json_path.empty())
    RETURN_IF_ERROR(WriteText(
        f.json_path,
        bench::ReportToJson(rep).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
            "\n"));
  if (f.save_result) RETURN_IF_ERROR(SaveResult(f, rep, bench::ReportToJson(rep)));
  return rep.agg.failed == 0 && rep.not_sent == 0 ? 0 : 3;
}

Result<int> RunSweepCmd(BenchServeFlags f) {
  bench::Slo slo;
  RETURN_IF_ERROR(Finalize(&f, &slo));
  bench::SweepOptions s;
  s.base = f.load;
  s.base_urls = f.base_urls;
  s.labels = f.labels;
  s.out_dir = f.out_dir;
  s.slo = slo;
  if (f.rates.empty() == f.concurrency.empty())
    return Status::InvalidArgument("give exactly one of --rates or --concurrency");
  if (!f.rates.empty()) {
    ASSIGN_OR_RETURN(s.rates, bench::ParseLevels(f.rates, "--rates", true));
  } else {
    ASSIGN_OR_RETURN(auto c, bench::ParseLevels(f.concurrency, "--concurrency", false));
    for (double v : c) {
      if (v != std::floor(v) || v > static_cast<double>(bench::kMaxPrompts))
        return Status::InvalidArgument(
            fmt::format("--concurrency: {:g} is not an integer in [1, {}]", v, bench::kMaxPrompts));
      s.concurrency.push_back(static_cast<int64_t>(v));
    }
  }
  for (const std::string& url : s.base_urls)
    RETURN_IF_ERROR(bench::ProbeServer(url, std::min(10.0, f.load.request_timeout_s)));
  ASSIGN_OR_RETURN(auto runs, bench::RunSweep(s, f.data, std::cout));
  std::cout << "\n"
            << bench::SweepTable(runs, !s.rates.empty()) << "\nwrote " << s.out_dir
            << "/sweep.json, sweep.md, pareto.svg\n";
  for (const auto& r : runs)
    if (r.report.agg.failed != 0 || r.report.not_sent != 0) return 3;
  return 0;
}

void Report(const Result<int>& r, int* exit_code) {
  if (r.ok()) *exit_code = *r;
  ReportError(r.status(), exit_code);
}

}  // namespace

void RegisterBenchServe(CLI::App* bench, int* exit_code) {
  auto f = std::make_shared<BenchServeFlags>();
  CLI::App* c = bench->add_subcommand(
      "serve", "Load-test an OpenAI-compatible server (strata serve, llama-server, vLLM)");
  c->add_option("--base-url", f->base_urls, "server, e.g. http://127.0.0.1:8080")
      ->required()
      ->expected(1);
  AddCommon(c, f.get());
  c->add_option("--json", f->json_path, "write the report as JSON to this file ('-': stdout only)");
  c->add_flag("--save-result", f->save_result,
              "write the JSON report (with vLLM's result keys) to --result-dir/--result-filename");
  AddDefaulted(c, "--result-dir", f->result_dir, "directory of --save-result");
  c->add_option("--result-filename", f->result_filename,
                "file name of --save-result (default: vLLM's "
                "<backend>-<rate>qps[-concurrency<C>]-<model>-<date>.json)");
  c->callback([f, exit_code] { Report(RunServe(*f), exit_code); });

  auto g = std::make_shared<BenchServeFlags>();
  CLI::App* s = bench->add_subcommand(
      "sweep", "Run bench serve over load levels (and endpoints); table, JSON and a Pareto SVG");
  s->add_option("--base-url", g->base_urls,
                "server(s); several are run interleaved and plotted side by side")
      ->required();
  s->add_option("--label", g->labels, "a name per --base-url for the table and plot");
  AddCommon(s, g.get());
  s->add_option("--rates", g->rates, "request rates, e.g. 1,2,4,8 (inf allowed)");
  s->add_option("--concurrency", g->concurrency, "concurrency levels, e.g. 1,2,4,8,16");
  s->add_option("--out", g->out_dir, "output directory")->required();
  s->callback([g, exit_code] { Report(RunSweepCmd(*g), exit_code); });
}

}  // namespace strata::app
