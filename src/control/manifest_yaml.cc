#include "control/manifest_yaml.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace strata::control {

namespace {

// Plain words a YAML 1.1 or 1.2 reader resolves to a boolean or null.
constexpr std::array<std::string_view, 11> kReservedWords = {
    "y", "n", "yes", "no", "on", "off", "true", "false", "null", "~", "nan"};

bool IsReservedWord(std::string_view s) {
  std::string lower(s);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::find(kReservedWords.begin(), kReservedWords.end(), lower) != kReservedWords.end();
}

// A plain scalar here starts with a letter or '/' (never a digit, sign or indicator, so no
// number, timestamp or sexagesimal reading) and has only [A-Za-z0-9_./=-] and ':' not at the end.
bool IsSafePlain(std::string_view s) {
  if (s.empty() || IsReservedWord(s)) return false;
  const auto first = static_cast<unsigned char>(s.front());
  if (!std::isalpha(first) && first != '/') return false;
  if (s.back() == ':') return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '.' || c == '/' || c == '=' || c == '-' || c == ':';
  });
}

std::string Quoted(const std::string& s) {
  return OrderedJson(s).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

std::string KeyText(const std::string& k) { return IsSafePlain(k) ? k : Quoted(k); }

// Whether `s` can be a literal block: more than one line, printable (tabs and UTF-8 allowed), the
// first line not starting with a space (that would need an indentation indicator), and at least
// one non-newline character.
bool FitsLiteralBlock(const std::string& s) {
  if (s.find('\n') == std::string::npos || s.find_first_not_of('\n') == std::string::npos)
    return false;
  if (s.front() == ' ') return false;
  return std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f);
  });
}

// " |\n" + the lines at `indent` (the header's chomping indicator from the trailing newlines).
std::string LiteralBlock(const std::string& s, int indent) {
  const size_t end = s.find_last_not_of('\n');
  const size_t trailing = s.size() - end - 1;
  std::string out = trailing == 0 ? " |-\n" : trailing == 1 ? " |\n" : " |+\n";
  const std::string pad(static_cast<size_t>(indent), ' ');
  size_t pos = 0;
  while (pos <= end) {
    size_t nl = s.find('\n', pos);
    if (nl == std::string::npos || nl > end) nl = end + 1;
    if (nl > pos) out += pad + s.substr(pos, nl - pos);
    out += '\n';
    pos = nl + 1;
  }
  for (size_t i = 1; i < trailing; ++i) out += '\n';
  return out;
}

std::string ScalarText(const OrderedJson& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();  // json-access: is_string
    return IsSafePlain(s) ? s : Quoted(s);
  }
  if (v.is_object()) return "{}";  // only empty containers reach here
  if (v.is_array()) return "[]";
  return v.dump();
}

bool IsBlock(const OrderedJson& v) { return (v.is_object() || v.is_array()) && !v.empty(); }

bool IsLiteral(const OrderedJson& v) {
  return v.is_string() &&
         FitsLiteralBlock(v.get_ref<const std::string&>());  // json-access: is_string
}

void Emit(const OrderedJson& v, int indent, std::string* out);

// The value after "key:" or "- " (scalar on the line, or a nested block below).
void EmitValue(const OrderedJson& v, int indent, std::string* out) {
  if (IsLiteral(v)) {
    *out += LiteralBlock(v.get_ref<const std::string&>(), indent);  // json-access: is_string
  } else if (IsBlock(v)) {
    *out += '\n';
    Emit(v, indent, out);
  } else {
    *out += ' ' + ScalarText(v) + '\n';
  }
}

void Emit(const OrderedJson& v, int indent, std::string* out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (v.is_object()) {
    for (const auto& [k, item] : v.items()) {
      *out += pad + KeyText(k) + ':';
      EmitValue(item, indent + 2, out);
    }
    return;
  }
  for (const auto& item : v) {  // an array
    if (!IsBlock(item)) {
      *out += pad + '-';
      EmitValue(item, indent + 2, out);
      continue;
    }
    // A nested block starts on the dash's line: emit it two deeper and put "- " in its indent.
    std::string nested;
    Emit(item, indent + 2, &nested);
    *out += pad + "- " + nested.substr(static_cast<size_t>(indent) + 2);
  }
}

constexpr int kMaxDepth = 64;
constexpr size_t kMaxNodes = 200000;

Status Convert(const YAML::Node& n, int depth, size_t* nodes, OrderedJson* out) {
  if (depth > kMaxDepth) return Status::InvalidArgument("nested too deeply");
  if (++*nodes > kMaxNodes) return Status::InvalidArgument("too many nodes");
  switch (n.Type()) {
    case YAML::NodeType::Map:
      *out = OrderedJson::object();
      for (const auto& kv : n) {
        OrderedJson value;
        RETURN_IF_ERROR(Convert(kv.second, depth + 1, nodes, &value));
        (*out)[kv.first.Scalar()] = std::move(value);
      }
      return Status::Ok();
    case YAML::NodeType::Sequence:
      *out = OrderedJson::array();
      for (const auto& item : n) {
        OrderedJson value;
        RETURN_IF_ERROR(Convert(item, depth + 1, nodes, &value));
        out->push_back(std::move(value));
      }
      return Status::Ok();
    case YAML::NodeType::Scalar:
      *out = n.Scalar();
      return Status::Ok();
    default:
      *out = nullptr;
      return Status::Ok();
  }
}

}  // namespace

std::string ToYaml(const OrderedJson& value) {
  std::string out;
  if (IsBlock(value)) {
    Emit(value, 0, &out);
  } else {
    out = ScalarText(value) + '\n';
  }
  return out;
}

Result<OrderedJson> YamlToJson(std::string_view yaml_text, std::string_view what) {
  const std::string where(what);
  if (yaml_text.size() > kMaxYamlToJsonBytes)
    return Status::InvalidArgument(where + ": larger than " + std::to_string(kMaxYamlToJsonBytes) +
                                   " bytes");
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(where + ": not YAML (" + e.what() + ")");
  }
  OrderedJson out;
  size_t nodes = 0;
  if (Status s = Convert(root, 0, &nodes, &out); !s.ok())
    return Status::InvalidArgument(where + ": " + s.message());
  return out;
}

}  // namespace strata::control
