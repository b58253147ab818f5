#include "tokenizer/chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "base/enum_names.h"

namespace strata::tokenizer::chat {

const Value* ValueDict::Find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

Value* ValueDict::Find(std::string_view key) {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void ValueDict::Clear() {
  // Move the entries out first so that destroying them cannot observe a half-cleared dict.
  std::vector<std::pair<std::string, Value>> old;
  old.swap(entries_);
  index_.clear();
}

void ValueDict::Set(std::string key, Value value) {
  if (value.depth() > max_depth_) max_depth_ = value.depth();
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

namespace {

template <typename Json>
Result<Value> ValueFromJson(const Json& j, int depth) {
  if (depth > static_cast<int>(kMaxValueDepth)) {
    return Status::OutOfRange("chat context nests deeper than " + std::to_string(kMaxValueDepth) +
                              " levels");
  }
  switch (j.type()) {
    case Json::value_t::null:
      return Value::None();
    case Json::value_t::boolean:
      return Value::Bool(j.template get<bool>());
    case Json::value_t::number_integer:
      return Value::Int(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::Float(static_cast<double>(u));
      }
      return Value::Int(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float:
      return Value::Float(j.template get<double>());
    case Json::value_t::string:
      return Value::String(j.template get<std::string>());
    case Json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) {
        ASSIGN_OR_RETURN(Value v, ValueFromJson(e, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case Json::value_t::object: {
      Value d = Value::Dict();
      for (const auto& [k, e] : j.items()) {
        ASSIGN_OR_RETURN(Value v, ValueFromJson(e, depth + 1));
        d.dict().Set(k, std::move(v));
      }
      return d;
    }
    default:
      return Status::OutOfRange("chat context holds a non-JSON value");
  }
}

}  // namespace

Result<Value> Value::FromJson(const nlohmann::ordered_json& j) { return ValueFromJson(j, 0); }
Result<Value> Value::FromJson(const nlohmann::json& j) { return ValueFromJson(j, 0); }

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0.0;
    case Kind::kString:
      return !str_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return dict_->size() != 0;
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string_view Value::TypeName() const {
  static constexpr auto kNames =
      EnumNames<Kind::kCallable>("undefined", "NoneType", "bool", "int", "float", "str", "list",
                                 "dict", "Namespace", "function");
  return EnumName(kNames, kind_, "?");
}

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form, then laid out the way Python's repr does:
  // fixed notation for exponents in [-4, 16), scientific otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e_pos = sci.find('e');
  std::string mant = sci.substr(0, e_pos);
  int exp = std::stoi(sci.substr(e_pos + 1));
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits.push_back(c);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (digits.size() <= static_cast<size_t>(exp) + 1) {
        out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
      }
    } else {
      out += "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return out;
}

namespace {

// Decodes one UTF-8 code point at s[i]; advances i. Invalid bytes decode as themselves.
uint32_t DecodeAt(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + len > s.size()) len = 1;
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  i += len;
  return cp;
}

void AppendPyStrRepr(std::string& out, const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  out.push_back(quote);
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out.push_back(ch);
    }
  }
  out.push_back(quote);
}

void AppendRepr(std::string& out, const Value& v, bool top_level_str);

void AppendRepr(std::string& out, const Value& v, bool top_level_str) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      break;
    case Value::Kind::kNone:
      out += "None";
      break;
    case Value::Kind::kBool:
      out += v.as_bool() ? "True" : "False";
      break;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      break;
    case Value::Kind::kFloat:
      out += FloatRepr(v.as_float());
      break;
    case Value::Kind::kString:
      if (top_level_str) {
        out += v.str();
      } else {
        AppendPyStrRepr(out, v.str());
      }
      break;
    case Value::Kind::kList: {
      out.push_back('[');
      bool first = true;
      for (const Value& e : v.list()) {
        if (!first) out += ", ";
        first = false;
        AppendRepr(out, e, false);
      }
      out.push_back(']');
      break;
    }
    case Value::Kind::kDict: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, e] : v.dict().entries()) {
        if (!first) out += ", ";
        first = false;
        AppendPyStrRepr(out, k);
        out += ": ";
        AppendRepr(out, e, false);
      }
      out.push_back('}');
      break;
    }
    case Value::Kind::kNamespace:
      out += "<Namespace>";
      break;
    case Value::Kind::kCallable:
      out += "<function " + v.callable()->name + ">";
      break;
  }
}

