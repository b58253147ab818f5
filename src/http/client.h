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
  std::string error_body;  // the first 4 KiB of a non-2xx body
};

class HttpClient {
 public:
  using Clock = std::chrono::steady_clock;
  // `on_body` returns non-OK to abort the request (the status is passed through).
  using BodySink = std::function<Status(std::string_view)>;

  HttpClient(boost::asio::io_context& io, Url url, std::string api_key);
  ~HttpClient();

  // `method` is "GET" or "POST"; `path` is appended to the URL's prefix; a non-empty body is sent
  // as application/json. The body of a 2xx response goes to on_body.
  boost::asio::awaitable<HttpResult> Request(std::string method, std::string path, std::string body,
                                             Clock::time_point deadline, BodySink on_body);

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
                                          const std::string& path, const std::string& body,
                                          Clock::time_point deadline, const BodySink& on_body,
                                          bool* retry, bool* keep);

  boost::asio::io_context& io_;
  Url url_;
  std::string api_key_;
  std::vector<std::unique_ptr<Conn>> idle_;
  bool resolved_ = false;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints_;
};

}  // namespace strata::http
