// Value factories, display formatting and the typed getters of GgufFile.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "base/enum_names.h"
#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"

namespace strata::gguf {

std::string_view ValueTypeName(ValueType t) {
  static constexpr auto kNames =
      EnumNames<ValueType::kFloat64>("u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                     "string", "array", "u64", "i64", "f64");
  return EnumName(kNames, t, "unknown");
}

namespace internal {

bool IsKnownValueType(uint32_t raw) { return raw <= static_cast<uint32_t>(ValueType::kFloat64); }

bool IsUnsignedType(ValueType t) {
  return t == ValueType::kUint8 || t == ValueType::kUint16 || t == ValueType::kUint32 ||
         t == ValueType::kUint64;
}

bool IsSignedType(ValueType t) {
  return t == ValueType::kInt8 || t == ValueType::kInt16 || t == ValueType::kInt32 ||
         t == ValueType::kInt64;
}

bool IsFloatType(ValueType t) { return t == ValueType::kFloat32 || t == ValueType::kFloat64; }

uint64_t ScalarSize(ValueType t) {
  if (t == ValueType::kString) return 8;  // a string: the length prefix alone
  if (t == ValueType::kArray) return 12;  // element type + count
  return VisitNumeric(
      t, [](auto c_type) -> uint64_t { return sizeof(typename decltype(c_type)::type); },
      []() -> uint64_t { return 1; });  // bool
}

std::string TypeDescription(const Value& v) {
  if (!v.is_array()) return std::string(ValueTypeName(v.type));
  return "array[" + std::string(ValueTypeName(v.elem_type)) + "]";
}

}  // namespace internal

// ---- Factories ----

namespace {

// A scalar of `type` holding `data`; an array of `elem` holding `data`.
Value Scalar(ValueType type, decltype(Value::data) data) {
  Value out;
  out.type = type;
  out.data = std::move(data);
  return out;
}

Value Array(ValueType elem, decltype(Value::data) data) {
  Value out = Scalar(ValueType::kArray, std::move(data));
  out.elem_type = elem;
  return out;
}

}  // namespace

Value Value::Uint(ValueType t, uint64_t v) { return Scalar(t, v); }

Value Value::Int(ValueType t, int64_t v) { return Scalar(t, v); }

Value Value::Float32(float v) { return Scalar(ValueType::kFloat32, static_cast<double>(v)); }

Value Value::Float64(double v) { return Scalar(ValueType::kFloat64, v); }

Value Value::Bool(bool v) { return Scalar(ValueType::kBool, v); }

Value Value::String(std::string v) { return Scalar(ValueType::kString, std::move(v)); }

Value Value::StringArray(std::vector<std::string> v) {
  return Array(ValueType::kString, std::move(v));
}

Value Value::Float32Array(std::vector<float> v) {
  return Array(ValueType::kFloat32, std::vector<double>(v.begin(), v.end()));
}

Value Value::Int32Array(std::vector<int32_t> v) {
  return Array(ValueType::kInt32, std::vector<int64_t>(v.begin(), v.end()));
}

Value Value::UintArray(ValueType elem, std::vector<uint64_t> v) {
  return Array(elem, std::move(v));
}

Value Value::IntArray(ValueType elem, std::vector<int64_t> v) { return Array(elem, std::move(v)); }

Value Value::BoolArray(const std::vector<bool>& v) {
  std::vector<uint8_t> bytes;
  bytes.reserve(v.size());
  for (bool b : v) bytes.push_back(b ? 1 : 0);
  return Array(ValueType::kBool, std::move(bytes));
}

Value Value::EmptyArray(ValueType elem) {
  if (internal::IsUnsignedType(elem)) return Array(elem, std::vector<uint64_t>{});
  if (internal::IsSignedType(elem)) return Array(elem, std::vector<int64_t>{});
  if (internal::IsFloatType(elem)) return Array(elem, std::vector<double>{});
  if (elem == ValueType::kBool) return Array(elem, std::vector<uint8_t>{});
  // Strings; an array of arrays is not representable and the writer refuses it.
  return Array(elem, std::vector<std::string>{});
}

size_t Value::array_size() const {
  if (!is_array()) return 0;
  return std::visit(
      [](const auto& d) -> size_t {
        using T = std::decay_t<decltype(d)>;
        if constexpr (std::is_same_v<T, std::vector<uint64_t>> ||
                      std::is_same_v<T, std::vector<int64_t>> ||
                      std::is_same_v<T, std::vector<double>> ||
                      std::is_same_v<T, std::vector<uint8_t>> ||
                      std::is_same_v<T, std::vector<std::string>>) {
          return d.size();
        } else {
          return 0;
        }
      },
      data);
}

// ---- Display ----

namespace {

constexpr size_t kMaxDisplayStringBytes = 120;

std::string FormatDouble(double v, bool as_float32) {
  // Shortest round-trip digits; plain notation for ordinary magnitudes (500000, not 5e+05).
  char buf[400];
  double mag = std::fabs(v);
  auto fmt = (v == 0 || (mag >= 1e-4 && mag < 1e15)) ? std::chars_format::fixed
                                                     : std::chars_format::general;
  std::to_chars_result r;
  if (as_float32) {
    r = std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v), fmt);
  } else {
    r = std::to_chars(buf, buf + sizeof(buf), v, fmt);
  }
  if (r.ec != std::errc()) return "?";
  return std::string(buf, r.ptr);
}

// Quotes a string, escaping control characters so that `strata info` output stays one line.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  size_t n = std::min(s.size(), kMaxDisplayStringBytes);
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  if (s.size() > n) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

template <typename Vec, typename Fmt>
std::string FormatArray(const Vec& vec, size_t max_items, Fmt fmt) {
  std::string out = "[";
  size_t shown = std::min(vec.size(), max_items);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    out += fmt(vec[i]);
  }
  if (vec.size() > shown) {
    if (shown > 0) out += ", ";
    out += "... (" + std::to_string(vec.size()) + " items)";
  }
  out += "]";
  return out;
}

}  // namespace

