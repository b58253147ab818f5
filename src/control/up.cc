#include "control/up.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "control/fetch.h"
#include "control/gateway_yaml.h"
#include "control/loop.h"
#include "control/prom_client.h"
#include "control/queries.h"
#include "control/rollout.h"
#include "control/supervisor.h"
#include "http/json_fields.h"
#include "http/server.h"

namespace strata::control {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::milliseconds;

constexpr std::string_view kGateway = "gateway";
// How long a leaving replica keeps running after the gateway.yaml without it was written: the
// gateway's reload (SIGHUP) and the requests it routed just before it.
constexpr std::chrono::milliseconds kLeaveAfterReload{2000};
constexpr std::string_view kPrometheus = "prometheus";

Status WriteFileAtomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return Status::IoError("cannot write " + tmp);
    f << text;
    if (!f.flush()) return Status::IoError("cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::IoError("cannot rename " + tmp + ": " + ec.message());
  return Status::Ok();
}

// A port free on 127.0.0.1 now (bound and released: the child binds it a moment later).
Result<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IoError("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  if (!ok) return Status::IoError("no free port on 127.0.0.1");
  return static_cast<int>(ntohs(a.sin_port));
}

// `name` as given when it holds a '/', else the first executable on PATH.
Result<std::string> FindBinary(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string p = (dir.empty() ? "." : dir) + "/" + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return Status::NotFound("'" + name + "' is not on PATH");
}

// One instant query's first sample value (NaN when there is none or Prometheus is unreachable).
double QueryValue(const std::string& prom_url, const std::string& expr) {
  auto r = FetchHttp("GET", prom_url, "/api/v1/query?query=" + UrlEncode(expr), milliseconds(2000));
  if (!r.ok() || r->status != 200) return std::nan("");
  auto samples = ParseQueryResponse(r->body);
  return samples.ok() && !samples->empty() ? samples->front().value : std::nan("");
}

// The measured figures of one pool over the last minute, from the replicas' histograms.
struct PoolFigures {
  double e2e_p95_s = std::nan(""), ttft_p95_s = std::nan(""), tpot_p95_s = std::nan("");
  double error_rate = std::nan(""), request_rate = std::nan("");
};

std::string P95(std::string_view family, std::string_view pool) {
  return fmt::format(
      "histogram_quantile(0.95, sum by (le) (rate({}_bucket{{role=\"replica\",pool=\"{}\"}}[1m])))",
      family, pool);
}

PoolFigures MeasurePool(const std::string& prom_url, const std::string& pool) {
  PoolFigures f;
  f.e2e_p95_s = QueryValue(prom_url, P95("strata:e2e_request_latency_seconds", pool));
  f.ttft_p95_s = QueryValue(prom_url, P95("strata:time_to_first_token_seconds", pool));
  f.tpot_p95_s = QueryValue(prom_url, P95("strata:inter_token_latency_seconds", pool));
  const std::string all = fmt::format(
      "sum(rate(strata:request_success_total{{role=\"replica\",pool=\"{}\"}}[1m]))", pool);
  f.request_rate = QueryValue(prom_url, all);
  f.error_rate = QueryValue(
      prom_url, fmt::format("sum(rate(strata:request_success_total{{role=\"replica\",pool=\"{}\","
                            "finished_reason=\"error\"}}[1m])) / {}",
                            pool, all));
  if (std::isnan(f.error_rate) && f.request_rate > 0) f.error_rate = 0;  // no error series yet
  return f;
}

json Number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// One objective: its target, the measured figure and whether it is met (null: no data yet).
json Objective(double target, double measured, double scale) {
  const double m = measured * scale;
  return {{"target", target},
          {"measured", Number(m)},
          {"met", std::isfinite(m) ? json(m <= target) : json(nullptr)}};
}

json Attainment(const SloSpec& slo, const PoolFigures& f) {
  json out = json::object();
  if (slo.e2e_p95_ms > 0) out["e2e_p95_ms"] = Objective(slo.e2e_p95_ms, f.e2e_p95_s, 1e3);
  if (slo.ttft_p95_ms > 0) out["ttft_p95_ms"] = Objective(slo.ttft_p95_ms, f.ttft_p95_s, 1e3);
  if (slo.tpot_p95_ms > 0) out["tpot_p95_ms"] = Objective(slo.tpot_p95_ms, f.tpot_p95_s, 1e3);
  out["error_rate"] = Objective(slo.error_rate, f.error_rate, 1);
  return out;
}

}  // namespace

struct Up::Impl {
  struct Replica {
    std::string pool, version;
    bool leaving = false;
    // A leaving replica is stopped (drained) this long after the gateway.yaml without it was
    // written, so the gateway has reloaded and no request picked before it lands on it.
    std::optional<std::chrono::steady_clock::time_point> stop_at;
  };
  struct PoolRun {
    std::string version;
    int desired = 0;
    int next_index = 0;
    std::optional<ScaleDecision> decision;
    std::string rollout;     // "v1 -> v2" while a surge rollout runs
    std::string surge_from;  // its old version
    // A canary rollout (control/rollout.h): active, or finished and not applied yet; its policy
    // as it was when it started (a reload does not restart the gateway's canary).
    std::optional<CanaryRollout> canary;
    RolloutSpec canary_policy;
    json last_rollout;  // the last finished rollout (null: none yet)
    PoolFigures figures;
    // Whether replica version `v` belongs to the pool's active canary set.
    bool InCanarySet(const std::string& v) const {
      return canary && canary->active() && v == canary->to();
    }
  };
  struct ColdStart {
    std::string pool, replica;
    double seconds;      // fork → ready
    double from_zero_s;  // activation (held request, pool at 0) → ready; < 0: not from zero
  };

  Up* owner = nullptr;
  UpOptions opts;
  std::string state_dir, prom_bin;
  std::unique_ptr<Supervisor> sup;
  std::unique_ptr<http::HttpServer> server;
  int prom_port = 0;

  mutable Mutex mu;
  CondVar cv;
  DeploymentSpec spec GUARDED_BY(mu);
  std::map<std::string, PoolRun> pools GUARDED_BY(mu);
  std::map<std::string, Replica> replicas GUARDED_BY(mu);  // by child name
  std::string gateway_yaml GUARDED_BY(mu);                 // as last written
  // The gateway's admin API key: the spec's admin.api_key, else one made up at start.
  std::string admin_key GUARDED_BY(mu);
  std::string generated_admin_key;
  bool gateway_stale GUARDED_BY(mu) = false;  // written, SIGHUP not sent yet
  std::string targets GUARDED_BY(mu);
  std::vector<ColdStart> cold_starts GUARDED_BY(mu);
  std::set<std::string> seen_ready GUARDED_BY(mu);
  struct Activation {
    std::string pool;
    std::chrono::steady_clock::time_point at;
  };
  std::vector<Activation> activations GUARDED_BY(mu);  // pools started from zero, awaiting ready
  bool stopping GUARDED_BY(mu) = false;
  std::chrono::steady_clock::time_point next_canary_poll GUARDED_BY(mu);
  std::thread ticker;
  // The SLO autoscaler (control/loop): Prometheus in, this Up as its actuator.
  std::unique_ptr<ObservationSource> source;
  std::unique_ptr<Actuator> actuator;
  std::unique_ptr<ControlLoop> loop;
  std::atomic<bool> shut_down{false};

