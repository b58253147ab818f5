// Admission: token buckets refilled lazily (at each call, from the `now` passed in), counters per
// tenant and pool, and per-pool wait queues. Every public function collects the callbacks it must
// run while holding the lock and runs them after releasing it, so a callback may call back into
// Admission (e.g. Release from inside `done`) without deadlock.
#include "gateway/admission.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace strata::gateway {
namespace {

constexpr double kEwmaWeight = 0.2;     // of the newest interval between Releases
constexpr double kMaxIntervalS = 10;    // an idle gap counts as at most this
constexpr double kMinIntervalS = 1e-4;  // Releases at the same instant
constexpr double kFallbackWaitS = 1;    // before any drain measurement

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
double ClampRetry(double s) { return std::clamp(s, kMinRetryAfterS, kMaxRetryAfterS); }

void RunAll(std::vector<std::function<void()>>& cbs) {
  for (auto& cb : cbs) cb();
}

}  // namespace

Admission::Admission(std::shared_ptr<const GatewayConfig> cfg) { Reconfigure(std::move(cfg)); }

void Admission::Refill(const TenantConfig& cfg, TenantState* s, Clock::time_point now) {
  auto refill = [now](double per_minute, Bucket* b) {
    if (per_minute <= 0) return;
    if (!b->started) {
      b->level = per_minute;
      b->at = now;
      b->started = true;
      return;
    }
    if (now <= b->at) return;  // calls from several threads may pass slightly older times
    b->level = std::min(per_minute, b->level + per_minute / 60.0 * Seconds(now - b->at));
    b->at = now;
  };
  refill(cfg.tokens_per_minute, &s->tokens);
  refill(cfg.requests_per_minute, &s->requests);
}

void Admission::Reconfigure(std::shared_ptr<const GatewayConfig> cfg) {
  std::vector<Callback> cbs;
  {
    MutexLock lock(&mu_);
    cfg_ = std::move(cfg);
    std::map<std::string, TenantState, std::less<>> kept;
    for (const TenantConfig& t : cfg_->tenants) {
      auto it = tenants_.find(t.name);
      TenantState s = it == tenants_.end() ? TenantState{} : it->second;
      auto clip = [](double per_minute, Bucket* b) {
        if (per_minute <= 0) *b = Bucket{};  // unlimited now: starts full if limited again
        b->level = std::min(b->level, per_minute);
      };
      clip(t.tokens_per_minute, &s.tokens);
      clip(t.requests_per_minute, &s.requests);
      kept.emplace(t.name, s);
    }
    tenants_ = std::move(kept);
    for (auto& entry : waiters_) WakeWaiters(entry.first, &cbs);
  }
  RunAll(cbs);
}

double Admission::DrainWait(const std::string& pool, int64_t ahead) const {
  auto it = pools_.find(pool);
  if (it == pools_.end() || it->second.interval_ewma_s <= 0) return ClampRetry(kFallbackWaitS);
  return ClampRetry(static_cast<double>(ahead + 1) * it->second.interval_ewma_s);
}

std::optional<Rejection> Admission::CheckTenant(const AdmitRequest& r) {
  const TenantConfig* t = cfg_->FindTenant(r.tenant);
  if (t == nullptr) return std::nullopt;
  TenantState& s = tenants_[t->name];
  Refill(*t, &s, r.now);
  if (t->max_concurrency > 0 && s.in_flight >= t->max_concurrency)
    return Rejection{
        "tenant_concurrency", DrainWait(r.pool, 0),
        fmt::format("tenant '{}' is at max_concurrency {}", t->name, t->max_concurrency)};
  if (t->requests_per_minute > 0 && s.requests.level < 1)
    return Rejection{
        "tenant_requests", ClampRetry((1 - s.requests.level) / (t->requests_per_minute / 60.0)),
        fmt::format("tenant '{}' is over requests_per_minute {}", t->name, t->requests_per_minute)};
  if (t->tokens_per_minute > 0) {
    const double need =
        std::min(static_cast<double>(std::max<int64_t>(r.tokens, 0)), t->tokens_per_minute);
    if (s.tokens.level < need)
      return Rejection{"tenant_tokens",
                       ClampRetry((need - s.tokens.level) / (t->tokens_per_minute / 60.0)),
                       fmt::format("tenant '{}' is over tokens_per_minute {} (the request needs {} "
                                   "tokens)",
                                   t->name, t->tokens_per_minute, r.tokens)};
  }
  return std::nullopt;
}

