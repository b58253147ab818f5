#include "server/api.h"

#include <charconv>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace strata::server {

using nlohmann::json;
using engine::sched::FinishReason;
using SteadyTime = std::chrono::steady_clock::time_point;

namespace {

constexpr int kAsync = 0;  // HttpResponse::status meaning "answered later through the Responder"

double Seconds(SteadyTime a, SteadyTime b) { return std::chrono::duration<double>(b - a).count(); }

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpResponse JsonResponse(int status, const json& j) {
  HttpResponse r;
  r.status = status;
  r.body = Dump(j);
  return r;
}

HttpResponse Error(int status, std::string_view message, std::string_view param = {}) {
  std::string_view type = "invalid_request_error", code = "";
  switch (status) {
    case 401: type = "authentication_error"; code = "invalid_api_key"; break;
    case 404: type = "not_found_error"; code = "not_found"; break;
    case 405: code = "method_not_allowed"; break;
    case 413: code = "request_too_large"; break;
    case 429: type = "rate_limit_error"; code = "engine_overloaded"; break;
    case 500: type = "server_error"; code = "internal_error"; break;
    case 501: type = "server_error"; code = "not_implemented"; break;
    case 503: type = "service_unavailable"; code = "unavailable"; break;
    default: break;
  }
  HttpResponse r;
  r.status = status;
  r.body = ErrorBody(message, type, param, code);
  return r;
}

// "max_tokens: must be ..." -> "max_tokens"
std::string ParamOf(std::string_view msg) {
  size_t p = msg.find(": ");
  if (p == std::string_view::npos || p == 0 || p > 64) return {};
  std::string_view name = msg.substr(0, p);
  if (name.find(' ') != std::string_view::npos) return {};
  size_t b = name.find('[');  // messages[3].role -> messages
  return std::string(name.substr(0, std::min(b, name.find('.'))));
}

HttpResponse FromStatus(const Status& s) {
  int code = 500;
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: code = 400; break;
    case StatusCode::kNotFound: code = 404; break;
    case StatusCode::kResourceExhausted: code = 429; break;
    case StatusCode::kUnavailable: code = 503; break;
    case StatusCode::kUnimplemented: code = 501; break;
    default: break;
  }
  return Error(code, s.message(), ParamOf(s.message()));
}

const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                             0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kTokenBuckets = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000};

