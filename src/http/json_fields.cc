#include "http/json_fields.h"

#include <fmt/format.h>

#include <cmath>

namespace strata::http {

using nlohmann::json;

std::string Range::Describe() const {
  return fmt::format("{}{}, {}{}", lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
}

const json* Fields::Find(std::string_view key) const {
  if (!obj_.is_object()) return nullptr;
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string Fields::Param(std::string_view key) const { return prefix_ + std::string(key); }

ApiError Fields::Error(std::string_view key, std::string_view what) const {
  return ApiError::Param(Param(key), what);
}

ApiError Fields::Bool(std::string_view key, bool* out) const {
  const json* v = Find(key);
  if (!v) return {};
  if (!v->is_boolean()) return Error(key, "must be a boolean");
  *out = v->get<bool>();
  return {};
}

ApiError Fields::Int(std::string_view key, int64_t lo, int64_t hi,
                     std::optional<int64_t>* out) const {
  const json* v = Find(key);
  if (!v) return {};
  auto x = AsInt(*v, Param(key), lo, hi);
  if (!x.ok()) return x.error();
  *out = *x;
  return {};
}

ApiError Fields::Int(std::string_view key, int64_t lo, int64_t hi, int64_t* out) const {
  std::optional<int64_t> x;
  RETURN_IF_API_ERROR(Int(key, lo, hi, &x));
  if (x) *out = *x;
  return {};
}

ApiError Fields::Int(std::string_view key, int64_t lo, int64_t hi, int* out) const {
  std::optional<int64_t> x;
  RETURN_IF_API_ERROR(
      Int(key, std::max<int64_t>(lo, INT32_MIN), std::min<int64_t>(hi, INT32_MAX), &x));
  if (x) *out = static_cast<int>(*x);
  return {};
}

ApiError Fields::Double(std::string_view key, Range range, double* out) const {
  const json* v = Find(key);
  if (!v) return {};
  if (!v->is_number()) return Error(key, "must be a number");
  double d = v->get<double>();
  if (!std::isfinite(d)) return Error(key, "must be finite");
  if (!range.Contains(d)) return Error(key, "must be in " + range.Describe());
  *out = d;
  return {};
}

ApiError Fields::Float(std::string_view key, Range range, float* out) const {
  double d = 0;
  const json* v = Find(key);
  if (!v) return {};
  RETURN_IF_API_ERROR(Double(key, range, &d));
  *out = static_cast<float>(d);
  return {};
}

ApiError Fields::String(std::string_view key, std::string* out) const {
  const json* v = Find(key);
  if (!v) return {};
  if (!v->is_string()) return Error(key, "must be a string");
  *out = v->get<std::string>();
  return {};
}

ApiError Fields::Enum(std::string_view key, std::span<const std::string_view> allowed,
                      std::string* out) const {
  const json* v = Find(key);
  if (!v) return {};
  std::string names;
  for (std::string_view a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
  if (!v->is_string()) return Error(key, "must be one of " + names);
  const std::string& s = v->get_ref<const std::string&>();
  for (std::string_view a : allowed)
    if (s == a) {
      *out = s;
      return {};
    }
  return Error(key, fmt::format("must be one of {}, got '{}'", names, s.substr(0, 64)));
}

ApiError Fields::Object(std::string_view key, const json** out) const {
  const json* v = Find(key);
  if (!v) return {};
  if (!v->is_object()) return Error(key, "must be an object");
  *out = v;
  return {};
}

ApiError Fields::Array(std::string_view key, const json** out) const {
  const json* v = Find(key);
  if (!v) return {};
  if (!v->is_array()) return Error(key, "must be an array");
  *out = v;
  return {};
}

ApiError Fields::Required(std::string_view key) const {
  if (!Has(key)) return Error(key, "is required");
  return {};
}

ApiResult<int64_t> AsInt(const json& v, std::string_view param, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return ApiError::Param(param, "must be an integer");
  int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                  ? INT64_MAX
                  : v.get<int64_t>();
  if (x < lo || x > hi)
    return ApiError::Param(param, fmt::format("must be in [{}, {}], got {}", lo, hi, x));
  return x;
}

ApiResult<std::string> AsString(const json& v, std::string_view param) {
  if (!v.is_string()) return ApiError::Param(param, "must be a string");
  return v.get<std::string>();
}

ApiResult<std::vector<int32_t>> TokenIds(const json& v, std::string_view param, size_t n_vocab) {
  if (!v.is_array()) return ApiError::Param(param, "must be an array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const json& e : v) {
    if (!e.is_number_integer()) return ApiError::Param(param, "token ids must be integers");
    int64_t id = e.is_number_unsigned() && e.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                     ? INT64_MAX
                     : e.get<int64_t>();
    if (id < 0 || static_cast<uint64_t>(id) >= n_vocab)
      return ApiError::Param(
          param, fmt::format("token id {} is outside the vocabulary [0, {})", id, n_vocab));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace strata::http
