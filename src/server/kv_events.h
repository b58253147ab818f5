// GET /v1/kv/events: the replica's KV block events for prefix-affinity routing (a gateway polls
// it; engine/kv/kv_event_log.h has the semantics, src/server/README.md the wire format).
//
//   ?since=<cursor>&max=<n>   both optional; decimal digits only. since: the `cursor` of the last
//                             answer (absent or 0: a snapshot). max: hashes per answer, 1..16384
//                             (default 4096; larger values are capped at 16384).
//
// Thread contract: pure functions over values (the log read happens in the caller).
// Errors: ParseKvEventsQuery → an ApiError (400) naming the parameter: unknown, repeated, empty,
// not a decimal number, out of range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "engine/kv/kv_event_log.h"
#include "http/openai_error.h"

namespace strata::server {

inline constexpr size_t kKvEventsDefaultMax = 4096;
inline constexpr size_t kKvEventsHardMax = 16384;

struct KvEventsQuery {
  uint64_t since = 0;
  size_t max = kKvEventsDefaultMax;
};

// The query string (without '?').
http::ApiResult<KvEventsQuery> ParseKvEventsQuery(std::string_view query);

// Identity of the replica's block keys.
struct KvKeyInfo {
  std::string_view instance;            // KvEventLog::instance()
  int block_size = 0;                   // the engine's KV block size
  std::span<const uint8_t> model_salt;  // the engine's cachekey::ModelSalt bytes
};

// {"instance", "block_size", "model_salt", "cursor", "reset", "events": [{"op", "tier",
// "hashes": [64 hex, ...]}, ...]}, in that order.
nlohmann::ordered_json KvEventsJson(const engine::kv::KvEventPage& page, const KvKeyInfo& info);

// Lower-case hex of bytes.
std::string HexBytes(std::span<const uint8_t> bytes);

}  // namespace strata::server
