// Pure scheduler logic (no engine, no runner): ordering, aging, admission bounds, chunking.
#include "engine/sched/scheduler.h"

#include <gtest/gtest.h>

namespace strata::engine::sched {
namespace {

struct Fixture {
  FakeClock clock;
  kv::KvManager kv;
  Scheduler sched;
  RequestId next = 1;
  explicit Fixture(SchedulerConfig sc, int num_blocks = 64)
      : kv(kv::KvManagerConfig{num_blocks, 16, true}), sched(sc, &kv, 16, &clock) {}
  RequestId Add(Priority priority, int prompt_len = 8,
                std::optional<TimePoint> deadline = std::nullopt) {
    SubmitRequest r;
    r.prompt.assign(static_cast<size_t>(prompt_len), 3);
    r.prompt[0] = static_cast<int32_t>(next);  // distinct prefixes
    r.max_tokens = 4;
    r.priority = priority;
    r.deadline = deadline;
    const RequestId id = next++;
    EXPECT_TRUE(sched.Add(MakeRequestState(id, std::move(r), clock.Now())).ok());
    return id;
  }
};

SchedulerConfig OneSeat() {
  SchedulerConfig sc;
  sc.max_num_seqs = 1;
  return sc;
}

TEST(Scheduler, OrderIsPriorityThenDeadlineThenArrival) {
  Fixture f(OneSeat());
  const TimePoint now = f.clock.Now();
  const RequestId bronze = f.Add(Priority::kBronze);
  const RequestId silver_late = f.Add(Priority::kSilver, 8, now + std::chrono::seconds(20));
  const RequestId silver_none = f.Add(Priority::kSilver);
  const RequestId silver_early = f.Add(Priority::kSilver, 8, now + std::chrono::seconds(5));
  const RequestId gold = f.Add(Priority::kGold);
  std::vector<RequestId> order;
  for (int i = 0; i < 5; ++i) {
    const SchedulerOutput& out = f.sched.Schedule();
    ASSERT_EQ(out.seqs.size(), 1u);
    order.push_back(out.seqs[0].req->id);
    ASSERT_NE(f.sched.Abort(order.back(), FinishReason::kCancelled), nullptr);
    ASSERT_TRUE(f.kv.CheckInvariants().ok());
  }
  EXPECT_EQ(order, (std::vector<RequestId>{gold, silver_early, silver_late, silver_none, bronze}));
  EXPECT_EQ(f.kv.Stats().used_blocks, 0);
}

TEST(Scheduler, AgingPromotesOneLevelPerAgingPeriod) {
  SchedulerConfig sc = OneSeat();
  sc.aging_s = 2.0;
  Fixture f(sc);
  const RequestId bronze = f.Add(Priority::kBronze);
  const RequestState& r = *f.sched.Find(bronze);
  EXPECT_EQ(f.sched.Level(r, f.clock.Now()), 2);
  f.clock.Advance(std::chrono::milliseconds(1999));
  EXPECT_EQ(f.sched.Level(r, f.clock.Now()), 2);
  f.clock.Advance(std::chrono::milliseconds(1));
  EXPECT_EQ(f.sched.Level(r, f.clock.Now()), 1);
  f.clock.Advance(std::chrono::seconds(4));
  EXPECT_EQ(f.sched.Level(r, f.clock.Now()), -1);  // now ahead of a fresh gold
  const RequestId gold = f.Add(Priority::kGold);
  const SchedulerOutput& out = f.sched.Schedule();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].req->id, bronze);
  EXPECT_NE(gold, bronze);
}

TEST(Scheduler, AdmissionBoundCountsNeverStartedRequests) {
  SchedulerConfig sc;
  sc.max_queued_requests = 2;
  sc.max_queued_prompt_tokens = 30;
  Fixture f(sc);
  f.Add(Priority::kSilver, 10);
  f.Add(Priority::kSilver, 10);
  auto check = [&](int64_t prompt_tokens) {
    return CheckQueueBound(sc, f.sched.num_queued_never_started(), f.sched.queued_prompt_tokens(),
                           prompt_tokens);
  };
  Status s = check(1);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  (void)f.sched.Schedule();  // both start
  EXPECT_EQ(f.sched.num_queued_never_started(), 0);
  EXPECT_TRUE(check(30).ok());
  EXPECT_EQ(check(31).code(), StatusCode::kResourceExhausted);
}

