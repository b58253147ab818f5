// Balancer: the cost formula, the baseline policies, and the four failure modes of issue 16, each
// in a deterministic simulation (fake clock, simulated replicas whose queues feed the metrics the
// ReplicaSet sees) or with fixed replica states.
#include "gateway/balancer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <deque>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "gateway/fake_replica_test_util.h"
#include "gateway/replica_set.h"

namespace strata::gateway {
namespace {

using std::chrono::milliseconds;

const Clock::time_point kT0{std::chrono::seconds(5000)};

ReplicaView View(std::string url, double waiting, double running) {
  ReplicaView v;
  v.url = std::move(url);
  v.eligible = true;
  v.metrics.valid = true;
  v.metrics.waiting = waiting;
  v.metrics.running = running;
  v.block_size = 16;
  return v;
}

TEST(BalancerCost, PriceFollowsTheDocumentedFormula) {
  BalancerConfig cfg;  // 2000 tokens/s, decode step 0.02 s, tiers {0, 1e-4, 1e-3, 3e-3}
  ReplicaView v = View("a", 2, 3);
  v.mean_prefill_tokens = 500;
  v.sent_since_poll_tokens = 1000;
  v.sent_since_poll_requests = 1;
  PrefixMatch m;
  m.blocks = 10;
  m.by_tier = {4, 3, 2, 1};
  PickRequest r;
  r.prompt_tokens = 400;
  r.max_tokens = 64;
  PricedReplica p = Price(cfg, v, m, r);
  EXPECT_DOUBLE_EQ(p.queue_s, (2 * 500 + 1000) / 2000.0);
  EXPECT_EQ(p.cached_tokens, 160);
  EXPECT_DOUBLE_EQ(p.prefill_s, (400 - 160) / 2000.0);
  EXPECT_DOUBLE_EQ(p.tier_s, 3 * 1e-4 + 2 * 1e-3 + 1 * 3e-3);
  EXPECT_DOUBLE_EQ(p.decode_s, (3 + 1) * 0.02 * (64 / 128.0));
  EXPECT_DOUBLE_EQ(p.cost_s, p.queue_s + p.prefill_s + p.tier_s + p.decode_s);
  // A measured rate replaces the default; cached tokens never exceed the prompt.
  v.metrics.prefill_tokens_per_s = 4000;
  m.blocks = 100;
  p = Price(cfg, v, m, r);
  EXPECT_EQ(p.cached_tokens, 400);
  EXPECT_DOUBLE_EQ(p.prefill_s, 0);
  EXPECT_DOUBLE_EQ(p.queue_s, 2000 / 4000.0);
  // Without metrics: the gateway's own in_flight is the queue and the running set.
  ReplicaView n;
  n.url = "n";
  n.eligible = true;
  n.in_flight = 3;
  r.max_tokens = 0;  // unknown: counts as the full horizon
  p = Price(cfg, n, PrefixMatch{}, r);
  EXPECT_DOUBLE_EQ(p.queue_s, 3 * 400 / 2000.0);
  EXPECT_DOUBLE_EQ(p.decode_s, 3 * 0.02);
}

TEST(BalancerCost, NoEligibleReplicaIsUnavailableAndRetriesExcludeAndSayRetry) {
  BalancerConfig cfg;
  Balancer b;
  std::vector<ReplicaView> v = {View("a", 0, 0), View("b", 0, 0)};
  v[1].eligible = false;
  PickRequest r;
  r.prompt_tokens = 10;
  r.exclude = {"a"};
  auto none = b.Choose(cfg, v, {}, r);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  v[1].eligible = true;
  auto retry = b.Choose(cfg, v, {}, r);
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry->url, "b");
  EXPECT_EQ(retry->reason, RouteReason::kRetry);
}

TEST(BalancerCost, TiesRotateInsteadOfAlwaysTheFirst) {
  BalancerConfig cfg;
  Balancer b;
  std::vector<ReplicaView> v = {View("a", 1, 1), View("b", 1, 1), View("c", 1, 1)};
  PickRequest r;
  r.prompt_tokens = 100;
  std::map<std::string, int> got;
  for (int i = 0; i < 9; ++i) ++got[b.Choose(cfg, v, {}, r)->url];
  EXPECT_EQ(got["a"], 3);
  EXPECT_EQ(got["b"], 3);
  EXPECT_EQ(got["c"], 3);
  // Equal cost, fewer in flight wins.
  v[2].in_flight = 0;
  v[0].in_flight = v[1].in_flight = 2;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.Choose(cfg, v, {}, r)->url, "c");
}

