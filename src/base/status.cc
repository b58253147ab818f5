#include "base/status.h"

#include "base/enum_names.h"

namespace strata {

std::string_view StatusCodeName(StatusCode code) {
  static constexpr auto kNames = EnumNames<StatusCode::kDeadlineExceeded>(
      "OK", "INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL",
      "UNIMPLEMENTED", "OUT_OF_RANGE", "IO_ERROR", "DEADLINE_EXCEEDED");
  return EnumName(kNames, code, "UNKNOWN");
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
