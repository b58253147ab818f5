// control/placement: which devices run each pool's replicas, by the reference architecture's
// rules (SEED-NOTES §2.1), with the reason for every choice.
//
// Rules, in order:
//   1. Kind: a pool with devices.gpus > 0 runs on accelerators ("gpu"), `gpus` whole devices per
//      replica (one replica per device: accelerators are not shared); a pool with gpus 0 runs on
//      CPUs, which replicas share.
//   2. Precision: a device must support every precision the pool needs (DeviceProfile::Supports);
//      among those, the one running more of them natively comes first (bf16 work prefers a
//      device with native bf16).
//   3. Memory: a replica needs devices.memory_gb — on a CPU out of its free memory, on
//      accelerators memory_gb / gpus on each of its devices. Every replica up to replicas.max is
//      placed (the pool must be able to reach its maximum); CPU cores are a soft need (an
//      oversubscription is stated in the reason, not refused).
//   4. Workload: decode_heavy prefers memory bandwidth, prefill_heavy prefers compute in the
//      pool's precisions (the best rate of int8 / bf16 / fp32 it needs; fp16 / fp8 count as
//      bf16), balanced prefers the most free memory, then bandwidth.
// Pools are placed most constrained first (fewest eligible devices), then in spec order; each
// replica goes to the best device with room at that moment (greedy; no backtracking).
//
// Errors: InvalidArgument naming the pool and the unmet need: "pool 'x': no gpu device supports
// fp8 (devices: ...)", "pool 'x': replica 3 of 3 needs 150 GB on one gpu; the most free on an
// eligible device is 80 GB (h100-1)". Duplicate device names are an error.
// Thread contract: a pure function of its arguments.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "control/devices.h"
#include "control/spec.h"

namespace strata::control {

struct ReplicaPlacement {
  int replica = 0;                   // 0-based, < replicas.max
  std::vector<std::string> devices;  // device names: 1 for CPU pools, `gpus` for accelerator pools
  std::string reason;                // why these devices: the rule that decided, and the figures
};

struct PoolPlacement {
  std::string pool;
  std::vector<ReplicaPlacement> replicas;
};

struct Placement {
  std::vector<PoolPlacement> pools;  // in spec order
  const PoolPlacement* Find(std::string_view pool) const;
};

Result<Placement> Place(const DeploymentSpec& spec, const std::vector<DeviceProfile>& devices);

nlohmann::json ToJson(const Placement& p);
std::string PlacementText(const Placement& p);  // one line per replica: pool[i] -> devices: reason

}  // namespace strata::control
