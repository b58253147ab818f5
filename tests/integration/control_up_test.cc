// `strata up` end to end: the real binary runs a deployment spec of the bundled model on
// 127.0.0.1 (gateway, replicas and Debian's Prometheus, all on free ports) and `strata status`
// reports it. Covers: a completion through the gateway, Prometheus scraping every target with the
// pool/replica/version/role labels, a crashed replica restarted, a surge rollout to a new version
// (the new replica ready before the old drains), a canary rollout through the gateway's canary
// (load reaches both arms, promoted → the old replica exits; rolled back → the new one exits and
// the old version keeps serving), a pool at zero whose first request is held, served
// and its cold start reported, a replica that cannot start reported (not waited on), and SIGTERM
// draining everything with exit 0.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "control/queries.h"
#include "integration/http_test_client.h"
#include "integration/run_strata.h"
#include "integration/serve_process.h"
#include "testing/url_text.h"
#include "testing/wait_for.h"

namespace strata::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// A spec: pool `general` (min 1, max 3, versions v1/v2 of the bundled model), pool `idle`
// (min 0: requests with header x-pool: idle), pool `broken` (its replicas exit at once).
std::string Spec(const std::string& extra_pools = "") {
  const std::string serve = "    serve_args: [--threads, '1', --kv-cache-memory, 32MiB]\n";
  return std::string("apiVersion: strata.dev/v1\nkind: Deployment\nmetadata: {name: uptest}\n") +
         "models:\n  - name: tiny\n    versions:\n      - {version: v1, path: " +
         STRATA_DEFAULT_MODEL + "}\n      - {version: v2, path: " + STRATA_DEFAULT_MODEL +
         "}\npools:\n"
         "  - name: general\n    model: tiny\n    version: v1\n    replicas: {min: 1, max: 3}\n"
         "    slo: {e2e_p95_ms: 5000, error_rate: 0.05}\n"
         "    rollout: {strategy: surge}\n" +  // the canary path has tests of its own below
         serve +
         "  - name: idle\n    model: tiny\n    version: v1\n    replicas: {min: 0, max: 1}\n" +
         serve + extra_pools +
         "gateway:\n  port: 0\n  routes:\n"
         "    - {name: idle, match: {headers: {x-pool: idle}}, to: idle}\n"
         "    - {name: default, to: general}\n"
         "  health: {interval_ms: 100}\n"
         "autoscaling: {enabled: false, interval_s: 1, cold_start_hold_ms: 30000}\n"
         "prometheus: {port: 0, scrape_interval_s: 1}\n";
}

class UpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata-up-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    up_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  void StartUp(const std::string& spec, std::vector<std::string> extra = {}) {
    std::ofstream(dir_ / "deploy.yaml") << spec;
    up_ = std::make_unique<ServeProcess>(
        std::vector<std::string>{STRATA_BIN, "up", "-f", (dir_ / "deploy.yaml").string(),
                                 "--state-dir", (dir_ / "state").string(), "--ready-timeout", "60",
                                 "--drain-grace", "10"},
        std::move(extra), "strata up: ready");
    ASSERT_GT(up_->port(), 0) << up_->startup_output();
    gateway_ = up_->port();
  }
  json Status() {
    RunResult r = RunStrata("status --json --state-dir " + (dir_ / "state").string());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out, nullptr, false);
  }
  // The pool's status object (an empty object when absent).
  static json Pool(const json& status, const std::string& name) {
    if (status.is_object() && status.contains("pools") && status["pools"].is_array())
      for (const json& p : status["pools"])
        if (p.value("name", "") == name) return p;
    return json::object();
  }
  // The pool's replicas (an empty array when absent).
  static json Replicas(const json& pool) {
    return pool.contains("replicas") && pool["replicas"].is_array() ? pool["replicas"]
                                                                    : json::array();
  }
  json PromQuery(int prom_port, const std::string& expr) {
    HttpReply r = HttpCall(prom_port, "GET", "/api/v1/query?query=" + Encode(expr));
    json j = json::parse(r.body, nullptr, false);
    if (!j.is_object() || !j.contains("data")) return json::array();
    return j["data"]["result"];
  }
  HttpReply Complete(const std::vector<std::string>& headers = {}) {
    return HttpCall(gateway_, "POST", "/v1/completions",
                    R"({"prompt":"hello","max_tokens":4,"temperature":0})", headers);
  }

  fs::path dir_;
  std::unique_ptr<ServeProcess> up_;
  int gateway_ = 0;
};

