// gateway/balancer: picks the replica of a pool for one request — a pure, deterministic function
// of (request facts, a snapshot of the pool's replicas, what each holds of the request's prefix).
// No I/O, no clock: ReplicaSet gathers the state (replica_set.h) and calls it.
//
// Policies: kCost (below), kRoundRobin (rotating over the eligible replicas in URL order),
// kRandom (uniform, from a seeded generator: the same seed gives the same sequence), kLeastLoaded
// (fewest requests: waiting + running + sent since the last poll, or in_flight without metrics).
//
// The cost, in predicted seconds until this request's first token, of each eligible replica:
//   R  = metrics.prefill_tokens_per_s if > 0, else default_prefill_tokens_per_s  (tokens/s)
//   W  = mean_prefill_tokens if > 0, else the request's prompt_tokens
//        (the mean prefill work of one request queued there: an average over what we sent)
//   with metrics (metrics.valid):
//     queued_tokens = metrics.waiting × W + sent_since_poll_tokens
//     active        = metrics.running + sent_since_poll_requests
//   without metrics:
//     queued_tokens = in_flight × W          active = in_flight
//   cached    = min(prompt_tokens, match.blocks × block_size)
//   queue_s   = queued_tokens / R                         (work ahead of it in the queue)
//   prefill_s = (prompt_tokens − cached) / R              (its own uncached prompt)
//   tier_s    = Σ_t match.by_tier[t] × tier_seconds_per_block[t]   (leading blocks that must be
//               loaded from a slower tier; the pool's price is 0 by default)
//   decode_s  = active × default_decode_step_s × min(1, max_tokens / kDecodeHorizonTokens)
//               (max_tokens ≤ 0 counts as the horizon: each decode running there shares every
//               step with this request, and this request slows theirs, for as long as they
//               overlap — a short generation overlaps proportionally less)
//   hot_s     = max(0, recent_share × N − kHotShare) × kHotWeight × prompt_tokens / R
//               (N = eligible replicas; recent_share = this replica's part of the pool's recent
//               picks, an EWMA over the last ~kShareWindow picks. A replica taking more than its
//               fair share is priced up: at 1.25× its share by one full prefill of the prompt, so
//               a prefix every request shares — one system prompt — is warmed on other replicas
//               instead of pinning all traffic to the first, even when that one is not yet
//               overloaded; at or below the fair share the term is 0)
//   lora_s    = balancer.lora_load_s when the request names a LoRA adapter that the replica has
//               registered but not in its engine's active set (strata:lora_adapter_active 0),
//               else 0 (active there, or the replica publishes no adapter list)
//   cost_s    = queue_s + prefill_s + tier_s + decode_s + hot_s + lora_s
// Adapters (every policy): when some candidate publishes an adapter list containing the request's
// adapter, the candidates whose published list lacks it are skipped (they would answer 404);
// replicas that publish no list stay candidates, and when no replica has the adapter nothing is
// skipped.
// sent_since_poll_* are the gateway's own sends since the replica's last metrics poll, so two
// requests in one metrics window see each other; sent_since_poll_tokens counts the prefill tokens
// (uncached, as predicted at the pick) of those requests.
// The lowest cost wins; costs within kCostTieSeconds are ties, broken by fewest in_flight, then by
// a rotating counter over the tied replicas (never always the first).
// Reasons: kAffinity when the winner holds a cached prefix of the request; otherwise kLoad when it
// has metrics, kFallback when it has none; kRetry when the request excludes replicas already
// tried; kFallback for round-robin/random, kLoad for least-loaded.
//
// Thread contract: Balancer is NOT thread-safe (rotation counter and generator); ReplicaSet calls
// it under its mutex. Price() is a pure function.
// Errors: Choose returns Unavailable when there is no eligible candidate.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "cachekey/block_hash.h"
#include "gateway/config.h"
#include "gateway/prefix_index.h"
#include "gateway/types.h"

