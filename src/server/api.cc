#include "server/api.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <span>

#include "http/json_fields.h"
#include "http/openai_error.h"
#include "server/api_internal.h"
#include "server/kv_events.h"
#include "tokenizer/utf8.h"

namespace strata::server {

using http::Exchange;
using http::HttpResponse;
using nlohmann::json;

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
// strata:lora_adapter_events_total{event} (exported at zero for each from the start).
constexpr const char* kLoraEvents[] = {"load", "unload", "evict", "load_error"};
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

std::string Base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8) |
                 static_cast<uint8_t>(in[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < in.size()) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint8_t>(in[i + 1]) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// At most this many inputs in one /v1/embeddings request (OpenAI allows 2048; each input is one
// engine request, so the cap bounds one request's share of the queue).
constexpr size_t kMaxEmbeddingInputs = 256;

// The token lists of an /v1/embeddings `input`: a string, an array of token ids, or an array of
// at most kMaxEmbeddingInputs strings and/or token-id arrays.
http::ApiResult<std::vector<std::vector<int32_t>>> EmbeddingInputs(
    const json& in, const tokenizer::Tokenizer& tok) {
  std::vector<std::vector<int32_t>> inputs;
  constexpr std::string_view kShape =
      "must be a string, an array of token ids, or an array of strings or token-id arrays";
  if (in.is_string()) {
    ASSIGN_OR_RETURN_API(std::string text, http::AsString(in, "input"));
    inputs.push_back(tok.Encode(text, true, true));
    return inputs;
  }
  if (!in.is_array() || in.empty()) return http::ApiError::Param("input", kShape);
  if (in.front().is_number()) {  // one input as token ids
    ASSIGN_OR_RETURN_API(auto ids, http::TokenIds(in, "input", tok.n_vocab()));
    inputs.push_back(std::move(ids));
    return inputs;
  }
  if (in.size() > kMaxEmbeddingInputs)
    return http::ApiError::Param("input", fmt::format("at most {} inputs per request, got {}",
                                                      kMaxEmbeddingInputs, in.size()));
  inputs.reserve(in.size());
  for (const json& e : in) {
    if (e.is_string()) {
      ASSIGN_OR_RETURN_API(std::string text, http::AsString(e, "input"));
      inputs.push_back(tok.Encode(text, true, true));
    } else if (e.is_array()) {
      ASSIGN_OR_RETURN_API(auto ids, http::TokenIds(e, "input", tok.n_vocab()));
      inputs.push_back(std::move(ids));
    } else {
      return http::ApiError::Param("input", kShape);
    }
  }
  return inputs;
}

// The fields /v1/embeddings reads; any other is refused by name (never ignored silently).
constexpr std::string_view kEmbeddingFields[] = {"input",      "model", "encoding_format",
                                                 "dimensions", "user",  "lora"};

http::ApiError RejectUnknownFields(const json& body, std::span<const std::string_view> known) {
  for (const auto& [key, value] : body.items()) {
    bool ok = false;
    for (std::string_view k : known) ok |= key == k;
    if (!ok) return http::ApiError::Param(key.substr(0, 64), "is not supported by this server");
  }
  return {};
}

// OpenAI's `dimensions` for the v3 models: keep the first `dims` components, L2-renormalised. A
// vector no longer than `dims` is left as the engine made it (bit for bit).
void ShortenEmbedding(std::vector<float>* v, size_t dims) {
  if (v->size() <= dims) return;
  v->resize(dims);
  double sum = 0;
  for (float x : *v) sum += static_cast<double>(x) * x;
  if (sum <= 0) return;
  const double inv = 1.0 / std::sqrt(sum);
  for (float& x : *v) x = static_cast<float>(x * inv);
}

}  // namespace

HttpResponse LoadingResponse(const http::HttpRequest& req) {
  if (req.path == "/health") return JsonResponse(200, {{"status", "loading"}});
  return Error(503, "the server is loading the model");
}

