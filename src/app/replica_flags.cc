#include "app/replica_flags.h"

#include "base/memory_size.h"
#include "tokenizer/chat/builtin_templates.h"

namespace strata::app {
namespace {

using engine::kvtier::Compression;
using replica::ReplicaConfig;

Status FlagError(std::string_view flag, std::string_view what) {
  return Status::InvalidArgument(std::string(flag) + ": " + std::string(what));
}

Result<uint64_t> Size(std::string_view flag, const std::string& text) {
  auto bytes = ParseMemorySize(text);
  if (!bytes.ok()) return FlagError(flag, bytes.status().message());
  return *bytes;
}

}  // namespace

template <typename V, typename Get>
void ReplicaFlags::Bind(CLI::App* cmd, const std::string& names, const std::string& help, Get get) {
  V& staged = get(staged_);
  CLI::Option* option = nullptr;
  if constexpr (std::is_same_v<V, bool>) {
    option = cmd->add_flag(names, staged, help);
  } else {
    option = cmd->add_option(names, staged, help)->capture_default_str();
  }
  rows_.push_back({option, [get, &staged](ReplicaConfig* c) {
                     get(*c) = staged;
                     return Status::Ok();
                   }});
}

void ReplicaFlags::Text(CLI::App* cmd, const std::string& names, const std::string& help,
                        std::function<Status(const std::string&, ReplicaConfig*)> parse) {
  std::string& value = texts_.emplace_back();
  CLI::Option* option = cmd->add_option(names, value, help);
  rows_.push_back({option, [parse, &value](ReplicaConfig* c) { return parse(value, c); }});
}

void ReplicaFlags::Ttl(CLI::App* cmd, const std::string& names, const std::string& help,
                       engine::kvtier::TierLimits* (*limits)(ReplicaConfig*)) {
  double& value = seconds_.emplace_back();
  CLI::Option* option = cmd->add_option(names, value, help);
  // As before the config tree: a negative value is "not set".
  rows_.push_back({option, [limits, &value](ReplicaConfig* c) {
                     engine::kvtier::TierLimits* l = limits(c);
                     if (l != nullptr && value >= 0) l->ttl_s = value;
                     return Status::Ok();
                   }});
}

void ReplicaFlags::Register(CLI::App* cmd, unsigned scopes) {
  cmd->add_option("--config", config_file_,
                  "replica config (YAML, see examples/replica.yaml); flags given override it");
  AddModel(cmd, scopes);
  if (scopes & kServer) AddServer(cmd);
  if (scopes & kEngine) AddEngine(cmd);
  if (scopes & kEngine) AddLora(cmd, (scopes & kServer) != 0);
}

void ReplicaFlags::AddModel(CLI::App* cmd, unsigned scopes) {
  if (scopes & (kModelPath | kModel)) {
    Bind<std::string>(
        cmd, "-m,--model", "GGUF model (default: the bundled model)",
        [](ReplicaConfig & c) -> auto& { return c.model.path; });
  }
  if (!(scopes & kModel)) return;
  Bind<std::string>(
      cmd, "--served-model-name", "model id clients use (default: file stem)",
      [](ReplicaConfig & c) -> auto& { return c.model.served_model_name; });
  Bind<std::string>(
      cmd, "--chat-template-file", "Jinja chat template overriding the GGUF's",
      [](ReplicaConfig & c) -> auto& { return c.model.chat_template_file; });
  const std::string builtin_help =
      "built-in chat template overriding the GGUF's: " + tokenizer::chat::BuiltinTemplateNames();
  Bind<std::string>(
      cmd, "--chat-template", builtin_help,
      [](ReplicaConfig & c) -> auto& { return c.model.chat_template; });
}

void ReplicaFlags::AddServer(CLI::App* cmd) {
  Bind<std::string>(
      cmd, "--host", "address to bind", [](ReplicaConfig & c) -> auto& { return c.server.host; });
  Bind<int>(
      cmd, "--port", "port (0: any free port; the bound port is printed)",
      [](ReplicaConfig & c) -> auto& { return c.server.port; });
  Text(cmd, "--api-key", "require 'Authorization: Bearer KEY' (all routes but /health, /ready)",
       [](const std::string& key, ReplicaConfig* c) {
         c->server.api_keys = {key};
         return Status::Ok();
       });
  Bind<std::string>(
      cmd, "--api-key-file", "file with one accepted key per line",
      [](ReplicaConfig & c) -> auto& { return c.server.api_key_file; });
  Bind<int>(
      cmd, "--io-threads", "HTTP I/O threads",
      [](ReplicaConfig & c) -> auto& { return c.server.io_threads; });
  Bind<uint64_t>(
      cmd, "--max-body-bytes", "request body limit (413 above)",
      [](ReplicaConfig & c) -> auto& { return c.server.max_body_bytes; });
  Bind<int>(
      cmd, "--max-tokens-cap", "largest accepted max_tokens",
      [](ReplicaConfig & c) -> auto& { return c.server.max_tokens_cap; });
  Bind<double>(
      cmd, "--shutdown-timeout", "seconds in-flight requests get to finish on SIGTERM",
      [](ReplicaConfig & c) -> auto& { return c.server.shutdown_timeout_s; });
  Bind<double>(
      cmd, "--idle-timeout", "seconds an idle keep-alive connection is kept",
      [](ReplicaConfig & c) -> auto& { return c.server.idle_timeout_s; });
  Bind<double>(
      cmd, "--request-timeout", "seconds a client gets to send one request",
      [](ReplicaConfig & c) -> auto& { return c.server.request_timeout_s; });
  Bind<std::string>(
      cmd, "--metrics-compat",
      "'vllm': /metrics also exports the families under vLLM's names and labels",
      [](ReplicaConfig & c) -> auto& { return c.server.metrics_compat; });
  Bind<std::string>(
      cmd, "--otlp-endpoint",
      "export OpenTelemetry spans over OTLP/HTTP JSON to this base URL (http://host:4318); "
      "absent: no tracing",
      [](ReplicaConfig & c) -> auto& { return c.tracing.otlp_endpoint; });
  Bind<double>(
      cmd, "--otlp-sample-ratio",
      "fraction of requests without a traceparent that are traced, 0..1 (a traceparent's sampled "
      "flag decides for the others)",
      [](ReplicaConfig & c) -> auto& { return c.tracing.sample_ratio; });
  Bind<std::string>(
      cmd, "--otlp-service-name", "service.name of the exported spans",
      [](ReplicaConfig & c) -> auto& { return c.tracing.service_name; });
}

void ReplicaFlags::AddEngine(CLI::App* cmd) {
  Bind<int>(
      cmd, "-t,--threads", "compute threads (0: all cores)",
      [](ReplicaConfig & c) -> auto& { return c.engine.threads; });
  Bind<int>(
      cmd, "--max-model-len", "context size per sequence (0: the model's, at most 8192)",
      [](ReplicaConfig & c) -> auto& { return c.engine.max_model_len; });
  Bind<std::string>(
      cmd, "--kv-cache-memory", "KV cache budget: 512MiB, 2GiB, 0.25 (of RAM), 10%",
      [](ReplicaConfig & c) -> auto& { return c.engine.kv_cache.memory; });
  Text(cmd, "--kv-dtype,--kv-cache-dtype", "KV cache type: f16 (default), f32, q8_0",
       [](const std::string& text, ReplicaConfig* c) {
         ASSIGN_OR_RETURN(c->engine.kv_cache.dtype, engine::kv::ParseKvDType(text));
         return Status::Ok();
       });
  Bind<int>(
      cmd, "--block-size", "tokens per KV block",
      [](ReplicaConfig & c) -> auto& { return c.engine.kv_cache.block_size; });
  // "!": the flag stores false.
  Bind<bool>(
      cmd, "!--no-prefix-cache", "disable prefix caching",
      [](ReplicaConfig & c) -> auto& { return c.engine.kv_cache.prefix_cache; });
  Bind<int>(
      cmd, "--max-num-seqs", "sequences running at once",
      [](ReplicaConfig & c) -> auto& { return c.engine.scheduler.max_num_seqs; });
  Bind<int>(
      cmd, "--max-batched-tokens", "tokens per engine step",
      [](ReplicaConfig & c) -> auto& { return c.engine.scheduler.max_batched_tokens; });
  Bind<int>(
      cmd, "--max-prefill-tokens-with-decodes",
      "prompt tokens per step while sequences are decoding (bounds their inter-token stall; 0: no "
      "cap)",
      [](ReplicaConfig & c) -> auto& {
        return c.engine.scheduler.max_prefill_tokens_with_decodes;
      });
  Bind<int>(
      cmd, "--max-queued-requests", "admission bound: more waiting requests get 429",
      [](ReplicaConfig & c) -> auto& { return c.engine.scheduler.max_queued_requests; });
  AddTiers(cmd);
}

// LoRA adapters: the engine.lora limits, and with a server --lora name=path (repeatable; added to
// engine.lora.adapters of --config: the server registers them).
void ReplicaFlags::AddLora(CLI::App* cmd, bool server) {
  Bind<int>(
      cmd, "--max-loras", "distinct LoRA adapters in one engine step (the active set)",
      [](ReplicaConfig & c) -> auto& { return c.engine.lora.max_loras; });
  Bind<int>(
      cmd, "--max-lora-rank", "largest LoRA rank accepted (an adapter of higher rank is refused)",
      [](ReplicaConfig & c) -> auto& { return c.engine.lora.max_lora_rank; });
  Bind<int>(
      cmd, "--max-cpu-loras", "loaded LoRA adapters kept in host memory (0: no bound)",
      [](ReplicaConfig & c) -> auto& { return c.engine.lora.max_cpu_loras; });
  if (!server) return;
  CLI::Option* option = cmd->add_option(
      "--lora", lora_specs_,
      "LoRA adapter (llama.cpp GGUF) served under NAME: --lora NAME=PATH, repeatable; requests "
      "name it in `model` or `lora`");
  rows_.push_back({option, [this](ReplicaConfig* c) {
                     for (const std::string& spec : lora_specs_) {
                       const size_t eq = spec.find('=');
                       if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
                         return FlagError("--lora", "expected NAME=PATH, got '" + spec + "'");
                       c->engine.lora.adapters.push_back(
                           {.name = spec.substr(0, eq), .path = spec.substr(eq + 1)});
                     }
                     return Status::Ok();
                   }});
}

// The KV-tier shortcuts; they edit engine.kv_tiers after the files.
void ReplicaFlags::AddTiers(CLI::App* cmd) {
  cmd->add_option("--kv-tier-config", kv_tier_config_file_,
                  "YAML file of the engine.kv_tiers section alone (flags below override it)");
  auto tiers = [](ReplicaConfig * c) -> auto& { return c->engine.kv_tiers; };
  Text(cmd, "--kv-tier-ram", "host-RAM KV tier (L2) capacity, e.g. 2GiB",
       [tiers](const std::string& text, ReplicaConfig* c) {
         ASSIGN_OR_RETURN(uint64_t bytes, Size("--kv-tier-ram", text));
         auto& ram = tiers(c).ram;
         if (!ram) ram.emplace();
         ram->limits.capacity_bytes = bytes;
         return Status::Ok();
       });
  Ttl(cmd, "--kv-tier-ram-ttl", "seconds a RAM-tier entry lives (0: no expiry)",
      [](ReplicaConfig* c) -> engine::kvtier::TierLimits* {
        auto& t = c->engine.kv_tiers.ram;
        return t ? &t->limits : nullptr;
      });
  Text(cmd, "--kv-tier-disk", "directory of the disk KV tier (L3; survives restarts)",
       [tiers](const std::string& dir, ReplicaConfig* c) {
         auto& disk = tiers(c).disk;
         if (!disk) disk.emplace();
         disk->dir = dir;
         if (disk->limits.capacity_bytes == 0) disk->limits.capacity_bytes = uint64_t{4} << 30;
         return Status::Ok();
       });
  Text(cmd, "--kv-tier-disk-size", "disk KV tier capacity (default 4GiB)",
       [tiers](const std::string& text, ReplicaConfig* c) {
         auto& disk = tiers(c).disk;
         if (!disk) return Status::InvalidArgument("--kv-tier-disk-size needs --kv-tier-disk DIR");
         ASSIGN_OR_RETURN(disk->limits.capacity_bytes, Size("--kv-tier-disk-size", text));
         return Status::Ok();
       });
  Ttl(cmd, "--kv-tier-disk-ttl", "seconds a disk-tier entry lives (0: no expiry)",
      [](ReplicaConfig* c) -> engine::kvtier::TierLimits* {
        auto& t = c->engine.kv_tiers.disk;
        return t ? &t->limits : nullptr;
      });
  Text(cmd, "--kv-tier-redis", "Redis KV tier (L4, shared by replicas): redis://host:port[/db]",
       [tiers](const std::string& url, ReplicaConfig* c) {
         auto& redis = tiers(c).redis;
         if (!redis) redis.emplace();
         redis->url = url;
         return Status::Ok();
       });
  Ttl(cmd, "--kv-tier-redis-ttl", "seconds a Redis-tier entry lives (0: no expiry)",
      [](ReplicaConfig* c) -> engine::kvtier::TierLimits* {
        auto& t = c->engine.kv_tiers.redis;
        return t ? &t->limits : nullptr;
      });
  Text(
      cmd, "--kv-tier-redis-write-through",
      "on (default): every computed block is written to Redis; off: this replica only reads Redis",
      [tiers](const std::string& text, ReplicaConfig* c) {
        auto& redis = tiers(c).redis;
        if (!redis)
          return Status::InvalidArgument("--kv-tier-redis-write-through needs --kv-tier-redis URL");
        if (text != "on" && text != "off")
          return Status::InvalidArgument("--kv-tier-redis-write-through must be on or off");
        redis->write_through = text == "on";
        return Status::Ok();
      });
  Text(
      cmd, "--kv-tier-compression", "none (default), lz4 or zstd",
      [tiers](const std::string& text, ReplicaConfig* c) {
        static constexpr std::pair<std::string_view, Compression> kNames[] = {
            {"none", Compression::kNone}, {"lz4", Compression::kLz4}, {"zstd", Compression::kZstd}};
        for (const auto& [name, value] : kNames) {
          if (text == name) {
            tiers(c).compression = value;
            return Status::Ok();
          }
        }
        return Status::InvalidArgument("--kv-tier-compression must be none, lz4 or zstd");
      });
  Bind<double>(
      cmd, "--kv-tier-prefetch-timeout",
      "seconds a request waits for its blocks from the tiers before computing them",
      [](ReplicaConfig & c) -> auto& { return c.engine.kv_tier_prefetch_timeout_s; });
}

Result<ReplicaConfig> ReplicaFlags::Resolve() const {
  ReplicaConfig c;
  if (!config_file_.empty()) {
    auto loaded = replica::LoadReplicaConfigFile(config_file_);
    if (!loaded.ok()) return loaded.status().WithContext("--config");
    c = std::move(loaded).value();
  }
  if (!kv_tier_config_file_.empty()) {
    ASSIGN_OR_RETURN(c.engine.kv_tiers, engine::serving::LoadKvTiersFile(kv_tier_config_file_));
  }
  for (const Row& row : rows_) {
    if (row.option->count() > 0) RETURN_IF_ERROR(row.apply(&c));
  }
  RETURN_IF_ERROR(c.Validate());
  return c;
}

bool ReplicaFlags::Passed(std::string_view flag) const {
  for (const Row& row : rows_) {
    if (row.option->count() > 0 && row.option->check_name(std::string(flag))) return true;
  }
  return false;
}

}  // namespace strata::app