Admission::Ticket Admission::Reserve(const AdmitRequest& r) {
  const Ticket id = next_ticket_++;
  const int64_t tokens = std::max<int64_t>(r.tokens, 0);
  tickets_[id] = TicketState{r.tenant, r.pool, tokens, false};
  if (const TenantConfig* t = cfg_->FindTenant(r.tenant)) {
    TenantState& s = tenants_[t->name];
    ++s.in_flight;
    if (t->requests_per_minute > 0) s.requests.level -= 1;
    if (t->tokens_per_minute > 0) s.tokens.level -= static_cast<double>(tokens);
  }
  return id;
}

void Admission::Unreserve(Ticket id) {
  auto it = tickets_.find(id);
  if (it == tickets_.end()) return;
  const TenantConfig* t = cfg_->FindTenant(it->second.tenant);
  auto st = tenants_.find(it->second.tenant);
  if (t != nullptr && st != tenants_.end()) {
    TenantState& s = st->second;
    s.in_flight = std::max<int64_t>(0, s.in_flight - 1);
    if (t->requests_per_minute > 0)
      s.requests.level = std::min(t->requests_per_minute, s.requests.level + 1);
    if (t->tokens_per_minute > 0)
      s.tokens.level = std::min(t->tokens_per_minute,
                                s.tokens.level + static_cast<double>(it->second.charged_tokens));
  }
  tickets_.erase(it);
}

bool Admission::PoolHasRoom(const std::string& pool) const {
  const PoolConfig* p = cfg_->FindPool(pool);
  if (p == nullptr || p->max_in_flight <= 0) return true;
  auto it = pools_.find(pool);
  return it == pools_.end() || it->second.in_flight < p->max_in_flight;
}

Rejection Admission::PoolFull(const std::string& pool, int64_t ahead) const {
  const PoolConfig* p = cfg_->FindPool(pool);
  return Rejection{
      "pool_capacity", DrainWait(pool, ahead),
      fmt::format("pool '{}' is at max_in_flight {}", pool, p != nullptr ? p->max_in_flight : 0)};
}

void Admission::WakeWaiters(const std::string& pool, std::vector<Callback>* out) {
  auto qs = waiters_.find(pool);
  if (qs == waiters_.end()) return;
  while (PoolHasRoom(pool)) {
    auto q = std::find_if(qs->second.begin(), qs->second.end(),
                          [](const std::deque<Waiter>& d) { return !d.empty(); });
    if (q == qs->second.end()) break;  // gold's queue first, then silver's, then bronze's
    Waiter w = std::move(q->front());
    q->pop_front();
    ++pools_[pool].in_flight;
    tickets_[w.ticket].admitted = true;
    out->push_back([done = std::move(w.done), t = w.ticket] { done(t, std::nullopt); });
  }
}

void Admission::Admit(const AdmitRequest& r, Done done) {
  std::optional<Rejection> rej;
  Ticket ticket = 0;
  {
    MutexLock lock(&mu_);
    rej = CheckTenant(r);
    if (!rej) {
      auto qs = waiters_.find(r.pool);
      int64_t waiting = 0;
      if (qs != waiters_.end())
        for (const auto& q : qs->second) waiting += static_cast<int64_t>(q.size());
      const auto max_wait = cfg_->admission.max_wait[static_cast<size_t>(r.priority)];
      if (waiting == 0 && PoolHasRoom(r.pool)) {
        ticket = Reserve(r);
        tickets_[ticket].admitted = true;
        ++pools_[r.pool].in_flight;
      } else if (max_wait.count() > 0) {
        const Ticket t = Reserve(r);
        waiters_[r.pool][static_cast<size_t>(r.priority)].push_back(
            Waiter{t, r.now + max_wait, std::move(done)});
        return;  // `done` runs at a Release, a Reconfigure or a Tick
      } else {
        rej = PoolFull(r.pool, waiting);
      }
    }
  }
  if (rej) {
    Status status = Status::ResourceExhausted(rej->message);
    done(std::move(status), std::move(rej));
  } else {
    done(ticket, std::nullopt);
  }
}

