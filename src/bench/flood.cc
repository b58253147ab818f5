#include "bench/flood.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

#include "base/ascii.h"

namespace strata::bench {
namespace {

using Rng = std::mt19937_64;

// One request on the wire, and what the server may do with it.
struct Shot {
  std::string bytes;
  bool may_close = false;   // the server may close instead of answering
  bool half_close = false;  // shut our sending side after the bytes (a body cut short)
};

size_t Pick(Rng& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

std::string Request(std::string_view method, std::string_view path, std::string_view body,
                    std::string_view extra_headers = {}) {
  return fmt::format(
      "{} {} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{}Content-Length: "
      "{}\r\n\r\n{}",
      method, path, extra_headers, body.size(), body);
}

struct RouteSeed {
  const char* path;
  const char* body;
};
// Valid bodies per route, broken in the ways below.
constexpr RouteSeed kSeeds[] = {
    {"/v1/completions", R"({"prompt":"Hi","max_tokens":2,"temperature":0.5,"n":1,"stop":["x"]})"},
    {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":2})"},
    {"/v1/embeddings", R"({"input":["a","b"],"encoding_format":"float","dimensions":4})"},
    {"/tokenize", R"({"content":"hello","add_special":true,"with_pieces":true})"},
    {"/detokenize", R"({"tokens":[1,2,3]})"},
    {"/apply-template", R"({"messages":[{"role":"user","content":"hi"}]})"},
};
// Values of the wrong type (or out of range) for any field of the seeds.
constexpr const char* kBadValues[] = {"null",
                                      "true",
                                      "-1",
                                      "1e308",
                                      "18446744073709551616",
                                      "-9223372036854775809",
                                      "\"\"",
                                      "\"yes\"",
                                      "[]",
                                      "[[[]]]",
                                      "{}",
                                      "{\"a\":{}}",
                                      "[1,\"x\",null]",
                                      "-0.5",
                                      "1e-320",
                                      "\"\\ud800\"",
                                      "[-1]",
                                      "[99999999]",
                                      "1000000"};

// The field names of a seed (the keys of its top-level object, read textually).
std::vector<std::string> Keys(std::string_view body) {
  std::vector<std::string> keys;
  int depth = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') --depth;
    if (c == '"' && depth == 1) {
      size_t end = body.find('"', i + 1);
      if (end + 1 < body.size() && body[end + 1] == ':')
        keys.emplace_back(body.substr(i + 1, end - i - 1));
      i = end;
    }
  }
  return keys;
}

// Replaces the value of `key` (a top-level field) by `value`, textually.
std::string WithField(std::string body, const std::string& key, std::string_view value) {
  std::string needle = "\"" + key + "\":";
  size_t at = body.find(needle);
  if (at == std::string::npos) return body;
  size_t v = at + needle.size(), end = v;
  int depth = 0;
  bool in_string = false;
  for (; end < body.size(); ++end) {
    char c = body[end];
    if (in_string) {
      if (c == '\\')
        ++end;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      if (depth-- == 0) break;
    } else if (c == ',' && depth == 0) {
      break;
    }
  }
  return body.replace(v, end - v, value);
}

using ShotMaker = Shot (*)(Rng&);

Shot WrongType(Rng& rng) {
  const RouteSeed& s = kSeeds[Pick(rng, std::size(kSeeds))];
  auto keys = Keys(s.body);
  std::string body =
      WithField(s.body, keys[Pick(rng, keys.size())], kBadValues[Pick(rng, std::size(kBadValues))]);
  if (Pick(rng, 2) == 0)  // and a second field broken too
    body =
        WithField(body, keys[Pick(rng, keys.size())], kBadValues[Pick(rng, std::size(kBadValues))]);
  return {Request("POST", s.path, body)};
}
Shot MalformedJson(Rng& rng) {
  const RouteSeed& s = kSeeds[Pick(rng, std::size(kSeeds))];
  std::string body = s.body;
  body.resize(Pick(rng, body.size()));  // truncated JSON
  if (!body.empty() && Pick(rng, 2) == 0)
    body[Pick(rng, body.size())] = static_cast<char>(Pick(rng, 256));
  return {Request("POST", s.path, body)};
}
Shot NotAnObject(Rng& rng) {
  static constexpr const char* kBodies[] = {"[]", "1", "\"x\"", "null", "", "{}", "[{}]", "true"};
  return {Request("POST", kSeeds[Pick(rng, std::size(kSeeds))].path, kBodies[Pick(rng, 8)])};
}
Shot BadRoute(Rng& rng) {
  static constexpr const char* kPaths[] = {"/",
                                           "/v2/completions",
                                           "/v1",
                                           "/v1/models/other",
                                           "/%00",
                                           "/../../etc/passwd",
                                           "/v1/completions/x",
                                           "/tokenize?x=1",
                                           "//",
                                           "/metrics/x"};
  return {Request(Pick(rng, 2) ? "GET" : "POST", kPaths[Pick(rng, std::size(kPaths))], "{}")};
}
Shot BadMethod(Rng& rng) {
  static constexpr const char* kMethods[] = {"PUT", "DELETE", "PATCH", "OPTIONS", "GET", "FOO"};
  return {Request(kMethods[Pick(rng, std::size(kMethods))],
                  kSeeds[Pick(rng, std::size(kSeeds))].path, "{}")};
}
Shot HugeHeader(Rng& rng) {
  std::string h = "X-Pad: " + std::string(20000 + Pick(rng, 20000), 'a') + "\r\n";
  return {Request("POST", "/tokenize", R"({"content":"x"})", h), true};
}
Shot HugeBody(Rng&) {
  // Announces 64 MiB and sends none of it: 413 before the body is read.
  return {"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n", true};
}
Shot TruncatedBody(Rng& rng) {
  std::string r = "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"content\":";
  r.resize(r.size() - Pick(rng, 5));
  return {r, true, true};
}
Shot MalformedHttp(Rng& rng) {
  static constexpr const char* kLines[] = {
      "GARBAGE\r\n\r\n",
      "GET\r\n\r\n",
      "GET / HTTP/9.9\r\n\r\n",
      "\x01\x02\x03\r\n\r\n",
      "POST /tokenize HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
      "POST /tokenize HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
      "POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "GET / HTTP/1.1\r\nBad Header Without Colon\r\n\r\n"};
  return {kLines[Pick(rng, std::size(kLines))], true, true};
}
Shot BadAuth(Rng& rng) {
  static constexpr const char* kAuth[] = {
      "Authorization: Bearer\r\n", "Authorization: Basic eA==\r\n",
      "Authorization: Bearer wrong-key\r\n", "Authorization: \r\n"};
  return {Request("POST", "/tokenize", R"({"content":5})", kAuth[Pick(rng, std::size(kAuth))])};
}
Shot DeepNesting(Rng& rng) {
  size_t n = 100 + Pick(rng, 20000);
  std::string body = R"({"prompt":)" + std::string(n, '[') + std::string(n, ']') + "}";
  return {Request("POST", "/v1/completions", body)};
}
Shot OutOfRange(Rng& rng) {
  static constexpr const char* kBodies[] = {R"({"prompt":"x","max_tokens":-1})",
                                            R"({"prompt":"x","temperature":1000})",
                                            R"({"prompt":"x","n":100000})",
                                            R"({"prompt":"x","top_p":0})",
                                            R"({"prompt":"x","model":"nope"})",
                                            R"({"prompt":[-1]})",
                                            R"({"messages":[]})",
                                            R"({"prompt":"x","logprobs":99})"};
  const bool chat = Pick(rng, 2) == 0;
  return {Request("POST", chat ? "/v1/chat/completions" : "/v1/completions",
                  kBodies[Pick(rng, std::size(kBodies))])};
}

constexpr ShotMaker kMakers[] = {WrongType,     WrongType,   WrongType,     MalformedJson,
                                 MalformedJson, NotAnObject, BadRoute,      BadMethod,
                                 HugeHeader,    HugeBody,    TruncatedBody, MalformedHttp,
                                 BadAuth,       DeepNesting, OutOfRange,    OutOfRange};

// A blocking connection with a response reader (Content-Length or chunked bodies).
class Conn {
 public:
  explicit Conn(const FloodOptions& o) : o_(o) {}
  ~Conn() { Close(); }
  bool Open() {
    Close();
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(o_.port));
    if (inet_pton(AF_INET, o_.host.c_str(), &a.sin_addr) != 1 ||
        ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      Close();
      return false;
    }
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    buf_.clear();
    return true;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool open() const { return fd_ >= 0; }
  bool Send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  void HalfClose() { ::shutdown(fd_, SHUT_WR); }
  enum class Read { kResponse, kClosed, kTimeout };
  // Reads one response; *status and *keep_alive set for kResponse.
  Read ReadResponse(int* status, bool* keep_alive) {
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (Read r = Fill(); r != Read::kResponse) return r;
    std::string head = buf_.substr(0, head_end);
    AsciiStrToLower(&head);
    *status = std::atoi(head.c_str() + head.find(' ') + 1);
    *keep_alive = head.find("connection: close") == std::string::npos;
    buf_.erase(0, head_end + 4);
    if (head.find("transfer-encoding: chunked") != std::string::npos) {
      for (;;) {
        size_t line;
        while ((line = buf_.find("\r\n")) == std::string::npos)
          if (Read r = Fill(); r != Read::kResponse) return r;
        size_t len = std::strtoul(buf_.c_str(), nullptr, 16);
        while (buf_.size() < line + 2 + len + 2)
          if (Read r = Fill(); r != Read::kResponse) return r;
        buf_.erase(0, line + 2 + len + 2);
        if (len == 0) return Read::kResponse;
      }
    }
    size_t cl = head.find("content-length:");
    size_t len = cl == std::string::npos ? 0 : std::strtoul(head.c_str() + cl + 15, nullptr, 10);
    while (buf_.size() < len)
      if (Read r = Fill(); r != Read::kResponse) return r;
    buf_.erase(0, len);
    return Read::kResponse;
  }

 private:
  Read Fill() {
    pollfd p{fd_, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(o_.timeout_s * 1000));
    if (ready == 0) return Read::kTimeout;
    char tmp[16384];
    ssize_t n = ready < 0 ? -1 : ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) return Read::kClosed;
    buf_.append(tmp, static_cast<size_t>(n));
    return Read::kResponse;
  }
  const FloodOptions& o_;
  int fd_ = -1;
  std::string buf_;
};

struct Counters {
  std::atomic<int64_t> sent{0};
  std::array<std::atomic<int64_t>, 6> by_class{};
  std::atomic<int64_t> closed{0}, unexpected{0}, timeouts{0}, connect_errors{0}, reconnects{0};
};

void Worker(const FloodOptions& o, int index, std::atomic<int64_t>* next, Counters* c) {
  Rng rng(o.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index));
  Conn conn(o);
  while (next->fetch_add(1) < o.requests) {
    if (!conn.open()) {
      if (!conn.Open()) {
        ++c->connect_errors;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      ++c->reconnects;
    }
    Shot shot = kMakers[Pick(rng, std::size(kMakers))](rng);
    ++c->sent;
    bool sent = conn.Send(shot.bytes);
    if (sent && shot.half_close) conn.HalfClose();
    int status = 0;
    bool keep_alive = false;
    Conn::Read r = conn.ReadResponse(&status, &keep_alive);
    if (r == Conn::Read::kResponse) {
      ++c->by_class[static_cast<size_t>(std::clamp(status / 100, 0, 5))];
      if (!keep_alive || shot.half_close || shot.may_close) conn.Close();
    } else {
      if (r == Conn::Read::kTimeout)
        ++c->timeouts;
      else if (shot.may_close)
        ++c->closed;
      else
        ++c->unexpected;
      conn.Close();
    }
  }
}

}  // namespace

bool FloodReport::ok() const {
  return by_class[5] == 0 && timeouts == 0 && unexpected_closes == 0 && connect_errors == 0 &&
         server_alive;
}

int64_t ProcessRssKib(int pid) {
  std::ifstream f(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoll(line.c_str() + 6, nullptr, 10);
  return -1;
}

Result<FloodReport> RunFlood(const FloodOptions& o) {
  if (o.requests < 1) return Status::InvalidArgument("--requests: must be >= 1");
  if (o.connections < 1 || o.connections > 1024)
    return Status::InvalidArgument("--connections: must be in [1, 1024]");
  if (o.port < 1 || o.port > 65535) return Status::InvalidArgument("--port: must be in [1, 65535]");
  if (!(o.timeout_s > 0)) return Status::InvalidArgument("--timeout: must be > 0");
  {
    Conn probe(o);
    if (!probe.Open())
      return Status::IoError(fmt::format("cannot connect to {}:{}", o.host, o.port));
  }
  FloodReport rep;
  if (o.server_pid > 0) rep.rss_before_kib = ProcessRssKib(o.server_pid);
  Counters c;
  std::atomic<int64_t> next{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(o.connections));
  for (int i = 0; i < o.connections; ++i) threads.emplace_back(Worker, std::cref(o), i, &next, &c);
  for (auto& t : threads) t.join();
  rep.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.requests = c.sent.load();
  for (size_t i = 0; i < rep.by_class.size(); ++i) rep.by_class[i] = c.by_class[i].load();
  rep.closed_without_response = c.closed.load();
  rep.unexpected_closes = c.unexpected.load();
  rep.timeouts = c.timeouts.load();
  rep.connect_errors = c.connect_errors.load();
  rep.reconnects = c.reconnects.load();
  if (o.server_pid > 0) {
    rep.rss_after_kib = ProcessRssKib(o.server_pid);
    rep.server_alive = ::kill(o.server_pid, 0) == 0 && rep.rss_after_kib >= 0;
  }
  // And the server still answers a plain request.
  Conn last(o);
  int status = 0;
  bool keep_alive = false;
  if (!last.Open() || !last.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n") ||
      last.ReadResponse(&status, &keep_alive) != Conn::Read::kResponse || status != 200)
    rep.server_alive = false;
  return rep;
}

std::string FormatFloodReport(const FloodReport& r) {
  std::string s = fmt::format(
      "requests {} in {:.1f} s ({:.0f}/s)\n"
      "responses: 1xx {} 2xx {} 3xx {} 4xx {} 5xx {}\n"
      "closed without a response (malformed HTTP / cut bodies, allowed) {}\n"
      "unexpected closes {}, timeouts {}, connect errors {}, reconnects {}\n",
      r.requests, r.wall_s, r.wall_s > 0 ? static_cast<double>(r.requests) / r.wall_s : 0.0,
      r.by_class[1], r.by_class[2], r.by_class[3], r.by_class[4], r.by_class[5],
      r.closed_without_response, r.unexpected_closes, r.timeouts, r.connect_errors, r.reconnects);
  if (r.rss_before_kib >= 0)
    s += fmt::format("server RSS {:.1f} MiB before, {:.1f} MiB after\n",
                     static_cast<double>(r.rss_before_kib) / 1024,
                     static_cast<double>(r.rss_after_kib) / 1024);
  s += fmt::format("server {}; {}\n", r.server_alive ? "alive and answering" : "GONE",
                   r.ok() ? "ok" : "FAILED");
  return s;
}

}  // namespace strata::bench