TEST(Scheduler, ChunksPromptsWithinTheBudgetAndSamplesAtTheEnd) {
  SchedulerConfig sc;
  sc.max_batched_tokens = 40;
  Fixture f(sc);
  const RequestId a = f.Add(Priority::kSilver, 100);
  int pos = 0;
  for (int step = 0; step < 3; ++step) {
    const SchedulerOutput& out = f.sched.Schedule();
    ASSERT_EQ(out.seqs.size(), 1u);
    const ScheduledSeq e = out.seqs[0];
    EXPECT_EQ(e.req->id, a);
    EXPECT_EQ(e.start_pos, pos);
    EXPECT_EQ(e.num_tokens, std::min(40, 100 - pos));
    EXPECT_EQ(e.sample, pos + e.num_tokens == 100);
    EXPECT_GE(static_cast<int>(f.kv.BlockTable(e.kv_id).size()) * 16, pos + e.num_tokens);
    f.sched.CommitComputed(e);
    pos += e.num_tokens;
  }
  EXPECT_EQ(pos, 100);
  EXPECT_EQ(f.sched.AppendToken(f.sched.Find(a), 0, 5), FinishReason::kNone);
  const SchedulerOutput& out = f.sched.Schedule();  // decode
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].start_pos, 100);
  EXPECT_EQ(out.seqs[0].num_tokens, 1);
  EXPECT_TRUE(out.seqs[0].sample);
  ASSERT_NE(f.sched.Abort(a, FinishReason::kCancelled), nullptr);
  EXPECT_EQ(f.kv.Stats().used_blocks, 0);
}

TEST(Scheduler, PreemptsLowestPriorityLatestWhenBlocksRunOut) {
  Fixture f(SchedulerConfig{}, /*num_blocks=*/4);
  const RequestId s1 = f.Add(Priority::kSilver, 30);  // 2 blocks
  const RequestId b1 = f.Add(Priority::kBronze, 16);  // 1 block + 1 on its first decode
  (void)f.sched.Schedule();
  EXPECT_EQ(f.kv.Stats().used_blocks, 3);
  const RequestId g =
      f.Add(Priority::kGold, 20);  // needs 2 blocks: only 1 free -> bronze preempted
  const SchedulerOutput& out = f.sched.Schedule();
  EXPECT_EQ(out.num_preempted, 1);
  EXPECT_EQ(f.sched.Find(b1)->phase, RequestState::Phase::kWaiting);
  EXPECT_EQ(f.sched.Find(s1)->phase, RequestState::Phase::kRunning);
  EXPECT_EQ(f.sched.Find(g)->phase, RequestState::Phase::kRunning);
  for (const ScheduledSeq& e : out.seqs) EXPECT_NE(e.req->id, b1);
  EXPECT_TRUE(f.kv.CheckInvariants().ok());
}

TEST(Scheduler, ARequestThatDoesNotFitYetIsNeitherChangedNorCountedAsAQuery) {
  Fixture f(SchedulerConfig{}, /*num_blocks=*/4);
  const RequestId g = f.Add(Priority::kGold, 40);  // 3 blocks
  (void)f.sched.Schedule();
  ASSERT_EQ(f.sched.Find(g)->phase, RequestState::Phase::kRunning);
  EXPECT_EQ(f.kv.Stats().prefix_query_tokens, 40);
  const RequestId b =
      f.Add(Priority::kBronze, 30);  // 2 blocks, 1 free, nothing below it to preempt
  for (int i = 0; i < 3; ++i) {
    const SchedulerOutput& out = f.sched.Schedule();
    EXPECT_EQ(out.num_preempted, 0);
    EXPECT_EQ(f.sched.Find(b)->phase, RequestState::Phase::kWaiting);
    EXPECT_EQ(f.sched.Find(b)->seqs[0].kv_id, -1);
    EXPECT_EQ(f.kv.Stats().prefix_query_tokens, 40);  // its attempts are not queries
    EXPECT_EQ(f.kv.NumSeqs(), 1);
    EXPECT_TRUE(f.kv.CheckInvariants().ok());
  }
  ASSERT_NE(f.sched.Abort(g, FinishReason::kCancelled), nullptr);
  (void)f.sched.Schedule();
  EXPECT_EQ(f.sched.Find(b)->phase, RequestState::Phase::kRunning);
  EXPECT_EQ(f.kv.Stats().prefix_query_tokens, 40 + 30);  // counted once, when it was admitted
}

// Shared-prefix deferral. Prompts: a 64-token common prefix (4 blocks) + an 8-token suffix.
std::vector<int32_t> SharedPrompt(int32_t suffix) {
  std::vector<int32_t> p;
  p.reserve(72);
  for (int i = 0; i < 64; ++i) p.push_back(i % 50);
  for (int i = 0; i < 8; ++i) p.push_back(suffix);
  return p;
}

