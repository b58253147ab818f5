#include "http/server.h"

#include <fmt/format.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <deque>
#include <exception>
#include <optional>
#include <thread>

#include "base/ascii.h"
#include "http/openai_error.h"

namespace strata::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string ReasonPhrase(int status) {
  auto r = http::obsolete_reason(static_cast<http::status>(status));
  return r.empty() ? std::string("Unknown") : std::string(r);
}

HttpRequest ToHttpRequest(http::request<http::string_body>& msg) {
  HttpRequest req;
  req.method = std::string(msg.method_string().data(), msg.method_string().size());
  std::string_view target(msg.target().data(), msg.target().size());
  size_t q = target.find('?');
  req.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) req.query = std::string(target.substr(q + 1));
  for (const auto& f : msg)
    req.headers.emplace_back(
        AsciiStrToLower(std::string_view(f.name_string().data(), f.name_string().size())),
        std::string(f.value().data(), f.value().size()));  // json-access: not JSON (Beast)
  req.body = std::move(msg.body());
  return req;
}

}  // namespace

Result<HttpRequest> ParseHttpRequest(std::string_view bytes, const HttpServerOptions& options) {
  http::request_parser<http::string_body> parser;
  parser.body_limit(options.max_body_bytes);
  parser.header_limit(options.max_header_bytes);
  parser.eager(true);
  beast::error_code ec;
  size_t used = parser.put(asio::buffer(bytes.data(), bytes.size()), ec);
  (void)used;
  if (ec == http::error::header_limit) return Status::OutOfRange("request header fields too large");
  if (ec == http::error::body_limit) return Status::OutOfRange("request body too large");
  if (ec && ec != http::error::need_more)
    return Status::InvalidArgument("malformed request: " + ec.message());
  if (!parser.is_done()) {
    parser.put_eof(ec);
    if (ec || !parser.is_done()) return Status::InvalidArgument("incomplete request");
  }
  auto msg = parser.release();
  return ToHttpRequest(msg);
}

std::string_view HttpRequest::Header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return v;
  return {};
}

class Session;

// What a request is called in the guard's log line and observer call: never its body.
struct RequestName {
  std::string method, path;
};

// The message of the exception being handled (call inside a catch block only).
std::string CurrentExceptionMessage() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

struct HttpServer::Impl {
  HttpServer* owner = nullptr;
  HttpServerOptions opt;
  Handler handler;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;
  std::atomic<bool> stopped{false};

  void DoAccept();
  // The last-resort guard's report: one log line (the route, not the body) and the observer.
  void InternalError(std::string_view method, std::string_view path, std::string_view what) const;
  // One I/O thread: runs the io_context; an exception escaping a callback is reported and the
  // thread goes back to serving.
  void RunIoThread();
};

void HttpServer::Impl::InternalError(std::string_view method, std::string_view path,
                                     std::string_view what) const {
  std::string line =
      fmt::format("strata: internal error (answered 500) in {} {}: {}\n",
                  method.empty() ? "-" : method, path.empty() ? "-" : path, what.substr(0, 200));
  std::fputs(line.c_str(), stderr);
  if (!opt.on_internal_error) return;
  try {
    opt.on_internal_error(method, path, what);
  } catch (...) {  // NOLINT(bugprone-empty-catch): the observer must not throw; nothing to do
  }
}