TEST(BalancerPolicies, RoundRobinRandomAndLeastLoaded) {
  BalancerConfig cfg;
  std::vector<ReplicaView> v = {View("c", 5, 0), View("a", 0, 0), View("b", 1, 0)};
  PickRequest r;
  cfg.policy = BalancePolicy::kRoundRobin;
  Balancer rr;
  std::vector<std::string> seq;
  seq.reserve(6);
  for (int i = 0; i < 6; ++i) seq.push_back(rr.Choose(cfg, v, {}, r)->url);
  EXPECT_EQ(seq, (std::vector<std::string>{"a", "b", "c", "a", "b", "c"}));
  EXPECT_EQ(rr.Choose(cfg, v, {}, r)->reason, RouteReason::kFallback);

  cfg.policy = BalancePolicy::kRandom;
  Balancer r1(42), r2(42);
  std::map<std::string, int> count;
  for (int i = 0; i < 300; ++i) {
    std::string u1 = r1.Choose(cfg, v, {}, r)->url;
    EXPECT_EQ(u1, r2.Choose(cfg, v, {}, r)->url);  // same seed, same sequence
    ++count[u1];
  }
  for (const char* u : {"a", "b", "c"}) EXPECT_GT(count[u], 60) << u;

  cfg.policy = BalancePolicy::kLeastLoaded;
  Balancer ll;
  auto p = ll.Choose(cfg, v, {}, r);
  EXPECT_EQ(p->url, "a");
  EXPECT_EQ(p->reason, RouteReason::kLoad);
}

// ---- simulations through ReplicaSet (hashing, history, accounting, metrics) ----

// A replica as a queue: one prefill at a time at `rate` tokens/s (a cached prefix is skipped),
// then `max_tokens` decode steps of `step` seconds in parallel with the other decodes.
struct SimReplica {
  std::string url;
  double rate = 2000, step = 0.02;
  struct Job {
    int group;
    double prefill_left;
    int64_t prompt;
    double decode_left;
  };
  std::deque<Job> queue;
  std::vector<double> decoding;  // seconds left
  std::set<int> cached_groups;
  double prompt_total = 0;
  int served = 0;
};

class Sim {
 public:
  Sim(int n, BalancerConfig bal = {}) : bal_(bal) {
    PoolConfig pool;
    pool.name = "p";
    for (int i = 0; i < n; ++i) {
      SimReplica r;
      r.url = "http://10.0.0." + std::to_string(i + 1) + ":8080";
      pool.replicas.push_back(r.url);
      reps_.push_back(r);
    }
    set_ = std::make_unique<ReplicaSet>(io_, pool, bal_, HealthConfig{});
    for (auto& r : reps_) set_->ObserveReady(r.url, true, 200, "", now_);
    Poll();
  }

