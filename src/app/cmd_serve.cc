// `strata serve`: the OpenAI-compatible HTTP server (src/server) over the serving engine
// (engine::ServingEngine: model + paged KV + CpuModelRunner + sched::Engine). Wiring only: load, build the engine, start HTTP, wait for
// SIGINT/SIGTERM, drain, exit 0.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <fmt/format.h>

#include "app/commands.h"
#include "engine/kv/kv_storage.h"
#include "engine/serving/serving_engine.h"
#include "model/model.h"
#include "server/api.h"
#include "server/http_server.h"
#include "tokenizer/chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace strata::app {
namespace {

struct ServeOptions {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string api_key_file;
  std::string served_model_name;
  std::string chat_template_file;
  int threads = 0;
  int io_threads = 2;
  int max_model_len = 0;
  std::string kv_cache_memory = "1GiB";
  std::string kv_dtype = "f16";
  int block_size = 16;
  int max_num_seqs = 64;
  int max_batched_tokens = 2048;
  int max_prefill_tokens_with_decodes = 0;
  int max_queued_requests = 256;
  uint64_t max_body_bytes = 4u << 20;
  double shutdown_timeout = 30;
  double idle_timeout = 60;
  double request_timeout = 30;
  int max_tokens_cap = 4096;
  // KV tiers (flags override the YAML file's values).
  std::string kv_tier_config;
  std::string kv_tier_ram;
  double kv_tier_ram_ttl = -1;
  std::string kv_tier_disk;
  std::string kv_tier_disk_size;
  double kv_tier_disk_ttl = -1;
  std::string kv_tier_redis;
  double kv_tier_redis_ttl = -1;
  std::string kv_tier_redis_write_through;  // "", "on", "off"
  std::string kv_tier_compression;
  double kv_tier_prefetch_timeout = 1.0;
};

Result<engine::kvtier::TieredKvConfig> TierConfig(const ServeOptions& o) {
  namespace kt = engine::kvtier;
  kt::TieredKvConfig c;
  if (!o.kv_tier_config.empty()) {
    ASSIGN_OR_RETURN(c, kt::LoadTieredKvConfigFile(o.kv_tier_config));
  }
  if (!o.kv_tier_ram.empty()) {
    if (!c.ram) c.ram.emplace();
    auto bytes = engine::kv::ParseMemorySize(o.kv_tier_ram);
    if (!bytes.ok()) return Status::InvalidArgument("--kv-tier-ram: " + std::string(bytes.status().message()));
    c.ram->limits.capacity_bytes = *bytes;
  }
  if (o.kv_tier_ram_ttl >= 0 && c.ram) c.ram->limits.ttl_s = o.kv_tier_ram_ttl;
  if (!o.kv_tier_disk.empty()) {
    if (!c.disk) c.disk.emplace();
    c.disk->dir = o.kv_tier_disk;
    if (c.disk->limits.capacity_bytes == 0) c.disk->limits.capacity_bytes = uint64_t{4} << 30;  // default 4 GiB
  }
  if (!o.kv_tier_disk_size.empty()) {
    if (!c.disk) return Status::InvalidArgument("--kv-tier-disk-size needs --kv-tier-disk DIR");
    auto bytes = engine::kv::ParseMemorySize(o.kv_tier_disk_size);
    if (!bytes.ok()) return Status::InvalidArgument("--kv-tier-disk-size: " + std::string(bytes.status().message()));
    c.disk->limits.capacity_bytes = *bytes;
  }
  if (o.kv_tier_disk_ttl >= 0 && c.disk) c.disk->limits.ttl_s = o.kv_tier_disk_ttl;
  if (!o.kv_tier_redis.empty()) {
    if (!c.redis) c.redis.emplace();
    c.redis->url = o.kv_tier_redis;
  }
  if (o.kv_tier_redis_ttl >= 0 && c.redis) c.redis->limits.ttl_s = o.kv_tier_redis_ttl;
  if (!o.kv_tier_redis_write_through.empty()) {
    if (!c.redis) return Status::InvalidArgument("--kv-tier-redis-write-through needs --kv-tier-redis URL");
    if (o.kv_tier_redis_write_through != "on" && o.kv_tier_redis_write_through != "off")
      return Status::InvalidArgument("--kv-tier-redis-write-through must be on or off");
    c.redis->write_through = o.kv_tier_redis_write_through == "on";
  }
  if (!o.kv_tier_compression.empty()) {
    if (o.kv_tier_compression == "none") c.compression = kt::Compression::kNone;
    else if (o.kv_tier_compression == "lz4") c.compression = kt::Compression::kLz4;
    else if (o.kv_tier_compression == "zstd") c.compression = kt::Compression::kZstd;
    else return Status::InvalidArgument("--kv-tier-compression must be none, lz4 or zstd");
  }
  if (c.enabled()) RETURN_IF_ERROR(c.Validate());
  return c;
}

std::string DescribeTiers(const engine::kvtier::TieredKvConfig& c) {
  if (!c.enabled()) return "no KV tiers";
  std::string s = "KV tiers:";
  if (c.ram) s += fmt::format(" ram {} MiB", c.ram->limits.capacity_bytes >> 20);
  if (c.disk) s += fmt::format(" disk {} ({} MiB)", c.disk->dir, c.disk->limits.capacity_bytes >> 20);
  if (c.redis) s += fmt::format(" redis {}{}", c.redis->url, c.redis->write_through ? " (write-through)" : "");
  return s;
}

Result<std::vector<std::string>> LoadKeys(const ServeOptions& o) {
  std::vector<std::string> keys;
  if (!o.api_key.empty()) keys.push_back(o.api_key);
  if (!o.api_key_file.empty()) {
    std::ifstream f(o.api_key_file);
    if (!f) return Status::IoError("cannot read --api-key-file " + o.api_key_file);
    std::string line;
    while (std::getline(f, line)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
      if (!line.empty() && line[0] != '#') keys.push_back(line);
    }
    if (keys.empty()) return Status::InvalidArgument("--api-key-file " + o.api_key_file + " holds no key");
  }
  return keys;
}

Status RunServe(const ServeOptions& o) {
  // Block the shutdown signals in every thread; the main thread waits for them with sigwait.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  ASSIGN_OR_RETURN(auto keys, LoadKeys(o));
  // Engine flags are checked before the port is bound: a bad flag is refused without ever
  // printing "listening".
  ASSIGN_OR_RETURN(auto kv_dtype, engine::kv::ParseKvDType(o.kv_dtype));
  engine::ServingConfig sc;
  sc.kv_cache_memory = o.kv_cache_memory;
  sc.kv_dtype = kv_dtype;
  sc.block_size = o.block_size;
  sc.max_batched_tokens = o.max_batched_tokens;
  sc.max_prefill_tokens_with_decodes = o.max_prefill_tokens_with_decodes;
  sc.max_num_seqs = o.max_num_seqs;
  sc.max_model_len = o.max_model_len;
  sc.max_queued_requests = o.max_queued_requests;
  sc.threads = o.threads;
  ASSIGN_OR_RETURN(sc.kv_tiers, TierConfig(o));
  sc.kv_tier_prefetch_timeout_s = o.kv_tier_prefetch_timeout;
  RETURN_IF_ERROR(sc.Validate());

  // HTTP comes up first: while the model loads, /health is 200 and everything else 503 (loading).
  std::atomic<server::Api*> api_ptr{nullptr};
  server::HttpServerOptions so;
  so.host = o.host;
  if (o.port < 0 || o.port > 65535) return Status::InvalidArgument("--port must be in [0, 65535]");
  so.port = static_cast<uint16_t>(o.port);
  so.io_threads = o.io_threads;
  so.max_body_bytes = o.max_body_bytes;
  so.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.idle_timeout * 1000));
  so.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.request_timeout * 1000));
  ASSIGN_OR_RETURN(auto server, server::HttpServer::Start(so, [&api_ptr](server::HttpRequest req,
                                                                          std::shared_ptr<server::Responder> out) {
    if (server::Api* a = api_ptr.load(std::memory_order_acquire)) return a->Handle(std::move(req), std::move(out));
    out->Respond(server::LoadingResponse(req));
  }));
  std::printf("listening on http://%s:%u\n", o.host.c_str(), static_cast<unsigned>(server->port()));
  std::fflush(stdout);
  std::string path = o.model.empty() ? DefaultModelPath() : o.model;
  ASSIGN_OR_RETURN(auto model, model::Model::Load(path));
  ASSIGN_OR_RETURN(auto vocab, tokenizer::VocabFromGguf(model->gguf()));
  std::string template_source = vocab.chat_template;
  ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::Create(std::move(vocab)));
  const auto& cfg = model->config();
  if (tok->n_vocab() > static_cast<size_t>(cfg.n_vocab))
    return Status::InvalidArgument(fmt::format("vocabulary has {} tokens but the model only {} embedding rows",
                                               tok->n_vocab(), cfg.n_vocab));
  if (!o.chat_template_file.empty()) {
    std::ifstream f(o.chat_template_file, std::ios::binary);
    if (!f) return Status::IoError("cannot read --chat-template-file " + o.chat_template_file);
    template_source.assign(std::istreambuf_iterator<char>(f), {});
  }
  std::unique_ptr<chat::ChatTemplate> tmpl;
  if (!template_source.empty()) {
    auto t = chat::ChatTemplate::Parse(template_source);
    if (!t.ok()) return Status::InvalidArgument("chat template: " + std::string(t.status().message()));
    tmpl = std::move(*t);
  }

  std::shared_ptr<const model::Model> shared_model = std::move(model);
  ASSIGN_OR_RETURN(auto serving, engine::ServingEngine::Create(shared_model, sc));
  const int max_len = serving->max_model_len();
  const int blocks = serving->num_blocks();
  auto* eng = &serving->engine();
  serving->Start();

  server::ModelInfo info;
  info.name = o.served_model_name.empty() ? std::filesystem::path(path).stem().string() : o.served_model_name;
  info.tok = tok.get();
  info.chat_template = tmpl.get();
  const auto& v = tok->vocab();
  if (tok->bos() >= 0 && static_cast<size_t>(tok->bos()) < v.tokens.size()) info.bos_token = v.tokens[static_cast<size_t>(tok->bos())];
  if (tok->eos() >= 0 && static_cast<size_t>(tok->eos()) < v.tokens.size()) info.eos_token = v.tokens[static_cast<size_t>(tok->eos())];
  info.max_model_len = max_len;
  info.salt = serving->salt();
  info.limits.max_tokens = o.max_tokens_cap;
  server::ApiOptions ao;
  ao.api_keys = std::move(keys);
  engine::ServingEngine* serving_ptr = serving.get();
  ao.tier_stats = [serving_ptr] { return serving_ptr->TierStats(); };
  auto api = std::make_unique<server::Api>(info, eng, ao);

  api->SetReady(true);
  api_ptr.store(api.get(), std::memory_order_release);
  std::printf("strata serve: ready: model '%s' (%s), context %d, %d KV blocks of %d tokens, %s, %s\n", info.name.c_str(),
              path.c_str(), max_len, blocks, o.block_size, tmpl ? "chat template present" : "no chat template (chat -> 400)",
              DescribeTiers(sc.kv_tiers).c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&sigs, &sig);
  std::fprintf(stderr, "strata serve: %s, draining (up to %.0f s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_timeout);
  api->StartDraining();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout * 1000));
  while (std::chrono::steady_clock::now() < deadline && (api->live_jobs() > 0 || server->active_responses() > 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  server->StopAccepting();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the last writes leave
  server->Stop();   // joins the I/O threads: no handler or disconnect callback runs after this
  api.reset();      // stops the pump, cancels what is left
  serving->Stop();
  server.reset();
  std::fprintf(stderr, "strata serve: stopped\n");
  return Status::Ok();
}

}  // namespace

