// gateway/admission: every limit with explicit times (no sleeps), Retry-After and the messages,
// Settle's corrections, gold-first waiting and its expiry, reconfiguration, and a 4-thread stress
// run whose counts add up.
#include "gateway/admission.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace strata::gateway {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::shared_ptr<const GatewayConfig> Cfg(double tpm, double rpm, int conc, int pool_max,
                                         int64_t gold_wait_ms = 2000, int64_t bronze_wait_ms = 0) {
  auto c = std::make_shared<GatewayConfig>();
  c->pools.resize(2);
  c->pools[0].name = "p";
  c->pools[0].max_in_flight = pool_max;
  c->pools[1].name = "q";
  TenantConfig t;
  t.name = "acme";
  t.tokens_per_minute = tpm;
  t.requests_per_minute = rpm;
  t.max_concurrency = conc;
  c->tenants.push_back(t);
  c->admission.max_wait = {milliseconds(gold_wait_ms), milliseconds(0),
                           milliseconds(bronze_wait_ms)};
  return c;
}

const Clock::time_point kT0 = Clock::time_point() + seconds(1000);

struct Outcome {
  bool called = false;
  bool admitted = false;
  Admission::Ticket ticket = 0;
  std::optional<Rejection> rej;
  int calls = 0;
};

// Admits and records the outcome (the callback may run later).
std::shared_ptr<Outcome> Try(Admission& a, std::string tenant, int64_t tokens,
                             Clock::time_point now, Priority prio = Priority::kSilver,
                             std::string pool = "p") {
  auto o = std::make_shared<Outcome>();
  a.Admit(AdmitRequest{std::move(tenant), std::move(pool), prio, tokens, now},
          [o](Result<Admission::Ticket> t, std::optional<Rejection> rej) {
            o->called = true;
            ++o->calls;
            o->admitted = t.ok();
            if (t.ok()) o->ticket = *t;
            EXPECT_EQ(t.ok(), !rej.has_value());
            if (!t.ok()) {
              EXPECT_EQ(t.status().code(), StatusCode::kResourceExhausted);
            }
            o->rej = std::move(rej);
          });
  return o;
}

TEST(Admission, TokenBucketRefillsContinuouslyAndNamesTheLimit) {
  Admission a(Cfg(/*tpm=*/600, 0, 0, 0));  // 10 tokens per second
  auto o = Try(a, "acme", 600, kT0);
  ASSERT_TRUE(o->admitted);
  auto r = Try(a, "acme", 100, kT0);
  ASSERT_TRUE(r->called);
  ASSERT_FALSE(r->admitted);
  EXPECT_EQ(r->rej->reason, "tenant_tokens");
  EXPECT_NEAR(r->rej->retry_after_s, 10.0, 1e-9);  // 100 tokens at 10/s
  EXPECT_NE(r->rej->message.find("tenant 'acme' is over tokens_per_minute 600"), std::string::npos)
      << r->rej->message;
  // 5 s later: 50 tokens in the bucket, 5 s more to wait.
  r = Try(a, "acme", 100, kT0 + seconds(5));
  ASSERT_FALSE(r->admitted);
  EXPECT_NEAR(r->rej->retry_after_s, 5.0, 1e-9);
  EXPECT_TRUE(Try(a, "acme", 100, kT0 + seconds(10))->admitted);
  EXPECT_NEAR(a.tenant_tokens_level("acme", kT0 + seconds(10)), 0, 1e-9);
  // Never above capacity after a long idle.
  EXPECT_NEAR(a.tenant_tokens_level("acme", kT0 + seconds(10000)), 600, 1e-9);
}

TEST(Admission, ARequestLargerThanTheBucketIsAdmittedWhenFullThenOwes) {
  Admission a(Cfg(600, 0, 0, 0));
  ASSERT_TRUE(Try(a, "acme", 1200, kT0)->admitted);  // needs min(1200, 600)
  EXPECT_NEAR(a.tenant_tokens_level("acme", kT0), -600, 1e-9);
  auto r = Try(a, "acme", 1, kT0 + seconds(30));  // level -300
  ASSERT_FALSE(r->admitted);
  EXPECT_NEAR(r->rej->retry_after_s, 30.1, 1e-9);
}

