// FakeModelRunner: a deterministic stand-in for the model, for scheduler/engine tests.
//
// It simulates paged KV storage: every (block, slot) written holds {position, token, chain hash},
// where chain(p) = Mix(chain(p - 1), token(p), p). The logits for the last token of a chunk are a
// function of chain(last position) only — i.e. of the sequence's entire token history as READ BACK
// FROM THE SIMULATED KV through the block table — so a wrong block table, a missed copy-on-write or
// a bad prefix-cache hit changes the tokens and is caught by equivalence tests. The distribution is
// peaked: one preferred token (from the hash) gets +peak, a second one +peak/2, the rest small
// noise.
//
// Misuse is detected and returned as an Internal error (and counted): empty chunk, a position not
// covered by the block table, block ids out of range, reading a slot that does not hold the
// expected position (never written / overwritten), a known sequence whose chunk does not start
// where its previous one ended (reused or skipped positions), the same sequence twice in one batch,
// two sequences of one batch writing the same slot, or writing a block another sequence of the same
// batch also maps (a missed copy-on-write).
// Hidden-state output (want_hidden, for embedding requests): every token of such a chunk gets
// hidden_dim values that are a function of chain(its position) — so they too depend on the whole
// history read back through the block table — see Hidden(). want_all_logits: every token of the
// chunk gets the logits row Logits(chain(its position), position), in token order.
// LoRA (BatchSeq::lora): the adapter's digest selects another model — the chain of a sequence with
// an adapter starts from ChainInit(adapter) instead of the base's — and every slot records the
// adapter's tag, so reading a block written under another adapter (or the base model) is a misuse
// error: a prefix-cache hit across adapters cannot go unnoticed.
// Every batch is recorded (with each entry's adapter) so tests can check budgets and the active
// set.
// Thread contract: single-threaded (the engine thread), like any ModelRunner.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/runner/model_runner.h"
#include "engine/sched/scheduler.h"

namespace strata::engine::sched {

struct FakeRunnerConfig {
  int n_vocab = 64;
  int num_blocks = 0;  // must match the KvManager's
  int block_size = 16;
  float peak = 6.0f;
  uint64_t seed = 1;
  bool verify_history = true;  // check every earlier position of each chunk's sequence (O(length))
  int hidden_dim = 8;          // width of the want_hidden rows (0: no hidden-state output)
};

class FakeModelRunner final : public runner::ModelRunner {
 public:
  struct RecordedSeq {
    int64_t seq_id;
    int start_pos;
    int num_tokens;
    bool want_logits;
    bool want_hidden = false;
    bool want_all_logits = false;
    const lora::Adapter* lora = nullptr;
  };
  using RecordedBatch = std::vector<RecordedSeq>;

  explicit FakeModelRunner(const FakeRunnerConfig& config);

  int n_vocab() const override { return cfg_.n_vocab; }
  int hidden_dim() const override { return cfg_.hidden_dim; }
  using runner::ModelRunner::Run;
  Status Run(std::span<const runner::BatchSeq> batch, std::vector<float>* logits,
             std::vector<float>* hidden) override;
  // Copy-on-write in the simulated storage (pass as the engine's BlockCopyFn).
  void CopyBlocks(std::span<const BlockCopy> copies);

  // The logits row the fake model produces after a history whose chain hash is `chain` at `pos`.
  void Logits(uint64_t chain, int pos, std::span<float> out) const;
  // The hidden row (hidden_dim values in [-1, 1)) of the token at `pos` whose history has chain
  // hash `chain`.
  void Hidden(uint64_t chain, int pos, std::span<float> out) const;
  // Chain hash of a whole token history (as the runner would compute it) under `adapter` (null =
  // the base model).
  static uint64_t Chain(std::span<const int32_t> tokens, const lora::Adapter* adapter = nullptr);
  // The chain before the first token, and the tag a slot written under `adapter` carries (0 for
  // the base model); both functions of the adapter's digest only.
  static uint64_t ChainInit(const lora::Adapter* adapter);
  static uint64_t LoraTag(const lora::Adapter* adapter);

  // Tiered-KV tests: one block's simulated KV (block_size slots) as bytes, and back.
  std::vector<uint8_t> ExportBlock(int32_t block) const;
  void ImportBlock(int32_t block,
                   const std::vector<uint8_t>& bytes);  // ignored unless the exact size

  const std::vector<RecordedBatch>& batches() const { return batches_; }
  int64_t num_copies() const { return num_copies_; }
  int64_t num_errors() const { return num_errors_; }
  void set_record(bool on) { record_ = on; }

 private:
  struct Slot {
    int32_t pos = -1;
    int32_t token = -1;
    uint64_t chain = 0;
    uint64_t lora = 0;  // LoraTag of the adapter it was written under
  };
  static uint64_t Mix(uint64_t h, int32_t token, int32_t pos);
  Status Fail(const std::string& msg);
  const Slot& At(int32_t block, int slot) const {
    return slots_[static_cast<size_t>(block) * static_cast<size_t>(cfg_.block_size) +
                  static_cast<size_t>(slot)];
  }
  Slot& At(int32_t block, int slot) {
    return slots_[static_cast<size_t>(block) * static_cast<size_t>(cfg_.block_size) +
                  static_cast<size_t>(slot)];
  }

  FakeRunnerConfig cfg_;
  std::vector<Slot> slots_;
  std::unordered_map<int64_t, int> next_pos_;  // seq id -> end of its last chunk
  std::vector<RecordedBatch> batches_;
  std::vector<int32_t> writer_;  // per block: index in batch of the seq writing it this batch (-1)
  std::vector<int32_t>
      mapper_;  // per block: index in batch of a seq mapping it (-1), -2 if several
  int64_t num_copies_ = 0;
  int64_t num_errors_ = 0;
  bool record_ = true;
};

}  // namespace strata::engine::sched
