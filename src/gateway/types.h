// gateway/types: the small vocabulary every part of the gateway shares — request priority (SLA
// tier), the KV tier a replica holds a block in, and why the balancer chose a replica.
//
// Thread contract: values and pure functions only.
// Errors: the parsers return InvalidArgument naming what they accept.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace strata::gateway {

using Clock = std::chrono::steady_clock;

// The SLA tier of a request (SEED-NOTES §2.4: gold < 100 ms, silver < 300 ms, bronze < 500 ms).
enum class Priority : uint8_t { kGold, kSilver, kBronze };
inline constexpr int kNumPriorities = 3;
std::string_view PriorityName(Priority p);  // "gold" | "silver" | "bronze"
// "gold" | "silver" | "bronze" (exact, lower case).
Result<Priority> ParsePriorityName(std::string_view name);
// The replica's integer convention (`strata serve`'s `priority` field): < 0 gold, 0 silver,
// > 0 bronze.
Priority PriorityFromInt(int64_t v);
// What the gateway forwards to a replica for `p`: -1, 0 or 1.
int64_t PriorityToInt(Priority p);

// Where a replica holds a cached KV block: its own pool (the fastest) or a tier below it.
enum class KvTier : uint8_t { kPool, kRam, kDisk, kRedis };
inline constexpr int kNumKvTiers = 4;
std::string_view KvTierName(KvTier t);  // "pool" | "ram" | "disk" | "redis"
Result<KvTier> ParseKvTierName(std::string_view name);

// Why a replica was chosen (the `reason` label of strata_gateway:routing_decisions_total).
enum class RouteReason : uint8_t {
  kAffinity,  // the cheapest replica holds a cached prefix of the request (events or history)
  kLoad,      // chosen on load: no replica holds a prefix, or the one that does costs more
  kFallback,  // no cost could be computed (no metrics yet, or the round-robin/random policies)
  kRetry,     // the retry of a request whose first replica failed before the first byte
};
std::string_view RouteReasonName(RouteReason r);  // "affinity" | "load" | "fallback" | "retry"

}  // namespace strata::gateway
