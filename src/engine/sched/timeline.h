// RequestTimeline: when each phase of one engine request happened, on the engine's Clock — what
// the server turns into the latency-breakdown histograms, the opt-in timing header and (when the
// request is traced) its spans.
//
// Recorded by the engine alone (Submit stamps `submitted`; everything else is the engine thread),
// with no I/O and no dependency on tracing. Every vector is bounded (kMaxChunks, kMaxTierFetches,
// kMaxPreemptions entries kept; they grow per chunk / fetch / preemption, never per token); the
// counters count everything, kept or not.
//
// Phases (all time points on the engine's Clock; a zero TimePoint = did not happen):
//   submitted        Engine::Submit accepted the request
//   first_scheduled  the start of the first engine step whose batch carries the request (the end
//                    of its queue wait; a tier prefetch while waiting is part of the wait)
//   prefill_chunks   each prompt chunk computed before the first token: [step start, forward pass
//                    done), tokens fed (a chunk recomputed after a preemption during prefill counts
//                    again). Without preemption the token sum is prompt - cached_tokens.
//   first_token      the forward pass that sampled the first token(s) ended
//   finished         the request's last token was sampled (or it was ended: cancelled, error); on
//                    an n > 1 request's non-final completions, the time that completion ended
//   preempted_at / resumed_at  each preemption (scheduler) and readmission (first step that runs
//                    it again); preemptions / resumptions count them all
//   tier_fetches     each KV-tier prefetch: [start, loaded / timed out / cancelled), blocks asked
//                    and blocks brought back
//   cached_tokens    prompt tokens not computed at the first admission (prefix-cache hit plus
//                    blocks adopted from a KV tier)
//   decode_steps     decode tokens computed (one per sequence per decode step)
// Ordering: submitted <= first_scheduled <= first_token <= finished, every chunk and preemption
// between first_scheduled and finished (a request preempted in the very step that admitted it is
// the one exception: its first preempted_at may precede first_scheduled).
//
// Delivery: TokenEvent::timeline, an immutable snapshot (shared_ptr<const>) on each completion's
// first token event and on its terminal event (see request.h).
// Thread contract: a plain value; the engine writes its own copy, readers get const snapshots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/sched/clock.h"

namespace strata::engine::sched {

struct RequestTimeline {
  static constexpr size_t kMaxChunks = 64;
  static constexpr size_t kMaxTierFetches = 32;
  static constexpr size_t kMaxPreemptions = 32;

  struct Chunk {
    TimePoint start{}, end{};
    int tokens = 0;
  };
  struct TierFetch {
    TimePoint start{}, end{};
    int blocks_requested = 0;
    int blocks = 0;  // brought back (0 on a miss, a timeout or a cancel)
    bool timed_out = false;
  };

  TimePoint submitted{}, first_scheduled{}, first_token{}, finished{};
  std::vector<Chunk> prefill_chunks;    // <= kMaxChunks kept
  int num_prefill_chunks = 0;           // all of them
  int64_t prefill_tokens = 0;           // tokens of all of them
  std::vector<TierFetch> tier_fetches;  // <= kMaxTierFetches kept
  int num_tier_fetches = 0;
  int preemptions = 0;
  int resumptions = 0;
  std::vector<TimePoint> preempted_at, resumed_at;  // <= kMaxPreemptions each
  int cached_tokens = 0;
  int64_t decode_steps = 0;

  static bool Set(TimePoint t) { return t != TimePoint{}; }
  bool scheduled() const { return Set(first_scheduled); }
  bool has_first_token() const { return Set(first_token); }

  // Engine side.
  void AddChunk(TimePoint start, TimePoint end, int tokens) {
    num_prefill_chunks += 1;
    prefill_tokens += tokens;
    if (prefill_chunks.size() < kMaxChunks) prefill_chunks.push_back({start, end, tokens});
  }
  void Preempted(TimePoint t) {
    preemptions += 1;
    if (preempted_at.size() < kMaxPreemptions) preempted_at.push_back(t);
  }
  // Called for every step that runs the request: records a readmission after a preemption.
  void Ran(TimePoint t) {
    if (resumptions >= preemptions) return;
    resumptions = preemptions;
    if (resumed_at.size() < kMaxPreemptions) resumed_at.push_back(t);
  }
  // A prefetch started; returns its index in tier_fetches (-1: not kept).
  int StartFetch(TimePoint t, int blocks_requested) {
    num_tier_fetches += 1;
    if (tier_fetches.size() >= kMaxTierFetches) return -1;
    tier_fetches.push_back({t, TimePoint{}, blocks_requested, 0, false});
    return static_cast<int>(tier_fetches.size()) - 1;
  }
  void EndFetch(int index, TimePoint t, int blocks, bool timed_out) {
    if (index < 0 || static_cast<size_t>(index) >= tier_fetches.size()) return;
    TierFetch& f = tier_fetches[static_cast<size_t>(index)];
    if (Set(f.end)) return;
    f.end = t;
    f.blocks = blocks;
    f.timed_out = timed_out;
  }
};

}  // namespace strata::engine::sched
