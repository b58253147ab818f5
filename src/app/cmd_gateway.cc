// `strata gateway`: the OpenAI-compatible front for many replicas (src/gateway). Wiring only: load
// and validate the config, start the gateway and its HTTP server, then wait for signals — SIGHUP
// reloads the config (a bad file is reported and the running config kept), SIGINT/SIGTERM drain
// (new requests 503, in-flight ones finish within --shutdown-timeout) and exit 0.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "app/cli_common.h"
#include "app/commands.h"
#include "gateway/config.h"
#include "gateway/gateway.h"
#include "http/server.h"

namespace strata::app {
namespace {

struct GatewayFlags {
  std::string config;
  std::string host = "127.0.0.1";
  int port = 8000;
  int io_threads = 2;
  double shutdown_timeout_s = 30;
  uint64_t max_body_bytes = 4u << 20;
  // Tracing (empty / negative: the config's `tracing:` block decides).
  std::string otlp_endpoint;
  double otlp_sample_ratio = -1;
  std::string otlp_service_name;
};

// The config with the tracing flags applied over its `tracing:` block (flags win).
std::shared_ptr<const gateway::GatewayConfig> WithTracingFlags(
    std::shared_ptr<const gateway::GatewayConfig> cfg, const GatewayFlags& f) {
  if (f.otlp_endpoint.empty() && f.otlp_sample_ratio < 0 && f.otlp_service_name.empty()) return cfg;
  auto copy = std::make_shared<gateway::GatewayConfig>(*cfg);
  if (!f.otlp_endpoint.empty()) copy->tracing.otlp_endpoint = f.otlp_endpoint;
  if (f.otlp_sample_ratio >= 0) copy->tracing.sample_ratio = f.otlp_sample_ratio;
  if (!f.otlp_service_name.empty()) copy->tracing.service_name = f.otlp_service_name;
  return copy;
}

// Build: the gateway and its HTTP server, started; prints "listening" and "ready".
struct RunningGateway {
  std::unique_ptr<gateway::Gateway> gw;
  std::unique_ptr<http::HttpServer> server;
};

Result<RunningGateway> StartGateway(const GatewayFlags& f,
                                    std::shared_ptr<const gateway::GatewayConfig> cfg) {
  RunningGateway r;
  ASSIGN_OR_RETURN(r.gw, gateway::Gateway::Create(cfg));
  r.gw->Start();
  http::HttpServerOptions so;
  so.host = f.host;
  so.port = static_cast<uint16_t>(f.port);
  so.io_threads = f.io_threads;
  so.max_body_bytes = f.max_body_bytes;
  gateway::Gateway* g = r.gw.get();
  so.on_internal_error = [g](std::string_view method, std::string_view path, std::string_view) {
    g->OnInternalError(method, path);
  };
  ASSIGN_OR_RETURN(r.server, http::HttpServer::Start(so, [g](http::HttpRequest req,
                                                             std::shared_ptr<http::Responder> out) {
                     g->Handle(std::move(req), std::move(out));
                   }));
  std::printf("listening on http://%s:%u\n", f.host.c_str(),
              static_cast<unsigned>(r.server->port()));
  std::printf("strata gateway: ready: %zu pool(s), %zu route(s), %zu tenant(s) from %s\n",
              cfg->pools.size(), cfg->routes.size(), cfg->tenants.size(), f.config.c_str());
  std::fflush(stdout);
  return r;
}

// Run: until SIGINT/SIGTERM; each SIGHUP reloads --config (a bad file keeps the running config).
void ServeUntilStopped(const GatewayFlags& f, const sigset_t& sigs, gateway::Gateway* gw) {
  for (;;) {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig != SIGHUP) break;
    auto next = gateway::LoadGatewayConfig(f.config);
    Status s = next.ok() ? gw->Reload(WithTracingFlags(*next, f)) : next.status();
    if (s.ok()) {
      std::fprintf(stderr, "strata gateway: SIGHUP: reloaded %s (generation %llu)\n",
                   f.config.c_str(), static_cast<unsigned long long>(gw->generation()));
    } else {
      gw->metrics().Add("strata_gateway:config_reloads_total", http::Labels({{"result", "error"}}),
                        1);
      std::fprintf(stderr, "strata gateway: SIGHUP: %s; keeping the running config\n",
                   s.ToString().c_str());
    }
  }
}

// Drain: new requests 503, in-flight ones get --shutdown-timeout, then everything stops.
void DrainAndStop(const GatewayFlags& f, RunningGateway& r) {
  std::fprintf(stderr, "strata gateway: draining (up to %.0f s)\n", f.shutdown_timeout_s);
  r.gw->StartDraining();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(f.shutdown_timeout_s * 1e3));
  while (std::chrono::steady_clock::now() < deadline && r.gw->in_flight() > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  r.server->StopAccepting();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  r.server->Stop();
  r.gw->Stop();
}

// Parse (the config and the tracing flags) -> build (StartGateway) -> run -> drain.
Status RunGateway(const GatewayFlags& f) {
  const sigset_t sigs = BlockSignals({SIGINT, SIGTERM, SIGHUP});
  ASSIGN_OR_RETURN(auto loaded, gateway::LoadGatewayConfig(f.config));
  ASSIGN_OR_RETURN(RunningGateway running, StartGateway(f, WithTracingFlags(std::move(loaded), f)));
  ServeUntilStopped(f, sigs, running.gw.get());
  DrainAndStop(f, running);
  return Status::Ok();
}

}  // namespace

void RegisterGateway(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<GatewayFlags>();
  CLI::App* c =
      app.add_subcommand("gateway",
                         "OpenAI-compatible gateway in front of many replicas (routing, balancing, "
                         "admission, failover)");
  c->add_option("--config", f->config,
                "gateway YAML (pools, routes, tenants; examples/gateway.yaml)")
      ->required();
  AddDefaulted(c, "--host", f->host, "address to listen on");
  AddDefaulted(c, "--port", f->port, "port (0: pick a free one)")->check(CLI::Range(0, 65535));
  AddDefaulted(c, "--io-threads", f->io_threads, "front I/O threads")->check(CLI::Range(1, 64));
  AddDefaulted(c, "--shutdown-timeout", f->shutdown_timeout_s,
               "seconds in-flight requests get to finish on SIGTERM")
      ->check(CLI::Range(0.0, 3600.0));
  AddDefaulted(c, "--max-body-bytes", f->max_body_bytes, "request body limit (413 above)")
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 30));
  c->add_option("--otlp-endpoint", f->otlp_endpoint,
                "OTLP/HTTP collector base URL for traces, e.g. http://127.0.0.1:4318 (spans go to "
                "/v1/traces; overrides tracing.otlp_endpoint; absent: no export, traceparent is "
                "still passed on)");
  c->add_option("--otlp-sample-ratio", f->otlp_sample_ratio,
                "head sampling ratio of requests without a traceparent (default 1.0, or "
                "tracing.sample_ratio)")
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("--otlp-service-name", f->otlp_service_name,
                "service.name of the gateway's spans (default strata-gateway)");
  c->callback([f, exit_code] { ReportError(RunGateway(*f), "strata gateway", exit_code); });
}

}  // namespace strata::app
