// InfoRoutes (info_routes.h): health, readiness, the model list, the KV block events, and the
// tokenizer and chat-template routes.
#include "server/info_routes.h"

#include <string>
#include <vector>

#include "http/json_fields.h"
#include "http/openai_error.h"
#include "server/api_internal.h"
#include "server/kv_events.h"
#include "tokenizer/utf8.h"

namespace strata::server {

using http::Exchange;
using http::HttpResponse;
using nlohmann::json;

InfoRoutes::InfoRoutes(const ApiContext* ctx, const http::Readiness* readiness)
    : ctx_(ctx), readiness_(readiness) {}

HttpResponse InfoRoutes::Health(Exchange&) { return JsonResponse(200, {{"status", "ok"}}); }

HttpResponse InfoRoutes::Ready(Exchange&) { return readiness_->Probe(); }

// The block events a gateway polls (kv_events.h): no readiness needed, read under the log's short
// lock, formatted here.
HttpResponse InfoRoutes::KvEvents(Exchange& ex) {
  auto q = ParseKvEventsQuery(ex.request.query);
  if (!q.ok()) return http::ErrorResponse(q.error());
  const engine::kv::KvEventLog& log = ctx_->engine->kv_events();
  const engine::kv::KvEventPage page = log.Read(q->since, q->max);
  return OrderedJsonResponse(200, KvEventsJson(page, {log.instance(), ctx_->engine->block_size(),
                                                      ctx_->engine->model_salt()}));
}

json InfoRoutes::ModelObject() const {
  return {{"id", ctx_->model.name},
          {"object", "model"},
          {"created", ctx_->created},
          {"owned_by", "strata"},
          {"max_model_len", ctx_->model.max_model_len}};
}

// A LoRA adapter as vLLM lists it: its parent is the base model, its root the adapter's file.
json InfoRoutes::AdapterObject(const lora::AdapterInfo& a) const {
  return {{"id", a.name},
          {"object", "model"},
          {"created", ctx_->created},
          {"owned_by", "strata"},
          {"root", a.path},
          {"parent", ctx_->model.name},
          {"max_model_len", ctx_->model.max_model_len}};
}

HttpResponse InfoRoutes::Models(Exchange&) {
  json data = json::array({ModelObject()});
  if (ctx_->options.adapters)
    for (const lora::AdapterInfo& a : ctx_->options.adapters->List())
      data.push_back(AdapterObject(a));
  return JsonResponse(200, {{"object", "list"}, {"data", std::move(data)}});
}

HttpResponse InfoRoutes::Model(Exchange& ex) {
  std::string id = ex.request.path.substr(ex.route->path.size());
  if (id == ctx_->model.name) return JsonResponse(200, ModelObject());
  if (ctx_->options.adapters)
    for (const lora::AdapterInfo& a : ctx_->options.adapters->List())
      if (a.name == id) return JsonResponse(200, AdapterObject(a));
  return ModelNotFound(id, "model", ctx_->model.name);
}

// As llama.cpp's server: `content` (or `prompt`), add_special false, parse_special true,
// with_pieces false; a piece that is not valid UTF-8 is given as its bytes (an array of integers).
HttpResponse InfoRoutes::Tokenize(Exchange& ex) {
  const http::Fields f(ex.body);
  std::string text;
  const char* key = f.Has("content") ? "content" : "prompt";
  if (!f.Has(key)) return http::ErrorResponse(f.Error("content", "is required"));
  bool add_special = false, parse_special = true, with_pieces = false;
  for (const http::ApiError& e :
       {f.String(key, &text), f.Bool("add_special", &add_special),
        f.Bool("parse_special", &parse_special), f.Bool("with_pieces", &with_pieces)})
    if (!e.ok()) return http::ErrorResponse(e);
  auto ids = ctx_->model.tok->Encode(text, add_special, parse_special);
  json j = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx_->model.max_model_len}};
  if (with_pieces) {
    json pieces = json::array();
    for (int32_t id : ids) {
      std::string piece = ctx_->model.tok->TokenToPiece(id, true);
      json p = tokenizer::IsValidUtf8(piece) ? json(piece) : json::array();
      if (!p.is_string())
        for (char c : piece) p.push_back(static_cast<unsigned char>(c));
      pieces.push_back({{"id", id}, {"piece", std::move(p)}});
    }
    j["tokens"] = std::move(pieces);
  }
  return JsonResponse(200, j);
}

// As llama.cpp's server: `tokens` (ids in the vocabulary) -> {"content": text}; also "prompt".
HttpResponse InfoRoutes::Detokenize(Exchange& ex) {
  const http::Fields f(ex.body);
  const json* tokens = nullptr;
  RETURN_IF_API_ERROR_RESPONSE(f.Required("tokens"));
  RETURN_IF_API_ERROR_RESPONSE(f.Array("tokens", &tokens));
  auto ids = http::TokenIds(*tokens, "tokens", ctx_->model.tok->n_vocab());
  if (!ids.ok()) return http::ErrorResponse(ids.error());
  std::string text = ctx_->model.tok->Decode(*ids);
  return JsonResponse(200, {{"content", text}, {"prompt", text}});
}

// `messages`, `add_generation_prompt` (default true) and `chat_template_kwargs` (an object),
// validated as chat validates them.
HttpResponse InfoRoutes::ApplyTemplate(Exchange& ex) {
  const http::Fields f(ex.body);
  RETURN_IF_API_ERROR_RESPONSE(f.Required("messages"));
  bool add_gen = true;
  const json* kwargs = nullptr;
  RETURN_IF_API_ERROR_RESPONSE(f.Bool("add_generation_prompt", &add_gen));
  RETURN_IF_API_ERROR_RESPONSE(f.Object("chat_template_kwargs", &kwargs));
  auto text = ApplyChatTemplate(*f.Find("messages"), add_gen, ctx_->model,
                                kwargs ? *kwargs : json(nullptr));
  if (!text.ok()) return http::ErrorResponse(text.error());
  return JsonResponse(200, {{"prompt", *text}});
}

}  // namespace strata::server
