// `strata bench flood` against the real `strata serve` (port 0, the bundled model): 20,000 random
// invalid requests over 8 connections — no 5xx, no hang, no unexpected close, the server alive
// and answering afterwards, its RSS reported. (The 1,000,000-request figure is in
// src/server/README.md.)
#include <gtest/gtest.h>

#include <string>

#include "integration/run_strata.h"
#include "integration/serve_process.h"

namespace strata::testing {
namespace {

TEST(Flood, TwentyThousandInvalidRequestsNo5xxAndTheServerSurvives) {
  ServeProcess server({});
  ASSERT_GT(server.port(), 0) << "strata serve did not become ready";
  RunResult r = RunStrata("bench flood --port " + std::to_string(server.port()) + " --server-pid " +
                          std::to_string(server.pid()) +
                          " --requests 20000 --connections 8 --timeout 20 --seed 3");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("requests 20000 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 5xx 0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unexpected closes 0, timeouts 0, connect errors 0"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("4xx "), std::string::npos);
  EXPECT_NE(r.out.find("server RSS "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("server alive and answering; ok"), std::string::npos) << r.out;
  // A bad flag is refused, and nothing listening is an error, not a table of zeros.
  RunResult none = RunStrata("bench flood --port 1 --requests 10");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("cannot connect"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace strata::testing
