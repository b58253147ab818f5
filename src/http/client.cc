#include "http/client.h"

#include <fmt/format.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <limits>

#include "base/ascii.h"

namespace strata::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string Url::ToString() const { return fmt::format("http://{}:{}{}", host, port, path_prefix); }

Result<Url> ParseUrl(std::string_view s) {
  constexpr std::string_view kScheme = "http://";
  if (s.substr(0, kScheme.size()) != kScheme)
    return Status::InvalidArgument(
        fmt::format("--base-url '{}': only http:// URLs are supported", s));
  s.remove_prefix(kScheme.size());
  size_t slash = s.find('/');
  std::string_view authority = s.substr(0, slash);
  Url u;
  if (slash != std::string_view::npos) {
    u.path_prefix = std::string(s.substr(slash));
    while (!u.path_prefix.empty() && u.path_prefix.back() == '/') u.path_prefix.pop_back();
  }
  if (authority.empty()) return Status::InvalidArgument("--base-url: missing host");
  if (authority.front() == '[') {  // [v6]:port
    size_t close = authority.find(']');
    if (close == std::string_view::npos)
      return Status::InvalidArgument("--base-url: unterminated [IPv6] host");
    u.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (!authority.empty()) {
      if (authority.front() != ':') return Status::InvalidArgument("--base-url: junk after ]");
      u.port = std::string(authority.substr(1));
    }
  } else {
    size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) u.port = std::string(authority.substr(colon + 1));
  }
  if (u.host.empty()) return Status::InvalidArgument("--base-url: missing host");
  if (u.port.empty() || u.port.size() > 5 ||
      u.port.find_first_not_of("0123456789") != std::string::npos || std::stoi(u.port) < 1 ||
      std::stoi(u.port) > 65535)
    return Status::InvalidArgument(fmt::format("--base-url: bad port '{}'", u.port));
  return u;
}

HttpClient::HttpClient(asio::io_context& io, Url url, std::string api_key)
    : io_(io), url_(std::move(url)), api_key_(std::move(api_key)) {}

HttpClient::~HttpClient() = default;

void HttpClient::CloseIdle() { idle_.clear(); }

namespace {
HttpResult Fail(Status s) {
  HttpResult r;
  r.status = std::move(s);
  return r;
}
std::string Describe(const beast::error_code& ec) {
  if (ec == beast::error::timeout) return "timeout";
  return ec.message();
}
}  // namespace

std::string_view ResponseHead::Header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return v;
  return {};
}

void RequestAbort::Abort() {
  aborted_ = true;
  if (stream_ == nullptr) return;
  beast::error_code ec;
  stream_->socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_->socket().close(ec);
}

