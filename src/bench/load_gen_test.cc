// Failure handling of the load generator without a real server: connection refused, a server that
// never answers (timeout), a server that answers garbage. Every request must be counted as failed
// with a message; nothing may throw or hang.
#include "bench/load_gen.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace strata::bench {
namespace {

// A loopback listening socket on a free port.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd, 64);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { Close(); }
  void Close() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

Dataset Tiny(int n) {
  DatasetOptions o;
  o.num_prompts = n;
  o.random_input_len = 4;
  o.random_output_len = 2;
  return *BuildDataset(o);
}

TEST(LoadGen, ConnectionRefusedCountsAsFailed) {
  Listener l;
  int port = l.port;
  l.Close();  // nobody listens there now
  LoadOptions o;
  o.base_url = "http://127.0.0.1:" + std::to_string(port);
  o.model = "m";
  o.max_concurrency = 2;
  auto r = RunLoad(o, Tiny(3));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->records.size(), 3u);
  for (const auto& rec : r->records) {
    EXPECT_FALSE(rec.success);
    EXPECT_NE(rec.error.find("connect"), std::string::npos) << rec.error;
  }
}

TEST(LoadGen, SilentServerTimesOut) {
  Listener l;  // accepts into the backlog, never answers
  LoadOptions o;
  o.base_url = "http://127.0.0.1:" + std::to_string(l.port);
  o.model = "m";
  o.request_rate = 100;
  o.request_timeout_s = 0.3;
  auto t0 = std::chrono::steady_clock::now();
  auto r = RunLoad(o, Tiny(2));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->records.size(), 2u);
  for (const auto& rec : r->records) {
    EXPECT_FALSE(rec.success);
    EXPECT_NE(rec.error.find("timeout"), std::string::npos) << rec.error;
  }
  EXPECT_LT(s, 5.0);
}

TEST(LoadGen, MaxDurationStopsTheRun) {
  Listener l;
  LoadOptions o;
  o.base_url = "http://127.0.0.1:" + std::to_string(l.port);
  o.model = "m";
  o.max_concurrency = 1;
  o.max_duration_s = 0.3;
  auto r = RunLoad(o, Tiny(5));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->records.size(), 1u);  // the one in flight is aborted, the rest never sent
  EXPECT_EQ(r->not_sent, 4);
  EXPECT_NE(r->records[0].error.find("max duration"), std::string::npos) << r->records[0].error;
}

TEST(LoadGen, GarbageResponseIsAnError) {
  Listener l;
  std::atomic<bool> stop{false};
  std::thread server([&] {
    for (int i = 0; i < 2; ++i) {
      int c = accept(l.fd, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      (void)read(c, buf, sizeof buf);
      const char* resp =
          i == 0 ? "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot-json!"
                 : "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 41\r\nConnection: "
                   "close\r\n\r\n{\"error\":{\"message\":\"overloaded, retry\"}}";
      (void)write(c, resp, strlen(resp));
      close(c);
    }
  });
  LoadOptions o;
  o.base_url = "http://127.0.0.1:" + std::to_string(l.port);
  o.model = "m";
  o.max_concurrency = 1;
  o.request_timeout_s = 5;
  auto r = RunLoad(o, Tiny(2));
  server.join();
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->records.size(), 2u);
  EXPECT_FALSE(r->records[0].success);
  EXPECT_FALSE(r->records[0].error.empty());
  EXPECT_FALSE(r->records[1].success);
  EXPECT_NE(r->records[1].error.find("HTTP 503"), std::string::npos) << r->records[1].error;
  EXPECT_NE(r->records[1].error.find("overloaded"), std::string::npos) << r->records[1].error;
}

}  // namespace
}  // namespace strata::bench