void AppendJsonString(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      case '\b':
        out += "\\b";
        ++i;
        continue;
      case '\f':
        out += "\\f";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\u%04x", c);
      out += b;
      ++i;
      continue;
    }
    if (c < 0x80 || !ensure_ascii) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    uint32_t cp = DecodeAt(s, i);
    char b[16];
    if (cp >= 0x10000) {
      uint32_t v = cp - 0x10000;
      std::snprintf(b, sizeof(b), "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
    } else {
      std::snprintf(b, sizeof(b), "\\u%04x", cp);
    }
    out += b;
  }
  out.push_back('"');
}

Status AppendJson(std::string& out, const Value& v, const JsonDumpOptions& o, int level,
                  size_t max_bytes) {
  if (out.size() > max_bytes) {
    return Status::OutOfRange("tojson: output exceeds " + std::to_string(max_bytes) + " bytes");
  }
  if (level > 256) return Status::OutOfRange("tojson: value nested too deeply");
  auto newline = [&](int lvl) {
    if (o.indent < 0) return;
    out.push_back('\n');
    out.append(static_cast<size_t>(o.indent) * lvl, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return Status::Ok();
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return Status::Ok();
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return Status::Ok();
    case Value::Kind::kFloat: {
      double f = v.as_float();
      if (std::isnan(f))
        out += "NaN";
      else if (std::isinf(f))
        out += f > 0 ? "Infinity" : "-Infinity";
      else
        out += FloatRepr(f);
      return Status::Ok();
    }
    case Value::Kind::kString:
      AppendJsonString(out, v.str(), o.ensure_ascii);
      return Status::Ok();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        out += "[]";
        return Status::Ok();
      }
      out.push_back('[');
      bool first = true;
      for (const Value& e : v.list()) {
        if (!first) out += o.item_sep;
        first = false;
        newline(level + 1);
        RETURN_IF_ERROR(AppendJson(out, e, o, level + 1, max_bytes));
      }
      newline(level);
      out.push_back(']');
      return Status::Ok();
    }
    case Value::Kind::kDict: {
      if (v.dict().size() == 0) {
        out += "{}";
        return Status::Ok();
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.dict().entries()) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out.push_back('{');
      bool first = true;
      for (const auto* e : entries) {
        if (!first) out += o.item_sep;
        first = false;
        newline(level + 1);
        AppendJsonString(out, e->first, o.ensure_ascii);
        out += o.key_sep;
        RETURN_IF_ERROR(AppendJson(out, e->second, o, level + 1, max_bytes));
      }
      newline(level);
      out.push_back('}');
      return Status::Ok();
    }
    default:
      return Status::InvalidArgument("tojson: object of type " + std::string(v.TypeName()) +
                                     " is not JSON serializable");
  }
}

}  // namespace

std::string ToPyStr(const Value& v) {
  std::string out;
  AppendRepr(out, v, true);
  return out;
}

std::string ToPyRepr(const Value& v) {
  std::string out;
  AppendRepr(out, v, false);
  return out;
}

Result<std::string> ToJson(const Value& v, const JsonDumpOptions& opts, size_t max_bytes) {
  std::string out;
  RETURN_IF_ERROR(AppendJson(out, v, opts, 0, max_bytes));
  if (out.size() > max_bytes) {
    return Status::OutOfRange("tojson: output exceeds " + std::to_string(max_bytes) + " bytes");
  }
  return out;
}

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      const ValueList& x = a.list();
      const ValueList& y = b.list();
      if (&x == &y) return true;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (&a.dict() == &b.dict()) return true;
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, e] : a.dict().entries()) {
        const Value* o = b.dict().Find(k);
        if (o == nullptr || !Equals(e, *o)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.dict() == &b.dict();
    case Value::Kind::kCallable:
      return a.callable() == b.callable();
    default:
      return false;
  }
}

Result<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // UTF-8 byte order == code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const ValueList& x = a.list();
    const ValueList& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return Status::InvalidArgument("cannot compare " + std::string(a.TypeName()) + " with " +
                                 std::string(b.TypeName()));
}

std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offs;
  size_t i = 0;
  while (i < s.size()) {
    offs.push_back(i);
    DecodeAt(s, i);
  }
  offs.push_back(s.size());
  return offs;
}

uint32_t DecodeUtf8At(std::string_view s, size_t* i) { return DecodeAt(s, *i); }

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  size_t i = 0;
  while (i < s.size()) {
    DecodeAt(s, i);
    ++n;
  }
  return n;
}

}  // namespace strata::tokenizer::chat
