// control/fetch: one blocking HTTP request (a readiness probe, the status endpoint, a metrics
// scrape) on http/client.h, run on its own short-lived io_context — for the supervisor's polling
// thread and the `strata status` command, where a coroutine per call is not worth the plumbing.
//
// Thread contract: FetchHttp is reentrant (no shared state); it blocks the calling thread until
// the answer or the timeout.
// Errors: transport failures (refused, timeout, malformed) are the Result's status; any HTTP
// status, 4xx/5xx included, is a FetchReply.
#pragma once

#include <chrono>
#include <string>

#include "base/status.h"

namespace strata::control {

struct FetchReply {
  int status = 0;
  std::string body;  // 2xx: the body; otherwise the first 4 KiB of it
};

// `url` is http://host:port[/prefix]; `path` is appended. A non-empty body is sent as JSON; a
// non-empty `bearer` as `Authorization: Bearer <bearer>` (the gateway's admin API).
Result<FetchReply> FetchHttp(const std::string& method, const std::string& url,
                             const std::string& path, std::chrono::milliseconds timeout,
                             const std::string& body = "", const std::string& bearer = "");

}  // namespace strata::control
