// End-to-end test of the end of a SIGTERM drain: `strata serve` (real binary, port 0, bundled
// model) with --shutdown-timeout 0, so requests still running at SIGTERM are cut at once. A cut
// stream must end with an SSE error event (OpenAI error object) and [DONE], not a bare close; a
// cut non-streamed request gets a 503 with an OpenAI error body; the process still exits 0.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "integration/http_test_client.h"
#include "integration/serve_process.h"

namespace {

using nlohmann::json;
using strata::testing::HttpConn;
using strata::testing::ServeProcess;
using strata::testing::SseData;

// Polls /metrics until `needle` appears (up to 20 s).
bool MetricsContain(int port, const std::string& needle) {
  for (int i = 0; i < 1000; ++i) {
    if (strata::testing::HttpCall(port, "GET", "/metrics").body.find(needle) != std::string::npos)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(Shutdown, TimeoutCutsStreamsWithAnErrorEventAndDoneAndPlainRequestsWith503) {
  ServeProcess s({"--shutdown-timeout", "0"});
  ASSERT_GT(s.port(), 0);
  const int port = s.port();
  // Long generations: they cannot finish before the cut.
  const json stream_body = {
      {"prompt", "Count"}, {"max_tokens", 2000}, {"ignore_eos", true}, {"stream", true}};
  HttpConn streamed(port);
  ASSERT_TRUE(streamed.Send("POST", "/v1/completions", stream_body.dump()));
  ASSERT_TRUE(streamed.ReadUntil(
      [](const std::string& b) { return b.find("\"text\"") != std::string::npos; }));
  HttpConn plain(port);
  ASSERT_TRUE(
      plain.Send("POST", "/v1/completions",
                 json{{"prompt", "Count"}, {"max_tokens", 2000}, {"ignore_eos", true}}.dump()));
  ASSERT_TRUE(MetricsContain(port, "strata:num_requests_running{model_name=\"strata-tiny\"} 2"));
  s.Signal(SIGTERM);

  strata::testing::HttpReply r = streamed.ReadResponse();
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 200);
  ASSERT_GE(r.body.size(), 14u);
  EXPECT_EQ(r.body.substr(r.body.size() - 14), "data: [DONE]\n\n");  // not a bare close
  auto events = SseData(r.body);
  ASSERT_GE(events.size(), 2u);
  json err = json::parse(events[events.size() - 2], nullptr, false);
  ASSERT_TRUE(err.contains("error")) << events[events.size() - 2];
  EXPECT_EQ(err["error"]["type"], "service_unavailable");
  EXPECT_EQ(err["error"]["code"], "shutdown");
  EXPECT_NE(err["error"]["message"].get<std::string>().find("--shutdown-timeout"),
            std::string::npos);

  strata::testing::HttpReply p = plain.ReadResponse();
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.status, 503);
  json perr = json::parse(p.body, nullptr, false);
  ASSERT_TRUE(perr.contains("error")) << p.body;
  EXPECT_EQ(perr["error"]["type"], "service_unavailable");
  EXPECT_EQ(s.Wait(30), 0);
}

}  // namespace
