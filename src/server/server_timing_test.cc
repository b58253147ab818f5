// The latency breakdown of a generation request: the four breakdown histograms on /metrics (queue,
// prefill, decode, inference) and the opt-in `x-strata-timing: 1` response header and
// usage.strata_timing object; without the header the response is what it always was.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <regex>
#include <string>
#include <thread>

#include "server/server_test_util.h"

namespace strata::server::test {
namespace {

constexpr const char* kLabels = "{model_name=\"fake\",tier=\"silver\"}";

// The value of the sample `name{model_name="fake",tier="silver"}` (-1: absent).
double Sample(const std::string& body, const std::string& name) {
  const std::string key = "\n" + name + kLabels + " ";
  const size_t at = body.find(key);
  if (at == std::string::npos) return -1;
  return std::strtod(body.c_str() + at + key.size(), nullptr);
}

class TimingTest : public ServerTest {
 protected:
  // Scrapes until e2e_request_latency_seconds_count reaches `count` (bounded).
  std::string ScrapeAfter(int count) {
    std::string body;
    for (int i = 0; i < 500; ++i) {
      body = HttpCall(port_, "GET", "/metrics").body;
      if (Sample(body, "strata:e2e_request_latency_seconds_count") >= count) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return body;
  }
};

const json kBody = {
    {"prompt", "hello"}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};

// "queue_ms=1.250;prefill_ms=..." -> {queue_ms: 1.25, ...}, checking the exact shape.
std::map<std::string, double> ParseTimingHeader(const std::string& v) {
  static const std::regex kShape(
      R"(queue_ms=\d+\.\d{3};prefill_ms=\d+\.\d{3};decode_ms=\d+\.\d{3};)"
      R"(inference_ms=\d+\.\d{3};e2e_ms=\d+\.\d{3})");
  EXPECT_TRUE(std::regex_match(v, kShape)) << v;
  std::map<std::string, double> out;
  size_t pos = 0;
  while (pos < v.size()) {
    const size_t eq = v.find('=', pos);
    const size_t end = std::min(v.find(';', pos), v.size());
    if (eq == std::string::npos || eq > end) break;
    out[v.substr(pos, eq - pos)] = std::strtod(v.substr(eq + 1, end - eq - 1).c_str(), nullptr);
    pos = end + 1;
  }
  return out;
}

// The five numbers are consistent: queue + inference <= e2e, prefill + decode == inference (each
// rounded to a microsecond, so within 2 us).
void ExpectConsistentMs(double queue, double prefill, double decode, double inference, double e2e) {
  EXPECT_GE(queue, 0);
  EXPECT_GE(prefill, 0);
  EXPECT_GE(decode, 0);
  EXPECT_GT(inference, 0);
  EXPECT_GT(e2e, 0);
  EXPECT_LE(queue + inference, e2e + 0.002);
  EXPECT_NEAR(prefill + decode, inference, 0.002);
}

TEST_F(TimingTest, BreakdownHistogramsCountEachRequestOnceWithConsistentSums) {
  StartEngine();
  int st = 0;
  json r = Post("/v1/completions", kBody, &st);
  ASSERT_EQ(st, 200) << r;
  const std::string m = ScrapeAfter(1);
  for (const char* h : {"queue", "prefill", "decode", "inference"}) {
    const std::string family = std::string("strata:request_") + h + "_time_seconds";
    EXPECT_NE(m.find("# TYPE " + family + " histogram"), std::string::npos) << family;
    EXPECT_EQ(Sample(m, family + "_count"), 1) << family;
  }
  EXPECT_EQ(Sample(m, "strata:requests_received_total"), 1);
  const double queue = Sample(m, "strata:request_queue_time_seconds_sum");
  const double prefill = Sample(m, "strata:request_prefill_time_seconds_sum");
  const double decode = Sample(m, "strata:request_decode_time_seconds_sum");
  const double inference = Sample(m, "strata:request_inference_time_seconds_sum");
  const double e2e = Sample(m, "strata:e2e_request_latency_seconds_sum");
  ExpectConsistentMs(queue * 1e3, prefill * 1e3, decode * 1e3, inference * 1e3, e2e * 1e3);
  EXPECT_NEAR(prefill + decode, inference, 1e-9);
  // A batch of two prompts is one request: each histogram counts it once more.
  json batch = kBody;
  batch["prompt"] = json::array({"hello", "world"});
  r = Post("/v1/completions", batch, &st);
  ASSERT_EQ(st, 200) << r;
  const std::string m2 = ScrapeAfter(2);
  for (const char* h : {"queue", "prefill", "decode", "inference"})
    EXPECT_EQ(Sample(m2, std::string("strata:request_") + h + "_time_seconds_count"), 2) << h;
}

TEST_F(TimingTest, OptInHeaderReturnsTheBreakdownInAHeaderAndTheUsage) {
  StartEngine();
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    json body = kBody;
    if (std::string(path) == "/v1/chat/completions") {
      body.erase("prompt");
      body["messages"] = {{{"role", "user"}, {"content", "hello"}}};
    }
    auto r = HttpCall(port_, "POST", path, body.dump(), {"x-strata-timing: 1"});
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_TRUE(r.headers.count("x-strata-timing")) << path;
    auto h = ParseTimingHeader(r.headers["x-strata-timing"]);
    ASSERT_EQ(h.size(), 5u);
    ExpectConsistentMs(h["queue_ms"], h["prefill_ms"], h["decode_ms"], h["inference_ms"],
                       h["e2e_ms"]);
    const json usage = json::parse(r.body)["usage"];
    const json& t = usage["strata_timing"];
    ASSERT_TRUE(t.is_object()) << usage;
    ASSERT_EQ(t.size(), 5u);
    for (const char* k : {"queue_ms", "prefill_ms", "decode_ms", "inference_ms", "e2e_ms"}) {
      ASSERT_TRUE(t[k].is_number()) << k;
      EXPECT_NEAR(t[k].get<double>(), h[k], 0.0011) << k;  // the same numbers
    }
    // The usual keys first, in their order, then the extension.
    const auto ordered = nlohmann::ordered_json::parse(r.body)["usage"];
    std::vector<std::string> keys;
    for (auto it = ordered.begin(); it != ordered.end(); ++it) keys.push_back(it.key());
    EXPECT_EQ(keys, (std::vector<std::string>{"prompt_tokens", "completion_tokens", "total_tokens",
                                              "strata_timing"}));
    EXPECT_EQ(usage["completion_tokens"], 8);
  }
}

TEST_F(TimingTest, StreamCarriesTheBreakdownInTheFinalUsageChunkOnly) {
  StartEngine();
  json body = kBody;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto r = HttpCall(port_, "POST", "/v1/completions", body.dump(), {"x-strata-timing: 1"});
  ASSERT_EQ(r.status, 200);
  EXPECT_FALSE(r.headers.count("x-strata-timing"));  // the headers went out before the numbers
  auto events = SseData(r.body);
  ASSERT_GE(events.size(), 3u);
  for (size_t i = 0; i + 2 < events.size(); ++i)
    EXPECT_EQ(events[i].find("strata_timing"), std::string::npos) << events[i];
  const json usage = json::parse(events[events.size() - 2])["usage"];
  const json& t = usage["strata_timing"];
  ASSERT_TRUE(t.is_object()) << usage;
  ExpectConsistentMs(t["queue_ms"].get<double>(), t["prefill_ms"].get<double>(),
                     t["decode_ms"].get<double>(), t["inference_ms"].get<double>(),
                     t["e2e_ms"].get<double>());
  // Without include_usage there is no usage chunk to carry it.
  body.erase("stream_options");
  r = HttpCall(port_, "POST", "/v1/completions", body.dump(), {"x-strata-timing: 1"});
  EXPECT_EQ(r.body.find("strata_timing"), std::string::npos);
}

TEST_F(TimingTest, WithoutTheHeaderTheResponseIsUnchanged) {
  StartEngine();
  for (const std::vector<std::string>& headers :
       {std::vector<std::string>{}, std::vector<std::string>{"x-strata-timing: 0"}}) {
    auto r = HttpCall(port_, "POST", "/v1/completions", kBody.dump(), headers);
    ASSERT_EQ(r.status, 200);
    EXPECT_FALSE(r.headers.count("x-strata-timing"));
    EXPECT_EQ(r.body.find("strata_timing"), std::string::npos);
    const json usage = json::parse(r.body)["usage"];
    EXPECT_EQ(usage, json({{"prompt_tokens", usage["prompt_tokens"]},
                           {"completion_tokens", 8},
                           {"total_tokens", usage["total_tokens"]}}));
    json body = kBody;
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    r = HttpCall(port_, "POST", "/v1/completions", body.dump(), headers);
    EXPECT_EQ(r.body.find("strata_timing"), std::string::npos);
  }
}

}  // namespace
}  // namespace strata::server::test
