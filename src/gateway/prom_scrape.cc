#include "gateway/prom_scrape.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace strata::gateway {
namespace {

bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
void SkipSpaces(std::string_view s, size_t* i) {
  while (*i < s.size() && (s[*i] == ' ' || s[*i] == '\t')) ++*i;
}

std::string_view ReadName(std::string_view s, size_t* i) {
  size_t start = *i;
  if (*i >= s.size() || !IsNameStart(s[*i])) return {};
  while (*i < s.size() && IsNameChar(s[*i])) ++*i;
  return s.substr(start, *i - start);
}

// Reads `"..."` at s[*i] with the format's escapes into *out.
Status ReadQuoted(std::string_view s, size_t* i, std::string* out) {
  if (*i >= s.size() || s[*i] != '"') return Status::InvalidArgument("label value must be quoted");
  for (++*i; *i < s.size(); ++*i) {
    char c = s[*i];
    if (c == '"') {
      ++*i;
      return Status::Ok();
    }
    if (c == '\\') {
      if (++*i >= s.size()) break;
      char e = s[*i];
      out->push_back(e == 'n' ? '\n' : e);  // \\ -> \, \" -> ", unknown escapes kept as the char
      continue;
    }
    out->push_back(c);
  }
  return Status::InvalidArgument("unterminated label value");
}

Status ReadLabels(std::string_view s, size_t* i, PromSample* out) {
  ++*i;  // '{'
  while (true) {
    SkipSpaces(s, i);
    if (*i < s.size() && s[*i] == '}') {
      ++*i;
      return Status::Ok();
    }
    if (out->labels.size() >= kMaxPromLabels) return Status::InvalidArgument("too many labels");
    std::string_view key = ReadName(s, i);
    if (key.empty()) return Status::InvalidArgument("bad label name");
    SkipSpaces(s, i);
    if (*i >= s.size() || s[*i] != '=') return Status::InvalidArgument("expected '=' after label");
    ++*i;
    SkipSpaces(s, i);
    std::string value;
    if (Status st = ReadQuoted(s, i, &value); !st.ok()) return st;
    out->labels.emplace_back(std::string(key), std::move(value));
    SkipSpaces(s, i);
    if (*i < s.size() && s[*i] == ',')
      ++*i;
    else if (*i >= s.size() || s[*i] != '}')
      return Status::InvalidArgument("expected ',' or '}' in labels");
  }
}

Result<double> ParseValue(std::string_view tok) {
  if (tok == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (tok == "+Inf" || tok == "Inf") return std::numeric_limits<double>::infinity();
  if (tok == "-Inf") return -std::numeric_limits<double>::infinity();
  if (tok.empty() || tok.size() > 64) return Status::InvalidArgument("bad sample value");
  std::string buf(tok);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(buf.c_str(), &end);
  // strtod also accepts hex floats, "inf" and "nan" spellings: only plain decimal is the format.
  bool plain = buf.find_first_not_of("0123456789+-.eE") == std::string::npos;
  if (end != buf.c_str() + buf.size() || !plain || errno == ERANGE)
    return Status::InvalidArgument(fmt::format("bad sample value '{}'", buf.substr(0, 32)));
  return v;
}

Result<PromSample> ParseSampleLine(std::string_view line) {
  PromSample s;
  size_t i = 0;
  std::string_view name = ReadName(line, &i);
  if (name.empty()) return Status::InvalidArgument("expected a metric name");
  s.name = std::string(name);
  SkipSpaces(line, &i);
  if (i < line.size() && line[i] == '{') {
    if (Status st = ReadLabels(line, &i, &s); !st.ok()) return st;
  }
  SkipSpaces(line, &i);
  size_t start = i;
  while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
  Result<double> v = ParseValue(line.substr(start, i - start));
  if (!v.ok()) return v.status();
  s.value = *v;
  SkipSpaces(line, &i);
  if (i < line.size()) {  // optional integer timestamp (ignored)
    std::string_view ts = line.substr(i);
    while (!ts.empty() && (ts.back() == ' ' || ts.back() == '\t')) ts.remove_suffix(1);
    size_t digits = ts.find_first_not_of("-0123456789");
    if (ts.empty() || digits != std::string_view::npos)
      return Status::InvalidArgument("junk after the sample value");
  }
  return s;
}

// Folds the finite values of the samples named `name` into 0 with add(acc, value, any_before);
// *found says whether there was one.
template <typename Add>
double FoldPromSamples(const std::vector<PromSample>& samples, std::string_view name, bool* found,
                       Add add) {
  double acc = 0;
  bool any = false;
  for (const PromSample& s : samples) {
    if (s.name != name || !std::isfinite(s.value)) continue;
    acc = add(acc, s.value, any);
    any = true;
  }
  if (found) *found = any;
  return acc;
}

}  // namespace

Result<std::vector<PromSample>> ParsePromText(std::string_view text) {
  std::vector<PromSample> out;
  size_t line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    if (out.size() >= kMaxPromLines)
      return Status::InvalidArgument(fmt::format("more than {} samples", kMaxPromLines));
    Result<PromSample> s = ParseSampleLine(line.substr(first));
    if (!s.ok())
      return Status::InvalidArgument(fmt::format("line {}: {}", line_no, s.status().message()));
    out.push_back(std::move(*s));
  }
  return out;
}

double SumPromSamples(const std::vector<PromSample>& samples, std::string_view name, bool* found) {
  return FoldPromSamples(samples, name, found, [](double sum, double v, bool) { return sum + v; });
}

// A digest label longer than this is ignored (the engine's are 32 hex characters).
constexpr size_t kMaxPromDigestBytes = 256;

PromLoraAdapters ReadLoraAdapters(const std::vector<PromSample>& samples) {
  PromLoraAdapters out;
  for (const PromSample& s : samples) {
    if (s.name == "strata:lora_requests_info") out.published = true;
    if (s.name != "strata:lora_adapter_active") continue;
    out.published = true;
    std::string name, digest;
    for (const auto& [key, value] : s.labels) {
      if (key == "adapter") name = value;
      if (key == "digest") digest = value;
    }
    if (name.empty() || out.registered.size() >= kMaxPromAdapters) continue;
    out.registered.push_back(name);
    if (std::isfinite(s.value) && s.value >= 0.5) out.active.push_back(name);
    if (!digest.empty() && digest.size() <= kMaxPromDigestBytes)
      out.digests.emplace_back(name, digest);
  }
  std::sort(out.digests.begin(), out.digests.end());
  out.digests.erase(std::unique(out.digests.begin(), out.digests.end(),
                                [](const auto& a, const auto& b) { return a.first == b.first; }),
                    out.digests.end());
  for (auto* v : {&out.registered, &out.active}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  return out;
}

double MaxPromSamples(const std::vector<PromSample>& samples, std::string_view name, bool* found) {
  return FoldPromSamples(samples, name, found,
                         [](double mx, double v, bool any) { return any ? std::max(mx, v) : v; });
}

}  // namespace strata::gateway