Api::Api(ModelInfo model, engine::sched::Engine* engine, ApiOptions options)
    : model_(std::move(model)),
      engine_(engine),
      options_(std::move(options)),
      chain_(Routes(), {http::RequireBearer(options_.api_keys), http::RequireReady(&readiness_),
                        http::ParseJsonBody(), [this](Exchange& ex) { return CheckModel(ex); }}) {
  model_labels_ = http::Labels({{"model_name", model_.name}});
  created_ = std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
  for (const MetricSpec& m : kMetrics)
    metrics_.Declare(m.name, m.type, m.help, m.buckets ? *m.buckets : std::vector<double>{});
  if (options_.metrics_compat == "vllm") DeclareVllmMetrics();
  if (options_.adapters) {
    loader_ = std::make_unique<AdapterLoader>();
    for (const char* event : kLoraEvents)
      metrics_.Touch("strata:lora_adapter_events_total",
                     http::Labels({{"model_name", model_.name}, {"event", event}}));
  }
  if (engine_->hidden_dim() > 0) embeddings_ = std::make_unique<EmbeddingJobs>(engine_);
}

std::vector<http::Route> Api::Routes() {
  using E = Exchange;
  auto on = [this](HttpResponse (Api::*fn)(E&)) {
    return [this, fn](E& ex) { return (this->*fn)(ex); };
  };
  auto gen = [this](Endpoint ep) { return [this, ep](E& ex) { return Generate(ep, ex); }; };
  // method, path, label, prefix, auth, ready, json_body, handler
  return {
      {"GET", "/health", "/health", false, false, false, false, on(&Api::Health)},
      {"GET", "/ready", "/ready", false, false, false, false, on(&Api::Ready)},
      {"GET", "/metrics", "/metrics", false, true, false, false, on(&Api::Metrics)},
      {"GET", "/v1/kv/events", "/v1/kv/events", false, true, false, false, on(&Api::KvEvents)},
      {"GET", "/v1/models", "/v1/models", false, true, true, false, on(&Api::Models)},
      {"GET", "/v1/models/", "/v1/models/{id}", true, true, true, false, on(&Api::Model)},
      {"POST", "/v1/completions", "/v1/completions", false, true, true, true,
       gen(Endpoint::kCompletions)},
      {"POST", "/v1/chat/completions", "/v1/chat/completions", false, true, true, true,
       gen(Endpoint::kChat)},
      {"POST", "/v1/embeddings", "/v1/embeddings", false, true, true, true, on(&Api::Embeddings)},
      {"POST", "/tokenize", "/tokenize", false, true, true, true, on(&Api::Tokenize)},
      {"POST", "/detokenize", "/detokenize", false, true, true, true, on(&Api::Detokenize)},
      {"POST", "/apply-template", "/apply-template", false, true, true, true,
       on(&Api::ApplyTemplate)},
      {"POST", "/v1/load_lora_adapter", "/v1/load_lora_adapter", false, true, true, true,
       on(&Api::LoadLora)},
      {"POST", "/v1/unload_lora_adapter", "/v1/unload_lora_adapter", false, true, true, true,
       on(&Api::UnloadLora)},
  };
}

int Api::live_jobs() const {
  const int embeddings = embeddings_ ? embeddings_->live() : 0;
  MutexLock lock(&mu_);
  return static_cast<int>(jobs_.size()) + embeddings;
}

void Api::Handle(http::HttpRequest req, std::shared_ptr<http::Responder> out) {
  Exchange ex{std::move(req), std::move(out), nullptr, nullptr};
  HttpResponse r = chain_.Run(ex);
  if (r.status == http::kDeferred) return;
  const std::string route = ex.route ? ex.route->label : "other";
  metrics_.Add(
      "strata:http_requests_total",
      http::Labels(
          {{"model_name", model_.name}, {"route", route}, {"status", std::to_string(r.status)}}),
      1);
  ex.out->Respond(std::move(r));
}

