// The autoscaler in a simulated pool (fake clock, event-driven): Poisson arrivals following a
// trace, replicas that are batch servers with the bundled model's measured service times, a
// least-loaded router, cold starts; the SLO autoscaler (control/autoscaler) and a utilisation
// HPA decide every 15 s from what Prometheus would show (1-minute windows, 5 s scrapes).
//
// Measured profile (strata-tiny, `strata serve --threads 1 --max-num-seqs 8` and
// `strata bench serve --dataset random --random-input-len 64 --random-output-len 128
// --num-prompts 50*C --max-concurrency C` on this machine: a 2-core AMD EPYC VM shared with other
// jobs (load average ~10 while measuring), 2026-12-01). Mean end-to-end latency per concurrency
// C = 1, 2, 4, 8: 9.1, 16.0, 31.8, 67.2 ms (throughput 109, 125, 125, 118 req/s); the least-squares
// line T(b) = alpha + beta * b has beta = 8.37 ms and alpha = T(1) - beta = 0.75 ms (one core
// barely batches the tiny model: a request's decode steps cost the same alone or together).
// Cold start (process start to /ready): 0.18 and 0.23 s. docs/benchmarks.md has the table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "control/autoscaler.h"
#include "control/queueing.h"

namespace strata::control {
namespace {

// The measured profile (see the header comment and docs/benchmarks.md).
constexpr double kAlphaS = 0.00075;   // s
constexpr double kBetaS = 0.00837;    // s per concurrent request
constexpr int kMaxBatch = 8;          // --max-num-seqs
constexpr double kColdStartS = 0.23;  // s, process start to /ready
// Request lengths vary: a request's service time is T(b) times a factor uniform in
// [1 - kSpread, 1 + kSpread] (mean 1, p95 1 + 0.9 kSpread).
constexpr double kSpread = 0.5;
constexpr double kSloS = 0.150;  // e2e p95 objective (the reference's default p95_slo)
constexpr double kInterval = 15, kWindowS = 300, kScrapeS = 5, kRateWindowS = 60;
constexpr int kMaxReplicas = 16;

ReplicaProfile MeasuredProfile() {
  ReplicaProfile p;
  p.alpha_s = kAlphaS;
  p.beta_s = kBetaS;
  p.max_batch = kMaxBatch;
  p.p95_over_mean = 1 + 0.9 * kSpread;
  p.service_cv = kSpread / std::sqrt(3.0);  // of the uniform factor
  p.cold_start_s = kColdStartS;
  return p;
}

struct Trace {
  std::string name;
  double duration_s;
  std::function<double(double)> rate;  // requests/s at time t
};

// What a replica-count policy sees and decides.
class Policy {
 public:
  virtual ~Policy() = default;
  virtual int Decide(const PoolObservation& obs, double util, double t) = 0;
};

class SloPolicy : public Policy {
 public:
  SloPolicy() : scaler_(Spec(), MeasuredProfile()) {
    pool_.name = "sim";
    pool_.replicas = {1, kMaxReplicas};
    pool_.slo.e2e_p95_ms = kSloS * 1000;
    pool_.slo.error_rate = 0.01;
  }
  int Decide(const PoolObservation& obs, double /*util*/, double t) override {
    return scaler_
        .Decide(pool_, obs,
                Clock::time_point{} + std::chrono::hours(1) +
                    std::chrono::milliseconds(std::lround(t * 1000)))
        .desired;
  }

 private:
  static AutoscalingSpec Spec() {
    AutoscalingSpec s;
    s.interval = std::chrono::seconds(static_cast<int>(kInterval));
    s.scale_down_stabilization = std::chrono::seconds(static_cast<int>(kWindowS));
    return s;
  }
  PoolSpec pool_;
  Autoscaler scaler_;
};

// Kubernetes' HPA on a utilisation metric (requests running / max batch, averaged over the
// replicas that report): desired = ceil(current * util / target), no change within the 10 %
// tolerance, scale-up at most x2 per period, scale-down to the highest recommendation of the
// last 300 s (its default behaviour).
class HpaPolicy : public Policy {
 public:
  int Decide(const PoolObservation& obs, double util, double t) override {
    const int cur = obs.current_replicas;
    const double ratio = util / kTarget;
    int rec = cur;
    if (std::abs(ratio - 1) > 0.1) rec = static_cast<int>(std::ceil(cur * ratio));
    rec = std::clamp(rec, 1, kMaxReplicas);
    while (!recs_.empty() && t - recs_.front().first >= kWindowS) recs_.pop_front();
    recs_.emplace_back(t, rec);
    if (rec > cur) return std::min(rec, 2 * cur);
    int highest = rec;
    for (const auto& r : recs_) highest = std::max(highest, r.second);
    return std::min(cur, highest);
  }

