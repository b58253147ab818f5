// `strata serve --otlp-endpoint` against the real binary: a request's spans reach an OTLP test
// receiver under the configured service name, and a traceparent is continued; without the flag no
// tracer exists (no exporter families on /metrics); a bad endpoint fails start-up.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "integration/http_test_client.h"
#include "integration/serve_process.h"
#include "testing/otlp_receiver.h"

namespace {

using nlohmann::json;
using strata::testing::HttpCall;
using strata::testing::OtlpReceiver;
using strata::testing::ServeProcess;

const std::string kBody =
    json({{"prompt", "hello"}, {"max_tokens", 4}, {"ignore_eos", true}}).dump();

TEST(ServeTrace, SpansReachTheCollectorUnderTheServiceName) {
  auto rx = OtlpReceiver::Start();
  ASSERT_TRUE(rx.ok()) << rx.status().ToString();
  ServeProcess s({"--otlp-endpoint", (*rx)->endpoint(), "--otlp-service-name", "replica-a",
                  "--otlp-sample-ratio", "1"});
  ASSERT_GT(s.port(), 0);
  const std::string trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  auto r = HttpCall(s.port(), "POST", "/v1/completions", kBody,
                    {"traceparent: 00-" + trace_id + "-00f067aa0ba902b7-01"});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE((*rx)->WaitForSpans(7, std::chrono::seconds(10)));
  int server = 0;
  for (const auto& span : (*rx)->spans()) {
    EXPECT_EQ(span.service, "replica-a");
    EXPECT_EQ(span.trace_id, trace_id);
    if (span.kind != 2) continue;
    ++server;
    EXPECT_EQ(span.name, "text_completion strata-tiny");
    EXPECT_EQ(span.parent_span_id, "00f067aa0ba902b7");
    EXPECT_EQ(span.Int("gen_ai.usage.output_tokens"), 4);
  }
  EXPECT_EQ(server, 1);
  std::string m;
  for (int i = 0; i < 200; ++i) {
    m = HttpCall(s.port(), "GET", "/metrics").body;
    if (m.find("strata:trace_spans_exported_total 0\n") == std::string::npos &&
        m.find("strata:trace_spans_exported_total") != std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(m.find("strata:trace_spans_exported_total"), std::string::npos) << m;
  EXPECT_EQ(m.find("strata:trace_spans_exported_total 0\n"), std::string::npos);
}

TEST(ServeTrace, NoEndpointNoTracerAndABadOneFailsStartUp) {
  ServeProcess plain({});
  ASSERT_GT(plain.port(), 0);
  auto r = HttpCall(plain.port(), "POST", "/v1/completions", kBody,
                    {"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(HttpCall(plain.port(), "GET", "/metrics").body.find("strata:trace_spans"),
            std::string::npos);
  ServeProcess bad({"--otlp-endpoint", "ftp://127.0.0.1:1"});
  EXPECT_EQ(bad.port(), 0);
  EXPECT_EQ(bad.Wait(10), 1);
}

}  // namespace
