#include "http/prometheus.h"

#include <fmt/format.h>

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

void MetricsRegistry::Add(std::string_view name, const std::string& labels, double v) {
  MutexLock lock(&mu_);
  if (Family* f = Find(name)) f->series[labels].value += v;
}

void MetricsRegistry::Set(std::string_view name, const std::string& labels, double v) {
  MutexLock lock(&mu_);
  if (Family* f = Find(name)) f->series[labels].value = v;
}

void MetricsRegistry::Observe(std::string_view name, const std::string& labels, double v) {
  MutexLock lock(&mu_);
  Family* f = Find(name);
  if (!f || !std::isfinite(v)) return;
  Series& s = f->series[labels];
  if (s.bucket_counts.size() != f->buckets.size()) s.bucket_counts.assign(f->buckets.size(), 0);
  for (size_t i = 0; i < f->buckets.size(); ++i)
    if (v <= f->buckets[i]) {
      ++s.bucket_counts[i];
      break;
    }
  ++s.count;
  s.sum += v;
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
