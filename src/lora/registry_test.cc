// Registry: Add/Get/Remove, names, the max_cpu_loras LRU (never dropping a held adapter),
// reloads after eviction, counters, and concurrent use.
#include "lora/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "testing/lora_files.h"

namespace strata::lora {
namespace {

using ::testing::HasSubstr;
using testing::TempPath;
using testing::TinyBase;
using testing::WriteSynthLora;

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = TinyBase();
    ASSERT_NE(base_.model, nullptr);
    // Non-owning: base_ outlives every registry of the test.
    shared_base_ =
        std::shared_ptr<const model::Model>(base_.model.get(), [](const model::Model*) {});
  }
  std::string Write(const std::string& tag, uint64_t seed = 1, uint32_t rank = 4) {
    synth::SynthLoraOptions o;
    o.seed = seed;
    o.rank = rank;
    o.targets = {"q", "v"};
    std::string path = TempPath(tag);
    WriteSynthLora(*base_.model, o, path);
    return path;
  }
  std::unique_ptr<Registry> Make(int max_cpu_loras = 0, int max_rank = 16) {
    return std::make_unique<Registry>(shared_base_, RegistryOptions{max_rank, max_cpu_loras});
  }
  bool Loaded(const Registry& r, const std::string& name) {
    for (const AdapterInfo& i : r.List())
      if (i.name == name) return i.loaded;
    ADD_FAILURE() << name << " not listed";
    return false;
  }

  strata::testing::SynthModel base_;
  std::shared_ptr<const model::Model> shared_base_;
};

TEST_F(RegistryTest, AddGetListRemove) {
  auto r = Make();
  const std::string pa = Write("a", 1), pb = Write("b", 2, 8);
  ASSERT_TRUE(r->Add("b", pb).ok());
  ASSERT_TRUE(r->Add("a", pa, 0.5f).ok());
  EXPECT_TRUE(r->Contains("a"));
  EXPECT_FALSE(r->Contains("c"));
  auto a = r->Get("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->name(), "a");
  EXPECT_EQ((*a)->Find(0, Target::kQ)->scale, 0.5f);
  auto a2 = r->Get("a");
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(a2->get(), a->get());  // the cached form, not a reload
  const auto list = r->List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "a");  // sorted
  EXPECT_EQ(list[0].path, pa);
  EXPECT_EQ(list[0].digest, (*a)->digest());
  EXPECT_EQ(list[0].rank, 4);
  EXPECT_TRUE(list[0].loaded);
  EXPECT_EQ(list[1].name, "b");
  EXPECT_EQ(list[1].rank, 8);
  ASSERT_TRUE(r->Remove("a").ok());
  EXPECT_FALSE(r->Contains("a"));
  EXPECT_NE((*a)->Find(0, Target::kQ), nullptr);  // a holder keeps a removed adapter
  auto gone = r->Get("a");
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("'a'"));
  EXPECT_EQ(r->Remove("a").code(), StatusCode::kNotFound);
  // Re-adding a removed name is a new entry.
  ASSERT_TRUE(r->Add("a", pa).ok());
  const RegistryCounters c = r->counters();
  EXPECT_EQ(c.loads, 3);
  EXPECT_EQ(c.unloads, 1);
  EXPECT_EQ(c.evictions, 0);
  EXPECT_EQ(c.load_errors, 0);
}

TEST_F(RegistryTest, RefusesTakenNamesBadNamesAndBadFiles) {
  auto r = Make();
  const std::string pa = Write("a");
  ASSERT_TRUE(r->Add("a", pa).ok());
  Status dup = r->Add("a", pa);
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(dup.message(), HasSubstr("LoRA adapter 'a' is already loaded"));
  for (const std::string& bad :
       std::vector<std::string>{"", "a b", "a,b", "x\"y", "tab\t", std::string(257, 'n')}) {
    Status s = r->Add(bad, pa);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_FALSE(r->Contains(bad));
  }
  EXPECT_TRUE(r->Add(std::string(256, 'n'), pa).ok());
  // A missing file is bad input to Add (400), not an unknown adapter (404).
  Status missing = r->Add("m", TempPath("missing"));
  EXPECT_EQ(missing.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(), HasSubstr("LoRA adapter 'm'"));
  EXPECT_FALSE(r->Contains("m"));
  // Above the registry's --max-lora-rank: the loader's message.
  auto small = Make(0, 2);
  Status rank = small->Add("a", pa);
  EXPECT_THAT(rank.message(), HasSubstr("rank 4, above --max-lora-rank 2"));
  EXPECT_FALSE(small->Contains("a"));
  EXPECT_EQ(small->counters().load_errors, 1);
  EXPECT_EQ(r->counters().load_errors, 1);
}