void Api::OnInternalError(std::string_view method, std::string_view path) {
  (void)method;
  const http::Route* r = chain_.Find(path);
  const std::string route = r ? r->label : "other";
  metrics_.Add("strata:internal_errors_total",
               http::Labels({{"model_name", model_.name}, {"route", route}}), 1);
  metrics_.Add("strata:http_requests_total",
               http::Labels({{"model_name", model_.name}, {"route", route}, {"status", "500"}}), 1);
}

HttpResponse Api::Health(Exchange&) { return JsonResponse(200, {{"status", "ok"}}); }

HttpResponse Api::Ready(Exchange&) { return readiness_.Probe(); }

HttpResponse Api::Metrics(Exchange&) {
  RefreshEngineGauges();
  RefreshTracerCounters();
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.Render();
  return r;
}

void Api::RefreshTracerCounters() {
  if (options_.tracer == nullptr) return;
  const trace::TracerStats s = options_.tracer->stats();
  metrics_.Set("strata:trace_spans_exported_total", "", static_cast<double>(s.spans_exported));
  metrics_.Set("strata:trace_spans_dropped_total", http::Labels({{"reason", "queue_full"}}),
               static_cast<double>(s.dropped_queue_full));
  metrics_.Set("strata:trace_spans_dropped_total", http::Labels({{"reason", "export_failed"}}),
               static_cast<double>(s.dropped_export_failed));
}

// The block events a gateway polls (kv_events.h): no readiness needed, read under the log's short
// lock, formatted here.
HttpResponse Api::KvEvents(Exchange& ex) {
  auto q = ParseKvEventsQuery(ex.request.query);
  if (!q.ok()) return http::ErrorResponse(q.error());
  const engine::kv::KvEventLog& log = engine_->kv_events();
  const engine::kv::KvEventPage page = log.Read(q->since, q->max);
  return OrderedJsonResponse(
      200, KvEventsJson(page, {log.instance(), engine_->block_size(), engine_->model_salt()}));
}

json Api::ModelObject() const {
  return {{"id", model_.name},
          {"object", "model"},
          {"created", created_},
          {"owned_by", "strata"},
          {"max_model_len", model_.max_model_len}};
}

// A LoRA adapter as vLLM lists it: its parent is the base model, its root the adapter's file.
json Api::AdapterObject(const lora::AdapterInfo& a) const {
  return {{"id", a.name},
          {"object", "model"},
          {"created", created_},
          {"owned_by", "strata"},
          {"root", a.path},
          {"parent", model_.name},
          {"max_model_len", model_.max_model_len}};
}

HttpResponse Api::Models(Exchange&) {
  json data = json::array({ModelObject()});
  if (options_.adapters)
    for (const lora::AdapterInfo& a : options_.adapters->List()) data.push_back(AdapterObject(a));
  return JsonResponse(200, {{"object", "list"}, {"data", std::move(data)}});
}

HttpResponse Api::Model(Exchange& ex) {
  std::string id = ex.request.path.substr(ex.route->path.size());
  if (id == model_.name) return JsonResponse(200, ModelObject());
  if (options_.adapters)
    for (const lora::AdapterInfo& a : options_.adapters->List())
      if (a.name == id) return JsonResponse(200, AdapterObject(a));
  return ModelNotFound(id, "model", model_.name);
}