std::string Base64(std::string_view in) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8) | static_cast<uint8_t>(in[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < in.size()) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint8_t>(in[i + 1]) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace

std::string ErrorBody(std::string_view message, std::string_view type, std::string_view param, std::string_view code) {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return Dump(json{{"error", e}});
}

HttpResponse LoadingResponse(const HttpRequest& req) {
  if (req.path == "/health") return JsonResponse(200, {{"status", "loading"}});
  return Error(503, "the server is loading the model");
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

struct Api::Job {
  struct Choice {
    std::unique_ptr<tokenizer::IncrementalDecoder> dec;
    std::unique_ptr<StopMatcher> stop;
    std::string text;
    json logprobs = json::array();  // chat: content entries; completions: built at the end
    std::vector<std::string> lp_tokens;
    std::vector<float> lp_values;
    std::vector<json> lp_top;
    bool done = false;
    std::string finish;
  };
  GenRequest req;
  engine::sched::RequestHandle handle;
  std::shared_ptr<Responder> out;
  std::string id;
  std::string labels;  // model_name + tier
  std::atomic<bool> gone{false};
  std::vector<Choice> choices;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  SteadyTime arrival, first_token, last_token;
  bool have_first = false;
  bool error = false;
  std::string error_message;
};

Api::Api(ModelInfo model, engine::sched::Engine* engine, ApiOptions options)
    : model_(std::move(model)), engine_(engine), options_(std::move(options)) {
  model_labels_ = Labels({{"model_name", model_.name}});
  created_ = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  using T = MetricsRegistry::Type;
  auto& m = metrics_;
  m.Declare("strata:time_to_first_token_seconds", T::kHistogram, "Time from request arrival to the first generated token.", kLatencyBuckets);
  m.Declare("strata:inter_token_latency_seconds", T::kHistogram, "Time between consecutive generated tokens of a request.", kLatencyBuckets);
  m.Declare("strata:e2e_request_latency_seconds", T::kHistogram, "Time from request arrival to its last byte.", kLatencyBuckets);
  m.Declare("strata:request_queue_time_seconds", T::kHistogram, "Time from arrival to acceptance by the engine (parse, template, tokenize, submit).", kLatencyBuckets);
  m.Declare("strata:request_prompt_tokens", T::kHistogram, "Prompt length of finished requests, in tokens.", kTokenBuckets);
  m.Declare("strata:request_generation_tokens", T::kHistogram, "Generated tokens of finished requests (all n completions).", kTokenBuckets);
  m.Declare("strata:num_requests_running", T::kGauge, "Requests the engine is running.");
  m.Declare("strata:num_requests_waiting", T::kGauge, "Requests waiting in the engine's queue (including preempted).");
  m.Declare("strata:kv_cache_usage_perc", T::kGauge, "Fraction of KV-cache blocks in use (0..1).");
  m.Declare("strata:prompt_tokens_total", T::kCounter, "Prompt tokens of accepted requests.");
  m.Declare("strata:generation_tokens_total", T::kCounter, "Generated tokens delivered to clients.");
  m.Declare("strata:prefix_cache_queries_total", T::kCounter, "Prompt tokens looked up in the prefix cache.");
  m.Declare("strata:prefix_cache_hits_total", T::kCounter, "Prompt tokens found in the prefix cache.");
  m.Declare("strata:num_preemptions_total", T::kCounter, "Sequences preempted by the scheduler.");
  m.Declare("strata:request_success_total", T::kCounter, "Finished requests by finish reason (stop, length, abort, error).");
  m.Declare("strata:http_requests_total", T::kCounter, "HTTP requests by route and status code.");
  m.Declare("strata:kv_tier_hit_tokens_total", T::kCounter, "Prompt tokens whose KV was loaded from a lower tier (RAM/disk/Redis) instead of computed.");
  m.Declare("strata:kv_tier_prefetch_timeouts_total", T::kCounter, "Tier prefetches given up after --kv-tier-prefetch-timeout (the blocks were computed).");
  m.Declare("strata:kv_tier_hits_total", T::kCounter, "Block lookups found in a KV tier, by tier.");
  m.Declare("strata:kv_tier_misses_total", T::kCounter, "Block lookups not found in a KV tier, by tier.");
  m.Declare("strata:kv_tier_bytes_in_total", T::kCounter, "Bytes written into a KV tier, by tier.");
  m.Declare("strata:kv_tier_bytes_out_total", T::kCounter, "Bytes read out of a KV tier, by tier.");
  m.Declare("strata:kv_tier_evictions_total", T::kCounter, "Entries evicted from a KV tier (capacity or quota), by tier.");
  m.Declare("strata:kv_tier_expirations_total", T::kCounter, "Entries expired by TTL in a KV tier, by tier.");
  m.Declare("strata:kv_tier_corrupt_total", T::kCounter, "Entries rejected on read (checksum, length, key or format mismatch) and deleted, by tier.");
  m.Declare("strata:kv_tier_errors_total", T::kCounter, "I/O or connection errors of a KV tier, by tier.");
  m.Declare("strata:kv_tier_entries", T::kGauge, "Entries held by a KV tier, by tier.");
  m.Declare("strata:kv_tier_bytes_used", T::kGauge, "Bytes held by a KV tier, by tier.");
  m.Declare("strata:kv_tier_read_seconds_mean", T::kGauge, "Mean latency of a KV tier's reads, by tier.");
  m.Declare("strata:kv_tier_write_seconds_mean", T::kGauge, "Mean latency of a KV tier's writes, by tier.");
  m.Declare("strata:kv_tier_queue_drops_total", T::kCounter, "Tier writes dropped because the write queue was full.");
  m.Declare("strata:kv_tier_queued_writes", T::kGauge, "Tier writes waiting for a worker.");
  pump_ = std::thread([this] { PumpLoop(); });
  if (engine_->hidden_dim() > 0) embeddings_ = std::make_unique<EmbeddingJobs>(engine_);
}

Api::~Api() {
  embeddings_.reset();  // joins its worker; cancels embeddings in flight
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  pump_.join();
  for (auto& j : jobs_) engine_->Cancel(j->handle.id);
}

int Api::live_jobs() const {
  const int embeddings = embeddings_ ? embeddings_->live() : 0;
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(jobs_.size()) + embeddings;
}

bool Api::Authorized(const HttpRequest& req) const {
  if (options_.api_keys.empty()) return true;
  std::string_view h = req.Header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (h.size() < kBearer.size() || h.substr(0, kBearer.size()) != kBearer) return false;
  std::string_view token = h.substr(kBearer.size());
  bool ok = false;
  for (const auto& k : options_.api_keys) ok |= ConstantTimeEquals(token, k);
  return ok;
}

void Api::Handle(HttpRequest req, std::shared_ptr<Responder> out) {
  std::string route = "other";
  HttpResponse r = Route(req, out, &route);
  if (r.status == kAsync) return;
  metrics_.Add("strata:http_requests_total",
               Labels({{"model_name", model_.name}, {"route", route}, {"status", std::to_string(r.status)}}), 1);
  out->Respond(std::move(r));
}

HttpResponse Api::Route(const HttpRequest& req, std::shared_ptr<Responder>& out, std::string* route) {
  static const char* kRoutes[][2] = {
      {"/health", "GET"},         {"/ready", "GET"},        {"/metrics", "GET"},
      {"/v1/models", "GET"},      {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
      {"/v1/embeddings", "POST"}, {"/tokenize", "POST"},    {"/detokenize", "POST"},
      {"/apply-template", "POST"}};
  const std::string& path = req.path;
  const char* method = nullptr;
  for (auto& r : kRoutes)
    if (path == r[0]) method = r[1];
  bool model_path = path.rfind("/v1/models/", 0) == 0 && path.size() > 11;
  if (model_path) method = "GET";
  if (!method) return Error(404, fmt::format("no route for {} {}", req.method, path));
  *route = model_path ? "/v1/models/{id}" : path;
  if (req.method != method) return Error(405, fmt::format("{} {} is not supported; use {}", req.method, path, method));

  if (path == "/health") return JsonResponse(200, {{"status", "ok"}});
  if (path == "/ready") {
    if (draining_.load()) return Error(503, "draining");
    if (!ready_.load()) return Error(503, "loading");
    return JsonResponse(200, {{"status", "ready"}});
  }
  if (!Authorized(req)) return Error(401, "missing or invalid API key (Authorization: Bearer <key>)");
  if (path == "/metrics") {
    RefreshEngineGauges();
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics_.Render();
    return r;
  }
  if (draining_.load()) return Error(503, "the server is shutting down");
  if (!ready_.load()) return Error(503, "the server is loading");

  json model_obj = {{"id", model_.name}, {"object", "model"}, {"created", created_}, {"owned_by", "strata"},
                    {"max_model_len", model_.max_model_len}};
  if (path == "/v1/models") return JsonResponse(200, {{"object", "list"}, {"data", json::array({model_obj})}});
  if (model_path) {
    std::string id = path.substr(11);
    if (id != model_.name) return Error(404, fmt::format("model '{}' does not exist", id), "model");
    return JsonResponse(200, model_obj);
  }

  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return Error(400, "body: not valid JSON", "body");
  if (!body.is_object()) return Error(400, "body: must be a JSON object", "body");
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) return Error(400, "model: must be a string", "model");
    std::string m = body["model"].get<std::string>();
    if (!m.empty() && m != model_.name)
      return Error(404, fmt::format("model '{}' does not exist (this server serves '{}')", m, model_.name), "model");
  }

  if (path == "/v1/completions") return Generate(Endpoint::kCompletions, req, out);
  if (path == "/v1/chat/completions") return Generate(Endpoint::kChat, req, out);
  if (path == "/v1/embeddings") return Embeddings(req, out);
  if (path == "/tokenize") {
    const json* text = body.contains("content") ? &body["content"] : body.contains("prompt") ? &body["prompt"] : nullptr;
    if (!text || !text->is_string()) return Error(400, "content: must be a string", "content");
    bool add_special = body.value("add_special", true);
    bool with_pieces = body.value("with_pieces", false);
    auto ids = model_.tok->Encode(text->get<std::string>(), add_special, /*parse_special=*/true);
    json j = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", model_.max_model_len}};
    if (with_pieces) {
      json pieces = json::array();
      for (int32_t id : ids) pieces.push_back({{"id", id}, {"piece", model_.tok->TokenToPiece(id, true)}});
      j["tokens"] = pieces;
    }
    return JsonResponse(200, j);
  }
  if (path == "/detokenize") {
    if (!body.contains("tokens") || !body["tokens"].is_array()) return Error(400, "tokens: must be an array of token ids", "tokens");
    std::vector<int32_t> ids;
    for (const json& e : body["tokens"]) {
      if (!e.is_number_integer()) return Error(400, "tokens: must be an array of token ids", "tokens");
      int64_t id = e.get<int64_t>();
      if (id < 0 || static_cast<uint64_t>(id) >= model_.tok->n_vocab())
        return Error(400, fmt::format("tokens: token id {} is outside the vocabulary [0, {})", id, model_.tok->n_vocab()), "tokens");
      ids.push_back(static_cast<int32_t>(id));
    }
    std::string text = model_.tok->Decode(ids);
    return JsonResponse(200, {{"content", text}, {"prompt", text}});
  }
  // /apply-template
  if (!body.contains("messages")) return Error(400, "messages: is required", "messages");
  bool add_gen = true;
  if (body.contains("add_generation_prompt")) {
    if (!body["add_generation_prompt"].is_boolean()) return Error(400, "add_generation_prompt: must be a boolean", "add_generation_prompt");
    add_gen = body["add_generation_prompt"].get<bool>();
  }
  auto text = ApplyChatTemplate(body["messages"], add_gen, model_, body.value("chat_template_kwargs", json(nullptr)));
  if (!text.ok()) return FromStatus(text.status());
  return JsonResponse(200, {{"prompt", *text}});
}

HttpResponse Api::Embeddings(const HttpRequest& req, std::shared_ptr<Responder>& out) {
  if (!embeddings_) return Error(501, "embeddings are not available for this model");
  json body = json::parse(req.body, nullptr, false);
  if (!body.contains("input")) return Error(400, "input: is required", "input");
  const json& in = body["input"];
  bool base64 = false;
  if (body.contains("encoding_format") && !body["encoding_format"].is_null()) {
    const json& f = body["encoding_format"];
    if (!f.is_string() || (f != "float" && f != "base64"))
      return Error(400, "encoding_format: must be \"float\" or \"base64\"", "encoding_format");
    base64 = f == "base64";
  }
  std::vector<std::vector<int32_t>> inputs;
  auto add_text = [&](const std::string& s) { inputs.push_back(model_.tok->Encode(s, true, true)); };
  auto token_list = [&](const json& a) -> Status {
    std::vector<int32_t> ids;
    for (const json& e : a) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<uint64_t>() >= model_.tok->n_vocab())
        return Status::InvalidArgument("input: token ids must be integers inside the vocabulary");
      ids.push_back(e.get<int32_t>());
    }
    inputs.push_back(std::move(ids));
    return Status::Ok();
  };
  if (in.is_string()) {
    add_text(in.get<std::string>());
  } else if (in.is_array() && !in.empty() && in[0].is_number_integer()) {
    if (auto s = token_list(in); !s.ok()) return FromStatus(s);
  } else if (in.is_array() && !in.empty() && in.size() <= 256) {
    for (const json& e : in) {
      if (e.is_string()) add_text(e.get<std::string>());
      else if (e.is_array()) {
        if (auto s = token_list(e); !s.ok()) return FromStatus(s);
      } else {
        return Error(400, "input: must be a string, an array of strings, or token arrays", "input");
      }
    }
  } else {
    return Error(400, "input: must be a non-empty string, an array of at most 256 strings, or token arrays", "input");
  }
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) return Error(400, "input: an input is empty", "input");
    if (static_cast<int64_t>(inputs[i].size()) > model_.max_model_len)
      return Error(400,
                   fmt::format("input: input {} has {} tokens, more than the context size of {}", i,
                               inputs[i].size(), model_.max_model_len),
                   "input");
    total += static_cast<int64_t>(inputs[i].size());
  }
  // Answered by EmbeddingJobs' worker once the engine has computed every input.
  auto done = [this, out, base64, total](EmbeddingResult result) {
    HttpResponse r;
    if (!result.status.ok()) {
      r = FromStatus(result.status);
    } else {
      json data = json::array();
      for (size_t i = 0; i < result.vectors.size(); ++i) {
        const std::vector<float>& e = result.vectors[i];
        if (base64) {
          std::string raw(e.size() * sizeof(float), '\0');
          // Little-endian float32, as OpenAI sends it.
          std::memcpy(raw.data(), e.data(), raw.size());
          data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", Base64(raw)}});
        } else {
          data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", e}});
        }
      }
      r = JsonResponse(200, {{"object", "list"},
                             {"data", data},
                             {"model", model_.name},
                             {"usage", {{"prompt_tokens", total}, {"total_tokens", total}}}});
    }
    metrics_.Add("strata:http_requests_total",
                 Labels({{"model_name", model_.name},
                         {"route", "/v1/embeddings"},
                         {"status", std::to_string(r.status)}}),
                 1);
    out->Respond(std::move(r));
  };
  Status s =
      embeddings_->Submit(std::move(inputs), engine::sched::Tier::kSilver, out, std::move(done));
  if (!s.ok()) {
    HttpResponse r = FromStatus(s);
    if (r.status == 429)
      r.headers.emplace_back("Retry-After", std::to_string(options_.retry_after_s));
    return r;
  }
  HttpResponse r;
  r.status = kAsync;
  return r;
}

