// The gateway's status page (/ui) in a real browser: a live `strata gateway` in front of a real
// `strata serve` replica (and a replica address nobody listens on), with `ui.control_url`
// pointing at a stand-in control plane (a socket in this test answering a fixed status JSON),
// opened by Debian's headless chromium. The DOM the page's script built must show both pools,
// the ready and the unhealthy replica, the control plane's decision and the live charts; a
// screenshot is taken (and copied to $STRATA_UI_SCREENSHOT when set: docs/control-ui.png).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
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
#include "integration/serve_process.h"

namespace strata::testing {
namespace {

namespace fs = std::filesystem;

int RunCmd(const std::string& cmd, std::string* out) {
  out->clear();
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::array<char, 8192> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out->append(buf.data(), n);
  int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

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

// chromium as the brief of the page's test says: headless, sandbox off (containers), no GPU,
// nothing fetched but the page (no QUIC, no background/component/sync traffic), a fresh profile.
std::string Chromium(const fs::path& profile, const std::string& what, const std::string& url) {
  return "timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic "
         "--no-first-run --disable-background-networking --disable-component-update "
         "--disable-sync --disable-dev-shm-usage --user-data-dir=" +
         profile.string() + " --window-size=1280,1100 --virtual-time-budget=9000 " + what + " '" +
         url + "' 2>" + profile.string() + ".stderr";
}

TEST(ControlUi, HeadlessChromiumRendersPoolsReplicasAndDecisions) {
  std::string out;
  if (RunCmd("command -v chromium", &out) != 0)
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
  ASSERT_EQ(RunCmd(Chromium(dir / "profile-dom", "--dump-dom", ui), &out), 0)
      << out << "\n(stderr in " << dir << ")";
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"re(<body data-loaded="(\d+)")re"))) << out;
  EXPECT_GE(std::stoi(m[1]), 2) << "the page polled /ui/data at least twice";
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
  ASSERT_EQ(RunCmd(Chromium(dir / "profile-shot", "--screenshot=" + shot.string(), ui), &out), 0)
      << out;
  ASSERT_TRUE(fs::exists(shot));
  EXPECT_GT(fs::file_size(shot), 10000u);
  std::ifstream png(shot, std::ios::binary);
  std::string sig(8, '\0');
  png.read(sig.data(), 8);
  EXPECT_EQ(sig, std::string("\x89PNG\r\n\x1a\n", 8));
  if (const char* copy = std::getenv("STRATA_UI_SCREENSHOT"))
    fs::copy_file(shot, copy, fs::copy_options::overwrite_existing);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace strata::testing
