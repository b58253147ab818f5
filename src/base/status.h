// Status and Result<T>: error values that cross module boundaries instead of exceptions.
//
// Contract: a Status is either OK (no allocation) or carries a code and a message that names the
// problem (for files: the field; for requests: the parameter). An error about one field of a
// request or config also carries that field's name as a value (`field()`, set with InvalidField
// or WithField where the field is known), so an edge that reports it (the server's OpenAI
// `param`) never parses it back out of the message. Codes map one-to-one onto HTTP statuses at
// the server edge. Thread-compatible (const methods are safe to call concurrently).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace strata {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,    // 400: bad parameter, malformed input, corrupt file
  kNotFound = 2,           // 404
  kResourceExhausted = 3,  // 429
  kUnavailable = 4,        // 503
  kInternal = 5,           // 500
  kUnimplemented = 6,      // 501: a valid request for something we do not support
  kOutOfRange = 7,         // 400: value past a limit (context length, file end)
  kIoError = 8,            // 500: the OS said no
  kDeadlineExceeded = 9,   // 504: a deadline passed before the work was done
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return {StatusCode::kInvalidArgument, std::move(msg)};
  }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status ResourceExhausted(std::string msg) {
    return {StatusCode::kResourceExhausted, std::move(msg)};
  }
  static Status Unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }
  static Status Unimplemented(std::string msg) {
    return {StatusCode::kUnimplemented, std::move(msg)};
  }
  static Status OutOfRange(std::string msg) { return {StatusCode::kOutOfRange, std::move(msg)}; }
  static Status IoError(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  static Status DeadlineExceeded(std::string msg) {
    return {StatusCode::kDeadlineExceeded, std::move(msg)};
  }
  // InvalidArgument "<field>: <what>" about `field`.
  static Status InvalidField(std::string_view field, std::string_view what);

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  const std::string& message() const;
  // "INVALID_ARGUMENT: message" or "OK".
  std::string ToString() const;
  // Returns a copy with "context: " prepended to the message (the field is kept).
  Status WithContext(std::string_view context) const;
  // The field the error is about, "" when none (or OK).
  const std::string& field() const;
  // Returns a copy about `field` (an OK status stays OK).
  Status WithField(std::string field) const;

 private:
  struct Rep {
    StatusCode code;
    std::string message;
    std::string field;
  };
  std::shared_ptr<const Rep> rep_;
};

// Result<T>: a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace strata

#define STRATA_CONCAT_INNER_(a, b) a##b
#define STRATA_CONCAT_(a, b) STRATA_CONCAT_INNER_(a, b)

// The bodies of the early-return macros, shared with http/openai_error.h's ApiError ones.
// `type` and `tmp` are names, `lhs` a declaration and `error` a member function's name: none can
// be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
// Converts `expr` to a `type` and returns it from the enclosing function if it is not OK.
#define STRATA_RETURN_IF_NOT_OK_(type, expr)         \
  do {                                               \
    type strata_status_ = (expr);                    \
    if (!strata_status_.ok()) return strata_status_; \
  } while (0)
// Declares (or assigns) `lhs` from the result `expr`, or returns its `error()` when it is not OK.
#define STRATA_ASSIGN_OR_RETURN_(tmp, lhs, expr, error) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.error();                    \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)

// Returns the status from the enclosing function if it is not OK.
#define RETURN_IF_ERROR(expr) STRATA_RETURN_IF_NOT_OK_(::strata::Status, expr)

// ASSIGN_OR_RETURN(auto x, Foo()) — declares x from a Result or returns its status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_(STRATA_CONCAT_(strata_result_, __LINE__), lhs, expr, status)
