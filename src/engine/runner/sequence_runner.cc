#include "engine/runner/sequence_runner.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace strata::engine::runner {

Result<std::unique_ptr<SequenceRunner>> SequenceRunner::Create(const model::Model& model, int n_ctx,
                                                               ThreadPool* pool,
                                                               kv::KvDType kv_dtype) {
  const model::ModelConfig& cfg = model.config();
  n_ctx = n_ctx > 0 ? std::min(n_ctx, cfg.ctx_len) : std::min(cfg.ctx_len, 4096);
  kv::KvLayout layout;
  layout.n_layers = cfg.n_layers;
  layout.kv_dim = cfg.kv_dim();
  layout.block_size = kBlockSize;
  layout.num_blocks = std::max(1, (n_ctx + kBlockSize - 1) / kBlockSize);
  layout.dtype = kv_dtype;
  ASSIGN_OR_RETURN(auto storage, kv::KvStorage::Create(layout));
  return std::unique_ptr<SequenceRunner>(
      new SequenceRunner(model, n_ctx, pool, std::move(storage)));
}

SequenceRunner::SequenceRunner(const model::Model& model, int n_ctx, ThreadPool* pool,
                               std::unique_ptr<kv::KvStorage> storage)
    : n_ctx_(n_ctx), storage_(std::move(storage)), runner_(model, storage_.get(), pool) {
  table_.resize(static_cast<size_t>(storage_->layout().num_blocks));
  std::iota(table_.begin(), table_.end(), 0);
  logits_.reserve(static_cast<size_t>(model.config().n_vocab));
}

Result<std::span<const float>> SequenceRunner::Eval(std::span<const int32_t> tokens) {
  const size_t n = tokens.size();
  if (n == 0) return Status::InvalidArgument("empty batch: at least one token is required");
  if (static_cast<size_t>(n_past_) + n > static_cast<size_t>(n_ctx_))
    return Status::OutOfRange("sequence of " + std::to_string(static_cast<size_t>(n_past_) + n) +
                              " tokens exceeds the context size of " + std::to_string(n_ctx_));
  BatchSeq seq{0, tokens, n_past_, table_, /*want_logits=*/true};
  seq.lora = lora_;
  RETURN_IF_ERROR(runner_.Run(std::span<const BatchSeq>(&seq, 1), &logits_));
  n_past_ += static_cast<int>(n);
  return std::span<const float>(logits_);
}

}  // namespace strata::engine::runner