TEST(Admission, SettleRefundsOrChargesTheDifference) {
  Admission a(Cfg(1000, 0, 0, 0));
  auto o = Try(a, "acme", 800, kT0);
  ASSERT_TRUE(o->admitted);
  EXPECT_NEAR(a.tenant_tokens_level("acme", kT0), 200, 1e-9);
  a.Settle(o->ticket, 300);  // used less: 500 back
  EXPECT_NEAR(a.tenant_tokens_level("acme", kT0), 700, 1e-9);
  a.Settle(o->ticket, 900);  // a second settle corrects from the last one: 600 more charged
  EXPECT_NEAR(a.tenant_tokens_level("acme", kT0), 100, 1e-9);
  a.Release(o->ticket, kT0);
  a.Settle(o->ticket, 0);  // unknown after Release: ignored
  EXPECT_NEAR(a.tenant_tokens_level("acme", kT0), 100, 1e-9);
  // A refund never fills above capacity.
  auto big = Try(a, "acme", 10, kT0 + seconds(600));
  a.Settle(big->ticket, 0);
  EXPECT_NEAR(a.tenant_tokens_level("acme", kT0 + seconds(600)), 1000, 1e-9);
}

TEST(Admission, RequestRateLimit) {
  Admission a(Cfg(0, /*rpm=*/2, 0, 0));  // one request per 30 s
  EXPECT_TRUE(Try(a, "acme", 1, kT0)->admitted);
  EXPECT_TRUE(Try(a, "acme", 1, kT0)->admitted);
  auto r = Try(a, "acme", 1, kT0 + seconds(15));
  ASSERT_FALSE(r->admitted);
  EXPECT_EQ(r->rej->reason, "tenant_requests");
  EXPECT_NEAR(r->rej->retry_after_s, 15, 1e-9);
  EXPECT_NE(r->rej->message.find("requests_per_minute 2"), std::string::npos);
  EXPECT_TRUE(Try(a, "acme", 1, kT0 + seconds(30))->admitted);
}

TEST(Admission, ConcurrencyCap) {
  Admission a(Cfg(0, 0, /*conc=*/2, 0));
  auto x = Try(a, "acme", 1, kT0), y = Try(a, "acme", 1, kT0);
  ASSERT_TRUE(x->admitted && y->admitted);
  auto r = Try(a, "acme", 1, kT0);
  ASSERT_FALSE(r->admitted);
  EXPECT_EQ(r->rej->reason, "tenant_concurrency");
  EXPECT_NE(r->rej->message.find("tenant 'acme' is at max_concurrency 2"), std::string::npos);
  EXPECT_DOUBLE_EQ(r->rej->retry_after_s, 1.0);  // no drain measured yet
  EXPECT_EQ(a.tenant_in_flight("acme"), 2);
  a.Release(x->ticket, kT0);
  EXPECT_TRUE(Try(a, "acme", 1, kT0)->admitted);
  // Other tenants and unknown ones have no tenant limits.
  EXPECT_TRUE(Try(a, "", 1, kT0)->admitted);
  EXPECT_TRUE(Try(a, "stranger", 1, kT0)->admitted);
}

TEST(Admission, ARejectionConsumesNothing) {
  Admission a(Cfg(100, 10, 5, 1, /*gold_wait_ms=*/0));
  ASSERT_TRUE(Try(a, "acme", 10, kT0)->admitted);  // fills the pool
  auto r = Try(a, "acme", 10, kT0);
  ASSERT_FALSE(r->admitted);
  EXPECT_EQ(r->rej->reason, "pool_capacity");
  EXPECT_NE(r->rej->message.find("pool 'p' is at max_in_flight 1"), std::string::npos);
  EXPECT_NEAR(a.tenant_tokens_level("acme", kT0), 90, 1e-9);
  EXPECT_EQ(a.tenant_in_flight("acme"), 1);
  EXPECT_EQ(a.in_flight("p"), 1);
}

