// control/up_configs: the files through which `strata up` (control/up.h) tells its children about
// each other, rewritten from the shared state (control/up_state.h) whenever the replica set
// changes:
//   gateway.yaml            GatewayYaml (control/gateway_yaml.h) of the ready replicas' URLs per
//                           pool (a splitting canary set as its own pool), plus
//                           cold_start_hold_ms on every pool, ui.control_url (this status) unless
//                           the spec sets ui, and the admin API key (the spec's, else one made up
//                           here); the gateway gets SIGHUP once it listens;
//   prometheus/targets.json every child with a port but Prometheus, and `strata up` itself,
//                           labelled pool / replica / version / role.
// A file is written only when its text changes.
// Ownership: holds a reference to the run's Context; owns the files' last texts.
// Thread contract: thread-safe (its own mutex, taken after State::mu); WriteGateway reads the
// State and needs its mutex.
// Errors: IoError when a file cannot be written; Internal when the gateway YAML cannot be edited.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "control/gateway_yaml.h"
#include "control/up_state.h"

namespace strata::control::up {

class ConfigFiles {
 public:
  explicit ConfigFiles(const Context& ctx);

  Status WriteGateway(const State& s, const ChildMap& children) REQUIRES(s.mu) EXCLUDES(mu_);
  void WriteTargets(const ChildMap& children) EXCLUDES(mu_);
  // The key of the gateway's admin API (as the last gateway.yaml written says).
  std::string admin_key() const EXCLUDES(mu_);

 private:
  // The URLs the gateway routes to: per pool, and per pool whose canary rollout splits now.
  struct Backends {
    std::map<std::string, std::vector<std::string>> urls;
    std::map<std::string, CanarySet> canaries;
  };
  static Backends GatewayBackends(const State& s, const ChildMap& children) REQUIRES(s.mu);
  // GatewayYaml's text with up's own keys added (cold-start hold, UI, admin key).
  Result<std::string> AddUpKeys(const std::string& text, std::chrono::milliseconds hold)
      REQUIRES(mu_);

  const Context& ctx_;
  const std::string generated_admin_key_;  // when the spec has none
  mutable Mutex mu_;
  std::string gateway_yaml_ GUARDED_BY(mu_);  // as last written
  std::string admin_key_ GUARDED_BY(mu_);
  bool gateway_stale_ GUARDED_BY(mu_) = false;  // written, SIGHUP not sent yet
  std::string targets_ GUARDED_BY(mu_);         // as last written
};

}  // namespace strata::control::up
