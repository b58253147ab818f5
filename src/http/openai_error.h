// OpenAI-style errors: the one place that writes the error body
// `{"error":{"message","type","param","code"}}` and maps an HTTP status to its `type` and `code`.
//
// ApiError carries a rejected request from where the error is made to where the body is written:
// the Status (code + message) plus the OpenAI `param` it concerns, as a field (never parsed back
// out of the message; by default the Status's own field()). ApiResult<T> is a T or an ApiError.
//
// Thread contract: plain values and pure functions.
// Errors: none of their own.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "base/status.h"
#include "http/server.h"

namespace strata::http {

// The body text. `param` and `code` may be empty (JSON null).
std::string ErrorBody(std::string_view message, std::string_view type, std::string_view param,
                      std::string_view code);

// The HTTP status a Status code answers with (400, 404, 429, 501, 503, else 500).
int HttpStatusOf(StatusCode code);

// A complete JSON error response for `status`, with the OpenAI `type`/`code` of that status.
HttpResponse ErrorResponse(int status, std::string_view message, std::string_view param = {});

class [[nodiscard]] ApiError {
 public:
  ApiError() = default;  // OK: no error
  // `param` "" : the status's own field (Status::field), if it has one.
  ApiError(Status status, std::string param = {})  // NOLINT(google-explicit-constructor)
      : status_(std::move(status)), param_(std::move(param)) {
    if (param_.empty()) param_ = status_.field();
  }
  // InvalidArgument "<param>: <what>" about `param`.
  static ApiError Param(std::string_view param, std::string_view what);

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& message() const { return status_.message(); }

 private:
  Status status_;
  std::string param_;
};

// The response for an error (status from its code, `param` as carried).
HttpResponse ErrorResponse(const ApiError& error);

template <typename T>
class [[nodiscard]] ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  ApiResult(ApiError error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)
  ApiResult(Status status) : v_(ApiError(std::move(status))) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  const ApiError& error() const {
    static const ApiError kOk;
    return ok() ? kOk : std::get<ApiError>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, ApiError> v_;
};

}  // namespace strata::http

// Returns the ApiError (or a Status, converted with no param) from the enclosing function if it is
// not OK.
#define RETURN_IF_API_ERROR(expr) STRATA_RETURN_IF_NOT_OK_(::strata::http::ApiError, expr)

// ASSIGN_OR_RETURN for ApiResult: declares (or assigns) `lhs` or returns the ApiError.
#define ASSIGN_OR_RETURN_API(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_(STRATA_CONCAT_(strata_api_result_, __LINE__), lhs, expr, error)
