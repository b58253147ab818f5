#include "http/openai_error.h"

#include <fmt/format.h>

#include <cstddef>
#include <iterator>
#include <nlohmann/json.hpp>

namespace strata::http {
namespace {

using nlohmann::json;

struct StatusKind {
  int status;
  std::string_view type;
  std::string_view code;
};

// OpenAI's `type` and our `code` per HTTP status; anything else is an invalid request, no code.
constexpr StatusKind kKinds[] = {
    {401, "authentication_error", "invalid_api_key"},
    {404, "not_found_error", "not_found"},
    {405, "invalid_request_error", "method_not_allowed"},
    {408, "invalid_request_error", "request_timeout"},
    {413, "invalid_request_error", "request_too_large"},
    {429, "rate_limit_error", "engine_overloaded"},
    {431, "invalid_request_error", "request_header_fields_too_large"},
    {500, "server_error", "internal_error"},
    {501, "server_error", "not_implemented"},
    {503, "service_unavailable", "unavailable"},
    {504, "timeout_error", "deadline_exceeded"},
};

}  // namespace

std::string ErrorBody(std::string_view message, std::string_view type, std::string_view param,
                      std::string_view code) {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

int HttpStatusOf(StatusCode code) {
  // Indexed by the code (kOk .. kDeadlineExceeded); kOk is not an error, so it is 500 here.
  static constexpr int kHttpStatus[] = {500, 400, 404, 429, 503, 500, 501, 400, 500, 504};
  static_assert(std::size(kHttpStatus) == static_cast<size_t>(StatusCode::kDeadlineExceeded) + 1);
  const auto i = static_cast<size_t>(code);
  return i < std::size(kHttpStatus) ? kHttpStatus[i] : 500;
}

HttpResponse ErrorResponse(int status, std::string_view message, std::string_view param) {
  std::string_view type = "invalid_request_error", code;
  for (const StatusKind& k : kKinds) {
    if (k.status != status) continue;
    type = k.type;
    code = k.code;
  }
  HttpResponse r;
  r.status = status;
  r.body = ErrorBody(message, type, param, code);
  return r;
}

ApiError ApiError::Param(std::string_view param, std::string_view what) {
  return ApiError(Status::InvalidArgument(fmt::format("{}: {}", param, what)), std::string(param));
}

HttpResponse ErrorResponse(const ApiError& error) {
  return ErrorResponse(HttpStatusOf(error.status().code()), error.message(), error.param());
}

}  // namespace strata::http
