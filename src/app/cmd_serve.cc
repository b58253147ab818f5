// `strata serve`: one replica (src/replica: the OpenAI-compatible HTTP server over the serving
// engine) from the replica config. Wiring only: resolve the config, start the replica, wait for
// SIGINT/SIGTERM, drain, exit 0.
#include <fmt/format.h>
#include <signal.h>

#include <cstdio>
#include <optional>
#include <string>

#include "app/cli_common.h"
#include "app/commands.h"
#include "app/replica_flags.h"
#include "engine/serving/serving_engine.h"
#include "replica/replica.h"

namespace strata::app {
namespace {

// A tier that could not be reached at start is served without (it reconnects by itself), but never
// silently: one warning naming the address and the error; /metrics has strata:kv_tier_up.
void WarnUnreachableTiers(const std::optional<engine::kvtier::TieredKvStats>& stats) {
  if (!stats || !stats->redis.enabled || stats->redis.up) return;
  std::fprintf(stderr,
               "strata serve: WARNING: KV tier redis at %s is unreachable (%s); serving without "
               "it and retrying in the background (strata:kv_tier_up{kv_tier=\"redis\"} 0)\n",
               stats->redis.address.c_str(),
               stats->redis.last_error.empty() ? "no connection" : stats->redis.last_error.c_str());
}

std::string DescribeTiers(const engine::kvtier::TieredKvConfig& c) {
  if (!c.enabled()) return "no KV tiers";
  std::string s = "KV tiers:";
  if (c.ram) s += fmt::format(" ram {} MiB", c.ram->limits.capacity_bytes >> 20);
  if (c.disk)
    s += fmt::format(" disk {} ({} MiB)", c.disk->dir, c.disk->limits.capacity_bytes >> 20);
  if (c.redis)
    s += fmt::format(" redis {}{}", c.redis->url, c.redis->write_through ? " (write-through)" : "");
  return s;
}

// `config` is validated (ReplicaFlags::Resolve): a bad key or flag is refused before the port is
// bound, without ever printing "listening".
Status RunServe(replica::ReplicaConfig config) {
  // Block the shutdown signals in every thread (the replica's inherit the mask); the main thread
  // waits for them with sigwait.
  sigset_t sigs = BlockSignals({SIGINT, SIGTERM});

  if (config.model.path.empty()) config.model.path = DefaultModelPath();
  const replica::ServerConfig& o = config.server;
  ASSIGN_OR_RETURN(auto replica, replica::Replica::Serve(config, [&o](uint16_t port) {
                     std::printf("listening on http://%s:%u\n", o.host.c_str(),
                                 static_cast<unsigned>(port));
                     std::fflush(stdout);
                   }));
  const engine::serving::ServingConfig& sc = config.engine;
  WarnUnreachableTiers(replica->serving().TierStats());
  std::printf(
      "strata serve: ready: model '%s' (%s), context %d, %d KV blocks of %d tokens, %s, %s, %zu "
      "LoRA adapter(s)\n",
      replica->served_model_name().c_str(), config.model.path.c_str(),
      replica->serving().max_model_len(), replica->serving().num_blocks(), sc.kv_cache.block_size,
      replica->has_chat_template() ? "chat template present" : "no chat template (chat -> 400)",
      DescribeTiers(sc.kv_tiers).c_str(), sc.lora.adapters.size());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&sigs, &sig);
  std::fprintf(stderr, "strata serve: %s, draining (up to %.0f s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_timeout_s);
  if (const int cut = replica->Drain(); cut > 0)
    std::fprintf(stderr, "strata serve: --shutdown-timeout expired: cut %d request(s) in flight\n",
                 cut);
  replica->Stop();
  std::fprintf(stderr, "strata serve: stopped\n");
  return Status::Ok();
}

}  // namespace

void RegisterServe(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<ReplicaFlags>();
  auto print_config = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, ...)");
  flags->Register(cmd, ReplicaFlags::kModel | ReplicaFlags::kServer | ReplicaFlags::kEngine);
  cmd->add_flag("--print-config", *print_config,
                "print the effective config (YAML, loadable by --config) and exit");
  cmd->callback([flags, print_config, exit_code] {
    auto config = flags->Resolve();
    Status s = config.status();
    if (s.ok() && *print_config) {
      std::fputs(replica::ReplicaConfigToYaml(*config).c_str(), stdout);
      return;
    }
    if (s.ok()) s = RunServe(*config);
    ReportError(s, "strata serve", exit_code);
  });
}

}  // namespace strata::app
