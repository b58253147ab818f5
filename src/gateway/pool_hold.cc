#include "gateway/pool_hold.h"

#include <utility>
#include <vector>

#include "base/enum_names.h"

namespace strata::gateway {

std::string_view HoldOutcomeName(HoldOutcome o) {
  static constexpr auto kNames =
      EnumNames<HoldOutcome::kStopped>("ready", "timeout", "cancelled", "stopped");
  return EnumName(kNames, o, "stopped");
}

bool PoolHolds::Hold(const std::string& pool, int max_held, Clock::time_point deadline,
                     Resume resume, std::function<bool()> cancelled) {
  MutexLock lock(&mu_);
  auto& q = held_[pool];
  if (static_cast<int>(q.size()) >= max_held) return false;
  q.push_back(Entry{deadline, std::move(resume), std::move(cancelled)});
  return true;
}

void PoolHolds::Tick(Clock::time_point now,
                     const std::function<bool(const std::string&)>& pool_ready) {
  std::vector<std::pair<Resume, HoldOutcome>> due;
  {
    MutexLock lock(&mu_);
    for (auto& [pool, q] : held_) {
      if (q.empty()) continue;
      const bool ready = pool_ready(pool);
      std::deque<Entry> keep;
      for (Entry& e : q) {
        if (e.cancelled && e.cancelled())
          due.emplace_back(std::move(e.resume), HoldOutcome::kCancelled);
        else if (ready)
          due.emplace_back(std::move(e.resume), HoldOutcome::kReady);
        else if (now >= e.deadline)
          due.emplace_back(std::move(e.resume), HoldOutcome::kTimeout);
        else
          keep.push_back(std::move(e));
      }
      q = std::move(keep);
    }
  }
  for (auto& [resume, outcome] : due) resume(outcome);
}

void PoolHolds::Clear() {
  std::vector<Resume> all;
  {
    MutexLock lock(&mu_);
    for (auto& [pool, q] : held_) {
      for (Entry& e : q) all.push_back(std::move(e.resume));
      q.clear();
    }
  }
  for (auto& resume : all) resume(HoldOutcome::kStopped);
}

std::map<std::string, int> PoolHolds::Counts() const {
  MutexLock lock(&mu_);
  std::map<std::string, int> out;
  for (const auto& [pool, q] : held_) out[pool] = static_cast<int>(q.size());
  return out;
}

}  // namespace strata::gateway
