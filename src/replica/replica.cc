#include "replica/replica.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <utility>

#include "tokenizer/chat/builtin_templates.h"

namespace strata::replica {
namespace {

// The configured keys plus those of server.api_key_file.
Result<std::vector<std::string>> LoadKeys(const ServerConfig& o) {
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

http::HttpServerOptions HttpOptions(const ServerConfig& o) {
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

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

Result<LoadedModel> LoadModel(const std::string& path) {
  LoadedModel out;
  ASSIGN_OR_RETURN(out.model, model::Model::Load(path));
  ASSIGN_OR_RETURN(auto vocab, tokenizer::VocabFromGguf(out.model->gguf()));
  out.chat_template = vocab.chat_template;
  ASSIGN_OR_RETURN(out.tokenizer, tokenizer::Tokenizer::Create(std::move(vocab)));
  const int n_vocab = out.model->config().n_vocab;
  if (out.tokenizer->n_vocab() > static_cast<size_t>(n_vocab))
    return Status::InvalidArgument(
        fmt::format("vocabulary has {} tokens but the model only {} embedding rows",
                    out.tokenizer->n_vocab(), n_vocab));
  return out;
}

Result<std::unique_ptr<Replica>> Replica::Serve(const ReplicaConfig& config,
                                                const OnListening& on_listening) {
  std::unique_ptr<Replica> r(new Replica(config));
  ASSIGN_OR_RETURN(auto keys, LoadKeys(config.server));
  RETURN_IF_ERROR(r->StartTracer());
  RETURN_IF_ERROR(r->StartHttp());
  if (on_listening) on_listening(r->port());
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(config.model.path));
  RETURN_IF_ERROR(r->AdoptModel(std::move(loaded)));
  RETURN_IF_ERROR(r->StartEngine());
  r->StartApi(std::move(keys));
  return r;
}

Result<std::unique_ptr<Replica>> Replica::EngineOnly(const ReplicaConfig& config) {
  std::unique_ptr<Replica> r(new Replica(config));
  ASSIGN_OR_RETURN(auto loaded, model::Model::Load(config.model.path));
  r->model_ = std::move(loaded);
  RETURN_IF_ERROR(r->StartEngine());
  return r;
}

Replica::~Replica() { Stop(); }

// Tracing only with --otlp-endpoint: otherwise no tracer exists and nothing is traced. Started
// before the port is bound, so a bad endpoint fails start-up.
Status Replica::StartTracer() {
  if (config_.tracing.otlp_endpoint.empty()) return Status::Ok();
  trace::TracerOptions to;
  to.endpoint = config_.tracing.otlp_endpoint;
  to.service_name = config_.tracing.service_name;
  to.sample_ratio = config_.tracing.sample_ratio;
  auto started = trace::Tracer::Start(std::move(to));
  if (!started.ok()) return started.status().WithContext("--otlp-endpoint");
  tracer_ = std::move(*started);
  return Status::Ok();
}

// HTTP comes up first: while the model loads, /health is 200 and everything else 503 (loading).
Status Replica::StartHttp() {
  http::HttpServerOptions so = HttpOptions(config_.server);
  // The last-resort guard's report counts in strata:internal_errors_total once the Api exists.
  so.on_internal_error = [this](std::string_view method, std::string_view path, std::string_view) {
    if (server::Api* a = api_ptr_.load(std::memory_order_acquire)) a->OnInternalError(method, path);
  };
  ASSIGN_OR_RETURN(http_, http::HttpServer::Start(so, [this](http::HttpRequest req,
                                                             std::shared_ptr<http::Responder> out) {
                     if (server::Api* a = api_ptr_.load(std::memory_order_acquire))
                       return a->Handle(std::move(req), std::move(out));
                     out->Respond(server::LoadingResponse(req));
                   }));
  return Status::Ok();
}

// The tokenizer, the chat template (model.chat_template names a built-in one, or
// model.chat_template_file replaces the GGUF's) and the replica's LoRA adapters: those of --lora
// now (a bad one fails start-up with the loader's message), more at runtime through
// /v1/load_lora_adapter.
Status Replica::AdoptModel(LoadedModel loaded) {
  const ModelFileConfig& mc = config_.model;
  std::string template_source = std::move(loaded.chat_template);
  if (const auto* builtin = tokenizer::chat::FindBuiltinTemplate(mc.chat_template))
    template_source.assign(builtin->source);  // the name was checked by ReplicaConfig::Validate
  if (!mc.chat_template_file.empty()) {
    std::ifstream f(mc.chat_template_file, std::ios::binary);
    if (!f) return Status::IoError("cannot read --chat-template-file " + mc.chat_template_file);
    template_source.assign(std::istreambuf_iterator<char>(f), {});
  }
  if (!template_source.empty()) {
    auto t = tokenizer::chat::ChatTemplate::Parse(template_source);
    if (!t.ok())
      return Status::InvalidArgument("chat template: " + std::string(t.status().message()));
    chat_template_ = std::move(*t);
  }
  tokenizer_ = std::move(loaded.tokenizer);
  model_ = std::move(loaded.model);
  const engine::serving::LoraConfig& lc = config_.engine.lora;
  registry_ = std::make_unique<lora::Registry>(
      model_,
      lora::RegistryOptions{.max_rank = lc.max_lora_rank, .max_cpu_loras = lc.max_cpu_loras});
  for (const auto& a : lc.adapters) {
    Status added = registry_->Add(a.name, a.path, a.scale);
    if (!added.ok()) return added.WithContext("--lora " + a.name + "=" + a.path);
  }
  adapters_ = std::make_unique<server::RegistryStore>(registry_.get());
  served_model_name_ = mc.served_model_name.empty() ? std::filesystem::path(mc.path).stem().string()
                                                    : mc.served_model_name;
  return Status::Ok();
}

Status Replica::StartEngine() {
  ASSIGN_OR_RETURN(serving_, engine::serving::ServingEngine::Create(model_, config_.engine));
  serving_->Start();
  return Status::Ok();
}

void Replica::StartApi(std::vector<std::string> keys) {
  const ServerConfig& o = config_.server;
  server::ModelInfo info;
  info.name = served_model_name_;
  info.tok = tokenizer_.get();
  info.chat_template = chat_template_.get();
  const auto& v = tokenizer_->vocab();
  if (tokenizer_->bos() >= 0 && static_cast<size_t>(tokenizer_->bos()) < v.tokens.size())
    info.bos_token = v.tokens[static_cast<size_t>(tokenizer_->bos())];
  if (tokenizer_->eos() >= 0 && static_cast<size_t>(tokenizer_->eos()) < v.tokens.size())
    info.eos_token = v.tokens[static_cast<size_t>(tokenizer_->eos())];
  info.max_model_len = serving_->max_model_len();
  info.limits.max_tokens = o.max_tokens_cap;
  server::ApiOptions ao;
  ao.api_keys = std::move(keys);
  ao.retry_after_s = o.retry_after_s;
  ao.metrics_compat = o.metrics_compat;
  engine::serving::ServingEngine* serving = serving_.get();
  ao.tier_stats = [serving] { return serving->TierStats(); };
  ao.adapters = adapters_.get();
  ao.tracer = tracer_.get();
  api_ = std::make_unique<server::Api>(std::move(info), &serving_->engine(), std::move(ao));
  api_->SetReady(true);
  api_ptr_.store(api_.get(), std::memory_order_release);
}

uint16_t Replica::port() const { return http_ ? http_->port() : 0; }

int Replica::Drain() {
  if (!api_ || !http_) return 0;
  api_->StartDraining();
  const auto deadline =
      std::chrono::steady_clock::now() + Millis(config_.server.shutdown_timeout_s);
  while (std::chrono::steady_clock::now() < deadline &&
         (api_->live_jobs() > 0 || http_->active_responses() > 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  http_->StopAccepting();
  // Timeout: what still runs ends with an error (SSE error event + [DONE], or a 503), not a bare
  // close.
  int cut = 0;
  if (api_->live_jobs() > 0) cut = api_->CutAtShutdown(std::chrono::milliseconds(1000));
  drained_ = true;
  return cut;
}

void Replica::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (drained_) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the last writes
  if (http_) http_->Stop();  // joins the I/O threads: no handler or disconnect callback after this
  api_ptr_.store(nullptr, std::memory_order_release);
  api_.reset();  // detaches the live jobs from their streams, cancels them
  if (tracer_) tracer_->Shutdown(std::chrono::milliseconds(1000));  // flushes the last spans
  if (serving_) serving_->Stop();
  http_.reset();
}

}  // namespace strata::replica
