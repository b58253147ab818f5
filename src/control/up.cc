#include "control/up.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <thread>
#include <vector>

#include "control/loop.h"
#include "control/prom_client.h"
#include "control/up_configs.h"
#include "control/up_launch.h"
#include "control/up_poller.h"
#include "control/up_replicas.h"
#include "control/up_rollouts.h"
#include "control/up_state.h"
#include "control/up_status.h"
#include "http/json_fields.h"
#include "http/server.h"

namespace strata::control {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::milliseconds;
using up::kGateway;
using up::kPrometheus;

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

// The state dir (made, with logs/, serve/ and prometheus/), Prometheus's binary and port.
Status Prepare(const DeploymentSpec& spec, up::Context* ctx) {
  std::string dir = ctx->opts.state_dir.empty() ? ".strata/" + spec.name : ctx->opts.state_dir;
  std::error_code ec;
  for (const char* sub : {"logs", "serve", "prometheus"})
    fs::create_directories(dir + "/" + sub, ec);
  if (ec) return Status::IoError("state dir " + dir + ": " + ec.message());
  dir = fs::absolute(dir).lexically_normal().string();
  if (!dir.empty() && dir.back() == '/') dir.pop_back();
  ctx->state_dir = dir;
  if (!ctx->opts.prometheus) return Status::Ok();
  ASSIGN_OR_RETURN(ctx->prom_bin, FindBinary(spec.prometheus.binary));
  if (spec.prometheus.port > 0) {
    ctx->prom_port = spec.prometheus.port;
  } else {
    ASSIGN_OR_RETURN(ctx->prom_port, FreePort());
  }
  return Status::Ok();
}

http::HttpResponse JsonReply(int status, const json& body) {
  return http::HttpResponse{status, "application/json", {}, body.dump() + "\n"};
}

http::HttpResponse ErrorReply(const Status& s) {
  const int code = s.code() == StatusCode::kNotFound      ? 404
                   : s.code() == StatusCode::kUnavailable ? 409  // a rollout is in progress
                                                          : 400;
  return JsonReply(code, {{"error", s.message()}});
}

// POST /rollout {"pool", "version"}.
http::HttpResponse HandleRollout(Up& up, const http::HttpRequest& req) {
  const json body = json::parse(req.body, nullptr, false);
  http::Fields f(body);
  std::string pool, version;
  if (!f.IsObject()) return JsonReply(400, {{"error", "body: expected a JSON object"}});
  for (const auto& [key, out] : {std::pair{"pool", &pool}, std::pair{"version", &version}}) {
    if (auto e = f.Required(key); !e.ok()) return JsonReply(400, {{"error", e.message()}});
    if (auto e = f.String(key, out); !e.ok()) return JsonReply(400, {{"error", e.message()}});
  }
  if (Status s = up.Rollout(pool, version); !s.ok()) return ErrorReply(s);
  return JsonReply(202, {{"pool", pool}, {"version", version}, {"rollout", "started"}});
}

// GET /status, GET /metrics, GET /health, POST /rollout.
http::HttpResponse Handle(Up& up, const http::HttpRequest& req) {
  if (req.method == "GET" && req.path == "/status") return JsonReply(200, up.StatusJson());
  if (req.method == "GET" && req.path == "/health") return JsonReply(200, {{"status", "ok"}});
  if (req.method == "GET" && req.path == "/metrics")
    return http::HttpResponse{
        200, "text/plain; version=0.0.4; charset=utf-8", {}, up.MetricsText()};
  if (req.method == "POST" && req.path == "/rollout") return HandleRollout(up, req);
  return JsonReply(404, {{"error", "no route " + req.method + " " + req.path}});
}

}  // namespace

// The parts (control/up_state.h lists them) over one Context and one State. Declared so that
// what uses a part is destroyed before it: the loop before its actuator, the server and the
// poller before the state, everything before the supervisor's children go.
struct Up::Impl {
  explicit Impl(const UpOptions& options) { ctx.opts = options; }

  Status StartServer(Up* up);
  Status StartChildren();
  // The control loop, when autoscaling is enabled and Prometheus runs; `up` is its actuator.
  Status StartLoop(Up* up);
  up::StatusReport Report() const { return up::StatusReport(ctx, state, sup, loop.get()); }