 private:
  static constexpr double kTarget = 0.7;
  std::deque<std::pair<double, int>> recs_;
};

struct Replica {
  double ready_at = 0;
  bool draining = false;
  int running = 0;
};

struct Finish {
  double t;
  int replica;
  double arrival;  // < 0: not a request but replica `replica` becoming ready
  bool operator>(const Finish& o) const { return t > o.t; }
};

struct SimResult {
  std::vector<float> latencies;                 // completion order
  std::vector<size_t> minute_end;               // index into latencies where each minute ends
  std::vector<std::pair<double, int>> changes;  // (time, new count)
  std::vector<std::pair<double, int>> counts;   // (time, count) after every tick
  double replica_seconds = 0;
  int max_replicas = 0;
};

double P95(std::vector<float> v) {
  if (v.empty()) return 0;
  const size_t k = static_cast<size_t>(std::ceil(0.95 * v.size())) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

class Sim {
 public:
  Sim(Trace trace, Policy* policy, int initial, uint64_t seed)
      : trace_(std::move(trace)), policy_(policy), rng_(seed) {
    for (int i = 0; i < initial; ++i) replicas_.push_back({});
  }

  SimResult Run() {
    double peak = 0;
    for (double t = 0; t <= trace_.duration_s; t += 1) peak = std::max(peak, trace_.rate(t));
    std::exponential_distribution<double> gap(peak);
    std::uniform_real_distribution<double> u(0, 1);
    double next_arrival = gap(rng_), next_tick = kInterval, next_sample = 1;
    double next_minute = 60;
    while (true) {
      const double next_finish = finishes_.empty() ? kInf : finishes_.top().t;
      const double t = std::min({next_arrival, next_finish, next_tick, next_sample});
      if (t > trace_.duration_s) break;
      while (t >= next_minute) {
        result_.minute_end.push_back(result_.latencies.size());
        next_minute += 60;
      }
      if (t == next_finish) {
        const Finish f = finishes_.top();
        finishes_.pop();
        Complete(f);
      } else if (t == next_arrival) {
        if (u(rng_) * peak < trace_.rate(t)) Arrive(t);  // thinning: rate(t) of peak
        next_arrival = t + gap(rng_);
      } else if (t == next_sample) {
        Sample(t);
        next_sample += 1;
      } else {
        Tick(t);
        next_tick += kInterval;
      }
    }
    result_.minute_end.push_back(result_.latencies.size());
    return std::move(result_);
  }

 private:
  int Alive() const {
    int n = 0;
    for (const Replica& r : replicas_) n += r.draining ? 0 : 1;
    return n;
  }
  void Start(int r, double arrival, double t) {
    Replica& rep = replicas_[r];
    ++rep.running;
    std::uniform_real_distribution<double> f(1 - kSpread, 1 + kSpread);
    finishes_.push({t + (kAlphaS + kBetaS * rep.running) * f(rng_), r, arrival});
  }
  // The router (the gateway's least-loaded choice, holding what no replica can start): the ready
  // replica running the fewest requests takes it if it has a free slot; otherwise it waits in
  // the pool's FIFO until a slot frees anywhere.
  void Arrive(double t) {
    arrivals_.push_back(t);
    int best = -1;
    for (size_t i = 0; i < replicas_.size(); ++i) {
      const Replica& r = replicas_[i];
      if (r.draining || r.ready_at > t || r.running >= kMaxBatch) continue;
      if (best < 0 || r.running < replicas_[best].running) best = static_cast<int>(i);
    }
    if (best < 0) {
      queue_.push_back(t);
    } else {
      Start(best, t, t);
    }
  }
  void Complete(const Finish& f) {
    if (f.arrival < 0) {  // a replica became ready
      Pull(f.replica, f.t);
      return;
    }
    Replica& r = replicas_[f.replica];
    --r.running;
    result_.latencies.push_back(static_cast<float>(f.t - f.arrival));
    window_.emplace_back(f.t, f.t - f.arrival);
    Pull(f.replica, f.t);
  }
  void Pull(int i, double t) {
    Replica& r = replicas_[i];
    while (!r.draining && r.ready_at <= t && r.running < kMaxBatch && !queue_.empty()) {
      const double a = queue_.front();
      queue_.pop_front();
      Start(i, a, t);
    }
  }
  void Sample(double t) {
    double util = 0, running = 0;
    int n = 0;
    for (const Replica& r : replicas_) {
      if (r.draining || r.ready_at + kScrapeS > t) continue;
      util += static_cast<double>(r.running) / kMaxBatch;
      running += r.running;
      ++n;
    }
    samples_.push_back({n > 0 ? util / n : 0, n > 0 ? running / n : 0});
    if (samples_.size() > kInterval) samples_.pop_front();
    result_.replica_seconds += Alive();
  }
  void Tick(double t) {
    while (!window_.empty() && window_.front().first <= t - kRateWindowS) window_.pop_front();
    while (!arrivals_.empty() && arrivals_.front() <= t - kRateWindowS) arrivals_.pop_front();
    PoolObservation o;
    o.current_replicas = Alive();
    for (const Replica& r : replicas_) {
      if (r.draining) continue;
      if (r.ready_at + kScrapeS <= t) ++o.reporting_replicas;
    }
    o.waiting = static_cast<double>(queue_.size());
    // As rate(strata:requests_received_total[1m]): requests counted as they arrive.
    o.arrival_rate = static_cast<double>(arrivals_.size()) / std::min(t, kRateWindowS);
    std::vector<float> lat;
    double sum = 0;
    lat.reserve(window_.size());
    for (const auto& w : window_) {
      lat.push_back(static_cast<float>(w.second));
      sum += w.second;
    }
    o.e2e_p95_s = lat.empty() ? kNoData : P95(lat);
    o.mean_e2e_s = lat.empty() ? 0 : sum / static_cast<double>(lat.size());
    double util = 0, running = 0;
    for (const auto& s : samples_) util += s.first, running += s.second;
    util /= std::max<size_t>(1, samples_.size());
    o.mean_running = running / std::max<size_t>(1, samples_.size());
    const int want = std::clamp(policy_->Decide(o, util, t), 1, kMaxReplicas);
    Resize(want, t);
    result_.counts.emplace_back(t, Alive());
    result_.max_replicas = std::max(result_.max_replicas, Alive());
  }
  void Resize(int want, double t) {
    int alive = Alive();
    if (want == alive) return;
    result_.changes.emplace_back(t, want);
    for (; alive < want; ++alive) {
      replicas_.push_back({t + kColdStartS, false, 0});
      finishes_.push({t + kColdStartS, static_cast<int>(replicas_.size()) - 1, -1});
    }
    for (; alive > want; --alive) {
      // Drain the least-loaded live replica (it finishes what it runs, takes nothing new).
      int pick = -1;
      for (size_t i = 0; i < replicas_.size(); ++i) {
        const Replica& r = replicas_[i];
        if (!r.draining && (pick < 0 || r.running < replicas_[pick].running))
          pick = static_cast<int>(i);
      }
      replicas_[pick].draining = true;
    }
  }

  Trace trace_;
  Policy* policy_;
  std::mt19937_64 rng_;
  std::vector<Replica> replicas_;
  std::priority_queue<Finish, std::vector<Finish>, std::greater<>> finishes_;
  std::deque<double> arrivals_;  // arrival times of the last minute
  std::deque<double> queue_;     // arrival times of requests no replica could start yet
  std::deque<std::pair<double, double>> window_;   // (finish time, e2e) of the last minute
  std::deque<std::pair<double, double>> samples_;  // (util, running) per second, last interval
  SimResult result_;
};

// A policy that never changes the count: for the oracle's static runs.
class Static : public Policy {
 public:
  int Decide(const PoolObservation& obs, double /*util*/, double /*t*/) override {
    return obs.current_replicas;
  }
};

// The oracle: per count n the highest constant rate at which n static replicas hold the SLO
// (p95 of a 15-minute run after its first minute), by bisection over simulated runs.
std::vector<double> OracleMaxRates() {
  std::vector<double> out(kMaxReplicas + 1, 0);
  const double cap = kMaxBatch / (kAlphaS + kBetaS * kMaxBatch);
  for (int n = 1; n <= kMaxReplicas; ++n) {
    double lo = 0, hi = cap * n;
    for (int it = 0; it < 9; ++it) {
      const double mid = (lo + hi) / 2;
      Static s;
      Sim sim({"const", 120, [mid](double) { return mid; }}, &s, n, 7 + n * 31 + it);
      SimResult r = sim.Run();
      std::vector<float> tail(r.latencies.begin() + static_cast<std::ptrdiff_t>(r.minute_end[0]),
                              r.latencies.end());
      (P95(tail) <= kSloS ? lo : hi) = mid;
    }
    out[n] = lo;
  }
  return out;
}

int OracleCount(const std::vector<double>& max_rates, double rate) {
  for (int n = 1; n <= kMaxReplicas; ++n)
    if (max_rates[n] >= rate) return n;
  return kMaxReplicas;
}

struct Report {
  double p95_s = 0, attainment = 0, replica_hours = 0, oracle_hours = 0;
  int max_replicas = 0, oracle_peak = 0, changes = 0, max_over_oracle = 0;
  int max_changes_in_window = 0;
  double worst_at_s = 0;            // when the count was furthest above the oracle
  bool down_within_window = false;  // a scale-down within one window of another change
};

Report Evaluate(const Trace& trace, const SimResult& r, const std::vector<double>& max_rates) {
  Report rep;
  rep.p95_s = P95(r.latencies);
  int ok = 0, minutes = 0;
  size_t begin = 0;
  for (size_t end : r.minute_end) {
    if (end > begin) {
      ++minutes;
      ok += P95({r.latencies.begin() + static_cast<std::ptrdiff_t>(begin),
                 r.latencies.begin() + static_cast<std::ptrdiff_t>(end)}) <= kSloS;
    }
    begin = end;
  }
  rep.attainment = minutes > 0 ? static_cast<double>(ok) / minutes : 1;
  rep.replica_hours = r.replica_seconds / 3600;
  rep.max_replicas = r.max_replicas;
  rep.changes = static_cast<int>(r.changes.size());
  // The oracle with the same reaction limits: the smallest count for the highest rate of the
  // last stabilisation window plus the reaction lag (two intervals, the rate window, a start).
  const double lag = kWindowS + 2 * kInterval + kRateWindowS + kColdStartS;
  for (double t = 0; t < trace.duration_s; t += 1) {
    const int o = OracleCount(max_rates, trace.rate(t));
    rep.oracle_hours += o / 3600.0;
    rep.oracle_peak = std::max(rep.oracle_peak, o);
  }
  for (const auto& [t, n] : r.counts) {
    int o = 1;
    for (double s = std::max(0.0, t - lag); s <= t; s += 1)
      o = std::max(o, OracleCount(max_rates, trace.rate(s)));
    if (n - o > rep.max_over_oracle) rep.worst_at_s = t;
    rep.max_over_oracle = std::max(rep.max_over_oracle, n - o);
  }
  for (size_t i = 0; i < r.changes.size(); ++i) {
    int in_window = 0;
    for (size_t j = i; j < r.changes.size() && r.changes[j].first < r.changes[i].first + kWindowS;
         ++j)
      ++in_window;
    rep.max_changes_in_window = std::max(rep.max_changes_in_window, in_window);
    // The count before change i is the one change i - 1 set.
    if (i > 0 && r.changes[i].second < r.changes[i - 1].second &&
        r.changes[i].first - r.changes[i - 1].first < kWindowS)
      rep.down_within_window = true;
  }
  return rep;
}

std::vector<Trace> Traces() {
  const double cap = kMaxBatch / (kAlphaS + kBetaS * kMaxBatch);
  const double peak = 6 * cap * 0.8;  // about 6-7 replicas at the peak
  constexpr double kPi = 3.14159265358979323846;
  return {
      {"step", 2400, [=](double t) { return t >= 600 && t < 1800 ? peak : 0.4 * peak; }},
      {"ramp", 3600,
       [=](double t) {
         return t < 1800 ? 0.05 * peak + 0.95 * peak * t / 1800
                         : 0.05 * peak + 0.95 * peak * (3600 - t) / 1800;
       }},
      {"diurnal", 7200,
       [=](double t) { return peak * (0.5 - 0.45 * std::cos(2 * kPi * t / 7200)); }},
      // A burst to twice the load, rising over 20 s, for two minutes.
      {"spike", 2400,
       [=](double t) {
         if (t < 900 || t >= 1040) return 0.45 * peak;
         return t < 920 ? 0.45 * peak * (1 + (t - 900) / 20) : 0.9 * peak;
       }},
      // Reported, not judged: an instant 2.5x spike and an instant 5x step (no reactive policy
      // avoids the backlog of their first interval; see docs/benchmarks.md).
      {"spike-instant", 2400, [=](double t) { return t >= 900 && t < 1020 ? peak : 0.4 * peak; }},
      {"step-5x", 2400, [=](double t) { return t >= 600 && t < 1800 ? peak : 0.2 * peak; }},
  };
}

TEST(AutoscalerSim, HoldsTheSloNearTheOracleBesideAnHpa) {
  const std::vector<double> max_rates = OracleMaxRates();
  for (int n = 2; n <= kMaxReplicas; ++n) ASSERT_GE(max_rates[n], max_rates[n - 1] * 0.95) << n;
  std::printf(
      "| trace | policy | e2e p95 (ms) | minutes in SLO | replica-hours | oracle replica-hours | "
      "max replicas | oracle peak | changes | max changes / 300 s |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Trace& trace : Traces()) {
    for (int which = 0; which < 2; ++which) {
      SloPolicy slo;
      HpaPolicy hpa;
      Policy* policy = which == 0 ? static_cast<Policy*>(&slo) : &hpa;
      // The pool starts at the oracle's count for the trace's first rate (it served before the
      // trace began): from 1 replica, the x2 step cap alone would take two changes to reach 3.
      Sim sim(trace, policy, OracleCount(max_rates, trace.rate(0)), 42);
      const SimResult r = sim.Run();
      const Report rep = Evaluate(trace, r, max_rates);
      std::printf("| %s | %s | %.1f | %.1f %% | %.3f | %.3f | %d | %d | %d | %d |\n",
                  trace.name.c_str(), which == 0 ? "SLO autoscaler" : "HPA util 70 %",
                  rep.p95_s * 1000, rep.attainment * 100, rep.replica_hours, rep.oracle_hours,
                  rep.max_replicas, rep.oracle_peak, rep.changes, rep.max_changes_in_window);
      if (which != 0) continue;  // the HPA is reported, not judged
      SCOPED_TRACE(trace.name);
      // Every trace: near the oracle, and no scale-down within a window of another change.
      EXPECT_LE(rep.max_over_oracle, 1) << "more than the oracle + 1 at " << rep.worst_at_s << " s";
      EXPECT_LE(rep.max_replicas, rep.oracle_peak + 1);
      // The SLO is judged on the four traces of the issue (step, ramp, diurnal, spike); the two
      // instant ones are reported only (docs/benchmarks.md has the numbers).
      if (trace.name == "step" || trace.name == "ramp" || trace.name == "diurnal" ||
          trace.name == "spike") {
        EXPECT_LE(rep.p95_s, kSloS);
        EXPECT_GE(rep.attainment, 0.90);
      }
      EXPECT_FALSE(rep.down_within_window) << "a scale-down within one window of another change";
      // At most one change per stabilisation window: the scale-up is one step to the count the
      // burst needs. step-5x needs x3 at once (2 -> 6), which the x2 step cap (the spec's
      // scale_up_max_factor, HPA's 100 % per period) splits into two steps.
      EXPECT_LE(rep.max_changes_in_window, trace.name == "step-5x" ? 2 : 1);
    }
  }
}

}  // namespace
}  // namespace strata::control
