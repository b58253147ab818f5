// A small asynchronous HTTP/1.1 client for the load generator (Boost.Asio/Beast, C++20 coroutines).
//
// Shape: every request is a coroutine on the caller's io_context (one thread runs it; nothing here
// is thread-safe). Connections are kept alive and reused from an idle pool, so the number of open
// sockets never exceeds the number of requests in flight. A request that fails on a reused
// connection before any response byte arrived (the server closed it while idle) is retried once on
// a fresh connection.
// Streaming: the response body (chunked or not) is handed to `on_body` as it arrives, in pieces of
// any size; SSE framing is the caller's job (http/sse.h).
// Timeouts: every operation of a request runs under one deadline; past it the socket is closed and
// the request fails with "timeout".
// Errors: never thrown; HttpResult.status holds the first transport error (connection refused,
// timeout, malformed response); HTTP 4xx/5xx are a successful transport with `http_status` set.
// Only plain http:// URLs are supported (no TLS).
// Proxying (RequestOptions, used by the gateway): extra request headers; `on_head` sees the status
// and the response headers before any body byte; `deliver_error_body` hands non-2xx bodies to
// `on_body` too; a RequestAbort closes the request's socket at once, at any stage (connecting,
// waiting for the response header, reading the body), and the request fails with `aborted` set.
#pragma once

// clang-format off
#include <utility>  // std::exchange, used by Boost 1.74's awaitable.hpp: must come before it
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata::http {

struct Url {
  std::string host;
  std::string port = "80";
  std::string path_prefix;  // "" or "/something" (no trailing slash)
  std::string ToString() const;
};
// Parses http://host[:port][/prefix]. InvalidArgument for other schemes or malformed URLs.
Result<Url> ParseUrl(std::string_view url);

struct HttpResult {
  Status status;           // transport result
  int http_status = 0;     // 0 when no response header arrived
  std::string error_body;  // the first 4 KiB of a non-2xx body (unless delivered to on_body)
  bool aborted = false;    // the request was ended by RequestAbort::Abort()
};

// The status line and headers of a response, handed to RequestOptions::on_head before the body.
struct ResponseHead {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in wire order
  bool chunked = false;                                      // Transfer-Encoding: chunked
  std::optional<uint64_t> content_length;                    // absent: chunked or until EOF
  // First header with this (lower-case) name, or "" when absent.
  std::string_view Header(std::string_view lower_name) const;
};

// Ends one request from outside the coroutine that runs it. Thread contract: the client's (call
// Abort() on the client's io_context thread; post to it from elsewhere). Reusable by one request.
class RequestAbort {
 public:
  // Closes the request's socket now (pending reads/writes/connects complete with an error); a
  // request not started yet, or between steps, fails at its next step. Idempotent.
  void Abort();
  bool aborted() const { return aborted_; }

 private:
  friend class HttpClient;
  bool aborted_ = false;
  boost::beast::tcp_stream* stream_ = nullptr;  // the socket in use, while the request runs
};

class HttpClient {
 public:
  using Clock = std::chrono::steady_clock;
  // `on_body` returns non-OK to abort the request (the status is passed through).
  using BodySink = std::function<Status(std::string_view)>;

  // Sees the response head before the body; returns non-OK to abort the request.
  using HeadSink = std::function<Status(const ResponseHead&)>;

  struct RequestOptions {
    // Sent after the client's own headers (a name set twice keeps the extra value). Names that
    // belong to the transport are ignored: host, content-length, transfer-encoding, connection,
    // keep-alive, te, trailer, upgrade, expect, proxy-*; so is a name or value with CR, LF or
    // NUL.
    std::vector<std::pair<std::string, std::string>> headers;
    HeadSink on_head;                      // may be empty
    bool deliver_error_body = false;       // non-2xx bodies go to on_body too (error_body stays "")
    uint32_t max_header_bytes = 64 << 10;  // a larger response header fails the request
    RequestAbort* abort = nullptr;         // must outlive the request
  };

  HttpClient(boost::asio::io_context& io, Url url, std::string api_key);
  ~HttpClient();

  // `method` is "GET" or "POST" (or another standard verb); `path` is appended to the URL's
  // prefix; a non-empty body is sent as application/json. The body of a 2xx response goes to
  // on_body.
  boost::asio::awaitable<HttpResult> Request(std::string method, std::string path, std::string body,
                                             Clock::time_point deadline, BodySink on_body);
  // The same with proxying options.
  boost::asio::awaitable<HttpResult> Request(std::string method, std::string path, std::string body,
                                             Clock::time_point deadline, BodySink on_body,
                                             RequestOptions options);

  // The same with a lent body: sent without a copy (moved into the request while it is written)
  // and back in *body, unchanged, when the request ends — for a caller that resends it or reuses
  // its buffer (the span exporter's batches are hundreds of KiB).
  boost::asio::awaitable<HttpResult> Request(std::string method, std::string path,
                                             std::string* body, Clock::time_point deadline,
                                             BodySink on_body, RequestOptions options);

  // Closes idle connections (in-flight requests keep theirs).
  void CloseIdle();
  const Url& url() const { return url_; }

 private:
  struct Conn {
    explicit Conn(boost::asio::io_context& io) : stream(io) {}
    boost::beast::tcp_stream stream;
    boost::beast::flat_buffer buffer;
  };
  boost::asio::awaitable<HttpResult> Once(Conn& conn, bool reused, const std::string& method,
                                          const std::string& path, std::string* body,
                                          Clock::time_point deadline, const BodySink& on_body,
                                          const RequestOptions& options, bool* retry, bool* keep);
  // Resolves (once) and connects a new connection; a failure is the returned status.
  boost::asio::awaitable<Status> Connect(Conn& conn, Clock::time_point deadline);

  boost::asio::io_context& io_;
  Url url_;
  std::string api_key_;
  std::vector<std::unique_ptr<Conn>> idle_;
  bool resolved_ = false;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints_;
};

}  // namespace strata::http