RequestId AddPrompt(Fixture& f, std::vector<int32_t> prompt, Priority priority,
                    std::vector<uint8_t> salt = {}) {
  SubmitRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = 4;
  r.priority = priority;
  const RequestId id = f.next++;
  auto state = MakeRequestState(id, std::move(r), f.clock.Now());
  state->salt = std::move(salt);  // the engine composes it; here the scheduler gets it directly
  EXPECT_TRUE(f.sched.Add(std::move(state)).ok());
  return id;
}

TEST(Scheduler, DefersWaitingRequestWhosePrefixIsInFlightButAdmitsOthers) {
  Fixture f(SchedulerConfig{}, 64);
  const RequestId a = AddPrompt(f, SharedPrompt(60), Priority::kGold);
  const RequestId b = AddPrompt(f, SharedPrompt(61), Priority::kSilver);
  std::vector<int32_t> other = SharedPrompt(62);
  other[0] = 63;  // differs in the first block: nothing in common
  const RequestId c = AddPrompt(f, other, Priority::kBronze);
  const SchedulerOutput& out = f.sched.Schedule();
  ASSERT_EQ(out.seqs.size(), 2u);  // a and c; b (between them in priority) is deferred
  EXPECT_EQ(out.seqs[0].req->id, a);
  EXPECT_EQ(out.seqs[1].req->id, c);
  EXPECT_EQ(f.sched.Find(b)->phase, RequestState::Phase::kWaiting);
  EXPECT_EQ(f.sched.num_deferrals(), 1);
  EXPECT_EQ(f.sched.num_inflight_blocks(), 8);  // 4 full blocks of a's prompt + 4 of c's
  ASSERT_TRUE(f.sched.CheckInflight().ok()) << f.sched.CheckInflight().ToString();
  const std::vector<ScheduledSeq> batch(out.seqs.begin(), out.seqs.end());
  for (const ScheduledSeq& e : batch) f.sched.CommitComputed(e);
  EXPECT_EQ(f.sched.num_inflight_blocks(), 0);
  ASSERT_TRUE(f.sched.CheckInflight().ok()) << f.sched.CheckInflight().ToString();
  // a's blocks are registered now: b is admitted and its first 64 tokens are a prefix hit.
  const SchedulerOutput& out2 = f.sched.Schedule();
  bool b_found = false;
  for (const ScheduledSeq& e : out2.seqs) {
    if (e.req->id != b) continue;
    b_found = true;
    EXPECT_EQ(e.start_pos, 64);
    EXPECT_EQ(e.num_tokens, 8);
  }
  EXPECT_TRUE(b_found);
  EXPECT_EQ(f.sched.num_deferrals(), 1);
  ASSERT_TRUE(f.sched.CheckInflight().ok()) << f.sched.CheckInflight().ToString();
  for (RequestId id : {a, b, c}) ASSERT_NE(f.sched.Abort(id, FinishReason::kCancelled), nullptr);
  EXPECT_EQ(f.sched.num_inflight_blocks(), 0);
  EXPECT_EQ(f.kv.Stats().used_blocks, 0);
}

TEST(Scheduler, DeferralFollowsChunkedPrefillAndEndsWhenTheProviderIsAborted) {
  SchedulerConfig sc;
  sc.max_batched_tokens = 32;  // a's 72-token prompt takes 3 steps
  Fixture f(sc, 64);
  const RequestId a = AddPrompt(f, SharedPrompt(60), Priority::kSilver);
  const SchedulerOutput& out = f.sched.Schedule();
  ASSERT_EQ(out.seqs.size(), 1u);
  const ScheduledSeq e = out.seqs[0];
  EXPECT_EQ(e.req->id, a);
  f.sched.CommitComputed(e);  // blocks 0, 1 registered; 2, 3 still in flight
  EXPECT_EQ(f.sched.num_inflight_blocks(), 2);
  ASSERT_TRUE(f.sched.CheckInflight().ok()) << f.sched.CheckInflight().ToString();
  // b ranks first, but its first uncached block is a's block 2: deferred, a keeps going.
  const RequestId b = AddPrompt(f, SharedPrompt(61), Priority::kGold);
  const SchedulerOutput& out2 = f.sched.Schedule();
  ASSERT_EQ(out2.seqs.size(), 1u);
  EXPECT_EQ(out2.seqs[0].req->id, a);
  EXPECT_EQ(f.sched.Find(b)->phase, RequestState::Phase::kWaiting);
  EXPECT_EQ(f.sched.num_deferrals(), 1);
  // The provider goes away before computing the blocks: b must not wait for it.
  ASSERT_NE(f.sched.Abort(a, FinishReason::kCancelled), nullptr);
  EXPECT_EQ(f.sched.num_inflight_blocks(), 0);
  const SchedulerOutput& out3 = f.sched.Schedule();
  ASSERT_EQ(out3.seqs.size(), 1u);
  EXPECT_EQ(out3.seqs[0].req->id, b);
  EXPECT_EQ(out3.seqs[0].start_pos, 32);  // the two blocks a committed are hits
  EXPECT_EQ(f.sched.num_deferrals(), 1);
  ASSERT_TRUE(f.sched.CheckInflight().ok()) << f.sched.CheckInflight().ToString();
}