TEST_F(UpTest, RunsTheSpecScrapesRestartsRollsOutHoldsFromZeroAndDrainsOnSigterm) {
  StartUp(
      Spec("  - name: broken\n    model: tiny\n    version: v1\n    replicas: {min: 1, max: 1}\n"
           "    serve_args: [--no-such-flag]\n"));
  // A completion through the gateway.
  HttpReply r = Complete();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["x-strata-route"], "default");

  json st = Status();
  const json general = Pool(st, "general");
  ASSERT_EQ(Replicas(general).size(), 1u) << st.dump();
  EXPECT_EQ(general["ready"], 1);
  EXPECT_EQ(Replicas(general)[0]["state"], "ready");
  EXPECT_EQ(Replicas(general)[0]["version"], "v1");
  EXPECT_TRUE(Replicas(general)[0]["cold_start_s"].is_number());
  ASSERT_TRUE(st.contains("prometheus") && st["prometheus"].is_object()) << st.dump();
  EXPECT_EQ(st["prometheus"]["state"], "ready");
  // The broken pool is reported, with its exit and log, and did not hold up the start.
  ASSERT_TRUE(WaitFor(
      [&] {
        const json b = Replicas(Pool(Status(), "broken"));
        return !b.empty() && b[0]["state"] == "failed";
      },
      30));
  const json broken = Replicas(Pool(Status(), "broken"));
  ASSERT_EQ(broken.size(), 1u);
  EXPECT_NE(broken[0]["last_exit"].get<std::string>().find("exit"), std::string::npos);
  EXPECT_TRUE(fs::exists(broken[0]["log"].get<std::string>()));
  RunResult text = RunStrata("status --state-dir " + (dir_ / "state").string());
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("pool general (tiny@v1): 1/1 ready"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("failed"), std::string::npos) << text.out;

  // The gateway's /ui data carries this status (ui.control_url set by `strata up`).
  EXPECT_TRUE(WaitFor(
      [&] {
        const json ui = json::parse(HttpCall(gateway_, "GET", "/ui/data").body, nullptr, false);
        return ui.is_object() && ui.contains("control") && ui["control"].is_object() &&
               ui["control"].contains("pools");
      },
      20));

  // Prometheus scrapes the gateway, the replica and `strata up` itself, with the target labels.
  const int prom = PortOf(st["prometheus"]["url"].get<std::string>());
  ASSERT_TRUE(WaitFor(
      [&] {
        return PromQuery(prom, "up{role=\"replica\",pool=\"general\",version=\"v1\"} == 1")
                       .size() == 1 &&
               PromQuery(prom, "up{role=\"gateway\"} == 1").size() == 1 &&
               PromQuery(prom, "up{role=\"control\"} == 1").size() == 1;
      },
      30));
  ASSERT_TRUE(WaitFor(
      [&] {
        return !PromQuery(prom, "strata:e2e_request_latency_seconds_count{pool=\"general\"}")
                    .empty();
      },
      15));

  // SLO attainment from the scraped histograms: traffic for a few scrapes, then `general` meets
  // its objectives (e2e p95 under 5 s, errors under 5 %) with measured figures.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int i = 0; i < 5; ++i) EXPECT_EQ(Complete().status, 200);
        const json g = Pool(Status(), "general");
        return g.contains("slo_met") && g["slo_met"] == true &&
               g["slo"]["e2e_p95_ms"]["measured"].is_number();
      },
      30));
  text = RunStrata("status --state-dir " + (dir_ / "state").string());
  EXPECT_NE(text.out.find("SLO met"), std::string::npos) << text.out;

  // A crashed replica is restarted (new pid, restarts 1) and serves again.
  const pid_t first = Replicas(Pool(Status(), "general"))[0]["pid"].get<int>();
  ASSERT_GT(first, 0);
  ::kill(first, SIGKILL);
  ASSERT_TRUE(WaitFor(
      [&] {
        const json g = Replicas(Pool(Status(), "general"));
        return g.size() == 1 && g[0]["restarts"] == 1 && g[0]["state"] == "ready";
      },
      30));
  ASSERT_TRUE(WaitFor([&] { return Complete().status == 200; }, 10));

  // Rollout to v2: the v2 replica becomes ready, then the v1 one drains; serving throughout.
  const std::string status_url = st["status_url"].get<std::string>();
  HttpReply ro =
      HttpCall(PortOf(status_url), "POST", "/rollout", R"({"pool":"general","version":"v2"})");
  ASSERT_EQ(ro.status, 202) << ro.body;
  EXPECT_EQ(HttpCall(PortOf(status_url), "POST", "/rollout", R"({"pool":"general","version":"v9"})")
                .status,
            400);
  int failed = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        failed += Complete().status != 200;
        const json g = Replicas(Pool(Status(), "general"));
        return g.size() == 1 && g[0]["version"] == "v2" && g[0]["state"] == "ready";
      },
      60));
  EXPECT_EQ(failed, 0);  // never without a ready replica
  EXPECT_EQ(Pool(Status(), "general")["version"], "v2");

  // From zero: the first request to `idle` is held while its first replica starts, then served.
  EXPECT_EQ(Replicas(Pool(Status(), "idle")).size(), 0u);
  const auto t0 = std::chrono::steady_clock::now();
  HttpReply held = Complete({"x-pool: idle"});
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(held.status, 200) << held.body;
  EXPECT_EQ(held.headers["x-strata-route"], "idle");
  st = Status();
  bool reported = false;
  for (const json& c : st["cold_starts"])
    if (c["pool"] == "idle" && c["from_zero_s"].is_number()) {
      reported = true;
      EXPECT_LE(c["from_zero_s"].get<double>(), waited + 0.5);
    }
  EXPECT_TRUE(reported) << st.dump();
  HttpReply metrics = HttpCall(PortOf(status_url), "GET", "/metrics");
  EXPECT_NE(metrics.body.find("strata_control_cold_start_seconds{pool=\"idle\"}"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("strata_control_scale_from_zero_seconds{pool=\"idle\"}"),
            std::string::npos);

  // SIGTERM: everything drains, exit 0, no child left.
  std::vector<pid_t> pids;
  for (const json& p : Status()["pools"])
    for (const json& rep : Replicas(p))
      if (rep["pid"].get<int>() > 0) pids.push_back(rep["pid"].get<int>());
  pids.push_back(Status()["gateway"]["pid"].get<int>());
  pids.push_back(Status()["prometheus"]["pid"].get<int>());
  up_->Signal(SIGTERM);
  EXPECT_EQ(up_->Wait(60), 0);
  for (pid_t p : pids) EXPECT_NE(::kill(p, 0), 0) << "child " << p << " still runs";
}

