// ServingConfig: the `engine:` section of a replica's configuration (replica/replica_config.h
// holds the whole tree): what ServingEngine::Create reads.
//
//   engine:  ServingConfig
//     threads, max_model_len, kv_tier_prefetch_timeout_s
//     kv_cache:  KvCacheConfig            pool budget, KV dtype, block size, prefix cache
//     scheduler: sched::SchedulerConfig   (its max_model_len and max_loras are derived)
//     lora:      LoraConfig               the LoRA active set and adapter limits
//     kv_tiers:  kvtier::TieredKvConfig   ram / disk / redis tiers (each optional), codec, queue
//
// The section's YAML table is serving_config_keys.h (decoded strictly, yamlcfg/); the older
// `--kv-tier-config` file (the kv_tiers section as a document of its own) is read here.
//
// Thread contract: plain values; the functions are pure and thread-safe.
// Errors: Status values only (yaml-cpp's exceptions are caught inside).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/kv/kv_storage.h"
#include "engine/kvtier/tiered_cache.h"
#include "engine/sched/scheduler.h"

namespace strata::engine::serving {

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

// The `engine.kv_tiers` section alone as a document of its own (the older `--kv-tier-config`
// file): keys and errors relative to the section ("ram.capacity: ..."), validated.
Result<kvtier::TieredKvConfig> ParseKvTiersYaml(std::string_view yaml_text);
Result<kvtier::TieredKvConfig> LoadKvTiersFile(const std::string& path);

}  // namespace strata::engine::serving
