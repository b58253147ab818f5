// gateway/config: the gateway's configuration (`strata gateway --config gateway.yaml`) — pools of
// replicas, the ordered route list, tenants with their limits, and the admission, health,
// balancer and upstream settings — parsed strictly from YAML into an immutable snapshot.
//
// YAML keys are the member names below (durations carry their unit: `interval_ms`, `timeout_s`,
// `history_ttl_s`); examples/gateway.yaml documents every key. Unknown keys, duplicate keys,
// wrong types, out-of-range numbers (negative, NaN, too large), URLs that are not http://, routes
// to pools that do not exist, duplicate pool/route/tenant names and duplicate API keys are errors;
// so are splits with fewer than 2 arms, a canary whose baseline/canary are not the split's two
// arms or whose steps do not increase in (0, 100], a shadow fraction outside [0, 1] and a cascade
// whose first and then are the same pool.
// Every error names the key path: "pools[1].replicas[0]: not an http:// URL (...)".
// Hostile input (deep nesting, huge files, aliases) yields an error, never a crash: the text is
// bounded (kMaxGatewayConfigBytes) and yaml-cpp's depth guard and exceptions are caught here.
//
// Ownership: ParseGatewayConfig returns a shared immutable snapshot; a reload (SIGHUP) builds a
// new one, and requests keep the snapshot they started with.
// Thread contract: a parsed GatewayConfig is never modified; reading it from many threads is safe.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "gateway/types.h"

