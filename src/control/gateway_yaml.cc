// gateway.yaml from a deployment spec: the pools are emitted with yaml-cpp's emitter (so every
// string is quoted as YAML needs), the spec's `gateway:` keys are appended as the block map they
// were re-emitted as, and the whole text is parsed by the gateway's own strict parser.
#include "control/gateway_yaml.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <functional>

#include "gateway/config.h"

namespace strata::control {
namespace {

// How one pool's replicas are written: `replicas: [...]` or `dns: {...}`.
using EmitReplicas = std::function<void(const PoolSpec& pool, YAML::Emitter* out)>;

// The built-in chat template the pool's replicas run with: `--chat-template NAME` in serve_args,
// else serve.model.chat_template, else "".
std::string PoolChatTemplate(const PoolSpec& pool) {
  const std::string_view flag = "--chat-template";
  for (size_t i = 0; i < pool.serve_args.size(); ++i) {
    const std::string& a = pool.serve_args[i];
    if (a == flag && i + 1 < pool.serve_args.size()) return pool.serve_args[i + 1];
    if (a.starts_with(std::string(flag) + "=")) return a.substr(flag.size() + 1);
  }
  if (pool.serve_yaml.empty()) return "";
  try {
    const YAML::Node serve = YAML::Load(pool.serve_yaml);
    const YAML::Node model = serve.IsMap() ? serve["model"] : YAML::Node();
    const YAML::Node t = model && model.IsMap() ? model["chat_template"] : YAML::Node();
    if (t && t.IsScalar()) return t.Scalar();
  } catch (const std::exception&) {  // the replica reports a bad serve config itself
  }
  return "";
}

void EmitPool(const DeploymentSpec& spec, const PoolSpec& pool, bool with_tokenizer,
              const EmitReplicas& emit_replicas, YAML::Emitter* out) {
  *out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << pool.name;
  emit_replicas(pool, out);
  if (with_tokenizer) *out << YAML::Key << "tokenizer" << YAML::Value << spec.ModelPath(pool);
  const std::string chat_template = PoolChatTemplate(pool);
  if (!chat_template.empty()) *out << YAML::Key << "chat_template" << YAML::Value << chat_template;
  std::map<std::string, std::string> labels = {{"model", pool.model}, {"version", pool.version}};
  for (const auto& [k, v] : pool.labels) labels[k] = v;
  *out << YAML::Key << "labels" << YAML::Value << YAML::BeginMap;
  for (const auto& [k, v] : labels) *out << YAML::Key << k << YAML::Value << v;
  *out << YAML::EndMap << YAML::EndMap;
}

// Gateway paths under the spec: pools[i] are the spec's pools[i], the rest is under `gateway.`.
Status ToSpecPaths(const Status& s) {
  const std::string& m = s.message();
  if (m.starts_with("pools[")) return s;
  if (m.starts_with("(top level): ")) return Status::InvalidArgument("gateway: " + m.substr(13));
  if (m.starts_with("YAML error")) return Status::InvalidArgument("gateway: " + m);
  return Status::InvalidArgument("gateway." + m);
}

// The `canary:` block of a route split for `pool`'s canary set.
YAML::Node CanaryBlock(const std::string& pool, const std::string& canary_pool,
                       const RolloutSpec& r) {
  YAML::Node c;
  c["baseline"] = pool;
  c["canary"] = canary_pool;
  for (double step : r.steps) c["steps"].push_back(step);
  c["steps"].SetStyle(YAML::EmitterStyle::Flow);
  c["min_requests"] = r.min_requests;
  c["min_duration_s"] = static_cast<int64_t>(r.min_duration.count());
  c["interval_s"] = static_cast<int64_t>(r.interval.count());
  c["guards"]["ttft_p95_max_ratio"] = r.guards.ttft_p95_max_ratio;
  c["guards"]["tpot_p95_max_ratio"] = r.guards.tpot_p95_max_ratio;
  c["guards"]["latency_min_delta_s"] = r.guards.latency_min_delta_s;
  c["guards"]["error_rate_max_delta"] = r.guards.error_rate_max_delta;
  return c;
}

bool IsPlainRouteTo(const YAML::Node& route, std::string_view pool) {
  if (!route.IsMap() || route["canary"]) return false;
  const YAML::Node to = route["to"];
  return to && to.IsScalar() && to.Scalar() == pool;
}

// The spec's gateway keys with the plain routes of every pool in `canaries` split.
Result<std::string> SplitRoutes(const std::string& extra_yaml,
                                const std::map<std::string, CanarySet>& canaries) {
  if (extra_yaml.empty() || canaries.empty()) return extra_yaml;
  try {
    YAML::Node root = YAML::Load(extra_yaml);
    YAML::Node routes = root.IsMap() ? root["routes"] : YAML::Node();
    if (!routes || !routes.IsSequence()) return extra_yaml;
    for (YAML::Node route : routes) {
      for (const auto& [pool, set] : canaries) {
        if (!IsPlainRouteTo(route, pool)) continue;
        const std::string canary_pool = CanaryPoolName(pool, set.version);
        YAML::Node arms;
        YAML::Node base, canary;
        base["pool"] = pool;
        base["weight"] = 100 - set.policy.steps.front();
        canary["pool"] = canary_pool;
        canary["weight"] = set.policy.steps.front();
        arms.push_back(base);
        arms.push_back(canary);
        route["to"] = arms;
        route["canary"] = CanaryBlock(pool, canary_pool, set.policy);
        break;
      }
    }
    YAML::Emitter out;
    out << YAML::Block << root;
    if (!out.good()) return Status::Internal("gateway.yaml: " + out.GetLastError());
    return std::string(out.c_str());
  } catch (const YAML::Exception& e) {
    return Status::Internal(std::string("gateway.yaml routes: ") + e.what());
  }
}

Result<std::string> Build(const DeploymentSpec& spec, bool with_tokenizer,
                          const EmitReplicas& emit_replicas,
                          const std::map<std::string, CanarySet>& canaries = {}) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "pools" << YAML::Value << YAML::BeginSeq;
  for (const PoolSpec& pool : spec.pools) EmitPool(spec, pool, with_tokenizer, emit_replicas, &out);
  for (const auto& entry : canaries) {
    const std::string& name = entry.first;
    const CanarySet& set = entry.second;
    const PoolSpec* base = spec.FindPool(name);
    if (base == nullptr) return Status::InvalidArgument("canaries: no pool named '" + name + "'");
    PoolSpec pool = *base;
    pool.name = CanaryPoolName(name, set.version);
    pool.version = set.version;
    EmitPool(
        spec, pool, with_tokenizer,
        [&set](const PoolSpec&, YAML::Emitter* o) {
          *o << YAML::Key << "replicas" << YAML::Value << YAML::Flow << YAML::BeginSeq;
          for (const std::string& url : set.replicas) *o << url;
          *o << YAML::EndSeq;
        },
        &out);
  }
  out << YAML::EndSeq << YAML::EndMap;
  if (!out.good()) return Status::Internal("gateway.yaml: " + out.GetLastError());
  std::string text = "# gateway.yaml generated by strata from the deployment spec '" + spec.name +
                     "' (do not edit: edit the spec)\n";
  text += out.c_str();
  text += "\n";
  ASSIGN_OR_RETURN(std::string extra, SplitRoutes(spec.gateway.extra_yaml, canaries));
  if (!extra.empty()) text += extra + "\n";
  auto parsed = gateway::ParseGatewayConfig(text);
  if (!parsed.ok()) return ToSpecPaths(parsed.status());
  return text;
}

Status CheckPoolKeys(const DeploymentSpec& spec, const std::vector<std::string>& keys,
                     std::string_view what) {
  for (const std::string& k : keys) {
    if (spec.FindPool(k) == nullptr)
      return Status::InvalidArgument(fmt::format("{}: no pool named '{}' in the spec", what, k));
  }
  return Status::Ok();
}

}  // namespace

