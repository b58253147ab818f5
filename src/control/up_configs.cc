#include "control/up_configs.h"

#include <fmt/format.h>
#include <signal.h>
#include <yaml-cpp/yaml.h>

#include <random>

namespace strata::control::up {
namespace {

std::string MakeAdminKey() {
  std::random_device rd;
  std::string key;
  for (int i = 0; i < 4; ++i) key += fmt::format("{:08x}", rd());
  return key;
}

}  // namespace

ConfigFiles::ConfigFiles(const Context& ctx) : ctx_(ctx), generated_admin_key_(MakeAdminKey()) {}

std::string ConfigFiles::admin_key() const {
  MutexLock lock(&mu_);
  return admin_key_;
}

ConfigFiles::Backends ConfigFiles::GatewayBackends(const State& s, const ChildMap& children) {
  Backends b;
  for (const auto& [pool, run] : s.pools)
    if (run.canary && run.canary->splitting())
      b.canaries[pool] = CanarySet{run.canary->to(), {}, run.canary_policy};
  for (const auto& [name, r] : s.replicas) {
    auto it = children.find(name);
    if (r.leaving || it == children.end() || it->second.port == 0) continue;
    auto run = s.pools.find(r.pool);
    if (run != s.pools.end() && run->second.InCanarySet(r.version)) {
      // A starting canary set gets no traffic; a splitting one is its own gateway pool.
      if (auto c = b.canaries.find(r.pool); c != b.canaries.end())
        c->second.replicas.push_back(it->second.url());
      continue;
    }
    b.urls[r.pool].push_back(it->second.url());
  }
  return b;
}

Result<std::string> ConfigFiles::AddUpKeys(const std::string& text,
                                           std::chrono::milliseconds hold) {
  try {
    YAML::Node root = YAML::Load(text);
    // Every pool holds requests while it has no ready replica (scale from zero, restarts).
    for (YAML::Node pool : root["pools"]) pool["cold_start_hold_ms"] = hold.count();
    // The gateway's /ui shows this status (decisions, SLO attainment) unless the spec says.
    if (!root["ui"]) root["ui"]["control_url"] = ctx_.StatusUrl() + "/status";
    // The admin API (a canary rollout follows the gateway's canary through it): the spec's key,
    // else one made up at start (written only to this state dir's gateway.yaml).
    const YAML::Node key = root["admin"] ? root["admin"]["api_key"] : YAML::Node();
    if (key && key.IsScalar() && !key.Scalar().empty()) {
      admin_key_ = key.Scalar();
    } else {
      root["admin"]["api_key"] = generated_admin_key_;
      admin_key_ = generated_admin_key_;
    }
    YAML::Emitter out;
    out << root;
    return std::string(out.c_str()) + "\n";
  } catch (const YAML::Exception& e) {
    return Status::Internal(std::string("gateway yaml: ") + e.what());
  }
}

Status ConfigFiles::WriteGateway(const State& s, const ChildMap& children) {
  const Backends b = GatewayBackends(s, children);
  DeploymentSpec render = s.spec;  // each pool's labels carry the version it runs
  for (PoolSpec& p : render.pools)
    if (auto run = s.pools.find(p.name); run != s.pools.end()) p.version = run->second.version;
  ASSIGN_OR_RETURN(const std::string plain, GatewayYaml(render, b.urls, b.canaries));
  MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const std::string text, AddUpKeys(plain, s.spec.autoscaling.cold_start_hold));
  if (text != gateway_yaml_) {
    RETURN_IF_ERROR(WriteFileAtomic(ctx_.Path("gateway.yaml"), text));
    gateway_yaml_ = text;
    gateway_stale_ = true;
  }
  auto gw = children.find(std::string(kGateway));
  // Only once it listens: before that it may not have blocked SIGHUP yet (it reads the file then).
  if (gateway_stale_ && gw != children.end() && gw->second.pid > 0 && gw->second.port > 0) {
    kill(gw->second.pid, SIGHUP);
    gateway_stale_ = false;
  }
  return Status::Ok();
}

void ConfigFiles::WriteTargets(const ChildMap& children) {
  nlohmann::json t = nlohmann::json::array();
  for (const auto& [name, c] : children) {
    if (c.port == 0 || name == kPrometheus) continue;
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [k, v] : c.labels) labels[k] = v;
    t.push_back({{"targets", {fmt::format("127.0.0.1:{}", c.port)}}, {"labels", labels}});
  }
  t.push_back({{"targets", {fmt::format("127.0.0.1:{}", ctx_.status_port)}},
               {"labels", {{"role", "control"}, {"replica", "up"}}}});
  const std::string text = t.dump(2) + "\n";
  MutexLock lock(&mu_);
  if (text == targets_) return;
  if (WriteFileAtomic(ctx_.Path("prometheus/targets.json"), text).ok()) targets_ = text;
}

}  // namespace strata::control::up
