// LoraRoutes (lora_routes.h): which adapter a request names (`model` or `lora`),
// /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's bodies and status codes), and the
// adapter metrics.
#include "server/lora_routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "http/json_fields.h"
#include "http/openai_error.h"
#include "protocol/openai/request_fields.h"
#include "server/api_internal.h"

namespace strata::server {

using http::Exchange;
using http::HttpResponse;
using nlohmann::json;

namespace {

HttpResponse TextResponse(int status, std::string text) {
  HttpResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(text);
  return r;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) {
    if (!out.empty()) out += ',';
    out += n;
  }
  return out;
}

// A load/unload body's name or path: a non-empty string (required).
http::ApiError NonEmptyString(const http::Fields& f, std::string_view key, std::string* out) {
  RETURN_IF_API_ERROR(f.Required(key));
  RETURN_IF_API_ERROR(f.String(key, out));
  if (out->empty()) return f.Error(key, "must not be empty");
  return {};
}

// strata:lora_adapter_events_total{event} (exported at zero for each from the start).
constexpr const char* kLoraEvents[] = {"load", "unload", "evict", "load_error"};

}  // namespace

LoraRoutes::LoraRoutes(ApiContext* ctx) : ctx_(ctx), adapters_(ctx->options.adapters) {
  if (!adapters_) return;
  loader_ = std::make_unique<AdapterLoader>();
  for (const char* event : kLoraEvents)
    ctx_->metrics.Touch("strata:lora_adapter_events_total",
                        http::Labels({{"model_name", ctx_->model.name}, {"event", event}}));
}

std::optional<HttpResponse> LoraRoutes::CheckModel(const Exchange& ex) const {
  if (!ex.route->json_body) return std::nullopt;
  const http::Fields f(ex.body);
  std::string m;
  RETURN_IF_API_ERROR_RESPONSE(f.String("model", &m));
  if (m.empty() || m == ctx_->model.name) return std::nullopt;
  if (adapters_ && adapters_->Contains(m)) return std::nullopt;
  return ModelNotFound(m, "model", ctx_->model.name);
}

std::optional<HttpResponse> LoraRoutes::ResolveAdapter(const json& body,
                                                       std::shared_ptr<const lora::Adapter>* out) {
  auto fields = protocol::ReadModelFields(body);
  if (!fields.ok()) return http::ErrorResponse(fields.error());
  std::string model = std::move(fields->model);
  std::string name = std::move(fields->lora);
  if (model == ctx_->model.name) model.clear();
  if (name == ctx_->model.name) name.clear();
  std::string_view param = "lora";
  if (name.empty()) {
    name = std::move(model);
    param = "model";
  } else if (!model.empty() && model != name) {
    return Error(400, fmt::format("lora: names adapter '{}' but model names '{}'", name, model),
                 "lora");
  }
  if (name.empty()) return std::nullopt;  // the base model
  if (!adapters_) return ModelNotFound(name, param, ctx_->model.name);
  auto adapter = adapters_->Get(name);
  if (adapter.ok()) {
    *out = std::move(adapter).value();  // json-access: not JSON (Result)
    return std::nullopt;
  }
  if (adapter.status().code() == StatusCode::kNotFound)
    return ModelNotFound(name, param, ctx_->model.name);
  // Registered, but its file could not be read again after a host-cache eviction (the registry's
  // Unavailable: 503).
  return Error(
      http::HttpStatusOf(adapter.status().code()),
      fmt::format("LoRA adapter '{}' could not be loaded: {}", name, adapter.status().message()));
}

void LoraRoutes::CountRequest(const lora::Adapter& adapter) {
  ctx_->metrics.Add("strata:lora_requests_total",
                    http::Labels({{"model_name", ctx_->model.name}, {"adapter", adapter.name()}}),
                    1);
}