  std::string Path(std::string_view rel) const { return state_dir + "/" + std::string(rel); }
  std::string LogPath(std::string_view child) const {
    return Path("logs/" + std::string(child) + ".log");
  }

  Status StartReplica(const PoolSpec& p, const std::string& version) REQUIRES(mu);
  void Reconcile() REQUIRES(mu);
  void ReconcilePool(const PoolSpec& p, PoolRun& run,
                     const std::map<std::string, ChildStatus>& children,
                     std::vector<std::string>* leave) REQUIRES(mu);
  void ReconcileCanarySet(const PoolSpec& p, PoolRun& run,
                          const std::map<std::string, ChildStatus>& children,
                          std::vector<std::string>* leave) REQUIRES(mu);
  void FinishCanary(const PoolSpec& p, PoolRun& run, std::vector<std::string>* leave) REQUIRES(mu);
  // The gateway URL to poll for canaries now ("" = not due: no canary splits, or polled < 1 s ago).
  std::string CanaryPollDue() REQUIRES(mu);
  void ObserveCanaries(const Result<FetchReply>& reply) REQUIRES(mu);
  Result<std::vector<std::string>> CanaryRoutes(const PoolSpec& p) const REQUIRES(mu);
  Status WriteGatewayYaml(const std::map<std::string, ChildStatus>& children) REQUIRES(mu);
  void WriteTargets(const std::map<std::string, ChildStatus>& children) REQUIRES(mu);
  Status StartGateway();
  Status StartPrometheus();
  Status StartLoop();
  std::optional<int> CurrentReplicas(const std::string& pool);
  void Tick();
  void Activate(const std::map<std::string, int>& held) REQUIRES(mu);
  http::HttpResponse Handle(const http::HttpRequest& req);
};