// As llama.cpp's server: `content` (or `prompt`), add_special false, parse_special true,
// with_pieces false; a piece that is not valid UTF-8 is given as its bytes (an array of integers).
HttpResponse Api::Tokenize(Exchange& ex) {
  const http::Fields f(ex.body);
  std::string text;
  const char* key = f.Has("content") ? "content" : "prompt";
  if (!f.Has(key)) return http::ErrorResponse(f.Error("content", "is required"));
  bool add_special = false, parse_special = true, with_pieces = false;
  for (const http::ApiError& e :
       {f.String(key, &text), f.Bool("add_special", &add_special),
        f.Bool("parse_special", &parse_special), f.Bool("with_pieces", &with_pieces)})
    if (!e.ok()) return http::ErrorResponse(e);
  auto ids = model_.tok->Encode(text, add_special, parse_special);
  json j = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", model_.max_model_len}};
  if (with_pieces) {
    json pieces = json::array();
    for (int32_t id : ids) {
      std::string piece = model_.tok->TokenToPiece(id, true);
      json p = tokenizer::IsValidUtf8(piece) ? json(piece) : json::array();
      if (!p.is_string())
        for (char c : piece) p.push_back(static_cast<unsigned char>(c));
      pieces.push_back({{"id", id}, {"piece", std::move(p)}});
    }
    j["tokens"] = std::move(pieces);
  }
  return JsonResponse(200, j);
}

// As llama.cpp's server: `tokens` (ids in the vocabulary) -> {"content": text}; also "prompt".
HttpResponse Api::Detokenize(Exchange& ex) {
  const http::Fields f(ex.body);
  const json* tokens = nullptr;
  RETURN_IF_API_ERROR_RESPONSE(f.Required("tokens"));
  RETURN_IF_API_ERROR_RESPONSE(f.Array("tokens", &tokens));
  auto ids = http::TokenIds(*tokens, "tokens", model_.tok->n_vocab());
  if (!ids.ok()) return http::ErrorResponse(ids.error());
  std::string text = model_.tok->Decode(*ids);
  return JsonResponse(200, {{"content", text}, {"prompt", text}});
}

// `messages`, `add_generation_prompt` (default true) and `chat_template_kwargs` (an object),
// validated as chat validates them.
HttpResponse Api::ApplyTemplate(Exchange& ex) {
  const http::Fields f(ex.body);
  RETURN_IF_API_ERROR_RESPONSE(f.Required("messages"));
  bool add_gen = true;
  const json* kwargs = nullptr;
  RETURN_IF_API_ERROR_RESPONSE(f.Bool("add_generation_prompt", &add_gen));
  RETURN_IF_API_ERROR_RESPONSE(f.Object("chat_template_kwargs", &kwargs));
  auto text =
      ApplyChatTemplate(*f.Find("messages"), add_gen, model_, kwargs ? *kwargs : json(nullptr));
  if (!text.ok()) return http::ErrorResponse(text.error());
  return JsonResponse(200, {{"prompt", *text}});
}

