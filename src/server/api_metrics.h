// ApiMetrics: the families /metrics exposes (docs/metrics.md) — declared at construction, with
// their vLLM mirror under `--metrics-compat vllm` — and the gauges set from the engine, the KV
// tiers and the tracer at scrape time. (The LoRA gauges are LoraRoutes'.)
//
// Ownership: borrows the ApiContext (its registry holds the series).
// Thread contract: the Refresh* calls run on the I/O thread of a /metrics request; several may run
// at once (the registry is thread-safe, each sets whole values).
#pragma once

#include "engine/kvtier/tiered_cache.h"
#include "engine/sched/engine.h"
#include "server/api_context.h"

namespace strata::server {

class ApiMetrics {
 public:
  explicit ApiMetrics(ApiContext* ctx);

  // The engine's gauges and counters from one stats snapshot.
  void RefreshEngineGauges(const engine::sched::EngineStats& s);
  // The KV tiers' families (ApiOptions::tier_stats; nothing without tiers).
  void RefreshTierGauges(const engine::sched::EngineStats& s);
  // strata:trace_spans_* (ApiOptions::tracer; nothing without one).
  void RefreshTracerCounters();

 private:
  void DeclareVllmMetrics();  // --metrics-compat vllm (constructor only)
  void SetTierStats(const engine::kvtier::TieredKvStats& stats);

  ApiContext* ctx_;
};

}  // namespace strata::server
