// Clock: the engine's source of time, injectable so scheduling (deadlines, aging) can be tested
// deterministically with FakeClock.
// Thread contract: Now() may be called from any thread. FakeClock::Advance/Set are thread-safe.
#pragma once

#include <atomic>
#include <chrono>

namespace strata::engine::sched {

using TimePoint = std::chrono::steady_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
};

// Starts at one hour past the steady_clock epoch and moves only when told.
class FakeClock final : public Clock {
 public:
  TimePoint Now() const override {
    return TimePoint(std::chrono::nanoseconds(ns_.load(std::memory_order_acquire)));
  }
  void Advance(std::chrono::nanoseconds d) { ns_.fetch_add(d.count(), std::memory_order_acq_rel); }

 private:
  std::atomic<int64_t> ns_{std::chrono::nanoseconds(std::chrono::hours(1)).count()};
};

}  // namespace strata::engine::sched
