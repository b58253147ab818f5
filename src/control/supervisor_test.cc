// The supervisor against real child processes (/bin/sh scripts) and an in-process readiness
// endpoint: the port read from the log, readiness and the cold start, restart with backoff and
// giving up, a child that never becomes ready, and the drain on stop (SIGTERM, then SIGKILL).
#include "control/supervisor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "http/server.h"

namespace strata::control {
namespace {

using std::chrono::milliseconds;

// An HTTP endpoint answering GET /ready with a status the test sets.
class ReadyEndpoint {
 public:
  ReadyEndpoint() {
    http::HttpServerOptions o;
    o.port = 0;
    o.io_threads = 1;
    auto s = http::HttpServer::Start(
        o, [this](const http::HttpRequest&, std::shared_ptr<http::Responder> out) {
          http::HttpResponse r;
          r.status = status_.load();
          r.body = "{}";
          out->Respond(std::move(r));
        });
    if (s.ok()) server_ = std::move(*s);
  }
  int port() const { return server_ ? server_->port() : 0; }
  void Set(int status) { status_.store(status); }

 private:
  std::atomic<int> status_{200};
  std::unique_ptr<http::HttpServer> server_;
};

std::string TempDir() {
  static int n = 0;
  auto d = std::filesystem::path(::testing::TempDir()) /
           ("supervisor_test." + std::to_string(getpid()) + "." + std::to_string(n++));
  std::filesystem::create_directories(d);
  return d.string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  return {std::istreambuf_iterator<char>(f), {}};
}

ChildSpec Shell(const std::string& name, const std::string& script, const std::string& dir) {
  ChildSpec s;
  s.name = name;
  s.argv = {"/bin/sh", "-c", script};
  s.log_path = dir + "/" + name + ".log";
  return s;
}

Supervisor::Options Fast() {
  Supervisor::Options o;
  o.poll_interval = milliseconds(20);
  o.health_interval = milliseconds(50);
  o.backoff_base = milliseconds(50);
  o.backoff_max = milliseconds(200);
  o.max_failures = 3;
  return o;
}

bool WaitFor(const std::function<bool()>& cond, double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return cond();
}

TEST(Supervisor, ReadsThePortFromTheLogAndIsReadyWhenTheProbeAnswers200) {
  ReadyEndpoint ep;
  ASSERT_GT(ep.port(), 0);
  ep.Set(503);
  const std::string dir = TempDir();
  Supervisor sup(Fast());
  ChildSpec s = Shell("r",
                      "echo loading; sleep 0.1; echo listening on http://127.0.0.1:" +
                          std::to_string(ep.port()) + "; exec sleep 30",
                      dir);
  s.labels = {{"pool", "p"}, {"role", "replica"}};
  ASSERT_TRUE(sup.Start(s).ok());
  ASSERT_TRUE(WaitFor([&] { return sup.Find("r")->port == ep.port(); }, 5));
  EXPECT_FALSE(sup.WaitReady("r", milliseconds(200)));  // the probe says 503
  EXPECT_EQ(sup.Find("r")->state, ChildState::kStarting);
  ep.Set(200);
  ASSERT_TRUE(sup.WaitReady("r", milliseconds(5000)));
  const ChildStatus st = *sup.Find("r");
  EXPECT_TRUE(st.healthy);
  EXPECT_GT(st.pid, 0);
  EXPECT_GE(st.cold_start_s, 0.1);
  EXPECT_EQ(st.url(), "http://127.0.0.1:" + std::to_string(ep.port()));
  EXPECT_EQ(st.labels.at("pool"), "p");
  ep.Set(500);  // health of a ready child is followed
  EXPECT_TRUE(WaitFor([&] { return !sup.Find("r")->healthy; }, 5));
  EXPECT_EQ(sup.Find("r")->state, ChildState::kReady);
  EXPECT_NE(ReadFile(s.log_path).find("loading"), std::string::npos);  // stdout goes to the log
}

TEST(Supervisor, RestartsACrashedChildWithBackoffAndGivesUpAfterMaxFailures) {
  const std::string dir = TempDir();
  Supervisor sup(Fast());
  ChildSpec s = Shell("crash", "echo run >&2; exit 3", dir);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(sup.Start(s).ok());
  ASSERT_TRUE(WaitFor([&] { return sup.Find("crash")->state == ChildState::kFailed; }, 10));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ChildStatus st = *sup.Find("crash");
  EXPECT_EQ(st.restarts, 2);  // 3 runs: the first and two restarts
  EXPECT_EQ(st.failures, 3);
  EXPECT_EQ(st.last_exit, "exit 3");
  EXPECT_GE(took, 0.15);  // backoffs of 50 + 100 ms between the runs
  std::string log = ReadFile(s.log_path);
  int runs = 0;
  for (size_t p = log.find("run"); p != std::string::npos; p = log.find("run", p + 1)) ++runs;
  EXPECT_EQ(runs, 3);  // stderr too, appended across restarts
}

TEST(Supervisor, AChildThatNeverBecomesReadyIsReportedAndNotWaitedOnForever) {
  ReadyEndpoint ep;
  ep.Set(503);
  const std::string dir = TempDir();
  Supervisor::Options o = Fast();
  o.max_failures = 1;
  Supervisor sup(o);
  ChildSpec s =
      Shell("stuck",
            "echo listening on http://127.0.0.1:" + std::to_string(ep.port()) + "; sleep 30", dir);
  s.ready_timeout = milliseconds(300);
  ASSERT_TRUE(sup.Start(s).ok());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(sup.WaitReady("stuck", milliseconds(10000)));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  const ChildStatus st = *sup.Find("stuck");
  EXPECT_EQ(st.state, ChildState::kFailed);
  EXPECT_EQ(st.pid, 0);  // killed
  EXPECT_NE(st.last_exit.find("not ready within 0.3 s"), std::string::npos) << st.last_exit;
  EXPECT_NE(st.last_exit.find(s.log_path), std::string::npos);
}

TEST(Supervisor, StopDrainsWithSigtermAndKillsAChildThatIgnoresItAfterTheGrace) {
  const std::string dir = TempDir();
  Supervisor sup(Fast());
  ChildSpec polite = Shell("polite",
                           "trap 'echo drained; exit 0' TERM; echo listening on "
                           "http://127.0.0.1:1; while :; do sleep 0.02; done",
                           dir);
  polite.ready_path = "";  // ready once the port is known
  ChildSpec stubborn =
      Shell("stubborn", "trap '' TERM; echo listening on http://127.0.0.1:2; exec sleep 30", dir);
  stubborn.ready_path = "";
  stubborn.grace = milliseconds(300);
  ASSERT_TRUE(sup.Start(polite).ok());
  ASSERT_TRUE(sup.Start(stubborn).ok());
  ASSERT_TRUE(sup.WaitReady("polite", milliseconds(5000)));
  ASSERT_TRUE(sup.WaitReady("stubborn", milliseconds(5000)));
  EXPECT_EQ(sup.Find("polite")->port, 1);
  const auto t0 = std::chrono::steady_clock::now();
  sup.StopAll();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(sup.Children().empty());
  EXPECT_GE(took, 0.3);  // the stubborn one waited out its grace
  EXPECT_LT(took, 5.0);
  EXPECT_NE(ReadFile(polite.log_path).find("drained"), std::string::npos);
}

TEST(Supervisor, RefusesAMissingBinaryAndADuplicateName) {
  const std::string dir = TempDir();
  Supervisor sup(Fast());
  ChildSpec s = Shell("a", "sleep 5", dir);
  s.argv[0] = dir + "/no-such-binary";
  EXPECT_EQ(sup.Start(s).code(), StatusCode::kNotFound);
  ChildSpec ok = Shell("a", "sleep 5", dir);
  ASSERT_TRUE(sup.Start(ok).ok());
  EXPECT_EQ(sup.Start(ok).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(sup.Stop("nobody"));
}

}  // namespace
}  // namespace strata::control
