// Replica: one served model assembled from one ReplicaConfig — the HTTP server (src/http), the
// OpenAI API over it (server::Api), the model and its tokenizer and chat template, the replica's
// LoRA registry, the serving engine (engine::serving::ServingEngine: runner, paged KV, tiers,
// sched::Engine) and, with tracing.otlp_endpoint, the span exporter (trace::Tracer). `strata
// serve` runs one (Serve → Drain → Stop); `strata bench offline` builds its engine half alone
// (EngineOnly: no HTTP, tokenizer, tracer or registry).
//
// Order of start (Serve): API keys, tracer (a bad endpoint fails start-up), HTTP bound (while the
// model loads, /health is 200 and the rest 503 "loading"), model + tokenizer + template, the
// adapters of engine.lora.adapters, the engine started, the Api ready. Order of stop (Stop):
// the HTTP I/O threads joined first (no handler runs after), the Api (live jobs cancelled), the
// tracer flushed, the engine stopped.
//
// Ownership: owns every part; the Model is shared with the engine and the registry.
// Thread contract: created, drained and stopped by one controlling thread; the HTTP I/O threads
// call into the Api it owns, the engine thread runs after start. The process should block
// SIGINT/SIGTERM before Serve (every thread it starts inherits the mask).
// Errors: Status values naming the key or flag that is wrong (`--otlp-endpoint`, `--lora`, a
// vocabulary larger than the model, a chat template that does not parse, the engine's own).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/serving/serving_engine.h"
#include "http/server.h"
#include "lora/registry.h"
#include "model/model.h"
#include "replica/replica_config.h"
#include "server/api.h"
#include "server/lora_adapters.h"
#include "tokenizer/chat/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "trace/tracer.h"

namespace strata::replica {

// A GGUF file's weights and the tokenizer of its metadata, checked against each other (the
// vocabulary may not be larger than the embedding rows). `strata serve` and `strata generate`.
struct LoadedModel {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::string chat_template;  // the GGUF's tokenizer.chat_template; "": none
};
Result<LoadedModel> LoadModel(const std::string& path);

class Replica {
 public:
  // Called once the port is bound, before the model loads (`strata serve` prints "listening").
  using OnListening = std::function<void(uint16_t port)>;

  // The whole replica, ready when it returns. `config` is validated and config.model.path set.
  static Result<std::unique_ptr<Replica>> Serve(const ReplicaConfig& config,
                                                const OnListening& on_listening);
  // The model and the started serving engine only (config.model.path and config.engine read).
  static Result<std::unique_ptr<Replica>> EngineOnly(const ReplicaConfig& config);

  ~Replica();  // Stop()
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // Refuses new work (/ready 503), waits up to server.shutdown_timeout_s for the requests in
  // flight and the responses being written, stops accepting connections, and ends what still runs
  // with an error (SSE error event, or a 503). Returns how many requests were cut (0: all ended).
  int Drain();
  // Stops every part in the order above; idempotent.
  void Stop();

  engine::serving::ServingEngine& serving() { return *serving_; }
  const model::Model& model() const { return *model_; }
  const ReplicaConfig& config() const { return config_; }
  uint16_t port() const;  // the bound HTTP port (Serve only)
  const std::string& served_model_name() const { return served_model_name_; }
  bool has_chat_template() const { return chat_template_ != nullptr; }

 private:
  explicit Replica(const ReplicaConfig& config) : config_(config) {}
  Status StartTracer();
  Status StartHttp();
  Status AdoptModel(LoadedModel loaded);
  Status StartEngine();
  void StartApi(std::vector<std::string> keys);

  const ReplicaConfig config_;
  std::unique_ptr<trace::Tracer> tracer_;
  std::unique_ptr<http::HttpServer> http_;
  std::atomic<server::Api*> api_ptr_{nullptr};  // what the HTTP handler calls once ready
  std::shared_ptr<const model::Model> model_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::chat::ChatTemplate> chat_template_;
  std::unique_ptr<lora::Registry> registry_;
  std::unique_ptr<server::RegistryStore> adapters_;
  std::unique_ptr<engine::serving::ServingEngine> serving_;
  std::unique_ptr<server::Api> api_;
  std::string served_model_name_;
  bool drained_ = false;
  bool stopped_ = false;
};

}  // namespace strata::replica
