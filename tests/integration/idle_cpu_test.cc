// An idle `strata serve` uses no CPU: after serving requests (streamed and not), with one
// keep-alive connection left open and no request in flight, the process's user+system time
// (/proc/<pid>/stat utime + stime) must not grow by more than a couple of clock ticks over a few
// seconds. Before push notification the SSE pump polled every stream every 0.5 ms (3-4 % of a
// core: ~10 ticks in 3 s), so this test fails on any periodic wake-up that comes back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "integration/http_test_client.h"
#include "integration/serve_process.h"

namespace {

using nlohmann::json;
using strata::testing::HttpCall;
using strata::testing::HttpConn;
using strata::testing::ServeProcess;

// utime + stime of `pid`, in clock ticks; -1 when unreadable.
long long CpuTicks(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), {});
  size_t close = stat.rfind(')');  // the command name may contain spaces
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  long long utime = -1, stime = -1;
  for (int i = 3; rest >> field; ++i) {  // field 3 is the state
    if (i == 14) utime = std::stoll(field);
    if (i == 15) {
      stime = std::stoll(field);
      break;
    }
  }
  return utime < 0 || stime < 0 ? -1 : utime + stime;
}

TEST(IdleServe, UsesNoCpuWhileIdle) {
  ServeProcess p({});
  ASSERT_NE(p.port(), 0) << "server did not become ready";
  // Exercise the paths that start threads and streams: a plain and a streamed completion.
  json body = {{"prompt", "hello"}, {"max_tokens", 4}, {"temperature", 0}};
  ASSERT_EQ(HttpCall(p.port(), "POST", "/v1/completions", body.dump()).status, 200);
  body["stream"] = true;
  ASSERT_EQ(HttpCall(p.port(), "POST", "/v1/completions", body.dump()).status, 200);
  // An idle keep-alive connection stays open throughout.
  HttpConn keep(p.port());
  ASSERT_TRUE(keep.connected());
  ASSERT_TRUE(keep.Send("GET", "/health", ""));
  ASSERT_EQ(keep.ReadResponse().status, 200);

  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let the last replies settle
  const long long before = CpuTicks(p.pid());
  ASSERT_GE(before, 0);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const long long after = CpuTicks(p.pid());
  ASSERT_GE(after, 0);
  EXPECT_LE(after - before, 2) << "idle `strata serve` used " << (after - before)
                               << " clock ticks (1/" << sysconf(_SC_CLK_TCK) << " s each) in 3 s";
  // Still serving afterwards.
  EXPECT_EQ(HttpCall(p.port(), "GET", "/health").status, 200);
}

}  // namespace