namespace {

// Request headers a caller may not set: they describe this hop's framing and connection.
bool TransportHeader(std::string_view lower_name) {
  static constexpr std::string_view kNames[] = {"host",       "content-length", "transfer-encoding",
                                                "connection", "keep-alive",     "te",
                                                "trailer",    "upgrade",        "expect"};
  for (std::string_view n : kNames)
    if (lower_name == n) return true;
  return lower_name.substr(0, 6) == "proxy-";
}

bool Printable(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

ResponseHead HeadOf(const http::response_parser<http::buffer_body>& parser) {
  ResponseHead h;
  const auto& msg = parser.get();
  h.status = static_cast<int>(msg.result_int());
  for (const auto& f : msg)
    h.headers.emplace_back(
        AsciiStrToLower(std::string_view(f.name_string().data(), f.name_string().size())),
        std::string(f.value().data(), f.value().size()));  // json-access: Beast
  h.chunked = parser.chunked();
  if (auto len = parser.content_length()) h.content_length = *len;
  return h;
}

// The scope in which an abort handle points at a connection's socket.
class AbortScope {
 public:
  AbortScope(RequestAbort* abort, beast::tcp_stream* stream, beast::tcp_stream** slot)
      : slot_(abort ? slot : nullptr) {
    if (slot_) *slot_ = stream;
  }
  ~AbortScope() {
    if (slot_) *slot_ = nullptr;
  }
  AbortScope(const AbortScope&) = delete;
  AbortScope& operator=(const AbortScope&) = delete;

 private:
  beast::tcp_stream** slot_;
};

HttpResult Aborted() {
  HttpResult r = Fail(Status::Unavailable("request aborted"));
  r.aborted = true;
  return r;
}

}  // namespace

asio::awaitable<HttpResult> HttpClient::Request(std::string method, std::string path,
                                                std::string body, Clock::time_point deadline,
                                                BodySink on_body) {
  co_return co_await Request(std::move(method), std::move(path), std::move(body), deadline,
                             std::move(on_body), RequestOptions{});
}

asio::awaitable<Status> HttpClient::Connect(Conn& conn, Clock::time_point deadline) {
  beast::error_code ec;
  if (!resolved_) {
    tcp::resolver resolver(io_);
    auto results = co_await resolver.async_resolve(url_.host, url_.port,
                                                   asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Status::Unavailable(fmt::format("resolve {}: {}", url_.host, ec.message()));
    for (const auto& r : results) endpoints_.push_back(r.endpoint());
    resolved_ = true;
  }
  conn.stream.expires_at(deadline);
  co_await conn.stream.async_connect(endpoints_, asio::redirect_error(asio::use_awaitable, ec));
  if (ec)
    co_return Status::Unavailable(fmt::format("connect {}: {}", url_.ToString(), Describe(ec)));
  // No Nagle: a request's header and body may leave as two writes; the second would wait for the
  // server's delayed ACK (40 ms).
  conn.stream.socket().set_option(tcp::no_delay(true), ec);
  co_return Status::Ok();
}

asio::awaitable<HttpResult> HttpClient::Request(std::string method, std::string path,
                                                std::string body, Clock::time_point deadline,
                                                BodySink on_body, RequestOptions options) {
  co_return co_await Request(std::move(method), std::move(path), &body, deadline,
                             std::move(on_body), std::move(options));
}

asio::awaitable<HttpResult> HttpClient::Request(std::string method, std::string path,
                                                std::string* body, Clock::time_point deadline,
                                                BodySink on_body, RequestOptions options) {
  RequestAbort* abort = options.abort;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (abort && abort->aborted()) co_return Aborted();
    std::unique_ptr<Conn> conn;
    bool reused = false;
    if (!idle_.empty()) {
      conn = std::move(idle_.back());
      idle_.pop_back();
      reused = true;
    } else {
      conn = std::make_unique<Conn>(io_);
    }
    AbortScope scope(abort, &conn->stream, abort ? &abort->stream_ : nullptr);
    if (!reused) {
      Status s = co_await Connect(*conn, deadline);
      if (abort && abort->aborted()) co_return Aborted();
      if (!s.ok()) co_return Fail(std::move(s));
    }
    bool retry = false, keep = false;
    HttpResult r =
        co_await Once(*conn, reused, method, path, body, deadline, on_body, options, &retry, &keep);
    if (abort && abort->aborted()) co_return Aborted();
    if (retry && attempt == 0) continue;
    if (keep) idle_.push_back(std::move(conn));
    co_return r;
  }
  co_return Fail(Status::Internal("unreachable"));
}

namespace {
// Swaps a lent string back to its owner when the scope ends.
struct GiveBack {
  GiveBack(std::string* owner, std::string* holder) : owner(owner), holder(holder) {}
  std::string* owner;
  std::string* holder;
  GiveBack(const GiveBack&) = delete;
  GiveBack& operator=(const GiveBack&) = delete;
  ~GiveBack() { owner->swap(*holder); }
};
}  // namespace

asio::awaitable<HttpResult> HttpClient::Once(Conn& conn, bool reused, const std::string& method,
                                             const std::string& path, std::string* body,
                                             Clock::time_point deadline, const BodySink& on_body,
                                             const RequestOptions& options, bool* retry,
                                             bool* keep) {
  HttpResult out;
  beast::error_code ec;
  conn.stream.expires_at(deadline);
  const http::verb verb = http::string_to_verb(method);
  if (verb == http::verb::unknown)
    co_return Fail(Status::InvalidArgument(fmt::format("unknown HTTP method '{}'", method)));
  http::request<http::string_body> req{verb, url_.path_prefix + path, 11};
  req.set(http::field::host, url_.host + ":" + url_.port);
  req.set(http::field::user_agent, "strata-bench");
  req.keep_alive(true);
  if (!api_key_.empty()) req.set(http::field::authorization, "Bearer " + api_key_);
  if (!body->empty() || method != "GET") {
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream, application/json");
    req.body().swap(*body);  // lent while it is written (no copy)
    req.prepare_payload();
  }
  // Given back however this attempt ends (before `req` goes), for a retry on a fresh connection.
  const GiveBack give_back{body, &req.body()};
  for (const auto& [name, value] : options.headers)
    if (!name.empty() && Printable(name) && Printable(value) &&
        !TransportHeader(AsciiStrToLower(name)))
      req.set(name, value);
  co_await http::async_write(conn.stream, req, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    *retry = reused && ec != beast::error::timeout;
    out.status = Status::Unavailable(fmt::format("send: {}", Describe(ec)));
    co_return out;
  }
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(
      std::numeric_limits<std::uint64_t>::max());  // streams are bounded by the deadline
  parser.header_limit(options.max_header_bytes);
  co_await http::async_read_header(conn.stream, conn.buffer, parser,
                                   asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    *retry = reused && ec != beast::error::timeout && ec != http::error::header_limit;
    out.status = Status::Unavailable(fmt::format("reading the response header: {}", Describe(ec)));
    co_return out;
  }
  out.http_status = static_cast<int>(parser.get().result_int());
  if (options.on_head) {
    Status s = options.on_head(HeadOf(parser));
    if (!s.ok()) {
      out.status = std::move(s);
      co_return out;  // connection abandoned before the body: not kept
    }
  }
  const bool ok_status = out.http_status >= 200 && out.http_status < 300;
  const bool deliver = ok_status || options.deliver_error_body;
  char chunk[16 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    co_await http::async_read_some(conn.stream, conn.buffer, parser,
                                   asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    size_t n = sizeof(chunk) - parser.get().body().size;
    if (n > 0) {
      std::string_view piece(chunk, n);
      if (deliver) {
        Status s = on_body(piece);
        if (!s.ok()) {
          out.status = s;
          co_return out;  // connection abandoned mid-body: not kept
        }
      } else if (out.error_body.size() < 4096) {
        out.error_body.append(piece.substr(0, 4096 - out.error_body.size()));
      }
    }
    if (ec == http::error::end_of_stream && parser.is_done()) break;
    if (ec) {
      out.status = Status::Unavailable(fmt::format("reading the response body: {}", Describe(ec)));
      co_return out;
    }
  }
  *keep = parser.get().keep_alive();
  co_return out;
}

}  // namespace strata::http