HttpResponse Api::Generate(Endpoint ep, const HttpRequest& req, std::shared_ptr<Responder>& out) {
  SteadyTime arrival = std::chrono::steady_clock::now();
  json body = json::parse(req.body, nullptr, false);
  auto parsed = ParseGenRequest(ep, body, model_, req.Header("x-strata-tier"));
  if (!parsed.ok()) return FromStatus(parsed.status());
  auto job = std::make_shared<Job>();
  job->req = std::move(*parsed);
  auto& g = job->req;
  // Tenant (x-strata-tenant): owns the request's KV-tier quota and isolates its prefix cache (the
  // tenant is bound into every block hash, so tenants never share or probe each other's blocks).
  if (std::string_view tenant = req.Header("x-strata-tenant"); !tenant.empty()) {
    if (tenant.size() > engine::sched::kMaxTenantBytes)
      return Error(400, "x-strata-tenant: longer than 256 bytes", "x-strata-tenant");
    for (char c : tenant) {
      if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e)
        return Error(400, "x-strata-tenant: must be printable ASCII without spaces", "x-strata-tenant");
    }
    g.submit.tenant.assign(tenant);
    const auto part = engine::kv::MakePrefixSalt({"tenant", tenant});
    g.submit.salt.insert(g.submit.salt.end(), part.begin(), part.end());
  }
  std::optional<int64_t> deadline_ms = g.deadline_ms;
  if (!deadline_ms && !req.Header("x-strata-deadline-ms").empty()) {
    std::string_view h = req.Header("x-strata-deadline-ms");
    int64_t v = 0;
    auto [end, ec] = std::from_chars(h.data(), h.data() + h.size(), v);
    if (ec != std::errc() || end != h.data() + h.size() || v < 1 || v > (int64_t{1} << 40))
      return Error(400, "x-strata-deadline-ms: must be a positive integer (milliseconds)", "x-strata-deadline-ms");
    deadline_ms = v;
  }
  if (deadline_ms) g.submit.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(*deadline_ms);
  job->prompt_tokens = static_cast<int>(g.submit.prompt.size());
  const int n = g.submit.n;
  auto tier = std::string(engine::sched::TierName(g.submit.tier));
  auto handle = engine_->Submit(g.submit);
  if (!handle.ok()) {
    HttpResponse r = FromStatus(handle.status());
    if (r.status == 429) r.headers.emplace_back("Retry-After", std::to_string(options_.retry_after_s));
    return r;
  }
  job->handle = *handle;
  job->out = out;
  job->arrival = arrival;
  job->labels = Labels({{"model_name", model_.name}, {"tier", tier}});
  job->id = fmt::format("{}-{:x}", ep == Endpoint::kChat ? "chatcmpl" : "cmpl", next_id_.fetch_add(1));
  job->choices.resize(static_cast<size_t>(n));
  for (auto& c : job->choices) {
    c.dec = std::make_unique<tokenizer::IncrementalDecoder>(*model_.tok);
    c.stop = std::make_unique<StopMatcher>(g.stop);
  }
  metrics_.Observe("strata:request_queue_time_seconds", job->labels, Seconds(arrival, std::chrono::steady_clock::now()));
  metrics_.Add("strata:prompt_tokens_total", job->labels, job->prompt_tokens);
  if (g.stream) {
    out->Begin("text/event-stream", {{"Cache-Control", "no-cache"}});
    if (ep == Endpoint::kChat) {
      json choices = json::array();
      for (int i = 0; i < n; ++i)
        choices.push_back({{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                           {"finish_reason", nullptr}});
      json chunk = {{"id", job->id}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_.name},
                    {"choices", choices}};
      out->Write("data: " + Dump(chunk) + "\n\n");
    }
  }
  std::weak_ptr<Job> weak = job;
  auto* engine = engine_;
  const auto rid = job->handle.id;
  out->OnClose([weak, engine, rid, this] {
    engine->Cancel(rid);
    if (auto j = weak.lock()) j->gone.store(true);
    cv_.notify_all();
  });
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
  HttpResponse r;
  r.status = kAsync;
  return r;
}