void HttpServer::Impl::RunIoThread() {
  for (;;) {
    try {
      ioc.run();
      return;
    } catch (...) {
      InternalError("", "", CurrentExceptionMessage());
    }
  }
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer::Impl* impl, tcp::socket socket) : impl_(impl), stream_(std::move(socket)) {
    impl_->owner->open_connections_.fetch_add(1);
    beast::error_code ec;
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    // No Nagle: a response is written as several small pieces (the header, then each SSE event),
    // and Nagle would hold each piece until the client ACKs the previous one — up to its delayed
    // ACK (40 ms on Linux) added to the first token of every stream.
    stream_.socket().set_option(tcp::no_delay(true), ec);
  }
  ~Session() {
    if (in_response_) impl_->owner->active_responses_.fetch_sub(1);
    impl_->owner->open_connections_.fetch_sub(1);
  }

  void Start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadHeader(); });
  }

  // --- Responder entry points (already on the strand) ---
  void Respond(uint64_t serial, const HttpResponse& r) {
    if (serial != serial_ || started_ || closed_) return;
    started_ = true;
    std::string head = Head(r.status, r.content_type, r.headers);
    head += fmt::format("Content-Length: {}\r\n\r\n", r.body.size());
    head += r.body;
    ended_ = true;
    Enqueue(std::move(head));
  }
  void Begin(uint64_t serial, const std::string& content_type,
             const std::vector<std::pair<std::string, std::string>>& headers) {
    if (serial != serial_ || started_ || closed_) return;
    started_ = true;
    std::string head = Head(200, content_type, headers);
    head += "Transfer-Encoding: chunked\r\n\r\n";
    Enqueue(std::move(head));
  }
  void Write(uint64_t serial, const std::string& chunk) {
    if (serial != serial_ || !started_ || ended_ || closed_ || chunk.empty()) return;
    std::string framed = fmt::format("{:x}\r\n", chunk.size());
    framed += chunk;
    framed += "\r\n";
    Enqueue(std::move(framed));
  }
  void End(uint64_t serial) {
    if (serial != serial_ || !started_ || ended_ || closed_) return;
    ended_ = true;
    Enqueue("0\r\n\r\n");
  }
  // The guard caught an exception while serving response `serial`: answer 500, or end a stream
  // that already started (and close the connection after it, its body being cut short).
  void Fail(uint64_t serial, const RequestName& name, const std::string& what) {
    impl_->InternalError(name.method, name.path, what);
    if (serial != serial_ || closed_) return;
    if (!started_) return Respond(serial, ErrorResponse(500, "internal error"));
    keep_alive_ = false;
    End(serial);
  }
  void SetOnClose(uint64_t serial, std::function<void()> cb) {
    if (serial != serial_) return;
    if (closed_) {
      cb();
      return;
    }
    if (in_response_) on_close_ = std::move(cb);
  }

  asio::any_io_executor executor() { return stream_.get_executor(); }
  asio::io_context& io_context() { return impl_->ioc; }
  std::atomic<bool> closed_flag{false};

 private:
  std::string Head(int status, const std::string& content_type,
                   const std::vector<std::pair<std::string, std::string>>& headers) {
    if (impl_->stopped.load()) keep_alive_ = false;
    std::string h = fmt::format(
        "HTTP/1.1 {} {}\r\nServer: strata\r\nContent-Type: {}\r\nConnection: {}\r\n", status,
        ReasonPhrase(status), content_type, keep_alive_ ? "keep-alive" : "close");
    for (const auto& [k, v] : headers) h += k + ": " + v + "\r\n";
    return h;
  }

  void ReadHeader() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(impl_->opt.max_body_bytes);
    parser_->header_limit(impl_->opt.max_header_bytes);
    stream_.expires_after(impl_->opt.idle_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec == http::error::header_limit)
      return SendErrorAndClose(431, "request header fields too large");
    if (ec == http::error::body_limit) return SendErrorAndClose(413, "request body too large");
    if (ec) return Close();
    auto len = parser_->content_length();
    if (len && *len > impl_->opt.max_body_bytes)
      return SendErrorAndClose(413, "request body too large");
    stream_.expires_after(impl_->opt.read_timeout);
    auto expect = parser_->get()[http::field::expect];
    if (beast::iequals(expect, "100-continue") && !parser_->is_done()) {
      // curl and others wait for this before sending a larger body.
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      return asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                               [self = shared_from_this()](beast::error_code ec2, size_t) {
                                 if (ec2) return self->Close();
                                 self->ReadBody();
                               });
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec2, size_t) { self->OnRead(ec2); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::body_limit) return SendErrorAndClose(413, "request body too large");
    if (ec == beast::error::timeout) return SendErrorAndClose(408, "request timeout");
    if (ec) return Close();
    stream_.expires_never();
    auto msg = parser_->release();
    HttpRequest req = ToHttpRequest(msg);
    req.peer = peer_;
    keep_alive_ = msg.keep_alive() && !impl_->stopped.load();
    ++serial_;
    started_ = ended_ = false;
    in_response_ = true;
    impl_->owner->active_responses_.fetch_add(1);
    Watch();
    auto name = std::make_shared<const RequestName>(RequestName{req.method, req.path});
    try {
      impl_->handler(std::move(req), MakeResponder(name));
    } catch (...) {
      Fail(serial_, *name, CurrentExceptionMessage());
    }
  }

  std::shared_ptr<Responder> MakeResponder(std::shared_ptr<const RequestName> name);

  // While a response is in progress, keep one read pending so a disconnect is noticed at once.
  void Watch() {
    watching_ = true;
    stream_.socket().async_read_some(
        asio::buffer(watch_buf_),
        [self = shared_from_this()](beast::error_code ec, size_t n) { self->OnWatch(ec, n); });
  }
  void OnWatch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (!ec) {
      // Pipelined bytes of the next request: keep them for the parser (bounded).
      if (buffer_.size() + n <= impl_->opt.max_header_bytes + impl_->opt.max_body_bytes) {
        auto dst = buffer_.prepare(n);
        asio::buffer_copy(dst, asio::buffer(watch_buf_.data(), n));
        buffer_.commit(n);
      }
      if (in_response_) return Watch();
      if (want_read_) {
        want_read_ = false;
        return ReadHeader();
      }
      return;
    }
    if (ec == asio::error::operation_aborted && want_read_) {
      want_read_ = false;
      return ReadHeader();
    }
    Close();  // EOF or reset: the client is gone
  }

  void Enqueue(std::string data) {
    outq_.push_back(std::move(data));
    if (!writing_) DoWrite();
  }
  void DoWrite() {
    writing_ = true;
    asio::async_write(
        stream_.socket(), asio::buffer(outq_.front()),
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
  }
  void OnWrite(beast::error_code ec) {
    writing_ = false;
    if (ec) return Close();
    outq_.pop_front();
    if (!outq_.empty()) return DoWrite();
    if (ended_ && in_response_) AfterResponse();
  }

  void AfterResponse() {
    in_response_ = false;
    impl_->owner->active_responses_.fetch_sub(1);
    on_close_ = nullptr;
    if (!keep_alive_ || impl_->stopped.load()) {
      beast::error_code ec;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      return Close();
    }
    if (watching_) {
      want_read_ = true;
      beast::error_code ec;
      stream_.socket().cancel(ec);
      return;
    }
    ReadHeader();
  }

  void SendErrorAndClose(int status, std::string_view message) {
    keep_alive_ = false;
    ++serial_;
    started_ = ended_ = false;
    std::string body = ErrorResponse(status, message).body;
    std::string head = Head(status, "application/json", {});
    head += fmt::format("Content-Length: {}\r\n\r\n", body.size());
    head += body;
    started_ = ended_ = true;
    Enqueue(std::move(head));
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    closed_flag.store(true);
    if (in_response_ && on_close_) {
      auto cb = std::move(on_close_);
      on_close_ = nullptr;
      cb();
    }
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  HttpServer::Impl* impl_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string peer_;
  uint64_t serial_ = 0;
  bool keep_alive_ = true;
  bool in_response_ = false, started_ = false, ended_ = false, closed_ = false;
  bool writing_ = false, watching_ = false, want_read_ = false;
  std::deque<std::string> outq_;
  std::function<void()> on_close_;
  std::array<char, 4096> watch_buf_{};
};

namespace {

class SessionResponder final : public Responder {
 public:
  SessionResponder(std::shared_ptr<Session> s, uint64_t serial,
                   std::shared_ptr<const RequestName> name)
      : s_(std::move(s)),
        serial_(serial),
        name_(std::move(name)),
        work_(asio::make_strand(s_->io_context())) {}
  void Respond(HttpResponse r) override {
    asio::post(s_->executor(),
               [s = s_, n = serial_, r = std::move(r)]() mutable { s->Respond(n, r); });
  }
  void Begin(std::string ct, std::vector<std::pair<std::string, std::string>> h) override {
    asio::post(s_->executor(), [s = s_, n = serial_, ct = std::move(ct),
                                h = std::move(h)]() mutable { s->Begin(n, ct, h); });
  }
  void Write(std::string chunk) override {
    asio::post(s_->executor(),
               [s = s_, n = serial_, c = std::move(chunk)]() mutable { s->Write(n, c); });
  }
  void End() override {
    asio::post(s_->executor(), [s = s_, n = serial_] { s->End(n); });
  }
  void OnClose(std::function<void()> cb) override {
    asio::post(s_->executor(), [s = s_, n = serial_, cb = std::move(cb)]() mutable {
      s->SetOnClose(n, std::move(cb));
    });
  }
  bool closed() const override { return s_->closed_flag.load(); }
  // Guarded like the handler: an exception from `fn` fails this response (on the connection's
  // strand) instead of escaping into the I/O thread.
  void Post(std::function<void()> fn) override {
    asio::post(work_, [s = s_, n = serial_, name = name_, fn = std::move(fn)] {
      try {
        fn();
      } catch (...) {
        asio::post(s->executor(),
                   [s, n, name, what = CurrentExceptionMessage()] { s->Fail(n, *name, what); });
      }
    });
  }

 private:
  std::shared_ptr<Session> s_;
  uint64_t serial_;
  std::shared_ptr<const RequestName> name_;
  // This response's own strand for Post(): work there is serialized, and never queued in front
  // of the connection's socket I/O (a disconnect is noticed while a handler is busy).
  asio::strand<asio::io_context::executor_type> work_;
};

}  // namespace

std::shared_ptr<Responder> Session::MakeResponder(std::shared_ptr<const RequestName> name) {
  return std::make_shared<SessionResponder>(shared_from_this(), serial_, std::move(name));
}

void HttpServer::Impl::DoAccept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    } else if (owner->open_connections() >= opt.max_connections) {
      beast::error_code ec2;
      socket.close(ec2);
    } else {
      std::make_shared<Session>(this, std::move(socket))->Start();
    }
    if (acceptor.is_open()) DoAccept();
  });
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                      Handler handler) {
  if (options.io_threads < 1 || options.io_threads > 256)
    return Status::InvalidArgument("io_threads: must be in [1, 256]");
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->options_ = options;
  s->impl_ = std::make_unique<Impl>();
  Impl& impl = *s->impl_;
  impl.owner = s.get();
  impl.opt = options;
  impl.handler = std::move(handler);
  beast::error_code ec;
  auto addr = asio::ip::make_address(options.host, ec);
  if (ec) return Status::InvalidArgument("host: not an IP address: '" + options.host + "'");
  tcp::endpoint ep(addr, options.port);
  impl.acceptor.open(ep.protocol(), ec);
  if (!ec) impl.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(ep, ec);
  if (!ec) impl.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return Status::IoError(
        fmt::format("cannot listen on {}:{}: {}", options.host, options.port, ec.message()));
  s->port_ = impl.acceptor.local_endpoint().port();
  impl.DoAccept();
  for (int i = 0; i < options.io_threads; ++i)
    impl.threads.emplace_back([&impl] { impl.RunIoThread(); });
  return s;
}

void HttpServer::StopAccepting() {
  if (!impl_) return;
  impl_->stopped.store(true);
  asio::post(impl_->ioc, [impl = impl_.get()] {
    beast::error_code ec;
    impl->acceptor.close(ec);
  });
}

void HttpServer::Stop() {
  if (!impl_ || impl_->threads.empty()) return;
  StopAccepting();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

HttpServer::~HttpServer() {
  Stop();
  impl_.reset();  // destroys pending sessions while the counters still exist
}

}  // namespace strata::http
