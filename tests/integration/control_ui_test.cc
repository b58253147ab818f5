// The gateway's status page (/ui) in a real browser (Debian's headless chromium):
//  - against a live `strata up` (gateway, replicas, Debian's Prometheus, the SLO autoscaler; the
//    gateway's `ui.control_url` is the status endpoint `strata up` sets): the DOM the page's
//    script built must show both pools, the replica row with its health, the autoscaler's
//    decisions, the SLO attainment measured from Prometheus and the live charts under load; the
//    screenshot is copied to $STRATA_UI_SCREENSHOT when set (docs/control-ui.png);
//  - against a gateway in front of a real `strata serve` replica and a replica address nobody
//    listens on, with a stand-in control plane (a socket answering a fixed status JSON): the
//    unhealthy replica and a decision with known text.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "integration/http_test_client.h"
#include "integration/run_strata.h"
#include "integration/serve_process.h"
#include "testing/run_command.h"
#include "testing/wait_for.h"

namespace strata::testing {
namespace {

namespace fs = std::filesystem;

std::string Url(int port) { return "http://127.0.0.1:" + std::to_string(port); }

int ListenLoopback(int* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 16) != 0) {
    ::close(fd);
    return -1;
  }
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// The stand-in control plane: answers every request with `body` (application/json) and counts
// the requests.
class FixedJsonServer {
 public:
  explicit FixedJsonServer(std::string body) : body_(std::move(body)) {
    fd_ = ListenLoopback(&port_);
    if (fd_ >= 0) thread_ = std::thread([this] { Loop(); });
  }
  ~FixedJsonServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }
  int requests() const { return requests_.load(); }

 private:
  void Loop() {
    while (!stop_) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::read(c, buf, sizeof(buf));
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      ++requests_;
      const std::string resp =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
          "Content-Length: " +
          std::to_string(body_.size()) + "\r\nConnection: close\r\n\r\n" + body_;
      ssize_t off = 0;
      while (off < static_cast<ssize_t>(resp.size())) {
        ssize_t n = ::write(c, resp.data() + off, resp.size() - static_cast<size_t>(off));
        if (n <= 0) break;
        off += n;
      }
      ::close(c);
    }
  }
  std::string body_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

// chromium headless (the new headless mode), sandbox off (containers), no GPU, nothing fetched
// but the page (no QUIC, no background/component/sync traffic), a fresh profile; the virtual
// time budget lets the page's 2 s polls (real fetches: virtual time waits for them) run a few
// times before the DOM is dumped or the screenshot taken.
std::string Chromium(const fs::path& profile, const std::string& what, const std::string& url,
                     const std::string& window = "1280,1100") {
  return "timeout 180 chromium --headless=new --no-sandbox --disable-gpu --disable-quic "
         "--no-first-run --disable-background-networking --disable-component-update "
         "--disable-sync --disable-dev-shm-usage --user-data-dir=" +
         profile.string() + " --window-size=" + window + " --virtual-time-budget=9000 " + what +
         " '" + url + "' 2>" + profile.string() + ".stderr";
}

// The DOM of `url` after the page's script ran (it polled /ui/data at least twice).
void DumpDom(const fs::path& dir, const std::string& url, std::string* dom) {
  ASSERT_EQ(RunCommand(Chromium(dir / "profile-dom", "--dump-dom", url), dom), 0)
      << *dom << "\n(stderr in " << dir << ")";
  std::smatch m;
  ASSERT_TRUE(std::regex_search(*dom, m, std::regex(R"re(<body data-loaded="(\d+)")re"))) << *dom;
  EXPECT_GE(std::stoi(m[1]), 2) << "the page polled /ui/data at least twice";
}

// A screenshot chromium wrote: a PNG of some size.
void ExpectPng(const fs::path& shot) {
  ASSERT_TRUE(fs::exists(shot));
  EXPECT_GT(fs::file_size(shot), 10000u);
  std::ifstream png(shot, std::ios::binary);
  std::string sig(8, '\0');
  png.read(sig.data(), 8);
  EXPECT_EQ(sig, std::string("\x89PNG\r\n\x1a\n", 8));
}

// The card of pool `pool` in the DOM ("" when absent).
std::string PoolCard(const std::string& dom, const std::string& pool) {
  const size_t card = dom.find(R"(class="card pool" data-pool=")" + pool + "\"");
  if (card == std::string::npos) return "";
  const size_t end = dom.find(R"(class="card pool")", card + 1);
  return dom.substr(card, end == std::string::npos ? std::string::npos : end - card);
}

