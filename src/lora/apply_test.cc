// AddLowRank against a plain double computation, and its batch invariance: a row's delta must be
// the same bits whatever else is in the call (other rows, other pairs), however the rows are
// grouped or ordered, and whatever the thread count.
#include "lora/apply.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kernels.h"

namespace strata::lora {
namespace {

LoraPair RandomPair(int rank, int in, int out, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  LoraPair p;
  p.rank = rank;
  p.in = in;
  p.out = out;
  p.scale = scale;
  p.a.resize(static_cast<size_t>(rank) * static_cast<size_t>(in));
  p.b.resize(static_cast<size_t>(out) * static_cast<size_t>(rank));
  for (float& v : p.a) v = u(rng);
  for (float& v : p.b) v = u(rng);
  return p;
}

std::vector<float> RandomRows(size_t n, size_t width, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n * width);
  for (float& x : v) x = u(rng);
  return v;
}

// y_row + scale * B (A x_row) in double (or B a_tok for the token_embd layout).
std::vector<double> Naive(const LoraPair& p, const float* x, const float* y, const int32_t* tok) {
  std::vector<double> t(static_cast<size_t>(p.rank)), out(static_cast<size_t>(p.out));
  for (int r = 0; r < p.rank; ++r) {
    double s = 0;
    if (tok != nullptr) {
      s = p.a[static_cast<size_t>(*tok) * static_cast<size_t>(p.rank) + static_cast<size_t>(r)];
    } else {
      for (int k = 0; k < p.in; ++k)
        s += static_cast<double>(
                 p.a[static_cast<size_t>(r) * static_cast<size_t>(p.in) + static_cast<size_t>(k)]) *
             x[k];
    }
    t[static_cast<size_t>(r)] = s;
  }
  for (int o = 0; o < p.out; ++o) {
    double s = 0;
    for (int r = 0; r < p.rank; ++r)
      s += static_cast<double>(
               p.b[static_cast<size_t>(o) * static_cast<size_t>(p.rank) + static_cast<size_t>(r)]) *
           t[static_cast<size_t>(r)];
    out[static_cast<size_t>(o)] = y[o] + static_cast<double>(p.scale) * s;
  }
  return out;
}

double MaxRelErr(const float* got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num = std::max(num, std::fabs(got[i] - want[i]));
    den = std::max(den, std::fabs(want[i]));
  }
  return num / std::max(den, 1e-30);
}

struct Shape {
  int rank, in, out;
};

// Shapes: rank 16 on vector-friendly widths; odd ranks/widths (scalar tails in every dot); out
// above and not a multiple of kOutSlice.
const Shape kShapes[] = {{16, 64, 96}, {3, 37, 300}, {5, 128, 520}, {1, 8, 7}, {16, 200, 257}};

TEST(AddLowRankTest, MatchesNaiveDouble) {
  ThreadPool pool(3);
  for (const Shape& sh : kShapes) {
    SCOPED_TRACE("rank " + std::to_string(sh.rank) + " in " + std::to_string(sh.in) + " out " +
                 std::to_string(sh.out));
    const LoraPair p = RandomPair(sh.rank, sh.in, sh.out, 0.37f, 5);
    const size_t n = 40, xs = static_cast<size_t>(sh.in) + 3, ys = static_cast<size_t>(sh.out) + 1;
    const std::vector<float> x = RandomRows(n, xs, 1);
    const std::vector<float> y0 = RandomRows(n, ys, 2);
    // Non-contiguous, unordered rows: runs of consecutive rows and gaps.
    const std::vector<uint32_t> rows = {0,  1,  2,  7,  9,  10, 39, 20, 21, 22, 23, 24,
                                        25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 5};
    for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::vector<float> y = y0;
      LowRankScratch scratch;
      LowRankJob job{&p, rows, x.data(), xs, y.data(), ys};
      AddLowRank(std::span<const LowRankJob>(&job, 1), &scratch, tp);
      for (size_t r = 0; r < n; ++r) {
        const bool used = std::find(rows.begin(), rows.end(), r) != rows.end();
        if (!used) {
          EXPECT_EQ(std::memcmp(y.data() + r * ys, y0.data() + r * ys, ys * sizeof(float)), 0)
              << "row " << r << " has no job but changed";
          continue;
        }
        const auto want = Naive(p, x.data() + r * xs, y0.data() + r * ys, nullptr);
        EXPECT_LT(MaxRelErr(y.data() + r * ys, want), 2e-6) << "row " << r;
        // The padding column after each row is never written.
        EXPECT_EQ(y[r * ys + static_cast<size_t>(sh.out)],
                  y0[r * ys + static_cast<size_t>(sh.out)]);
      }
    }
  }
}

