// gateway_models: the gateway's `GET /v1/models` — the union by `id` of the models its pools'
// replicas list, each object with `strata_pool` added; one eligible replica per pool is asked on
// every Refresh (the ticker's, every 2 s).
//
// Ownership: points at the Gateway's RequestServices (its Upstreams), which outlive it.
// Thread contract: Answer() from any thread; Refresh() from any thread, the asking runs on the
// upstream thread; the last union is guarded by a mutex.
// Errors: none — a replica that fails or answers something else is skipped.
#pragma once

#include <memory>
#include <string>

#include "base/mutex.h"
#include "gateway/gateway_services.h"
#include "http/server.h"

namespace strata::gateway {

class ModelsList {
 public:
  explicit ModelsList(RequestServices* sv) : sv_(sv) {}

  // The last union ({"object":"list","data":[]} before the first).
  http::HttpResponse Answer() const;
  // Asks one eligible replica of every pool of `snap` for its models and keeps the union.
  void Refresh(std::shared_ptr<const Snapshot> snap);

 private:
  RequestServices* sv_;
  mutable Mutex mu_;
  std::string body_ GUARDED_BY(mu_);
};

}  // namespace strata::gateway