// The points of the chart polyline of `series` in the card of pool `pool` ("" when absent).
std::string ChartPoints(const std::string& dom, const std::string& pool,
                        const std::string& series) {
  const std::string part = PoolCard(dom, pool);
  std::smatch m;
  const std::regex re(R"re(<polyline points="([^"]*)"[^>]*data-series=")re" + series + "\"");
  return std::regex_search(part, m, re) ? m[1].str() : "";
}

TEST(ControlUi, HeadlessChromiumRendersPoolsReplicasAndDecisions) {
  std::string out;
  if (RunCommand("command -v chromium", &out) != 0)
    GTEST_SKIP() << "chromium not installed (scripts/install-deps.sh)";
  const fs::path dir = fs::temp_directory_path() / ("strata-ui-" + std::to_string(::getpid()));
  fs::create_directories(dir);

  ServeProcess replica({STRATA_BIN, "serve", "--port", "0", "--model", STRATA_DEFAULT_MODEL,
                        "--threads", "1", "--kv-cache-memory", "32MiB"},
                       {});
  ASSERT_GT(replica.port(), 0) << replica.startup_output();
  int dead_port = 0;
  const int dead_fd = ListenLoopback(&dead_port);  // bound, then closed: nobody listens there
  ::close(dead_fd);
  const std::string reason = "slo: p95 0.41 s > 0.30 s at 1 -> 2";
  FixedJsonServer control(nlohmann::json{
      {"pools",
       {{{"pool", "general"},
         {"current", 1},
         {"desired", 2},
         {"reason", reason},
         {"slo", {{"e2e_p95_ms", 300}, {"attainment", 0.97}}}},
        {{"pool", "spare"}, {"current", 0}, {"desired", 0}, {"reason", "idle -> 0"}}}}}
                              .dump());
  ASSERT_GT(control.port(), 0);

  const std::string yaml =
      "pools:\n  - name: general\n    labels: {model: strata-tiny}\n"
      "    replicas: [" +
      Url(replica.port()) + "]\n  - name: spare\n    replicas: [" + Url(dead_port) +
      "]\nroutes:\n  - name: default\n    to: general\n"
      "health:\n  interval_ms: 100\n  timeout_ms: 500\n"
      "access_log: off\nui:\n  control_url: " +
      Url(control.port()) + "/status\n";
  const std::string config = (dir / "gateway.yaml").string();
  std::ofstream(config) << yaml;
  ServeProcess gateway({STRATA_BIN, "gateway", "--config", config, "--port", "0"}, {},
                       "strata gateway: ready");
  ASSERT_GT(gateway.port(), 0) << gateway.startup_output();
  for (int i = 0; i < 200 && HttpCall(gateway.port(), "GET", "/ready").status != 200; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  ASSERT_EQ(HttpCall(gateway.port(), "GET", "/ready").status, 200);
  const std::string body = R"({"prompt":"hello","max_tokens":4,"temperature":0})";
  ASSERT_EQ(HttpCall(gateway.port(), "POST", "/v1/completions", body).status, 200);

  // /ui/data has the control plane's answer once the gateway fetched it (every 2 s).
  nlohmann::json data;
  for (int i = 0; i < 100; ++i) {
    data = nlohmann::json::parse(HttpCall(gateway.port(), "GET", "/ui/data").body, nullptr, false);
    if (data.is_object() && data["control"].is_object()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(data.is_object() && data["control"].is_object()) << data.dump();
  EXPECT_EQ(data["control"]["pools"][0]["reason"], reason);
  EXPECT_GE(control.requests(), 1);
  const HttpReply page = HttpCall(gateway.port(), "GET", "/ui");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.headers.at("content-type"), "text/html; charset=utf-8");

  const std::string ui = Url(gateway.port()) + "/ui";
  ASSERT_NO_FATAL_FAILURE(DumpDom(dir, ui, &out));
  EXPECT_NE(out.find(R"(class="card pool" data-pool="general")"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(class="card pool" data-pool="spare")"), std::string::npos) << out;
  EXPECT_NE(
      out.find(R"(class="replica" data-url=")" + Url(replica.port()) + R"(" data-eligible="true")"),
      std::string::npos)
      << out;
  EXPECT_NE(
      out.find(R"(class="replica" data-url=")" + Url(dead_port) + R"(" data-eligible="false")"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find(R"(data-ready="1">1/1 ready)"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(data-ready="0">0/1 ready)"), std::string::npos) << out;
  // The autoscaler's decision, as the DOM serializes text ('>' as &gt;).
  EXPECT_NE(out.find("slo: p95 0.41 s &gt; 0.30 s at 1 -&gt; 2"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(class="control-pool" data-pool="general")"), std::string::npos) << out;
  EXPECT_NE(out.find("slo.attainment"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(class="route" data-route="default")"), std::string::npos) << out;
  // Live charts: one polyline per series with points (at least two samples).
  EXPECT_TRUE(std::regex_search(
      out,
      std::regex(
          R"(<polyline points="[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+[^"]*"[^>]*data-series="desired")")))
      << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex(R"(<polyline points="[0-9.]+,[0-9.]+ [^"]*"[^>]*data-series="ready")")))
      << out;

  const fs::path shot = dir / "control-ui.png";
  ASSERT_EQ(RunCommand(Chromium(dir / "profile-shot", "--screenshot=" + shot.string(), ui), &out),
            0)
      << out;
  ExpectPng(shot);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// The live deployment: pool `general` (min 1, max 2) and pool `batch` (min 0: at zero until a
// request with header x-pool: batch arrives), objectives the tiny model meets on a loaded
// machine, the autoscaler every 2 s, Prometheus scraping every second; the gateway's /ui gets
// `ui.control_url` = the status endpoint from `strata up` (the spec's gateway: sets no `ui`).
std::string LiveSpec() {
  const std::string serve = "    serve_args: [--threads, '1', --kv-cache-memory, 32MiB]\n";
  return std::string("apiVersion: strata.dev/v1\nkind: Deployment\nmetadata: {name: uitest}\n") +
         "models:\n  - name: tiny\n    versions:\n      - {version: v1, path: " +
         STRATA_DEFAULT_MODEL +
         "}\npools:\n"
         "  - name: general\n    model: tiny\n    replicas: {min: 1, max: 2}\n"
         "    slo: {e2e_p95_ms: 5000, ttft_p95_ms: 5000, error_rate: 0.05}\n" +
         serve +
         "  - name: batch\n    model: tiny\n    replicas: {min: 0, max: 1}\n"
         "    slo: {e2e_p95_ms: 5000}\n" +
         serve +
         "gateway:\n  port: 0\n  routes:\n"
         "    - {name: batch, match: {headers: {x-pool: batch}}, to: batch}\n"
         "    - {name: default, to: general}\n"
         "  health: {interval_ms: 200}\n"
         "autoscaling: {interval_s: 2, scale_to_zero_idle_s: 3600}\n"
         "prometheus: {port: 0, scrape_interval_s: 1}\n";
}

// The integer the control plane's table shows in row `key` for its first pool (the spec's first,
// general); -1 when absent.
int ControlFirstPoolNumber(const std::string& dom, const std::string& key) {
  std::smatch m;
  const std::regex re("<tr data-key=\"" + key + "\"><th>" + key +
                      R"(</th><td class="num">(\d+)</td>)");
  return std::regex_search(dom, m, re) ? std::stoi(m[1].str()) : -1;
}

// A pool card's badge for `n` replicas, all of them ready.
std::string AllReadyBadge(int n) {
  const std::string c = std::to_string(n);
  return "data-ready=\"" + c + "\">" + c + "/" + c + " ready";
}

// A decision of the SLO rule at `n` replicas, as the DOM serializes it ('>' as &gt;): the
// autoscaler's reasoning (the measured rate and the predicted p95 at its count), usually "keep
// n", but a slow or loaded machine can make the model ask for a second replica at 1 ("-> 2", or
// "2 would do" while stabilizing), and at 2 hold it ("1 would do" while stabilizing).
std::regex SloReason(int n) {
  const std::string c = std::to_string(n);
  return std::regex(
      R"(<td>(slo|saturated|stabilizing up|stabilizing): [0-9.]+ req/s, predicted e2e p95 )"
      R"([^<]* at )" +
      c + R"(, measured [^<]*(, keep )" + c + R"(| -&gt; 2[^<]*|, [12] would do[^<]*)</td>)");
}

// Completions through the gateway from `threads` threads, each pausing `pause_ms` between
// requests, until destroyed; counts the 200s.
class Load {
 public:
  Load(int port, int threads, int pause_ms) {
    for (int i = 0; i < threads; ++i)
      threads_.emplace_back([this, port, pause_ms] {
        while (!stop_) {
          const HttpReply r =
              HttpCall(port, "POST", "/v1/completions",
                       R"({"prompt":"hello","max_tokens":384,"ignore_eos":true,"temperature":0})");
          ok_ += r.status == 200;
          std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
        }
      });
  }
  ~Load() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
  }
  int ok() const { return ok_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> ok_{0};
  std::vector<std::thread> threads_;
};

// The pool `name` of a `strata status --json` answer (an empty object when absent).
nlohmann::json StatusPool(const nlohmann::json& status, const std::string& name) {
  if (status.is_object() && status.contains("pools") && status["pools"].is_array())
    for (const nlohmann::json& p : status["pools"])
      if (p.is_object() && p.contains("name") && p["name"] == name) return p;
  return nlohmann::json::object();
}

// The y coordinates of a polyline's points ("x,y x,y ...").
std::vector<double> Ys(const std::string& points) {
  std::vector<double> ys;
  std::regex re(R"(([0-9.]+),([0-9.]+))");
  for (std::sregex_iterator it(points.begin(), points.end(), re), end; it != end; ++it)
    ys.push_back(std::stod((*it)[2].str()));
  return ys;
}

TEST(ControlUi, LiveStrataUpInHeadlessChromium) {
  std::string out;
  if (RunCommand("command -v chromium", &out) != 0)
    GTEST_SKIP() << "chromium not installed (scripts/install-deps.sh)";
  if (RunCommand("command -v prometheus", &out) != 0)
    GTEST_SKIP() << "prometheus not installed (scripts/install-deps.sh)";
  const fs::path dir = fs::temp_directory_path() / ("strata-ui-live-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "deploy.yaml") << LiveSpec();
  const std::string state = (dir / "state").string();
  ServeProcess up({STRATA_BIN, "up", "-f", (dir / "deploy.yaml").string(), "--state-dir", state,
                   "--ready-timeout", "120", "--drain-grace", "10"},
                  {}, "strata up: ready");
  ASSERT_GT(up.port(), 0) << up.startup_output();
  const int gateway = up.port();
  const auto status = [&] {
    RunResult r = RunStrata("status --json --state-dir " + state);
    return r.exit_code == 0 ? nlohmann::json::parse(r.out, nullptr, false) : nlohmann::json();
  };

  // Load through the gateway for the rest of the test: Prometheus scrapes it, the autoscaler
  // decides on it, the page charts it.
  ASSERT_TRUE(WaitFor(
      [&] {
        return HttpCall(gateway, "POST", "/v1/completions",
                        R"({"prompt":"hello","max_tokens":4,"temperature":0})")
                   .status == 200;
      },
      60));
  // Two clients of 384-token completions (~0.1 s each), 20 ms apart: nearly always one in flight
  // (the load chart) at some 15 requests/s, which one replica holds (the autoscaler keeps 1; on a
  // slow or loaded machine it may add the second the pool allows).
  Load load(gateway, 2, 20);

  // `strata up` knows the replicas (every one ready), the SLO attainment measured from Prometheus
  // (over the 1 m window: a few scrapes with traffic) and an autoscaler decision for both pools.
  nlohmann::json st, general, batch;
  const bool settled = WaitFor(
      [&] {
        st = status();
        general = StatusPool(st, "general");
        batch = StatusPool(st, "batch");
        return general.contains("replicas") && general["replicas"].is_array() &&
               !general["replicas"].empty() && general["ready"] == general["replicas"].size() &&
               general["slo_met"] == true && general.contains("decision") &&
               batch.contains("decision");
      },
      180);
  ASSERT_TRUE(settled) << st.dump();
  const nlohmann::json& replica = general["replicas"][0];
  ASSERT_TRUE(replica.contains("url") && replica["url"].is_string()) << replica.dump();
  const std::string replica_url = replica["url"].get<std::string>();
  ASSERT_TRUE(st.contains("status_url") && st["status_url"].is_string()) << st.dump();
  const std::string control_url = st["status_url"].get<std::string>() + "/status";
  // The gateway's /ui/data carries that status (it fetches ui.control_url every 2 s).
  ASSERT_TRUE(WaitFor(
      [&] {
        const nlohmann::json d =
            nlohmann::json::parse(HttpCall(gateway, "GET", "/ui/data").body, nullptr, false);
        return d.is_object() && d.contains("control_url") && d["control_url"] == control_url &&
               StatusPool(d["control"], "general").contains("decision");
      },
      30));

  const std::string ui = Url(gateway) + "/ui";
  // The page shows the control status the gateway last fetched (every 2 s) next to the pools as
  // the gateway sees them now, and the general pool's decision is re-made every interval: an
  // early copy has no measurements yet ("0.00 req/s ... measured -", SLO "no data"), a scrape
  // that misses a replica gives one "waiting: 0 of 1 replicas report metrics" between SLO
  // decisions, and while the autoscaler adds a replica the two sides differ for a moment (the
  // gateway already routes to a second replica the copy of the status does not count yet). So
  // the DOM is read again until it shows a measured SLO verdict, a decision of the SLO rule at
  // general's count and the gateway's pool at the count the control plane reports ready.
  const std::regex e2e_met(R"(<td>[0-9.e+]+ / 5000 met</td>)");
  const auto consistent = [&] {
    const int n = ControlFirstPoolNumber(out, "ready");
    return n >= 1 && PoolCard(out, "general").find(AllReadyBadge(n)) != std::string::npos &&
           std::regex_search(out, SloReason(n)) && std::regex_search(out, e2e_met);
  };
  const auto dom_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  do {
    ASSERT_NO_FATAL_FAILURE(DumpDom(dir, ui, &out));
    if (consistent()) break;
    std::this_thread::sleep_for(std::chrono::seconds(2));
  } while (std::chrono::steady_clock::now() < dom_deadline);
  // general's replicas as the control plane counts them ready (1, or 2 once the autoscaler added
  // one): the gateway's pool shows that many, all ready.
  const int general_ready = ControlFirstPoolNumber(out, "ready");
  ASSERT_GE(general_ready, 1) << out;
  // Both pools; general's replica rows with their health, batch at zero.
  EXPECT_NE(out.find(R"(class="card pool" data-pool="general")"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(class="card pool" data-pool="batch")"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(<tr class="replica" data-url=")" + replica_url +
                     R"(" data-eligible="true"><td>)" + replica_url +
                     R"(</td><td><span class="badge ok">ready</span></td>)"),
            std::string::npos)
      << out;
  EXPECT_NE(PoolCard(out, "general").find(AllReadyBadge(general_ready)), std::string::npos) << out;
  EXPECT_NE(out.find(R"(data-ready="0">0/0 ready)"), std::string::npos) << out;
  EXPECT_NE(out.find("no replicas (scaled to zero?)"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(class="route" data-route="batch")"), std::string::npos) << out;
  // The autoscaler's decisions from `strata up`'s status: general's SLO reasoning (read above),
  // batch stays at zero without demand.
  EXPECT_NE(out.find("from " + control_url), std::string::npos) << out;
  EXPECT_NE(out.find(R"(class="control-pool" data-pool="general")"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(class="control-pool" data-pool="batch")"), std::string::npos) << out;
  EXPECT_NE(out.find("<th>decision.reason</th>"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, SloReason(general_ready))) << out;
  EXPECT_NE(out.find("<td>idle at 0</td>"), std::string::npos) << out;
  // SLO attainment: the verdict and each objective as "measured / target verdict".
  EXPECT_NE(out.find("<th>slo_met</th>"), std::string::npos) << out;
  EXPECT_NE(out.find("<th>slo.e2e_p95_ms</th>"), std::string::npos) << out;
  EXPECT_NE(out.find("<th>slo.ttft_p95_ms</th>"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, e2e_met)) << out;
  // Live charts of general: load, ready and desired with two or more samples each; the load
  // line leaves the zero line (y = 86) at some sample.
  for (const char* series : {"load", "ready", "desired"})
    EXPECT_GE(Ys(ChartPoints(out, "general", series)).size(), 2u) << series << "\n" << out;
  const std::vector<double> load_ys = Ys(ChartPoints(out, "general", "load"));
  EXPECT_TRUE(std::any_of(load_ys.begin(), load_ys.end(), [](double y) { return y < 85.9; }))
      << ChartPoints(out, "general", "load");

  const fs::path shot = dir / "control-ui.png";
  ASSERT_EQ(
      RunCommand(Chromium(dir / "profile-shot", "--screenshot=" + shot.string(), ui, "1400,1200"),
                 &out),
      0)
      << out;
  ExpectPng(shot);
  if (const char* copy = std::getenv("STRATA_UI_SCREENSHOT"))
    fs::copy_file(shot, copy, fs::copy_options::overwrite_existing);
  EXPECT_GT(load.ok(), 0);

  up.Signal(SIGTERM);
  EXPECT_EQ(up.Wait(60), 0) << "strata up drains and exits 0 on SIGTERM";
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace strata::testing