  // Sends one request: `group` < 0 = no shared prefix; prefix/suffix lengths in tokens.
  std::string Send(int group, int64_t prefix, int64_t suffix, int64_t max_tokens) {
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < prefix; ++i)
      tokens.push_back(static_cast<int32_t>(1000 * group + i % 997));
    for (int64_t i = 0; i < suffix; ++i) tokens.push_back(static_cast<int32_t>(rng_() % 30000));
    PickRequest req;
    req.tokens = tokens;
    req.prompt_tokens = static_cast<int64_t>(tokens.size());
    req.max_tokens = max_tokens;
    auto pick = set_->Choose(req, now_);
    EXPECT_TRUE(pick.ok());
    set_->OnSent(pick->url, *pick, req, now_);
    ++reasons_[pick->reason];
    SimReplica& r = Find(pick->url);
    const bool hit = group >= 0 && r.cached_groups.contains(group);
    r.queue.push_back({group, static_cast<double>(hit ? suffix : prefix + suffix),
                       req.prompt_tokens, static_cast<double>(max_tokens) * r.step});
    ++r.served;
    return pick->url;
  }

  // Advances the simulated time by `dt`, in 5 ms steps; polls metrics every metrics_interval.
  void Run(double dt) {
    const double h = 0.005;
    for (double t = 0; t < dt - 1e-9; t += h) {
      now_ += std::chrono::microseconds(5000);
      for (SimReplica& r : reps_) Advance(r, h);
      if (now_ - last_poll_ >= bal_.metrics_interval) Poll();
    }
  }

  void Poll() {
    for (SimReplica& r : reps_) {
      double running = static_cast<double>(r.decoding.size()) + (r.queue.empty() ? 0 : 1);
      double waiting = r.queue.empty() ? 0 : static_cast<double>(r.queue.size() - 1);
      EXPECT_TRUE(
          set_->ObserveMetrics(
                  r.url, testing::FakeReplica::MetricsText(waiting, running, r.prompt_total), now_)
              .ok());
    }
    last_poll_ = now_;
  }

  std::vector<int> Served() const {
    std::vector<int> out;
    for (const SimReplica& r : reps_) out.push_back(r.served);
    return out;
  }
  std::map<RouteReason, int>& reasons() { return reasons_; }
  SimReplica& rep(size_t i) { return reps_[i]; }
  ReplicaSet& set() { return *set_; }
  Clock::time_point now() const { return now_; }

 private:
  SimReplica& Find(const std::string& url) {
    for (SimReplica& r : reps_)
      if (r.url == url) return r;
    ADD_FAILURE() << url;
    return reps_[0];
  }
  void Advance(SimReplica& r, double h) {
    double budget = r.rate * h;
    while (budget > 0 && !r.queue.empty()) {
      SimReplica::Job& j = r.queue.front();
      double used = std::min(budget, j.prefill_left);
      j.prefill_left -= used;
      budget -= used;
      if (j.prefill_left > 0) break;
      r.prompt_total += static_cast<double>(j.prompt);
      if (j.group >= 0) r.cached_groups.insert(j.group);
      r.decoding.push_back(j.decode_left);
      r.queue.pop_front();
    }
    for (double& d : r.decoding) d -= h;
    for (auto it = r.decoding.begin(); it != r.decoding.end();) {
      if (*it <= 0) {
        set_->OnFinished(r.url, true, 200, now_);
        it = r.decoding.erase(it);
      } else {
        ++it;
      }
    }
  }

  boost::asio::io_context io_;  // never run: no poller is started
  BalancerConfig bal_;
  std::unique_ptr<ReplicaSet> set_;
  std::vector<SimReplica> reps_;
  Clock::time_point now_ = kT0, last_poll_ = kT0;
  std::mt19937_64 rng_{7};
  std::map<RouteReason, int> reasons_;
};