// The SLO autoscaler live: pool `general` (min 1, max 3) with an e2e p95 objective of 100 ms that
// a load of 8 concurrent 64-token completions breaks; the count rises, and after the load ends it
// falls back to 1, not before the (test-short, 6 s) scale-down stabilisation window.
TEST_F(UpTest, ALoadStepRaisesTheReplicaCountAndItsEndLowersItAfterTheWindow) {
  std::string spec = Spec();
  const std::string from =
      "autoscaling: {enabled: false, interval_s: 1, cold_start_hold_ms: 30000}";
  spec.replace(spec.find(from), from.size(),
               "autoscaling: {enabled: true, interval_s: 1, scale_down_stabilization_s: 6, "
               "cold_start_hold_ms: 30000}");
  const std::string slo = "slo: {e2e_p95_ms: 5000, error_rate: 0.05}";
  spec.replace(spec.find(slo), slo.size(), "slo: {e2e_p95_ms: 100, error_rate: 0.05}");
  StartUp(spec);
  auto desired = [&] {
    const json g = Pool(Status(), "general");
    return g.contains("desired") && g["desired"].is_number() ? g["desired"].get<int>() : -1;
  };
  ASSERT_EQ(desired(), 1);
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::vector<std::thread> load;
  load.reserve(8);
  for (int i = 0; i < 8; ++i)
    load.emplace_back([&] {
      while (!stop.load())
        ok += HttpCall(gateway_, "POST", "/v1/completions",
                       R"({"prompt":"load step","max_tokens":64,"temperature":0})")
                  .status == 200;
    });
  const bool raised = WaitFor([&] { return desired() >= 2; }, 60);
  // Every expression the autoscaler queries and every recording rule returns data from the
  // Prometheus `strata up` runs (the rules file is loaded: the recorded series exist).
  const int prom = PortOf(Status()["prometheus"]["url"].get<std::string>());
  for (const control::NamedQuery& q : control::AutoscalerQueries("10s")) {
    EXPECT_TRUE(WaitFor([&] { return !PromQuery(prom, q.expr).empty(); }, 20))
        << q.name << ": " << q.expr;
  }
  for (const control::NamedQuery& q : control::RecordingRules()) {
    EXPECT_TRUE(WaitFor([&] { return !PromQuery(prom, q.name).empty(); }, 20))
        << "recorded " << q.name << " = " << q.expr;
  }
  stop = true;
  for (std::thread& t : load) t.join();
  const auto load_end = std::chrono::steady_clock::now();
  ASSERT_TRUE(raised) << Status().dump(2);
  EXPECT_GT(ok.load(), 0);
  const json during = Pool(Status(), "general");
  EXPECT_TRUE(during.contains("decision")) << during.dump();
  ASSERT_TRUE(WaitFor([&] { return desired() == 1; }, 90)) << Status().dump(2);
  const double down_after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_end).count();
  EXPECT_GE(down_after, 5.0);  // the stabilisation window (6 s), less polling slack
  ASSERT_TRUE(WaitFor([&] { return Replicas(Pool(Status(), "general")).size() == 1; }, 30));
  HttpReply metrics =
      HttpCall(PortOf(Status()["status_url"].get<std::string>()), "GET", "/metrics");
  EXPECT_NE(metrics.body.find("strata_control_desired_replicas{pool=\"general\"}"),
            std::string::npos);
  up_->Signal(SIGTERM);
  EXPECT_EQ(up_->Wait(60), 0);
}

