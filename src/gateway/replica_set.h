// gateway/replica_set: the replicas of one pool — membership (static `replicas:` URLs and a `dns:`
// name re-resolved every dns.interval), health, load metrics and cached-prefix knowledge — and the
// pick of a replica for a request (balancer.h prices the snapshot).
//
// Polling (Start): coroutines on the upstream io_context, one http::HttpClient each, per replica:
//   GET /ready every health.interval (deadline health.timeout): 200 → healthy; 503 whose body
//     says "draining" → draining (no new work); anything else or a transport error → unhealthy;
//   GET /metrics every balancer.metrics_interval → ReplicaMetrics (strata:num_requests_waiting,
//     strata:num_requests_running, strata:kv_cache_usage_perc; the prefill rate is the rate of
//     strata:prompt_tokens_total over poll windows that began and ended with waiting > 0 — the
//     replica was busy prefilling the whole window — smoothed by an EWMA with weight 0.3 for the
//     new sample);
//     a failed or unparsable poll marks the metrics invalid (the cost then uses in_flight);
//   GET /v1/kv/events?since=<cursor>&max=4096 every balancer.kv_events_interval (the wire format is
//     the replica's, gw-design Part A): `reset` or a new `instance` forgets what was learned;
//     a full answer (4,096 hashes) is followed at once by the next page (up to 8 in a row); 404 →
//     the replica does not publish (re-probed every 40 intervals) and routing history stands in.
//   and, with `dns:`, the name is resolved every dns.interval; each address is a replica
//     "http://<ip>:<port>" (IPv6 in brackets); addresses that disappear leave the pool (a static
//     URL listed as well stays).
// Every poll runs under the deadline health.timeout and sends the pool's api_key as Bearer.
// Eligible = the last /ready was 200, not draining, not ejected. A new replica is not eligible
// until its first /ready succeeded.
// Passive health (OnFinished): eject_after_failures consecutive transport errors or 5xx eject the
// replica until now + ejection_base × 2^(k−1) (capped at ejection_max; k = its ejections since it
// last served a request successfully); the first /ready success after that time readmits it.
// Prefix keys (Choose, policy cost): with token ids, the replica's own chained block hashes —
// cachekey::ComputeBlockHashes(tokens, block_size, RequestSalt(model_salt, {"", tenant})) with the
// block_size/model_salt its /v1/kv/events publishes (replicas are grouped by salt, so a pool of one
// model hashes once). A replica that has not published them gets history keys: block size 16 and
// a gateway-only salt. Without ids (text prompt, no tokenizer), history keys over chained 64-byte
// chunks of the prompt text (kTextChunkBytes; each chunk's bytes hashed as ids 0..255 with a salt
// of "text" and the tenant), where one chunk counts as 64 × prompt_tokens / text bytes tokens.
// Accounting: OnSent counts a request in in_flight and in "sent since the last metrics poll"
// (requests, and its predicted prefill tokens = prompt − cached); a poll resets the latter to what
// was sent after the poll was issued. A view's sent_since_poll_requests is capped at in_flight
// (a request that finished before the next poll no longer loads the replica).
// Routing history (OnSent): the request's keys are recorded for the replica it went to, believed
// for balancer.history_ttl on replicas that do not publish events, and for max(1 s, 2 ×
// kv_events_interval) on those that do (it bridges the time until their events say so).
//
// Thread contract: every public method is thread-safe (one mutex; no I/O under it; hashing is done
// outside it). Start/Stop/Update from a controlling thread. Stop returns at once: pollers end at
// their next wake-up (timers are cancelled; an HTTP poll in progress ends by its deadline); they
// share ownership of the state, so the ReplicaSet may be destroyed before they end, but the
// io_context must outlive them and the ReplicaSet (run it until they end, or destroy it, which
// destroys them); it is run by ONE thread (the pollers' timers and clients are not locked).
// Errors: Choose returns Unavailable naming the pool when no replica is eligible; malformed
// upstream answers (metrics, events) are Status values, never a crash.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gateway/balancer.h"
#include "gateway/config.h"
#include "gateway/prefix_index.h"
#include "gateway/types.h"

namespace strata::gateway {

inline constexpr int kHistoryBlockTokens = 16;
inline constexpr size_t kTextChunkBytes = 64;
inline constexpr int64_t kKvEventsPageHashes = 4096;

class ReplicaSet {
 public:
  ReplicaSet(boost::asio::io_context& upstream_io, const PoolConfig& pool,
             const BalancerConfig& balancer, const HealthConfig& health);
  ~ReplicaSet();  // Stop()
  ReplicaSet(const ReplicaSet&) = delete;
  ReplicaSet& operator=(const ReplicaSet&) = delete;

  void Start();
  void Stop();
  // Reload: replicas that remain keep their state (health, metrics, prefix knowledge).
  void Update(const PoolConfig& pool, const BalancerConfig& balancer, const HealthConfig& health);

  Result<Pick> Choose(const PickRequest& r, Clock::time_point now);
  // Accounting (in_flight, sent since the last metrics poll) and routing history.
  void OnSent(const std::string& url, const Pick& p, const PickRequest& r, Clock::time_point now);
  void OnSent(const std::string& url, const Pick& p, const PickRequest& r);  // now = Clock::now()
  // The request ended: in_flight − 1 and passive health. transport_ok = false for a connect or
  // transport failure of the upstream call (not for a client that went away); http_status ≥ 500
  // counts as a failure too.
  void OnFinished(const std::string& url, bool transport_ok, int http_status,
                  Clock::time_point now);
  std::vector<ReplicaView> Snapshot() const;
  // As of `now` (the predicted prefill backlog drains with time).
  std::vector<ReplicaView> Snapshot(Clock::time_point now) const;  // every member, in URL order
  bool any_eligible() const;

  // Added by part bal — what the pollers feed in (tests call them directly, without sockets).
  void ObserveReady(const std::string& url, bool transport_ok, int http_status,
                    std::string_view body, Clock::time_point now);
  // A /metrics body. The sends counted before the poll was issued (`sent_*_at_poll`, from
  // MarkMetricsPoll) are then in the replica's own numbers; the overload without them treats the
  // body as describing the replica right now.
  Status ObserveMetrics(const std::string& url, std::string_view text, Clock::time_point now);
  struct SentTotals {
    int64_t tokens = 0, requests = 0;
  };
  SentTotals MarkMetricsPoll(const std::string& url) const;
  Status ObserveMetrics(const std::string& url, std::string_view text, Clock::time_point now,
                        SentTotals at_poll);
  void MetricsFailed(const std::string& url);
  // A /v1/kv/events answer. Returns true when the next page should be asked for at once.
  Result<bool> ObserveKvEvents(const std::string& url, int http_status, std::string_view body);
  // The addresses the DNS name resolves to now (as replica URLs).
  void SetDnsMembers(const std::vector<std::string>& urls);
  std::vector<std::string> members() const;
  const PrefixIndex& prefix_index() const;

  struct State;

 private:
  std::shared_ptr<State> s_;
};

}  // namespace strata::gateway