TEST(AddLowRankTest, TokenEmbeddingLayout) {
  // token_embd's pair: a = [n_vocab x rank], b = [dim x rank]; the delta of token t is B a_t.
  const int n_vocab = 50, dim = 72, rank = 6;
  LoraPair p = RandomPair(rank, n_vocab, dim, 1.5f, 9);  // a: n_vocab * rank floats either way
  const std::vector<int32_t> tokens = {3, 49, 0, 3, 17, 22, 8};
  const std::vector<uint32_t> rows = {0, 1, 2, 3, 5, 6};  // row 4 keeps the base embedding
  const size_t n = tokens.size(), ys = static_cast<size_t>(dim);
  const std::vector<float> y0 = RandomRows(n, ys, 4);
  std::vector<float> y = y0;
  LowRankScratch scratch;
  LowRankJob job{&p, rows, nullptr, 0, y.data(), ys, tokens.data()};
  AddLowRank(std::span<const LowRankJob>(&job, 1), &scratch, nullptr);
  for (size_t r = 0; r < n; ++r) {
    if (r == 4) {
      for (size_t j = 0; j < ys; ++j)  // bit for bit: compare the bits, not the values
        EXPECT_EQ(std::bit_cast<uint32_t>(y[r * ys + j]), std::bit_cast<uint32_t>(y0[r * ys + j]));
      continue;
    }
    const auto want = Naive(p, nullptr, y0.data() + r * ys, &tokens[r]);
    EXPECT_LT(MaxRelErr(y.data() + r * ys, want), 2e-6) << "row " << r;
  }
}

TEST(AddLowRankTest, InertPairsAndEmptyJobsChangeNothing) {
  LoraPair zero_scale = RandomPair(8, 32, 48, 0.0f, 1);
  LoraPair zero_rank;
  zero_rank.in = 32;
  zero_rank.out = 48;
  zero_rank.scale = 2.0f;
  const LoraPair live = RandomPair(8, 32, 48, 1.0f, 2);
  const std::vector<float> x = RandomRows(4, 32, 3), y0 = RandomRows(4, 48, 4);
  std::vector<float> y = y0;
  const std::vector<uint32_t> rows = {0, 1, 2, 3};
  const LowRankJob jobs[] = {{&zero_scale, rows, x.data(), 32, y.data(), 48},
                             {&zero_rank, rows, x.data(), 32, y.data(), 48},
                             {&live, {}, x.data(), 32, y.data(), 48},
                             {nullptr, rows, x.data(), 32, y.data(), 48}};
  LowRankScratch scratch;
  ThreadPool pool(2);
  AddLowRank(jobs, &scratch, &pool);
  EXPECT_EQ(std::memcmp(y.data(), y0.data(), y.size() * sizeof(float)), 0);
}

// One row's result under many call shapes: alone; inside a big call with other rows of the same
// pair (contiguous and scattered) and jobs of other pairs on the same output; rows in reverse
// order; 1, 2 and 3 threads; at every ISA level this CPU has. Every variant must give the same
// bits for that row.
void CheckBatchInvariance();
TEST(AddLowRankTest, RowResultsAreBatchInvariant) {
  const kernels::Isa saved = kernels::ActiveIsa();
  for (int level = 0; level <= static_cast<int>(kernels::DetectIsa()); ++level) {
    kernels::SetIsa(static_cast<kernels::Isa>(level));
    SCOPED_TRACE(std::string(kernels::IsaName(kernels::ActiveIsa())));
    CheckBatchInvariance();
  }
  kernels::SetIsa(saved);
}

void CheckBatchInvariance() {
  for (const Shape& sh : kShapes) {
    SCOPED_TRACE("rank " + std::to_string(sh.rank) + " in " + std::to_string(sh.in) + " out " +
                 std::to_string(sh.out));
    const LoraPair p = RandomPair(sh.rank, sh.in, sh.out, 0.5f, 11);
    const LoraPair q = RandomPair(std::max(1, sh.rank - 1), sh.in, sh.out, 2.0f, 12);
    const size_t n = 70, xs = static_cast<size_t>(sh.in), ys = static_cast<size_t>(sh.out);
    const std::vector<float> x = RandomRows(n, xs, 21), y0 = RandomRows(n, ys, 22);
    // Reference: each row alone, single-threaded.
    std::vector<float> alone = y0;
    LowRankScratch scratch;
    for (uint32_t r = 0; r < n; ++r) {
      const uint32_t one[] = {r};
      LowRankJob job{&p, one, x.data(), xs, alone.data(), ys};
      AddLowRank(std::span<const LowRankJob>(&job, 1), &scratch, nullptr);
    }
    std::vector<uint32_t> all(n), evens, odds, reversed;
    for (uint32_t r = 0; r < n; ++r) {
      all[r] = r;
      (r % 2 ? odds : evens).push_back(r);
    }
    reversed.assign(all.rbegin(), all.rend());
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      SCOPED_TRACE("threads " + std::to_string(threads));
      // All rows in one job, then reversed, then split in two jobs (evens / odds).
      for (int variant = 0; variant < 3; ++variant) {
        std::vector<float> y = y0;
        std::vector<LowRankJob> jobs;
        if (variant == 0) jobs.push_back({&p, all, x.data(), xs, y.data(), ys});
        if (variant == 1) jobs.push_back({&p, reversed, x.data(), xs, y.data(), ys});
        if (variant == 2) {
          jobs.push_back({&p, odds, x.data(), xs, y.data(), ys});
          jobs.push_back({&p, evens, x.data(), xs, y.data(), ys});
        }
        AddLowRank(jobs, &scratch, &pool);
        EXPECT_EQ(std::memcmp(y.data(), alone.data(), y.size() * sizeof(float)), 0)
            << "variant " << variant;
      }
      // Mixed with another pair on other rows of another output: the p rows are unaffected.
      std::vector<float> y = y0, other = y0;
      const LowRankJob mixed[] = {{&q, evens, x.data(), xs, other.data(), ys},
                                  {&p, all, x.data(), xs, y.data(), ys},
                                  {&q, all, x.data(), xs, other.data(), ys}};
      AddLowRank(mixed, &scratch, &pool);
      EXPECT_EQ(std::memcmp(y.data(), alone.data(), y.size() * sizeof(float)), 0) << "mixed";
    }
  }
}