std::string CanaryPoolName(std::string_view pool, std::string_view version) {
  std::string name = fmt::format("{}.{}", pool, version);
  return name.size() <= 64 ? name : fmt::format("{}.canary", pool);
}

Result<std::vector<std::string>> PlainRoutesTo(const DeploymentSpec& spec, std::string_view pool) {
  std::vector<std::string> out;
  if (spec.gateway.extra_yaml.empty()) return out;
  try {
    const YAML::Node root = YAML::Load(spec.gateway.extra_yaml);
    const YAML::Node routes = root.IsMap() ? root["routes"] : YAML::Node();
    if (!routes || !routes.IsSequence()) return out;
    for (const YAML::Node& route : routes) {
      const YAML::Node name = route.IsMap() ? route["name"] : YAML::Node();
      if (IsPlainRouteTo(route, pool) && name && name.IsScalar()) out.push_back(name.Scalar());
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("gateway.routes: ") + e.what());
  }
  return out;
}

Result<std::string> GatewayYaml(
    const DeploymentSpec& spec,
    const std::map<std::string, std::vector<std::string>>& replica_urls_by_pool) {
  return GatewayYaml(spec, replica_urls_by_pool, {});
}

Result<std::string> GatewayYaml(
    const DeploymentSpec& spec,
    const std::map<std::string, std::vector<std::string>>& replica_urls_by_pool,
    const std::map<std::string, CanarySet>& canaries) {
  std::vector<std::string> keys;
  keys.reserve(replica_urls_by_pool.size());
  for (const auto& kv : replica_urls_by_pool) keys.push_back(kv.first);
  RETURN_IF_ERROR(CheckPoolKeys(spec, keys, "replica URLs"));
  return Build(
      spec, /*with_tokenizer=*/true,
      [&](const PoolSpec& pool, YAML::Emitter* out) {
        *out << YAML::Key << "replicas" << YAML::Value << YAML::Flow << YAML::BeginSeq;
        auto it = replica_urls_by_pool.find(pool.name);
        if (it != replica_urls_by_pool.end()) {
          for (const std::string& url : it->second) *out << url;
        }
        *out << YAML::EndSeq;
      },
      canaries);
}

