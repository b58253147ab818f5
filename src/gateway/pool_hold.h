// gateway/pool_hold: requests held for a pool that has no ready replica (a pool scaled to zero,
// or one whose replicas are all starting). A pool with `cold_start_hold_ms > 0` does not answer
// 503 at once when no replica is eligible: the request waits here, up to that bound, in a bounded
// queue (`cold_start_max_held` per pool; a full queue answers 503 at once), and is dispatched as
// soon as the pool has an eligible replica. The count held per pool is exported as
// `strata_gateway_pool_held_requests{pool}`, the demand signal the control plane (and KEDA's
// activation) reads to start the first replica of a pool scaled to zero.
//
// Ownership: PoolHolds owns the entries (their callbacks and what those capture).
// Thread contract: every method is thread-safe (one mutex); callbacks run outside it, on the
// thread that calls Tick (or Clear).
// Errors: none; an outcome per entry (HoldOutcome).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <string>

#include "base/mutex.h"

namespace strata::gateway {

enum class HoldOutcome { kReady, kTimeout, kCancelled, kStopped };
std::string_view HoldOutcomeName(HoldOutcome o);  // "ready" | "timeout" | "cancelled" | "stopped"

class PoolHolds {
 public:
  using Clock = std::chrono::steady_clock;
  using Resume = std::function<void(HoldOutcome)>;

  // Holds one request for `pool` until `deadline`. False (nothing held, `resume` not kept) when
  // the pool already holds `max_held` requests.
  bool Hold(const std::string& pool, int max_held, Clock::time_point deadline, Resume resume,
            std::function<bool()> cancelled);
  // Resumes, in arrival order, every entry whose pool is ready (kReady), whose client went away
  // (kCancelled) or whose deadline passed (kTimeout); the others stay.
  void Tick(Clock::time_point now, const std::function<bool(const std::string&)>& pool_ready);
  // Resumes every entry with kStopped (shutdown).
  void Clear();
  // Requests held now, per pool (pools that held any since start stay listed, with 0).
  std::map<std::string, int> Counts() const;

 private:
  struct Entry {
    Clock::time_point deadline;
    Resume resume;
    std::function<bool()> cancelled;
  };
  mutable Mutex mu_;
  std::map<std::string, std::deque<Entry>> held_ GUARDED_BY(mu_);
};

}  // namespace strata::gateway
