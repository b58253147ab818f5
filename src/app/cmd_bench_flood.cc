// `strata bench flood`: a bounded storm of invalid requests against a live server (bench/flood.h);
// exits 1 on any 5xx, hang, unexpected close or a server that is gone.
#include <cstdio>
#include <memory>

#include "app/cli_common.h"
#include "app/commands.h"
#include "bench/flood.h"

namespace strata::app {

void RegisterBenchFlood(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<bench::FloodOptions>();
  CLI::App* c = bench->add_subcommand(
      "flood", "Random invalid requests against a live server: no 5xx, no crash, RSS before/after");
  c->add_option("--host", o->host, "server address (default 127.0.0.1)");
  c->add_option("--port", o->port, "server port")->required();
  c->add_option("-n,--requests", o->requests, "requests to send (default 1000000)");
  c->add_option("-c,--connections", o->connections, "concurrent connections (default 8)");
  c->add_option("--seed", o->seed, "random seed (default 1)");
  c->add_option("--timeout", o->timeout_s, "seconds to wait for each response (default 30)");
  c->add_option("--server-pid", o->server_pid,
                "the server's pid: report its RSS (/proc) and check it is alive at the end");
  c->callback([o, exit_code] {
    auto r = bench::RunFlood(*o);
    ReportError(r.status(), "strata bench flood", exit_code);
    if (!r.ok()) return;
    std::fputs(bench::FormatFloodReport(*r).c_str(), stdout);
    if (!r->ok()) *exit_code = 1;
  });
}

}  // namespace strata::app
