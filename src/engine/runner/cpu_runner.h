// CpuModelRunner: the CPU implementation of ModelRunner — one forward pass per engine step over
// every token of the batch, with K/V in the paged KvStorage.
//
// Shape of a step (see README.md for why it is batch invariant):
//   - all tokens of all sequences are stacked into one activation matrix [n_total x dim], so each
//     weight matrix is streamed once per step (kernels::MatMul over n_total tokens);
//   - RoPE per token at its own position; K/V rows written to (block_table[pos / bs], pos % bs);
//   - attention per (sequence, kv head, tile of that sequence's tokens) on the pool: the keys and
//     values of positions [0, last position of the tile] are decoded to f32 once per work item,
//     then every (token, query head) pair of the tile is computed with the same ops as
//     the single-sequence reference path this runner replaced (DotF32 scores, Softmax, Axpy over
//     a contiguous f32 history), so f32 KV gives that path's bits (kernels::Attend);
//   - the final norm and output projection run only on the rows that want logits (one MatMul);
//     rows of want_hidden sequences get the final norm and are copied out (embeddings);
//   - LoRA (BatchSeq::lora): the rows of each distinct adapter of the step form one group; after
//     every base MatMul of a matrix the adapter has a pair for (q, k, v before bias and RoPE, o,
//     gate, up, down, the output projection) and after the embedding (token_embd), the group's
//     rows get scale * B (A x) (lora::AddLowRank: A and B streamed once per adapter per step).
//     Rows of the base model get no operation at all.
//
// Ownership: borrows the model, the KV storage and the pool; all must outlive the runner.
// Thread contract: Run() is called from one thread at a time (the engine thread); it uses the pool
// internally and writes the storage rows named by the batch.
// Memory: scratch buffers grow to the largest batch / context seen and are reused, so steady-state
// steps perform no heap allocation in the runner (kernels::MatMul keeps its own reusable scratch).
// Errors: Run() validates the whole batch before touching the storage and returns InvalidArgument
// (naming the sequence and the problem) for an empty chunk, a negative position, a block table
// that does not cover the chunk, a block id outside the storage, a token id out of range, or a
// LoRA adapter whose pairs do not fit the model's matrices (naming the tensor); and
// FailedPrecondition-style InvalidArgument when the storage layout does not fit the model.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/kv/kv_storage.h"
#include "engine/runner/model_runner.h"
#include "lora/adapter.h"
#include "lora/apply.h"
#include "model/model.h"
#include "model/rope.h"

namespace strata::engine::runner {

class CpuModelRunner final : public ModelRunner {
 public:
  // pool may be null (single-threaded).
  CpuModelRunner(const model::Model& model, kv::KvStorage* storage, ThreadPool* pool);

  int n_vocab() const override { return cfg_.n_vocab; }
  int hidden_dim() const override { return cfg_.dim; }
  using ModelRunner::Run;
  Status Run(std::span<const BatchSeq> batch, std::vector<float>* logits,
             std::vector<float>* hidden) override;

  // The checks Run() performs before computing anything (exposed for tests and the scheduler).
  Status ValidateBatch(std::span<const BatchSeq> batch) const;

  // Tokens per attention work item (a sequence's chunk is split into tiles of this many tokens
  // for each kv head). Affects speed only, never results.
  static constexpr int kAttnTileTokens = 32;

 private:
  struct AttnItem {
    int32_t seq;  // index into the batch
    int32_t kv_head;
    int32_t t0, t1;  // token range within the sequence's chunk
    int64_t cost;    // approximate work, for ordering
  };

  // Rows per step from which the per-row ops (norms, RoPE, adds, SiluMul) are split over the pool.
  static constexpr size_t kParallelRowsMin = 32;

  // Rows of one row space grouped by adapter: group g (lora_adapters_[g]) holds
  // rows[begin[g], begin[g + 1]), ascending.
  struct RowGroups {
    std::vector<uint32_t> rows;
    std::vector<uint32_t> begin;
    std::span<const uint32_t> Group(size_t g) const {
      return std::span<const uint32_t>(rows.data() + begin[g], begin[g + 1] - begin[g]);
    }
  };
  // One matrix product a LoRA delta is added to: the pair of `layer`/`target` (layer kLoraOutput:
  // the output projection; kLoraTokenEmbd: the embedding, with per-row token ids), its input rows
  // x and output rows y.
  static constexpr int kLoraOutput = -1, kLoraTokenEmbd = -2;
  struct LoraIo {
    int layer;
    lora::Target target;
    const float* x;
    size_t x_stride;
    float* y;
    size_t y_stride;
  };

