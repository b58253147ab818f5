#include "bench/dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

namespace strata::bench {
namespace {

DatasetOptions Random(int64_t n, uint64_t seed) {
  DatasetOptions o;
  o.name = "random";
  o.num_prompts = n;
  o.seed = seed;
  o.random_input_len = 20;
  o.random_output_len = 7;
  return o;
}

TEST(Dataset, RandomIsDeterministicBySeedWithExactLengths) {
  auto a = BuildDataset(Random(10, 1));
  auto b = BuildDataset(Random(10, 1));
  auto c = BuildDataset(Random(10, 2));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status().message();
  ASSERT_EQ(a->units.size(), 10u);
  EXPECT_EQ(a->num_requests(), 10);
  for (size_t i = 0; i < 10; ++i) {
    const Turn& t = a->units[i].turns.at(0);
    EXPECT_TRUE(t.prompt.is_ids);
    EXPECT_EQ(t.prompt.ids.size(), 20u);
    EXPECT_EQ(t.output_len, 7);
    for (int32_t id : t.prompt.ids) {
      EXPECT_GE(id, 100);  // documented default range without a vocabulary
      EXPECT_LT(id, 500);
    }
    EXPECT_EQ(t.prompt.ids, b->units[i].turns[0].prompt.ids);
  }
  EXPECT_NE(a->units[0].turns[0].prompt.ids, c->units[0].turns[0].prompt.ids);
  EXPECT_NE(a->units[0].turns[0].prompt.ids, a->units[1].turns[0].prompt.ids);
}

TEST(Dataset, RandomRangeRatioPrefixAndVocab) {
  DatasetOptions o = Random(200, 3);
  o.random_range_ratio = 0.5;
  o.random_prefix_len = 5;
  o.vocab_size = 150;
  auto d = BuildDataset(o);
  ASSERT_TRUE(d.ok()) << d.status().message();
  std::set<size_t> lens;
  std::vector<int32_t> prefix(d->units[0].turns[0].prompt.ids.begin(),
                              d->units[0].turns[0].prompt.ids.begin() + 5);
  for (const auto& u : d->units) {
    const auto& ids = u.turns[0].prompt.ids;
    ASSERT_GE(ids.size(), 5u + 10u);
    ASSERT_LE(ids.size(), 5u + 30u);
    lens.insert(ids.size());
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 5), prefix);
    EXPECT_GE(u.turns[0].output_len, 3);
    EXPECT_LE(u.turns[0].output_len, 11);
    for (int32_t id : ids) {
      EXPECT_GE(id, 1);
      EXPECT_LT(id, 150);
    }
  }
  EXPECT_GT(lens.size(), 10u);  // lengths really vary
}

TEST(Dataset, RandomTextWithoutTokenizerUsesWords) {
  DatasetOptions o = Random(3, 1);
  o.text = true;
  auto d = BuildDataset(o);
  ASSERT_TRUE(d.ok());
  const std::string& s = d->units[0].turns[0].prompt.text;
  EXPECT_FALSE(d->units[0].turns[0].prompt.is_ids);
  EXPECT_EQ(std::count(s.begin(), s.end(), ' '), 19);  // 20 words
}

TEST(Dataset, BadOptionsAreRejected) {
  DatasetOptions o = Random(-1, 1);
  EXPECT_FALSE(BuildDataset(o).ok());  // random needs --num-prompts
  o = Random(kMaxPrompts + 1, 1);
  EXPECT_FALSE(BuildDataset(o).ok());
  o = Random(5, 1);
  o.random_input_len = -3;
  EXPECT_FALSE(BuildDataset(o).ok());
  o = Random(5, 1);
  o.random_range_ratio = 1.5;
  EXPECT_FALSE(BuildDataset(o).ok());
  o = Random(5, 1);
  o.name = "bogus";
  auto r = BuildDataset(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bogus"), std::string::npos);
  o = Random(5, 1);
  o.tokenizer_path = "/nonexistent/x.gguf";
  EXPECT_FALSE(BuildDataset(o).ok());
}

TEST(Dataset, SharedPrefixGroupsShareTheirSystemPrompt) {
  DatasetOptions o;
  o.name = "shared-prefix";
  o.seed = 5;
  o.sp_num_groups = 3;
  o.sp_prompts_per_group = 4;
  o.sp_system_prompt_len = 16;
  o.sp_question_len = 6;
  o.sp_output_len = 9;
  auto d = BuildDataset(o);
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d->units.size(), 12u);
  std::map<int, std::vector<int32_t>> system;
  std::map<int, int> per_group;
  bool interleaved = false;
  for (size_t i = 0; i < d->units.size(); ++i) {
    const auto& u = d->units[i];
    const auto& ids = u.turns[0].prompt.ids;
    ASSERT_EQ(ids.size(), 22u);
    EXPECT_EQ(u.turns[0].output_len, 9);
    std::vector<int32_t> sys(ids.begin(), ids.begin() + 16);
    if (!system.count(u.group)) system[u.group] = sys;
    EXPECT_EQ(system[u.group], sys) << "group " << u.group;
    ++per_group[u.group];
    if (i > 0 && u.group != d->units[i - 1].group) interleaved = true;
  }
  EXPECT_EQ(system.size(), 3u);
  EXPECT_NE(system[0], system[1]);
  for (auto& [g, n] : per_group) EXPECT_EQ(n, 4);
  EXPECT_TRUE(interleaved);
  o.num_prompts = 5;
  auto cut = BuildDataset(o);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->units.size(), 5u);
}

