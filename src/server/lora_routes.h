// LoraRoutes: the Api's LoRA part — which adapter a request names (`model` or `lora`; the chain's
// model step and the handlers' lookup), POST /v1/load_lora_adapter and /v1/unload_lora_adapter
// (vLLM's bodies and status codes), strata:lora_requests_total and the strata:lora_* gauges at
// scrape time. Without an AdapterStore (ApiOptions::adapters null) the routes are 501 and every
// adapter name is a 404.
//
// Ownership: borrows the ApiContext; owns the AdapterLoader (the one thread that reads adapter
// files), whose queued loads are dropped, and the one in progress finished, on destruction.
// Thread contract: every method may be called from any I/O thread at once (the store is
// thread-safe); a load's answer is sent from the loader's thread.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/sched/engine.h"
#include "http/chain.h"
#include "server/api_context.h"
#include "server/lora_adapters.h"

namespace strata::server {

class LoraRoutes {
 public:
  explicit LoraRoutes(ApiContext* ctx);

  // `model` of a json_body route: the base model, a registered adapter, or absent (chain step);
  // else a 404 (model_not_found).
  std::optional<http::HttpResponse> CheckModel(const http::Exchange& ex) const;
  // The adapter a request body names (`lora`, else `model` when it is not the base model): null
  // for the base model; a 404 (model_not_found) / 400 / 503 response when it cannot be used.
  std::optional<http::HttpResponse> ResolveAdapter(const nlohmann::json& body,
                                                   std::shared_ptr<const lora::Adapter>* out);
  // strata:lora_requests_total{adapter} += 1 (a request accepted for `adapter`).
  void CountRequest(const lora::Adapter& adapter);
  http::HttpResponse Load(http::Exchange& ex);
  http::HttpResponse Unload(http::Exchange& ex);
  // At scrape time, from the engine's stats (nothing without adapters).
  void RefreshGauges(const engine::sched::EngineStats& s);

 private:
  ApiContext* ctx_;
  AdapterStore* adapters_;                 // ctx_->options.adapters
  std::unique_ptr<AdapterLoader> loader_;  // with adapters_; last member: destroyed first
};

}  // namespace strata::server