namespace strata::gateway {

// The largest config text ParseGatewayConfig / LoadGatewayConfig accept.
inline constexpr size_t kMaxGatewayConfigBytes = 1 << 20;

// A DNS name re-resolved every `interval`; each address becomes a replica http://addr:port.
struct DnsConfig {
  std::string name;
  uint16_t port = 8080;
  std::chrono::milliseconds interval{5000};  // YAML: interval_ms
};

struct PoolConfig {
  std::string name;
  std::vector<std::string> replicas;  // "http://host:port" (validated with http::ParseUrl)
  // The YAML had a `replicas:` key. An explicit empty list (`replicas: []`) is a pool the
  // control plane fills in (scaled to zero, replicas starting); an absent key without `dns:` is
  // an error.
  bool replicas_listed = false;
  std::optional<DnsConfig> dns;
  std::string tokenizer;  // GGUF path ("" = estimate from bytes)
  // A built-in chat template name (tokenizer/chat/builtin_templates.h) the pool's replicas were
  // started with (`--chat-template NAME`); "" = the tokenizer GGUF's own template.
  std::string chat_template;
  std::map<std::string, std::string> labels;
  std::string api_key;    // sent upstream as Bearer ("" = none)
  int max_in_flight = 0;  // pool capacity bound in requests (0 = unbounded)
  // With no eligible replica (scaled to zero, all starting), a request waits up to this long for
  // one instead of a 503 (pool_hold.h); 0 = 503 at once. YAML: cold_start_hold_ms. A pool with a
  // hold answers 503 only when the bound passes.
  std::chrono::milliseconds cold_start_hold{0};
  int cold_start_max_held = 256;  // requests held per pool at most (more: 503 at once)
};

struct RouteMatch {
  std::optional<std::string> model, adapter, adapter_prefix, tenant;
  std::optional<Priority> priority;
  std::optional<int64_t> min_prompt_tokens, max_prompt_tokens;  // inclusive bounds
  std::vector<std::pair<std::string, std::string>> headers;     // names lower-cased
  // Whether a prompt-length condition is present (the prompt is measured only then).
  bool needs_prompt_tokens() const {
    return min_prompt_tokens.has_value() || max_prompt_tokens.has_value();
  }
};

// ---- traffic management (issue 17): splits, canary, shadow, cascade ----

// One arm of a split: `to: [{pool: v1, weight: 90}, {pool: v2, weight: 10}]`. Weights are
// relative (any scale; they need not sum to 100).
struct ArmConfig {
  std::string pool;
  double weight = 0;
};

// What keeps a session on one arm. YAML: `sticky: {key: user|header|tenant, header: NAME}`.
// kUser: the body's "user" string; kHeader: the header `header` (lower-cased); kTenant: the API
// key's tenant. Without that key a request falls back to its tenant, then to a random draw.
enum class StickyKey { kUser, kHeader, kTenant };
std::string_view StickyKeyName(StickyKey k);  // "user" | "header" | "tenant"
struct StickyConfig {
  StickyKey key = StickyKey::kUser;
  std::string header;  // with kHeader only
};

// The canary arm against the baseline arm over the same window; a breach of any → rollback.
struct CanaryGuards {
  double ttft_p95_max_ratio = 1.2, tpot_p95_max_ratio = 1.2;  // canary p95 / baseline p95
  // A latency ratio is a breach only when the canary's p95 is also this much above the
  // baseline's (seconds): sub-millisecond p95s differ by more than any ratio from noise alone.
  double latency_min_delta_s = 0.005;
  double error_rate_max_delta = 0.01;            // canary − baseline, absolute
  std::optional<double> mean_logprob_min_delta;  // canary − baseline mean output logprob
};

// A canary release on a 2-arm split. YAML: min_duration_s, interval_s (integer seconds).
struct CanaryConfig {
  std::string baseline, canary;  // the two arms' pools
  std::vector<double> steps;     // canary weight % per step, increasing, in (0, 100]
  int64_t min_requests = 100;    // per arm, per step, before a step may pass
  std::chrono::seconds min_duration{60}, interval{10};
  CanaryGuards guards;
};

// Mirror `fraction` of a route's requests to `pool` (answers discarded, compared).
struct ShadowConfig {
  std::string pool;
  double fraction = 0;  // [0, 1]
};

enum class CascadeSignal { kMeanLogprob, kMinLogprob, kMargin };
std::string_view CascadeSignalName(CascadeSignal s);  // "mean_logprob" | "min_logprob" | "margin"
// `to: {cascade: {first, then, signal, threshold}}`: `first` answers with logprobs; a signal at
// or above `threshold` keeps its answer, below it the request goes to `then`.
struct CascadeConfig {
  std::string first, then;
  CascadeSignal signal = CascadeSignal::kMeanLogprob;
  double threshold = -1.0;
};

// YAML: `match:` absent (or null) = the default route, it matches everything. `to:` is a pool
// name, a list of arms (a split), or `{cascade: {...}}`; exactly one of to / arms / cascade is set.
struct RouteConfig {
  std::string name;
  std::optional<RouteMatch> match;
  std::string to;               // a pool name ("" when arms or cascade are set)
  std::vector<ArmConfig> arms;  // a split (>= 2 arms; weights >= 0, sum > 0 unless a canary)
  StickyConfig sticky;
  std::optional<CanaryConfig> canary;  // needs exactly 2 arms: baseline and canary
  std::optional<ShadowConfig> shadow;
  std::optional<CascadeConfig> cascade;