namespace strata::gateway {

inline constexpr double kDecodeHorizonTokens = 128;
inline constexpr double kCostTieSeconds = 1e-9;

// From the replica's /metrics (strata:num_requests_waiting, strata:num_requests_running,
// strata:kv_cache_usage_perc, the rate of strata:prompt_tokens_total while it had a queue, the
// LoRA adapters of strata:lora_adapter_active).
struct ReplicaMetrics {
  bool valid = false;
  double waiting = 0, running = 0, kv_usage = 0;
  double prefill_tokens_per_s = 0;  // 0 = not measured yet
  // LoRA: whether the replica publishes its adapters (strata:lora_requests_info or
  // strata:lora_adapter_active present), the registered ones and those in its active set (sorted).
  bool lora_published = false;
  std::vector<std::string> lora_registered, lora_active;
  // (name, content digest) of each registered adapter that published a `digest` label, sorted by
  // name: the replica salts an adapter's prefix-cache blocks with its digest, so the gateway's
  // block keys for that adapter's requests must too.
  std::vector<std::pair<std::string, std::string>> lora_digests;
  Clock::time_point at{};
};

// A snapshot of one replica that the balancer prices.
struct ReplicaView {
  std::string url;
  bool eligible = false;  // healthy, not ejected, not draining
  ReplicaMetrics metrics;
  int64_t in_flight = 0;  // the gateway's own: requests it sent that have not finished
  int64_t sent_since_poll_tokens = 0, sent_since_poll_requests = 0;  // corrects stale metrics
  std::vector<uint8_t> model_salt;
  int block_size = 0;
  bool publishes_events = false;
  // Added by part bal:
  double mean_prefill_tokens = 0;  // EWMA of the uncached tokens of the requests sent there
  bool healthy = false, draining = false, ejected = false;
  int consecutive_failures = 0;
  int64_t ejections = 0;      // times ejected (passive health), since it joined
  double recent_share = 0;    // its part of the pool's recent picks (EWMA; 0 before any)
  int eligible_replicas = 0;  // N of hot_s (set by ReplicaSet::Choose)
};

struct PickRequest {
  std::span<const int32_t> tokens;  // exact ids (may be empty)
  std::string_view text_key;        // without ids: the prompt bytes (history affinity by chunks)
  int64_t prompt_tokens = 0, max_tokens = 0;
  std::string_view tenant;
  std::vector<std::string> exclude;  // urls tried already
  std::string_view adapter;  // the LoRA adapter named (body `lora`, else `model`); may be ""
};

struct Pick {
  std::string url;
  RouteReason reason = RouteReason::kFallback;
  double cost_s = 0;
  int64_t cached_tokens = 0;
  std::string detail;  // "queue=0.010 prefill=0.120 tier=0 decode=0.040 cached=512" (logs)
  // Added by part bal: the request's block hashes under the chosen replica's salt (ReplicaSet
  // fills it; OnSent records them as routing history without hashing again). May be null.
  std::shared_ptr<const std::vector<cachekey::BlockHash>> block_hashes;
};

// The terms of one replica's cost (see the formula above).
inline constexpr double kHotShare = 1.0;    // share × N above which hot_s applies
inline constexpr double kHotWeight = 4.0;   // hot_s at 1.25 × the fair share = one full prefill
inline constexpr double kShareWindow = 64;  // picks the recent share averages over

struct PricedReplica {
  double queue_s = 0, prefill_s = 0, tier_s = 0, decode_s = 0, hot_s = 0, lora_s = 0, cost_s = 0;
  int64_t cached_tokens = 0;
};
PricedReplica Price(const BalancerConfig& cfg, const ReplicaView& v, const PrefixMatch& m,
                    const PickRequest& r);

class Balancer {
 public:
  explicit Balancer(uint64_t seed = 0x5eed5eedULL) : rng_(seed) {}

  // `views[i]` is priced with `matches[i]` (same size; may be empty for policies other than
  // kCost, which then read as no match). Ineligible views and excluded urls are skipped.
  Result<Pick> Choose(const BalancerConfig& cfg, std::span<const ReplicaView> views,
                      std::span<const PrefixMatch> matches, const PickRequest& r);

 private:
  size_t Rotate(size_t n) { return static_cast<size_t>(counter_++ % n); }
  uint64_t counter_ = 0;
  std::mt19937_64 rng_;
};

// Requests on the replica as the balancer counts them (least-loaded and ties).
double ReplicaLoad(const ReplicaView& v);

// What the replica's published adapter list says about `adapter`: registered there (and active),
// or known not to be (it publishes a list without it), or unknown (no list, no metrics).
enum class AdapterState : uint8_t { kUnknown, kAbsent, kRegistered, kActive };
AdapterState AdapterStateOf(const ReplicaView& v, std::string_view adapter);

}  // namespace strata::gateway
