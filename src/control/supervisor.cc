#include "control/supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <regex>
#include <utility>

#include "base/enum_names.h"
#include "control/fetch.h"

namespace strata::control {

using std::chrono::milliseconds;

// The log text kept while looking for the port line (a child that prints more first is odd).
constexpr size_t kMaxPortScanBytes = 64 << 10;

struct Supervisor::Child {
  ChildSpec spec;
  ChildStatus st;
  Clock::time_point restart_at, kill_at, next_probe;
  off_t log_offset = 0;  // where the current run's output starts
  std::string scanned;   // the current run's output read so far (until the port line)
  std::string failing;   // why we killed it ("" = it exited on its own)
};

std::string_view ChildStateName(ChildState s) {
  static constexpr auto kNames = EnumNames<ChildState::kStopped>("starting", "ready", "backoff",
                                                                 "failed", "stopping", "stopped");
  return EnumName(kNames, s, "failed");
}

std::string ChildStatus::url() const {
  return port > 0 ? fmt::format("http://127.0.0.1:{}", port) : "";
}

namespace {

double Seconds(Supervisor::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string ExitText(int st) {
  if (WIFEXITED(st)) return fmt::format("exit {}", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return fmt::format("signal {}", WTERMSIG(st));
  return "ended";
}

// SIGTERM/SIGKILL to the child's process group (the child itself if the group is not set yet).
void SignalGroup(pid_t pid, int sig) {
  if (pid <= 0) return;
  if (kill(-pid, sig) != 0) kill(pid, sig);
}

// In the forked child: only async-signal-safe calls until exec.
[[noreturn]] void ExecChild(int log_fd, char* const* argv) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  dup2(log_fd, 1);
  dup2(log_fd, 2);
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, 0);
  if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0)
    for (int fd = 3; fd < 1024; ++fd) close(fd);
  execv(argv[0], argv);
  static const char kMsg[] = "strata up: exec failed\n";
  (void)!write(2, kMsg, sizeof kMsg - 1);
  _exit(127);
}

}  // namespace

Supervisor::Supervisor(Options options) : options_(options) {
  monitor_ = std::thread([this] { Run(); });
}

Supervisor::~Supervisor() {
  StopAll();
  {
    MutexLock lock(&mu_);
    quit_ = true;
  }
  cv_.NotifyAll();
  monitor_.join();
}

Status Supervisor::Start(ChildSpec spec) {
  if (spec.name.empty() || spec.argv.empty()) return Status::InvalidArgument("child: no name/argv");
  if (access(spec.argv[0].c_str(), X_OK) != 0)
    return Status::NotFound(
        fmt::format("{}: {} is not an executable file", spec.name, spec.argv[0]));
  {
    MutexLock lock(&mu_);
    if (children_.contains(spec.name))
      return Status::InvalidArgument("child '" + spec.name + "' exists already");
    auto c = std::make_unique<Child>();
    c->st.name = spec.name;
    c->st.labels = spec.labels;
    c->st.log_path = spec.log_path;
    c->spec = std::move(spec);
    children_.emplace(c->st.name, std::move(c));
  }
  cv_.NotifyAll();
  return Status::Ok();
}

bool Supervisor::Stop(const std::string& name) {
  {
    MutexLock lock(&mu_);
    auto it = children_.find(name);
    if (it == children_.end()) return false;
    Child& c = *it->second;
    if (c.st.state == ChildState::kStopping) return true;
    if (c.st.pid <= 0) {  // not running (backoff, failed, not forked yet): nothing to drain
      children_.erase(it);
    } else {
      c.st.state = ChildState::kStopping;
      c.kill_at = Clock::now() + c.spec.grace;
      SignalGroup(c.st.pid, SIGTERM);
    }
  }
  cv_.NotifyAll();
  return true;
}

bool Supervisor::WaitGone(const std::string& name, milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  MutexLock lock(&mu_);
  while (children_.contains(name))
    if (!cv_.WaitUntil(&mu_, until) && Clock::now() >= until) return !children_.contains(name);
  return true;
}

