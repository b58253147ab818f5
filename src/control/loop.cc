#include "control/loop.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "control/queries.h"

namespace strata::control {
namespace {

using Type = http::MetricsRegistry::Type;

constexpr double kPenaltyCap = 1e12;

double Get(const QueryResults& r, const std::string& query, const std::string& pool,
           double missing) {
  auto q = r.find(query);
  if (q == r.end()) return missing;
  auto it = q->second.find(pool);
  return it == q->second.end() ? missing : it->second;
}

// A measured figure for JSON: null when absent or not finite.
nlohmann::json Num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

}  // namespace

Status RecordingActuator::SetReplicas(const std::string& pool, int replicas,
                                      const ScaleDecision& /*decision*/) {
  MutexLock lock(&mu_);
  counts_[pool] = replicas;
  return Status::Ok();
}

std::map<std::string, int> RecordingActuator::counts() const {
  MutexLock lock(&mu_);
  return counts_;
}

Result<QueryResults> PromObservationSource::Observe() {
  QueryResults out;
  for (const NamedQuery& q : AutoscalerQueries(window_)) {
    ASSIGN_OR_RETURN(auto values, client_.QueryBy(q.expr, "pool"));
    out[q.name] = std::move(values);
  }
  return out;
}

PoolObservation ObservationOf(const QueryResults& r, const std::string& pool,
                              std::optional<int> current) {
  PoolObservation o;
  const auto count = [&](const char* q) {
    const double v = Get(r, q, pool, 0);
    return std::isfinite(v) ? static_cast<int>(std::lround(std::max(0.0, v))) : 0;
  };
  const auto rate = [&](const char* q) {
    const double v = Get(r, q, pool, 0);
    return std::isfinite(v) ? std::max(0.0, v) : 0.0;
  };
  o.current_replicas = current ? *current : count("replicas");
  o.reporting_replicas = count("replicas_reporting");
  o.arrival_rate = rate("arrival_rate");
  o.error_rate = std::min(1.0, rate("error_ratio"));
  o.e2e_p95_s = Get(r, "e2e_p95", pool, kNoData);
  o.ttft_p95_s = Get(r, "ttft_p95", pool, kNoData);
  o.tpot_p95_s = Get(r, "tpot_p95", pool, kNoData);
  o.mean_e2e_s = rate("mean_e2e");
  o.mean_running = rate("mean_running");
  o.waiting = rate("waiting");
  o.held_requests = count("held");
  return o;
}

ControlLoop::ControlLoop(DeploymentSpec spec, ObservationSource* source, Actuator* actuator,
                         ReplicaProfile profile)
    : spec_(std::move(spec)),
      source_(source),
      actuator_(actuator),
      autoscaler_(spec_.autoscaling, profile) {
  metrics_.Declare("strata_control_desired_replicas", Type::kGauge,
                   "The autoscaler's replica count for the pool (KEDA's target).");
  metrics_.Declare("strata_control_current_replicas", Type::kGauge,
                   "Replicas the pool ran when the autoscaler last decided.");
  metrics_.Declare("strata_control_penalty", Type::kGauge,
                   "Predicted SLO penalty of the desired count (ms^2 + weighted error excess).");
  metrics_.Declare("strata_control_predicted_e2e_p95_seconds", Type::kGauge,
                   "Predicted end-to-end p95 at the desired count.");
  metrics_.Declare("strata_control_decisions_total", Type::kCounter,
                   "Autoscaler decisions by direction (up, down, hold).");
  metrics_.Declare("strata_control_observe_errors_total", Type::kCounter,
                   "Intervals whose observation (Prometheus queries) failed.");
  metrics_.Declare("strata_control_actuate_errors_total", Type::kCounter,
                   "Replica changes the actuator refused.");
  metrics_.Touch("strata_control_observe_errors_total", "");
  for (const PoolSpec& p : spec_.pools) {
    for (const char* dir : {"up", "down", "hold"})
      metrics_.Touch("strata_control_decisions_total",
                     http::Labels({{"pool", p.name}, {"direction", dir}}));
    metrics_.Touch("strata_control_actuate_errors_total", http::Labels({{"pool", p.name}}));
  }
}

ControlLoop::~ControlLoop() { Stop(); }

void ControlLoop::Export(const std::string& pool, const ScaleDecision& d) {
  const std::string l = http::Labels({{"pool", pool}});
  metrics_.Set("strata_control_desired_replicas", l, d.desired);
  metrics_.Set("strata_control_current_replicas", l, d.current);
  metrics_.Set("strata_control_penalty", l, std::min(kPenaltyCap, d.predicted_penalty));
  metrics_.Set("strata_control_predicted_e2e_p95_seconds", l,
               std::isfinite(d.predicted_e2e_p95_s) ? d.predicted_e2e_p95_s : kPenaltyCap);
  const char* dir = d.desired > d.current ? "up" : d.desired < d.current ? "down" : "hold";
  metrics_.Add("strata_control_decisions_total", http::Labels({{"pool", pool}, {"direction", dir}}),
               1);
}

Status ControlLoop::Tick(Clock::time_point now) {
  auto results = source_->Observe();
  if (!results.ok()) {
    metrics_.Add("strata_control_observe_errors_total", "", 1);
    return results.status();
  }
  Status first_error;
  for (const PoolSpec& pool : spec_.pools) {
    const PoolObservation obs =
        ObservationOf(*results, pool.name, actuator_->CurrentReplicas(pool.name));
    const ScaleDecision d = autoscaler_.Decide(pool, obs, now);
    Export(pool.name, d);
    if (d.changed) {
      Status s = actuator_->SetReplicas(pool.name, d.desired, d);
      if (!s.ok()) {
        metrics_.Add("strata_control_actuate_errors_total", http::Labels({{"pool", pool.name}}), 1);
        if (first_error.ok()) first_error = s.WithContext("pool " + pool.name);
      }
    }
    MutexLock lock(&mu_);
    status_[pool.name] = {d, obs, std::chrono::duration<double>(now - started_).count()};
  }
  return first_error;
}

void ControlLoop::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] {
    MutexLock lock(&mu_);
    while (!stop_) {
      lock.Unlock();
      (void)Tick(Clock::now());  // errors are counted in the metrics
      lock.Lock();
      const auto next = Clock::now() + spec_.autoscaling.interval;
      while (!stop_ && Clock::now() < next) cv_.WaitUntil(&mu_, next);
    }
  });
}

