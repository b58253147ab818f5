#include "gateway/prom_scrape.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace strata::gateway {
namespace {

TEST(PromScrape, ReadsTheLoraAdaptersAReplicaPublishes) {
  auto r = ParsePromText(
      "strata:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"b\","
      "waiting_lora_adapters=\"\"} 1.7e9\n"
      "strata:lora_adapter_active{model_name=\"m\",adapter=\"b\",digest=\"0f1e\"} 1\n"
      "strata:lora_adapter_active{model_name=\"m\",adapter=\"a\"} 0\n"
      "strata:lora_adapter_active{model_name=\"m\",adapter=\"c\"} 1\n"
      "strata:lora_adapter_active{model_name=\"m\",adapter=\"\"} 1\n"
      "strata:lora_adapter_active{model_name=\"m\"} 1\n"
      "vllm:lora_requests_info{max_lora=\"1\"} 1\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  PromLoraAdapters a = ReadLoraAdapters(*r);
  EXPECT_TRUE(a.published);
  EXPECT_EQ(a.registered, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(a.active, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(a.digests, (std::vector<std::pair<std::string, std::string>>{{"b", "0f1e"}}));
  // The info gauge alone: a replica with adapter support and no adapter yet.
  r = ParsePromText("strata:lora_requests_info{max_lora=\"1\"} 5\n");
  ASSERT_TRUE(r.ok());
  a = ReadLoraAdapters(*r);
  EXPECT_TRUE(a.published);
  EXPECT_TRUE(a.registered.empty());
  // Neither family (another server, or vLLM's names only): no list.
  r = ParsePromText("strata:num_requests_waiting 0\nvllm:lora_requests_info{max_lora=\"1\"} 1\n");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(ReadLoraAdapters(*r).published);
}

TEST(PromScrape, ParsesSamplesLabelsCommentsAndTimestamps) {
  const char* text =
      "# HELP strata:num_requests_waiting Requests waiting.\n"
      "# TYPE strata:num_requests_waiting gauge\n"
      "strata:num_requests_waiting{model_name=\"a\"} 3\n"
      "strata:num_requests_waiting{model_name=\"b\",tier=\"x\"} 4.5 1700000000000\n"
      "\n"
      "  strata:num_requests_running 2e1\r\n"
      "weird{v=\"q\\\"uote\\\\back\\nnl\",} +Inf\n"
      "nan_metric NaN\n";
  auto r = ParsePromText(text);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 5u);
  EXPECT_EQ((*r)[0].labels.at(0), (std::pair<std::string, std::string>{"model_name", "a"}));
  EXPECT_EQ((*r)[1].labels.size(), 2u);
  EXPECT_EQ((*r)[3].labels.at(0).second, "q\"uote\\back\nnl");
  EXPECT_TRUE(std::isinf((*r)[3].value));
  EXPECT_TRUE(std::isnan((*r)[4].value));
  bool found = false;
  EXPECT_DOUBLE_EQ(SumPromSamples(*r, "strata:num_requests_waiting", &found), 7.5);
  EXPECT_TRUE(found);
  EXPECT_DOUBLE_EQ(MaxPromSamples(*r, "strata:num_requests_waiting"), 4.5);
  EXPECT_DOUBLE_EQ(SumPromSamples(*r, "strata:num_requests_running"), 20);
  // Non-finite values do not poison a sum.
  EXPECT_DOUBLE_EQ(SumPromSamples(*r, "weird", &found), 0);
  EXPECT_FALSE(found);
  EXPECT_DOUBLE_EQ(SumPromSamples(*r, "absent", &found), 0);
  EXPECT_FALSE(found);
}

TEST(PromScrape, MalformedLinesAreErrorsNamingTheLine) {
  const char* bad[] = {"m{a=\"1\" 2\n",
                       "m{a=1} 2\n",
                       "m{=\"1\"} 2\n",
                       "m 1 2 3\n",
                       "m abc\n",
                       "m 0x10\n",
                       "m\n",
                       "{a=\"b\"} 1\n",
                       "m{a=\"unterminated} 1",
                       "ok 1\nm{a=\"b\"}} 1",
                       "m 1e999\n",
                       "m infinity\n"};
  for (const char* t : bad) {
    auto r = ParsePromText(t);
    EXPECT_FALSE(r.ok()) << t;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("line "), std::string::npos) << t;
    }
  }
  auto second = ParsePromText("ok 1\nbad{ 2\n");
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("line 2"), std::string::npos);
}

TEST(PromScrape, ArbitraryBytesNeverCrash) {
  std::string junk;
  uint32_t x = 12345;
  for (int i = 0; i < 20000; ++i) {
    x = x * 1103515245u + 12345u;
    junk.push_back(static_cast<char>("{}\"=, \n\\#ab1.e+-"[(x >> 16) % 17]));
  }
  for (size_t len = 0; len < junk.size(); len += 997) (void)ParsePromText(junk.substr(0, len));
  SUCCEED();
}

TEST(PromScrape, TooManyLabelsIsAnError) {
  std::string line = "m{";
  for (size_t i = 0; i <= kMaxPromLabels; ++i) line += "l" + std::to_string(i) + "=\"v\",";
  line += "} 1\n";
  EXPECT_FALSE(ParsePromText(line).ok());
}

}  // namespace
}  // namespace strata::gateway