Up::Up(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Up::~Up() { Shutdown(); }

Status Up::Impl::StartReplica(const PoolSpec& p, const std::string& version) {
  PoolRun& run = pools[p.name];
  const std::string name = fmt::format("{}-{}", p.name, run.next_index++);
  PoolSpec at_version = p;
  at_version.version = version;
  ChildSpec c;
  c.name = name;
  c.argv = {opts.strata_bin, "serve", "--host",  "127.0.0.1",
            "--port",        "0",     "--model", spec.ModelPath(at_version)};
  if (!p.serve_yaml.empty()) {
    const std::string cfg = Path("serve/" + p.name + ".yaml");
    RETURN_IF_ERROR(WriteFileAtomic(cfg, p.serve_yaml));
    c.argv.insert(c.argv.end(), {"--config", cfg});
  }
  c.argv.insert(c.argv.end(), p.serve_args.begin(), p.serve_args.end());
  // Clients send the spec's model name, whichever version answers (spec.h kServedModelNameFlag).
  c.argv.insert(c.argv.end(), {std::string(kServedModelNameFlag), p.model});
  c.log_path = LogPath(name);
  c.ready_timeout = opts.ready_timeout;
  c.grace = opts.drain_grace;
  c.labels = {{"pool", p.name}, {"replica", name}, {"version", version}, {"role", "replica"}};
  RETURN_IF_ERROR(sup->Start(std::move(c)));
  replicas[name] = Replica{p.name, version, false, std::nullopt};
  return Status::Ok();
}

// A pool's replicas toward `desired` of its current version: missing ones start; during a
// rollout each ready new replica lets one old one leave; extras leave (not ready ones first,
// then the newest).
void Up::Impl::ReconcilePool(const PoolSpec& p, PoolRun& run,
                             const std::map<std::string, ChildStatus>& children,
                             std::vector<std::string>* leave) {
  FinishCanary(p, run, leave);
  std::vector<std::string> current, old;
  int ready_new = 0;
  for (const auto& [name, r] : replicas) {
    if (r.pool != p.name || r.leaving || run.InCanarySet(r.version)) continue;
    (r.version == run.version ? current : old).push_back(name);
    auto it = children.find(name);
    if (r.version == run.version && it != children.end() && it->second.state == ChildState::kReady)
      ++ready_new;
  }
  for (int i = static_cast<int>(current.size()); i < run.desired; ++i) {
    if (Status s = StartReplica(p, run.version); !s.ok()) {
      std::fprintf(stderr, "strata up: pool %s: %s\n", p.name.c_str(), s.ToString().c_str());
      break;
    }
  }
  auto not_ready_first = [&children](const std::string& a, const std::string& b) {
    auto ready = [&children](const std::string& n) {
      auto it = children.find(n);
      return it != children.end() && it->second.state == ChildState::kReady;
    };
    if (ready(a) != ready(b)) return !ready(a);
    return a > b;  // the newest (highest index, same width or longer) first
  };
  const size_t allowed_old = static_cast<size_t>(std::max(0, run.desired - ready_new));
  std::sort(old.begin(), old.end(), not_ready_first);
  for (size_t i = 0; old.size() - i > allowed_old; ++i) leave->push_back(old[i]);
  if (old.empty() && !run.rollout.empty()) {
    run.last_rollout = {{"strategy", "surge"},    {"pool", p.name},
                        {"from", run.surge_from}, {"to", run.version},
                        {"phase", "promoted"},    {"reason", "every old replica drained"}};
    run.rollout.clear();
  }
  std::sort(current.begin(), current.end(), not_ready_first);
  for (size_t i = 0; current.size() - i > static_cast<size_t>(run.desired); ++i)
    leave->push_back(current[i]);
  ReconcileCanarySet(p, run, children, leave);
}

// The new version's set of a canary rollout: as many replicas as the pool's count (the old set's:
// the autoscaler sizes the pool, the set follows), extras leave; then the rollout sees the set.
void Up::Impl::ReconcileCanarySet(const PoolSpec& p, PoolRun& run,
                                  const std::map<std::string, ChildStatus>& children,
                                  std::vector<std::string>* leave) {
  if (!run.canary || !run.canary->active()) return;
  const std::string version = run.canary->to();
  std::vector<std::string> set;
  NewSetState seen;
  seen.wanted = std::max(1, run.desired);
  for (const auto& [name, r] : replicas) {
    if (r.pool != p.name || r.leaving || r.version != version) continue;
    set.push_back(name);
    auto it = children.find(name);
    if (it == children.end()) continue;
    seen.ready += it->second.state == ChildState::kReady;
    if (it->second.state == ChildState::kFailed && seen.failed.empty())
      seen.failed = fmt::format("{}: {} (log {})", name, it->second.last_exit, it->second.log_path);
  }
  for (int i = static_cast<int>(set.size()); i < seen.wanted; ++i) {
    if (Status s = StartReplica(p, version); !s.ok()) {
      seen.failed = s.ToString();
      break;
    }
  }
  auto ready = [&children](const std::string& n) {
    auto it = children.find(n);
    return it != children.end() && it->second.state == ChildState::kReady;
  };
  std::sort(set.begin(), set.end(), [&ready](const std::string& a, const std::string& b) {
    return ready(a) != ready(b) ? !ready(a) : a > b;
  });
  for (size_t i = 0; set.size() - i > static_cast<size_t>(seen.wanted); ++i) {
    seen.ready -= ready(set[i]);
    leave->push_back(set[i]);
  }
  run.canary->ObserveReplicas(seen, std::chrono::steady_clock::now());
  FinishCanary(p, run, leave);  // a failed start ends it at once
}

// A finished canary rollout is applied: promoted → the pool runs the new version (the old
// replicas are then "old" and drain, the new set ready); rolled back or failed → the new set
// leaves and the pool keeps its version. The rollout stays in the status as last_rollout.
void Up::Impl::FinishCanary(const PoolSpec& p, PoolRun& run, std::vector<std::string>* leave) {
  if (!run.canary || run.canary->active()) return;
  const CanaryRollout& c = *run.canary;
  if (c.phase() == RolloutPhase::kPromoted) {
    run.version = c.to();
  } else {
    for (auto& [name, r] : replicas) {
      if (r.pool != p.name || r.leaving || r.version != c.to()) continue;
      r.leaving = true;
      leave->push_back(name);
    }
  }
  run.last_rollout = c.ToJson(std::chrono::steady_clock::now());
  std::fprintf(stderr, "strata up: pool %s: rollout %s -> %s %s: %s\n", p.name.c_str(),
               c.from().c_str(), c.to().c_str(), std::string(RolloutPhaseName(c.phase())).c_str(),
               c.reason().c_str());
  run.canary.reset();
}

void Up::Impl::Reconcile() {
  if (stopping) return;
  std::map<std::string, ChildStatus> children;
  for (ChildStatus& c : sup->Children()) children.emplace(c.name, std::move(c));
  for (auto it = replicas.begin(); it != replicas.end();)  // stopped and reaped: forgotten
    it = children.contains(it->first) ? std::next(it) : replicas.erase(it);
  for (const auto& [name, c] : children) {
    if (c.cold_start_s < 0 || seen_ready.contains(name) || !replicas.contains(name)) continue;
    seen_ready.insert(name);
    const std::string& pool = replicas[name].pool;
    double from_zero = -1;
    for (auto a = activations.begin(); a != activations.end(); ++a) {
      if (a->pool != pool) continue;
      from_zero = std::chrono::duration<double>(std::chrono::steady_clock::now() - a->at).count();
      activations.erase(a);
      break;
    }
    cold_starts.push_back({pool, name, c.cold_start_s, from_zero});
  }
  std::vector<std::string> leave;
  for (const PoolSpec& p : spec.pools) ReconcilePool(p, pools[p.name], children, &leave);
  for (const std::string& n : leave) replicas[n].leaving = true;
  children.clear();  // new replicas were started: read again
  for (ChildStatus& c : sup->Children()) children.emplace(c.name, std::move(c));
  if (Status s = WriteGatewayYaml(children); !s.ok())
    std::fprintf(stderr, "strata up: gateway.yaml: %s\n", s.ToString().c_str());
  const auto now = std::chrono::steady_clock::now();
  for (const std::string& n : leave) replicas[n].stop_at = now + kLeaveAfterReload;
  for (auto& [name, r] : replicas) {  // after the gateway stopped sending to them
    if (!r.leaving || !r.stop_at || now < *r.stop_at) continue;
    sup->Stop(name);
    r.stop_at.reset();
  }
  WriteTargets(children);
}

Status Up::Impl::WriteGatewayYaml(const std::map<std::string, ChildStatus>& children) {
  std::map<std::string, std::vector<std::string>> urls;
  std::map<std::string, CanarySet> canaries;  // pools whose routes split now
  for (const auto& [pool, run] : pools)
    if (run.canary && run.canary->splitting())
      canaries[pool] = CanarySet{run.canary->to(), {}, run.canary_policy};
  for (const auto& [name, r] : replicas) {
    auto it = children.find(name);
    if (r.leaving || it == children.end() || it->second.port == 0) continue;
    auto run = pools.find(r.pool);
    if (run != pools.end() && run->second.InCanarySet(r.version)) {
      // A starting canary set gets no traffic; a splitting one is its own gateway pool.
      if (auto c = canaries.find(r.pool); c != canaries.end())
        c->second.replicas.push_back(it->second.url());
      continue;
    }
    urls[r.pool].push_back(it->second.url());
  }
  DeploymentSpec render = spec;  // each pool's labels carry the version it runs
  for (PoolSpec& p : render.pools)
    if (auto run = pools.find(p.name); run != pools.end()) p.version = run->second.version;
  ASSIGN_OR_RETURN(std::string text, GatewayYaml(render, urls, canaries));
  // Every pool holds requests while it has no ready replica (scale from zero, restarts).
  try {
    YAML::Node root = YAML::Load(text);
    for (YAML::Node pool : root["pools"])
      pool["cold_start_hold_ms"] = spec.autoscaling.cold_start_hold.count();
    // The gateway's /ui shows this status (decisions, SLO attainment) unless the spec says.
    if (!root["ui"])
      root["ui"]["control_url"] = fmt::format("http://127.0.0.1:{}/status", server->port());
    // The admin API (a canary rollout follows the gateway's canary through it): the spec's key,
    // else one made up at start (written only to this state dir's gateway.yaml).
    const YAML::Node key = root["admin"] ? root["admin"]["api_key"] : YAML::Node();
    if (key && key.IsScalar() && !key.Scalar().empty()) {
      admin_key = key.Scalar();
    } else {
      root["admin"]["api_key"] = generated_admin_key;
      admin_key = generated_admin_key;
    }
    YAML::Emitter out;
    out << root;
    text = std::string(out.c_str()) + "\n";
  } catch (const YAML::Exception& e) {
    return Status::Internal(std::string("gateway yaml: ") + e.what());
  }
  if (text != gateway_yaml) {
    RETURN_IF_ERROR(WriteFileAtomic(Path("gateway.yaml"), text));
    gateway_yaml = text;
    gateway_stale = true;
  }
  auto gw = children.find(std::string(kGateway));
  // Only once it listens: before that it may not have blocked SIGHUP yet (it reads the file then).
  if (gateway_stale && gw != children.end() && gw->second.pid > 0 && gw->second.port > 0) {
    kill(gw->second.pid, SIGHUP);
    gateway_stale = false;
  }
  return Status::Ok();
}

void Up::Impl::WriteTargets(const std::map<std::string, ChildStatus>& children) {
  json t = json::array();
  for (const auto& [name, c] : children) {
    if (c.port == 0 || name == kPrometheus) continue;
    json labels = json::object();
    for (const auto& [k, v] : c.labels) labels[k] = v;
    t.push_back({{"targets", {fmt::format("127.0.0.1:{}", c.port)}}, {"labels", labels}});
  }
  t.push_back({{"targets", {fmt::format("127.0.0.1:{}", server->port())}},
               {"labels", {{"role", "control"}, {"replica", "up"}}}});
  const std::string text = t.dump(2) + "\n";
  if (text == targets) return;
  if (WriteFileAtomic(Path("prometheus/targets.json"), text).ok()) targets = text;
}

Status Up::Impl::StartGateway() {
  int port = 0;
  {
    MutexLock lock(&mu);
    port = spec.gateway.port;
  }
  ChildSpec c;
  c.name = std::string(kGateway);
  c.argv = {opts.strata_bin, "gateway",   "--config", Path("gateway.yaml"),
            "--host",        "127.0.0.1", "--port",   std::to_string(port)};
  c.log_path = LogPath(kGateway);
  c.ready_path = "/health";  // /ready waits for a replica; the gateway itself is up
  c.ready_timeout = opts.ready_timeout;
  c.grace = opts.drain_grace;
  c.labels = {{"role", "gateway"}, {"replica", "gateway"}};
  return sup->Start(std::move(c));
}

Status Up::Impl::StartPrometheus() {
  std::string config;
  {
    MutexLock lock(&mu);
    const int64_t scrape = std::max<int64_t>(1, spec.prometheus.scrape_interval.count());
    // The recording rules and SLO alerts the autoscaler and dashboards use (control/queries).
    RETURN_IF_ERROR(WriteFileAtomic(Path("prometheus/rules.yml"), RulesYaml(spec)));
    config = fmt::format(
        "# Generated by `strata up` for deployment {}: every target comes from targets.json,\n"
        "# labelled pool / replica / version / role.\n"
        "global:\n  scrape_interval: {}s\n  evaluation_interval: {}s\n"
        "rule_files: ['{}']\n"
        "scrape_configs:\n  - job_name: strata\n    file_sd_configs:\n"
        "      - files: ['{}']\n        refresh_interval: {}s\n",
        spec.name, scrape, scrape, Path("prometheus/rules.yml"), Path("prometheus/targets.json"),
        scrape);
  }
  RETURN_IF_ERROR(WriteFileAtomic(Path("prometheus/prometheus.yml"), config));
  ChildSpec c;
  c.name = std::string(kPrometheus);
  c.argv = {prom_bin, "--config.file=" + Path("prometheus/prometheus.yml"),
            "--storage.tsdb.path=" + Path(fmt::format("prometheus/data-{}", std::time(nullptr))),
            "--web.listen-address=127.0.0.1:" + std::to_string(prom_port),
            "--storage.tsdb.retention.time=1d"};
  c.log_path = LogPath(kPrometheus);
  c.fixed_port = prom_port;
  c.ready_path = "/-/ready";
  c.ready_timeout = opts.ready_timeout;
  c.grace = milliseconds(10000);
  c.labels = {{"role", "prometheus"}};
  return sup->Start(std::move(c));
}

namespace {

// The autoscaler's actuator: SetReplicas changes a pool's desired count; CurrentReplicas counts
// the pool's replicas that run or are starting (not leaving, not failed).
class UpActuator final : public Actuator {
 public:
  UpActuator(Up* up, Up::Impl* impl) : up_(up), impl_(impl) {}
  std::optional<int> CurrentReplicas(const std::string& pool) override {
    return impl_->CurrentReplicas(pool);
  }
  Status SetReplicas(const std::string& pool, int replicas, const ScaleDecision& d) override {
    return up_->SetReplicas(pool, replicas, d);
  }

 private:
  Up* up_;
  Up::Impl* impl_;
};

}  // namespace

std::optional<int> Up::Impl::CurrentReplicas(const std::string& pool) {
  std::map<std::string, ChildStatus> children;
  for (ChildStatus& c : sup->Children()) children.emplace(c.name, std::move(c));
  MutexLock lock(&mu);
  int n = 0;
  auto run = pools.find(pool);
  for (const auto& [name, r] : replicas) {
    auto it = children.find(name);
    const bool canary_set = run != pools.end() && run->second.InCanarySet(r.version);
    n += r.pool == pool && !r.leaving && !canary_set && it != children.end() &&
         it->second.state != ChildState::kFailed;
  }
  return n;
}

// The control loop, when autoscaling is enabled and Prometheus runs. Its rate window is 4 scrape
// intervals, at least 10 s (rate() needs two samples in it; short enough to follow a load step).
Status Up::Impl::StartLoop() {
  DeploymentSpec copy;
  {
    MutexLock lock(&mu);
    if (!spec.autoscaling.enabled || prom_port == 0) return Status::Ok();
    copy = spec;
  }
  ASSIGN_OR_RETURN(PromClient client,
                   PromClient::Create(fmt::format("http://127.0.0.1:{}", prom_port)));
  const int64_t window = std::max<int64_t>(10, 4 * copy.prometheus.scrape_interval.count());
  source = std::make_unique<PromObservationSource>(std::move(client), fmt::format("{}s", window));
  actuator = std::make_unique<UpActuator>(owner, this);
  loop = std::make_unique<ControlLoop>(std::move(copy), source.get(), actuator.get());
  loop->Start();
  return Status::Ok();
}

namespace {

// The requests the gateway holds per pool (its strata_gateway_pool_held_requests gauge).
std::map<std::string, int> HeldRequests(const std::string& gateway_url) {
  std::map<std::string, int> out;
  if (gateway_url.empty()) return out;
  auto r = FetchHttp("GET", gateway_url, "/metrics", milliseconds(1000));
  if (!r.ok() || r->status != 200) return out;
  static const std::regex kHeld(
      "^strata_gateway_pool_held_requests\\{pool=\"([^\"]+)\"\\} ([0-9.e+]+)$");
  std::stringstream lines(r->body);
  std::smatch m;
  for (std::string line; std::getline(lines, line);)
    if (std::regex_match(line, m, kHeld)) out[m[1].str()] = static_cast<int>(std::stod(m[2]));
  return out;
}

}  // namespace

// Activation (KEDA's activationThreshold, here at the gateway's pace rather than Prometheus's):
// a pool at zero whose gateway holds requests gets its first replica now.
void Up::Impl::Activate(const std::map<std::string, int>& held) {
  for (const auto& [pool, n] : held) {
    const PoolSpec* p = spec.FindPool(pool);
    auto run = pools.find(pool);
    if (!p || run == pools.end() || n <= 0 || run->second.desired > 0 || p->replicas.max < 1)
      continue;
    ScaleDecision d;
    d.desired = 1;
    d.changed = true;
    d.reason = fmt::format("activation: the gateway holds {} request(s) for a pool at 0", n);
    run->second.desired = 1;
    run->second.decision = d;
    activations.push_back({pool, std::chrono::steady_clock::now()});
    std::fprintf(stderr, "strata up: pool %s: %s\n", pool.c_str(), d.reason.c_str());
  }
}

std::string Up::Impl::CanaryPollDue() {
  const auto now = std::chrono::steady_clock::now();
  bool any = false;
  for (const auto& [name, run] : pools) any = any || (run.canary && run.canary->splitting());
  if (!any || now < next_canary_poll) return "";
  next_canary_poll = now + std::chrono::seconds(1);
  auto gw = sup->Find(std::string(kGateway));
  return gw && gw->port > 0 ? gw->url() : "unreachable";
}

// One answer of GET /admin/canary for every splitting canary rollout.
void Up::Impl::ObserveCanaries(const Result<FetchReply>& reply) {
  for (auto& [name, run] : pools) {
    if (!run.canary || !run.canary->splitting()) continue;
    Result<std::vector<CanaryRouteState>> list = std::vector<CanaryRouteState>{};
    if (!reply.ok()) {
      list = reply.status();
    } else if (reply->status != 200) {
      list = Status::Unavailable(
          fmt::format("GET /admin/canary: HTTP {}: {}", reply->status, reply->body.substr(0, 200)));
    } else {
      list = ParseCanaryList(reply->body, run.canary->canary_pool());
    }
    run.canary->ObserveGateway(list, std::chrono::steady_clock::now());
  }
}

// Every 250 ms: the gateway's held requests (activation), reconcile (a child's port or state may
// have changed without a callback); every scrape interval: the pools' measured figures.
void Up::Impl::Tick() {
  auto next_measure = std::chrono::steady_clock::now();
  MutexLock lock(&mu);
  while (!stopping) {
    bool any_at_zero = false;
    for (const auto& [name, run] : pools) any_at_zero = any_at_zero || run.desired == 0;
    if (any_at_zero) {
      auto gw = sup->Find(std::string(kGateway));
      const std::string url = gw && gw->state == ChildState::kReady ? gw->url() : "";
      lock.Unlock();
      const auto held = HeldRequests(url);
      lock.Lock();
      if (stopping) break;
      Activate(held);
    }
    if (const std::string url = CanaryPollDue(); !url.empty()) {
      const std::string key = admin_key;
      lock.Unlock();
      const Result<FetchReply> reply =
          url == "unreachable"
              ? Result<FetchReply>(Status::Unavailable("the gateway is not listening"))
              : FetchHttp("GET", url, "/admin/canary", milliseconds(2000), "", key);
      lock.Lock();
      if (stopping) break;
      ObserveCanaries(reply);
    }
    Reconcile();
    if (prom_port > 0 && std::chrono::steady_clock::now() >= next_measure) {
      std::vector<std::string> names;
      for (const PoolSpec& p : spec.pools) names.push_back(p.name);
      const auto every =
          std::max<std::chrono::seconds>(std::chrono::seconds(1), spec.prometheus.scrape_interval);
      next_measure = std::chrono::steady_clock::now() + every;
      lock.Unlock();
      std::map<std::string, PoolFigures> figures;
      const std::string url = fmt::format("http://127.0.0.1:{}", prom_port);
      for (const std::string& n : names) figures[n] = MeasurePool(url, n);
      lock.Lock();
      for (auto& [n, f] : figures) pools[n].figures = f;
    }
    if (!stopping) cv.WaitFor(&mu, milliseconds(250));
  }
}

Result<std::unique_ptr<Up>> Up::Start(DeploymentSpec spec, const UpOptions& options) {
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.opts = options;
  std::random_device rd;
  for (int i = 0; i < 4; ++i) m.generated_admin_key += fmt::format("{:08x}", rd());
  m.state_dir = options.state_dir.empty() ? ".strata/" + spec.name : options.state_dir;
  std::error_code ec;
  for (const char* sub : {"logs", "serve", "prometheus"})
    fs::create_directories(m.state_dir + "/" + sub, ec);
  if (ec) return Status::IoError("state dir " + m.state_dir + ": " + ec.message());
  m.state_dir = fs::absolute(m.state_dir).lexically_normal().string();
  if (!m.state_dir.empty() && m.state_dir.back() == '/') m.state_dir.pop_back();
  if (options.prometheus) {
    ASSIGN_OR_RETURN(m.prom_bin, FindBinary(spec.prometheus.binary));
    if (spec.prometheus.port > 0) {
      m.prom_port = spec.prometheus.port;
    } else {
      ASSIGN_OR_RETURN(m.prom_port, FreePort());
    }
  }
  Supervisor::Options so;
  m.sup = std::make_unique<Supervisor>(so);
  {
    MutexLock lock(&m.mu);
    for (const PoolSpec& p : spec.pools) {
      Impl::PoolRun& run = m.pools[p.name];
      run.version = p.version;
      run.desired = p.replicas.min;
    }
    m.spec = std::move(spec);
  }
  http::HttpServerOptions ho;
  ho.host = "127.0.0.1";
  ho.port = static_cast<uint16_t>(options.status_port);
  ho.io_threads = 1;
  Impl* raw = impl.get();
  ASSIGN_OR_RETURN(m.server,
                   http::HttpServer::Start(ho, [raw](const http::HttpRequest& req,
                                                     const std::shared_ptr<http::Responder>& out) {
                     out->Respond(raw->Handle(req));
                   }));
  {
    MutexLock lock(&m.mu);
    m.Reconcile();  // replicas start, gateway.yaml and targets.json are written
  }
  std::unique_ptr<Up> up(new Up(std::move(impl)));
  raw->owner = up.get();
  if (Status s = raw->StartGateway(); !s.ok()) return s;
  if (options.prometheus)
    if (Status s = raw->StartPrometheus(); !s.ok()) return s;
  raw->sup->SetOnChange([raw] {
    MutexLock lock(&raw->mu);
    raw->Reconcile();
  });
  raw->ticker = std::thread([raw] { raw->Tick(); });
  if (Status s = raw->StartLoop(); !s.ok()) return s;
  json where = {{"status_url", up->status_url()}, {"pid", getpid()}};
  if (Status s = WriteFileAtomic(raw->Path("up.json"), where.dump() + "\n"); !s.ok()) return s;
  return up;
}

bool Up::WaitStarted(milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  auto settled = [](const std::optional<ChildStatus>& c) {
    return c && (c->state == ChildState::kReady || c->state == ChildState::kFailed);
  };
  while (std::chrono::steady_clock::now() < until) {
    bool all = settled(impl_->sup->Find(std::string(kGateway))) &&
               (impl_->prom_port == 0 || settled(impl_->sup->Find(std::string(kPrometheus))));
    {
      MutexLock lock(&impl_->mu);
      std::map<std::string, int> settled_by_pool;
      for (const auto& [name, r] : impl_->replicas)
        if (settled(impl_->sup->Find(name))) ++settled_by_pool[r.pool];
      for (const PoolSpec& p : impl_->spec.pools)
        all = all && settled_by_pool[p.name] >= impl_->pools[p.name].desired;
    }
    if (all) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return false;
}

Status Up::SetReplicas(const std::string& pool, int n, const ScaleDecision& decision) {
  MutexLock lock(&impl_->mu);
  const PoolSpec* p = impl_->spec.FindPool(pool);
  if (!p) return Status::NotFound("no pool named '" + pool + "'");
  Impl::PoolRun& run = impl_->pools[pool];
  run.desired = std::clamp(n, p->replicas.min, p->replicas.max);
  run.decision = decision;
  impl_->Reconcile();
  return Status::Ok();
}

Status Up::Rollout(const std::string& pool, const std::string& version) {
  MutexLock lock(&impl_->mu);
  const PoolSpec* p = impl_->spec.FindPool(pool);
  if (!p) return Status::NotFound("no pool named '" + pool + "'");
  const ModelSpec* m = impl_->spec.FindModel(p->model);
  if (!m || !m->Find(version))
    return Status::InvalidArgument(
        fmt::format("pool '{}': model '{}' has no version '{}'", pool, p->model, version));
  Impl::PoolRun& run = impl_->pools[pool];
  if (run.canary && run.canary->active()) {
    if (run.canary->to() == version) return Status::Ok();
    return Status::Unavailable(
        fmt::format("pool '{}': the canary rollout {} is in progress; wait until it is promoted "
                    "or rolled back (the gateway's POST /admin/canary/<route>/rollback ends it)",
                    pool, run.canary->Summary()));
  }
  if (run.version == version) return Status::Ok();
  ASSIGN_OR_RETURN(std::vector<std::string> routes, impl_->CanaryRoutes(*p));
  if (!routes.empty() && !run.rollout.empty())
    return Status::Unavailable(fmt::format(
        "pool '{}': the surge rollout {} is in progress; wait until it ends", pool, run.rollout));
  if (run.desired == 0) run.desired = 1;  // a rollout of an idle pool starts one to prove it
  if (routes.empty()) {  // surge: new replicas ready first, then one old one drains per new one
    if (run.rollout.empty()) run.surge_from = run.version;
    run.rollout = run.surge_from + " -> " + version;
    run.version = version;
  } else {
    run.canary_policy = p->rollout;
    run.canary.emplace(pool, run.version, version, CanaryPoolName(pool, version), std::move(routes),
                       impl_->opts.ready_timeout, std::chrono::steady_clock::now());
    std::fprintf(stderr, "strata up: pool %s: canary rollout %s -> %s\n", pool.c_str(),
                 run.version.c_str(), version.c_str());
  }
  impl_->Reconcile();
  return Status::Ok();
}

// The routes a canary rollout of `p` splits; empty for a surge rollout (strategy surge, or no
// strategy and the pool is not routed alone by any route).
Result<std::vector<std::string>> Up::Impl::CanaryRoutes(const PoolSpec& p) const {
  if (p.rollout.strategy == RolloutStrategy::kSurge) return std::vector<std::string>{};
  ASSIGN_OR_RETURN(std::vector<std::string> routes, PlainRoutesTo(spec, p.name));
  if (routes.empty() && p.rollout.strategy == RolloutStrategy::kCanary)
    return Status::InvalidArgument(fmt::format(
        "pool '{}': rollout strategy canary needs a route whose to: is the pool alone", p.name));
  return routes;
}

Status Up::Reload(DeploymentSpec next) {
  std::vector<std::pair<std::string, std::string>> rollouts;
  {
    MutexLock lock(&impl_->mu);
    bool same_pools = impl_->spec.pools.size() == next.pools.size();
    for (size_t i = 0; same_pools && i < next.pools.size(); ++i)
      same_pools = impl_->spec.pools[i].name == next.pools[i].name &&
                   impl_->spec.pools[i].model == next.pools[i].model;
    if (!same_pools)
      return Status::InvalidArgument(
          "the reloaded spec adds, removes or renames pools (or changes a pool's model): "
          "restart `strata up` for that");
    for (const PoolSpec& p : next.pools) {
      Impl::PoolRun& run = impl_->pools[p.name];
      run.desired = std::clamp(run.desired, p.replicas.min, p.replicas.max);
      if (p.version != run.version) rollouts.emplace_back(p.name, p.version);
    }
    next.gateway.port = impl_->spec.gateway.port;  // the gateway keeps its port
    impl_->spec = std::move(next);
    impl_->Reconcile();
  }
  for (const auto& [pool, version] : rollouts) RETURN_IF_ERROR(Rollout(pool, version));
  return Status::Ok();
}

nlohmann::json Up::StatusJson() const {
  const Impl& m = *impl_;
  std::map<std::string, ChildStatus> children;
  for (ChildStatus& c : m.sup->Children()) children.emplace(c.name, std::move(c));
  auto child_json = [](const ChildStatus& c) {
    json j = {{"name", c.name},
              {"state", ChildStateName(c.state)},
              {"healthy", c.healthy},
              {"url", c.url()},
              {"pid", c.pid},
              {"restarts", c.restarts},
              {"last_exit", c.last_exit},
              {"log", c.log_path},
              {"cold_start_s", c.cold_start_s >= 0 ? json(c.cold_start_s) : json(nullptr)}};
    for (const auto& [k, v] : c.labels)
      if (k == "version") j["version"] = v;
    return j;
  };
  MutexLock lock(&m.mu);
  const std::map<std::string, ScaleDecision> last_decisions =
      m.loop ? m.loop->LastDecisions() : std::map<std::string, ScaleDecision>{};
  json pools = json::array();
  for (const PoolSpec& p : m.spec.pools) {
    const Impl::PoolRun& run = m.pools.at(p.name);
    json reps = json::array();
    int ready = 0;
    for (const auto& [name, r] : m.replicas) {
      auto it = children.find(name);
      if (r.pool != p.name || it == children.end()) continue;
      json j = child_json(it->second);
      if (r.leaving) j["state"] = "draining";
      const bool canary_set = run.InCanarySet(r.version);
      if (canary_set) j["canary"] = true;  // the new set of a canary rollout
      ready += it->second.state == ChildState::kReady && !r.leaving && !canary_set;
      reps.push_back(std::move(j));
    }
    json attainment = Attainment(p.slo, run.figures);
    bool met = true, known = true;
    for (const auto& [k, o] : attainment.items()) {
      if (o["met"].is_null())
        known = false;
      else
        met = met && o["met"].is_boolean() && o["met"].get<bool>();
    }
    json pj = {{"name", p.name},
               {"model", p.model},
               {"version", run.version},
               {"min", p.replicas.min},
               {"max", p.replicas.max},
               {"desired", run.desired},
               {"ready", ready},
               {"replicas", reps},
               {"measured",
                {{"e2e_p95_s", Number(run.figures.e2e_p95_s)},
                 {"ttft_p95_s", Number(run.figures.ttft_p95_s)},
                 {"tpot_p95_s", Number(run.figures.tpot_p95_s)},
                 {"error_rate", Number(run.figures.error_rate)},
                 {"request_rate", Number(run.figures.request_rate)}}},
               {"slo", attainment},
               {"slo_met", known ? json(met) : json(nullptr)},
               {"rollout", run.canary ? run.canary->Summary() : run.rollout},
               {"rollout_state", run.canary ? run.canary->ToJson(std::chrono::steady_clock::now())
                                            : run.last_rollout}};
    // The autoscaler's latest decision for the pool (a hold too), else the last one applied.
    const auto latest = last_decisions.find(p.name);
    const ScaleDecision* d = latest != last_decisions.end() ? &latest->second
                             : run.decision                 ? &*run.decision
                                                            : nullptr;
    if (d)
      pj["decision"] = {{"desired", d->desired},
                        {"rule", d->rule},
                        {"reason", d->reason},
                        {"predicted_penalty", Number(d->predicted_penalty)},
                        {"predicted_e2e_p95_s", Number(d->predicted_e2e_p95_s)}};
    pools.push_back(std::move(pj));
  }
  json colds = json::array();
  for (const Impl::ColdStart& c : m.cold_starts)
    colds.push_back({{"pool", c.pool},
                     {"replica", c.replica},
                     {"seconds", c.seconds},
                     {"from_zero_s", c.from_zero_s >= 0 ? json(c.from_zero_s) : json(nullptr)}});
  json out = {{"name", m.spec.name}, {"pools", pools}, {"cold_starts", colds}};
  for (std::string_view n : {kGateway, kPrometheus}) {
    auto it = children.find(std::string(n));
    if (it != children.end()) out[std::string(n)] = child_json(it->second);
  }
  out["status_url"] = fmt::format("http://127.0.0.1:{}", m.server->port());
  if (m.loop) out["autoscaler"] = json::parse(m.loop->StatusJson(), nullptr, false);
  return out;
}

std::string Up::MetricsText() const {
  const Impl& m = *impl_;
  std::map<std::string, ChildStatus> children;
  for (ChildStatus& c : m.sup->Children()) children.emplace(c.name, std::move(c));
  MutexLock lock(&m.mu);
  std::string out =
      "# HELP strata_control_cold_start_seconds Replica start (fork) to its first /ready 200, "
      "the latest per pool.\n# TYPE strata_control_cold_start_seconds gauge\n";
  std::map<std::string, double> last;
  for (const Impl::ColdStart& c : m.cold_starts) last[c.pool] = c.seconds;
  for (const auto& [pool, s] : last)
    out += fmt::format("strata_control_cold_start_seconds{{pool=\"{}\"}} {}\n", pool, s);
  out +=
      "# HELP strata_control_scale_from_zero_seconds A held request's pool at 0 (activation) "
      "to its first replica ready, the latest per pool.\n"
      "# TYPE strata_control_scale_from_zero_seconds gauge\n";
  std::map<std::string, double> zero;
  for (const Impl::ColdStart& c : m.cold_starts)
    if (c.from_zero_s >= 0) zero[c.pool] = c.from_zero_s;
  for (const auto& [pool, s] : zero)
    out += fmt::format("strata_control_scale_from_zero_seconds{{pool=\"{}\"}} {}\n", pool, s);
  out +=
      "# HELP strata_control_cold_starts_total Replicas that became ready, per pool.\n"
      "# TYPE strata_control_cold_starts_total counter\n";
  std::map<std::string, int> starts;
  for (const Impl::ColdStart& c : m.cold_starts) ++starts[c.pool];
  for (const PoolSpec& p : m.spec.pools)
    out +=
        fmt::format("strata_control_cold_starts_total{{pool=\"{}\"}} {}\n", p.name, starts[p.name]);
  out +=
      "# HELP strata_control_replicas Replicas per pool by state.\n"
      "# TYPE strata_control_replicas gauge\n"
      "# HELP strata_control_replica_restarts_total Restarts of replicas now running.\n"
      "# TYPE strata_control_replica_restarts_total counter\n";
  for (const PoolSpec& p : m.spec.pools) {
    std::map<std::string, int> by_state = {{"ready", 0}, {"starting", 0}};
    int restarts = 0;
    for (const auto& [name, r] : m.replicas) {
      auto it = children.find(name);
      if (r.pool != p.name || it == children.end()) continue;
      ++by_state[r.leaving ? "draining" : std::string(ChildStateName(it->second.state))];
      restarts += it->second.restarts;
    }
    for (const auto& [state, n] : by_state)
      out +=
          fmt::format("strata_control_replicas{{pool=\"{}\",state=\"{}\"}} {}\n", p.name, state, n);
    out +=
        fmt::format("strata_control_replica_restarts_total{{pool=\"{}\"}} {}\n", p.name, restarts);
  }
  if (m.loop) out += m.loop->MetricsText();  // strata_control_desired_replicas, penalty, ...
  return out;
}

namespace {

http::HttpResponse JsonReply(int status, const json& body) {
  return http::HttpResponse{status, "application/json", {}, body.dump() + "\n"};
}

http::HttpResponse ErrorReply(const Status& s) {
  const int code = s.code() == StatusCode::kNotFound      ? 404
                   : s.code() == StatusCode::kUnavailable ? 409  // a rollout is in progress
                                                          : 400;
  return JsonReply(code, {{"error", s.message()}});
}

}  // namespace

// GET /status, GET /metrics, GET /health, POST /rollout {"pool", "version"}.
http::HttpResponse Up::Impl::Handle(const http::HttpRequest& req) {
  if (req.method == "GET" && req.path == "/status") return JsonReply(200, owner->StatusJson());
  if (req.method == "GET" && req.path == "/health") return JsonReply(200, {{"status", "ok"}});
  if (req.method == "GET" && req.path == "/metrics")
    return http::HttpResponse{
        200, "text/plain; version=0.0.4; charset=utf-8", {}, owner->MetricsText()};
  if (req.method == "POST" && req.path == "/rollout") {
    const json body = json::parse(req.body, nullptr, false);
    http::Fields f(body);
    std::string pool, version;
    if (!f.IsObject()) return JsonReply(400, {{"error", "body: expected a JSON object"}});
    for (const auto& [key, out] : {std::pair{"pool", &pool}, std::pair{"version", &version}}) {
      if (auto e = f.Required(key); !e.ok()) return JsonReply(400, {{"error", e.message()}});
      if (auto e = f.String(key, out); !e.ok()) return JsonReply(400, {{"error", e.message()}});
    }
    if (Status s = owner->Rollout(pool, version); !s.ok()) return ErrorReply(s);
    return JsonReply(202, {{"pool", pool}, {"version", version}, {"rollout", "started"}});
  }
  return JsonReply(404, {{"error", "no route " + req.method + " " + req.path}});
}

std::string Up::gateway_url() const {
  auto g = impl_->sup->Find(std::string(kGateway));
  return g ? g->url() : "";
}
std::string Up::status_url() const {
  return fmt::format("http://127.0.0.1:{}", impl_->server->port());
}
std::string Up::prometheus_url() const {
  return impl_->prom_port > 0 ? fmt::format("http://127.0.0.1:{}", impl_->prom_port) : "";
}

void Up::Shutdown() {
  Impl& m = *impl_;
  if (m.shut_down.exchange(true)) return;
  {
    MutexLock lock(&m.mu);
    m.stopping = true;
  }
  m.cv.NotifyAll();
  if (m.loop) m.loop->Stop();  // no decisions while draining
  if (m.ticker.joinable()) m.ticker.join();
  m.sup->SetOnChange(nullptr);
  m.sup->StopAll({std::string(kGateway)});  // in-flight requests finish first
  std::vector<std::string> reps;
  for (const ChildStatus& c : m.sup->Children())
    if (c.name != kPrometheus) reps.push_back(c.name);
  if (!reps.empty()) m.sup->StopAll(reps);
  m.sup->StopAll();  // Prometheus
  if (m.server) m.server->Stop();
}

}  // namespace strata::control

namespace strata::control {
namespace {

std::string Ms(const json& seconds) {
  return seconds.is_number() ? fmt::format("{:.1f} ms", seconds.get<double>() * 1e3) : "-";
}

std::string Str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number() || it->is_boolean()) return it->dump();
  return "";
}

std::string Objectives(const json& slo) {
  std::string out;
  if (!slo.is_object()) return out;
  for (const auto& [name, o] : slo.items()) {
    if (!o.is_object()) continue;
    const auto m = o.find("measured"), t = o.find("target"), met = o.find("met");
    const std::string measured =
        m != o.end() && m->is_number() ? fmt::format("{:.4g}", m->get<double>()) : "no data";
    const std::string target =
        t != o.end() && t->is_number() ? fmt::format("{:.4g}", t->get<double>()) : "?";
    const std::string verdict =
        met != o.end() && met->is_boolean() ? (met->get<bool>() ? "met" : "BREACHED") : "-";
    out += fmt::format("  {} {} <= {} {}", name, measured, target, verdict);
  }
  return out;
}

// "  rollout: canary v1 -> v2 canary, step 2/3, canary 50 % (progressing); last decision step:
// within bounds" — or "  last rollout: ..." once it ended (with the reason).
std::string RolloutLine(const json& r) {
  const std::string phase = Str(r, "phase");
  const bool ended = phase == "promoted" || phase == "rolled_back" || phase == "failed";
  std::string out = fmt::format("  {}: {} {} -> {} {}", ended ? "last rollout" : "rollout",
                                Str(r, "strategy"), Str(r, "from"), Str(r, "to"), phase);
  const auto steps = r.find("steps"), weight = r.find("weight");
  if (!ended && steps != r.end() && steps->is_array() && weight != r.end() && weight->is_number())
    out += fmt::format(", step {}/{}, canary {:g} % ({})", Str(r, "step"), steps->size(),
                       weight->get<double>(), Str(r, "state"));
  const auto d = r.find("last_decision");
  if (d != r.end() && d->is_object() && !Str(*d, "decision").empty())
    out += fmt::format("; last decision {}: {}", Str(*d, "decision"), Str(*d, "reason"));
  if (ended && !Str(r, "reason").empty()) out += " (" + Str(r, "reason") + ")";
  return out + "\n";
}

}  // namespace