TEST_F(UpTest, ABadSpecIsRefusedWithThePath) {
  std::ofstream(dir_ / "bad.yaml") << Spec() + "unknown_key: 1\n";
  RunResult r = RunStrata("up -f " + (dir_ / "bad.yaml").string() + " --state-dir " +
                          (dir_ / "state").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown_key"), std::string::npos) << r.err;
}

// A one-pool spec for the canary rollouts: `general` (1 replica) of versions v1 / v2 (the same
// bundled GGUF), the default route to it, a short canary (steps 50 → 100, 3 requests per arm,
// 1 s per step) with latency guards loose enough for a loaded 2-core machine, and the gateway's
// admin key so the test can watch (and act on) the canary.
std::string CanarySpec() {
  return std::string(
             "apiVersion: strata.dev/v1\nkind: Deployment\nmetadata: {name: canarytest}\n") +
         "models:\n  - name: tiny\n    versions:\n      - {version: v1, path: " +
         STRATA_DEFAULT_MODEL + "}\n      - {version: v2, path: " + STRATA_DEFAULT_MODEL +
         "}\npools:\n"
         "  - name: general\n    model: tiny\n    version: v1\n    replicas: {min: 1, max: 1}\n"
         "    serve_args: [--threads, '1', --kv-cache-memory, 32MiB]\n"
         "rollout:\n  steps: [50, 100]\n  min_requests: 3\n  min_duration_s: 1\n  interval_s: 1\n"
         "  guards: {ttft_p95_max_ratio: 1000, tpot_p95_max_ratio: 1000, "
         "error_rate_max_delta: 0.5}\n"
         "gateway:\n  port: 0\n  admin: {api_key: test-admin}\n  health: {interval_ms: 100}\n"
         "autoscaling: {enabled: false}\n";
}

// Completions from two threads until stopped, counting answers per arm (x-strata-arm) and failures.
class Load {
 public:
  explicit Load(int gateway) {
    for (int i = 0; i < 2; ++i)
      threads_.emplace_back([this, gateway] {
        while (!stop_.load()) {
          HttpReply r = HttpCall(gateway, "POST", "/v1/completions",
                                 R"({"prompt":"hello","max_tokens":4,"temperature":0})");
          std::lock_guard<std::mutex> lock(mu_);
          if (r.status != 200) {
            ++failed_;
            last_failure_ = std::to_string(r.status) + " " + r.body;
          }
          ++by_arm_[r.headers["x-strata-arm"]];  // "" for a route that is not a split
          ok_ += r.status == 200;
        }
      });
  }
  ~Load() { Stop(); }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
  }
  int Arm(const std::string& arm) {
    std::lock_guard<std::mutex> lock(mu_);
    return by_arm_[arm];
  }
  int failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }
  int ok() {
    std::lock_guard<std::mutex> lock(mu_);
    return ok_;
  }
  std::string last_failure() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_failure_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::map<std::string, int> by_arm_;
  int failed_ = 0, ok_ = 0;
  std::string last_failure_;
};

