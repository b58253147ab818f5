#include "http/prometheus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace strata::http {

std::string Labels(std::initializer_list<std::pair<std::string_view, std::string_view>> kv) {
  std::string out;
  for (const auto& [k, v] : kv) {
    if (!out.empty()) out += ',';
    out += k;
    out += "=\"";
    for (char c : v) {
      if (c == '\\')
        out += "\\\\";
      else if (c == '"')
        out += "\\\"";
      else if (c == '\n')
        out += "\\n";
      else
        out += c;
    }
    out += '"';
  }
  return out;
}

void MetricsRegistry::Declare(std::string name, Type type, std::string help,
                              std::vector<double> buckets) {
  MutexLock lock(&mu_);
  Family& f = families_[std::move(name)];
  f.type = type;
  f.help = std::move(help);
  f.buckets = std::move(buckets);
}

MetricsRegistry::Family* MetricsRegistry::Find(std::string_view name) {
  auto it = families_.find(name);
  return it == families_.end() ? nullptr : &it->second;
}

namespace {

// The `k="v"` pairs of a Labels() text, each as its whole text; values keep their escapes.
std::vector<std::pair<std::string_view, std::string_view>> SplitLabels(std::string_view text) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t eq = text.find('=', i);
    if (eq == std::string_view::npos || eq + 1 >= text.size() || text[eq + 1] != '"') break;
    size_t j = eq + 2;
    while (j < text.size() && text[j] != '"') j += text[j] == '\\' ? 2 : 1;
    if (j >= text.size()) break;
    out.emplace_back(text.substr(i, eq - i), text.substr(i, j + 1 - i));
    i = j + 1;
    if (i < text.size() && text[i] == ',') ++i;
  }
  return out;
}

std::string MirrorLabels(const std::string& labels, const std::vector<std::string>& keep,
                         const std::string& extra) {
  std::string out;
  for (const auto& [key, pair] : SplitLabels(labels)) {
    if (std::find(keep.begin(), keep.end(), key) == keep.end()) continue;
    if (!out.empty()) out += ',';
    out += pair;
  }
  if (!extra.empty()) {
    if (!out.empty()) out += ',';
    out += extra;
  }
  return out;
}

}  // namespace

template <typename Fn>
void MetricsRegistry::ForEachTarget(std::string_view name, const std::string& labels, Fn fn) {
  Family* f = Find(name);
  if (!f) return;
  fn(*f, labels);
  for (MirrorTo& m : f->mirrors) {
    auto it = m.mapped.find(labels);
    if (it == m.mapped.end())
      it = m.mapped.emplace(labels, MirrorLabels(labels, m.keep, m.extra)).first;
    fn(*m.dst, it->second);
  }
}

void MetricsRegistry::Add(std::string_view name, const std::string& labels, double v) {
  MutexLock lock(&mu_);
  ForEachTarget(name, labels, [v](Family& f, const std::string& l) { f.series[l].value += v; });
}

void MetricsRegistry::Set(std::string_view name, const std::string& labels, double v) {
  MutexLock lock(&mu_);
  ForEachTarget(name, labels, [v](Family& f, const std::string& l) { f.series[l].value = v; });
}

void MetricsRegistry::Replace(std::string_view name,
                              const std::vector<std::pair<std::string, double>>& series) {
  MutexLock lock(&mu_);
  Family* f = Find(name);
  if (!f) return;
  f->series.clear();
  for (MirrorTo& m : f->mirrors) m.dst->series.clear();
  for (const auto& one : series) {
    const double v = one.second;  // clang 14 cannot capture a structured binding
    ForEachTarget(name, one.first, [v](Family& t, const std::string& l) { t.series[l].value = v; });
  }
}

void MetricsRegistry::ObserveInto(Family& f, const std::string& labels, double v) {
  Series& s = f.series[labels];
  if (s.bucket_counts.size() != f.buckets.size()) s.bucket_counts.assign(f.buckets.size(), 0);
  for (size_t i = 0; i < f.buckets.size(); ++i)
    if (v <= f.buckets[i]) {
      ++s.bucket_counts[i];
      break;
    }
  ++s.count;
  s.sum += v;
}

void MetricsRegistry::Observe(std::string_view name, const std::string& labels, double v) {
  if (!std::isfinite(v)) return;
  MutexLock lock(&mu_);
  ForEachTarget(name, labels, [v](Family& f, const std::string& l) { ObserveInto(f, l, v); });
}

void MetricsRegistry::Touch(std::string_view name, const std::string& labels) {
  MutexLock lock(&mu_);
  Family* f = Find(name);
  if (!f) return;
  Series& s = f->series[labels];
  if (s.bucket_counts.size() != f->buckets.size()) s.bucket_counts.assign(f->buckets.size(), 0);
}

void MetricsRegistry::Mirror(std::string_view src, std::string dst, std::string help,
                             std::vector<double> buckets, std::vector<std::string> keep,
                             std::string extra) {
  MutexLock lock(&mu_);
  Family* from = Find(src);
  if (!from) return;
  Family& to = families_[std::move(dst)];
  to.type = from->type;
  to.help = std::move(help);
  to.buckets = std::move(buckets);
  from->mirrors.push_back({&to, std::move(keep), std::move(extra), {}});
}

namespace {
std::string Num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}
std::string With(const std::string& labels, std::string_view extra) {
  if (labels.empty()) return std::string("{") + std::string(extra) + "}";
  return "{" + labels + "," + std::string(extra) + "}";
}
}  // namespace

std::string MetricsRegistry::Render() const {
  MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    if (f.series.empty()) continue;  // HELP/TYPE only for families that have samples
    const char* type = f.type == Type::kCounter ? "counter"
                       : f.type == Type::kGauge ? "gauge"
                                                : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, type);
    for (const auto& [labels, s] : f.series) {
      std::string braces = labels.empty() ? "" : "{" + labels + "}";
      if (f.type != Type::kHistogram) {
        out += fmt::format("{}{} {}\n", name, braces, Num(s.value));
        continue;
      }
      uint64_t cum = 0;
      for (size_t i = 0; i < f.buckets.size(); ++i) {
        cum += i < s.bucket_counts.size() ? s.bucket_counts[i] : 0;
        out += fmt::format("{}_bucket{} {}\n", name,
                           With(labels, "le=\"" + Num(f.buckets[i]) + "\""), cum);
      }
      out += fmt::format("{}_bucket{} {}\n", name, With(labels, "le=\"+Inf\""), s.count);
      out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, braces, Num(s.sum), name, braces,
                         s.count);
    }
  }
  return out;
}

}  // namespace strata::http
