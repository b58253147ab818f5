#include "engine/sched/request.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

namespace strata::engine::sched {
namespace {

SubmitRequest Good() {
  SubmitRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 10;
  return r;
}

void ExpectField(const SubmitRequest& r, const std::string& field) {
  Status s = r.Validate(100, 64);
  ASSERT_FALSE(s.ok()) << field;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
}

TEST(SubmitRequest, ValidRequestPasses) { EXPECT_TRUE(Good().Validate(100, 64).ok()); }

TEST(SubmitRequest, ErrorsNameTheField) {
  SubmitRequest r = Good();
  r.prompt.clear();
  ExpectField(r, "prompt");
  r = Good();
  r.prompt[1] = 100;
  ExpectField(r, "prompt[1]");
  r = Good();
  r.prompt[0] = -1;
  ExpectField(r, "prompt[0]");
  r = Good();
  r.max_tokens = 0;
  ExpectField(r, "max_tokens");
  r = Good();
  r.max_tokens = 62;  // 3 + 62 > 64
  ExpectField(r, "max_model_len");
  r = Good();
  r.stop_token_ids = {5, 200};
  ExpectField(r, "stop_token_ids[1]");
  r = Good();
  r.eog_ids = {-3};
  ExpectField(r, "eog_ids[0]");
  r = Good();
  r.n = 0;
  ExpectField(r, "n:");
  r = Good();
  r.n = kMaxN + 1;
  ExpectField(r, "n:");
  r = Good();
  r.logprobs = true;
  r.top_logprobs = 21;
  ExpectField(r, "top_logprobs");
  r = Good();
  r.top_logprobs = 3;  // without logprobs
  ExpectField(r, "top_logprobs");
  r = Good();
  r.priority = static_cast<Priority>(7);
  ExpectField(r, "priority");
  r = Good();
  r.adapter.assign(kMaxAdapterBytes + 1, 'a');
  ExpectField(r, "adapter");
  r = Good();
  r.sampling.top_p = 0.0f;
  ExpectField(r, "sampling");
}

TEST(Priority, ParseAndName) {
  EXPECT_EQ(*ParsePriorityName("gold"), Priority::kGold);
  EXPECT_EQ(*ParsePriorityName("bronze"), Priority::kBronze);
  EXPECT_FALSE(ParsePriorityName("platinum").ok());
  EXPECT_EQ(PriorityName(Priority::kSilver), "silver");
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
}

TEST(RequestStream, CompletesAfterNTerminalEvents) {
  RequestStream s(1, 2);
  TokenEvent a;
  a.token = 5;
  s.Push(a);
  TokenEvent end0;
  end0.index = 0;
  end0.finish = FinishReason::kStop;
  s.Push(end0);
  EXPECT_FALSE(s.complete());
  EXPECT_EQ(s.TryNext()->token, 5);
  EXPECT_EQ(s.TryNext()->finish, FinishReason::kStop);
  EXPECT_FALSE(s.TryNext().has_value());
  EXPECT_FALSE(s.complete());
  EXPECT_FALSE(s.NextFor(std::chrono::milliseconds(1)).has_value());
  std::thread producer([&] {
    TokenEvent end1;
    end1.index = 1;
    end1.finish = FinishReason::kLength;
    s.Push(end1);
  });
  auto ev = s.Next();  // blocks until the producer pushes
  producer.join();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->index, 1);
  EXPECT_TRUE(s.complete());
  EXPECT_FALSE(s.Next().has_value());  // complete: returns at once
}

TEST(RequestStream, NotifyOncePerBatchOnEmptyToNonEmpty) {
  RequestStream s(7, 1);
  int calls = 0;
  TokenEvent ev;
  ev.token = 1;
  s.Push(ev);  // before a callback: announced when it is set
  s.SetNotify([&] { ++calls; });
  EXPECT_EQ(calls, 1);
  s.Push(ev);  // not popped yet: same batch, no new call
  EXPECT_EQ(calls, 1);
  int popped = 0;
  while (s.TryNext()) ++popped;
  EXPECT_EQ(popped, 2);
  s.Push(ev);  // empty -> non-empty again
  s.Push(ev);
  EXPECT_EQ(calls, 2);
  while (s.TryNext()) {
  }
  s.SetNotify(nullptr);
  s.Push(ev);
  EXPECT_EQ(calls, 2);
  s.SetNotify([&] { ++calls; });  // an event waits: announced at once
  EXPECT_EQ(calls, 3);
}

TEST(RequestStream, NoEventIsLeftUnannouncedAcrossThreads) {
  constexpr int kEvents = 20000;
  RequestStream s(8, 1);
  std::mutex mu;
  std::condition_variable cv;
  int wakeups = 0;
  s.SetNotify([&] {
    std::lock_guard lk(mu);
    ++wakeups;
    cv.notify_one();
  });
  std::thread producer([&] {
    TokenEvent ev;
    for (int i = 0; i < kEvents; ++i) {
      ev.token = i;
      if (i == kEvents - 1) ev.finish = FinishReason::kLength;
      s.Push(ev);
    }
  });
  int seen = 0, handled = 0;
  while (seen < kEvents) {
    {
      std::unique_lock lk(mu);
      // Only a notification may wake the consumer: a lost one would hang here (test timeout).
      cv.wait(lk, [&] { return wakeups > handled; });
      handled = wakeups;
    }
    while (auto e = s.TryNext()) {
      EXPECT_EQ(e->token, seen);
      ++seen;
    }
  }
  producer.join();
  EXPECT_TRUE(s.complete());
  EXPECT_LE(wakeups, kEvents);
}

}  // namespace
}  // namespace strata::engine::sched