// The gateway's canary of route `default` (null when it has none).
json DefaultCanary(int gateway) {
  HttpReply r = HttpCall(gateway, "GET", "/admin/canary", "", {"Authorization: Bearer test-admin"});
  const json j = json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("canaries") && j["canaries"].is_array())
    for (const json& c : j["canaries"])
      if (c.value("route", "") == "default") return c;
  return nullptr;
}

std::string Phase(const json& pool) {
  return pool.contains("rollout_state") && pool["rollout_state"].is_object()
             ? pool["rollout_state"].value("phase", "")
             : "";
}

TEST_F(UpTest, ACanaryRolloutReachesBothArmsPromotesAndTheOldReplicaExits) {
  StartUp(CanarySpec(), {"--no-prometheus"});
  ASSERT_EQ(Complete().status, 200);
  const json before = Replicas(Pool(Status(), "general"));
  ASSERT_EQ(before.size(), 1u);
  const pid_t old_pid = before[0]["pid"].get<int>();
  const int status_port = PortOf(Status()["status_url"].get<std::string>());
  Load load(gateway_);
  HttpReply ro = HttpCall(status_port, "POST", "/rollout", R"({"pool":"general","version":"v2"})");
  ASSERT_EQ(ro.status, 202) << ro.body;
  // The gateway splits the default route: baseline general, canary general.v2 (its own pool),
  // once the v2 replica is ready; the status reports the rollout's step and weights.
  ASSERT_TRUE(WaitFor([&] { return !DefaultCanary(gateway_).is_null(); }, 60)) << Status().dump(2);
  const json canary = DefaultCanary(gateway_);
  EXPECT_EQ(canary["baseline"], "general");
  EXPECT_EQ(canary["canary"], "general.v2");
  // Another rollout while this one runs is refused (409), the same one is accepted again.
  EXPECT_EQ(
      HttpCall(status_port, "POST", "/rollout", R"({"pool":"general","version":"v1"})").status,
      409);
  EXPECT_EQ(
      HttpCall(status_port, "POST", "/rollout", R"({"pool":"general","version":"v2"})").status,
      202);
  // Promoted: the pool runs v2 alone, the v1 replica has exited, and load reached both arms.
  ASSERT_TRUE(WaitFor([&] { return Phase(Pool(Status(), "general")) == "promoted"; }, 50))
      << Status().dump(2);
  ASSERT_TRUE(WaitFor(
      [&] {
        const json g = Replicas(Pool(Status(), "general"));
        return g.size() == 1 && g[0]["version"] == "v2" && g[0]["state"] == "ready";
      },
      30))
      << Status().dump(2);
  EXPECT_TRUE(WaitFor([&] { return ::kill(old_pid, 0) != 0; }, 20)) << "v1 replica still runs";
  ASSERT_TRUE(WaitFor([&] { return DefaultCanary(gateway_).is_null(); }, 20));  // to: general
  const int baseline = load.Arm("general"), canary_arm = load.Arm("general.v2");
  load.Stop();
  EXPECT_GE(baseline, 3);
  EXPECT_GE(canary_arm, 3);
  EXPECT_EQ(load.failed(), 0) << load.last_failure();
  const json g = Pool(Status(), "general");
  EXPECT_EQ(g["version"], "v2");
  EXPECT_EQ(g["rollout_state"]["strategy"], "canary");
  EXPECT_EQ(g["rollout_state"]["from"], "v1");
  EXPECT_EQ(g["rollout_state"]["to"], "v2");
  EXPECT_NE(g["rollout_state"]["reason"].get<std::string>().find("promote"), std::string::npos);
  RunResult text = RunStrata("status --state-dir " + (dir_ / "state").string());
  EXPECT_NE(text.out.find("pool general (tiny@v2): 1/1 ready"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("last rollout: canary v1 -> v2 promoted"), std::string::npos) << text.out;
  EXPECT_EQ(Complete().status, 200);
  up_->Signal(SIGTERM);
  EXPECT_EQ(up_->Wait(60), 0);
}

TEST_F(UpTest, ARolledBackCanaryStopsTheNewReplicaAndTheOldVersionKeepsServing) {
  StartUp(CanarySpec(), {"--no-prometheus"});
  ASSERT_EQ(Complete().status, 200);
  const json before = Replicas(Pool(Status(), "general"));
  ASSERT_EQ(before.size(), 1u);
  const pid_t old_pid = before[0]["pid"].get<int>();
  // A very long first step: the canary cannot promote before the operator rolls it back.
  std::ofstream(dir_ / "deploy.yaml") << [] {
    std::string spec = CanarySpec();
    const std::string from = "version: v1\n    replicas";
    spec.replace(spec.find(from), from.size(), "version: v2\n    replicas");
    const std::string steps = "min_duration_s: 1";
    spec.replace(spec.find(steps), steps.size(), "min_duration_s: 3600");
    return spec;
  }();
  Load load(gateway_);
  up_->Signal(SIGHUP);  // the spec's version changed: the rollout starts
  ASSERT_TRUE(WaitFor(
      [&] {
        const json c = DefaultCanary(gateway_);
        const json ro = Pool(Status(), "general")["rollout_state"];
        return !c.is_null() && c["window"]["canary"]["requests"].get<int>() >= 1 &&
               ro.is_object() && ro.contains("step");  // `strata up` has seen it too
      },
      60))
      << Status().dump(2);
  const json during = Pool(Status(), "general");
  EXPECT_EQ(Phase(during), "canary") << during.dump(2);
  EXPECT_NE(during["rollout"].get<std::string>().find("v1 -> v2 canary: step 1/2, canary 50 %"),
            std::string::npos)
      << during.dump(2);
  RunResult text = RunStrata("status --state-dir " + (dir_ / "state").string());
  EXPECT_NE(text.out.find("rollout: canary v1 -> v2 canary, step 1/2, canary 50 % (progressing)"),
            std::string::npos)
      << text.out;
  // The gateway's /ui data: its own canaries table and the control plane's rollout state.
  EXPECT_TRUE(WaitFor(
      [&] {
        const json ui = json::parse(HttpCall(gateway_, "GET", "/ui/data").body, nullptr, false);
        if (!ui.is_object() || !ui.contains("canaries") || !ui["canaries"].is_array() ||
            ui["canaries"].empty() || ui["canaries"][0].value("canary", "") != "general.v2")
          return false;
        const json pools = ui.contains("control") && ui["control"].is_object()
                               ? ui["control"].value("pools", json::array())
                               : json::array();
        return !pools.empty() && Phase(pools[0]) == "canary";
      },
      20));
  // The operator rolls the canary back through the gateway's admin API.
  HttpReply rb = HttpCall(gateway_, "POST", "/admin/canary/default/rollback", "",
                          {"Authorization: Bearer test-admin"});
  ASSERT_EQ(rb.status, 200) << rb.body;
  ASSERT_TRUE(WaitFor([&] { return Phase(Pool(Status(), "general")) == "rolled_back"; }, 30))
      << Status().dump(2);
  ASSERT_TRUE(WaitFor(
      [&] {
        const json g = Replicas(Pool(Status(), "general"));
        return g.size() == 1 && g[0]["version"] == "v1" && g[0]["pid"] == old_pid;
      },
      30))
      << Status().dump(2);
  ASSERT_TRUE(WaitFor([&] { return DefaultCanary(gateway_).is_null(); }, 20));  // to: general
  const int served = load.ok();
  ASSERT_TRUE(WaitFor([&] { return load.ok() >= served + 5; }, 20));  // v1 serves on
  load.Stop();
  EXPECT_GE(load.Arm("general.v2"), 1);
  EXPECT_EQ(load.failed(), 0) << load.last_failure();
  const json g = Pool(Status(), "general");
  EXPECT_EQ(g["version"], "v1");
  EXPECT_NE(g["rollout_state"]["reason"].get<std::string>().find("manual_rollback"),
            std::string::npos)
      << g.dump(2);
  text = RunStrata("status --state-dir " + (dir_ / "state").string());
  EXPECT_NE(text.out.find("pool general (tiny@v1): 1/1 ready"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("last rollout: canary v1 -> v2 rolled_back"), std::string::npos)
      << text.out;
  up_->Signal(SIGTERM);
  EXPECT_EQ(up_->Wait(60), 0);
}

// A new version whose replica cannot start (its GGUF does not exist): the rollout is reported
// failed with the replica's exit once the supervisor gives up on it, never split, and v1 serves on.
TEST_F(UpTest, ACanaryRolloutWhoseNewReplicaCannotStartFailsAndTheOldVersionServes) {
  std::string spec = CanarySpec();
  const std::string v2 = std::string("{version: v2, path: ") + STRATA_DEFAULT_MODEL + "}";
  spec.replace(spec.find(v2), v2.size(), "{version: v2, path: /nonexistent/strata-v2.gguf}");
  StartUp(spec, {"--no-prometheus"});
  const int status_port = PortOf(Status()["status_url"].get<std::string>());
  HttpReply ro = HttpCall(status_port, "POST", "/rollout", R"({"pool":"general","version":"v2"})");
  ASSERT_EQ(ro.status, 202) << ro.body;
  int failed = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        failed += Complete().status != 200;
        return Phase(Pool(Status(), "general")) == "failed";
      },
      60))
      << Status().dump(2);
  EXPECT_EQ(failed, 0);
  EXPECT_TRUE(DefaultCanary(gateway_).is_null());  // never split
  const json g = Pool(Status(), "general");
  EXPECT_EQ(g["version"], "v1");
  EXPECT_NE(g["rollout_state"]["reason"].get<std::string>().find("a replica of v2 failed"),
            std::string::npos)
      << g.dump(2);
  ASSERT_TRUE(WaitFor(
      [&] {
        const json reps = Replicas(Pool(Status(), "general"));
        return reps.size() == 1 && reps[0]["version"] == "v1";
      },
      20))
      << Status().dump(2);
  EXPECT_EQ(Complete().status, 200);
  up_->Signal(SIGTERM);
  EXPECT_EQ(up_->Wait(60), 0);
}