void ControlLoop::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

std::map<std::string, ScaleDecision> ControlLoop::LastDecisions() const {
  MutexLock lock(&mu_);
  std::map<std::string, ScaleDecision> out;
  for (const auto& [pool, st] : status_) out[pool] = st.decision;
  return out;
}

std::string ControlLoop::StatusJson() const {
  nlohmann::json pools = nlohmann::json::array();
  MutexLock lock(&mu_);
  for (const auto& [pool, st] : status_) {
    const ScaleDecision& d = st.decision;
    const PoolObservation& o = st.observation;
    pools.push_back({{"pool", pool},
                     {"current", d.current},
                     {"desired", d.desired},
                     {"rule", d.rule},
                     {"reason", d.reason},
                     {"predicted_penalty", Num(d.predicted_penalty)},
                     {"predicted_e2e_p95_s", Num(d.predicted_e2e_p95_s)},
                     {"at_s", st.at_s},
                     {"observation",
                      {{"reporting_replicas", o.reporting_replicas},
                       {"arrival_rate", o.arrival_rate},
                       {"error_rate", o.error_rate},
                       {"e2e_p95_s", Num(o.e2e_p95_s)},
                       {"ttft_p95_s", Num(o.ttft_p95_s)},
                       {"tpot_p95_s", Num(o.tpot_p95_s)},
                       {"held_requests", o.held_requests}}}});
  }
  return nlohmann::json{{"autoscaling_enabled", spec_.autoscaling.enabled}, {"pools", pools}}
      .dump();
}

}  // namespace strata::control
