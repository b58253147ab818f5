// ReplicaConfig: everything one replica (`strata serve`) is configured with, as one tree with one
// set of defaults, and its YAML codec.
//
//   ReplicaConfig
//     model:   ModelFileConfig      which GGUF, the served name, the chat template
//     server:  ServerConfig         HTTP: host, port, API keys, I/O threads, timeouts, limits
//     engine:  ServingConfig        what ServingEngine::Create reads
//       threads, max_model_len, kv_tier_prefetch_timeout_s
//       kv_cache:  KvCacheConfig            pool budget, KV dtype, block size, prefix cache
//       scheduler: sched::SchedulerConfig   (its max_model_len and max_loras are derived)
//       lora:      LoraConfig               the LoRA active set and adapter limits
//       kv_tiers:  kvtier::TieredKvConfig   ram / disk / redis tiers (each optional), codec, queue
//
// The YAML keys are the C++ member names (examples/replica.yaml documents every key and its
// default). `strata serve` fills the tree from defaults, then `--config FILE`, then the flags the
// user passed; `strata bench offline` fills the engine part the same way. The control plane writes
// these files, so decoding is strict (yamlcfg/yaml_decode.h): an unknown or duplicate key, a wrong
// type or a value out of range is an InvalidArgument naming the key's full path
// ("engine.scheduler.max_num_seq: unknown key (did you mean max_num_seqs?)"). Input is bounded
// (64 KiB, nesting depth as yaml-cpp's guard); nothing is allocated in proportion to a value read.
// ReplicaConfigToYaml prints every key; parsing its output gives the same config back.
//
// Thread contract: plain values; the functions are pure and thread-safe.
// Errors: Status values only (yaml-cpp's exceptions are caught inside).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/kv/kv_storage.h"
#include "engine/kvtier/tiered_cache.h"
#include "engine/sched/scheduler.h"

namespace strata::engine::serving {

// model:
struct ModelFileConfig {
  std::string path;                // GGUF file; "" : the bundled model
  std::string served_model_name;   // the id clients use; "" : the file's stem
  std::string chat_template_file;  // Jinja template replacing the GGUF's; "" : the GGUF's
  // A built-in template replacing the GGUF's, by name (tokenizer/chat/builtin_templates.h:
  // chatml, llama3, mistral, gemma, phi3, deepseek-r1); "" : none. Not with chat_template_file.
  std::string chat_template;
};

// server: (mirrors server::HttpServerOptions and the API's limits; cmd_serve maps it)
struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: any free port (the bound one is printed)
  std::vector<std::string> api_keys;  // accepted bearer keys; empty (and no file): no auth
  std::string api_key_file;           // one key per line, '#' comments
  int io_threads = 2;
  uint64_t max_body_bytes = 4u << 20;    // 413 above
  uint32_t max_header_bytes = 16 << 10;  // 431 above
  int max_connections = 4096;            // further connections are closed at once
  double idle_timeout_s = 60;            // keep-alive: waiting for a request to start
  double request_timeout_s = 30;         // reading one request after it started
  double shutdown_timeout_s = 30;        // in-flight requests get this long on SIGTERM
  int max_tokens_cap = 4096;             // largest accepted max_tokens
  int retry_after_s = 1;                 // Retry-After on 429
  std::string metrics_compat;            // "vllm": /metrics also under vLLM's names; "": none
};

// tracing: (the replica's OpenTelemetry spans; cmd_serve starts a trace::Tracer from it)
struct TracingConfig {
  std::string otlp_endpoint;  // OTLP/HTTP base ("http://127.0.0.1:4318"); "": no tracing
  double sample_ratio = 1.0;  // head sampling of requests without a traceparent, 0..1
  std::string service_name = "strata-serve";  // resource attribute service.name
};

// engine.kv_cache:
struct KvCacheConfig {
  std::string memory = "1GiB";  // size ("4GiB") or fraction of RAM ("0.25", "25%")
  kv::KvDType dtype = kv::KvDType::kF16;
  int block_size = 16;  // tokens per block
  bool prefix_cache = true;
};

// An adapter registered at start-up (`--lora name=path`; YAML engine.lora.adapters).
struct LoraAdapterConfig {
  std::string name, path;
  float scale = 1.0f;
};
// engine.lora: (the adapters themselves are registered by the server: `--lora name=path`, the
// load/unload routes)
struct LoraConfig {
  int max_loras = 1;       // adapters active at once, so in one step (vLLM's --max-loras); 1..64
  int max_lora_rank = 16;  // highest adapter rank accepted at load (vLLM's --max-lora-rank)
  // Adapters kept in host memory by the registry (vLLM's --max-cpu-loras); 0: unbounded; else
  // >= max_loras.
  int max_cpu_loras = 0;
  std::vector<LoraAdapterConfig> adapters;  // registered at start-up by the server
};

// engine:
struct ServingConfig {
  int threads = 0;        // compute threads; 0: all cores
  int max_model_len = 0;  // positions per sequence; 0: the model's context length capped at 8192
  KvCacheConfig kv_cache;
  // scheduler.max_model_len and .max_loras are set by ServingEngine (from max_model_len, lora)
  sched::SchedulerConfig scheduler;
  LoraConfig lora;
  kvtier::TieredKvConfig kv_tiers;          // KV tiers below the pool; all optional (engine/kvtier)
  double kv_tier_prefetch_timeout_s = 1.0;  // longest a request waits for its prefetch
  // Every key in range, the memory size parses, tiers valid and with the prefix cache on. Errors
  // name the key path and its flag ("engine.scheduler.max_num_seqs (--max-num-seqs): ...").
  Status Validate() const;
};

struct ReplicaConfig {
  ModelFileConfig model;
  ServerConfig server;
  ServingConfig engine;
  TracingConfig tracing;
  Status Validate() const;
};

// Defaults overlaid with the keys `yaml_text` sets (an empty document is the defaults), validated.
Result<ReplicaConfig> ParseReplicaConfigYaml(std::string_view yaml_text);
// The same from a file; errors are prefixed with the path.
Result<ReplicaConfig> LoadReplicaConfigFile(const std::string& path);
// Every key of `config` as YAML (strings quoted, sizes exact, doubles shortest round trip).
std::string ReplicaConfigToYaml(const ReplicaConfig& config);

// The `engine.kv_tiers` section alone as a document of its own (the older `--kv-tier-config`
// file): keys and errors relative to the section ("ram.capacity: ..."), validated.
Result<kvtier::TieredKvConfig> ParseKvTiersYaml(std::string_view yaml_text);
Result<kvtier::TieredKvConfig> LoadKvTiersFile(const std::string& path);

// Every leaf key path of the tree ("engine.scheduler.max_num_seqs", "engine.kv_tiers.ram.capacity",
// ...), in print order; for the docs test that checks examples/replica.yaml mentions each.
std::vector<std::string> ReplicaConfigKeyPaths();

}  // namespace strata::engine::serving
