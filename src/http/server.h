// HttpServer: a small asynchronous HTTP/1.1 server on Boost.Asio/Beast for `strata serve`.
//
// Shape: one acceptor and a fixed pool of I/O threads running one io_context; each connection is a
// Session bound to its own strand (no thread per connection). A connection serves one request at a
// time (keep-alive; pipelined bytes are buffered and served after the current response).
// Limits: header bytes (431), body bytes (413), idle keep-alive timeout (time to the first byte of
// a request's header), read timeout (the rest of the request). Both close the connection.
// Responses: a handler receives the parsed request and a Responder. It answers exactly once, either
// with Respond() (a complete response) or with Begin() + any number of Write() + End() (a chunked
// stream, used for SSE). The Responder may be used from any thread; calls are posted to the
// connection's strand. If the client goes away before the response ended, the callback set with
// OnClose() runs once (from an I/O thread) — that is how a disconnect becomes a cancellation.
// Post() runs work on an I/O thread, on the response's own strand: a producer on another thread
// (the engine) wakes the I/O side with it; that work is serialized, but kept out of the
// connection's strand so it never delays noticing a disconnect.
//
// Last-resort guard: an exception that escapes the handler, Post()ed work or any other I/O-thread
// callback never ends the process. The request is answered 500 with the OpenAI error body (a
// stream that already started is ended and its connection closed), the route (method and path,
// never the body) is logged to stderr, `on_internal_error` is told, and the connection and the
// server keep serving. It should never fire: handlers turn bad input into 4xx values.
//
// Ownership: HttpServer owns its threads and sessions; the handler must outlive Stop().
// Thread contract: Start/Stop/StopAccepting from one controlling thread; the handler is called
// concurrently from the I/O threads and must be thread-safe.
// Errors: Start returns InvalidArgument for a bad address and IoError when bind/listen fails.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace strata::http {

struct HttpRequest {
  std::string method;                                        // "GET", "POST", ...
  std::string path;                                          // target without the query string
  std::string query;                                         // after '?', may be empty
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  std::string peer;  // "ip:port"

  // First header with this (lower-case) name, or "" when absent.
  std::string_view Header(std::string_view lower_name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  std::string body;
};

class Responder {
 public:
  virtual ~Responder() = default;
  // A complete response. Ignored after the response has started.
  virtual void Respond(HttpResponse r) = 0;
  // Starts a chunked response (status 200 + these headers), then chunks, then the end.
  virtual void Begin(std::string content_type,
                     std::vector<std::pair<std::string, std::string>> headers) = 0;
  virtual void Write(std::string chunk) = 0;
  virtual void End() = 0;
  // `cb` runs once if the client disconnects before the response has been fully written.
  // Set it before starting long work; if the client is already gone it runs immediately.
  virtual void OnClose(std::function<void()> cb) = 0;
  // Whether the client is known to be gone.
  virtual bool closed() const = 0;
  // Runs `fn` on an I/O thread, on this response's own strand: Post()ed work runs one at a time,
  // in order, but not in the connection's strand, so it never delays the connection's socket I/O
  // (a disconnect is noticed, and OnClose runs, while posted work is busy). Responder calls made
  // from it keep their order. Never inline; never after the server stopped.
  virtual void Post(std::function<void()> fn) = 0;
};

using Handler = std::function<void(HttpRequest req, std::shared_ptr<Responder> out)>;
// Told (on an I/O thread) when the last-resort guard caught an exception: the request's method and
// path ("" for a callback not tied to a request) and the exception's message. Must be thread-safe
// and must not throw.
using InternalErrorObserver =
    std::function<void(std::string_view method, std::string_view path, std::string_view what)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: pick a free port (see HttpServer::port())
  int io_threads = 2;
  uint64_t max_body_bytes = 4u << 20;             // 413 above
  uint32_t max_header_bytes = 16 << 10;           // 431 above
  std::chrono::milliseconds idle_timeout{60000};  // keep-alive: waiting for a request to start
  std::chrono::milliseconds read_timeout{30000};  // reading one request after it started
  int max_connections = 4096;                     // further connections are closed at once
  InternalErrorObserver on_internal_error;        // may be empty
};

// Parses one complete request from `bytes` with the server's limits (what a Session does with the
// bytes of a connection). InvalidArgument for malformed or incomplete input, OutOfRange for the
// header (431) or body (413) limits. For tests and the fuzz target.
Result<HttpRequest> ParseHttpRequest(std::string_view bytes, const HttpServerOptions& options);

class HttpServer {
 public:
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                   Handler handler);
  ~HttpServer();  // Stop()

  uint16_t port() const { return port_; }
  const std::string& host() const { return options_.host; }
  // Stops accepting new connections (existing ones continue).
  void StopAccepting();
  // Closes every connection and joins the I/O threads. Idempotent.
  void Stop();
  // Connections currently open / responses currently in progress (a handler was called and has not
  // finished writing).
  int open_connections() const { return open_connections_.load(); }
  int active_responses() const { return active_responses_.load(); }

  struct Impl;

 private:
  friend class Session;
  HttpServer() = default;
  HttpServerOptions options_;
  uint16_t port_ = 0;
  std::unique_ptr<Impl> impl_;
  std::atomic<int> open_connections_{0};
  std::atomic<int> active_responses_{0};
};

}  // namespace strata::http
