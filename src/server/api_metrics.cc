#include "server/api_metrics.h"

#include <string>
#include <string_view>
#include <vector>

namespace strata::server {

namespace {

const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                             0.1,   0.25,  0.5,  0.75, 1.0,  2.5,  5.0,
                                             7.5,   10.0,  20.0, 40.0, 80.0};
const std::vector<double> kTokenBuckets = {1,   2,   5,    10,   20,   50,   100,
                                           200, 500, 1000, 2000, 5000, 10000};

struct MetricSpec {
  const char* name;
  http::MetricsRegistry::Type type;
  const char* help;
  const std::vector<double>* buckets;  // histograms only
};

using T = http::MetricsRegistry::Type;
// Every family /metrics exposes (docs/metrics.md).
const MetricSpec kMetrics[] = {
    {"strata:time_to_first_token_seconds", T::kHistogram,
     "Time from request arrival to the first generated token.", &kLatencyBuckets},
    {"strata:inter_token_latency_seconds", T::kHistogram,
     "Time between consecutive generated tokens of a request.", &kLatencyBuckets},
    {"strata:e2e_request_latency_seconds", T::kHistogram,
     "Time from request arrival to its last byte.", &kLatencyBuckets},
    {"strata:request_queue_time_seconds", T::kHistogram,
     "Time from submission to the engine to the first engine step that runs the request (its "
     "wait in the engine's queue, a KV-tier prefetch included).",
     &kLatencyBuckets},
    {"strata:request_prefill_time_seconds", T::kHistogram,
     "Time from the first engine step that runs the request to its first token.", &kLatencyBuckets},
    {"strata:request_decode_time_seconds", T::kHistogram,
     "Time from the first token to the last token of a request.", &kLatencyBuckets},
    {"strata:request_inference_time_seconds", T::kHistogram,
     "Time from the first engine step that runs the request to its last token (prefill + "
     "decode).",
     &kLatencyBuckets},
    {"strata:requests_received_total", T::kCounter,
     "Generation requests accepted by the engine (counted at acceptance, so it follows arrivals "
     "while the replica is saturated).",
     nullptr},
    {"strata:request_prompt_tokens", T::kHistogram,
     "Prompt length of finished requests, in tokens.", &kTokenBuckets},
    {"strata:request_generation_tokens", T::kHistogram,
     "Generated tokens of finished requests (all n completions).", &kTokenBuckets},
    {"strata:num_requests_running", T::kGauge, "Requests the engine is running.", nullptr},
    {"strata:num_requests_waiting", T::kGauge,
     "Requests waiting in the engine's queue (including preempted).", nullptr},
    {"strata:kv_cache_usage_perc", T::kGauge, "Fraction of KV-cache blocks in use (0..1).",
     nullptr},
    {"strata:prompt_tokens_total", T::kCounter, "Prompt tokens of accepted requests.", nullptr},
    {"strata:generation_tokens_total", T::kCounter, "Generated tokens delivered to clients.",
     nullptr},
    {"strata:prefix_cache_queries_total", T::kCounter,
     "Prompt tokens looked up in the prefix cache (the engine's KV pool, then the KV tiers).",
     nullptr},
    {"strata:prefix_cache_hits_total", T::kCounter,
     "Prompt tokens whose KV was reused instead of computed: found in the engine's KV pool or "
     "loaded from a KV tier (strata:prefix_cache_pool_hits_total + "
     "strata:kv_tier_hit_tokens_total).",
     nullptr},
    {"strata:prefix_cache_pool_hits_total", T::kCounter,
     "Prompt tokens found in the engine's own KV pool (the part of the hits no tier served).",
     nullptr},
    {"strata:num_preemptions_total", T::kCounter, "Sequences preempted by the scheduler.", nullptr},
    {"strata:engine_steps_total", T::kCounter,
     "Scheduler steps the engine ran (one batched forward pass each, when anything was scheduled).",
     nullptr},
    {"strata:engine_tokens_computed_total", T::kCounter,
     "Tokens the engine's steps fed to the model (prompt chunks, recomputation, decode).", nullptr},
    {"strata:request_success_total", T::kCounter,
     "Finished requests by finish reason (stop, length, abort, error).", nullptr},
    {"strata:http_requests_total", T::kCounter, "HTTP requests by route and status code.", nullptr},
    {"strata:requests_deadline_exceeded_total", T::kCounter,
     "Requests whose deadline passed before admission (504), by tier.", nullptr},
    {"strata:requests_displaced_total", T::kCounter,
     "Waiting requests displaced by a higher-priority one from the full queue (429), by tier.",
     nullptr},
    {"strata:requests_cut_at_shutdown_total", T::kCounter,
     "Requests still running when --shutdown-timeout expired (ended with an error), by tier.",
     nullptr},
    {"strata:internal_errors_total", T::kCounter,
     "Requests answered 500 by the last-resort guard (an exception escaped a handler), by route.",
     nullptr},
    {"strata:kv_tier_hit_tokens_total", T::kCounter,
     "Prompt tokens whose KV was loaded from a lower tier (RAM/disk/Redis) instead of computed.",
     nullptr},
    {"strata:kv_tier_prefetch_timeouts_total", T::kCounter,
     "Tier prefetches given up after --kv-tier-prefetch-timeout (the blocks were computed).",
     nullptr},
    {"strata:kv_tier_hits_total", T::kCounter, "Block lookups found in a KV tier, by tier.",
     nullptr},
    {"strata:kv_tier_misses_total", T::kCounter, "Block lookups not found in a KV tier, by tier.",
     nullptr},
    {"strata:kv_tier_bytes_in_total", T::kCounter, "Bytes written into a KV tier, by tier.",
     nullptr},
    {"strata:kv_tier_bytes_out_total", T::kCounter, "Bytes read out of a KV tier, by tier.",
     nullptr},
    {"strata:kv_tier_evictions_total", T::kCounter,
     "Entries evicted from a KV tier (capacity or quota), by tier.", nullptr},
    {"strata:kv_tier_expirations_total", T::kCounter,
     "Entries expired by TTL in a KV tier, by tier.", nullptr},
    {"strata:kv_tier_corrupt_total", T::kCounter,
     "Entries rejected on read (checksum, length, key or format mismatch) and deleted, by tier.",
     nullptr},
    {"strata:kv_tier_errors_total", T::kCounter, "I/O or connection errors of a KV tier, by tier.",
     nullptr},
    {"strata:lora_requests_info", T::kGauge,
     "LoRA adapters of running and waiting requests and the active-set size (labels; the value "
     "is the Unix time of the scrape), as vLLM's lora_requests_info.",
     nullptr},
    {"strata:lora_requests_total", T::kCounter, "Requests accepted for a LoRA adapter, by adapter.",
     nullptr},
    {"strata:lora_adapter_events_total", T::kCounter,
     "LoRA adapter registry events: load (file read), unload, evict (host cache), load_error.",
     nullptr},
    {"strata:lora_adapter_active", T::kGauge,
     "1 when a registered LoRA adapter is in the engine's active set, 0 when only registered.",
     nullptr},
    {"strata:kv_tier_up", T::kGauge,
     "1 when a KV tier can serve (Redis: a connection is open), 0 when it is unreachable.",
     nullptr},
    {"strata:kv_tier_entries", T::kGauge, "Entries held by a KV tier, by tier.", nullptr},
    {"strata:kv_tier_bytes_used", T::kGauge, "Bytes held by a KV tier, by tier.", nullptr},
    {"strata:kv_tier_read_seconds_mean", T::kGauge, "Mean latency of a KV tier's reads, by tier.",
     nullptr},
    {"strata:kv_tier_write_seconds_mean", T::kGauge, "Mean latency of a KV tier's writes, by tier.",
     nullptr},
    {"strata:kv_tier_queue_drops_total", T::kCounter,
     "Tier writes dropped because the write queue was full.", nullptr},
    {"strata:kv_tier_queued_writes", T::kGauge, "Tier writes waiting for a worker.", nullptr},
    {"strata:trace_spans_exported_total", T::kCounter,
     "Spans the OTLP exporter delivered (--otlp-endpoint; absent without it).", nullptr},
    {"strata:trace_spans_dropped_total", T::kCounter,
     "Spans the OTLP exporter dropped, by reason: queue_full (the bounded queue was full), "
     "export_failed (the collector refused them or retries ran out).",
     nullptr},
};

// `--metrics-compat vllm`: the same events also under vLLM's names, types, labels (model_name,
// engine="0", finished_reason) and histogram buckets (vllm/v1/metrics/loggers.py), so dashboards,
// autoscalers and routers written for vLLM read a Strata replica unchanged (src/server/README.md).
const std::vector<double> kVllmTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                              0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                              20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kVllmTpotBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                              0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                              7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kVllmLatencyBuckets = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                                 5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                                 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
enum class VllmBuckets { kNone, kTtft, kTpot, kLatency, kTokens };
struct VllmSpec {
  const char* strata;
  const char* vllm;
  const char* help;
  VllmBuckets buckets;
};
using B = VllmBuckets;
const VllmSpec kVllmMetrics[] = {
    {"strata:num_requests_running", "vllm:num_requests_running",
     "Number of requests in model execution batches.", B::kNone},
    {"strata:num_requests_waiting", "vllm:num_requests_waiting",
     "Number of requests waiting to be processed.", B::kNone},
    {"strata:kv_cache_usage_perc", "vllm:kv_cache_usage_perc",
     "KV-cache usage. 1 means 100 percent usage.", B::kNone},
    {"strata:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
     "KV-cache usage. 1 means 100 percent usage. DEPRECATED: use vllm:kv_cache_usage_perc.",
     B::kNone},
    {"strata:prefix_cache_queries_total", "vllm:prefix_cache_queries_total",
     "Prefix cache queries, in terms of number of queried tokens.", B::kNone},
    {"strata:prefix_cache_hits_total", "vllm:prefix_cache_hits_total",
     "Prefix cache hits, in terms of number of cached tokens (pool and KV tiers).", B::kNone},
    {"strata:num_preemptions_total", "vllm:num_preemptions_total",
     "Cumulative number of preemption from the engine.", B::kNone},
    {"strata:prompt_tokens_total", "vllm:prompt_tokens_total",
     "Number of prefill tokens processed.", B::kNone},
    {"strata:generation_tokens_total", "vllm:generation_tokens_total",
     "Number of generation tokens processed.", B::kNone},
    {"strata:request_success_total", "vllm:request_success_total",
     "Count of successfully processed requests.", B::kNone},
    {"strata:request_prompt_tokens", "vllm:request_prompt_tokens",
     "Number of prefill tokens processed.", B::kTokens},
    {"strata:request_generation_tokens", "vllm:request_generation_tokens",
     "Number of generation tokens processed.", B::kTokens},
    {"strata:time_to_first_token_seconds", "vllm:time_to_first_token_seconds",
     "Histogram of time to first token in seconds.", B::kTtft},
    {"strata:inter_token_latency_seconds", "vllm:inter_token_latency_seconds",
     "Histogram of inter-token latency in seconds.", B::kTpot},
    {"strata:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
     "Histogram of time per output token in seconds.", B::kTpot},
    {"strata:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds",
     "Histogram of e2e request latency in seconds.", B::kLatency},
    {"strata:request_queue_time_seconds", "vllm:request_queue_time_seconds",
     "Histogram of time spent in WAITING phase for request.", B::kLatency},
    {"strata:request_prefill_time_seconds", "vllm:request_prefill_time_seconds",
     "Histogram of time spent in PREFILL phase for request.", B::kLatency},
    {"strata:request_decode_time_seconds", "vllm:request_decode_time_seconds",
     "Histogram of time spent in DECODE phase for request.", B::kLatency},
    {"strata:request_inference_time_seconds", "vllm:request_inference_time_seconds",
     "Histogram of time spent in RUNNING phase for request.", B::kLatency},
};
// vLLM's finish reasons (request_success_total is exported at zero for each from the start).
constexpr const char* kVllmFinishReasons[] = {"stop", "length", "abort", "error"};

// 1, 2, 5, 10, 20, 50, ... up to `max` (vLLM's token-count buckets).
std::vector<double> OneTwoFiveBuckets(int64_t max) {
  std::vector<double> out;
  for (int64_t scale = 1; scale <= max; scale *= 10)
    for (int64_t m : {1, 2, 5})
      if (m * scale <= max) out.push_back(static_cast<double>(m * scale));
  return out;
}

}  // namespace

