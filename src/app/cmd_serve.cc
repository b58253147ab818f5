// `strata serve`: the OpenAI-compatible HTTP server (src/server) over the serving engine
// (engine::serving::ServingEngine: model + paged KV + CpuModelRunner + sched::Engine). Wiring only:
// load, build the engine, start HTTP, wait for SIGINT/SIGTERM, drain, exit 0.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "app/commands.h"
#include "app/replica_flags.h"
#include "engine/serving/serving_engine.h"
#include "http/server.h"
#include "lora/registry.h"
#include "model/model.h"
#include "server/api.h"
#include "tokenizer/chat/builtin_templates.h"
#include "tokenizer/chat/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "trace/tracer.h"

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

// The configured keys plus those of server.api_key_file.
Result<std::vector<std::string>> LoadKeys(const engine::serving::ServerConfig& o) {
  std::vector<std::string> keys = o.api_keys;
  if (!o.api_key_file.empty()) {
    std::ifstream f(o.api_key_file);
    if (!f) return Status::IoError("cannot read --api-key-file " + o.api_key_file);
    std::string line;
    while (std::getline(f, line)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
        line.pop_back();
      if (!line.empty() && line[0] != '#') keys.push_back(line);
    }
    if (keys.empty())
      return Status::InvalidArgument("--api-key-file " + o.api_key_file + " holds no key");
  }
  return keys;
}

http::HttpServerOptions HttpOptions(const engine::serving::ServerConfig& o) {
  http::HttpServerOptions so;
  so.host = o.host;
  so.port = static_cast<uint16_t>(o.port);  // validated: [0, 65535]
  so.io_threads = o.io_threads;
  so.max_body_bytes = o.max_body_bytes;
  so.max_header_bytes = o.max_header_bytes;
  so.max_connections = o.max_connections;
  so.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.idle_timeout_s * 1000));
  so.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.request_timeout_s * 1000));
  return so;
}