HttpResponse Api::Embeddings(Exchange& ex) {
  if (!embeddings_) return Error(501, "embeddings are not available for this model");
  const http::Fields f(ex.body);
  RETURN_IF_API_ERROR_RESPONSE(RejectUnknownFields(ex.body, kEmbeddingFields));
  RETURN_IF_API_ERROR_RESPONSE(f.Required("input"));
  static constexpr std::string_view kFormats[] = {"float", "base64"};
  std::string format = "float", user;
  int64_t dims = engine_->hidden_dim();
  RETURN_IF_API_ERROR_RESPONSE(f.Enum("encoding_format", kFormats, &format));
  RETURN_IF_API_ERROR_RESPONSE(f.Int("dimensions", 1, engine_->hidden_dim(), &dims));
  RETURN_IF_API_ERROR_RESPONSE(f.String("user", &user));  // accepted and ignored, as documented
  const bool base64 = format == "base64";
  std::shared_ptr<const lora::Adapter> adapter;
  if (auto bad = ResolveAdapter(ex.body, &adapter)) return std::move(*bad);
  auto inputs = EmbeddingInputs(*f.Find("input"), *model_.tok);
  if (!inputs.ok()) return http::ErrorResponse(inputs.error());
  int64_t total = 0;
  for (size_t i = 0; i < inputs->size(); ++i) {
    const std::vector<int32_t>& tokens = (*inputs)[i];
    if (tokens.empty()) return Error(400, "input: an input is empty", "input");
    if (static_cast<int64_t>(tokens.size()) > model_.max_model_len)
      return Error(400,
                   fmt::format("input: input {} has {} tokens, more than the context size of {}", i,
                               tokens.size(), model_.max_model_len),
                   "input");
    total += static_cast<int64_t>(tokens.size());
  }
  // Answered by EmbeddingJobs' worker once the engine has computed every input.
  std::shared_ptr<http::Responder> out = ex.out;
  const std::string model_name = adapter ? adapter->name() : model_.name;
  auto done = [this, out, base64, total, dims, model_name](EmbeddingResult result) {
    HttpResponse r;
    try {
      for (auto& v : result.vectors) ShortenEmbedding(&v, static_cast<size_t>(dims));
      r = result.status.ok() ? EmbeddingResponse(result.vectors, base64, total, model_name)
                             : FromEngineStatus(result.status);
    } catch (...) {  // the last-resort guard of this worker thread (never expected to fire)
      OnInternalError("POST", "/v1/embeddings");
      out->Respond(http::ErrorResponse(500, "internal error"));
      return;
    }
    metrics_.Add("strata:http_requests_total",
                 http::Labels({{"model_name", model_.name},
                               {"route", "/v1/embeddings"},
                               {"status", std::to_string(r.status)}}),
                 1);
    out->Respond(std::move(r));
  };
  Status s = embeddings_->Submit(std::move(*inputs), engine::sched::Priority::kSilver, out,
                                 std::move(done), adapter);
  if (!s.ok()) {
    HttpResponse r = FromEngineStatus(s);
    if (r.status == 429)
      r.headers.emplace_back("Retry-After", std::to_string(options_.retry_after_s));
    return r;
  }
  if (adapter) CountLoraRequest(*adapter);
  HttpResponse r;
  r.status = http::kDeferred;
  return r;
}

HttpResponse Api::EmbeddingResponse(const std::vector<std::vector<float>>& vectors, bool base64,
                                    int64_t total, const std::string& model) const {
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    const std::vector<float>& e = vectors[i];
    if (base64) {
      std::string raw(e.size() * sizeof(float), '\0');
      std::memcpy(raw.data(), e.data(), raw.size());  // little-endian float32, as OpenAI sends it
      data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", Base64(raw)}});
    } else {
      data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", e}});
    }
  }
  return JsonResponse(200, {{"object", "list"},
                            {"data", data},
                            {"model", model},
                            {"usage", {{"prompt_tokens", total}, {"total_tokens", total}}}});
}

void Api::DeclareVllmMetrics() {
  // vLLM's info gauge has exactly these three labels.
  metrics_.Mirror("strata:lora_requests_info", "vllm:lora_requests_info",
                  "Running stats on lora requests.", {},
                  {"max_lora", "waiting_lora_adapters", "running_lora_adapters"}, "");
  const std::string engine_labels = http::Labels({{"model_name", model_.name}, {"engine", "0"}});
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
        buckets = OneTwoFiveBuckets(model_.max_model_len);
        break;
    }
    const bool by_reason = std::string_view(m.strata) == "strata:request_success_total";
    std::vector<std::string> keep = {"model_name"};
    if (by_reason) keep.emplace_back("finished_reason");
    metrics_.Mirror(m.strata, m.vllm, m.help, std::move(buckets), std::move(keep),
                    http::Labels({{"engine", "0"}}));
    if (!by_reason) {
      metrics_.Touch(m.vllm, engine_labels);
      continue;
    }
    for (const char* reason : kVllmFinishReasons)
      metrics_.Touch(
          m.vllm, http::Labels(
                      {{"model_name", model_.name}, {"finished_reason", reason}, {"engine", "0"}}));
  }
}

