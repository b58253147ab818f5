// `strata generate`: one prompt, one stream — a batch of one on the engine's forward pass
// (engine::runner::SequenceRunner: CpuModelRunner over paged F32 KV sized for prompt + max tokens,
// the numerics llama.cpp's goldens were computed with), sampled with the engine's Sampler.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "app/cli_common.h"
#include "app/commands.h"
#include "base/thread_pool.h"
#include "engine/runner/sequence_runner.h"
#include "engine/sampler/sampler.h"
#include "lora/adapter.h"
#include "model/model.h"
#include "replica/replica.h"
#include "tokenizer/tokenizer.h"

namespace strata::app {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  std::string prompt_tokens;
  std::string lora;         // --lora FILE (llama.cpp's GGUF LoRA format)
  float lora_scale = 1.0f;  // --lora-scale S
  int max_lora_rank = 256;  // --max-lora-rank: a pair of higher rank is refused
  int max_tokens = 32;
  // The sampler's own defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no
  // penalties); its seed comes from --seed.
  engine::sampler::SamplingParams sampling;
  int64_t seed = -1;
  int threads = 0;
  int ctx = 0;
  bool ignore_eos = false;
  bool json = false;
  bool parse_special = false;
};

Result<std::vector<int32_t>> ParseIdList(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    item = item.substr(b, e - b + 1);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (errno != 0 || end == item.c_str() || *end != '\0' || v < 0 || v > INT32_MAX)
      return Status::InvalidArgument("not a token id: '" + item + "'");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return Status::InvalidArgument("empty token id list");
  return ids;
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The prompt's ids (--prompt-tokens verbatim, or --prompt encoded) and the context they run in.
struct Prompt {
  std::vector<int32_t> ids;
  int n_ctx = 0;
};

Result<Prompt> MakePrompt(const GenerateOptions& o, const tokenizer::Tokenizer& tok,
                          const model::ModelConfig& cfg) {
  Prompt p;
  if (!o.prompt_tokens.empty()) {
    ASSIGN_OR_RETURN(p.ids, ParseIdList(o.prompt_tokens));
  } else {
    p.ids = tok.Encode(o.prompt, /*add_special=*/true, o.parse_special);
  }
  if (p.ids.empty())
    return Status::InvalidArgument("the prompt is empty (and the model adds no BOS token)");
  if (o.max_tokens < 0) return Status::InvalidArgument("--max-tokens must be >= 0");
  int64_t need = static_cast<int64_t>(p.ids.size()) + o.max_tokens;
  p.n_ctx = o.ctx > 0 ? o.ctx : static_cast<int>(std::min<int64_t>(need, cfg.ctx_len));
  if (static_cast<int64_t>(p.ids.size()) > std::min(p.n_ctx, cfg.ctx_len))
    return Status::OutOfRange(fmt::format("prompt has {} tokens, more than the context size of {}",
                                          p.ids.size(), std::min(p.n_ctx, cfg.ctx_len)));
  return p;
}

Result<engine::sampler::SamplingParams> MakeSampling(const GenerateOptions& o) {
  engine::sampler::SamplingParams sp = o.sampling;
  sp.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  RETURN_IF_ERROR(sp.Validate());
  return sp;
}

// What one generation produced, and when.
struct Generation {
  std::vector<int32_t> tokens;
  std::string text, rest;  // rest: the decoder's flush at the end (already in text)
  double pp_s = 0, tg_s = 0;
};

// Prefill, then sample and decode up to --max-tokens (streaming the text to stdout unless --json).
Result<Generation> Generate(const GenerateOptions& o, const tokenizer::Tokenizer& tok,
                            engine::runner::SequenceRunner& seq,
                            const engine::sampler::SamplingParams& sp, size_t n_vocab,
                            const std::vector<int32_t>& prompt) {
  engine::sampler::Sampler sampler(sp, n_vocab);
  std::vector<int32_t> banned;
  if (o.ignore_eos) banned = tok.eog_ids();
  std::vector<int32_t> history = prompt;
  history.reserve(prompt.size() + static_cast<size_t>(o.max_tokens));
  Generation g;
  tokenizer::IncrementalDecoder decoder(tok);

  auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto logits, seq.Eval(prompt));
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.max_tokens; ++i) {
    int32_t next = sampler.Sample(logits, history, banned);
    if (!o.ignore_eos && tok.IsEog(next)) break;
    g.tokens.push_back(next);
    history.push_back(next);
    std::string piece = decoder.Push(next);
    g.text += piece;
    if (!o.json && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (i + 1 == o.max_tokens) break;
    if (seq.n_past() >= seq.n_ctx()) break;
    auto step = seq.Eval(std::span<const int32_t>(&next, 1));
    if (!step.ok()) {
      if (!o.json && !g.text.empty()) std::fputc('\n', stdout);  // the error starts its own line
      return step.status();
    }
    logits = *step;
  }
  g.rest = decoder.Flush();
  g.text += g.rest;
  auto t2 = std::chrono::steady_clock::now();
  g.pp_s = Seconds(t0, t1);
  g.tg_s = Seconds(t1, t2);
  return g;
}

