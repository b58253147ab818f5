// Typed, non-throwing reads of a JSON request body's fields: the one accessor every route uses for
// client data (never nlohmann's value()/get<T>() on an unchecked value, which throw on a wrong
// type).
//
// Contract: a field that is absent or JSON null leaves *out untouched (the caller's default). A
// present field of the wrong type or out of range yields an ApiError (InvalidArgument, HTTP 400)
// whose message starts with the field's name and whose `param` is that name; nested objects read
// through a Fields built with a prefix name their fields "outer.inner". Element helpers (AsInt,
// AsString, TokenIds) do the same for array elements, given the param to name.
// Ownership: Fields borrows the object; it must outlive the Fields.
// Thread contract: plain const functions, no shared state.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "http/openai_error.h"

namespace strata::http {

// A numeric range, closed unless marked open at an end.
struct Range {
  double lo, hi;
  bool lo_open = false, hi_open = false;
  bool Contains(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  std::string Describe() const;  // "[0, 2]", "(0, 1]"
};

class Fields {
 public:
  // `obj` need not be an object: then every field reads as absent (check IsObject first where a
  // non-object must be an error).
  explicit Fields(const nlohmann::json& obj, std::string prefix = {})
      : obj_(obj), prefix_(std::move(prefix)) {}

  bool IsObject() const { return obj_.is_object(); }
  // The field's value, or nullptr when absent or JSON null.
  const nlohmann::json* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }
  std::string Param(std::string_view key) const;                      // prefix + key
  ApiError Error(std::string_view key, std::string_view what) const;  // 400 about that field

  ApiError Bool(std::string_view key, bool* out) const;
  ApiError Int(std::string_view key, int64_t lo, int64_t hi, std::optional<int64_t>* out) const;
  ApiError Int(std::string_view key, int64_t lo, int64_t hi, int* out) const;
  ApiError Int(std::string_view key, int64_t lo, int64_t hi, int64_t* out) const;
  // A finite number within `range`.
  ApiError Float(std::string_view key, Range range, float* out) const;
  ApiError Double(std::string_view key, Range range, double* out) const;
  ApiError String(std::string_view key, std::string* out) const;
  // A string that is one of `allowed`.
  ApiError Enum(std::string_view key, std::span<const std::string_view> allowed,
                std::string* out) const;
  // Present and an object / an array: *out points into the body; absent leaves *out untouched.
  ApiError Object(std::string_view key, const nlohmann::json** out) const;
  ApiError Array(std::string_view key, const nlohmann::json** out) const;
  // Absent or null: "<key>: is required".
  ApiError Required(std::string_view key) const;

 private:
  const nlohmann::json& obj_;
  std::string prefix_;
};

// Element readers (values inside arrays), naming `param` in their errors.
ApiResult<int64_t> AsInt(const nlohmann::json& v, std::string_view param, int64_t lo, int64_t hi);
ApiResult<std::string> AsString(const nlohmann::json& v, std::string_view param);
// An array of token ids, each in [0, n_vocab).
ApiResult<std::vector<int32_t>> TokenIds(const nlohmann::json& v, std::string_view param,
                                         size_t n_vocab);

}  // namespace strata::http