std::string Value::ToDisplayString(size_t max_items) const {
  if (!is_array()) {
    switch (type) {
      case ValueType::kBool:
        if (const auto* b = std::get_if<bool>(&data)) return *b ? "true" : "false";
        break;
      case ValueType::kString:
        if (const auto* s = std::get_if<std::string>(&data)) return Quote(*s);
        break;
      case ValueType::kFloat32:
      case ValueType::kFloat64:
        if (const auto* d = std::get_if<double>(&data))
          return FormatDouble(*d, type == ValueType::kFloat32);
        break;
      default:
        if (const auto* u = std::get_if<uint64_t>(&data)) return std::to_string(*u);
        if (const auto* i = std::get_if<int64_t>(&data)) return std::to_string(*i);
        break;
    }
    return "<invalid value>";
  }
  bool f32 = elem_type == ValueType::kFloat32;
  return std::visit(
      [&](const auto& d) -> std::string {
        using T = std::decay_t<decltype(d)>;
        if constexpr (std::is_same_v<T, std::vector<uint64_t>> ||
                      std::is_same_v<T, std::vector<int64_t>>) {
          return FormatArray(d, max_items, [](auto x) { return std::to_string(x); });
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          return FormatArray(d, max_items, [&](double x) { return FormatDouble(x, f32); });
        } else if constexpr (std::is_same_v<T, std::vector<uint8_t>>) {
          return FormatArray(d, max_items,
                             [](uint8_t x) { return std::string(x ? "true" : "false"); });
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          return FormatArray(d, max_items, [](const std::string& x) { return Quote(x); });
        } else {
          return "<invalid array>";
        }
      },
      data);
}

// ---- Typed getters ----

namespace {

Status WrongType(std::string_view key, const Value& v, std::string_view wanted) {
  return Status::InvalidArgument("metadata '" + std::string(key) + "': expected " +
                                 std::string(wanted) + ", found " + internal::TypeDescription(v));
}

Status Missing(std::string_view key) {
  return Status::NotFound("metadata key '" + std::string(key) + "' not found");
}

}  // namespace

const Value* GgufFile::Find(std::string_view key) const {
  auto it = std::lower_bound(kv_sorted_.begin(), kv_sorted_.end(), key,
                             [&](size_t idx, std::string_view k) { return kv_[idx].key < k; });
  if (it == kv_sorted_.end() || kv_[*it].key != key) return nullptr;
  return &kv_[*it].value;
}

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it =
      std::lower_bound(tensor_sorted_.begin(), tensor_sorted_.end(), name,
                       [&](size_t idx, std::string_view k) { return tensors_[idx].name < k; });
  if (it == tensor_sorted_.end() || tensors_[*it].name != name) return nullptr;
  return &tensors_[*it];
}

