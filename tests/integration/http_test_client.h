// A tiny blocking HTTP/1.1 client over POSIX sockets for server tests (independent of the server's
// Beast code, so the tests check the wire format, not our own parser against itself).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace strata::testing {

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  bool ok = false;                             // a complete response was read
};

class HttpConn {
 public:
  explicit HttpConn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~HttpConn() { Close(); }
  bool connected() const { return fd_ >= 0; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool SendRaw(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  bool Send(const std::string& method, const std::string& path, const std::string& body = "",
            const std::vector<std::string>& extra_headers = {}) {
    std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    for (const auto& h : extra_headers) req += h + "\r\n";
    if (!body.empty() || method == "POST") {
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n";
    }
    req += "\r\n" + body;
    return SendRaw(req);
  }

  // Reads until `pred(buffer)` or EOF/timeout. Returns false on timeout/EOF before pred.
  template <typename Pred>
  bool ReadUntil(Pred pred, double timeout_s = 30) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (!pred(buf_)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char tmp[8192];
      ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) {
        eof_ = true;
        return pred(buf_);
      }
      buf_.append(tmp, static_cast<size_t>(n));
    }
    return true;
  }
  bool eof() const { return eof_; }
  std::string& buffer() { return buf_; }

  // Reads one full response (Content-Length or chunked).
  HttpReply ReadResponse(double timeout_s = 60) {
    HttpReply r;
    if (!ReadUntil([](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; },
                   timeout_s))
      return r;
    size_t he = buf_.find("\r\n\r\n");
    std::string head = buf_.substr(0, he);
    buf_.erase(0, he + 4);
    size_t sp = head.find(' ');
    r.status = std::atoi(head.c_str() + sp + 1);
    size_t pos = head.find("\r\n");
    while (pos != std::string::npos) {
      size_t next = head.find("\r\n", pos + 2);
      std::string line =
          head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      size_t c = line.find(':');
      if (c != std::string::npos) {
        std::string k = line.substr(0, c);
        for (auto& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        size_t vb = line.find_first_not_of(' ', c + 1);
        r.headers[k] = vb == std::string::npos ? "" : line.substr(vb);
      }
      pos = next;
    }
    if (r.headers.count("content-length")) {
      size_t len = std::stoul(r.headers["content-length"]);
      if (!ReadUntil([len](const std::string& b) { return b.size() >= len; }, timeout_s)) return r;
      r.body = buf_.substr(0, len);
      buf_.erase(0, len);
      r.ok = true;
      return r;
    }
    if (r.headers["transfer-encoding"] == "chunked") {
      while (true) {
        if (!ReadUntil([](const std::string& b) { return b.find("\r\n") != std::string::npos; },
                       timeout_s))
          return r;
        size_t le = buf_.find("\r\n");
        size_t len = std::stoul(buf_.substr(0, le), nullptr, 16);
        if (!ReadUntil([&](const std::string& b) { return b.size() >= le + 2 + len + 2; },
                       timeout_s))
          return r;
        r.body += buf_.substr(le + 2, len);
        buf_.erase(0, le + 2 + len + 2);
        if (len == 0) break;
      }
      r.ok = true;
    }
    return r;
  }

 private:
  int fd_ = -1;
  std::string buf_;
  bool eof_ = false;
};

inline HttpReply HttpCall(int port, const std::string& method, const std::string& path,
                          const std::string& body = "",
                          const std::vector<std::string>& headers = {}) {
  HttpConn c(port);
  if (!c.connected() || !c.Send(method, path, body, headers)) return {};
  return c.ReadResponse();
}

// Splits an SSE body into the payloads of its `data: ` events.
inline std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    size_t e = body.find("\n\n", pos);
    if (e == std::string::npos) break;
    std::string ev = body.substr(pos, e - pos);
    if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
    pos = e + 2;
  }
  return out;
}

}  // namespace strata::testing
