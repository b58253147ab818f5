// SequenceRunner: one sequence on the batched forward pass (CpuModelRunner) — what `strata
// generate`, `strata bench model` and the model tests run. There is no second forward pass: this
// is a batch of one, with its own paged KV storage.
//
// Storage: ceil(n_ctx / kBlockSize) blocks, used in order (block table 0, 1, 2, ...), so with F32
// KV the runner reads a layer's history in place as one contiguous array. F32 KV (the default) is
// what the llama.cpp goldens were computed with; F16/Q8_0 are accepted for measurements. Ownership:
// borrows the model and the pool (they must outlive it); owns the storage and runner. Thread
// contract: one owner thread; Eval uses the pool for the work inside a step. Memory: after warm-up,
// Eval() of one token performs no heap allocation. Errors: Create returns the storage's
// InvalidArgument / ResourceExhausted. Eval returns InvalidArgument for an empty batch or a token
// id out of range, OutOfRange when the sequence would exceed n_ctx (the message has both numbers);
// nothing changes on error.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/kv/kv_storage.h"
#include "engine/runner/cpu_runner.h"
#include "lora/adapter.h"
#include "model/model.h"

namespace strata::engine::runner {

class SequenceRunner {
 public:
  static constexpr int kBlockSize = 16;

  // n_ctx <= 0 means the model's context length capped at 4096; larger values are capped at the
  // model's context length. pool may be null (single-threaded).
  static Result<std::unique_ptr<SequenceRunner>> Create(const model::Model& model, int n_ctx,
                                                        ThreadPool* pool,
                                                        kv::KvDType kv_dtype = kv::KvDType::kF32);

  // Appends `tokens` at position n_past() and runs the forward pass; returns the logits of the last
  // token ([n_vocab]), valid until the next Eval/Reset.
  Result<std::span<const float>> Eval(std::span<const int32_t> tokens);

  // The LoRA adapter applied to every later Eval (nullptr = the base model). Borrowed: it must
  // outlive its use. Changing it mid-sequence mixes KV computed with and without it (callers
  // Reset first).
  void set_lora(const lora::Adapter* adapter) { lora_ = adapter; }

  int n_past() const { return n_past_; }
  int n_ctx() const { return n_ctx_; }
  void Reset() { n_past_ = 0; }

 private:
  SequenceRunner(const model::Model& model, int n_ctx, ThreadPool* pool,
                 std::unique_ptr<kv::KvStorage> storage);

  int n_ctx_;
  int n_past_ = 0;
  std::unique_ptr<kv::KvStorage> storage_;
  CpuModelRunner runner_;
  std::vector<int32_t> table_;
  std::vector<float> logits_;
  const lora::Adapter* lora_ = nullptr;
};

}  // namespace strata::engine::runner