// vLLM's /v1/load_lora_adapter: {"lora_name", "lora_path"}. The file is read on the loader's
// thread (never an I/O or the engine thread); the answer is sent from there when it is done.
HttpResponse LoraRoutes::Load(Exchange& ex) {
  if (!adapters_) return Error(501, "LoRA adapters are not enabled on this server");
  const http::Fields f(ex.body);
  std::string name, path;
  RETURN_IF_API_ERROR_RESPONSE(NonEmptyString(f, "lora_name", &name));
  RETURN_IF_API_ERROR_RESPONSE(NonEmptyString(f, "lora_path", &path));
  if (name == ctx_->model.name)
    return Error(400, fmt::format("lora_name: '{}' is the base model's name", name), "lora_name");
  if (adapters_->Contains(name))
    return Error(400, fmt::format("The lora adapter '{}' has already been loaded.", name),
                 "lora_name");
  std::shared_ptr<http::Responder> out = ex.out;
  loader_->Post([this, out, name, path] {
    ctx_->RespondFromWorker(out, "/v1/load_lora_adapter", [&] {
      const Status s = adapters_->Add(name, path);
      if (s.ok())
        return TextResponse(200,
                            fmt::format("Success: LoRA adapter '{}' added successfully.", name));
      // The name was taken meanwhile (a concurrent load), else the file was refused.
      const bool taken = adapters_->Contains(name);
      return Error(400, s.message(), taken ? "lora_name" : "lora_path");
    });
  });
  HttpResponse r;
  r.status = http::kDeferred;
  return r;
}

// vLLM's /v1/unload_lora_adapter: {"lora_name"}. Requests that hold the adapter finish with it.
HttpResponse LoraRoutes::Unload(Exchange& ex) {
  if (!adapters_) return Error(501, "LoRA adapters are not enabled on this server");
  const http::Fields f(ex.body);
  std::string name;
  RETURN_IF_API_ERROR_RESPONSE(NonEmptyString(f, "lora_name", &name));
  const Status s = adapters_->Remove(name);
  if (s.code() == StatusCode::kNotFound) {
    HttpResponse r;
    r.status = 404;
    r.body = http::ErrorBody(fmt::format("The lora adapter '{}' cannot be found.", name),
                             "NotFoundError", "lora_name", "model_not_found");
    return r;
  }
  if (!s.ok()) return Error(http::HttpStatusOf(s.code()), s.message(), "lora_name");
  return TextResponse(200, fmt::format("Success: LoRA adapter '{}' removed successfully.", name));
}

// At scrape time: the info gauge (as vLLM's: the labels carry the state, the value the time), one
// active/registered series per registered adapter, the registry's event counters.
void LoraRoutes::RefreshGauges(const engine::sched::EngineStats& s) {
  if (!adapters_) return;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  ctx_->metrics.Replace("strata:lora_requests_info",
                        {{http::Labels({{"max_lora", std::to_string(s.max_loras)},
                                        {"running_lora_adapters", JoinNames(s.running_loras)},
                                        {"waiting_lora_adapters", JoinNames(s.waiting_loras)}}),
                          now}});
  std::vector<std::pair<std::string, double>> active;
  for (const lora::AdapterInfo& a : adapters_->List()) {
    const bool on =
        std::find(s.active_loras.begin(), s.active_loras.end(), a.name) != s.active_loras.end();
    active.emplace_back(
        http::Labels({{"model_name", ctx_->model.name}, {"adapter", a.name}, {"digest", a.digest}}),
        on ? 1.0 : 0.0);
  }
  ctx_->metrics.Replace("strata:lora_adapter_active", active);
  const lora::RegistryCounters c = adapters_->counters();
  const std::pair<const char*, int64_t> events[] = {{"load", c.loads},
                                                    {"unload", c.unloads},
                                                    {"evict", c.evictions},
                                                    {"load_error", c.load_errors}};
  for (const auto& [event, count] : events)
    ctx_->metrics.Set("strata:lora_adapter_events_total",
                      http::Labels({{"model_name", ctx_->model.name}, {"event", event}}),
                      static_cast<double>(count));
}

}  // namespace strata::server
