// Fuzz target: one request through the real route handler (server::Api over the FakeModelRunner
// engine, route_harness.h). The input is "METHOD PATH\n" followed by the body (the corpus files in
// route_corpus/ are readable that way). Every answer must be 2xx or 4xx: a 5xx or no answer
// (a hang) aborts, which is the finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "route_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* h = new strata::fuzz::RouteHarness();  // never destroyed: lives for the process
  if (size > (1 << 20)) return 0;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t nl = in.find('\n');
  std::string_view head = in.substr(0, nl);
  std::string body(nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1));
  size_t sp = head.find(' ');
  std::string method(head.substr(0, sp));
  std::string path(sp == std::string_view::npos ? "/" : head.substr(sp + 1));
  if (path.empty() || path[0] != '/') path = "/" + path;
  std::string response;
  int status = h->Send(method, path, std::move(body), &response);
  if (status == 0 || status >= 500) {
    std::fprintf(stderr, "route_fuzz: %s %s answered %d: %.300s\n", method.c_str(), path.c_str(),
                 status, response.c_str());
    std::abort();
  }
  return 0;
}
