// Every expression of the dashboard and the rules returns data from a real Prometheus: `strata up`
// runs two pools of the bundled model (three replicas with a RAM KV tier), the gateway (two
// tenants, one limited to 1 request/minute) and Debian's Prometheus with the rules file loaded;
// a load of shared-prefix completions, streams, deadline-bound requests (504s; some straight to a
// busy general replica), gold requests that displace waiting bronze ones (429s) and the limited
// tenant (gateway 429s) runs while every
// dashboard target, every recording rule and every alert (the objectives are set so tight that
// they fire) is queried on /api/v1/query and must answer at least one sample.
// The replicas and the gateway export their spans to a collector that is down (port 9): the
// exporter counters' panels read their drops.
//
// STRATA_DASHBOARD_SVG=path: also writes the panels' range-query data as an SVG picture
// (docs/dashboard.svg is one).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "control/dashboard.h"
#include "control/queries.h"
#include "control/spec.h"
#include "integration/dashboard_svg.h"
#include "integration/http_test_client.h"
#include "integration/run_strata.h"
#include "integration/serve_process.h"
#include "testing/url_text.h"
#include "testing/wait_for.h"

namespace strata::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Two pools: `general` (2 replicas, 2 sequences each) and `gold` (1 replica, 1 sequence, a
// queue of 2: deadlines pass and bronze requests get displaced). Objectives of 1 ms (TPOT 0.5 ms:
// the tiny model's token gaps are under 1 ms; that objective is under the smallest latency
// bucket, so it has an alert but no attainment series) and an error budget of 0.01 % make every
// alert fire. Autoscaling on with min = max: the decision is
// published (strata_control_desired_replicas), the count cannot change.
std::string Spec() {
  const std::string serve =
      "[--threads, '1', --kv-cache-memory, 32MiB, --kv-tier-ram, 64MiB, --otlp-endpoint, "
      "'http://127.0.0.1:9'";
  const std::string slo =
      "    slo: {e2e_p95_ms: 1, ttft_p95_ms: 1, tpot_p95_ms: 0.5, error_rate: 0.0001}\n";
  return std::string("apiVersion: strata.dev/v1\nkind: Deployment\nmetadata: {name: dashtest}\n") +
         "models:\n  - name: tiny\n    versions:\n      - {version: v1, path: " +
         STRATA_DEFAULT_MODEL + "}\npools:\n" +
         "  - name: general\n    model: tiny\n    replicas: {min: 2, max: 2}\n" + slo +
         "    serve_args: " + serve + ", --max-num-seqs, '2']\n" +
         "  - name: gold\n    model: tiny\n    replicas: {min: 1, max: 1}\n" + slo +
         "    serve_args: " + serve + ", --max-num-seqs, '1', --max-queued-requests, '2']\n" +
         "gateway:\n  port: 0\n  routes:\n"
         "    - {name: gold, match: {headers: {x-pool: gold}}, to: gold}\n"
         "    - {name: default, to: general}\n"
         "  tenants:\n"
         "    - {name: load, api_keys: [load-key]}\n"
         "    - {name: limited, api_keys: [limited-key], requests_per_minute: 1}\n"
         "  health: {interval_ms: 100}\n"
         "  tracing: {otlp_endpoint: 'http://127.0.0.1:9'}\n"
         "autoscaling: {enabled: true, interval_s: 1}\n"
         "prometheus: {port: 0, scrape_interval_s: 1}\n";
}

class DashboardLiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata-dash-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    Stop();
    up_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  json Status() {
    RunResult r = RunStrata("status --json --state-dir " + (dir_ / "state").string());
    return json::parse(r.out, nullptr, false);
  }
  // The instant query's samples; `ok` false when Prometheus refused the expression.
  json Query(const std::string& expr, bool* ok = nullptr) {
    HttpReply r = HttpCall(prom_, "GET", "/api/v1/query?query=" + Encode(expr));
    json j = json::parse(r.body, nullptr, false);
    const bool good = j.is_object() && j.value("status", "") == "success";
    if (ok != nullptr) *ok = good;
    return good ? j["data"]["result"] : json::array();
  }
  json Range(const std::string& expr, double start, double end, double step) {
    HttpReply r =
        HttpCall(prom_, "GET",
                 fmt::format("/api/v1/query_range?query={}&start={:.3f}&end={:.3f}&step=2",
                             Encode(expr), start, end));
    json j = json::parse(r.body, nullptr, false);
    return j.is_object() && j.value("status", "") == "success" ? j["data"]["result"]
                                                               : json::array();
  }
  HttpReply Complete(const json& body, std::vector<std::string> headers,
                     const std::string& key = "load-key") {
    headers.push_back("Authorization: Bearer " + key);
    return HttpCall(gateway_, "POST", "/v1/completions", body.dump(), headers);
  }
  void Count(int status) { codes_[status >= 0 && status < 600 ? status : 0]++; }
  // The load: see the file comment. Every thread loops until Stop().
  void StartLoad() {
    const auto general = [this](int i) {
      const char* prefixes[] = {"The history of the city begins with",
                                "A recipe for bread:", "Dear customer, thank you for"};
      for (int n = 0; !stop_.load(); ++n) {
        json b = {{"prompt", std::string(prefixes[(i + n) % 3]) + " part " + std::to_string(n % 4)},
                  {"max_tokens", 12},
                  {"temperature", 0},
                  {"stream", n % 2 == 0}};
        Count(Complete(b, {}).status);
      }
    };
    const auto gold_bronze = [this] {
      while (!stop_.load())
        Count(Complete({{"prompt", "bronze work"}, {"max_tokens", 24}, {"priority", "bronze"}},
                       {"x-pool: gold"})
                  .status);
    };
    const auto edge = [this](const std::string& pool) {
      for (int n = 0; !stop_.load(); ++n) {
        // Waits behind the load past its deadline: 504; every other one is gold, which displaces
        // a waiting bronze (its 429) in the gold pool's full queue.
        json b = {{"prompt", "edge"}, {"max_tokens", 4}, {"deadline_ms", 1}};
        if (n % 2 == 1) b["priority"] = "gold";
        Count(Complete(b, {"x-pool: " + pool}).status);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    };
    // The general pool's replica-side 5xx (its error-budget alert): the gateway admits no more
    // than a replica's batch, so a deadline-bound request through it is admitted in time on a
    // fast CPU. Sent straight to one general replica whose two sequences two direct clients keep
    // busy with long gold completions, the bronze one waits for a slot past its 1 ms deadline:
    // 504. A deadline only orders a request among its tier (an urgent request of the same tier is
    // admitted ahead, preempting), so the late ones are bronze; and the hogs' completions are 1024
    // tokens (EOS ignored), so a slot is free only in the moment between one of them ending and
    // the next arriving, however fast the CPU decodes (with 64-token hogs of no tier, a fast CPU
    // served nearly every late request in time: too few 504s for the error-budget alert).
    const auto hog = [this] {
      while (!stop_.load())
        Count(HttpCall(general_replica_, "POST", "/v1/completions",
                       json{{"prompt", "long work"},
                            {"max_tokens", 1024},
                            {"ignore_eos", true},
                            {"temperature", 0},
                            {"priority", "gold"}}
                           .dump())
                  .status);
    };
    const auto late = [this] {
      while (!stop_.load()) {
        Count(HttpCall(general_replica_, "POST", "/v1/completions",
                       json{{"prompt", "late"},
                            {"max_tokens", 4},
                            {"deadline_ms", 1},
                            {"priority", "bronze"}}
                           .dump())
                  .status);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    };
    const auto limited = [this] {
      while (!stop_.load()) {
        Count(Complete({{"prompt", "x"}, {"max_tokens", 2}}, {}, "limited-key").status);
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      }
    };
    for (int i = 0; i < 4; ++i) load_.emplace_back(general, i);
    for (int i = 0; i < 2; ++i) load_.emplace_back(gold_bronze);
    load_.emplace_back(edge, "gold");
    load_.emplace_back(edge, "general");
    load_.emplace_back(limited);
    for (int i = 0; i < 2; ++i) load_.emplace_back(hog);
    load_.emplace_back(late);
  }
  void Stop() {
    stop_ = true;
    for (std::thread& t : load_) t.join();
    load_.clear();
  }
  // Checks `expr` answers a sample (waiting up to `wait_s` for the windows to fill).
  void ExpectData(const std::string& what, const std::string& expr, double wait_s = 30) {
    bool accepted = false;
    if (WaitFor([&] { return !Query(expr, &accepted).empty(); }, wait_s)) return;
    ADD_FAILURE() << what << (accepted ? ": no sample: " : ": refused by Prometheus: ") << expr;
  }

  fs::path dir_;
  std::unique_ptr<ServeProcess> up_;
  int gateway_ = 0;
  int prom_ = 0;
  int general_replica_ = 0;  // one replica of the general pool (from `strata status`)
  std::atomic<bool> stop_{false};
  std::vector<std::thread> load_;
  std::array<std::atomic<int>, 600> codes_{};  // answers by status (0: no answer)
};

TEST_F(DashboardLiveTest, EveryDashboardAndRuleExpressionReturnsDataUnderLoad) {
  std::ofstream(dir_ / "deploy.yaml") << Spec();
  up_ = std::make_unique<ServeProcess>(
      std::vector<std::string>{STRATA_BIN, "up", "-f", (dir_ / "deploy.yaml").string(),
                               "--state-dir", (dir_ / "state").string(), "--ready-timeout", "90",
                               "--drain-grace", "5"},
      std::vector<std::string>{}, "strata up: ready");
  ASSERT_GT(up_->port(), 0) << up_->startup_output();
  gateway_ = up_->port();
  auto spec = control::LoadDeploymentSpec((dir_ / "deploy.yaml").string());
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  const json st = Status();
  ASSERT_TRUE(st.contains("prometheus")) << st.dump();
  prom_ = PortOf(st["prometheus"]["url"].get<std::string>());
  ASSERT_TRUE(st.contains("pools") && st["pools"].is_array()) << st.dump();
  for (const json& p : st["pools"])
    if (p.value("name", "") == "general" && p.contains("replicas") && !p["replicas"].empty() &&
        p["replicas"][0].contains("url"))
      general_replica_ = PortOf(p["replicas"][0]["url"].get<std::string>());
  ASSERT_GT(general_replica_, 0) << st.dump();
  ASSERT_TRUE(WaitFor([&] { return Query(R"(up{role="replica"} == 1)").size() == 3; }, 60))
      << Status().dump(2);

  const double start = static_cast<double>(std::time(nullptr));
  StartLoad();
  std::this_thread::sleep_for(std::chrono::seconds(25));  // a few rate windows of traffic

  // Every target of every dashboard panel (as rendered for this spec).
  int targets = 0;
  for (const control::DashboardRow& row : control::DashboardRows(&*spec))
    for (const control::DashboardPanel& p : row.panels)
      for (const control::DashboardTarget& t : p.targets) {
        ++targets;
        ExpectData(row.title + " / " + p.title + " / " + t.ref_id,
                   control::ExpandDashboardVariables(t.expr, "20s"));
      }
  // Every recording rule: the expression, and the series Prometheus recorded from it.
  std::vector<control::NamedQuery> recorded = control::RecordingRules();
  for (const control::NamedQuery& r : control::SloRecordingRules(*spec)) recorded.push_back(r);
  for (const control::NamedQuery& r : recorded) {
    ExpectData("rule " + r.name, r.expr);
    ExpectData("recorded " + r.name, r.name);
  }
  // Every alert fires (its expression answers samples).
  const std::vector<control::NamedQuery> alerts = control::AlertRules(*spec);
  EXPECT_EQ(alerts.size(), 2u * 2 * 4);  // 2 pools x (3 latency objectives + errors) x 2 pairs
  for (const control::NamedQuery& a : alerts) ExpectData("alert " + a.name, a.expr);
  // And Prometheus's own rule evaluation agrees: the alerts are pending or firing.
  ExpectData("ALERTS", R"(ALERTS{alertname="StrataPoolErrorBudgetBurn"})");

  const double end = static_cast<double>(std::time(nullptr));
  const double step = std::max(2.0, (end - start) / 60);  // about 60 points a series
  std::vector<SvgRow> rows;
  if (const char* path = std::getenv("STRATA_DASHBOARD_SVG")) {
    for (const control::DashboardRow& row : control::DashboardRows(&*spec)) {
      SvgRow r{row.title, {}};
      for (const control::DashboardPanel& p : row.panels) {
        SvgPanel panel{p.title, p.unit, {}};
        for (const control::DashboardTarget& t : p.targets) {
          for (const json& s :
               Range(control::ExpandDashboardVariables(t.expr, "20s"), start, end, step)) {
            std::string name = t.legend;
            for (const auto& [k, v] : s["metric"].items()) {
              const std::string var = "{{" + k + "}}";
              for (size_t at = name.find(var); at != std::string::npos; at = name.find(var))
                name.replace(at, var.size(), v.get<std::string>());
            }
            SvgSeries series{name, {}};
            for (const json& v : s["values"])
              series.points.emplace_back(v[0].get<double>() - start,
                                         std::strtod(v[1].get<std::string>().c_str(), nullptr));
            panel.series.push_back(std::move(series));
          }
        }
        r.panels.push_back(std::move(panel));
      }
      rows.push_back(std::move(r));
    }
    std::ofstream(path) << DashboardSvg(
        "Strata: dashtest (deploy/grafana/strata.json, data from dashboard_live_test)", rows);
  }
  Stop();
  EXPECT_GT(targets, 60);
  EXPECT_GT(codes_[200].load(), 50);
  EXPECT_GT(codes_[429].load(), 0);
  EXPECT_GT(codes_[504].load(), 0);
  std::printf("answers: 200=%d 429=%d 504=%d\n", codes_[200].load(), codes_[429].load(),
              codes_[504].load());
  up_->Signal(SIGTERM);
  EXPECT_EQ(up_->Wait(60), 0);
}

}  // namespace
}  // namespace strata::testing
