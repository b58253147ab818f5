// `strata up -f deploy.yaml` (one machine runs a deployment spec: replicas, gateway, Prometheus,
// the autoscaler; src/control/up.h) and `strata status` (what a running `strata up` reports).
// Wiring only.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "app/cli_common.h"
#include "app/commands.h"
#include "control/fetch.h"
#include "control/up.h"
#include "http/json_fields.h"

namespace strata::app {
namespace {

struct UpFlags {
  std::string spec;
  std::string state_dir;
  int status_port = 0;
  double ready_timeout_s = 120;
  double drain_grace_s = 30;
  bool no_prometheus = false;
};

struct StatusFlags {
  std::string url;
  std::string state_dir;
  bool json = false;
};

// The supervisor's options from the flags (this binary runs the children).
control::UpOptions UpOptionsFrom(const UpFlags& f) {
  control::UpOptions o;
  o.state_dir = f.state_dir;
  o.status_port = f.status_port;
  o.strata_bin = SelfPath();
  o.prometheus = !f.no_prometheus;
  o.ready_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.ready_timeout_s * 1e3));
  o.drain_grace = std::chrono::milliseconds(static_cast<int64_t>(f.drain_grace_s * 1e3));
  return o;
}

// The status URL: --url, else the one `strata up` wrote to STATE_DIR/up.json.
Result<std::string> StatusUrl(const StatusFlags& f) {
  if (!f.url.empty()) return f.url;
  if (f.state_dir.empty()) return Status::InvalidArgument("give --url or --state-dir");
  const std::string path = f.state_dir + "/up.json";
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": no `strata up` state here");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  std::string url;
  if (auto e = http::Fields(j).String("status_url", &url); !e.ok() || url.empty())
    return Status::InvalidArgument(path + ": no status_url");
  return url;
}

int RunStatus(const StatusFlags& f) {
  auto url = StatusUrl(f);
  if (!url.ok()) {
    std::fprintf(stderr, "strata status: %s\n", url.status().ToString().c_str());
    return 1;
  }
  auto r = control::FetchHttp("GET", *url, "/status", std::chrono::seconds(10));
  if (!r.ok() || r->status != 200) {
    std::fprintf(
        stderr, "strata status: %s/status: %s\n", url->c_str(),
        r.ok() ? fmt::format("HTTP {}", r->status).c_str() : r.status().ToString().c_str());
    return 1;
  }
  if (f.json) {
    std::fputs(r->body.c_str(), stdout);
    return 0;
  }
  std::fputs(control::FormatStatus(nlohmann::json::parse(r->body, nullptr, false)).c_str(), stdout);
  return 0;
}

}  // namespace

void RegisterUp(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<UpFlags>();
  CLI::App* c = app.add_subcommand(
      "up", "run a deployment spec on this machine: replicas, gateway, Prometheus, autoscaler");
  c->add_option("-f,--file", f->spec, "deployment spec (examples/deploy.yaml)")->required();
  c->add_option("--state-dir", f->state_dir,
                "logs, generated configs, Prometheus data (default .strata/<name>)");
  AddDefaulted(c, "--status-port", f->status_port, "status endpoint port (0: pick a free one)")
      ->check(CLI::Range(0, 65535));
  AddDefaulted(c, "--ready-timeout", f->ready_timeout_s,
               "seconds a child may take to become ready before it is reported and restarted")
      ->check(CLI::Range(0.1, 3600.0));
  AddDefaulted(c, "--drain-grace", f->drain_grace_s, "seconds a stopping child gets before SIGKILL")
      ->check(CLI::Range(0.0, 3600.0));
  c->add_flag("--no-prometheus", f->no_prometheus, "do not run Prometheus (no SLO figures)");
  c->callback([f, exit_code] { *exit_code = control::RunUp(f->spec, UpOptionsFrom(*f)); });

  auto s = std::make_shared<StatusFlags>();
  CLI::App* st = app.add_subcommand("status", "what a running `strata up` reports");
  st->add_option("--url", s->url, "status URL of `strata up` (http://127.0.0.1:PORT)");
  st->add_option("--state-dir", s->state_dir, "the state dir of `strata up` (reads up.json)");
  st->add_flag("--json", s->json, "print the status JSON");
  st->callback([s, exit_code] { *exit_code = RunStatus(*s); });
}

}  // namespace strata::app
