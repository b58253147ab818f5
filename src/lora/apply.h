// The batched low-rank product of LoRA: after a base matrix product y = W x over every row of an
// engine step, each adapter adds scale * B (A x) to the rows of the requests that use it
// (Punica's SGMV shape: the rows of one adapter are one group, so its A and B are streamed once per
// group per step, and the cost grows with the number of distinct adapters, not with the batch).
//
// What is computed, for a job (pair, rows) and each row in rows (llama.cpp's order of rounding):
//   shrink  t[r] = dot(A_r, x_row)                  r < rank      (f32 result)
//   expand  d[o] = dot(B_o, t)                      o < out       (f32 result)
//   add     y_row[o] = y_row[o] + scale * d[o]      (scale * d rounded, then the add)
// For the token_embd pair (flipped layout, adapter.h) the shrink is replaced by t = row
// tokens[row] of A (a = [n_vocab x rank]); expand and add are the same (b = [dim x rank]).
//
// Batch invariance: every t value is one row of a kernels::MatMul over F32 weights (A), whose
// per-(weight row, token) result is the same instruction sequence whatever the token count, the
// tiling, the thread or where the token's row lies (kernels/README.md;
// MatMulGrouping.PerTokenResultsIndependentOfBatch covers F32); rows of a slice that are not
// consecutive are gathered first, which moves values, not arithmetic. Every d value (and its add)
// is computed by the expand kernel with one fixed sequence per output — an FMA chain per lane over
// rank, then the same lane-reduction tree for each of the 8 outputs of a block, the last block
// padded by repeating its last row — so it depends only on (B_o, t, rank), not on which outputs
// or rows share the call (scalar kernel below AVX2: one ordered sum). So the delta a row
// receives is a function of (pair, that row's input) only: not of the other rows, their adapters,
// the grouping or the number of threads (AddLowRankTest.RowResultsAreBatchInvariant checks it
// with memcmp at every ISA level).
// Threads: with a pool and enough work (kParallelMacs), the shrink and the expand of all jobs of
// one call are each one pass over the pool, items handed out dynamically (row slices of a job;
// for the expand also out slices). Which thread computes an item never changes its bits.
// Memory traffic: A and B are read once per row slice of kRowSlice rows (a decode step reads each
// adapter's pairs once); that is the bound in decode, where the pairs are f32 and so, per
// adapter, ~4 * rank * (in + out) bytes per matrix — for a 768-wide model at rank 16 about 13 %
// of the Q8_0 matrix it modifies.
// Memory: the caller owns a LowRankScratch; it grows to the largest call seen and is reused, so
// steady-state calls perform no heap allocation (MatMul over F32 weights reads x in place).
// Thread contract: one call at a time per scratch (from the pool's owner thread).
// Errors: none; the caller validates shapes (the runner's ValidateBatch). Inert pairs (rank 0 or
// scale 0) and jobs without rows are skipped: their rows keep exactly their bits.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "lora/adapter.h"

namespace strata::lora {

// Rows per work item, outputs per expand item (a multiple of every vector width), and the
// multiply-adds of a call from which it is split over the pool.
inline constexpr uint32_t kRowSlice = 16;
inline constexpr uint32_t kOutSlice = 256;
inline constexpr size_t kParallelMacs = size_t{1} << 16;

// One pair applied to some rows of one activation matrix.
struct LowRankJob {
  const LoraPair* pair = nullptr;
  std::span<const uint32_t> rows;  // the rows r it applies to (distinct, any order)
  const float* x = nullptr;        // row r's input: x + r * x_stride (pair->in floats)
  size_t x_stride = 0;
  float* y = nullptr;  // row r's output: y + r * y_stride (pair->out floats), added to
  size_t y_stride = 0;
  // token_embd pair: tokens[r] is row r's token id (in [0, pair->in)); x is not read.
  const int32_t* tokens = nullptr;
};

// Reusable buffers of AddLowRank (grow-only). The members are AddLowRank's working state; callers
// only own the object.
struct LowRankScratch {
  struct Item {
    uint32_t job;
    uint32_t i0, i1;  // slice of the job's rows
    uint32_t o0, o1;  // slice of the outputs (expand items)
  };
  std::vector<float> t;                // shrunk rows, [sum of rows x rank] in job order
  std::vector<size_t> t_offset;        // per job: its first float in t
  std::vector<std::vector<float>> xg;  // per thread: a row slice's inputs gathered (kRowSlice x in)
  std::vector<Item> shrink, expand;
  std::atomic<size_t> next{0};

  size_t capacity_bytes() const;
};

// y[row] += pair.scale * B (A x[row]) for every job and row (see above). pool may be null.
void AddLowRank(std::span<const LowRankJob> jobs, LowRankScratch* scratch, ThreadPool* pool);

}  // namespace strata::lora
