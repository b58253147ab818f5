// Metrics: a small Prometheus registry (counters, gauges, histograms with label sets) rendered in
// the text exposition format 0.0.4. Names carry the `strata:` prefix; docs/metrics.md lists them.
// Thread contract: every method is thread-safe (one mutex; observations are a map lookup + adds).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"

namespace strata::http {

// `k="v",k2="v2"` with values escaped as the exposition format requires.
std::string Labels(std::initializer_list<std::pair<std::string_view, std::string_view>> kv);

class MetricsRegistry {
 public:
  enum class Type { kCounter, kGauge, kHistogram };
  // Declares a family (call once per name, before use). Buckets are upper bounds (histograms only).
  void Declare(std::string name, Type type, std::string help, std::vector<double> buckets = {})
      EXCLUDES(mu_);
  // counter += v
  void Add(std::string_view name, const std::string& labels, double v) EXCLUDES(mu_);
  // gauge / counter = v
  void Set(std::string_view name, const std::string& labels, double v) EXCLUDES(mu_);
  void Observe(std::string_view name, const std::string& labels, double v) EXCLUDES(mu_);
  std::string Render() const EXCLUDES(mu_);

 private:
  struct Series {
    double value = 0;
    std::vector<uint64_t> bucket_counts;  // non-cumulative, one per bucket
    uint64_t count = 0;
    double sum = 0;
  };
  struct Family {
    Type type = Type::kCounter;
    std::string help;
    std::vector<double> buckets;
    std::map<std::string, Series> series;  // by label text
  };
  Family* Find(std::string_view name) REQUIRES(mu_);
  mutable Mutex mu_;
  std::map<std::string, Family, std::less<>> families_ GUARDED_BY(mu_);
};

}  // namespace strata::http