  // The pool that measures the prompt for this route's match conditions and that a request goes
  // to first: `to`, else the first arm's pool, else the cascade's first.
  const std::string& primary_pool() const;
  // Every pool the route names (to, arms, cascade first/then, shadow), in that order.
  std::vector<std::string_view> ReferencedPools() const;
};

// YAML: `admin: {api_key: KEY}` — the Bearer key of the /admin/ API ("" = the API is off: 403).
struct AdminConfig {
  std::string api_key;
};

// The status page /ui (gateway_ui.h). YAML: `ui: {control_url: http://127.0.0.1:9300/status}`:
// the control plane's status JSON (`strata up`'s status endpoint), fetched every 2 s and shown
// beside the gateway's own figures ("" = none; http:// only).
struct UiConfig {
  std::string control_url;
};

// OpenTelemetry traces (src/trace, README.md "Tracing"). YAML: `tracing: {otlp_endpoint,
// sample_ratio, service_name}`; the flags --otlp-endpoint / --otlp-sample-ratio /
// --otlp-service-name override them. Read once at start: a reload does not change tracing.
struct TracingConfig {
  std::string otlp_endpoint;  // OTLP/HTTP base, http://host:4318 ("" = the gateway exports none)
  double sample_ratio = 1.0;  // head sampling of requests without a traceparent, [0, 1]
  std::string service_name = "strata-gateway";
  int64_t queue_capacity = 8192;  // spans waiting for export at most (more are dropped, counted)
};

struct TenantConfig {
  std::string name;
  std::vector<std::string> api_keys;
  double tokens_per_minute = 0, requests_per_minute = 0;  // 0 = unlimited
  int max_concurrency = 0;                                // 0 = unlimited
  std::optional<Priority> default_priority;
};

// YAML: gold_max_wait_ms, silver_max_wait_ms, bronze_max_wait_ms. How long a request of that
// priority may wait for capacity instead of an immediate 429 (0 = never waits).
struct AdmissionConfig {
  std::array<std::chrono::milliseconds, kNumPriorities> max_wait{
      std::chrono::milliseconds(2000), std::chrono::milliseconds(0), std::chrono::milliseconds(0)};
};

struct HealthConfig {
  std::chrono::milliseconds interval{500}, timeout{1000};  // interval_ms, timeout_ms
  int eject_after_failures = 3;
  std::chrono::milliseconds ejection_base{1000}, ejection_max{30000};  // ejection_{base,max}_ms
};

enum class BalancePolicy { kCost, kRoundRobin, kRandom, kLeastLoaded };
// "cost" | "round_robin" | "random" | "least_loaded".
std::string_view BalancePolicyName(BalancePolicy p);

struct BalancerConfig {
  BalancePolicy policy = BalancePolicy::kCost;
  std::chrono::milliseconds metrics_interval{500}, kv_events_interval{250};  // *_ms
  std::chrono::seconds history_ttl{120};                                     // history_ttl_s
  double default_prefill_tokens_per_s = 2000, default_decode_step_s = 0.02;
  // Transfer time of one block found only in that tier, indexed by KvTier. YAML:
  // tier_seconds_per_block: {pool, ram, disk, redis}.
  double tier_seconds_per_block[kNumKvTiers] = {0, 1e-4, 1e-3, 3e-3};
  // Seconds added to a replica's cost for a request whose LoRA adapter is registered there but
  // not in its active set (it must be swapped in first).
  double lora_load_s = 0.05;
};

struct UpstreamConfig {
  std::chrono::milliseconds timeout{600000};  // YAML: timeout_s
  int retries = 1;
};

struct GatewayConfig {
  std::vector<PoolConfig> pools;
  std::vector<RouteConfig> routes;
  std::vector<TenantConfig> tenants;
  AdmissionConfig admission;
  HealthConfig health;
  BalancerConfig balancer;
  UpstreamConfig upstream;
  AdminConfig admin;
  UiConfig ui;
  TracingConfig tracing;
  std::string access_log = "stderr";  // "stderr" | "off" | a file path

  const PoolConfig* FindPool(std::string_view name) const;
  const TenantConfig* FindTenant(std::string_view name) const;
  // The tenant owning API key `key` (every key is compared, in constant time), or nullptr.
  const TenantConfig* TenantForKey(std::string_view key) const;
  bool keys_required() const;  // any tenant has api_keys
};

// Errors (InvalidArgument) name the key path: "pools[1].replicas[0]: not an http:// URL",
// "routes[2].to: no pool named 'x'".
Result<std::shared_ptr<const GatewayConfig>> ParseGatewayConfig(std::string_view yaml_text);
// Reads and parses a file (NotFound / IoError when unreadable; larger than
// kMaxGatewayConfigBytes → InvalidArgument). Errors are prefixed with the path.
Result<std::shared_ptr<const GatewayConfig>> LoadGatewayConfig(const std::string& path);

}  // namespace strata::gateway