TEST(Scheduler, NoDeferralAcrossSaltsOrWithThePrefixCacheOff) {
  {
    Fixture f(SchedulerConfig{}, 64);
    AddPrompt(f, SharedPrompt(60), Priority::kSilver, {1});
    AddPrompt(f, SharedPrompt(61), Priority::kSilver, {2});
    EXPECT_EQ(f.sched.Schedule().seqs.size(), 2u);
    EXPECT_EQ(f.sched.num_deferrals(), 0);
  }
  {
    FakeClock clock;
    kv::KvManager kv(kv::KvManagerConfig{64, 16, false});
    Scheduler sched(SchedulerConfig{}, &kv, 16, &clock);
    for (RequestId id : {1, 2}) {
      SubmitRequest r;
      r.prompt = SharedPrompt(static_cast<int32_t>(id));
      r.max_tokens = 4;
      ASSERT_TRUE(sched.Add(MakeRequestState(id, std::move(r), clock.Now())).ok());
    }
    EXPECT_EQ(sched.Schedule().seqs.size(), 2u);
    EXPECT_EQ(sched.num_deferrals(), 0);
    EXPECT_EQ(sched.num_inflight_blocks(), 0);
    EXPECT_TRUE(sched.CheckInflight().ok());
  }
}

TEST(Scheduler, ExpiredWaitingListsOnlyNeverStartedRequestsPastTheirDeadline) {
  Fixture f(OneSeat());
  const TimePoint now = f.clock.Now();
  const RequestId gold = f.Add(Priority::kGold);  // takes the only seat
  const RequestId a = f.Add(Priority::kSilver, 8, now + std::chrono::milliseconds(10));
  const RequestId b = f.Add(Priority::kSilver, 8, now + std::chrono::milliseconds(50));
  const RequestId none = f.Add(Priority::kSilver);
  ASSERT_EQ(f.sched.Schedule().seqs.at(0).req->id, gold);
  std::vector<RequestId> expired;
  f.sched.ExpiredWaiting(f.clock.Now(), &expired);
  EXPECT_TRUE(expired.empty());
  f.clock.Advance(std::chrono::milliseconds(10));  // exactly a's deadline: it has passed
  f.sched.ExpiredWaiting(f.clock.Now(), &expired);
  EXPECT_EQ(expired, (std::vector<RequestId>{a}));
  f.clock.Advance(std::chrono::milliseconds(40));
  expired.clear();
  f.sched.ExpiredWaiting(f.clock.Now(), &expired);
  EXPECT_EQ(expired, (std::vector<RequestId>{a, b}));
  ASSERT_NE(f.sched.Abort(a, FinishReason::kError), nullptr);
  ASSERT_NE(f.sched.Abort(b, FinishReason::kError), nullptr);
  EXPECT_EQ(f.sched.num_queued_never_started(), 1);  // `none` never expires
  // A request admitted before its deadline keeps running past it.
  const RequestId d = f.Add(Priority::kSilver, 8, f.clock.Now() + std::chrono::milliseconds(1));
  ASSERT_NE(f.sched.Abort(gold, FinishReason::kCancelled), nullptr);
  ASSERT_EQ(f.sched.Schedule().seqs.at(0).req->id, d);  // deadline before no deadline
  f.clock.Advance(std::chrono::milliseconds(5));
  expired.clear();
  f.sched.ExpiredWaiting(f.clock.Now(), &expired);
  EXPECT_TRUE(expired.empty());
  EXPECT_EQ(f.sched.Find(none)->phase, RequestState::Phase::kWaiting);
}

}  // namespace
}  // namespace strata::engine::sched