  up::Context ctx;
  Supervisor sup{Supervisor::Options{}};
  up::State state;
  up::ConfigFiles configs{ctx};
  up::ChildLauncher launcher{ctx, sup};
  up::ReplicaSet replicas{sup, launcher, configs};
  up::Poller poller{ctx, state, sup, replicas, configs};
  std::unique_ptr<http::HttpServer> server;
  // The SLO autoscaler (control/loop): Prometheus in, this Up as its actuator.
  std::unique_ptr<ObservationSource> source;
  std::unique_ptr<Actuator> actuator;
  std::unique_ptr<ControlLoop> loop;
  std::atomic<bool> shut_down{false};
};

namespace {

// The autoscaler's actuator: SetReplicas changes a pool's desired count; CurrentReplicas counts
// the pool's replicas that run or are starting (not leaving, not failed).
class UpActuator final : public Actuator {
 public:
  UpActuator(Up* up, Up::Impl* impl) : up_(up), impl_(impl) {}
  std::optional<int> CurrentReplicas(const std::string& pool) override {
    return impl_->replicas.CurrentReplicas(impl_->state, pool);
  }
  Status SetReplicas(const std::string& pool, int replicas, const ScaleDecision& d) override {
    return up_->SetReplicas(pool, replicas, d);
  }

 private:
  Up* up_;
  Up::Impl* impl_;
};

}  // namespace

Status Up::Impl::StartServer(Up* up) {
  http::HttpServerOptions ho;
  ho.host = "127.0.0.1";
  ho.port = static_cast<uint16_t>(ctx.opts.status_port);
  ho.io_threads = 1;
  ASSIGN_OR_RETURN(server,
                   http::HttpServer::Start(ho, [up](const http::HttpRequest& req,
                                                    const std::shared_ptr<http::Responder>& out) {
                     out->Respond(Handle(*up, req));
                   }));
  ctx.status_port = server->port();
  return Status::Ok();
}

Status Up::Impl::StartChildren() {
  DeploymentSpec spec;
  {
    MutexLock lock(&state.mu);
    replicas.Reconcile(state);  // replicas start, gateway.yaml and targets.json are written
    spec = state.spec;
  }
  RETURN_IF_ERROR(launcher.StartGateway(spec.gateway.port));
  if (ctx.opts.prometheus) RETURN_IF_ERROR(launcher.StartPrometheus(spec));
  sup.SetOnChange([this] {
    MutexLock lock(&state.mu);
    replicas.Reconcile(state);
  });
  return Status::Ok();
}

// The loop's rate window is 4 scrape intervals, at least 10 s (rate() needs two samples in it;
// short enough to follow a load step).
Status Up::Impl::StartLoop(Up* up) {
  DeploymentSpec copy;
  {
    MutexLock lock(&state.mu);
    if (!state.spec.autoscaling.enabled || ctx.prom_port == 0) return Status::Ok();
    copy = state.spec;
  }
  ASSIGN_OR_RETURN(PromClient client, PromClient::Create(ctx.PrometheusUrl()));
  const int64_t window = std::max<int64_t>(10, 4 * copy.prometheus.scrape_interval.count());
  source = std::make_unique<PromObservationSource>(std::move(client), fmt::format("{}s", window));
  actuator = std::make_unique<UpActuator>(up, this);
  loop = std::make_unique<ControlLoop>(std::move(copy), source.get(), actuator.get());
  loop->Start();
  return Status::Ok();
}

