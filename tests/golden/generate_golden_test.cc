// Greedy continuations computed by llama.cpp (../shared/golden/generate/) reproduced by our engine
// (engine::runner::SequenceRunner: the batched runner with one sequence and F32 KV, as `strata
// generate`).
//
// Rule (as vLLM's check_logprobs_close, and as the golden README suggests): the prompt tokens must
// match exactly; walk the 32 generated positions while our token equals the golden one; at the
// first difference pass only if the golden token is in our top-5 and our token is in the golden
// top-5 at that position, then stop comparing that case. In addition, at every compared position
// our top-1 logit must be within a relative tolerance of llama.cpp's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "engine/runner/sequence_runner.h"
#include "model/model.h"
#include "testing/shared_dir.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

struct GoldenParam {
  std::string stem;
  int threads;
  double logit_rel_tol;  // |ours - golden| / |golden top-1| at compared positions
};

std::vector<int32_t> TopK(std::span<const float> logits, size_t k,
                          const std::vector<int32_t>& banned) {
  std::vector<int32_t> idx(logits.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
  std::vector<float> v(logits.begin(), logits.end());
  for (int32_t b : banned) v[static_cast<size_t>(b)] = -INFINITY;
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                    [&](int32_t a, int32_t b) {
                      return v[static_cast<size_t>(a)] > v[static_cast<size_t>(b)] ||
                             (v[static_cast<size_t>(a)] == v[static_cast<size_t>(b)] && a < b);
                    });
  idx.resize(k);
  return idx;
}

class GenerateGoldenTest : public ::testing::TestWithParam<GoldenParam> {};

TEST_P(GenerateGoldenTest, ReproducesLlamaCppGreedy) {
  const GoldenParam& gp = GetParam();
  STRATA_REQUIRE_SHARED(golden_path, "golden/generate/" + gp.stem + ".json");
  STRATA_REQUIRE_SHARED(model_path, "models/" + gp.stem + ".gguf");
  std::ifstream in(golden_path);
  nlohmann::json golden = nlohmann::json::parse(in);

  auto model = model::Model::Load(model_path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto vocab = tokenizer::VocabFromGguf((*model)->gguf());
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  auto tok = tokenizer::Tokenizer::Create(std::move(vocab).value());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ASSERT_EQ((*model)->config().n_vocab, golden["n_vocab"].get<int>());
  std::vector<int32_t> eog = golden["eog_tokens"].get<std::vector<int32_t>>();

  ThreadPool pool(gp.threads);
  int exact_cases = 0;
  for (const auto& c : golden["cases"]) {
    SCOPED_TRACE("case " + c["id"].get<std::string>());
    std::vector<int32_t> want_prompt = c["prompt_tokens"].get<std::vector<int32_t>>();
    if (c["prompt"].contains("text")) {
      std::vector<int32_t> got =
          (*tok)->Encode(c["prompt"]["text"].get<std::string>(), true, false);
      ASSERT_EQ(got, want_prompt) << "prompt tokenization differs from llama.cpp";
    }
    auto seq = engine::runner::SequenceRunner::Create(
        **model, static_cast<int>(want_prompt.size()) + 40, &pool);
    ASSERT_TRUE(seq.ok()) << seq.status().ToString();
    auto logits = (*seq)->Eval(want_prompt);
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    const auto& steps = c["steps"];
    bool all_equal = true;
    for (size_t pos = 0; pos < steps.size(); ++pos) {
      const auto& st = steps[pos];
      std::vector<int32_t> ours = TopK(*logits, 5, eog);
      int32_t want = st["token"].get<int32_t>();
      double golden_top = st["top5"][0]["logit"].get<double>();
      double our_top = (*logits)[static_cast<size_t>(ours[0])];
      EXPECT_LE(std::fabs(our_top - golden_top), gp.logit_rel_tol * std::fabs(golden_top) + 1e-3)
          << "top-1 logit at pos " << pos << ": ours " << our_top << " llama.cpp " << golden_top;
      if (ours[0] != want) {
        std::vector<int32_t> golden_top5;
        for (const auto& e : st["top5"]) golden_top5.push_back(e["id"].get<int32_t>());
        EXPECT_NE(std::find(ours.begin(), ours.end(), want), ours.end())
            << "pos " << pos << ": golden token " << want << " not in our top-5";
        EXPECT_NE(std::find(golden_top5.begin(), golden_top5.end(), ours[0]), golden_top5.end())
            << "pos " << pos << ": our token " << ours[0] << " not in the golden top-5";
        all_equal = false;
        break;
      }
      if (pos + 1 == steps.size()) break;
      int32_t next = want;
      logits = (*seq)->Eval(std::span<const int32_t>(&next, 1));
      ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    }
    exact_cases += all_equal ? 1 : 0;
  }
  std::cout << "[golden] " << gp.stem << " threads=" << gp.threads << ": " << exact_cases << "/"
            << golden["cases"].size() << " cases identical for all 32 tokens\n";
}

INSTANTIATE_TEST_SUITE_P(Models, GenerateGoldenTest,
                         ::testing::Values(GoldenParam{"tiny-llama3-Q4_K_M", 1, 0.05},
                                           GoldenParam{"tiny-llama3-Q4_K_M", 2, 0.05},
                                           GoldenParam{"tiny-qwen2-Q8_0", 1, 0.03},
                                           GoldenParam{"tiny-qwen2-Q8_0", 2, 0.03},
                                           GoldenParam{"llama-2-tiny-random", 1, 0.01},
                                           GoldenParam{"llama-2-tiny-random", 2, 0.01}),
                         [](const auto& info) {
                           std::string n =
                               info.param.stem + "_t" + std::to_string(info.param.threads);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace strata
