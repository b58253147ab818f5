// control/supervisor: the child processes of `strata up` (replicas, the gateway, Prometheus).
// Each child is fork/exec'd in its own process group with its stdout and stderr appended to a log
// file (the state dir's logs/NAME.log), its signal mask cleared and a parent-death signal
// (SIGTERM), so a `strata up` that dies takes its children with it. After a start the log is
// read for "listening on http://HOST:PORT" (the port a child bound with --port 0); then GET
// `ready_path` is polled until 200 (the child is ready; the time from fork to ready is its cold
// start) and afterwards every health interval (healthy or not).
// A child that exits (or crashes) is restarted after an exponential backoff (backoff_base ×
// 2^(k−1), capped at backoff_max; k = failures since it was last ready); one that does not become
// ready within `ready_timeout` is reported (state kFailed... see ChildState, a message naming the
// bound and its log), killed and restarted the same way; after `max_failures` failures in a row
// it stays kFailed and is not restarted.
// Stop drains: SIGTERM to the child's process group, then SIGKILL after the grace period.
//
// Ownership: a Supervisor owns its children and one monitor thread, which alone forks, reaps,
// polls and signals (so the parent-death signal is tied to a thread that outlives the children);
// the destructor stops every child (StopAll with each child's grace) and joins it.
// Thread contract: every public method is thread-safe; the change callback runs on the monitor
// thread, outside the lock (it may call Status()/Find(), not Stop-and-wait methods).
// Errors: Start returns InvalidArgument for a duplicate name or an empty argv and NotFound for a
// binary that is not executable; failures of a running child are states, not errors.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"

namespace strata::control {

struct ChildSpec {
  std::string name;               // unique: "gateway", "general-v1-0", "prometheus"
  std::vector<std::string> argv;  // argv[0]: the binary's path
  std::string log_path;           // stdout + stderr, appended
  // Polled on http://127.0.0.1:PORT once the log names the port; "" = ready when the port is
  // known. `fixed_port` > 0: the port is known in advance (no log line needed).
  std::string ready_path = "/ready";
  int fixed_port = 0;
  std::chrono::milliseconds ready_timeout{120000};  // never ready by then → reported, restarted
  std::chrono::milliseconds grace{30000};           // SIGTERM → SIGKILL on stop
  bool restart = true;                              // restart after an exit
  std::map<std::string, std::string> labels;        // pool, replica, version, role (for status)
};

enum class ChildState {
  kStarting,  // forked, not ready yet
  kReady,     // answered ready_path 200 (`healthy` says whether it still does)
  kBackoff,   // exited or never ready; restarts at `restart_at`
  kFailed,    // max_failures in a row: not restarted
  kStopping,  // SIGTERM sent, draining
  kStopped,   // exited after Stop (then forgotten)
};
std::string_view ChildStateName(ChildState s);  // "starting" "ready" "backoff" "failed" ...

struct ChildStatus {
  std::string name;
  std::map<std::string, std::string> labels;
  ChildState state = ChildState::kStarting;
  bool healthy = false;  // the last probe answered 200
  pid_t pid = 0;
  int port = 0;
  int restarts = 0;          // starts after the first
  int failures = 0;          // in a row, since last ready
  double cold_start_s = -1;  // fork → first ready of the current run (< 0: not ready yet)
  std::string last_exit;     // "exit 1", "signal 9", "not ready within 120 s" ("" = none)
  std::string log_path;
  std::chrono::steady_clock::time_point started_at;
  std::string url() const;  // http://127.0.0.1:PORT ("" while the port is unknown)
};

class Supervisor {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::chrono::milliseconds poll_interval{100};     // reaping, log reading, start-up probes
    std::chrono::milliseconds health_interval{1000};  // probes of ready children
    std::chrono::milliseconds probe_timeout{1000};
    std::chrono::milliseconds backoff_base{500}, backoff_max{30000};
    int max_failures = 5;
  };
  explicit Supervisor(Options options);
  Supervisor() : Supervisor(Options{}) {}
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts a child (forked by the monitor thread within one poll interval).
  Status Start(ChildSpec spec);
  // Begins draining a child (SIGTERM now, SIGKILL after its grace); it is forgotten once reaped.
  // False when there is no such child.
  bool Stop(const std::string& name);
  // Waits until the child is forgotten (true) or the timeout.
  bool WaitGone(const std::string& name, std::chrono::milliseconds timeout);
  // Waits until the child is ready (true), kFailed or gone (false), or the timeout (false).
  bool WaitReady(const std::string& name, std::chrono::milliseconds timeout);
  // Stops the children with `names` (all when empty) together and waits for them.
  void StopAll(const std::vector<std::string>& names = {});

  std::vector<ChildStatus> Children() const;  // by name
  std::optional<ChildStatus> Find(const std::string& name) const;
  // Called on the monitor thread after any child's state, health or port changed.
  void SetOnChange(std::function<void()> fn);

  struct Child;

 private:
  void Run();
  struct ProbeTarget {
    std::string name, url, path;
    pid_t pid;
  };
  // One monitor step under the lock: forks, reaps, ports, timeouts; the probes due (run unlocked).
  bool Step(Clock::time_point now, std::vector<ProbeTarget>* probes) REQUIRES(mu_);
  void Fork(Child& c, Clock::time_point now) REQUIRES(mu_);
  bool Reap(Child& c, Clock::time_point now) REQUIRES(mu_);  // true when it exited
  bool ReadPort(Child& c) REQUIRES(mu_);
  bool Apply(const ProbeTarget& t, bool ok, Clock::time_point now) REQUIRES(mu_);
  std::chrono::milliseconds Backoff(int failures) const;

  const Options options_;
  mutable Mutex mu_;
  CondVar cv_;  // a state change (waiters) or new work (the monitor)
  std::map<std::string, std::unique_ptr<Child>> children_ GUARDED_BY(mu_);
  std::function<void()> on_change_ GUARDED_BY(mu_);
  bool quit_ GUARDED_BY(mu_) = false;
  std::thread monitor_;
};

}  // namespace strata::control