  Status CheckLayout() const;
  Status CheckAdapter(size_t index, const BatchSeq& s) const;
  // Per step: the distinct adapters and the row groups of the three row spaces (all rows; the
  // last layer's moved output rows; the logits rows of the output projection).
  void PlanLora(std::span<const BatchSeq> batch, size_t n);
  // Adds every group's delta for each product of `ios` (one lora::AddLowRank call).
  void AddLora(std::initializer_list<LoraIo> ios, const RowGroups& groups);
  // fn(r0, r1, thread) over [0, n), on the pool when n >= kParallelRowsMin.
  template <typename F>
  void ForRows(size_t n, F&& fn);
  void EnsureScratch(size_t n_tokens, size_t max_len, size_t n_items);
  // Fills the per-step plan (rows, attention items, output rows); returns the number of rows.
  size_t PlanStep(std::span<const BatchSeq> batch);
  // One layer over rows [0, n); returns the rows still computed after it (the output rows after
  // the last layer).
  size_t ForwardLayer(int layer, std::span<const BatchSeq> batch, size_t n);
  // Final norm of the output rows into hidden (want_hidden) and the output projection (logits).
  void WriteOutputs(std::vector<float>* logits, std::vector<float>* hidden);
  void WriteKv(int layer, std::span<const BatchSeq> batch);
  // Runs the work items over the pool (items_ for every row, out_items_ for the last layer).
  void Attention(int layer, std::span<const BatchSeq> batch, const std::vector<AttnItem>& items);
  void AttendItem(int layer, const BatchSeq& seq, size_t row_begin, const AttnItem& item,
                  int thread);
  // F16 storage only: rows [0, len) of one kv head of one sequence (K or V), as stored
  // (head_dim halves each), into dst [len x head_dim].
  void GatherHeadF16(bool is_v, int layer, std::span<const int32_t> table, int kv_head, size_t len,
                     uint16_t* dst) const;
  // Whether the blocks holding positions [0, len) are consecutive block ids: then the rows of one
  // layer are one array, row_bytes apart (kv_storage.h layout), and F32 attention reads them in
  // place instead of gathering them.
  bool ConsecutiveBlocks(std::span<const int32_t> table, size_t len) const;
  // Decodes rows [0, len) of one kv head of one sequence (K or V, F32 or Q8_0 storage) into f32
  // [len x head_dim].
  void GatherHead(bool is_v, int layer, std::span<const int32_t> table, int kv_head, size_t len,
                  float* dst, float* row_tmp) const;

  const model::Model& model_;
  const model::ModelConfig& cfg_;
  kv::KvStorage* storage_;
  ThreadPool* pool_;
  model::Rope rope_;

  // Per-step scratch (grows, reused). Activations: x [n x dim], xn [n x dim], q [n x q_dim],
  // k,v [n x kv_dim], att [n x q_dim], gate/up [n x ffn].
  std::vector<float> x_, xn_, q_, k_, v_, att_, gate_, up_;
  std::vector<size_t> seq_row_begin_;  // [batch]: first row of each sequence
  std::vector<uint32_t> row_seq_;      // [n]: batch index of each row
  std::vector<AttnItem> items_;
  // Rows the last layer must compute (the last token of each want_logits sequence and every token
  // of each want_hidden sequence, ascending) and their attention items: after its K/V are stored,
  // the last layer runs only for these rows, moved to the front (row w <- out_rows_[w]).
  std::vector<size_t> out_rows_;
  std::vector<AttnItem> out_items_;
  // Per want_logits sequence (batch order): its row among the moved rows. Per moved row: its row in
  // the caller's hidden output, or -1.
  std::vector<size_t> logit_rows_;
  std::vector<int64_t> hidden_dst_;
  std::atomic<size_t> next_item_{0};
  // LoRA plan of the step (empty adapters: no LoRA work at all), reused scratch.
  std::vector<const lora::Adapter*> lora_adapters_;
  std::vector<int32_t> seq_lora_;   // [batch]: index into lora_adapters_, or -1
  std::vector<int32_t> row_token_;  // [n]: token id of each row (token_embd delta)
  RowGroups lora_all_, lora_out_, lora_logits_;
  bool lora_moved_ = false;  // this step's last layer runs on moved rows (lora_out_)
  std::vector<lora::LowRankJob> lora_jobs_;
  lora::LowRankScratch lora_scratch_;
  // Per-thread attention scratch: keys/values of one head [max_len x head_dim], scores [max_len],
  // one decoded full row [kv_dim] (Q8_0 heads not aligned to 32).
  struct ThreadScratch {
    std::vector<float> k, v, scores, row;
    std::vector<uint16_t> k16, v16;  // F16 KV: the head's rows copied as they are stored
    std::vector<const uint16_t*> k_blocks,
        v_blocks;  // F16 KV, paged: the head's rows in each block
  };
  std::vector<ThreadScratch> thread_scratch_;
  size_t scratch_tokens_ = 0, scratch_len_ = 0;
  // State of the current Attention() call, read by the pool's workers.
  int cur_layer_ = 0;
  std::span<const BatchSeq> cur_batch_;
  const std::vector<AttnItem>* cur_items_ = nullptr;
};

}  // namespace strata::engine::runner
