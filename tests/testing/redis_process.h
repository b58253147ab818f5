// RedisProcess: a real `redis-server` (Debian package) on 127.0.0.1 and a free port, for tests of
// the Redis KV tier. No persistence (--save '' --appendonly no). available() is false (and the
// test should GTEST_SKIP with a message) when /usr/bin/redis-server is missing or does not answer
// PING within 10 s. Ownership: the object owns the child and kills it (SIGKILL) in Kill() or the
// destructor.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace strata::testing {

class RedisProcess {
 public:
  static constexpr const char* kBinary = "/usr/bin/redis-server";

  RedisProcess() { Start(FreePort()); }
  ~RedisProcess() { Kill(); }
  RedisProcess(const RedisProcess&) = delete;
  RedisProcess& operator=(const RedisProcess&) = delete;

  bool available() const { return ready_; }
  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  void Kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    ready_ = false;
  }
  // Starts again on the same port (after Kill).
  void Restart() {
    Kill();
    Start(port_);
  }

  // Sends one inline command and returns the first reply line (e.g. "+PONG"); "" on failure.
  std::string Command(const std::string& line) const {
    int fd = Connect();
    if (fd < 0) return "";
    std::string req = line + "\r\n";
    std::string reply;
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char c;
      while (::recv(fd, &c, 1, 0) == 1 && c != '\n') reply += c;
      if (!reply.empty() && reply.back() == '\r') reply.pop_back();
    }
    ::close(fd);
    return reply;
  }

  // A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close).
  static int FreePort() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
    ::close(fd);
    return port;
  }

 private:
  int Connect() const {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    timeval tv{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  void Start(int port) {
    port_ = port;
    if (port_ <= 0 || ::access(kBinary, X_OK) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      std::string p = std::to_string(port_);
      ::execl(kBinary, kBinary, "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "",
              "--appendonly", "no", "--loglevel", "warning", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (Command("PING") == "+PONG") {
        ready_ = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  pid_t pid_ = -1;
  int port_ = 0;
  bool ready_ = false;
};

}  // namespace strata::testing
