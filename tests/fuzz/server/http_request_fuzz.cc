// Fuzz target: bytes of one HTTP request -> http::ParseHttpRequest with the server's default
// limits, then the route/auth-relevant accessors. Must never crash or hang; errors are fine.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "http/server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::http::HttpServerOptions opt;
  opt.max_body_bytes = 1 << 16;
  opt.max_header_bytes = 8 << 10;
  auto r = strata::http::ParseHttpRequest(
      std::string_view(reinterpret_cast<const char*>(data), size), opt);
  if (r.ok()) {
    volatile size_t sink = r->path.size() + r->body.size() + r->Header("authorization").size() +
                           r->Header("x-strata-tier").size();
    (void)sink;
  }
  return 0;
}
