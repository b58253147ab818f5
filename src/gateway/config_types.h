// gateway/config_types: the parts of the gateway's configuration the balancing part reads (a pool's
// members, health checking, the balancer's cost parameters). Part cfg's config.h owns the whole
// GatewayConfig; these structs are the same as there (docs: /work/gw-design.md) and are to be
// merged into config.h, which then includes or replaces this file.
//
// Thread contract: plain values.
// Errors: none here (validation is config.h's).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gateway/types.h"

namespace strata::gateway {

struct DnsConfig {
  std::string name;  // resolved every `interval`; one replica per address
  uint16_t port = 8080;
  std::chrono::milliseconds interval{5000};
};

struct PoolConfig {
  std::string name;
  std::vector<std::string> replicas;  // "http://host:port" (validated with http::ParseUrl)
  std::optional<DnsConfig> dns;
  std::string tokenizer;  // GGUF path ("" = estimate from bytes)
  std::map<std::string, std::string> labels;
  std::string api_key;    // sent upstream as Bearer ("" = none)
  int max_in_flight = 0;  // pool capacity bound in requests (0 = unbounded)
};

struct HealthConfig {
  std::chrono::milliseconds interval{500}, timeout{1000};
  int eject_after_failures = 3;
  std::chrono::milliseconds ejection_base{1000}, ejection_max{30000};
};

enum class BalancePolicy { kCost, kRoundRobin, kRandom, kLeastLoaded };

struct BalancerConfig {
  BalancePolicy policy = BalancePolicy::kCost;
  std::chrono::milliseconds metrics_interval{500}, kv_events_interval{250};
  std::chrono::seconds history_ttl{120};
  double default_prefill_tokens_per_s = 2000, default_decode_step_s = 0.02;
  // Transfer time of one block found in that tier (indexed by KvTier): pool, ram, disk, redis.
  double tier_seconds_per_block[kNumKvTiers] = {0, 1e-4, 1e-3, 3e-3};
};

}  // namespace strata::gateway
