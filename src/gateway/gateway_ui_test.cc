// gateway/gateway_ui: the page is self-contained (no external script, style or font), the
// control plane's status is passed through or reported, routes list their pools, and the
// `ui.control_url` config key is validated.
#include "gateway/gateway_ui.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "gateway/config.h"

namespace strata::gateway {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr const char* kConfig = R"(
pools:
  - name: a
    replicas: [http://127.0.0.1:9000]
  - name: b
    replicas: [http://127.0.0.1:9001]
routes:
  - name: r
    to: a
    shadow: {pool: b, fraction: 0.5}
)";

TEST(GatewayUi, PageLoadsNothingFromOutside) {
  const std::string page(UiHtml());
  EXPECT_NE(page.find("<script>"), std::string::npos);
  EXPECT_NE(page.find("fetch(\"/ui/data\""), std::string::npos);
  // No src=/href= attribute, no CSS @import or url(): everything is inline.
  EXPECT_FALSE(std::regex_search(page, std::regex(R"((src|href)\s*=)"))) << "external reference";
  EXPECT_EQ(page.find("@import"), std::string::npos);
  EXPECT_EQ(page.find("url("), std::string::npos);
  // The only absolute URL is SVG's namespace name (never fetched).
  std::smatch m;
  std::string rest = page;
  while (std::regex_search(rest, m, std::regex(R"(https?://[^"'\s)]+)"))) {
    EXPECT_EQ(m.str(), "http://www.w3.org/2000/svg");
    rest = m.suffix();
  }
}

TEST(GatewayUi, ControlStatusPassesThroughOrIsReported) {
  const auto now = SteadyClock::now();
  ControlStatus none;
  json j = UiControlJson(none, "", now);
  EXPECT_TRUE(j["control"].is_null());
  EXPECT_TRUE(j["control_age_s"].is_null());
  EXPECT_EQ(j["control_url"], "");

  ControlStatus ok;
  ok.body = R"({"pools":[{"pool":"a","desired":2,"reason":"slo"}]})";
  ok.at = now - std::chrono::seconds(3);
  j = UiControlJson(ok, "http://127.0.0.1:1/status", now);
  EXPECT_EQ(j["control"]["pools"][0]["desired"], 2);
  EXPECT_NEAR(j["control_age_s"].get<double>(), 3.0, 1e-6);
  EXPECT_EQ(j["control_error"], "");

  ControlStatus stale = ok;  // a later fetch failed: the last answer stays, with the error
  stale.error = "control plane: connection refused";
  j = UiControlJson(stale, "http://127.0.0.1:1/status", now);
  EXPECT_EQ(j["control"]["pools"][0]["pool"], "a");
  EXPECT_EQ(j["control_error"], "control plane: connection refused");

  ControlStatus bad;
  bad.body = "<html>";
  bad.at = now;
  j = UiControlJson(bad, "http://127.0.0.1:1/status", now);
  EXPECT_TRUE(j["control"].is_null());
  EXPECT_EQ(j["control_error"], "the control plane's answer is not JSON");
}

TEST(GatewayUi, RoutesListEveryPoolTheyName) {
  auto c = ParseGatewayConfig(kConfig);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const json routes = UiRoutesJson(**c);
  ASSERT_EQ(routes.size(), 1u);
  EXPECT_EQ(routes[0]["name"], "r");
  EXPECT_EQ(routes[0]["pools"], json::array({"a", "b"}));
}

TEST(GatewayUi, CanariesCarryTheirState) {
  CanaryView v;
  v.route = "chat";
  v.baseline = "v1";
  v.canary = "v2";
  v.step = 2;
  v.steps = {5, 25, 100};
  v.weight = 25;
  const json list = UiCanariesJson({v});
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["state"], "progressing");
  EXPECT_EQ(list[0]["steps"].size(), 3u);
  EXPECT_DOUBLE_EQ(list[0]["weight"].get<double>(), 25);
}

TEST(GatewayUi, ControlUrlIsValidated) {
  auto c = ParseGatewayConfig(std::string(kConfig) +
                              "ui:\n  control_url: http://127.0.0.1:9300/status\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ((*c)->ui.control_url, "http://127.0.0.1:9300/status");
  auto none = ParseGatewayConfig(kConfig);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)->ui.control_url, "");
  auto bad = ParseGatewayConfig(std::string(kConfig) + "ui:\n  control_url: https://x\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ui.control_url: not an http:// URL"), std::string::npos)
      << bad.status().message();
  auto unknown = ParseGatewayConfig(std::string(kConfig) + "ui:\n  colour: red\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("ui.colour"), std::string::npos)
      << unknown.status().message();
}

}  // namespace
}  // namespace strata::gateway
