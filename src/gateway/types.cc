#include "gateway/types.h"

#include <array>
#include <string>

namespace strata::gateway {
namespace {
constexpr std::array<std::string_view, kNumPriorities> kPriorityNames = {"gold", "silver",
                                                                         "bronze"};
constexpr std::array<std::string_view, kNumKvTiers> kTierNames = {"pool", "ram", "disk", "redis"};
constexpr std::array<std::string_view, 4> kReasonNames = {"affinity", "load", "fallback", "retry"};
}  // namespace

std::string_view PriorityName(Priority p) { return kPriorityNames[static_cast<size_t>(p)]; }

Result<Priority> ParsePriorityName(std::string_view name) {
  for (size_t i = 0; i < kPriorityNames.size(); ++i)
    if (kPriorityNames[i] == name) return static_cast<Priority>(i);
  return Status::InvalidArgument(
      "must be gold, silver or bronze (or an integer: < 0 gold, 0 "
      "silver, > 0 bronze)");
}

Priority PriorityFromInt(int64_t v) {
  if (v < 0) return Priority::kGold;
  return v == 0 ? Priority::kSilver : Priority::kBronze;
}

int64_t PriorityToInt(Priority p) {
  switch (p) {
    case Priority::kGold:
      return -1;
    case Priority::kSilver:
      return 0;
    case Priority::kBronze:
      return 1;
  }
  return 0;
}

std::string_view KvTierName(KvTier t) { return kTierNames[static_cast<size_t>(t)]; }

Result<KvTier> ParseKvTierName(std::string_view name) {
  for (size_t i = 0; i < kTierNames.size(); ++i)
    if (kTierNames[i] == name) return static_cast<KvTier>(i);
  return Status::InvalidArgument("unknown KV tier '" + std::string(name) +
                                 "' (pool, ram, disk, redis)");
}

std::string_view RouteReasonName(RouteReason r) { return kReasonNames[static_cast<size_t>(r)]; }

}  // namespace strata::gateway