void RegisterServe(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, ...)");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the bundled model)");
  cmd->add_option("--host", o->host, "address to bind (default 127.0.0.1)");
  cmd->add_option("--port", o->port, "port (0: any free port; the bound port is printed)");
  cmd->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' (all routes but /health, /ready)");
  cmd->add_option("--api-key-file", o->api_key_file, "file with one accepted key per line");
  cmd->add_option("--served-model-name", o->served_model_name, "model id clients use (default: file stem)");
  cmd->add_option("--chat-template-file", o->chat_template_file, "Jinja chat template overriding the GGUF's");
  cmd->add_option("-t,--threads", o->threads, "compute threads (default: all cores)");
  cmd->add_option("--io-threads", o->io_threads, "HTTP I/O threads");
  cmd->add_option("--max-model-len", o->max_model_len, "context size per sequence (default: model's, at most 8192)");
  cmd->add_option("--kv-cache-memory", o->kv_cache_memory, "KV cache budget: 512MiB, 2GiB, 0.25 (of RAM), 10%");
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache type: f16, f32, q8_0");
  cmd->add_option("--block-size", o->block_size, "tokens per KV block");
  cmd->add_option("--max-num-seqs", o->max_num_seqs, "sequences running at once");
  cmd->add_option("--max-batched-tokens", o->max_batched_tokens, "tokens per engine step");
  cmd->add_option("--max-prefill-tokens-with-decodes", o->max_prefill_tokens_with_decodes,
                  "prompt tokens per step while sequences are decoding (bounds their inter-token stall; 0: no cap)");
  cmd->add_option("--max-queued-requests", o->max_queued_requests, "admission bound: more waiting requests get 429");
  cmd->add_option("--max-body-bytes", o->max_body_bytes, "request body limit (413 above)");
  cmd->add_option("--max-tokens-cap", o->max_tokens_cap, "largest accepted max_tokens");
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout, "seconds in-flight requests get to finish on SIGTERM");
  cmd->add_option("--idle-timeout", o->idle_timeout, "seconds an idle keep-alive connection is kept");
  cmd->add_option("--request-timeout", o->request_timeout, "seconds a client gets to send one request");
  cmd->add_option("--kv-tier-config", o->kv_tier_config, "YAML file configuring the KV tiers (flags below override it)");
  cmd->add_option("--kv-tier-ram", o->kv_tier_ram, "host-RAM KV tier (L2) capacity, e.g. 2GiB");
  cmd->add_option("--kv-tier-ram-ttl", o->kv_tier_ram_ttl, "seconds a RAM-tier entry lives (0: no expiry)");
  cmd->add_option("--kv-tier-disk", o->kv_tier_disk, "directory of the disk KV tier (L3; survives restarts)");
  cmd->add_option("--kv-tier-disk-size", o->kv_tier_disk_size, "disk KV tier capacity (default 4GiB)");
  cmd->add_option("--kv-tier-disk-ttl", o->kv_tier_disk_ttl, "seconds a disk-tier entry lives (0: no expiry)");
  cmd->add_option("--kv-tier-redis", o->kv_tier_redis, "Redis KV tier (L4, shared by replicas): redis://host:port[/db]");
  cmd->add_option("--kv-tier-redis-ttl", o->kv_tier_redis_ttl, "seconds a Redis-tier entry lives (0: no expiry)");
  cmd->add_option("--kv-tier-redis-write-through", o->kv_tier_redis_write_through,
                  "on (default): every computed block is written to Redis; off: this replica only reads Redis");
  cmd->add_option("--kv-tier-compression", o->kv_tier_compression, "none (default), lz4 or zstd");
  cmd->add_option("--kv-tier-prefetch-timeout", o->kv_tier_prefetch_timeout,
                  "seconds a request waits for its blocks from the tiers before computing them (default 1)");
  cmd->callback([o, exit_code] {
    Status s = RunServe(*o);
    if (!s.ok()) {
      std::fprintf(stderr, "strata serve: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace strata::app
