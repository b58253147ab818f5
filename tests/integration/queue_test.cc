// End-to-end tests of the waiting queue of `strata serve` (real binary, port 0, bundled model) with
// one sequence slot, so a second request waits behind a long first one: a request whose deadline
// (body `deadline_ms` or header `x-strata-deadline-ms`) passes while it waits gets 504 (streamed:
// an SSE error event, then [DONE]); at a full queue a gold request displaces the waiting bronze,
// which gets 429 with Retry-After.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "integration/http_test_client.h"
#include "integration/serve_process.h"

namespace {

using nlohmann::json;
using strata::testing::HttpCall;
using strata::testing::HttpConn;
using strata::testing::ServeProcess;
using strata::testing::SseData;

// Polls /metrics until `needle` appears (up to 20 s).
bool MetricsContain(int port, const std::string& needle) {
  for (int i = 0; i < 1000; ++i) {
    if (HttpCall(port, "GET", "/metrics").body.find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Starts a long gold stream that holds the only sequence slot (nothing the tests send later
// outranks it, so nothing preempts it); returns once it is running.
void HoldTheSlot(int port, HttpConn* c) {
  const json body = {{"prompt", "Count"},
                     {"max_tokens", 2000},
                     {"ignore_eos", true},
                     {"priority", "gold"},
                     {"stream", true}};
  ASSERT_TRUE(c->Send("POST", "/v1/completions", body.dump()));
  ASSERT_TRUE(
      c->ReadUntil([](const std::string& b) { return b.find("\"text\"") != std::string::npos; }));
}

// Queues `n` more long gold requests behind the slot's holder: a silver request sent after them
// waits for all of them (gold is admitted first), so it waits for n + 1 long generations however
// fast the CPU decodes the tiny model (one 2000-token generation can take well under 100 ms).
std::vector<std::unique_ptr<HttpConn>> QueueGoldsAhead(int port, int n) {
  std::vector<std::unique_ptr<HttpConn>> golds;
  for (int i = 0; i < n; ++i) {
    golds.push_back(std::make_unique<HttpConn>(port));
    EXPECT_TRUE(golds.back()->Send(
        "POST", "/v1/completions",
        json{{"prompt", "Count"}, {"max_tokens", 2000}, {"ignore_eos", true}, {"priority", "gold"}}
            .dump()));
  }
  return golds;
}

TEST(Queue, DeadlinePassedWhileWaitingIs504OrAStreamedErrorEvent) {
  ServeProcess s({"--max-num-seqs", "1"});
  ASSERT_GT(s.port(), 0);
  const int port = s.port();
  HttpConn holder(port);
  HoldTheSlot(port, &holder);
  auto golds = QueueGoldsAhead(port, 3);
  auto plain = HttpCall(port, "POST", "/v1/completions",
                        json{{"prompt", "x"}, {"max_tokens", 4}, {"deadline_ms", 20}}.dump());
  EXPECT_EQ(plain.status, 504) << plain.body;
  json e = json::parse(plain.body, nullptr, false);
  ASSERT_TRUE(e.contains("error")) << plain.body;
  EXPECT_EQ(e["error"]["code"], "deadline_exceeded");
  EXPECT_EQ(e["error"]["param"], "deadline_ms");
  // The first holder and its golds may have finished by now: hold the slot again (this holder
  // is admitted once the golds queued before it have run).
  HttpConn holder2(port);
  HoldTheSlot(port, &holder2);
  auto golds2 = QueueGoldsAhead(port, 3);
  auto streamed = HttpCall(port, "POST", "/v1/completions",
                           json{{"prompt", "x"}, {"max_tokens", 4}, {"stream", true}}.dump(),
                           {"x-strata-deadline-ms: 20"});
  EXPECT_EQ(streamed.status, 200);
  auto events = SseData(streamed.body);
  ASSERT_GE(events.size(), 2u) << streamed.body;
  EXPECT_EQ(events.back(), "[DONE]");
  json se = json::parse(events[events.size() - 2], nullptr, false);
  ASSERT_TRUE(se.contains("error")) << streamed.body;
  EXPECT_EQ(se["error"]["type"], "timeout_error");
  EXPECT_TRUE(MetricsContain(
      port,
      "strata:requests_deadline_exceeded_total{model_name=\"strata-tiny\",tier=\"silver\"} 2"));
}

TEST(Queue, FullQueueGoldDisplacesTheWaitingBronzeWith429) {
  ServeProcess s({"--max-num-seqs", "1", "--max-queued-requests", "1"});
  ASSERT_GT(s.port(), 0);
  const int port = s.port();
  auto holder = std::make_unique<HttpConn>(port);
  HoldTheSlot(port, holder.get());
  HttpConn bronze(port);
  ASSERT_TRUE(bronze.Send("POST", "/v1/completions",
                          json{{"prompt", "b"}, {"max_tokens", 4}, {"priority", "bronze"}}.dump()));
  ASSERT_TRUE(MetricsContain(port, "strata:num_requests_waiting{model_name=\"strata-tiny\"} 1"));
  // Gold at the full queue: the waiting bronze is displaced.
  HttpConn gold(port);
  ASSERT_TRUE(gold.Send("POST", "/v1/completions",
                        json{{"prompt", "g"}, {"max_tokens", 4}, {"priority", "gold"}}.dump()));
  auto r = bronze.ReadResponse();
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_FALSE(r.headers["retry-after"].empty());
  json e = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(e.contains("error")) << r.body;
  EXPECT_EQ(e["error"]["code"], "displaced");
  // A second gold finds only a gold waiting: refused at once, as before.
  auto refused = HttpCall(port, "POST", "/v1/completions",
                          json{{"prompt", "h"}, {"max_tokens", 4}, {"priority", "gold"}}.dump());
  EXPECT_EQ(refused.status, 429);
  holder.reset();  // frees the slot: the gold runs
  EXPECT_EQ(gold.ReadResponse().status, 200);
  EXPECT_TRUE(MetricsContain(
      port, "strata:requests_displaced_total{model_name=\"strata-tiny\",tier=\"bronze\"} 1"));
}

}  // namespace
