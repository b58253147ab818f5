// gateway/admission: whether a request may start now — per-tenant token buckets (counted in
// tokens: prompt + max_tokens, settled with the real usage), request-rate buckets and concurrency
// caps, and a per-pool capacity bound (PoolConfig::max_in_flight) where gold waits first.
//
// Limits (0 in the config = unlimited), checked in this order; a rejection consumes nothing:
//   tenant_concurrency  the tenant's admitted + waiting requests < max_concurrency.
//   tenant_requests     a bucket of requests_per_minute requests, refilled continuously
//                       (requests_per_minute / 60 per second); a request takes 1.
//   tenant_tokens       a bucket of tokens_per_minute tokens, refilled continuously; a request
//                       needs min(tokens, capacity) in the bucket and then takes `tokens` (the
//                       level may go below zero: one request larger than the bucket is admitted
//                       when the bucket is full and the tenant then waits for the debt to refill).
//   pool_capacity       admitted requests of the pool < max_in_flight. When full, a request whose
//                       priority has admission.max_wait > 0 waits (its tenant's concurrency,
//                       request and tokens are reserved while it waits); a Release admits waiters
//                       gold first, FIFO within a priority; Tick rejects those past max_wait.
// Retry-After: for a bucket, the time until the bucket holds what the request needs; for
// tenant_concurrency and pool_capacity, (requests ahead + 1) / the pool's measured drain rate
// (completions per second, an EWMA over the intervals between its Releases), 1 s before any
// measurement; always in [kMinRetryAfterS, kMaxRetryAfterS].
// Unknown tenants ("" included) have no tenant limits; the pool bound still applies.
//
// Thread contract: thread-safe (one mutex, short critical sections); `done` callbacks are never
// invoked under the lock — they run on the caller's thread, inside Admit, Release, Tick or
// Reconfigure. Times are passed in (`now`), never read from a clock, so tests are deterministic.
// Errors: a rejection is Result<Ticket> ResourceExhausted plus the Rejection; unknown tickets
// passed to Settle/Release are ignored (a double Release is harmless).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "gateway/config.h"
#include "gateway/types.h"

namespace strata::gateway {

inline constexpr double kMinRetryAfterS = 0.001;
inline constexpr double kMaxRetryAfterS = 3600;

struct AdmitRequest {
  std::string tenant;  // "" = none
  std::string pool;
  Priority priority = Priority::kSilver;
  int64_t tokens = 0;  // prompt + max_tokens
  Clock::time_point now;
};

struct Rejection {
  std::string
      reason;  // "tenant_tokens" | "tenant_requests" | "tenant_concurrency" | "pool_capacity"
  double retry_after_s = 1;
  std::string message;  // names the limit and its value
};

class Admission {
 public:
  using Ticket = uint64_t;
  using Done = std::function<void(Result<Ticket>, std::optional<Rejection>)>;

  explicit Admission(std::shared_ptr<const GatewayConfig> cfg);
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // Keeps bucket levels (clipped to the new capacity), counts and waiters of tenants and pools
  // that remain; a tenant new to the config (or newly limited) starts with full buckets. Waiters
  // that now fit are admitted.
  void Reconfigure(std::shared_ptr<const GatewayConfig> cfg) EXCLUDES(mu_);

  // Calls `done` exactly once: at once (admitted or rejected) or later (a waiting request
  // admitted by a Release, or rejected by Tick when its max_wait passed). Never under the lock.
  void Admit(const AdmitRequest& r, Done done) EXCLUDES(mu_);
  // Corrects the tenant's token bucket with the real usage (refund or charge the difference from
  // what the ticket was charged so far).
  void Settle(Ticket t, int64_t actual_tokens) EXCLUDES(mu_);
  // The request finished: frees concurrency/capacity, measures the drain rate, wakes waiters
  // (gold first).
  void Release(Ticket t, Clock::time_point now) EXCLUDES(mu_);
  // Expires waiters whose max_wait passed; the gateway calls it every ~50 ms.
  void Tick(Clock::time_point now) EXCLUDES(mu_);

  int64_t in_flight(std::string_view pool) const EXCLUDES(mu_);  // admitted, not released
  // Added (metrics, tests):
  int64_t waiting(std::string_view pool) const EXCLUDES(mu_);
  int64_t tenant_in_flight(std::string_view tenant) const EXCLUDES(mu_);  // admitted + waiting
  double tenant_tokens_level(std::string_view tenant, Clock::time_point now) const EXCLUDES(mu_);
  double drain_rate(std::string_view pool) const EXCLUDES(mu_);  // completions/s, 0 = unknown

 private:
  struct Bucket {
    double level = 0;
    Clock::time_point at{};
    bool started = false;
  };
  struct TenantState {
    Bucket tokens, requests;
    int64_t in_flight = 0;
  };
  struct PoolState {
    int64_t in_flight = 0;
    double interval_ewma_s = 0;  // between Releases; 0 = not measured yet
    Clock::time_point last_release{};
    bool released_once = false;
  };
  struct TicketState {
    std::string tenant, pool;
    int64_t charged_tokens = 0;  // what the tenant's token bucket was charged
    bool admitted = false;       // false while it waits for pool capacity
  };
  struct Waiter {
    Ticket ticket;
    Clock::time_point deadline;
    Done done;
  };
  using Callback = std::function<void()>;

  std::optional<Rejection> CheckTenant(const AdmitRequest& r) REQUIRES(mu_);
  Rejection PoolFull(const std::string& pool, int64_t ahead) const REQUIRES(mu_);
  double DrainWait(const std::string& pool, int64_t ahead) const REQUIRES(mu_);
  Ticket Reserve(const AdmitRequest& r) REQUIRES(mu_);
  void Unreserve(Ticket t) REQUIRES(mu_);
  bool PoolHasRoom(const std::string& pool) const REQUIRES(mu_);
  void WakeWaiters(const std::string& pool, std::vector<Callback>* out) REQUIRES(mu_);
  void Refill(const TenantConfig& cfg, TenantState* s, Clock::time_point now) REQUIRES(mu_);

  mutable Mutex mu_;
  std::shared_ptr<const GatewayConfig> cfg_ GUARDED_BY(mu_);
  std::map<std::string, TenantState, std::less<>> tenants_ GUARDED_BY(mu_);
  std::map<std::string, PoolState, std::less<>> pools_ GUARDED_BY(mu_);
  std::map<Ticket, TicketState> tickets_ GUARDED_BY(mu_);
  // Per pool, one FIFO per priority (gold first).
  std::map<std::string, std::array<std::deque<Waiter>, kNumPriorities>, std::less<>> waiters_
      GUARDED_BY(mu_);
  Ticket next_ticket_ GUARDED_BY(mu_) = 1;
};

}  // namespace strata::gateway
