// EmbeddingRoute: POST /v1/embeddings — the body read and checked on the I/O thread (inputs
// tokenized, lengths checked, the adapter resolved), every input submitted to EmbeddingJobs
// (embeddings.h), and the OpenAI response rendered on its worker thread when the engine has
// computed them all. 501 when the engine's runner has no hidden-state output.
//
// Ownership: borrows the ApiContext and the LoraRoutes (adapter lookup and counting); owns the
// EmbeddingJobs, whose destructor joins its worker and cancels the embeddings in flight.
// Thread contract: Handle on any I/O thread, several at once; the answer is sent from
// EmbeddingJobs' worker.
#pragma once

#include <memory>

#include "http/chain.h"
#include "server/api_context.h"
#include "server/embeddings.h"
#include "server/lora_routes.h"

namespace strata::server {

class EmbeddingRoute {
 public:
  EmbeddingRoute(ApiContext* ctx, LoraRoutes* lora);

  http::HttpResponse Handle(http::Exchange& ex);
  // /v1/embeddings requests submitted and not yet answered.
  int live() const { return jobs_ ? jobs_->live() : 0; }

 private:
  ApiContext* ctx_;
  LoraRoutes* lora_;
  std::unique_ptr<EmbeddingJobs> jobs_;  // null: the runner has no hidden-state output
};

}  // namespace strata::server