double Mean(const std::vector<int>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// Failure mode 1 (production-stack #957, Dynamo #737): one system prompt shared by every request
// must not pin all traffic to the replica that cached it first.
TEST(BalancerSim, SharedSystemPromptDoesNotPinTrafficToOneReplica) {
  Sim sim(4);
  for (int i = 0; i < 800; ++i) {  // 40 requests/s for 20 s: more than one replica can prefill
    sim.Send(/*group=*/0, /*prefix=*/1024, /*suffix=*/64, /*max_tokens=*/32);
    sim.Run(0.025);
  }
  std::vector<int> served = sim.Served();
  const double mean = Mean(served);
  std::printf("shared prompt: served %s\n", ::testing::PrintToString(served).c_str());
  for (int s : served) EXPECT_LE(s, 1.5 * mean) << ::testing::PrintToString(served);
  // Every replica warmed up: each holds the shared prefix now.
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(sim.rep(i).cached_groups.contains(0)) << i;
  EXPECT_GT(sim.reasons()[RouteReason::kAffinity], 700);
}

// Failure mode 1 at low load: one replica could serve every request of the shared prompt without
// a queue, so load alone never moves them — the hot-spot term (hot_s) does: the prompt is warmed
// on more replicas until none takes more than 1.5x the mean (without it two replicas took 240
// and 160 of the 400, the others none).
TEST(BalancerSim, SharedSystemPromptSpreadsEvenWhenNothingIsOverloaded) {
  Sim sim(4);
  for (int i = 0; i < 400; ++i) {
    sim.Send(/*group=*/0, /*prefix=*/1024, /*suffix=*/32, /*max_tokens=*/16);
    sim.Run(0.2);  // far below capacity: every queue is empty at the next request
  }
  const std::vector<int> served = sim.Served();
  const double mean = 400.0 / 4;
  for (size_t i = 0; i < 4; ++i) EXPECT_LE(served[i], 1.5 * mean) << i;
  EXPECT_GT(sim.reasons()[RouteReason::kAffinity], 300);  // the rest still hit their cache
}

// Failure mode 2 (SGLang PR #14305): on a prefix miss, never send everything to one overloaded
// replica (e.g. the one with the smallest cache).
TEST(BalancerSim, PrefixMissAvoidsTheOverloadedReplica) {
  Sim sim(4);
  // Replica 0 is overloaded (60 waiting, 8 running) and holds nothing; the others are idle.
  ASSERT_TRUE(
      sim.set()
          .ObserveMetrics(sim.rep(0).url, testing::FakeReplica::MetricsText(60, 8, 0), sim.now())
          .ok());
  std::map<std::string, int> got;
  for (int i = 0; i < 30; ++i) ++got[sim.Send(/*group=*/-1, 0, 500, 64)];  // one metrics window
  EXPECT_EQ(got[sim.rep(0).url], 0);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(got[sim.rep(i).url], 10) << i;
}

// Failure mode 3 (Dynamo #589): requests inside one metrics window must not all pick the replica
// that looked best at the last poll.
TEST(BalancerSim, OneMetricsWindowSpreadsBySentSincePoll) {
  Sim sim(4);
  // At the poll, replica 0 looks best (empty queue); the others have one request waiting.
  for (size_t i = 1; i < 4; ++i)
    ASSERT_TRUE(
        sim.set()
            .ObserveMetrics(sim.rep(i).url, testing::FakeReplica::MetricsText(1, 0, 0), sim.now())
            .ok());
  std::map<std::string, int> got;
  for (int i = 0; i < 8; ++i) ++got[sim.Send(-1, 0, 800, 32)];  // no poll in between
  EXPECT_EQ(got[sim.rep(0).url], 2);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(got[sim.rep(i).url], 2) << i;
  auto views = sim.set().Snapshot(sim.now());
  for (const ReplicaView& v : views) {
    EXPECT_EQ(v.sent_since_poll_requests, 2);
    EXPECT_EQ(v.sent_since_poll_tokens, 1600);
    EXPECT_EQ(v.in_flight, 2);
  }
  // Equal states: the window's requests rotate over the replicas.
  sim.Poll();
  got.clear();
  for (int i = 0; i < 8; ++i) ++got[sim.Send(-1, 0, 800, 32)];
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(got[sim.rep(i).url], 2) << i;
  sim.Poll();  // the replicas' own numbers now include them
  for (const ReplicaView& v : sim.set().Snapshot()) EXPECT_EQ(v.sent_since_poll_requests, 0);
}

// Failure mode 4: when load is balanced, affinity wins — a group's requests go where its prefix
// is cached.
// What was sent since the poll stops loading a replica once its predicted prefill must be done:
// the backlog drains at the prefill rate (default_prefill_tokens_per_s without a measurement).
TEST(BalancerSim, SentSincePollDrainsAtThePrefillRate) {
  Sim sim(1);
  sim.Send(-1, 0, 1000, 32);  // 1000 uncached tokens
  auto at = [&](double s) {
    return sim.set()
        .Snapshot(sim.now() +
                  std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)))[0]
        .sent_since_poll_tokens;
  };
  EXPECT_EQ(at(0), 1000);
  EXPECT_EQ(at(0.25), 500);  // 2000 tokens/s
  EXPECT_EQ(at(0.6), 0);
  EXPECT_EQ(sim.set().Snapshot(sim.now())[0].sent_since_poll_requests, 1);  // still in flight
}

