// control/loop: the control loop. Each interval (AutoscalingSpec::interval) it observes every pool
// (an ObservationSource: Prometheus through control/queries in production, a fake in tests),
// asks the Autoscaler for each pool's count and hands changed counts to an Actuator.
//
// Actuator: `strata up` starts/stops child replicas; `strata autoscaler` (Kubernetes) only records
// the count, which it exports as strata_control_desired_replicas for KEDA. CurrentReplicas() is
// the actuator's knowledge of what runs (ready or starting); nullopt means "ask Prometheus" (the
// `replicas` query: count of scraped replica targets).
// Metrics (MetricsText, Prometheus text): strata_control_desired_replicas{pool},
// strata_control_current_replicas{pool}, strata_control_penalty{pool} (predicted, of the desired
// count; capped at 1e12 for an overload), strata_control_predicted_e2e_p95_seconds{pool},
// strata_control_decisions_total{pool,direction} (direction up | down | hold, one per interval),
// strata_control_observe_errors_total, strata_control_actuate_errors_total{pool}.
// Status (StatusJson): per pool the last decision (current, desired, rule, reason, penalty, time)
// and the observation it was made from.
// Errors: a failed observation keeps every count and is counted; a failed actuation is counted
// and retried at the next interval (the decision stands).
// Ownership: the loop borrows the source and the actuator (they must outlive Stop()).
// Thread contract: Tick() and Start()/Stop() from one controlling thread (Start runs Tick on the
// loop's own thread); MetricsText(), StatusJson() and LastDecisions() from any thread. The
// actuator and the source are called only from the thread running Tick.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "base/mutex.h"
#include "base/status.h"
#include "control/autoscaler.h"
#include "control/prom_client.h"
#include "control/spec.h"
#include "http/prometheus.h"

namespace strata::control {

class Actuator {
 public:
  virtual ~Actuator() = default;
  virtual std::optional<int> CurrentReplicas(const std::string& pool) = 0;
  virtual Status SetReplicas(const std::string& pool, int replicas,
                             const ScaleDecision& decision) = 0;
};

// The actuator of `strata autoscaler`: remembers the count (for the metrics), changes nothing.
class RecordingActuator : public Actuator {
 public:
  std::optional<int> CurrentReplicas(const std::string& /*pool*/) override { return std::nullopt; }
  Status SetReplicas(const std::string& pool, int replicas, const ScaleDecision& decision) override;
  std::map<std::string, int> counts() const;

 private:
  mutable Mutex mu_;
  std::map<std::string, int> counts_ GUARDED_BY(mu_);
};

// Per query name (control/queries: AutoscalerQueries) the value per pool.
using QueryResults = std::map<std::string, std::map<std::string, double>>;

class ObservationSource {
 public:
  virtual ~ObservationSource() = default;
  virtual Result<QueryResults> Observe() = 0;
};

// Runs every AutoscalerQueries(window) query against Prometheus.
class PromObservationSource : public ObservationSource {
 public:
  PromObservationSource(PromClient client, std::string window = "1m")
      : client_(std::move(client)), window_(std::move(window)) {}
  Result<QueryResults> Observe() override;

 private:
  PromClient client_;
  std::string window_;
};

// One pool's observation from query results (absent values: 0, p95s: kNoData). `current`
// overrides the `replicas` query when the actuator knows.
PoolObservation ObservationOf(const QueryResults& results, const std::string& pool,
                              std::optional<int> current);

class ControlLoop {
 public:
  ControlLoop(DeploymentSpec spec, ObservationSource* source, Actuator* actuator,
              ReplicaProfile profile = {});
  ~ControlLoop();  // Stop()

  // One interval at `now`.
  Status Tick(Clock::time_point now);
  void Start();  // Tick every interval on the loop's thread
  void Stop();   // idempotent

  std::string MetricsText() const { return metrics_.Render(); }
  std::string StatusJson() const;
  std::map<std::string, ScaleDecision> LastDecisions() const;
  Autoscaler& autoscaler() { return autoscaler_; }  // Tick's thread only

 private:
  struct PoolStatus {
    ScaleDecision decision;
    PoolObservation observation;
    double at_s = 0;  // seconds since the loop started
  };
  void Export(const std::string& pool, const ScaleDecision& d);

  DeploymentSpec spec_;
  ObservationSource* source_;
  Actuator* actuator_;
  Autoscaler autoscaler_;
  http::MetricsRegistry metrics_;
  Clock::time_point started_ = Clock::now();
  mutable Mutex mu_;
  std::map<std::string, PoolStatus> status_ GUARDED_BY(mu_);
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace strata::control