void Admission::Settle(Ticket t, int64_t actual_tokens) {
  MutexLock lock(&mu_);
  auto it = tickets_.find(t);
  if (it == tickets_.end()) return;
  actual_tokens = std::max<int64_t>(actual_tokens, 0);
  const TenantConfig* cfg = cfg_->FindTenant(it->second.tenant);
  auto st = tenants_.find(it->second.tenant);
  if (cfg != nullptr && cfg->tokens_per_minute > 0 && st != tenants_.end()) {
    const double diff = static_cast<double>(actual_tokens - it->second.charged_tokens);
    Bucket& b = st->second.tokens;
    b.level = std::min(cfg->tokens_per_minute, b.level - diff);
  }
  it->second.charged_tokens = actual_tokens;
}

void Admission::Release(Ticket t, Clock::time_point now) {
  std::vector<Callback> cbs;
  {
    MutexLock lock(&mu_);
    auto it = tickets_.find(t);
    if (it == tickets_.end() || !it->second.admitted) return;
    const std::string pool = it->second.pool;
    auto st = tenants_.find(it->second.tenant);
    if (st != tenants_.end()) st->second.in_flight = std::max<int64_t>(0, st->second.in_flight - 1);
    tickets_.erase(it);
    PoolState& p = pools_[pool];
    p.in_flight = std::max<int64_t>(0, p.in_flight - 1);
    if (p.released_once && now >= p.last_release) {
      const double interval =
          std::clamp(Seconds(now - p.last_release), kMinIntervalS, kMaxIntervalS);
      p.interval_ewma_s = p.interval_ewma_s <= 0
                              ? interval
                              : (1 - kEwmaWeight) * p.interval_ewma_s + kEwmaWeight * interval;
    }
    if (!p.released_once || now > p.last_release) p.last_release = now;
    p.released_once = true;
    WakeWaiters(pool, &cbs);
  }
  RunAll(cbs);
}

void Admission::Tick(Clock::time_point now) {
  std::vector<Callback> cbs;
  {
    MutexLock lock(&mu_);
    for (auto& [pool, queues] : waiters_) {
      for (auto& q : queues) {
        for (auto w = q.begin(); w != q.end();) {
          if (w->deadline > now) {
            ++w;
            continue;
          }
          Unreserve(w->ticket);
          int64_t ahead = 0;
          for (const auto& other : queues) ahead += static_cast<int64_t>(other.size());
          Rejection rej = PoolFull(pool, ahead - 1);
          rej.message += " (waited the priority's max_wait)";
          cbs.push_back([done = std::move(w->done), rej = std::move(rej)]() mutable {
            Status status = Status::ResourceExhausted(rej.message);
            done(std::move(status), std::move(rej));
          });
          w = q.erase(w);
        }
      }
    }
  }
  RunAll(cbs);
}

int64_t Admission::in_flight(std::string_view pool) const {
  MutexLock lock(&mu_);
  auto it = pools_.find(pool);
  return it == pools_.end() ? 0 : it->second.in_flight;
}

int64_t Admission::waiting(std::string_view pool) const {
  MutexLock lock(&mu_);
  auto it = waiters_.find(pool);
  if (it == waiters_.end()) return 0;
  int64_t n = 0;
  for (const auto& q : it->second) n += static_cast<int64_t>(q.size());
  return n;
}

int64_t Admission::tenant_in_flight(std::string_view tenant) const {
  MutexLock lock(&mu_);
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0 : it->second.in_flight;
}

double Admission::tenant_tokens_level(std::string_view tenant, Clock::time_point now) const {
  MutexLock lock(&mu_);
  const TenantConfig* t = cfg_->FindTenant(tenant);
  auto it = tenants_.find(tenant);
  if (t == nullptr || t->tokens_per_minute <= 0) return 0;
  if (it == tenants_.end() || !it->second.tokens.started) return t->tokens_per_minute;
  const Bucket& b = it->second.tokens;
  const double dt = now > b.at ? Seconds(now - b.at) : 0;
  return std::min(t->tokens_per_minute, b.level + t->tokens_per_minute / 60.0 * dt);
}

double Admission::drain_rate(std::string_view pool) const {
  MutexLock lock(&mu_);
  auto it = pools_.find(pool);
  if (it == pools_.end() || it->second.interval_ewma_s <= 0) return 0;
  return 1.0 / it->second.interval_ewma_s;
}

}  // namespace strata::gateway