TEST_F(RegistryTest, EvictsTheLeastRecentlyUsedAndReloads) {
  auto r = Make(/*max_cpu_loras=*/2);
  const std::string pa = Write("a", 1), pb = Write("b", 2), pc = Write("c", 3);
  ASSERT_TRUE(r->Add("a", pa).ok());
  ASSERT_TRUE(r->Add("b", pb).ok());
  std::string digest_a;
  {
    auto a = r->Get("a");  // a is now more recent than b
    ASSERT_TRUE(a.ok());
    digest_a = (*a)->digest();
  }
  ASSERT_TRUE(r->Add("c", pc).ok());  // evicts b
  EXPECT_TRUE(Loaded(*r, "a"));
  EXPECT_FALSE(Loaded(*r, "b"));
  EXPECT_TRUE(Loaded(*r, "c"));
  EXPECT_EQ(r->counters().evictions, 1);
  auto b = r->Get("b");  // reload; evicts a (the least recent of a, c)
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE((*b)->Find(0, Target::kQ), nullptr);
  EXPECT_FALSE(Loaded(*r, "a"));
  EXPECT_TRUE(Loaded(*r, "b"));
  EXPECT_EQ(r->counters().loads, 4);
  EXPECT_EQ(r->counters().evictions, 2);
  auto a = r->Get("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->digest(), digest_a);  // same file, same digest after a reload
  EXPECT_EQ(r->List()[0].digest, digest_a);
}

TEST_F(RegistryTest, NeverDropsAnAdapterSomeoneHolds) {
  auto r = Make(/*max_cpu_loras=*/1);
  const std::string pa = Write("a", 1), pb = Write("b", 2);
  ASSERT_TRUE(r->Add("a", pa).ok());
  auto held = r->Get("a");
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(r->Add("b", pb).ok());  // over the bound, but a is in use
  EXPECT_TRUE(Loaded(*r, "a"));
  EXPECT_TRUE(Loaded(*r, "b"));
  EXPECT_EQ(r->counters().evictions, 0);
  auto held_b = r->Get("b");  // both in use: nothing can go
  ASSERT_TRUE(held_b.ok());
  auto again = r->Get("a");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), held->get());  // no second copy
  EXPECT_EQ(r->counters().evictions, 0);
  EXPECT_EQ(r->counters().loads, 2);
  again->reset();
  held->reset();  // a released: the next Get evicts down to the bound
  ASSERT_TRUE(r->Get("b").ok());
  EXPECT_FALSE(Loaded(*r, "a"));
  EXPECT_TRUE(Loaded(*r, "b"));
  EXPECT_EQ(r->counters().evictions, 1);
}

TEST_F(RegistryTest, AReloadReadsTheFileAsItIsNow) {
  auto r = Make(/*max_cpu_loras=*/1);
  const std::string pa = Write("a", 1), pb = Write("b", 2);
  ASSERT_TRUE(r->Add("a", pa).ok());
  std::string old_digest;
  {
    auto a = r->Get("a");
    ASSERT_TRUE(a.ok());
    old_digest = (*a)->digest();
  }
  ASSERT_TRUE(r->Add("b", pb).ok());  // evicts a
  ASSERT_FALSE(Loaded(*r, "a"));
  std::filesystem::copy_file(pb, pa, std::filesystem::copy_options::overwrite_existing);
  auto a = r->Get("a");
  ASSERT_TRUE(a.ok());
  EXPECT_NE((*a)->digest(), old_digest);  // never the old file's cache identity
  // The file gone: Get fails with the loader's message, the name stays registered.
  ASSERT_TRUE(r->Get("b").ok());  // evicts a (a is released)
  a->reset();
  ASSERT_TRUE(r->Get("b").ok());
  ASSERT_FALSE(Loaded(*r, "a"));
  std::filesystem::remove(pa);
  auto broken = r->Get("a");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(broken.status().message(), HasSubstr(pa));
  EXPECT_TRUE(r->Contains("a"));
  EXPECT_EQ(r->counters().load_errors, 1);
}

TEST_F(RegistryTest, ConcurrentAddGetRemove) {
  auto r = Make(/*max_cpu_loras=*/2);
  std::vector<std::string> paths;
  paths.reserve(4);
  for (int i = 0; i < 4; ++i) paths.push_back(Write("p" + std::to_string(i), i + 1));
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 60; ++i) {
        const int k = (t + i) % 4;
        const std::string name = "n" + std::to_string(k);
        switch ((t * 7 + i) % 3) {
          case 0: {
            Status s = r->Add(name, paths[static_cast<size_t>(k)]);
            if (!s.ok() && s.message().find("already loaded") == std::string::npos) ++bad;
            break;
          }
          case 1: {
            auto a = r->Get(name);
            if (a.ok() ? (*a)->name() != name || (*a)->Find(0, Target::kQ) == nullptr
                       : a.status().code() != StatusCode::kNotFound)
              ++bad;
            break;
          }
          default: {
            Status s = r->Remove(name);
            if (!s.ok() && s.code() != StatusCode::kNotFound) ++bad;
          }
        }
        (void)r->List();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  const RegistryCounters c = r->counters();
  EXPECT_EQ(c.load_errors, 0);
  int loaded = 0;
  for (const AdapterInfo& i : r->List()) loaded += i.loaded;
  EXPECT_LE(loaded, 2);
  EXPECT_GE(c.loads, static_cast<int64_t>(r->List().size()));
}

}  // namespace
}  // namespace strata::lora