// Steady state: the second call of the same shape grows nothing.
TEST(AddLowRankTest, ScratchIsReused) {
  const LoraPair p = RandomPair(16, 256, 700, 1.0f, 3);
  const std::vector<float> x = RandomRows(64, 256, 1);
  std::vector<float> y = RandomRows(64, 700, 2);
  std::vector<uint32_t> rows(64);
  for (uint32_t r = 0; r < 64; ++r) rows[r] = r;
  ThreadPool pool(2);
  LowRankScratch scratch;
  LowRankJob job{&p, rows, x.data(), 256, y.data(), 700};
  AddLowRank(std::span<const LowRankJob>(&job, 1), &scratch, &pool);
  const size_t bytes = scratch.capacity_bytes();
  EXPECT_GT(bytes, 0u);
  const float* t = scratch.t.data();
  AddLowRank(std::span<const LowRankJob>(&job, 1), &scratch, &pool);
  job.rows = std::span<const uint32_t>(rows.data(), 10);  // a smaller call fits too
  AddLowRank(std::span<const LowRankJob>(&job, 1), &scratch, &pool);
  EXPECT_EQ(scratch.capacity_bytes(), bytes);
  EXPECT_EQ(scratch.t.data(), t);
}

}  // namespace
}  // namespace strata::lora

namespace strata::lora {
namespace {

// AddLowRank alone on the 135m preset's shapes (dim 768, ffn 2048, 12 layers): one decode step's
// LoRA work for 16 rows, 2 per adapter, 8 distinct rank-16 adapters (cold: 90 MB of pairs) vs the
// same adapter 8 times (its 11 MB mostly cached): memory vs arithmetic. 1 thread, CPU time.
// Skipped unless STRATA_RUNNER_BENCH=1.
TEST(AddLowRankBench, DecodeStepShapes) {
  if (std::getenv("STRATA_RUNNER_BENCH") == nullptr)
    GTEST_SKIP() << "set STRATA_RUNNER_BENCH=1 to measure";
  const int dim = 768, ffn = 2048, layers = 12, rank = 16;
  const int shapes[7][2] = {{dim, dim}, {dim, dim}, {dim, dim}, {dim, dim},
                            {dim, ffn}, {dim, ffn}, {ffn, dim}};
  std::vector<std::vector<LoraPair>> pairs(8);  // [adapter][layer * 7 + target]
  for (int a = 0; a < 8; ++a)
    for (int l = 0; l < layers; ++l)
      for (int t = 0; t < 7; ++t)
        pairs[static_cast<size_t>(a)].push_back(RandomPair(rank, shapes[t][0], shapes[t][1], 1.0f,
                                                           static_cast<uint64_t>(a) * 100 +
                                                               static_cast<uint64_t>(l) * 7 +
                                                               static_cast<uint64_t>(t)));
  const std::vector<float> x = RandomRows(16, ffn, 1);
  std::vector<float> y = RandomRows(16, ffn, 2);
  std::vector<std::vector<uint32_t>> rows(8);
  for (uint32_t r = 0; r < 16; ++r) rows[r % 8].push_back(r);
  LowRankScratch scratch;
  auto step = [&](bool distinct) {
    timespec c0{}, c1{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    for (int l = 0; l < layers; ++l)
      for (int t = 0; t < 7; ++t) {
        std::vector<LowRankJob> jobs;
        for (size_t a = 0; a < 8; ++a)
          jobs.push_back(
              {&pairs[distinct ? a : 0][static_cast<size_t>(l) * 7 + static_cast<size_t>(t)],
               rows[a], x.data(), static_cast<size_t>(ffn), y.data(), static_cast<size_t>(ffn)});
        AddLowRank(jobs, &scratch, nullptr);
      }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    return static_cast<double>(c1.tv_sec - c0.tv_sec) * 1e3 +
           static_cast<double>(c1.tv_nsec - c0.tv_nsec) / 1e6;
  };
  double cold = 1e30, hot = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    cold = std::min(cold, step(true));
    hot = std::min(hot, step(false));
  }
  std::cout << "decode step LoRA work, 8 distinct adapters: " << cold
            << " ms; one adapter 8x: " << hot << " ms\n";
}

}  // namespace
}  // namespace strata::lora
