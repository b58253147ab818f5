// Helpers shared by the parts of the Api (api.h); not part of the module's API.
// Thread contract: pure functions.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "http/openai_error.h"
#include "http/server.h"

namespace strata::server {

using SteadyTime = std::chrono::steady_clock::time_point;

inline double Seconds(SteadyTime a, SteadyTime b) {
  return std::chrono::duration<double>(b - a).count();
}

inline std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline std::string Dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

inline http::HttpResponse JsonResponse(int status, const nlohmann::json& j) {
  http::HttpResponse r;
  r.status = status;
  r.body = Dump(j);
  return r;
}

// Insertion-ordered (generation responses).
inline http::HttpResponse OrderedJsonResponse(int status, const nlohmann::ordered_json& j) {
  http::HttpResponse r;
  r.status = status;
  r.body = Dump(j);
  return r;
}

inline http::HttpResponse Error(int status, std::string_view message, std::string_view param = {}) {
  return http::ErrorResponse(status, message, param);
}

// 404 for a `model` (or `lora`, `param`) that names neither the base model `served` nor a
// registered LoRA adapter: OpenAI's body with type "NotFoundError" and code "model_not_found" (as
// vLLM answers an unknown model or adapter).
inline http::HttpResponse ModelNotFound(std::string_view name, std::string_view param,
                                        std::string_view served) {
  http::HttpResponse r;
  r.status = 404;
  r.body = http::ErrorBody(std::string(param == "lora" ? "LoRA adapter '" : "model '") +
                               std::string(name) + "' does not exist (this server serves '" +
                               std::string(served) + "' and the LoRA adapters /v1/models lists)",
                           "NotFoundError", param, "model_not_found");
  return r;
}

// In a handler: returns the 400 response of a failed field read (an http::ApiError expression).
#define RETURN_IF_API_ERROR_RESPONSE(expr)                                  \
  do {                                                                      \
    ::strata::http::ApiError api_error_ = (expr);                           \
    if (!api_error_.ok()) return ::strata::http::ErrorResponse(api_error_); \
  } while (0)

// A Status from the engine (Submit, the embedder): its code gives the HTTP status and its field
// (Status::field, set by SubmitRequest::Validate and Engine::Submit for the fields a client sets)
// the OpenAI `param`.
http::HttpResponse FromEngineStatus(const Status& s);

}  // namespace strata::server
