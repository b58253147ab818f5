// ReplicaConfig: everything one replica (`strata serve`) is configured with, as one tree with one
// set of defaults, and its YAML codec.
//
//   ReplicaConfig
//     model:   ModelFileConfig          which GGUF, the served name, the chat template
//     server:  ServerConfig             HTTP: host, port, API keys, I/O threads, timeouts, limits
//     engine:  serving::ServingConfig   what ServingEngine::Create reads
//                                       (engine/serving/serving_config.h)
//     tracing: TracingConfig            the replica's OpenTelemetry spans
//
// The YAML keys are the C++ member names (examples/replica.yaml documents every key and its
// default). `strata serve` fills the tree from defaults, then `--config FILE`, then the flags the
// user passed; `strata bench offline` fills the engine part the same way. The control plane writes
// these files, so decoding is strict (yamlcfg/): an unknown or duplicate key, a wrong type or a
// value out of range is an InvalidArgument naming the key's full path
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
#include "engine/serving/serving_config.h"

namespace strata::replica {

// model:
struct ModelFileConfig {
  std::string path;                // GGUF file; "" : the bundled model
  std::string served_model_name;   // the id clients use; "" : the file's stem
  std::string chat_template_file;  // Jinja template replacing the GGUF's; "" : the GGUF's
  // A built-in template replacing the GGUF's, by name (tokenizer/chat/builtin_templates.h:
  // chatml, llama3, mistral, gemma, phi3, deepseek-r1); "" : none. Not with chat_template_file.
  std::string chat_template;
};

// server: (mirrors server::HttpServerOptions and the API's limits; Replica maps it)
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

// tracing: (the replica's OpenTelemetry spans; Replica starts a trace::Tracer from it)
struct TracingConfig {
  std::string otlp_endpoint;  // OTLP/HTTP base ("http://127.0.0.1:4318"); "": no tracing
  double sample_ratio = 1.0;  // head sampling of requests without a traceparent, 0..1
  std::string service_name = "strata-serve";  // resource attribute service.name
};

struct ReplicaConfig {
  ModelFileConfig model;
  ServerConfig server;
  engine::serving::ServingConfig engine;
  TracingConfig tracing;
  Status Validate() const;
};

// Defaults overlaid with the keys `yaml_text` sets (an empty document is the defaults), validated.
Result<ReplicaConfig> ParseReplicaConfigYaml(std::string_view yaml_text);
// The same from a file; errors are prefixed with the path.
Result<ReplicaConfig> LoadReplicaConfigFile(const std::string& path);
// Every key of `config` as YAML (strings quoted, sizes exact, doubles shortest round trip).
std::string ReplicaConfigToYaml(const ReplicaConfig& config);

// Every leaf key path of the tree ("engine.scheduler.max_num_seqs", "engine.kv_tiers.ram.capacity",
// ...), in print order; for the docs test that checks examples/replica.yaml mentions each.
std::vector<std::string> ReplicaConfigKeyPaths();

}  // namespace strata::replica