DatasetOptions MultiTurn(int conversations, int turns, int user_len) {
  DatasetOptions o;
  o.name = "multi-turn";
  o.mt_num_conversations = conversations;
  o.mt_turns = turns;
  o.mt_user_len = user_len;
  return o;
}

TEST(Dataset, MultiTurnConversationsAreText) {
  DatasetOptions o = MultiTurn(3, 4, 5);
  o.mt_output_len = 6;
  auto d = BuildDataset(o);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->multi_turn);
  ASSERT_EQ(d->units.size(), 3u);
  EXPECT_EQ(d->num_requests(), 12);
  for (const auto& u : d->units) {
    ASSERT_EQ(u.turns.size(), 4u);
    for (const auto& t : u.turns) {
      EXPECT_FALSE(t.prompt.is_ids);
      EXPECT_FALSE(t.prompt.text.empty());
      EXPECT_EQ(t.output_len, 6);
    }
  }
  auto again = BuildDataset(o);
  EXPECT_EQ(again->units[2].turns[3].prompt.text, d->units[2].turns[3].prompt.text);
}

TEST(Dataset, MultiTurnFirstMessageCanBeLonger) {
  DatasetOptions o = MultiTurn(2, 3, 4);
  o.mt_first_len = 100;
  auto d = BuildDataset(o);
  ASSERT_TRUE(d.ok());
  for (const auto& u : d->units) {
    EXPECT_EQ(u.turns[0].prompt.approx_tokens, 100);
    EXPECT_EQ(u.turns[1].prompt.approx_tokens, 4);
    EXPECT_GT(u.turns[0].prompt.text.size(), 5 * u.turns[1].prompt.text.size());
  }
  o.mt_first_len = -1;
  EXPECT_FALSE(BuildDataset(o).ok());
}

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    path_ = ::testing::TempDir() + "bench_dataset_" + std::to_string(getpid()) + "_" +
            std::to_string(counter_++) + ".jsonl";
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

TEST(Dataset, JsonlPromptsOutputLengthsAndCycling) {
  TempFile f(
      "{\"prompt\": \"hello there\", \"output_len\": 5}\n\n{\"prompt\": [1, 2, 3], \"max_tokens\": "
      "4}\n{\"prompt\": \"x\"}\n");
  DatasetOptions o;
  o.name = "jsonl";
  o.dataset_path = f.path();
  o.jsonl_output_len = 11;
  auto d = BuildDataset(o);
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d->units.size(), 3u);
  EXPECT_EQ(d->units[0].turns[0].prompt.text, "hello there");
  EXPECT_EQ(d->units[0].turns[0].output_len, 5);
  EXPECT_TRUE(d->units[1].turns[0].prompt.is_ids);
  EXPECT_EQ(d->units[1].turns[0].prompt.ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(d->units[1].turns[0].output_len, 4);
  EXPECT_EQ(d->units[2].turns[0].output_len, 11);
  o.num_prompts = 7;
  auto cyc = BuildDataset(o);
  ASSERT_TRUE(cyc.ok());
  ASSERT_EQ(cyc->units.size(), 7u);
  EXPECT_EQ(cyc->units[6].turns[0].prompt.text, "hello there");
}

TEST(Dataset, JsonlErrorsNameTheLine) {
  for (const char* bad :
       {"{\"prompt\": 5}", "not json", "{\"text\": \"x\"}", "{\"prompt\": [1, -2]}",
        "{\"prompt\": \"x\", \"output_len\": 0}", "[1,2]"}) {
    TempFile f(std::string("{\"prompt\": \"ok\"}\n") + bad + "\n");
    DatasetOptions o;
    o.name = "jsonl";
    o.dataset_path = f.path();
    auto d = BuildDataset(o);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find(":2"), std::string::npos) << d.status().message();
  }
  DatasetOptions o;
  o.name = "jsonl";
  EXPECT_FALSE(BuildDataset(o).ok());  // no path
  o.dataset_path = "/nonexistent.jsonl";
  EXPECT_FALSE(BuildDataset(o).ok());
}

TEST(Utf8, InvalidBytesAreReplaced) {
  EXPECT_EQ(SanitizeUtf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(SanitizeUtf8("a\xFF"
                         "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(SanitizeUtf8("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // truncated sequence
}

}  // namespace
}  // namespace strata::bench
