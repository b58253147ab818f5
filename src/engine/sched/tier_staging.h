// TierStaging: one waiting request's traffic with the KV tiers below the pool — which of its
// blocks to ask the tiers for, the fetch in flight, and the blocks it brought back, staged until
// the request's admission adopts them into the pool.
//
// Life: the engine asks WantsPrefetch for a waiting single-sequence request each step; when it
// says yes, Start asks the TierPort for the missing blocks and the scheduler holds the request
// (fetching() — it keeps its place) until Poll reports the fetch loaded or timed out. At
// admission the scheduler takes StagedFrom(first block after the pool hit) and plans their
// adoption; once the admission sticks, Adopted() drops the staged copies.
// Retry rule: a request is prefetched again only when its pool coverage dropped since its last
// prefetch (its blocks were evicted meanwhile, down to the tiers) — a miss is not retried.
//
// Ownership: owned by its RequestState (null when the engine has no tiers); destroying it cancels
// a fetch in flight. Thread contract: engine thread only (the fetch's `wake` runs on a worker).
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/kv/kv_manager.h"
#include "engine/sched/clock.h"
#include "engine/sched/tier_port.h"

namespace strata::engine::sched {

class TierStaging {
 public:
  explicit TierStaging(int block_size) : block_size_(block_size) {}
  ~TierStaging();
  TierStaging(const TierStaging&) = delete;
  TierStaging& operator=(const TierStaging&) = delete;

  // Whether blocks of `tokens` (the request's one sequence) that the pool lacks should be asked
  // from the tiers now. Refreshes the chain of full-block hashes when the token count changed:
  // `prompt_hashes` when the tokens are still the prompt (a never-started request; non-empty),
  // else hashed here with `salt`. False while a fetch is in flight.
  bool WantsPrefetch(std::span<const int32_t> tokens, bool started,
                     std::span<const kv::BlockHash> prompt_hashes, std::span<const uint8_t> salt,
                     const kv::KvManager& kv);
  // Asks `port` for the blocks the last WantsPrefetch found missing; `wake` runs on a worker when
  // the fetch is ready. Drops previously staged blocks.
  void Start(TierPort* port, std::string_view tenant, std::function<void()> wake,
             TimePoint deadline);
  bool fetching() const { return fetch_ != nullptr; }
  int blocks_asked() const { return want_end_ - want_first_; }            // by the last Start
  int blocks_staged() const { return static_cast<int>(staged_.size()); }  // brought back
  bool ready() const { return fetch_ != nullptr && fetch_->ready(); }

  enum class PollResult { kPending, kLoaded, kTimedOut };
  // Loaded: the payloads are staged; timed out (now >= deadline): the fetch is cancelled and the
  // blocks will be computed. Either way the request is no longer held. kPending while in flight.
  PollResult Poll(TimePoint now);
  void Cancel();

  // For admission of a sequence with `num_tokens` tokens whose pool hit ends at block `first`:
  // the staged blocks that continue it (at most up to the block before the last token, which is
  // always computed). Empty when nothing staged fits there or the tokens changed.
  struct Staged {
    std::span<const kv::BlockHash> hashes;
    std::span<const std::vector<uint8_t>> payloads;  // payloads[i] is the content of hashes[i]
  };
  Staged StagedFrom(int first, int num_tokens) const;
  // The admission stuck: the staged copies are no longer needed.
  void Adopted();

 private:
  int block_size_;
  std::vector<kv::BlockHash> hashes_;  // chain of the tokens' full blocks
  int hashes_tokens_ = -1;             // token count hashes_ was computed for
  int covered_at_prefetch_ = -1;       // pool coverage when the last prefetch started (-1: none)
  int want_first_ = 0, want_end_ = 0;  // blocks the last WantsPrefetch found missing
  int staged_first_ = 0;               // staged_[i] is the content of hashes_[staged_first_ + i]
  std::vector<std::vector<uint8_t>> staged_;
  std::shared_ptr<TierPort::Fetch> fetch_;
  TimePoint deadline_{};
};

}  // namespace strata::engine::sched