void GgufFile::ReleasePages(const void* p, size_t n) const {
  if (file_ != nullptr) file_->ReleasePages(p, n);
}

Result<std::string> GgufFile::GetString(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  const auto* s = std::get_if<std::string>(&v->data);
  if (v->type != ValueType::kString || !s) return WrongType(key, *v, "string");
  return *s;
}

Result<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  if (internal::IsUnsignedType(v->type)) {
    if (const auto* u = std::get_if<uint64_t>(&v->data)) return *u;
  }
  if (internal::IsSignedType(v->type)) {
    if (const auto* i = std::get_if<int64_t>(&v->data)) {
      if (*i < 0)
        return Status::InvalidArgument(
            "metadata '" + std::string(key) + "': expected an unsigned integer, found " +
            std::string(ValueTypeName(v->type)) + " " + std::to_string(*i));
      return static_cast<uint64_t>(*i);
    }
  }
  return WrongType(key, *v, "an unsigned integer");
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  if (internal::IsSignedType(v->type)) {
    if (const auto* i = std::get_if<int64_t>(&v->data)) return *i;
  }
  if (internal::IsUnsignedType(v->type)) {
    if (const auto* u = std::get_if<uint64_t>(&v->data)) {
      if (*u > static_cast<uint64_t>(INT64_MAX))
        return Status::InvalidArgument("metadata '" + std::string(key) + "': u64 value " +
                                       std::to_string(*u) + " does not fit in i64");
      return static_cast<int64_t>(*u);
    }
  }
  return WrongType(key, *v, "an integer");
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  if (!v->is_array()) {
    if (const auto* d = std::get_if<double>(&v->data)) return *d;
    if (const auto* u = std::get_if<uint64_t>(&v->data)) return static_cast<double>(*u);
    if (const auto* i = std::get_if<int64_t>(&v->data)) return static_cast<double>(*i);
  }
  return WrongType(key, *v, "a number");
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  const auto* b = std::get_if<bool>(&v->data);
  if (v->type != ValueType::kBool || !b) return WrongType(key, *v, "bool");
  return *b;
}

Result<std::span<const std::string>> GgufFile::GetStringArray(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  const auto* s = std::get_if<std::vector<std::string>>(&v->data);
  if (!v->is_array() || v->elem_type != ValueType::kString || !s)
    return WrongType(key, *v, "array[string]");
  return std::span<const std::string>(*s);
}

Result<std::vector<double>> GgufFile::GetFloatArray(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  if (v->is_array()) {
    if (const auto* d = std::get_if<std::vector<double>>(&v->data)) return *d;
    if (const auto* u = std::get_if<std::vector<uint64_t>>(&v->data))
      return std::vector<double>(u->begin(), u->end());
    if (const auto* i = std::get_if<std::vector<int64_t>>(&v->data))
      return std::vector<double>(i->begin(), i->end());
  }
  return WrongType(key, *v, "an array of numbers");
}

Result<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  if (v->is_array()) {
    if (const auto* i = std::get_if<std::vector<int64_t>>(&v->data)) return *i;
    if (const auto* u = std::get_if<std::vector<uint64_t>>(&v->data)) {
      std::vector<int64_t> out;
      out.reserve(u->size());
      for (size_t k = 0; k < u->size(); ++k) {
        if ((*u)[k] > static_cast<uint64_t>(INT64_MAX))
          return Status::InvalidArgument("metadata '" + std::string(key) + "': element " +
                                         std::to_string(k) + " (" + std::to_string((*u)[k]) +
                                         ") does not fit in i64");
        out.push_back(static_cast<int64_t>((*u)[k]));
      }
      return out;
    }
  }
  return WrongType(key, *v, "an array of integers");
}

Result<uint64_t> GgufFile::GetUintOr(std::string_view key, uint64_t def) const {
  if (!Has(key)) return def;
  return GetUint(key);
}

Result<double> GgufFile::GetFloatOr(std::string_view key, double def) const {
  if (!Has(key)) return def;
  return GetFloat(key);
}

Result<bool> GgufFile::GetBoolOr(std::string_view key, bool def) const {
  if (!Has(key)) return def;
  return GetBool(key);
}

Result<std::string> GgufFile::GetStringOr(std::string_view key, std::string def) const {
  if (!Has(key)) return def;
  return GetString(key);
}

}  // namespace strata::gguf