TEST(Admission, PoolCapacityRetryAfterFollowsTheDrainRate) {
  Admission a(Cfg(0, 0, 0, 2, /*gold_wait_ms=*/0));
  std::vector<Admission::Ticket> held;
  held.reserve(2);
  for (int i = 0; i < 2; ++i) held.push_back(Try(a, "", 1, kT0)->ticket);
  EXPECT_DOUBLE_EQ(Try(a, "", 1, kT0)->rej->retry_after_s, 1.0);  // the fallback
  // Completions every 200 ms: the drain rate converges to 5/s.
  Clock::time_point t = kT0;
  for (int i = 0; i < 30; ++i) {
    t += milliseconds(200);
    a.Release(held.back(), t);
    held.pop_back();
    auto o = Try(a, "", 1, t);
    ASSERT_TRUE(o->admitted);
    held.push_back(o->ticket);
  }
  EXPECT_NEAR(a.drain_rate("p"), 5.0, 1e-6);
  auto r = Try(a, "", 1, t);
  ASSERT_FALSE(r->admitted);
  EXPECT_NEAR(r->rej->retry_after_s, 0.2, 1e-6);
  EXPECT_EQ(a.in_flight("p"), 2);
  EXPECT_EQ(a.in_flight("q"), 0);
  EXPECT_TRUE(Try(a, "", 1, t, Priority::kSilver, "q")->admitted);  // q is unbounded
}

TEST(Admission, GoldWaitsAndIsWokenFirstFifoWithinAPriority) {
  Admission a(Cfg(0, 0, 0, 1, /*gold_wait_ms=*/2000, /*bronze_wait_ms=*/5000));
  auto first = Try(a, "", 1, kT0);
  ASSERT_TRUE(first->admitted);
  auto b1 = Try(a, "", 1, kT0, Priority::kBronze);
  auto g1 = Try(a, "", 1, kT0 + milliseconds(1), Priority::kGold);
  auto g2 = Try(a, "", 1, kT0 + milliseconds(2), Priority::kGold);
  auto s = Try(a, "", 1, kT0, Priority::kSilver);  // silver does not wait (0 ms)
  EXPECT_FALSE(b1->called || g1->called || g2->called);
  ASSERT_TRUE(s->called);
  EXPECT_EQ(s->rej->reason, "pool_capacity");
  EXPECT_EQ(a.waiting("p"), 3);
  a.Release(first->ticket, kT0 + milliseconds(10));
  EXPECT_TRUE(g1->admitted);  // gold before bronze, the first gold first
  EXPECT_FALSE(g2->called || b1->called);
  a.Release(g1->ticket, kT0 + milliseconds(20));
  EXPECT_TRUE(g2->admitted);
  EXPECT_FALSE(b1->called);
  a.Release(g2->ticket, kT0 + milliseconds(30));
  EXPECT_TRUE(b1->admitted);
  EXPECT_EQ(a.waiting("p"), 0);
  EXPECT_EQ(a.in_flight("p"), 1);
  for (auto* o : {b1.get(), g1.get(), g2.get(), s.get()}) EXPECT_EQ(o->calls, 1);
}

TEST(Admission, TickRejectsWaitersPastMaxWaitAndReturnsTheirReservation) {
  Admission a(Cfg(1000, 0, 3, 1, /*gold_wait_ms=*/2000));
  auto first = Try(a, "acme", 100, kT0);
  auto g = Try(a, "acme", 200, kT0, Priority::kGold);
  EXPECT_FALSE(g->called);
  EXPECT_EQ(a.tenant_in_flight("acme"), 2);  // the waiter holds its tenant's share
  EXPECT_NEAR(a.tenant_tokens_level("acme", kT0), 700, 1e-9);
  a.Tick(kT0 + milliseconds(1999));
  EXPECT_FALSE(g->called);
  a.Tick(kT0 + milliseconds(2000));
  ASSERT_TRUE(g->called);
  EXPECT_FALSE(g->admitted);
  EXPECT_EQ(g->rej->reason, "pool_capacity");
  EXPECT_NE(g->rej->message.find("max_wait"), std::string::npos);
  EXPECT_EQ(a.tenant_in_flight("acme"), 1);
  EXPECT_NEAR(a.tenant_tokens_level("acme", kT0), 900, 1e-9);
  a.Release(first->ticket, kT0 + seconds(3));
  EXPECT_EQ(g->calls, 1);  // not called again
  EXPECT_EQ(a.in_flight("p"), 0);
}

TEST(Admission, CallbacksRunOutsideTheLock) {
  Admission a(Cfg(0, 0, 0, 1));
  auto first = Try(a, "", 1, kT0);
  bool reentered = false;
  // The waiter's callback calls back into Admission: it would deadlock under the lock.
  a.Admit(AdmitRequest{"", "p", Priority::kGold, 1, kT0},
          [&](const Result<Admission::Ticket>& t, const std::optional<Rejection>&) {
            ASSERT_TRUE(t.ok());
            EXPECT_EQ(a.in_flight("p"), 1);
            a.Release(*t, kT0);
            reentered = true;
          });
  a.Release(first->ticket, kT0);
  EXPECT_TRUE(reentered);
  EXPECT_EQ(a.in_flight("p"), 0);
}