TEST(BalancerSim, AffinityWinsWhenLoadIsBalanced) {
  Sim sim(4);
  // Warm: one request per group, then let them finish.
  std::map<int, std::string> home;
  for (int g = 0; g < 4; ++g) {
    home[g] = sim.Send(g, 1024, 32, 16);
    sim.Run(0.1);
  }
  sim.Run(2.0);
  std::set<std::string> homes;
  for (auto& [g, u] : home) homes.insert(u);
  EXPECT_EQ(homes.size(), 4u);  // the first requests spread (no prefix anywhere)
  sim.reasons().clear();
  for (int round = 0; round < 4; ++round)
    for (int g = 0; g < 4; ++g) EXPECT_EQ(sim.Send(g, 1024, 32, 16), home[g]) << g;
  EXPECT_EQ(sim.reasons()[RouteReason::kAffinity], 16);
}

// No shared prefix, random lengths: the load spreads evenly (max/min ≤ 1.2).
TEST(BalancerSim, RandomWorkloadSpreadsEvenly) {
  Sim sim(4);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 1200; ++i) {
    sim.Send(-1, 0, 100 + static_cast<int64_t>(rng() % 900), 16 + static_cast<int64_t>(rng() % 64));
    sim.Run(0.1);
  }
  std::vector<int> served = sim.Served();
  auto [mn, mx] = std::minmax_element(served.begin(), served.end());
  std::printf("random: served %s\n", ::testing::PrintToString(served).c_str());
  EXPECT_LE(static_cast<double>(*mx), 1.2 * static_cast<double>(*mn))
      << ::testing::PrintToString(served);
}

// Text prompts without token ids: history affinity over byte chunks.
TEST(BalancerSim, TextPromptsGetHistoryAffinityByByteChunks) {
  Sim sim(3);
  std::string system(2048, 'x');
  for (size_t i = 0; i < system.size(); ++i) system[i] = static_cast<char>('a' + (i * 7) % 26);
  auto send = [&](const std::string& text) {
    PickRequest r;
    r.text_key = text;
    r.prompt_tokens = static_cast<int64_t>(text.size() / 4);
    r.max_tokens = 16;
    auto p = sim.set().Choose(r, sim.now());
    EXPECT_TRUE(p.ok());
    sim.set().OnSent(p->url, *p, r, sim.now());
    return *p;
  };
  Pick first = send(system + " question one");
  EXPECT_NE(first.reason, RouteReason::kAffinity);
  sim.Poll();  // the first one is done (the simulated replicas are idle)
  sim.set().OnFinished(first.url, true, 200, sim.now());
  Pick second = send(system + " question two");
  EXPECT_EQ(second.url, first.url);
  EXPECT_EQ(second.reason, RouteReason::kAffinity);
  EXPECT_EQ(second.cached_tokens, 512);  // 32 chunks × 64 bytes, 4 bytes per token
  // Another tenant's text shares nothing (the tenant is in the chunk salt).
  PickRequest other;
  other.text_key = system;
  other.tenant = "t2";
  other.prompt_tokens = 512;
  auto p = sim.set().Choose(other, sim.now());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->cached_tokens, 0);
}

// LoRA: a replica whose published list has the adapter registered but not active pays
// balancer.lora_load_s; one whose list lacks it is skipped (every policy) unless none has it;
// replicas that publish no list are never skipped.
ReplicaView WithAdapters(ReplicaView v, std::vector<std::string> registered,
                         std::vector<std::string> active) {
  v.metrics.lora_published = true;
  v.metrics.lora_registered = std::move(registered);
  v.metrics.lora_active = std::move(active);
  return v;
}