std::string FormatStatus(const nlohmann::json& s) {
  if (!s.is_object()) return "status: not a JSON object\n";
  std::string out = fmt::format("deployment {}  status {}\n", Str(s, "name"), Str(s, "status_url"));
  for (const char* role : {"gateway", "prometheus"}) {
    auto it = s.find(role);
    if (it != s.end() && it->is_object())
      out += fmt::format("{:<10} {:<9} {}\n", role, Str(*it, "state"), Str(*it, "url"));
  }
  auto pools = s.find("pools");
  if (pools == s.end() || !pools->is_array()) return out;
  for (const json& p : *pools) {
    if (!p.is_object()) continue;
    const auto met = p.find("slo_met");
    const std::string slo = met != p.end() && met->is_boolean()
                                ? (met->get<bool>() ? "SLO met" : "SLO BREACHED")
                                : "SLO no data";
    out += fmt::format("pool {} ({}@{}): {}/{} ready, replicas {}..{}, {}{}\n", Str(p, "name"),
                       Str(p, "model"), Str(p, "version"), Str(p, "ready"), Str(p, "desired"),
                       Str(p, "min"), Str(p, "max"), slo,
                       Str(p, "rollout").empty() ? "" : ", rollout " + Str(p, "rollout"));
    const auto ro = p.find("rollout_state");
    if (ro != p.end() && ro->is_object()) out += RolloutLine(*ro);
    const auto slo_it = p.find("slo");
    if (slo_it != p.end()) out += "  slo:" + Objectives(*slo_it) + "\n";
    const auto d = p.find("decision");
    if (d != p.end() && d->is_object())
      out += fmt::format("  autoscaler: desired {} ({})\n", Str(*d, "desired"), Str(*d, "reason"));
    const auto reps = p.find("replicas");
    if (reps == p.end() || !reps->is_array()) continue;
    for (const json& r : *reps) {
      if (!r.is_object()) continue;
      const auto healthy = r.find("healthy");
      const bool h = healthy != r.end() && healthy->is_boolean() && healthy->get<bool>();
      const auto cold = r.find("cold_start_s");
      out += fmt::format(
          "  {:<16} {:<4} {:<9} {:<9} {:<24} restarts {} cold start {}{}\n", Str(r, "name"),
          Str(r, "version"), Str(r, "state"), h ? "healthy" : "unhealthy", Str(r, "url"),
          Str(r, "restarts"), cold != r.end() ? Ms(*cold) : "-",
          Str(r, "last_exit").empty()
              ? ""
              : "  last exit: " + Str(r, "last_exit") + " (log " + Str(r, "log") + ")");
    }
  }
  return out;
}

