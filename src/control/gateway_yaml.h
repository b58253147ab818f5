// control/gateway_yaml: the gateway's config file (gateway.yaml, `strata gateway --config`) for a
// deployment spec — one gateway pool per spec pool, with its replicas' URLs (`strata up`) or a
// DNS name per pool (`strata render k8s`: the pool's headless Service), followed by the spec's
// `gateway:` keys (routes, tenants, admission, ...) — validated with gateway::ParseGatewayConfig
// before it is returned.
//
// Each gateway pool gets: `name`, `replicas:` (or `dns: {name, port}`), `tokenizer:` the pool's
// GGUF path (static form only: in Kubernetes the gateway pod does not mount the models), the
// `chat_template` of the pool's `serve.model.chat_template` when set, and `labels:` = {model,
// version} plus the pool's own labels (which win).
// Errors: InvalidArgument. The gateway's own messages are kept, with paths under the spec:
// "gateway.routes[1].to: no pool named 'x'" (a gateway `pools[i]...` path stays `pools[i]...`).
// A pool with no replica URLs is written `replicas: []`, which the gateway accepts only once it
// can hold requests for an empty pool (scale to zero).
//
// Thread contract: pure functions of their arguments.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "control/spec.h"

namespace strata::control {

// Static replicas: `replica_urls_by_pool[pool]` ("http://127.0.0.1:port"); a pool missing from
// the map has no replicas yet. A key naming no pool of the spec is an error.
Result<std::string> GatewayYaml(
    const DeploymentSpec& spec,
    const std::map<std::string, std::vector<std::string>>& replica_urls_by_pool);

// A canary rollout's new replica set of one pool (control/up).
struct CanarySet {
  std::string version;                // the new model version
  std::vector<std::string> replicas;  // its replicas' URLs
  RolloutSpec policy;                 // steps, min_requests, durations, guards
};

// The gateway pool of pool's canary set: "POOL.VERSION" (a name no spec pool can have: spec pool
// names have no '.'), or "POOL.canary" when that would pass the gateway's 64 characters.
std::string CanaryPoolName(std::string_view pool, std::string_view version);

// As above, during canary rollouts: per pool P in `canaries`, one more gateway pool
// CanaryPoolName(P, version) with the set's replicas (labels and tokenizer of the new version),
// and every route whose `to:` is P alone (PlainRoutesTo) becomes the split
// `to: [{pool: P, weight: 100 - steps[0]}, {pool: P.VERSION, weight: steps[0]}]` with
// `canary: {baseline: P, canary: P.VERSION, steps, min_requests, min_duration_s, interval_s,
// guards}` from the set's policy. Other routes naming P (splits, cascades, shadows) keep P.
Result<std::string> GatewayYaml(
    const DeploymentSpec& spec,
    const std::map<std::string, std::vector<std::string>>& replica_urls_by_pool,
    const std::map<std::string, CanarySet>& canaries);

// The names of the gateway routes whose `to:` is `pool` alone and that have no `canary:` of their
// own — the routes a canary rollout of the pool splits (empty: the pool is not routed that way).
Result<std::vector<std::string>> PlainRoutesTo(const DeploymentSpec& spec, std::string_view pool);

// Kubernetes: `dns_name_by_pool[pool]` (e.g. "strata-general.ns.svc.cluster.local"), each
// resolved by the gateway to replicas http://addr:replica_port. Every pool needs a name.
Result<std::string> GatewayYaml(const DeploymentSpec& spec,
                                const std::map<std::string, std::string>& dns_name_by_pool,
                                int replica_port);

// The spec's check at load: the gateway config with a placeholder replica per pool parses
// (routes name existing pools, tenants/admission/... are valid). Used by ParseDeploymentSpec.
Status CheckGatewaySection(const DeploymentSpec& spec);

}  // namespace strata::control