TEST(BalancerLora, RegisteredButInactivePaysTheLoadTermActivePaysNone) {
  BalancerConfig cfg;
  PickRequest r;
  r.prompt_tokens = 100;
  r.adapter = "sql";
  const PrefixMatch m;
  ReplicaView idle = View("a", 0, 0);
  EXPECT_EQ(AdapterStateOf(idle, "sql"), AdapterState::kUnknown);
  EXPECT_DOUBLE_EQ(Price(cfg, idle, m, r).lora_s, 0);
  ReplicaView registered = WithAdapters(idle, {"sql"}, {});
  EXPECT_EQ(AdapterStateOf(registered, "sql"), AdapterState::kRegistered);
  PricedReplica p = Price(cfg, registered, m, r);
  EXPECT_DOUBLE_EQ(p.lora_s, 0.05);
  EXPECT_DOUBLE_EQ(p.cost_s, p.queue_s + p.prefill_s + p.tier_s + p.decode_s + p.lora_s);
  ReplicaView active = WithAdapters(idle, {"sql"}, {"sql"});
  EXPECT_EQ(AdapterStateOf(active, "sql"), AdapterState::kActive);
  EXPECT_DOUBLE_EQ(Price(cfg, active, m, r).lora_s, 0);
  EXPECT_EQ(AdapterStateOf(WithAdapters(idle, {"x"}, {}), "sql"), AdapterState::kAbsent);
  // No adapter named, or metrics invalid: no term.
  r.adapter = "";
  EXPECT_DOUBLE_EQ(Price(cfg, registered, m, r).lora_s, 0);
  r.adapter = "sql";
  registered.metrics.valid = false;
  EXPECT_EQ(AdapterStateOf(registered, "sql"), AdapterState::kUnknown);
}

TEST(BalancerLora, RequestsGoWhereTheAdapterIsActiveUnlessThatReplicaIsBusier) {
  BalancerConfig cfg;
  Balancer b;
  PickRequest r;
  r.prompt_tokens = 100;
  r.max_tokens = 16;
  r.adapter = "sql";
  // Same load: the one with "sql" active wins, whatever the order.
  std::vector<ReplicaView> views = {WithAdapters(View("a", 0, 0), {"sql"}, {}),
                                    WithAdapters(View("b", 0, 0), {"sql"}, {"sql"})};
  for (int i = 0; i < 4; ++i) {
    auto p = b.Choose(cfg, views, {}, r);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->url, "b");
  }
  // The active one is busier by more than lora_load_s of predicted work: the other one.
  views[1].metrics.waiting = 4;  // 4 x 100 tokens / 2000 tokens/s = 0.2 s > 0.05 s
  auto p = b.Choose(cfg, views, {}, r);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->url, "a");
  EXPECT_NE(p->detail.find("lora=0.0500"), std::string::npos) << p->detail;
  // A larger lora_load_s keeps it on the active replica.
  cfg.lora_load_s = 1.0;
  p = b.Choose(cfg, views, {}, r);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->url, "b");
}

TEST(BalancerLora, ReplicasWhoseListLacksTheAdapterAreSkippedUnlessNoneHasIt) {
  BalancerConfig cfg;
  for (BalancePolicy policy : {BalancePolicy::kCost, BalancePolicy::kRoundRobin,
                               BalancePolicy::kRandom, BalancePolicy::kLeastLoaded}) {
    cfg.policy = policy;
    Balancer b;
    PickRequest r;
    r.prompt_tokens = 100;
    r.adapter = "sql";
    // "a" (idle) publishes a list without it, "b" (busy) has it, "c" publishes nothing.
    std::vector<ReplicaView> views = {WithAdapters(View("a", 0, 0), {"chat"}, {"chat"}),
                                      WithAdapters(View("b", 50, 8), {"sql"}, {}),
                                      View("c", 60, 8)};
    std::set<std::string> picked;
    for (int i = 0; i < 32; ++i) {
      auto p = b.Choose(cfg, views, {}, r);
      ASSERT_TRUE(p.ok());
      picked.insert(p->url);
    }
    EXPECT_EQ(picked.count("a"), 0u) << static_cast<int>(policy);
    // Nobody has "other": nothing is skipped (the idle replica wins on cost / takes its turn).
    r.adapter = "other";
    picked.clear();
    for (int i = 0; i < 32; ++i) picked.insert(b.Choose(cfg, views, {}, r)->url);
    EXPECT_EQ(picked.count("a"), 1u) << static_cast<int>(policy);
  }
}

}  // namespace
}  // namespace strata::gateway