void Api::RefreshEngineGauges() {
  auto s = engine_->Stats();
  metrics_.Set("strata:num_requests_running", model_labels_, s.running_requests);
  metrics_.Set("strata:num_requests_waiting", model_labels_, s.waiting_requests);
  metrics_.Set("strata:kv_cache_usage_perc", model_labels_, s.kv_usage);
  metrics_.Set("strata:prefix_cache_queries_total", model_labels_,
               static_cast<double>(s.prefix_query_tokens));
  // Hit rate = hits / queries counts every reused token, whichever layer served it.
  metrics_.Set("strata:prefix_cache_hits_total", model_labels_,
               static_cast<double>(s.prefix_hit_tokens + s.tier_hit_tokens));
  metrics_.Set("strata:prefix_cache_pool_hits_total", model_labels_,
               static_cast<double>(s.prefix_hit_tokens));
  metrics_.Set("strata:num_preemptions_total", model_labels_, static_cast<double>(s.preemptions));
  metrics_.Set("strata:engine_steps_total", model_labels_, static_cast<double>(s.steps));
  metrics_.Set("strata:engine_tokens_computed_total", model_labels_,
               static_cast<double>(s.tokens_computed));
  if (options_.adapters) RefreshLoraGauges(s);
  if (!options_.tier_stats) return;
  auto ts = options_.tier_stats();
  if (!ts) return;
  metrics_.Set("strata:kv_tier_hit_tokens_total", model_labels_,
               static_cast<double>(s.tier_hit_tokens));
  metrics_.Set("strata:kv_tier_prefetch_timeouts_total", model_labels_,
               static_cast<double>(s.tier_prefetch_timeouts));
  RefreshTierGauges(*ts);
}

void Api::RefreshTierGauges(const engine::kvtier::TieredKvStats& stats) {
  const engine::kvtier::TieredKvStats* ts = &stats;
  metrics_.Set("strata:kv_tier_queue_drops_total", model_labels_,
               static_cast<double>(ts->queue_drops));
  metrics_.Set("strata:kv_tier_queued_writes", model_labels_,
               static_cast<double>(ts->queued_writes));
  auto mean = [](double total, int64_t ops) {
    return ops ? total / static_cast<double>(ops) : 0.0;
  };
  for (const engine::kvtier::TierStats* t : {&ts->ram, &ts->disk, &ts->redis}) {
    if (!t->enabled) continue;
    const std::string l = http::Labels({{"model_name", model_.name}, {"kv_tier", t->name}});
    metrics_.Set("strata:kv_tier_hits_total", l, static_cast<double>(t->hits));
    metrics_.Set("strata:kv_tier_misses_total", l, static_cast<double>(t->misses));
    metrics_.Set("strata:kv_tier_bytes_in_total", l, static_cast<double>(t->bytes_in));
    metrics_.Set("strata:kv_tier_bytes_out_total", l, static_cast<double>(t->bytes_out));
    metrics_.Set("strata:kv_tier_evictions_total", l, static_cast<double>(t->evictions));
    metrics_.Set("strata:kv_tier_expirations_total", l, static_cast<double>(t->expirations));
    metrics_.Set("strata:kv_tier_corrupt_total", l, static_cast<double>(t->corrupt));
    metrics_.Set("strata:kv_tier_errors_total", l, static_cast<double>(t->errors));
    metrics_.Set("strata:kv_tier_up", l, t->up ? 1 : 0);
    metrics_.Set("strata:kv_tier_entries", l, static_cast<double>(t->entries));
    metrics_.Set("strata:kv_tier_bytes_used", l, static_cast<double>(t->bytes_used));
    metrics_.Set("strata:kv_tier_read_seconds_mean", l, mean(t->read_seconds_total, t->read_ops));
    metrics_.Set("strata:kv_tier_write_seconds_mean", l,
                 mean(t->write_seconds_total, t->write_ops));
  }
}

}  // namespace strata::server