ApiMetrics::ApiMetrics(ApiContext* ctx) : ctx_(ctx) {
  for (const MetricSpec& m : kMetrics)
    ctx_->metrics.Declare(m.name, m.type, m.help, m.buckets ? *m.buckets : std::vector<double>{});
  if (ctx_->options.metrics_compat == "vllm") DeclareVllmMetrics();
}

void ApiMetrics::DeclareVllmMetrics() {
  // vLLM's info gauge has exactly these three labels.
  ctx_->metrics.Mirror("strata:lora_requests_info", "vllm:lora_requests_info",
                       "Running stats on lora requests.", {},
                       {"max_lora", "waiting_lora_adapters", "running_lora_adapters"}, "");
  const std::string engine_labels =
      http::Labels({{"model_name", ctx_->model.name}, {"engine", "0"}});
  for (const VllmSpec& m : kVllmMetrics) {
    std::vector<double> buckets;
    switch (m.buckets) {
      case B::kNone:
        break;
      case B::kTtft:
        buckets = kVllmTtftBuckets;
        break;
      case B::kTpot:
        buckets = kVllmTpotBuckets;
        break;
      case B::kLatency:
        buckets = kVllmLatencyBuckets;
        break;
      case B::kTokens:
        buckets = OneTwoFiveBuckets(ctx_->model.max_model_len);
        break;
    }
    const bool by_reason = std::string_view(m.strata) == "strata:request_success_total";
    std::vector<std::string> keep = {"model_name"};
    if (by_reason) keep.emplace_back("finished_reason");
    ctx_->metrics.Mirror(m.strata, m.vllm, m.help, std::move(buckets), std::move(keep),
                         http::Labels({{"engine", "0"}}));
    if (!by_reason) {
      ctx_->metrics.Touch(m.vllm, engine_labels);
      continue;
    }
    for (const char* reason : kVllmFinishReasons)
      ctx_->metrics.Touch(m.vllm, http::Labels({{"model_name", ctx_->model.name},
                                                {"finished_reason", reason},
                                                {"engine", "0"}}));
  }
}