Result<std::string> GatewayYaml(const DeploymentSpec& spec,
                                const std::map<std::string, std::string>& dns_name_by_pool,
                                int replica_port) {
  if (replica_port < 1 || replica_port > 65535)
    return Status::InvalidArgument(fmt::format("replica port {} not in [1, 65535]", replica_port));
  std::vector<std::string> keys;
  keys.reserve(dns_name_by_pool.size());
  for (const auto& kv : dns_name_by_pool) keys.push_back(kv.first);
  RETURN_IF_ERROR(CheckPoolKeys(spec, keys, "DNS names"));
  for (const PoolSpec& pool : spec.pools) {
    auto it = dns_name_by_pool.find(pool.name);
    if (it == dns_name_by_pool.end() || it->second.empty())
      return Status::InvalidArgument("DNS names: none for pool '" + pool.name + "'");
  }
  return Build(spec, /*with_tokenizer=*/false, [&](const PoolSpec& pool, YAML::Emitter* out) {
    *out << YAML::Key << "dns" << YAML::Value << YAML::BeginMap << YAML::Key << "name"
         << YAML::Value << dns_name_by_pool.at(pool.name) << YAML::Key << "port" << YAML::Value
         << replica_port << YAML::EndMap;
  });
}

Status CheckGatewaySection(const DeploymentSpec& spec) {
  auto text = Build(spec, /*with_tokenizer=*/false, [](const PoolSpec&, YAML::Emitter* out) {
    *out << YAML::Key << "replicas" << YAML::Value << YAML::Flow << YAML::BeginSeq
         << "http://127.0.0.1:1" << YAML::EndSeq;
  });
  return text.status();
}

}  // namespace strata::control
