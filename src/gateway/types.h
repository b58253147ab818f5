// gateway/types: the small vocabulary every part of the gateway shares — the wire's priority
// classes and KV tiers (protocol/wire.h), and why the balancer chose a replica.
//
// Thread contract: values and pure functions only.
// Errors: the parsers return InvalidArgument naming what they accept.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "protocol/wire.h"

namespace strata::gateway {

using Clock = std::chrono::steady_clock;

// The wire's terms (priority classes, KV tier names) are protocol's; the gateway uses them under
// its own namespace.
using protocol::kNumKvTiers;
using protocol::kNumPriorities;
using protocol::KvTier;
using protocol::KvTierName;
using protocol::ParseKvTierName;
using protocol::ParsePriorityName;
using protocol::Priority;
using protocol::PriorityFromInt;
using protocol::PriorityName;
using protocol::PriorityToInt;

// Why a replica was chosen (the `reason` label of strata_gateway:routing_decisions_total).
enum class RouteReason : uint8_t {
  kAffinity,  // the cheapest replica holds a cached prefix of the request (events or history)
  kLoad,      // chosen on load: no replica holds a prefix, or the one that does costs more
  kFallback,  // no cost could be computed (no metrics yet, or the round-robin/random policies)
  kRetry,     // the retry of a request whose first replica failed before the first byte
};
std::string_view RouteReasonName(RouteReason r);  // "affinity" | "load" | "fallback" | "retry"

}  // namespace strata::gateway