void ApiMetrics::RefreshEngineGauges(const engine::sched::EngineStats& s) {
  http::MetricsRegistry& m = ctx_->metrics;
  const std::string& l = ctx_->model_labels;
  m.Set("strata:num_requests_running", l, s.running_requests);
  m.Set("strata:num_requests_waiting", l, s.waiting_requests);
  m.Set("strata:kv_cache_usage_perc", l, s.kv_usage);
  m.Set("strata:prefix_cache_queries_total", l, static_cast<double>(s.prefix_query_tokens));
  // Hit rate = hits / queries counts every reused token, whichever layer served it.
  m.Set("strata:prefix_cache_hits_total", l,
        static_cast<double>(s.prefix_hit_tokens + s.tier_hit_tokens));
  m.Set("strata:prefix_cache_pool_hits_total", l, static_cast<double>(s.prefix_hit_tokens));
  m.Set("strata:num_preemptions_total", l, static_cast<double>(s.preemptions));
  m.Set("strata:engine_steps_total", l, static_cast<double>(s.steps));
  m.Set("strata:engine_tokens_computed_total", l, static_cast<double>(s.tokens_computed));
}

void ApiMetrics::RefreshTierGauges(const engine::sched::EngineStats& s) {
  if (!ctx_->options.tier_stats) return;
  auto ts = ctx_->options.tier_stats();
  if (!ts) return;
  ctx_->metrics.Set("strata:kv_tier_hit_tokens_total", ctx_->model_labels,
                    static_cast<double>(s.tier_hit_tokens));
  ctx_->metrics.Set("strata:kv_tier_prefetch_timeouts_total", ctx_->model_labels,
                    static_cast<double>(s.tier_prefetch_timeouts));
  SetTierStats(*ts);
}