// The spec's model name is the name clients send (issue 42): model `m` (versions v1 / v2 of the
// bundled GGUF, whose own name is strata-tiny) answers "model": "m" through the gateway with the
// version in x-strata-model-version, /v1/models lists m alone, the GGUF's name is the replica's
// 404; during a canary rollout both arms answer m (v1 and v2), and after promotion v2 does.
TEST_F(UpTest, TheSpecsModelNameIsWhatClientsSendOnBothArmsOfACanary) {
  std::string spec = CanarySpec();
  for (const auto& [from, to] : std::map<std::string, std::string>{
           {"  - name: tiny\n", "  - name: m\n"}, {"    model: tiny\n", "    model: m\n"}}) {
    const size_t at = spec.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    spec.replace(at, from.size(), to);
  }
  StartUp(spec, {"--no-prometheus"});
  auto complete = [this](const std::string& model) {
    return HttpCall(gateway_, "POST", "/v1/completions",
                    R"({"model":")" + model + R"(","prompt":"hello","max_tokens":4})");
  };
  auto answer_model = [](const HttpReply& r) {
    const json j = json::parse(r.body, nullptr, false);
    return j.is_object() ? j.value("model", "") : "";
  };
  HttpReply r = complete("m");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(answer_model(r), "m");
  EXPECT_EQ(r.headers["x-strata-model-version"], "v1");
  HttpReply other = complete("strata-tiny");
  EXPECT_EQ(other.status, 404) << other.body;
  EXPECT_NE(other.body.find("model_not_found"), std::string::npos) << other.body;
  auto model_ids = [this] {
    const json j = json::parse(HttpCall(gateway_, "GET", "/v1/models").body, nullptr, false);
    std::vector<std::string> ids;
    if (j.is_object() && j.contains("data") && j["data"].is_array())
      for (const json& m : j["data"]) ids.push_back(m.value("id", ""));
    return ids;
  };
  // The gateway refreshes its union of the replicas' models every 2 s.
  EXPECT_TRUE(WaitFor([&] { return model_ids() == std::vector<std::string>{"m"}; }, 20))
      << HttpCall(gateway_, "GET", "/v1/models").body;

  const int status_port = PortOf(Status()["status_url"].get<std::string>());
  HttpReply ro = HttpCall(status_port, "POST", "/rollout", R"({"pool":"general","version":"v2"})");
  ASSERT_EQ(ro.status, 202) << ro.body;
  // Requests name m throughout: before the split (v1), on each arm of it, after promotion (v2).
  std::map<std::string, std::string> version_by_arm;
  int failed = 0;
  std::string last_failure;
  auto send = [&] {
    HttpReply a = complete("m");
    if (a.status != 200 || answer_model(a) != "m") {
      ++failed;
      last_failure = std::to_string(a.status) + " " + a.body;
    } else if (!a.headers["x-strata-arm"].empty()) {
      version_by_arm[a.headers["x-strata-arm"]] = a.headers["x-strata-model-version"];
    }
  };
  ASSERT_TRUE(WaitFor(
      [&] {
        send();
        return Phase(Pool(Status(), "general")) == "promoted";
      },
      90))
      << Status().dump(2);
  EXPECT_EQ(failed, 0) << last_failure;
  EXPECT_EQ(version_by_arm,
            (std::map<std::string, std::string>{{"general", "v1"}, {"general.v2", "v2"}}));
  ASSERT_TRUE(WaitFor(
      [&] {
        HttpReply a = complete("m");
        return a.status == 200 && answer_model(a) == "m" &&
               a.headers["x-strata-model-version"] == "v2" && a.headers["x-strata-arm"].empty();
      },
      30))
      << Status().dump(2);
  EXPECT_EQ(model_ids(), std::vector<std::string>{"m"});
  up_->Signal(SIGTERM);
  EXPECT_EQ(up_->Wait(60), 0);
}

}  // namespace
}  // namespace strata::testing