Up::Up(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Up::~Up() { Shutdown(); }

Result<std::unique_ptr<Up>> Up::Start(DeploymentSpec spec, const UpOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  RETURN_IF_ERROR(Prepare(spec, &impl->ctx));
  {
    MutexLock lock(&impl->state.mu);
    for (const PoolSpec& p : spec.pools) {
      up::PoolRun& run = impl->state.pools[p.name];
      run.version = p.version;
      run.desired = p.replicas.min;
    }
    impl->state.spec = std::move(spec);
  }
  std::unique_ptr<Up> up(new Up(std::move(impl)));
  Impl& m = *up->impl_;
  RETURN_IF_ERROR(m.StartServer(up.get()));
  RETURN_IF_ERROR(m.StartChildren());
  m.poller.Start();
  RETURN_IF_ERROR(m.StartLoop(up.get()));
  const json where = {{"status_url", up->status_url()}, {"pid", getpid()}};
  RETURN_IF_ERROR(up::WriteFileAtomic(m.ctx.Path("up.json"), where.dump() + "\n"));
  return up;
}

bool Up::WaitStarted(milliseconds timeout) {
  Impl& m = *impl_;
  const auto until = std::chrono::steady_clock::now() + timeout;
  auto settled = [](const std::optional<ChildStatus>& c) {
    return c && (c->state == ChildState::kReady || c->state == ChildState::kFailed);
  };
  while (std::chrono::steady_clock::now() < until) {
    bool all = settled(m.sup.Find(std::string(kGateway))) &&
               (m.ctx.prom_port == 0 || settled(m.sup.Find(std::string(kPrometheus))));
    {
      MutexLock lock(&m.state.mu);
      std::map<std::string, int> settled_by_pool;
      for (const auto& [name, r] : m.state.replicas)
        if (settled(m.sup.Find(name))) ++settled_by_pool[r.pool];
      for (const PoolSpec& p : m.state.spec.pools)
        all = all && settled_by_pool[p.name] >= m.state.pools[p.name].desired;
    }
    if (all) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return false;
}

Status Up::SetReplicas(const std::string& pool, int n, const ScaleDecision& decision) {
  Impl& m = *impl_;
  MutexLock lock(&m.state.mu);
  const PoolSpec* p = m.state.spec.FindPool(pool);
  if (!p) return Status::NotFound("no pool named '" + pool + "'");
  up::PoolRun& run = m.state.pools[pool];
  run.desired = std::clamp(n, p->replicas.min, p->replicas.max);
  run.decision = decision;
  m.replicas.Reconcile(m.state);
  return Status::Ok();
}

Status Up::Rollout(const std::string& pool, const std::string& version) {
  Impl& m = *impl_;
  MutexLock lock(&m.state.mu);
  RETURN_IF_ERROR(up::StartRollout(m.state, pool, version, m.ctx.opts.ready_timeout));
  m.replicas.Reconcile(m.state);
  return Status::Ok();
}

Status Up::Reload(DeploymentSpec next) {
  Impl& m = *impl_;
  std::vector<std::pair<std::string, std::string>> rollouts;
  {
    MutexLock lock(&m.state.mu);
    DeploymentSpec& spec = m.state.spec;
    bool same_pools = spec.pools.size() == next.pools.size();
    for (size_t i = 0; same_pools && i < next.pools.size(); ++i)
      same_pools =
          spec.pools[i].name == next.pools[i].name && spec.pools[i].model == next.pools[i].model;
    if (!same_pools)
      return Status::InvalidArgument(
          "the reloaded spec adds, removes or renames pools (or changes a pool's model): "
          "restart `strata up` for that");
    for (const PoolSpec& p : next.pools) {
      up::PoolRun& run = m.state.pools[p.name];
      run.desired = std::clamp(run.desired, p.replicas.min, p.replicas.max);
      if (p.version != run.version) rollouts.emplace_back(p.name, p.version);
    }
    next.gateway.port = spec.gateway.port;  // the gateway keeps its port
    spec = std::move(next);
    m.replicas.Reconcile(m.state);
  }
  for (const auto& [pool, version] : rollouts) RETURN_IF_ERROR(Rollout(pool, version));
  return Status::Ok();
}

nlohmann::json Up::StatusJson() const { return impl_->Report().Json(); }

std::string Up::MetricsText() const { return impl_->Report().MetricsText(); }

std::string Up::gateway_url() const {
  auto g = impl_->sup.Find(std::string(kGateway));
  return g ? g->url() : "";
}
std::string Up::status_url() const { return impl_->ctx.StatusUrl(); }
std::string Up::prometheus_url() const { return impl_->ctx.PrometheusUrl(); }

void Up::Shutdown() {
  Impl& m = *impl_;
  if (m.shut_down.exchange(true)) return;
  {
    MutexLock lock(&m.state.mu);
    m.state.stopping = true;
  }
  m.state.cv.NotifyAll();
  if (m.loop) m.loop->Stop();  // no decisions while draining
  m.poller.Join();
  m.sup.SetOnChange(nullptr);
  m.sup.StopAll({std::string(kGateway)});  // in-flight requests finish first
  std::vector<std::string> reps;
  for (const ChildStatus& c : m.sup.Children())
    if (c.name != kPrometheus) reps.push_back(c.name);
  if (!reps.empty()) m.sup.StopAll(reps);
  m.sup.StopAll();  // Prometheus
  if (m.server) m.server->Stop();
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
