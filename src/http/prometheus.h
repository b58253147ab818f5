// Metrics: a small Prometheus registry (counters, gauges, histograms with label sets) rendered in
// the text exposition format 0.0.4. Names carry the `strata:` prefix; docs/metrics.md lists them.
// A family is rendered (HELP, TYPE and samples) only once it has a series: Touch() creates one at
// zero, so a family that should be visible before its first event is touched at startup, and a
// family of an absent feature (KV tiers off) is never shown.
// Mirrors: Mirror(src, dst) makes every write to `src` also a write to `dst` (its own family, own
// help and histogram buckets), with the series' labels filtered to `keep` and `extra` appended;
// series that map onto one mirror series add up there. Used to export the same events under
// another naming scheme (`--metrics-compat vllm`) without touching the code that records them.
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
  // Replaces every series of `name` by `series` ({labels, value}) in one step, so label sets that
  // no longer apply disappear (info gauges, per-adapter state). The family's mirrors are cleared
  // and refilled too (use it only for families whose mirrors have no other source).
  void Replace(std::string_view name, const std::vector<std::pair<std::string, double>>& series)
      EXCLUDES(mu_);
  // Creates the series at zero (no-op when it exists), so the family is rendered.
  void Touch(std::string_view name, const std::string& labels) EXCLUDES(mu_);
  // Declares `dst` (type of `src`) and mirrors every later write to `src` onto it (see above).
  // `keep`: label names carried over (others dropped); `extra`: Labels() text appended.
  void Mirror(std::string_view src, std::string dst, std::string help, std::vector<double> buckets,
              std::vector<std::string> keep, std::string extra) EXCLUDES(mu_);
  std::string Render() const EXCLUDES(mu_);

 private:
  struct Series {
    double value = 0;
    std::vector<uint64_t> bucket_counts;  // non-cumulative, one per bucket
    uint64_t count = 0;
    double sum = 0;
  };
  struct Family;
  struct MirrorTo {
    Family* dst = nullptr;  // points into families_ (std::map nodes are stable)
    std::vector<std::string> keep;
    std::string extra;
    std::map<std::string, std::string, std::less<>> mapped;  // source labels -> mirror labels
  };
  struct Family {
    Type type = Type::kCounter;
    std::string help;
    std::vector<double> buckets;
    std::map<std::string, Series> series;  // by label text
    std::vector<MirrorTo> mirrors;
  };
  Family* Find(std::string_view name) REQUIRES(mu_);
  // The families a write to `name` updates: the family itself, then its mirrors, with the labels
  // each uses.
  template <typename Fn>
  void ForEachTarget(std::string_view name, const std::string& labels, Fn fn) REQUIRES(mu_);
  static void ObserveInto(Family& f, const std::string& labels, double v);
  mutable Mutex mu_;
  std::map<std::string, Family, std::less<>> families_ GUARDED_BY(mu_);
};

}  // namespace strata::http
