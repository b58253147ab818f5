// `strata autoscaler -f deploy.yaml --prometheus URL`: the SLO autoscaler on its own, for
// Kubernetes (src/control/loop.h). Each interval it queries Prometheus, decides every pool's
// replica count and exports it as strata_control_desired_replicas{pool} on /metrics, which
// KEDA's Prometheus trigger reads; it changes nothing itself. Also /status (the decisions as
// JSON) and /health. `--rules` prints the Prometheus rules file of the spec and exits; `--once`
// runs one interval, prints the status JSON and exits (1 when Prometheus could not be queried).
// Wiring only; SIGINT/SIGTERM stop it (exit 0).
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include "app/cli_common.h"
#include "app/commands.h"
#include "control/loop.h"
#include "control/prom_client.h"
#include "control/queries.h"
#include "control/spec.h"
#include "http/server.h"

namespace strata::app {
namespace {

struct AutoscalerFlags {
  std::string spec;
  std::string prometheus = "http://127.0.0.1:9090";
  std::string host = "127.0.0.1";
  int port = 9100;
  std::string window = "1m";
  bool rules = false;
  bool once = false;
  control::ReplicaProfile profile;
};

http::HttpResponse Text(int status, std::string content_type, std::string body) {
  http::HttpResponse r;
  r.status = status;
  r.content_type = std::move(content_type);
  r.body = std::move(body);
  return r;
}

Status Serve(const AutoscalerFlags& f, control::ControlLoop* loop) {
  sigset_t sigs = BlockSignals({SIGINT, SIGTERM});
  http::HttpServerOptions so;
  so.host = f.host;
  so.port = static_cast<uint16_t>(f.port);
  so.io_threads = 1;
  ASSIGN_OR_RETURN(auto server,
                   http::HttpServer::Start(so, [loop](const http::HttpRequest& req,
                                                      const std::shared_ptr<http::Responder>& out) {
                     if (req.path == "/metrics") {
                       out->Respond(Text(200, "text/plain; version=0.0.4", loop->MetricsText()));
                     } else if (req.path == "/status") {
                       out->Respond(Text(200, "application/json", loop->StatusJson()));
                     } else if (req.path == "/health" || req.path == "/ready") {
                       out->Respond(Text(200, "text/plain", "ok\n"));
                     } else {
                       out->Respond(Text(404, "text/plain", "not found\n"));
                     }
                   }));
  loop->Start();
  std::printf("listening on http://%s:%u\n", f.host.c_str(), static_cast<unsigned>(server->port()));
  std::fflush(stdout);
  int sig = 0;
  sigwait(&sigs, &sig);
  loop->Stop();
  server->Stop();
  return Status::Ok();
}

Status RunAutoscaler(const AutoscalerFlags& f, int* exit_code) {
  ASSIGN_OR_RETURN(control::DeploymentSpec spec, control::LoadDeploymentSpec(f.spec));
  if (f.rules) {
    std::fputs(control::RulesYaml(spec).c_str(), stdout);
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(control::PromClient client, control::PromClient::Create(f.prometheus));
  control::PromObservationSource source(std::move(client), f.window);
  control::RecordingActuator actuator;
  control::ControlLoop loop(std::move(spec), &source, &actuator, f.profile);
  if (f.once) {
    Status s = loop.Tick(control::Clock::now());
    std::printf("%s\n", loop.StatusJson().c_str());
    ReportError(s, "strata autoscaler", exit_code);
    return Status::Ok();
  }
  return Serve(f, &loop);
}

}  // namespace

void RegisterAutoscaler(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<AutoscalerFlags>();
  CLI::App* c = app.add_subcommand(
      "autoscaler", "SLO autoscaler for Kubernetes: exports each pool's desired replica count");
  c->add_option("-f,--file", f->spec, "deployment spec (YAML)")->required();
  AddDefaulted(c, "--prometheus", f->prometheus, "Prometheus base URL");
  AddDefaulted(c, "--host", f->host, "address to bind");
  AddDefaulted(c, "--port", f->port, "port of /metrics and /status (0: any)");
  AddDefaulted(c, "--window", f->window, "rate window of the queries (PromQL duration)");
  c->add_flag("--rules", f->rules, "print the Prometheus rules file of the spec and exit");
  c->add_flag("--once", f->once, "decide once, print the status JSON and exit");
  AddDefaulted(c, "--service-alpha-s", f->profile.alpha_s,
               "replica profile: T(b) = alpha + beta*b, alpha in seconds");
  AddDefaulted(c, "--service-beta-s", f->profile.beta_s, "replica profile: beta in seconds");
  AddDefaulted(c, "--max-batch", f->profile.max_batch, "replica profile: requests run at once");
  c->callback([f, exit_code] {
    ReportError(RunAutoscaler(*f, exit_code), "strata autoscaler", exit_code);
  });
}

}  // namespace strata::app