void ApiMetrics::SetTierStats(const engine::kvtier::TieredKvStats& stats) {
  const engine::kvtier::TieredKvStats* ts = &stats;
  ctx_->metrics.Set("strata:kv_tier_queue_drops_total", ctx_->model_labels,
                    static_cast<double>(ts->queue_drops));
  ctx_->metrics.Set("strata:kv_tier_queued_writes", ctx_->model_labels,
                    static_cast<double>(ts->queued_writes));
  auto mean = [](double total, int64_t ops) {
    return ops ? total / static_cast<double>(ops) : 0.0;
  };
  for (const engine::kvtier::TierStats* t : {&ts->ram, &ts->disk, &ts->redis}) {
    if (!t->enabled) continue;
    const std::string l = http::Labels({{"model_name", ctx_->model.name}, {"kv_tier", t->name}});
    ctx_->metrics.Set("strata:kv_tier_hits_total", l, static_cast<double>(t->hits));
    ctx_->metrics.Set("strata:kv_tier_misses_total", l, static_cast<double>(t->misses));
    ctx_->metrics.Set("strata:kv_tier_bytes_in_total", l, static_cast<double>(t->bytes_in));
    ctx_->metrics.Set("strata:kv_tier_bytes_out_total", l, static_cast<double>(t->bytes_out));
    ctx_->metrics.Set("strata:kv_tier_evictions_total", l, static_cast<double>(t->evictions));
    ctx_->metrics.Set("strata:kv_tier_expirations_total", l, static_cast<double>(t->expirations));
    ctx_->metrics.Set("strata:kv_tier_corrupt_total", l, static_cast<double>(t->corrupt));
    ctx_->metrics.Set("strata:kv_tier_errors_total", l, static_cast<double>(t->errors));
    ctx_->metrics.Set("strata:kv_tier_up", l, t->up ? 1 : 0);
    ctx_->metrics.Set("strata:kv_tier_entries", l, static_cast<double>(t->entries));
    ctx_->metrics.Set("strata:kv_tier_bytes_used", l, static_cast<double>(t->bytes_used));
    ctx_->metrics.Set("strata:kv_tier_read_seconds_mean", l,
                      mean(t->read_seconds_total, t->read_ops));
    ctx_->metrics.Set("strata:kv_tier_write_seconds_mean", l,
                      mean(t->write_seconds_total, t->write_ops));
  }
}

void ApiMetrics::RefreshTracerCounters() {
  if (ctx_->options.tracer == nullptr) return;
  const trace::TracerStats s = ctx_->options.tracer->stats();
  ctx_->metrics.Set("strata:trace_spans_exported_total", "", static_cast<double>(s.spans_exported));
  ctx_->metrics.Set("strata:trace_spans_dropped_total", http::Labels({{"reason", "queue_full"}}),
                    static_cast<double>(s.dropped_queue_full));
  ctx_->metrics.Set("strata:trace_spans_dropped_total", http::Labels({{"reason", "export_failed"}}),
                    static_cast<double>(s.dropped_export_failed));
}

}  // namespace strata::server
