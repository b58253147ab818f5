// ServeProcess: runs the real `strata serve` binary on 127.0.0.1 port 0 for end-to-end tests and
// waits until it prints "strata serve: ready". The including test target must define STRATA_BIN and
// STRATA_DEFAULT_MODEL. Ownership: the object owns the child process and kills it (SIGKILL) in its
// destructor unless it already exited. Errors: port() is 0 when the server did not become ready
// within 60 s (tests ASSERT on it).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace strata::testing {

class ServeProcess {
 public:
  // Starts `strata serve --port 0 --model <default> --kv-cache-memory 64MiB --threads 2 <extra>`;
  // `extra` must not repeat those flags (CLI11 refuses a repeated option): to change one, pass the
  // whole command to the two-argument constructor.
  explicit ServeProcess(std::vector<std::string> extra)
      : ServeProcess(DefaultArgs(), std::move(extra)) {}
  // Starts `<base...> <extra...>` (base[0] is the binary) and waits for the line holding
  // `ready_marker` after "listening on ..." (`strata gateway` prints "strata gateway: ready").
  ServeProcess(std::vector<std::string> base, std::vector<std::string> extra,
               const std::string& ready_marker = "strata serve: ready") {
    std::vector<std::string> args = std::move(base);
    args.insert(args.end(), extra.begin(), extra.end());
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      close(out[1]);
      std::vector<char*> argv;
      argv.reserve(args.size() + 1);
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    // Read the startup lines: "listening on ..." (HTTP up, /ready 503 while loading), then "ready".
    std::string buf;
    char c;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::regex re("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    std::smatch m;
    while (std::chrono::steady_clock::now() < deadline && read(out[0], &c, 1) == 1) {
      buf += c;
      if (c != '\n') continue;
      if (port_ == 0 && std::regex_search(buf, m, re)) port_ = std::stoi(m[1]);
      if (port_ != 0 && buf.find(ready_marker) != std::string::npos) break;  // model loaded
    }
    out_fd_ = out[0];
    startup_output_ = std::move(buf);
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
  }
  static std::vector<std::string> DefaultArgs() {
    return {STRATA_BIN,          "serve", "--port",    "0", "--model", STRATA_DEFAULT_MODEL,
            "--kv-cache-memory", "64MiB", "--threads", "2"};
  }
  int port() const { return port_; }
  // Everything the server printed on stdout up to "ready" (stderr too when base redirects it).
  const std::string& startup_output() const { return startup_output_; }
  pid_t pid() const { return pid_; }
  // Sends `sig` and waits (up to timeout) for the exit status; -1 when it did not exit.
  void Signal(int sig) { kill(pid_, sig); }
  int Wait(double timeout_s) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int out_fd_ = -1;
  bool exited_ = false;
  std::string startup_output_;
};

}  // namespace strata::testing
