// protocol/wire: the terms of Strata's wire, defined once for every process that speaks it — the
// replica (`strata serve`), the gateway, `strata bench` and the control plane.
//
//   Priority  the SLA class of a request (SEED-NOTES §2.4: gold < 100 ms, silver < 300 ms,
//             bronze < 500 ms). Lower is served first. On the wire a name ("gold" | "silver" |
//             "bronze", exact, lower case) or vLLM's integer convention (< 0 gold, 0 silver,
//             > 0 bronze; what the gateway forwards is -1, 0 or 1).
//   KvTier    where a replica holds a cached KV block: its own pool (the fastest) or a tier below
//             it ("pool" | "ram" | "disk" | "redis"; the `tier` of /v1/kv/events).
//   headers   every `x-strata-*` header name (kHeader*), lower case as HTTP/1.1 compares them.
//
// Thread contract: values and pure functions only. Errors: the parsers return InvalidArgument
// with a message that lists what they accept (no field prefix: the caller names the field).
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace strata::protocol {

enum class Priority : uint8_t { kGold = 0, kSilver = 1, kBronze = 2 };
inline constexpr int kNumPriorities = 3;
inline constexpr Priority kDefaultPriority = Priority::kSilver;
std::string_view PriorityName(Priority p);  // "gold" | "silver" | "bronze"
// "gold" | "silver" | "bronze" (exact, lower case).
Result<Priority> ParsePriorityName(std::string_view name);
// < 0 gold, 0 silver, > 0 bronze.
Priority PriorityFromInt(int64_t v);
// What the gateway forwards to a replica for `p`: -1, 0 or 1.
int64_t PriorityToInt(Priority p);

enum class KvTier : uint8_t { kPool, kRam, kDisk, kRedis };
inline constexpr int kNumKvTiers = 4;
std::string_view KvTierName(KvTier t);  // "pool" | "ram" | "disk" | "redis"
Result<KvTier> ParseKvTierName(std::string_view name);

// Request headers a client (or the gateway) sends to a replica.
inline constexpr std::string_view kHeaderTier = "x-strata-tier";      // a priority name
inline constexpr std::string_view kHeaderTenant = "x-strata-tenant";  // quota + cache owner
inline constexpr std::string_view kHeaderDeadlineMs = "x-strata-deadline-ms";  // > 0, ms
inline constexpr std::string_view kHeaderTiming = "x-strata-timing";           // "1": timing header
// Response headers: the replica's timing breakdown (request: kHeaderTiming = "1"), and what the
// gateway decided (route rule, split arm, pool, replica URL, cascade stage, and the answering
// pool's model version: its `version` label, which the control plane sets).
inline constexpr std::string_view kHeaderRoute = "x-strata-route";
inline constexpr std::string_view kHeaderArm = "x-strata-arm";
inline constexpr std::string_view kHeaderPool = "x-strata-pool";
inline constexpr std::string_view kHeaderReplica = "x-strata-replica";
inline constexpr std::string_view kHeaderCascade = "x-strata-cascade";
inline constexpr std::string_view kHeaderModelVersion = "x-strata-model-version";

// Tenant names (kHeaderTenant): at most this many bytes of printable ASCII without spaces.
inline constexpr size_t kMaxTenantBytes = 256;
// Deadlines (kHeaderDeadlineMs, the body's `deadline_ms`): 1 ms to 2^40 ms.
inline constexpr int64_t kMaxDeadlineMs = int64_t{1} << 40;

}  // namespace strata::protocol