TEST(Admission, ReconfigureKeepsLevelsAndWakesWaitersThatFit) {
  Admission a(Cfg(1000, 0, 0, 1));
  auto first = Try(a, "acme", 900, kT0);
  auto g = Try(a, "acme", 50, kT0, Priority::kGold);
  EXPECT_FALSE(g->called);
  a.Reconfigure(Cfg(500, 0, 0, 2));  // smaller bucket: level 50 stays; the pool grew
  EXPECT_TRUE(g->admitted);
  EXPECT_NEAR(a.tenant_tokens_level("acme", kT0), 50, 1e-9);
  EXPECT_EQ(a.in_flight("p"), 2);
  // A tenant that becomes unlimited and then limited again starts full.
  a.Reconfigure(Cfg(0, 0, 0, 2));
  a.Reconfigure(Cfg(400, 0, 0, 2));
  EXPECT_NEAR(a.tenant_tokens_level("acme", kT0), 400, 1e-9);
  a.Release(first->ticket, kT0);
  a.Release(g->ticket, kT0);
  EXPECT_EQ(a.in_flight("p"), 0);
}

TEST(Admission, FourThreadsKeepTheCountsConsistent) {
  Admission a(Cfg(0, 0, /*conc=*/6, /*pool_max=*/4, /*gold_wait_ms=*/1000000));
  std::atomic<int64_t> admitted{0}, rejected{0}, released{0};
  std::atomic<int64_t> callbacks{0};
  constexpr int kPerThread = 2000;
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      std::vector<Admission::Ticket> mine;
      std::mutex mu;  // the callbacks of this thread's waiters may run on other threads
      for (int i = 0; i < kPerThread; ++i) {
        const Priority p = (i + th) % 3 == 0 ? Priority::kGold : Priority::kBronze;
        const std::string tenant = i % 2 ? "acme" : "";
        a.Admit(AdmitRequest{tenant, "p", p, 10, kT0},
                [&](const Result<Admission::Ticket>& t, const std::optional<Rejection>&) {
                  ++callbacks;
                  if (!t.ok()) {
                    ++rejected;
                    return;
                  }
                  ++admitted;
                  std::lock_guard<std::mutex> l(mu);
                  mine.push_back(*t);
                });
        std::vector<Admission::Ticket> done;
        {
          std::lock_guard<std::mutex> l(mu);
          // Each thread alone may hold 5 > the pool's 4: the pool fills even without interleaving.
          if (mine.size() > 4 || (i % 7 == 0 && !mine.empty())) done.swap(mine);
        }
        for (auto t : done) {
          a.Release(t, kT0);
          ++released;
        }
        EXPECT_LE(a.in_flight("p"), 4);
      }
      // Drain what this thread still holds, including waiters admitted by others' releases.
      // Bounded by time, not by a spin count: on a loaded machine the other threads may need a
      // while to finish (and admit this thread's gold waiters, which then must be released here).
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (std::chrono::steady_clock::now() < deadline) {
        std::vector<Admission::Ticket> done;
        {
          std::lock_guard<std::mutex> l(mu);
          done.swap(mine);
        }
        for (auto t : done) {
          a.Release(t, kT0);
          ++released;
        }
        if (callbacks.load() == 4 * kPerThread && done.empty()) {
          std::lock_guard<std::mutex> l(mu);
          if (mine.empty()) break;
        }
        std::this_thread::yield();
      }
    });
  }
  for (auto& t : threads) t.join();
  // Every Admit called back once; every admitted ticket was released; nothing leaked.
  EXPECT_EQ(callbacks.load(), 4 * kPerThread);
  EXPECT_EQ(admitted.load() + rejected.load(), 4 * kPerThread);
  EXPECT_EQ(released.load(), admitted.load());
  EXPECT_GT(admitted.load(), 0);
  EXPECT_GT(rejected.load(), 0);  // bronze does not wait: some are turned away
  EXPECT_EQ(a.in_flight("p"), 0);
  EXPECT_EQ(a.waiting("p"), 0);
  EXPECT_EQ(a.tenant_in_flight("acme"), 0);
}

}  // namespace
}  // namespace strata::gateway
