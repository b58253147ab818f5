// The strict YAML decoders of yamlcfg/yaml_decode.h.
#include "yamlcfg/yaml_decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <fstream>

#include "base/memory_size.h"

namespace strata::yamlcfg {

Status Bad(const std::string& path, std::string_view what) {
  return Status::InvalidArgument((path.empty() ? std::string("(top level)") : path) + ": " +
                                 std::string(what));
}

std::string Join(const std::string& path, std::string_view name) {
  return path.empty() ? std::string(name) : path + "." + std::string(name);
}

std::string At(const std::string& path, size_t i) { return fmt::format("{}[{}]", path, i); }

Result<int64_t> DecodeInt(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi) {
  long long v = 0;
  if (!n.IsScalar() || !YAML::convert<long long>::decode(n, v))
    return Bad(path, fmt::format("expected an integer in [{}, {}]", lo, hi));
  if (v < lo || v > hi) return Bad(path, fmt::format("must be in [{}, {}], got {}", lo, hi, v));
  return static_cast<int64_t>(v);
}

Result<double> DecodeNumber(const YAML::Node& n, const std::string& path, double lo, double hi,
                            bool lo_open) {
  const std::string range = fmt::format("{}{}, {}]", lo_open ? "(" : "[", lo, hi);
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v))
    return Bad(path, "expected a number in " + range);
  if ((lo_open ? v <= lo : v < lo) || v > hi)
    return Bad(path, fmt::format("must be in {}, got {}", range, v));
  return v;
}

Result<bool> DecodeBool(const YAML::Node& n, const std::string& path) {
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v))
    return Bad(path, "expected true or false");
  return v;
}

Result<std::string> DecodeString(const YAML::Node& n, const std::string& path) {
  if (n.IsNull()) return std::string();
  if (!n.IsScalar()) return Bad(path, "expected a string");
  return n.Scalar();
}

Result<std::vector<std::string>> DecodeStringList(const YAML::Node& n, const std::string& path) {
  std::vector<std::string> v;
  if (n.IsNull()) return v;
  if (!n.IsSequence()) return Bad(path, "expected a list of strings");
  v.reserve(n.size());
  for (size_t i = 0; i < n.size(); ++i) {
    ASSIGN_OR_RETURN(std::string s, DecodeString(n[i], At(path, i)));
    v.push_back(std::move(s));
  }
  return v;
}

Result<std::vector<std::pair<std::string, std::string>>> DecodeStringPairs(
    const YAML::Node& n, const std::string& path) {
  return DecodePairs<std::string>(n, path, "name: value", DecodeString);
}

Result<uint64_t> DecodeSize(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) return Bad(path, "expected a size such as 2GiB");
  if (n.Scalar() == "0") return uint64_t{0};
  auto v = ParseMemorySize(n.Scalar());
  if (!v.ok()) return Bad(path, v.status().message());
  return *v;
}

Status NotAChoice(const YAML::Node& n, const std::string& path,
                  const std::vector<std::string_view>& names, Choices style) {
  std::string list = style == Choices::kOneOf ? "one of " : "";
  for (size_t i = 0; i < names.size(); ++i) {
    const bool last = i + 1 == names.size();
    if (i > 0) list += style == Choices::kEither && last ? " or " : ", ";
    list += names[i];
  }
  if (!n.IsScalar()) return Bad(path, "expected " + list);
  const std::string& got = n.Scalar();
  return Bad(path, fmt::format("expected {} (got \"{}{}\")", list, got.substr(0, 80),
                               got.size() > 80 ? "..." : ""));
}

Result<std::vector<double>> DecodeIncreasingNumbers(const YAML::Node& n, const std::string& path,
                                                    std::string_view what, double lo, double hi,
                                                    bool lo_open) {
  if (!n.IsSequence())
    return Bad(
        path, fmt::format("expected a list of {} in {}{}, {}]", what, lo_open ? "(" : "[", lo, hi));
  std::vector<double> out;
  out.reserve(n.size());
  for (size_t i = 0; i < n.size(); ++i) {
    ASSIGN_OR_RETURN(double v, DecodeNumber(n[i], At(path, i), lo, hi, lo_open));
    if (!out.empty() && v <= out.back())
      return Bad(At(path, i), fmt::format("must be greater than the step before ({})", out.back()));
    out.push_back(v);
  }
  return out;
}

namespace {

// Depth-first count; false once the budget or the depth is exceeded.
bool CountNodes(const YAML::Node& n, int depth, int max_depth, size_t* left) {
  if (*left == 0 || depth > max_depth) return false;
  --*left;
  if (n.IsSequence()) {
    for (const auto& child : n) {
      if (!CountNodes(child, depth + 1, max_depth, left)) return false;
    }
  } else if (n.IsMap()) {
    for (const auto& kv : n) {
      if (!CountNodes(kv.first, depth + 1, max_depth, left) ||
          !CountNodes(kv.second, depth + 1, max_depth, left))
        return false;
    }
  }
  return true;
}

// How a size error names the bound.
std::string BoundText(const DocumentKind& kind) {
  return kind.max_bytes_text.empty() ? fmt::format("{} bytes", kind.max_bytes)
                                     : std::string(kind.max_bytes_text);
}

}  // namespace

Status CheckNodeBudget(const YAML::Node& n, size_t max_nodes, int max_depth) {
  size_t left = max_nodes;
  if (CountNodes(n, 0, max_depth, &left)) return Status::Ok();
  return Bad("", fmt::format("the document is too large or too deep (more than {} nodes, counting "
                             "every alias use, or more than {} levels)",
                             max_nodes, max_depth));
}

Status DecodeDocument(std::string_view text, const DocumentKind& kind,
                      const std::function<Status(const YAML::Node& root)>& decode) {
  if (text.size() > kind.max_bytes) {
    const std::string what = "larger than " + BoundText(kind);
    return Status::InvalidArgument(kind.name.empty() ? what : std::string(kind.name) + ": " + what);
  }
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    if (kind.max_nodes > 0) RETURN_IF_ERROR(CheckNodeBudget(root, kind.max_nodes, kind.max_depth));
    return decode(root);
  } catch (const std::exception& e) {  // YAML::Exception (syntax, DeepRecursion), bad_alloc
    return Status::InvalidArgument(std::string("YAML error: ") + e.what());
  }
}

Result<std::string> ReadDocumentFile(const std::string& path, const DocumentKind& kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::NotFound(kind.name.empty() ? "cannot open " + path
                                              : fmt::format("cannot open {} {}", kind.name, path));
  }
  std::string text;
  char buf[64 << 10];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kind.max_bytes)
      return Status::InvalidArgument(path + ": larger than " + BoundText(kind));
  }
  if (in.bad()) return Status::IoError("cannot read " + path);
  return text;
}

std::string Suggest(std::string_view name, const std::vector<std::string_view>& known) {
  if (name.size() > 64) return "";  // no suggestion for a hostile key (the distance is O(n·m))
  auto distance = [](std::string_view a, std::string_view b) {  // Levenshtein
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  std::string_view best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
  for (std::string_view k : known) {
    const size_t d = distance(name, k);
    if (d < best_d) best = k, best_d = d;
  }
  return best.empty() ? "" : " (did you mean " + std::string(best) + "?)";
}

}  // namespace strata::yamlcfg
