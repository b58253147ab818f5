#include "engine/sched/tier_staging.h"

#include <algorithm>

#include "cachekey/block_hash.h"

namespace strata::engine::sched {

TierStaging::~TierStaging() { Cancel(); }

bool TierStaging::WantsPrefetch(std::span<const int32_t> tokens, bool started,
                                std::span<const kv::BlockHash> prompt_hashes,
                                std::span<const uint8_t> salt, const kv::KvManager& kv) {
  if (fetching()) return false;
  const int len = static_cast<int>(tokens.size());
  if (hashes_tokens_ != len) {
    if (!started) {  // tokens == prompt: reuse the scheduler's prompt hashes instead of rehashing
      hashes_.assign(prompt_hashes.begin(), prompt_hashes.end());
    } else {
      hashes_ = cachekey::ComputeBlockHashes(tokens, block_size_, salt);
    }
    hashes_tokens_ = len;
    // A preempted request had all its blocks in the pool when it was preempted.
    if (started) covered_at_prefetch_ = static_cast<int>(hashes_.size());
  }
  const int max_blocks = std::min(static_cast<int>(hashes_.size()), (len - 1) / block_size_);
  const int covered = kv.ProbeHashes(
      std::span<const kv::BlockHash>(hashes_.data(), static_cast<size_t>(std::max(max_blocks, 0))));
  int effective = covered;
  if (!staged_.empty() && staged_first_ <= covered)
    effective = std::max(covered, staged_first_ + static_cast<int>(staged_.size()));
  if (effective >= max_blocks) return false;
  // First prefetch, or blocks were evicted from the pool since the last one (they went down to the
  // tiers); a plain miss in the tiers is not retried.
  if (covered_at_prefetch_ >= 0 && covered >= covered_at_prefetch_) return false;
  want_first_ = covered;
  want_end_ = max_blocks;
  return true;
}

void TierStaging::Start(TierPort* port, std::string_view tenant, std::function<void()> wake,
                        TimePoint deadline) {
  std::vector<kv::BlockHash> keys(hashes_.begin() + want_first_, hashes_.begin() + want_end_);
  staged_.clear();
  staged_first_ = want_first_;
  covered_at_prefetch_ = want_first_;
  deadline_ = deadline;
  fetch_ = port->Prefetch(std::move(keys), tenant, std::move(wake));
}

TierStaging::PollResult TierStaging::Poll(TimePoint now) {
  if (fetch_ == nullptr) return PollResult::kLoaded;
  if (fetch_->ready()) {
    staged_ = fetch_->Take();
    fetch_.reset();
    return PollResult::kLoaded;
  }
  if (now >= deadline_) {  // a slow tier must not delay the request further: compute instead
    Cancel();
    return PollResult::kTimedOut;
  }
  return PollResult::kPending;
}

void TierStaging::Cancel() {
  if (fetch_ == nullptr) return;
  fetch_->Cancel();
  fetch_.reset();
}

TierStaging::Staged TierStaging::StagedFrom(int first, int num_tokens) const {
  if (staged_.empty() || hashes_tokens_ != num_tokens) return {};
  // Blocks a hit may cover: all but the last token (it must be computed for the logits).
  const int max_blocks = std::min(static_cast<int>(hashes_.size()), (num_tokens - 1) / block_size_);
  const int end = std::min(max_blocks, staged_first_ + static_cast<int>(staged_.size()));
  if (first < staged_first_ || first >= end) return {};
  const size_t n = static_cast<size_t>(end - first);
  return Staged{std::span<const kv::BlockHash>(hashes_.data() + first, n),
                std::span<const std::vector<uint8_t>>(staged_.data() + (first - staged_first_), n)};
}

void TierStaging::Adopted() {
  staged_.clear();
  staged_.shrink_to_fit();
}

}  // namespace strata::engine::sched
