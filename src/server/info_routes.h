// InfoRoutes: the routes that answer from the replica's state without the engine's work —
// GET /health, /ready, /v1/models, /v1/models/{id}, /v1/kv/events and POST /tokenize,
// /detokenize, /apply-template.
//
// Ownership: borrows the ApiContext and the Api's Readiness.
// Thread contract: every handler runs on an I/O thread, several at once; they read immutable state
// or thread-safe objects (Readiness, the adapter store, the engine's KV event log) only.
#pragma once

#include <nlohmann/json.hpp>

#include "http/chain.h"
#include "server/api_context.h"
#include "server/lora_adapters.h"

namespace strata::server {

class InfoRoutes {
 public:
  InfoRoutes(const ApiContext* ctx, const http::Readiness* readiness);

  http::HttpResponse Health(http::Exchange& ex);
  http::HttpResponse Ready(http::Exchange& ex);
  http::HttpResponse KvEvents(http::Exchange& ex);
  http::HttpResponse Models(http::Exchange& ex);
  http::HttpResponse Model(http::Exchange& ex);
  http::HttpResponse Tokenize(http::Exchange& ex);
  http::HttpResponse Detokenize(http::Exchange& ex);
  http::HttpResponse ApplyTemplate(http::Exchange& ex);

 private:
  nlohmann::json ModelObject() const;
  nlohmann::json AdapterObject(const lora::AdapterInfo& a) const;

  const ApiContext* ctx_;
  const http::Readiness* readiness_;
};

}  // namespace strata::server
