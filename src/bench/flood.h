// Flood: a bounded storm of invalid requests against a live server (`strata bench flood`), to
// show that no input takes it down: malformed JSON, wrong field types, bad routes and methods,
// huge headers and bodies, truncated bodies, malformed HTTP, bad auth, deep nesting, values out
// of range — each drawn at random (seeded) and sent over several keep-alive connections on
// blocking sockets (127.0.0.1 only by intent; any host is accepted).
//
// A request either gets a response (counted by status class) or, for the kinds where the server
// may close instead of answering (malformed HTTP, a body cut short), a close. Anything else is a
// failure: a 5xx, no answer within the timeout, a close where an answer was due, a failed connect,
// or the server process gone (with server_pid). The server's RSS is read from /proc before and
// after.
//
// Thread contract: RunFlood blocks; it runs `connections` threads internally.
// Errors: InvalidArgument for bad options; IoError when the first connection cannot be made.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace strata::bench {

struct FloodOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t requests = 1000000;
  int connections = 8;
  uint64_t seed = 1;
  double timeout_s = 30;  // per response
  int server_pid = 0;     // > 0: read its RSS before/after and check it is alive at the end
};

struct FloodReport {
  int64_t requests = 0;
  std::array<int64_t, 6> by_class{};    // [1..5]: 1xx..5xx responses; [0] unused
  int64_t closed_without_response = 0;  // allowed for malformed HTTP / cut bodies
  int64_t unexpected_closes = 0;        // a close where a response was due
  int64_t timeouts = 0;
  int64_t connect_errors = 0;
  int64_t reconnects = 0;
  double wall_s = 0;
  int64_t rss_before_kib = -1, rss_after_kib = -1;  // -1: no server_pid or unreadable
  bool server_alive = true;
  // Whether the run showed no 5xx, no timeout, no unexpected close or connect error and a live
  // server.
  bool ok() const;
};

Result<FloodReport> RunFlood(const FloodOptions& options);
std::string FormatFloodReport(const FloodReport& r);
// VmRSS of a process in KiB, -1 when unreadable.
int64_t ProcessRssKib(int pid);

}  // namespace strata::bench