// `config` is validated (ReplicaFlags::Resolve): a bad key or flag is refused before the port is
// bound, without ever printing "listening".
Status RunServe(const engine::serving::ReplicaConfig& config) {
  const engine::serving::ServerConfig& o = config.server;
  // Block the shutdown signals in every thread; the main thread waits for them with sigwait.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  ASSIGN_OR_RETURN(auto keys, LoadKeys(o));
  // Tracing only with --otlp-endpoint: otherwise no tracer exists and nothing is traced. Started
  // before the port is bound, so a bad endpoint fails start-up.
  std::unique_ptr<trace::Tracer> tracer;
  if (!config.tracing.otlp_endpoint.empty()) {
    trace::TracerOptions to;
    to.endpoint = config.tracing.otlp_endpoint;
    to.service_name = config.tracing.service_name;
    to.sample_ratio = config.tracing.sample_ratio;
    auto started = trace::Tracer::Start(std::move(to));
    if (!started.ok()) return started.status().WithContext("--otlp-endpoint");
    tracer = std::move(*started);
  }
  const engine::serving::ServingConfig& sc = config.engine;

  // HTTP comes up first: while the model loads, /health is 200 and everything else 503 (loading).
  std::atomic<server::Api*> api_ptr{nullptr};
  http::HttpServerOptions so = HttpOptions(o);
  // The last-resort guard's report counts in strata:internal_errors_total once the Api exists.
  so.on_internal_error = [&api_ptr](std::string_view method, std::string_view path,
                                    std::string_view) {
    if (server::Api* a = api_ptr.load(std::memory_order_acquire)) a->OnInternalError(method, path);
  };
  ASSIGN_OR_RETURN(auto server,
                   http::HttpServer::Start(
                       so, [&api_ptr](http::HttpRequest req, std::shared_ptr<http::Responder> out) {
                         if (server::Api* a = api_ptr.load(std::memory_order_acquire))
                           return a->Handle(std::move(req), std::move(out));
                         out->Respond(server::LoadingResponse(req));
                       }));
  std::printf("listening on http://%s:%u\n", o.host.c_str(), static_cast<unsigned>(server->port()));
  std::fflush(stdout);
  std::string path = config.model.path.empty() ? DefaultModelPath() : config.model.path;
  ASSIGN_OR_RETURN(auto model, model::Model::Load(path));
  ASSIGN_OR_RETURN(auto vocab, tokenizer::VocabFromGguf(model->gguf()));
  std::string template_source = vocab.chat_template;
  ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::Create(std::move(vocab)));
  const auto& cfg = model->config();
  if (tok->n_vocab() > static_cast<size_t>(cfg.n_vocab))
    return Status::InvalidArgument(
        fmt::format("vocabulary has {} tokens but the model only {} embedding rows", tok->n_vocab(),
                    cfg.n_vocab));
  if (const auto* builtin = tokenizer::chat::FindBuiltinTemplate(config.model.chat_template)) {
    template_source.assign(builtin->source);  // the name was checked by ReplicaConfig::Validate
  }
  if (!config.model.chat_template_file.empty()) {
    std::ifstream f(config.model.chat_template_file, std::ios::binary);
    if (!f)
      return Status::IoError("cannot read --chat-template-file " + config.model.chat_template_file);
    template_source.assign(std::istreambuf_iterator<char>(f), {});
  }
  std::unique_ptr<tokenizer::chat::ChatTemplate> tmpl;
  if (!template_source.empty()) {
    auto t = tokenizer::chat::ChatTemplate::Parse(template_source);
    if (!t.ok())
      return Status::InvalidArgument("chat template: " + std::string(t.status().message()));
    tmpl = std::move(*t);
  }

  std::shared_ptr<const model::Model> shared_model = std::move(model);
  // The replica's LoRA adapters: those of --lora now (a bad one fails start-up with the loader's
  // message), more at runtime through /v1/load_lora_adapter.
  lora::Registry registry(
      shared_model, {.max_rank = sc.lora.max_lora_rank, .max_cpu_loras = sc.lora.max_cpu_loras});
  for (const auto& a : sc.lora.adapters) {
    Status added = registry.Add(a.name, a.path, a.scale);
    if (!added.ok()) return added.WithContext("--lora " + a.name + "=" + a.path);
  }
  server::RegistryStore adapters(&registry);
  ASSIGN_OR_RETURN(auto serving, engine::serving::ServingEngine::Create(shared_model, sc));
  WarnUnreachableTiers(serving->TierStats());
  const int max_len = serving->max_model_len();
  const int blocks = serving->num_blocks();
  auto* eng = &serving->engine();
  serving->Start();

  server::ModelInfo info;
  info.name = config.model.served_model_name.empty() ? std::filesystem::path(path).stem().string()
                                                     : config.model.served_model_name;
  info.tok = tok.get();
  info.chat_template = tmpl.get();
  const auto& v = tok->vocab();
  if (tok->bos() >= 0 && static_cast<size_t>(tok->bos()) < v.tokens.size())
    info.bos_token = v.tokens[static_cast<size_t>(tok->bos())];
  if (tok->eos() >= 0 && static_cast<size_t>(tok->eos()) < v.tokens.size())
    info.eos_token = v.tokens[static_cast<size_t>(tok->eos())];
  info.max_model_len = max_len;
  info.limits.max_tokens = o.max_tokens_cap;
  server::ApiOptions ao;
  ao.api_keys = std::move(keys);
  ao.retry_after_s = o.retry_after_s;
  ao.metrics_compat = o.metrics_compat;
  engine::serving::ServingEngine* serving_ptr = serving.get();
  ao.tier_stats = [serving_ptr] { return serving_ptr->TierStats(); };
  ao.adapters = &adapters;
  ao.tracer = tracer.get();
  auto api = std::make_unique<server::Api>(info, eng, ao);

  api->SetReady(true);
  api_ptr.store(api.get(), std::memory_order_release);
  std::printf(
      "strata serve: ready: model '%s' (%s), context %d, %d KV blocks of %d tokens, %s, %s, %zu "
      "LoRA adapter(s)\n",
      info.name.c_str(), path.c_str(), max_len, blocks, sc.kv_cache.block_size,
      tmpl ? "chat template present" : "no chat template (chat -> 400)",
      DescribeTiers(sc.kv_tiers).c_str(), sc.lora.adapters.size());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&sigs, &sig);
  std::fprintf(stderr, "strata serve: %s, draining (up to %.0f s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_timeout_s);
  api->StartDraining();
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline &&
         (api->live_jobs() > 0 || server->active_responses() > 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  server->StopAccepting();
  if (api->live_jobs() > 0) {
    // Timeout: what still runs ends with an error (SSE error event + [DONE], or a 503), not a bare
    // close.
    const int cut = api->CutAtShutdown(std::chrono::milliseconds(1000));
    std::fprintf(stderr, "strata serve: --shutdown-timeout expired: cut %d request(s) in flight\n",
                 cut);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the last writes leave
  server->Stop();  // joins the I/O threads: no handler or disconnect callback runs after this
  api.reset();     // detaches the live jobs from their streams, cancels them
  if (tracer) tracer->Shutdown(std::chrono::milliseconds(1000));  // flushes the last spans
  serving->Stop();
  server.reset();
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
      std::fputs(engine::serving::ReplicaConfigToYaml(*config).c_str(), stdout);
      return;
    }
    if (s.ok()) s = RunServe(*config);
    if (!s.ok()) {
      std::fprintf(stderr, "strata serve: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace strata::app