void Report(const GenerateOptions& o, const std::vector<int32_t>& prompt, const Generation& g,
            int threads, uint64_t seed) {
  double prompt_tps = g.pp_s > 0 ? static_cast<double>(prompt.size()) / g.pp_s : 0.0;
  // Generation speed counts the decode steps (one per generated token after the first).
  double gen_tps =
      (g.tokens.size() > 1 && g.tg_s > 0) ? static_cast<double>(g.tokens.size() - 1) / g.tg_s : 0.0;
  if (o.json) {
    nlohmann::json j;
    j["prompt_tokens"] = prompt;
    j["tokens"] = g.tokens;
    j["text"] = g.text;
    j["timings"] = {{"prompt_tps", prompt_tps}, {"gen_tps", gen_tps}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else {
    if (!g.rest.empty()) std::fwrite(g.rest.data(), 1, g.rest.size(), stdout);
    std::fputc('\n', stdout);  // the text ends its line (a shell prompt never follows it)
  }
  std::fprintf(stderr,
               "prompt: %zu tokens in %.3f s (%.1f tokens/s) | generation: %zu tokens in %.3f s "
               "(%.1f tokens/s) | threads %d, seed %llu\n",
               prompt.size(), g.pp_s, prompt_tps, g.tokens.size(), g.tg_s, gen_tps, threads,
               static_cast<unsigned long long>(seed));
}

// Parse (prompt, sampling) -> build (model, tokenizer, sequence runner, adapter) -> run -> report.
Status RunGenerate(const GenerateOptions& o) {
  ASSIGN_OR_RETURN(replica::LoadedModel loaded,
                   replica::LoadModel(o.model.empty() ? DefaultModelPath() : o.model));
  const model::Model& model = *loaded.model;
  const tokenizer::Tokenizer& tok = *loaded.tokenizer;
  const auto& cfg = model.config();
  ASSIGN_OR_RETURN(const Prompt prompt, MakePrompt(o, tok, cfg));
  ASSIGN_OR_RETURN(const engine::sampler::SamplingParams sp, MakeSampling(o));

  ThreadPool pool(o.threads > 0 ? o.threads : DefaultThreadCount());
  ASSIGN_OR_RETURN(auto seq, engine::runner::SequenceRunner::Create(model, prompt.n_ctx, &pool));
  std::shared_ptr<const lora::Adapter> adapter;
  if (!o.lora.empty()) {
    lora::LoadOptions lo;
    lo.scale = o.lora_scale;
    lo.max_rank = o.max_lora_rank;
    ASSIGN_OR_RETURN(adapter, lora::Adapter::Load("cli", o.lora, model, lo));
    seq->set_lora(adapter.get());
  }
  ASSIGN_OR_RETURN(const Generation g,
                   Generate(o, tok, *seq, sp, static_cast<size_t>(cfg.n_vocab), prompt.ids));
  Report(o, prompt.ids, g, pool.num_threads(), sp.seed);
  return Status::Ok();
}

// The sampler's flags (llama.cpp's names), bound to `sp` and showing its defaults.
void AddSamplingFlags(CLI::App* cmd, engine::sampler::SamplingParams* sp) {
  AddDefaulted(cmd, "--temperature,--temp", sp->temperature, "Sampling temperature (0 = greedy)");
  AddDefaulted(cmd, "--top-k", sp->top_k, "Top-k (<= 0: off)");
  AddDefaulted(cmd, "--top-p", sp->top_p, "Top-p (1: off)");
  AddDefaulted(cmd, "--min-p", sp->min_p, "Min-p (0: off)");
  AddDefaulted(cmd, "--repeat-penalty", sp->repetition_penalty, "Repetition penalty (1: off)");
  AddDefaulted(cmd, "--frequency-penalty", sp->frequency_penalty, "Frequency penalty");
  AddDefaulted(cmd, "--presence-penalty", sp->presence_penalty, "Presence penalty");
}

}  // namespace

void RegisterGenerate(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt with a GGUF model");
  cmd->add_option("-m,--model", o->model, "GGUF model file (default: the bundled tiny model)");
  auto* p = cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  auto* pt = cmd->add_option("--prompt-tokens", o->prompt_tokens,
                             "Prompt as comma-separated token ids (used verbatim)");
  p->excludes(pt);
  cmd->add_option("--lora", o->lora,
                  "LoRA adapter (llama.cpp's GGUF LoRA format) applied to the model");
  AddDefaulted(cmd, "--lora-scale", o->lora_scale,
               "User scale of --lora (the pair's scale is this x alpha / rank)");
  AddDefaulted(cmd, "--max-lora-rank", o->max_lora_rank, "Refuse a --lora whose rank is higher");
  AddDefaulted(cmd, "-n,--max-tokens", o->max_tokens, "Maximum number of tokens to generate");
  AddSamplingFlags(cmd, &o->sampling);
  AddDefaulted(cmd, "--seed", o->seed, "Random seed (-1: random)");
  AddThreadsFlag(cmd, &o->threads);
  cmd->add_option("-c,--ctx-size", o->ctx, "Context size (default: prompt + max tokens)");
  cmd->add_flag("--ignore-eos", o->ignore_eos,
                "Do not stop at end-of-generation tokens (they are never sampled)");
  cmd->add_flag("--parse-special", o->parse_special, "Recognise special-token text in the prompt");
  cmd->add_flag("--json", o->json, "Print one JSON object instead of streaming text");
  cmd->callback([o, exit_code, p, pt] {
    if (p->count() == 0 && pt->count() == 0) {
      std::cerr << "error: give --prompt TEXT or --prompt-tokens IDS\n";
      *exit_code = 2;
      return;
    }
    ReportError(RunGenerate(*o), exit_code);
  });
}

}  // namespace strata::app
