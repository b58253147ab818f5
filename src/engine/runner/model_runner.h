// ModelRunner: runs one engine step's forward pass over a batch of sequences whose KV lives in the
// paged KvStorage.
//
// The batch mixes prefill chunks and decode tokens. For each BatchSeq the runner embeds `tokens`
// at positions [start_pos, start_pos + tokens.size()), writes their K/V into the blocks named by
// `block_table` (position p -> block_table[p / block_size], slot p % block_size), attends causally
// over positions [0, start_pos + i] of that sequence (reading earlier K/V from its blocks — which
// may be shared prefix-cache blocks), and produces
//   - when `want_logits`: the logits of the LAST token of the chunk;
//   - when `want_all_logits`: the logits of EVERY token of the chunk (prompt logprobs), in token
//     order — the last of them is the row `want_logits` alone would give, bit for bit;
//   - when `want_hidden`: the final-normed hidden state (the input of the output projection,
//     hidden_dim() floats) of EVERY token of the chunk — what an embedding request pools.
// LoRA: an entry with `lora` set is computed with that adapter (y = W x + scale * B (A x) for every
// matrix it has a pair for, the token_embd delta at embedding); entries of different adapters and
// of none share one step, each adapter's delta added to its own rows only.
// Batch invariance: a sequence's outputs must not depend on which other sequences share the batch
// (weights are multiplied with a kernel whose per-row results do not depend on the token count
// or grouping; attention is computed per sequence; LoRA deltas are per row too), and an entry
// without an adapter (or with an inert one: rank 0 / scale 0) gets exactly the base model's bits.
// Thread contract: called from the engine thread only; uses its pool internally.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "lora/adapter.h"

namespace strata::engine::runner {

struct BatchSeq {
  int64_t seq_id = 0;
  std::span<const int32_t> tokens;       // >= 1 token
  int start_pos = 0;                     // position of tokens[0]
  std::span<const int32_t> block_table;  // must cover start_pos + tokens.size() positions
  bool want_logits = false;
  bool want_hidden = false;      // final-normed hidden rows of every token (needs hidden_dim() > 0)
  bool want_all_logits = false;  // logits of every token (not with want_hidden)
  // The request's LoRA adapter, or null for the base model. Read only during Run(); the caller
  // (the engine: the request's shared_ptr) keeps it alive. Its pairs must fit the model's shapes
  // (ValidateBatch; Adapter::Load already checked them against the model it was loaded for).
  const lora::Adapter* lora = nullptr;

  // Logits rows this entry produces: tokens.size() with want_all_logits, else 1 with want_logits.
  size_t logit_rows() const { return want_all_logits ? tokens.size() : want_logits ? 1 : 0; }
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual int n_vocab() const = 0;
  // Width of the rows want_hidden produces (the model dimension); 0 when this runner has no
  // hidden-state output (then a want_hidden entry is an error).
  virtual int hidden_dim() const { return 0; }
  // Fills logits: logit_rows() rows of n_vocab floats per BatchSeq, in batch order; and,
  // when `hidden` is not null, hidden: hidden_dim() floats per token of every want_hidden BatchSeq,
  // in batch order (a want_hidden entry with a null `hidden` is an InvalidArgument error).
  // Both vectors are resized as needed (the runner may keep capacity across calls).
  virtual Status Run(std::span<const BatchSeq> batch, std::vector<float>* logits,
                     std::vector<float>* hidden) = 0;
  // Logits only (no want_hidden entries).
  Status Run(std::span<const BatchSeq> batch, std::vector<float>* logits) {
    return Run(batch, logits, nullptr);
  }
};

}  // namespace strata::engine::runner
