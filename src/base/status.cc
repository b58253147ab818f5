#include "base/status.h"

namespace strata {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case StatusCode::kIoError:
      return "IO_ERROR";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
  }
  return "UNKNOWN";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk)
    rep_ = std::make_shared<const Rep>(Rep{code, std::move(message), std::string()});
}

Status Status::InvalidField(std::string_view field, std::string_view what) {
  std::string msg(field);
  msg += ": ";
  msg += what;
  return Status(StatusCode::kInvalidArgument, std::move(msg)).WithField(std::string(field));
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

const std::string& Status::field() const {
  static const std::string kEmpty;
  return rep_ ? rep_->field : kEmpty;
}

Status Status::WithField(std::string field) const {
  if (ok()) return *this;
  Status out;
  out.rep_ = std::make_shared<const Rep>(Rep{rep_->code, rep_->message, std::move(field)});
  return out;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(rep_->code));
  s += ": ";
  s += rep_->message;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += rep_->message;
  return Status(rep_->code, std::move(msg)).WithField(rep_->field);
}

}  // namespace strata
