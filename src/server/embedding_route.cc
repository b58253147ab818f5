// EmbeddingRoute (embedding_route.h): /v1/embeddings over EmbeddingJobs.
#include "server/embedding_route.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "http/json_fields.h"
#include "http/openai_error.h"
#include "server/api_internal.h"

namespace strata::server {

using http::Exchange;
using http::HttpResponse;
using nlohmann::json;

namespace {

std::string Base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8) |
                 static_cast<uint8_t>(in[i + 2]);
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

// At most this many inputs in one /v1/embeddings request (OpenAI allows 2048; each input is one
// engine request, so the cap bounds one request's share of the queue).
constexpr size_t kMaxEmbeddingInputs = 256;

// The token lists of an /v1/embeddings `input`: a string, an array of token ids, or an array of
// at most kMaxEmbeddingInputs strings and/or token-id arrays.
http::ApiResult<std::vector<std::vector<int32_t>>> EmbeddingInputs(
    const json& in, const tokenizer::Tokenizer& tok) {
  std::vector<std::vector<int32_t>> inputs;
  constexpr std::string_view kShape =
      "must be a string, an array of token ids, or an array of strings or token-id arrays";
  if (in.is_string()) {
    ASSIGN_OR_RETURN_API(std::string text, http::AsString(in, "input"));
    inputs.push_back(tok.Encode(text, true, true));
    return inputs;
  }
  if (!in.is_array() || in.empty()) return http::ApiError::Param("input", kShape);
  if (in.front().is_number()) {  // one input as token ids
    ASSIGN_OR_RETURN_API(auto ids, http::TokenIds(in, "input", tok.n_vocab()));
    inputs.push_back(std::move(ids));
    return inputs;
  }
  if (in.size() > kMaxEmbeddingInputs)
    return http::ApiError::Param("input", fmt::format("at most {} inputs per request, got {}",
                                                      kMaxEmbeddingInputs, in.size()));
  inputs.reserve(in.size());
  for (const json& e : in) {
    if (e.is_string()) {
      ASSIGN_OR_RETURN_API(std::string text, http::AsString(e, "input"));
      inputs.push_back(tok.Encode(text, true, true));
    } else if (e.is_array()) {
      ASSIGN_OR_RETURN_API(auto ids, http::TokenIds(e, "input", tok.n_vocab()));
      inputs.push_back(std::move(ids));
    } else {
      return http::ApiError::Param("input", kShape);
    }
  }
  return inputs;
}

// The fields /v1/embeddings reads; any other is refused by name (never ignored silently).
constexpr std::string_view kEmbeddingFields[] = {"input",      "model", "encoding_format",
                                                 "dimensions", "user",  "lora"};

http::ApiError RejectUnknownFields(const json& body, std::span<const std::string_view> known) {
  for (const auto& [key, value] : body.items()) {
    bool ok = false;
    for (std::string_view k : known) ok |= key == k;
    if (!ok) return http::ApiError::Param(key.substr(0, 64), "is not supported by this server");
  }
  return {};
}

// OpenAI's `dimensions` for the v3 models: keep the first `dims` components, L2-renormalised. A
// vector no longer than `dims` is left as the engine made it (bit for bit).
void ShortenEmbedding(std::vector<float>* v, size_t dims) {
  if (v->size() <= dims) return;
  v->resize(dims);
  double sum = 0;
  for (float x : *v) sum += static_cast<double>(x) * x;
  if (sum <= 0) return;
  const double inv = 1.0 / std::sqrt(sum);
  for (float& x : *v) x = static_cast<float>(x * inv);
}

HttpResponse EmbeddingResponse(const std::vector<std::vector<float>>& vectors, bool base64,
                               int64_t total, const std::string& model) {
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    const std::vector<float>& e = vectors[i];
    if (base64) {
      std::string raw(e.size() * sizeof(float), '\0');
      std::memcpy(raw.data(), e.data(), raw.size());  // little-endian float32, as OpenAI sends it
      data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", Base64(raw)}});
    } else {
      data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", e}});
    }
  }
  return JsonResponse(200, {{"object", "list"},
                            {"data", data},
                            {"model", model},
                            {"usage", {{"prompt_tokens", total}, {"total_tokens", total}}}});
}

}  // namespace

EmbeddingRoute::EmbeddingRoute(ApiContext* ctx, LoraRoutes* lora) : ctx_(ctx), lora_(lora) {
  if (ctx_->engine->hidden_dim() > 0) jobs_ = std::make_unique<EmbeddingJobs>(ctx_->engine);
}

HttpResponse EmbeddingRoute::Handle(Exchange& ex) {
  if (!jobs_) return Error(501, "embeddings are not available for this model");
  const http::Fields f(ex.body);
  RETURN_IF_API_ERROR_RESPONSE(RejectUnknownFields(ex.body, kEmbeddingFields));
  RETURN_IF_API_ERROR_RESPONSE(f.Required("input"));
  static constexpr std::string_view kFormats[] = {"float", "base64"};
  std::string format = "float", user;
  int64_t dims = ctx_->engine->hidden_dim();
  RETURN_IF_API_ERROR_RESPONSE(f.Enum("encoding_format", kFormats, &format));
  RETURN_IF_API_ERROR_RESPONSE(f.Int("dimensions", 1, ctx_->engine->hidden_dim(), &dims));
  RETURN_IF_API_ERROR_RESPONSE(f.String("user", &user));  // accepted and ignored, as documented
  const bool base64 = format == "base64";
  std::shared_ptr<const lora::Adapter> adapter;
  if (auto bad = lora_->ResolveAdapter(ex.body, &adapter)) return std::move(*bad);
  auto inputs = EmbeddingInputs(*f.Find("input"), *ctx_->model.tok);
  if (!inputs.ok()) return http::ErrorResponse(inputs.error());
  int64_t total = 0;
  for (size_t i = 0; i < inputs->size(); ++i) {
    const std::vector<int32_t>& tokens = (*inputs)[i];
    if (tokens.empty()) return Error(400, "input: an input is empty", "input");
    if (static_cast<int64_t>(tokens.size()) > ctx_->model.max_model_len)
      return Error(400,
                   fmt::format("input: input {} has {} tokens, more than the context size of {}", i,
                               tokens.size(), ctx_->model.max_model_len),
                   "input");
    total += static_cast<int64_t>(tokens.size());
  }
  // Answered by EmbeddingJobs' worker once the engine has computed every input.
  std::shared_ptr<http::Responder> out = ex.out;
  const std::string model_name = adapter ? adapter->name() : ctx_->model.name;
  auto done = [this, out, base64, total, dims, model_name](EmbeddingResult result) {
    ctx_->RespondFromWorker(out, "/v1/embeddings", [&] {
      for (auto& v : result.vectors) ShortenEmbedding(&v, static_cast<size_t>(dims));
      return result.status.ok() ? EmbeddingResponse(result.vectors, base64, total, model_name)
                                : FromEngineStatus(result.status);
    });
  };
  Status s = jobs_->Submit(std::move(*inputs), engine::sched::Priority::kSilver, out,
                           std::move(done), adapter);
  if (!s.ok()) {
    HttpResponse r = FromEngineStatus(s);
    ctx_->AddRetryAfter(r);
    return r;
  }
  if (adapter) lora_->CountRequest(*adapter);
  HttpResponse r;
  r.status = http::kDeferred;
  return r;
}

}  // namespace strata::server
