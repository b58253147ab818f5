// `strata synth`: write a GGUF model with random weights from a preset (+ overrides).
// `strata synth-lora`: write a random LoRA adapter (llama.cpp's GGUF format) for a base model.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <iostream>

#include "app/commands.h"
#include "base/thread_pool.h"
#include "synth/synth.h"
#include "tensor/dtype.h"
#include "tokenizer/tokenizer.h"

namespace strata::app {
namespace {

struct SynthArgs {
  std::string preset = "tiny";
  std::string arch;
  std::string type;
  std::string vocab_from;
  uint64_t seed = 1;
  uint32_t layers = 0, dim = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, ctx = 0;
  double rope_base = 0, rms_eps = 0;
  bool tied = false, untied = false;
  int threads = 0;
  std::string out;
};

int RunSynth(const SynthArgs& a, const CLI::App& cmd) {
  auto fail = [](const Status& s) {
    std::cerr << "strata synth: " << s.ToString() << "\n";
    return 1;
  };
  auto preset = synth::Preset(a.preset);
  if (!preset.ok()) return fail(preset.status());
  synth::SynthConfig c = *preset;
  auto given = [&](const char* flag) { return cmd.count(flag) > 0; };
  if (given("--arch")) {
    auto arch = synth::ParseArch(a.arch);
    if (!arch)
      return fail(Status::InvalidArgument("--arch must be llama or qwen2, not '" + a.arch + "'"));
    // qwen2 always has q/k/v biases; switching to llama drops them.
    if (*arch != c.arch) c.qkv_bias = *arch == synth::Arch::kQwen2;
    c.arch = *arch;
  }
  if (given("--type")) {
    auto ft = synth::ParseFileType(a.type);
    if (!ft)
      return fail(Status::InvalidArgument(
          "--type must be one of f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m q5_k_m, not '" +
          a.type + "'"));
    c.file_type = *ft;
  }
  if (given("--seed")) c.seed = a.seed;
  if (given("--layers")) c.n_layers = a.layers;
  if (given("--dim")) c.dim = a.dim;
  if (given("--heads")) c.n_heads = a.heads;
  if (given("--kv-heads")) c.n_kv_heads = a.kv_heads;
  if (given("--head-dim")) c.head_dim = a.head_dim;
  if (given("--ffn")) c.ffn = a.ffn;
  if (given("--ctx")) c.ctx_len = a.ctx;
  if (given("--rope-base")) c.rope_base = a.rope_base;
  if (given("--rms-eps")) c.rms_eps = a.rms_eps;
  if (a.tied && a.untied) return fail(Status::InvalidArgument("--tied and --untied are exclusive"));
  if (a.tied) c.tied = true;
  if (a.untied) c.tied = false;
  if (Status s = c.Validate(); !s.ok()) return fail(s);

  tokenizer::Vocab vocab;
  if (!a.vocab_from.empty()) {
    auto v = synth::LoadVocab(a.vocab_from);
    if (!v.ok()) return fail(v.status());
    vocab = std::move(v).value();
  } else {
    vocab = tokenizer::BuiltinByteVocab();
  }

  const auto t0 = std::chrono::steady_clock::now();
  ThreadPool pool(a.threads > 0 ? a.threads : DefaultThreadCount());
  std::error_code ec;
  auto parent = std::filesystem::path(a.out).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  auto stats = synth::WriteModel(c, vocab, &pool, a.out);
  if (!stats.ok()) return fail(stats.status());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t bytes = std::filesystem::file_size(a.out, ec);
  std::cout << fmt::format(
      "wrote {}: {} {} layers, dim {}, heads {}/{}, ffn {}, vocab {}, {}{}; {} tensors, {:.1f} M "
      "params, {} bytes ({:.1f} MiB), {:.2f} s\n",
      a.out, synth::ArchName(c.arch), c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.ffn,
      vocab.tokens.size(), synth::FileTypeName(c.file_type), c.tied ? ", tied" : "",
      stats->n_tensors, static_cast<double>(stats->n_params) / 1e6, bytes,
      static_cast<double>(bytes) / (1024.0 * 1024.0), secs);
  return 0;
}

struct SynthLoraArgs {
  synth::SynthLoraOptions options;
  std::string type = "f32";
};

int RunSynthLora(SynthLoraArgs a) {
  auto fail = [](const Status& s) {
    std::cerr << "strata synth-lora: " << s.ToString() << "\n";
    return 1;
  };
  auto type = ParseDType(a.type);
  if (!type)
    return fail(
        Status::InvalidArgument("--type must be f32, f16, bf16 or q8_0, not '" + a.type + "'"));
  a.options.type = *type;
  std::error_code ec;
  auto parent = std::filesystem::path(a.options.out_path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  auto stats = synth::SynthLora(a.options);
  if (!stats.ok()) return fail(stats.status());
  std::cout << fmt::format("wrote {}: LoRA rank {}, alpha {}, {} pairs, {} params, {} bytes ({})\n",
                           a.options.out_path, a.options.rank, a.options.alpha, stats->n_pairs,
                           stats->n_params, std::filesystem::file_size(a.options.out_path, ec),
                           a.type);
  return 0;
}

void RegisterSynthLora(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<SynthLoraArgs>();
  synth::SynthLoraOptions& o = args->options;
  CLI::App* cmd = app.add_subcommand(
      "synth-lora",
      "Write a LoRA adapter with random weights (llama.cpp's GGUF format) for a model");
  cmd->add_option("--base", o.base_path, "the base model (.gguf)")->required();
  cmd->add_option("--rank", o.rank, "rank of every pair")->capture_default_str();
  cmd->add_option("--targets", o.targets, "comma-separated: q,k,v,o,gate,up,down")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "weight seed")->capture_default_str();
  cmd->add_option("--alpha", o.alpha, "adapter.lora.alpha (0: scale = the user's scale)")
      ->capture_default_str();
  cmd->add_option("--type", args->type, "f32 | f16 | bf16 | q8_0 (q8_0 rows of < 32: f16)")
      ->capture_default_str();
  cmd->add_flag("--include-output", o.include_output,
                "also a pair on output.weight (untied models)");
  cmd->add_flag("--include-embd", o.include_embd, "also a pair on token_embd.weight");
  cmd->add_option("--out", o.out_path, "output .gguf path")->required();
  cmd->callback([args, exit_code] { *exit_code = RunSynthLora(*args); });
}

}  // namespace

void RegisterSynth(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<SynthArgs>();
  CLI::App* cmd = app.add_subcommand("synth", "Write a GGUF model with random weights");
  cmd->add_option("--preset", args->preset, "tiny | 135m | llama-3.2-1b | qwen2-0.5b")
      ->capture_default_str();
  cmd->add_option("--arch", args->arch, "llama | qwen2 (overrides the preset)");
  cmd->add_option("--type", args->type,
                  "f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m q5_k_m (default q8_0)");
  cmd->add_option("--vocab-from", args->vocab_from,
                  "vocabulary from a .gguf or a SentencePiece .model (default: built-in bytes)");
  cmd->add_option("--seed", args->seed, "weight seed");
  cmd->add_option("--layers", args->layers);
  cmd->add_option("--dim", args->dim);
  cmd->add_option("--heads", args->heads);
  cmd->add_option("--kv-heads", args->kv_heads);
  cmd->add_option("--head-dim", args->head_dim);
  cmd->add_option("--ffn", args->ffn);
  cmd->add_option("--ctx", args->ctx);
  cmd->add_option("--rope-base", args->rope_base);
  cmd->add_option("--rms-eps", args->rms_eps);
  cmd->add_flag("--tied", args->tied, "share token_embd as the output projection");
  cmd->add_flag("--untied", args->untied, "write a separate output.weight");
  cmd->add_option("--threads", args->threads, "worker threads (default: all cores)");
  cmd->add_option("--out", args->out, "output .gguf path")->required();
  cmd->callback([args, cmd, exit_code] { *exit_code = RunSynth(*args, *cmd); });
  RegisterSynthLora(app, exit_code);
}

}  // namespace strata::app