void Api::PumpLoop() {
  std::vector<std::shared_ptr<Job>> snapshot;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) return;
      snapshot = jobs_;
    }
    bool progressed = false;
    std::vector<Job*> done;
    for (auto& j : snapshot) {
      bool finished = Process(*j);
      if (finished) {
        done.push_back(j.get());
        progressed = true;
      }
    }
    if (!done.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      std::erase_if(jobs_, [&](const std::shared_ptr<Job>& j) {
        return std::find(done.begin(), done.end(), j.get()) != done.end();
      });
    }
    snapshot.clear();
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_) return;
    if (!progressed) cv_.wait_for(lock, std::chrono::microseconds(500));
  }
}

bool Api::Process(Job& job) {
  if (job.gone.load()) {
    metrics_.Add("strata:request_success_total",
                 Labels({{"model_name", model_.name}, {"tier", engine::sched::TierName(job.req.submit.tier)},
                         {"finished_reason", "abort"}}), 1);
    metrics_.Add("strata:http_requests_total",
                 Labels({{"model_name", model_.name},
                         {"route", job.req.endpoint == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions"},
                         {"status", "499"}}), 1);
    return true;
  }
  const bool chat = job.req.endpoint == Endpoint::kChat;
  const bool want_lp = job.req.submit.logprobs;
  while (auto ev = job.handle.stream->TryNext()) {
    if (ev->index < 0 || static_cast<size_t>(ev->index) >= job.choices.size()) continue;
    auto& c = job.choices[static_cast<size_t>(ev->index)];
    if (c.done) continue;
    if (ev->finish == FinishReason::kError) {
      job.error = true;
      job.error_message = std::string(ev->error.message());
      for (auto& x : job.choices) x.done = true;
      break;
    }
    SteadyTime now = std::chrono::steady_clock::now();
    if (ev->token >= 0) {
      ++job.completion_tokens;
      if (!job.have_first) {
        job.have_first = true;
        job.first_token = now;
        metrics_.Observe("strata:time_to_first_token_seconds", job.labels, Seconds(job.arrival, now));
      } else {
        metrics_.Observe("strata:inter_token_latency_seconds", job.labels, Seconds(job.last_token, now));
      }
      job.last_token = now;
    }
    std::string delta;
    json lp_chunk = json::array();
    if (ev->token >= 0 && ev->finish != FinishReason::kStop) {
      delta = c.stop->Push(c.dec->Push(ev->token));
      if (want_lp) {
        std::string piece = model_.tok->TokenToPiece(ev->token);
        json top = json::array();
        json top_map = json::object();
        for (const auto& t : ev->top_logprobs()) {
          std::string tp = model_.tok->TokenToPiece(t.id);
          top.push_back({{"token", tp}, {"logprob", t.logprob}, {"bytes", std::vector<uint8_t>(tp.begin(), tp.end())}});
          top_map[tp] = t.logprob;
        }
        json entry = {{"token", piece}, {"logprob", ev->logprob},
                      {"bytes", std::vector<uint8_t>(piece.begin(), piece.end())}, {"top_logprobs", top}};
        lp_chunk.push_back(entry);
        c.logprobs.push_back(entry);
        c.lp_tokens.push_back(piece);
        c.lp_values.push_back(ev->logprob);
        c.lp_top.push_back(top_map);
      }
    }
    if (c.stop->matched()) {
      c.done = true;
      c.finish = "stop";
    } else if (ev->finish != FinishReason::kNone) {
      delta += c.stop->Push(c.dec->Flush());
      if (!c.stop->matched()) delta += c.stop->Flush();
      c.done = true;
      c.finish = c.stop->matched() || ev->finish == FinishReason::kStop ? "stop"
                 : ev->finish == FinishReason::kLength                 ? "length"
                                                                       : "abort";
    }
    if (job.req.stream) {
      if (delta.empty() && !c.done && lp_chunk.empty()) continue;
      json lp = nullptr;
      if (want_lp && !lp_chunk.empty()) {
        if (chat) {
          lp = {{"content", lp_chunk}};
        } else {
          json tops = json::array();
          for (auto& e : lp_chunk) {
            json m = json::object();
            for (auto& t : e["top_logprobs"]) m[t["token"].get<std::string>()] = t["logprob"];
            tops.push_back(m);
          }
          lp = {{"tokens", json::array({lp_chunk[0]["token"]})}, {"token_logprobs", json::array({lp_chunk[0]["logprob"]})},
                {"top_logprobs", tops}, {"text_offset", json::array({c.text.size()})}};
        }
      }
      c.text += delta;
      json choice = {{"index", ev->index}, {"logprobs", lp}, {"finish_reason", c.done ? json(c.finish) : json(nullptr)}};
      if (chat) choice["delta"] = delta.empty() ? json::object() : json{{"content", delta}};
      else choice["text"] = delta;
      json chunk = {{"id", job.id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
                    {"model", model_.name}, {"choices", json::array({choice})}};
      job.out->Write("data: " + Dump(chunk) + "\n\n");
    } else {
      c.text += delta;
    }
  }
  for (const auto& c : job.choices)
    if (!c.done) return false;
  engine_->Cancel(job.handle.id);  // no-op when the engine already finished it (stop strings end early)
  Finish(job);
  return true;
}

void Api::Finish(Job& job) {
  const bool chat = job.req.endpoint == Endpoint::kChat;
  SteadyTime now = std::chrono::steady_clock::now();
  json usage = {{"prompt_tokens", job.prompt_tokens}, {"completion_tokens", job.completion_tokens},
                {"total_tokens", job.prompt_tokens + job.completion_tokens}};
  std::string route = chat ? "/v1/chat/completions" : "/v1/completions";
  const int status = !job.req.stream && job.error ? 500 : 200;
  // Counted before the response goes out, so a client that reads /metrics after its response
  // always sees its request.
  std::string reason = job.error ? "error" : job.choices.empty() ? "stop" : job.choices[0].finish;
  metrics_.Add("strata:request_success_total",
               Labels({{"model_name", model_.name}, {"tier", engine::sched::TierName(job.req.submit.tier)},
                       {"finished_reason", reason}}), 1);
  metrics_.Add("strata:http_requests_total",
               Labels({{"model_name", model_.name}, {"route", route}, {"status", std::to_string(status)}}), 1);
  metrics_.Observe("strata:e2e_request_latency_seconds", job.labels, Seconds(job.arrival, now));
  metrics_.Observe("strata:request_prompt_tokens", job.labels, job.prompt_tokens);
  metrics_.Observe("strata:request_generation_tokens", job.labels, job.completion_tokens);
  metrics_.Add("strata:generation_tokens_total", job.labels, job.completion_tokens);
  if (job.req.stream) {
    if (job.error) {
      job.out->Write("data: " + ErrorBody(job.error_message, "server_error", "", "engine_error") + "\n\n");
    } else if (job.req.include_usage) {
      json chunk = {{"id", job.id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
                    {"model", model_.name}, {"choices", json::array()}, {"usage", usage}};
      job.out->Write("data: " + Dump(chunk) + "\n\n");
    }
    job.out->Write("data: [DONE]\n\n");
    job.out->End();
  } else if (job.error) {
    job.out->Respond(Error(500, "engine error: " + job.error_message));
  } else {
    json choices = json::array();
    for (size_t i = 0; i < job.choices.size(); ++i) {
      auto& c = job.choices[i];
      json lp = nullptr;
      if (job.req.submit.logprobs) {
        if (chat) {
          lp = {{"content", c.logprobs}};
        } else {
          std::vector<size_t> offsets;
          size_t off = 0;
          for (auto& t : c.lp_tokens) {
            offsets.push_back(off);
            off += t.size();
          }
          lp = {{"tokens", c.lp_tokens}, {"token_logprobs", c.lp_values}, {"top_logprobs", c.lp_top}, {"text_offset", offsets}};
        }
      }
      json choice = {{"index", i}, {"logprobs", lp}, {"finish_reason", c.finish}};
      if (chat) choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      else choice["text"] = c.text;
      choices.push_back(choice);
    }
    json resp = {{"id", job.id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created_},
                 {"model", model_.name}, {"choices", choices}, {"usage", usage}};
    job.out->Respond(JsonResponse(200, resp));
  }
}

void Api::RefreshEngineGauges() {
  auto s = engine_->Stats();
  metrics_.Set("strata:num_requests_running", model_labels_, s.running_requests);
  metrics_.Set("strata:num_requests_waiting", model_labels_, s.waiting_requests);
  metrics_.Set("strata:kv_cache_usage_perc", model_labels_, s.kv_usage);
  metrics_.Set("strata:prefix_cache_queries_total", model_labels_, static_cast<double>(s.prefix_query_tokens));
  metrics_.Set("strata:prefix_cache_hits_total", model_labels_, static_cast<double>(s.prefix_hit_tokens));
  metrics_.Set("strata:num_preemptions_total", model_labels_, static_cast<double>(s.preemptions));
  if (!options_.tier_stats) return;
  auto ts = options_.tier_stats();
  if (!ts) return;
  metrics_.Set("strata:kv_tier_hit_tokens_total", model_labels_, static_cast<double>(s.tier_hit_tokens));
  metrics_.Set("strata:kv_tier_prefetch_timeouts_total", model_labels_, static_cast<double>(s.tier_prefetch_timeouts));
  metrics_.Set("strata:kv_tier_queue_drops_total", model_labels_, static_cast<double>(ts->queue_drops));
  metrics_.Set("strata:kv_tier_queued_writes", model_labels_, static_cast<double>(ts->queued_writes));
  for (const engine::kvtier::TierStats* t : {&ts->ram, &ts->disk, &ts->redis}) {
    if (!t->enabled) continue;
    const std::string l = Labels({{"model_name", model_.name}, {"kv_tier", t->name}});
    metrics_.Set("strata:kv_tier_hits_total", l, static_cast<double>(t->hits));
    metrics_.Set("strata:kv_tier_misses_total", l, static_cast<double>(t->misses));
    metrics_.Set("strata:kv_tier_bytes_in_total", l, static_cast<double>(t->bytes_in));
    metrics_.Set("strata:kv_tier_bytes_out_total", l, static_cast<double>(t->bytes_out));
    metrics_.Set("strata:kv_tier_evictions_total", l, static_cast<double>(t->evictions));
    metrics_.Set("strata:kv_tier_expirations_total", l, static_cast<double>(t->expirations));
    metrics_.Set("strata:kv_tier_corrupt_total", l, static_cast<double>(t->corrupt));
    metrics_.Set("strata:kv_tier_errors_total", l, static_cast<double>(t->errors));
    metrics_.Set("strata:kv_tier_entries", l, static_cast<double>(t->entries));
    metrics_.Set("strata:kv_tier_bytes_used", l, static_cast<double>(t->bytes_used));
    metrics_.Set("strata:kv_tier_read_seconds_mean", l, t->read_ops ? t->read_seconds_total / static_cast<double>(t->read_ops) : 0.0);
    metrics_.Set("strata:kv_tier_write_seconds_mean", l, t->write_ops ? t->write_seconds_total / static_cast<double>(t->write_ops) : 0.0);
  }
}

}  // namespace strata::server
