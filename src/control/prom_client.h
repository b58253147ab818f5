// control/prom_client: a client of the Prometheus HTTP API's instant query
// (`GET /api/v1/query?query=...`), on http/client.h.
//
// Query() answers an instant vector as samples (labels + value) — a scalar result is one sample
// without labels; QueryBy() reduces it to `label value -> sample value` (samples without the
// label are dropped; NaN values are kept, the caller decides).
// Errors: Unavailable for transport failures (connection refused, timeout), InvalidArgument for
// Prometheus's own errors (status "error": a bad expression; its errorType and error text are in
// the message) and for a malformed answer. Never throws.
// Ownership: a PromClient owns nothing but the parsed URL; each call runs its own io_context.
// Thread contract: Query may be called from any one thread at a time per client (it blocks up to
// `timeout`); different clients are independent.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "http/client.h"

namespace strata::control {

struct PromSample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The body of an /api/v1/query answer -> samples (vector or scalar results).
Result<std::vector<PromSample>> ParseQueryResponse(std::string_view body);
// Percent-encoding of a query-string value (RFC 3986 unreserved characters kept).
std::string UrlEncode(std::string_view s);

class PromClient {
 public:
  // `url`: http://host:port[/prefix] of the Prometheus server.
  static Result<PromClient> Create(std::string_view url);

  Result<std::vector<PromSample>> Query(
      std::string_view expr, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  Result<std::map<std::string, double>> QueryBy(
      std::string_view expr, std::string_view label,
      std::chrono::milliseconds timeout = std::chrono::seconds(5));
  const http::Url& url() const { return url_; }

 private:
  explicit PromClient(http::Url url) : url_(std::move(url)) {}
  http::Url url_;
};

}  // namespace strata::control