bool Supervisor::WaitReady(const std::string& name, milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  MutexLock lock(&mu_);
  for (;;) {
    auto it = children_.find(name);
    if (it == children_.end()) return false;
    const ChildState s = it->second->st.state;
    if (s == ChildState::kReady) return true;
    if (s == ChildState::kFailed || s == ChildState::kStopping) return false;
    if (Clock::now() >= until) return false;
    cv_.WaitUntil(&mu_, until);
  }
}

void Supervisor::StopAll(const std::vector<std::string>& names) {
  std::vector<std::string> todo = names;
  if (todo.empty()) {
    MutexLock lock(&mu_);
    for (const auto& [name, c] : children_) todo.push_back(name);
  }
  milliseconds longest{0};
  for (const std::string& n : todo) {
    {
      MutexLock lock(&mu_);
      auto it = children_.find(n);
      if (it != children_.end()) longest = std::max(longest, it->second->spec.grace);
    }
    Stop(n);
  }
  for (const std::string& n : todo) WaitGone(n, longest + milliseconds(5000));
}

std::vector<ChildStatus> Supervisor::Children() const {
  MutexLock lock(&mu_);
  std::vector<ChildStatus> out;
  out.reserve(children_.size());
  for (const auto& [name, c] : children_) out.push_back(c->st);
  return out;
}

std::optional<ChildStatus> Supervisor::Find(const std::string& name) const {
  MutexLock lock(&mu_);
  auto it = children_.find(name);
  if (it == children_.end()) return std::nullopt;
  return it->second->st;
}

void Supervisor::SetOnChange(std::function<void()> fn) {
  MutexLock lock(&mu_);
  on_change_ = std::move(fn);
}

milliseconds Supervisor::Backoff(int failures) const {
  milliseconds d = options_.backoff_base;
  for (int i = 1; i < failures && d < options_.backoff_max; ++i) d *= 2;
  return std::min(d, options_.backoff_max);
}

void Supervisor::Run() {
  MutexLock lock(&mu_);
  while (!quit_) {
    std::vector<ProbeTarget> probes;
    bool changed = Step(Clock::now(), &probes);
    if (!probes.empty()) {
      lock.Unlock();
      std::vector<bool> ok;
      ok.reserve(probes.size());
      for (const ProbeTarget& t : probes) {
        auto r = FetchHttp("GET", t.url, t.path, options_.probe_timeout);
        ok.push_back(r.ok() && r->status == 200);
      }
      lock.Lock();
      for (size_t i = 0; i < probes.size(); ++i) changed |= Apply(probes[i], ok[i], Clock::now());
    }
    if (changed) {
      cv_.NotifyAll();
      if (on_change_) {
        auto fn = on_change_;
        lock.Unlock();
        fn();
        lock.Lock();
      }
    }
    if (!quit_) cv_.WaitFor(&mu_, options_.poll_interval);
  }
}

bool Supervisor::Step(Clock::time_point now, std::vector<ProbeTarget>* probes) {
  bool changed = false;
  for (auto it = children_.begin(); it != children_.end();) {
    Child& c = *it->second;
    if (c.st.pid > 0 && Reap(c, now)) {
      changed = true;
      if (c.st.state == ChildState::kStopped) {
        it = children_.erase(it);
        continue;
      }
    }
    const ChildState s = c.st.state;
    if (s == ChildState::kStarting && c.st.pid <= 0) {
      Fork(c, now);
      changed = true;
    } else if (s == ChildState::kBackoff && now >= c.restart_at) {
      c.st.state = ChildState::kStarting;
      ++c.st.restarts;
      Fork(c, now);
      changed = true;
    } else if (s == ChildState::kStopping && now >= c.kill_at) {
      SignalGroup(c.st.pid, SIGKILL);
      c.kill_at = now + std::chrono::hours(1);
    }
    if ((s == ChildState::kStarting || s == ChildState::kReady) && c.st.pid > 0) {
      if (c.st.port == 0) changed |= ReadPort(c);
      if (s == ChildState::kStarting && now - c.st.started_at > c.spec.ready_timeout &&
          c.failing.empty()) {
        c.failing = fmt::format("not ready within {:g} s (log: {})", Seconds(c.spec.ready_timeout),
                                c.spec.log_path);
        std::fprintf(stderr, "strata up: %s: %s\n", c.st.name.c_str(), c.failing.c_str());
        SignalGroup(c.st.pid, SIGKILL);
      } else if (c.st.port > 0 && now >= c.next_probe && c.failing.empty()) {
        if (c.spec.ready_path.empty()) {
          changed |= Apply({c.st.name, "", "", c.st.pid}, true, now);
        } else {
          probes->push_back({c.st.name, c.st.url(), c.spec.ready_path, c.st.pid});
          c.next_probe =
              now + (s == ChildState::kReady ? options_.health_interval : options_.poll_interval);
        }
      }
    }
    ++it;
  }
  return changed;
}