int RunUp(const std::string& spec_path, const UpOptions& options) {
  sigset_t sigs;
  sigemptyset(&sigs);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&sigs, sig);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);  // before any thread: they all inherit it
  auto spec = LoadDeploymentSpec(spec_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "strata up: %s\n", spec.status().ToString().c_str());
    return 1;
  }
  auto up = Up::Start(std::move(*spec), options);
  if (!up.ok()) {
    std::fprintf(stderr, "strata up: %s\n", up.status().ToString().c_str());
    return 1;
  }
  Up& u = **up;
  if (!u.WaitStarted(options.ready_timeout + milliseconds(5000)))
    std::fprintf(stderr, "strata up: not everything was ready in time; see `strata status`\n");
  std::printf("strata up: gateway listening on %s\n", u.gateway_url().c_str());
  std::printf("strata up: ready: gateway %s, status %s, prometheus %s\n", u.gateway_url().c_str(),
              u.status_url().c_str(), u.prometheus_url().c_str());
  std::fputs(FormatStatus(u.StatusJson()).c_str(), stdout);
  std::fflush(stdout);
  for (;;) {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig != SIGHUP) break;
    auto next = LoadDeploymentSpec(spec_path);
    Status s = next.ok() ? u.Reload(std::move(*next)) : next.status();
    std::fprintf(stderr, "strata up: SIGHUP: %s\n",
                 s.ok() ? "spec reloaded" : (s.ToString() + "; keeping the running spec").c_str());
  }
  std::fprintf(stderr, "strata up: draining\n");
  u.Shutdown();
  std::fprintf(stderr, "strata up: stopped\n");
  return 0;
}

}  // namespace strata::control
