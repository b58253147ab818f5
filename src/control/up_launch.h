// control/up_launch: the children of `strata up` (control/up.h) as the supervisor starts them —
// a replica (`strata serve` of a pool's version, its serve config under serve/POOL.yaml), the
// gateway (`strata gateway --config gateway.yaml`) and Prometheus (its prometheus.yml and the
// rules of control/queries under prometheus/, a fresh TSDB per run).
// Ownership: holds references to the run's Context and Supervisor; owns nothing.
// Thread contract: thread-compatible; each call starts one child (Supervisor::Start is
// thread-safe).
// Errors: IoError when a config file cannot be written; the supervisor's Start errors.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "control/spec.h"
#include "control/supervisor.h"
#include "control/up_state.h"

namespace strata::control::up {

class ChildLauncher {
 public:
  ChildLauncher(const Context& ctx, Supervisor& sup) : ctx_(ctx), sup_(sup) {}

  // Replica `name` of pool `p` at model version `version` (labelled pool / replica / version).
  Status StartReplica(const DeploymentSpec& spec, const PoolSpec& p, const std::string& version,
                      const std::string& name);
  // The gateway on 127.0.0.1:`port` (0: any), reading the state dir's gateway.yaml.
  Status StartGateway(int port);
  // Prometheus on 127.0.0.1:ctx.prom_port, scraping targets.json.
  Status StartPrometheus(const DeploymentSpec& spec);

 private:
  // A child with the run's log path, ready timeout and drain grace.
  ChildSpec Child(std::string_view name, std::vector<std::string> argv) const;

  const Context& ctx_;
  Supervisor& sup_;
};

}  // namespace strata::control::up