void Supervisor::Fork(Child& c, Clock::time_point now) {
  const int fd = open(c.spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  struct stat sb {};
  c.log_offset = fd >= 0 && fstat(fd, &sb) == 0 ? sb.st_size : 0;
  c.scanned.clear();
  c.failing.clear();
  c.st.port = c.spec.fixed_port;
  c.st.healthy = false;
  c.st.cold_start_s = -1;
  c.st.started_at = now;
  c.next_probe = now;
  std::vector<char*> argv;
  argv.reserve(c.spec.argv.size() + 1);
  for (std::string& a : c.spec.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fd >= 0 ? fork() : -1;
  if (pid == 0) ExecChild(fd, argv.data());
  if (fd >= 0) close(fd);
  if (pid < 0) {  // no log file or no fork: counts as a failed start
    c.st.pid = 0;
    c.st.last_exit = fmt::format("could not start ({})", std::strerror(errno));
    ++c.st.failures;
    c.st.state = ChildState::kBackoff;
    c.restart_at = now + Backoff(c.st.failures);
    return;
  }
  setpgid(pid, pid);
  c.st.pid = pid;
}

bool Supervisor::Reap(Child& c, Clock::time_point now) {
  int st = 0;
  if (waitpid(c.st.pid, &st, WNOHANG) != c.st.pid) return false;
  c.st.pid = 0;
  c.st.healthy = false;
  c.st.last_exit = c.failing.empty() ? ExitText(st) : c.failing;
  if (c.st.state == ChildState::kStopping) {
    c.st.state = ChildState::kStopped;
    return true;
  }
  ++c.st.failures;
  if (!c.spec.restart || c.st.failures >= options_.max_failures) {
    c.st.state = ChildState::kFailed;
    std::fprintf(stderr, "strata up: %s: %s; not restarted (log: %s)\n", c.st.name.c_str(),
                 c.st.last_exit.c_str(), c.spec.log_path.c_str());
    return true;
  }
  const milliseconds wait = Backoff(c.st.failures);
  c.st.state = ChildState::kBackoff;
  c.restart_at = now + wait;
  std::fprintf(stderr, "strata up: %s: %s; restarting in %.1f s (log: %s)\n", c.st.name.c_str(),
               c.st.last_exit.c_str(), Seconds(wait), c.spec.log_path.c_str());
  return true;
}

// Reads the current run's new log output for "listening on http://HOST:PORT".
bool Supervisor::ReadPort(Child& c) {
  if (c.scanned.size() >= kMaxPortScanBytes) return false;
  const int fd = open(c.spec.log_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  const ssize_t n = pread(fd, buf, sizeof buf, c.log_offset + static_cast<off_t>(c.scanned.size()));
  close(fd);
  if (n <= 0) return false;
  c.scanned.append(buf, static_cast<size_t>(n));
  static const std::regex kListening("listening on http://[^:/\\s]+:([0-9]+)");
  std::smatch m;
  if (!std::regex_search(c.scanned, m, kListening)) return false;
  c.st.port = std::stoi(m[1].str());
  return true;
}

bool Supervisor::Apply(const ProbeTarget& t, bool ok, Clock::time_point now) {
  auto it = children_.find(t.name);
  if (it == children_.end() || it->second->st.pid != t.pid) return false;  // gone or restarted
  Child& c = *it->second;
  const bool was_healthy = c.st.healthy;
  c.st.healthy = ok;
  if (ok && c.st.state == ChildState::kStarting) {
    c.st.state = ChildState::kReady;
    c.st.failures = 0;
    c.st.cold_start_s = Seconds(now - c.st.started_at);
    return true;
  }
  return was_healthy != ok;
}

}  // namespace strata::control
