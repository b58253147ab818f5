#include "protocol/wire.h"

#include <array>
#include <string>

namespace strata::protocol {
namespace {
constexpr std::array<std::string_view, kNumPriorities> kPriorityNames = {"gold", "silver",
                                                                         "bronze"};
constexpr std::array<std::string_view, kNumKvTiers> kTierNames = {"pool", "ram", "disk", "redis"};
}  // namespace

std::string_view PriorityName(Priority p) {
  const auto i = static_cast<size_t>(p);
  return i < kPriorityNames.size() ? kPriorityNames[i] : "?";
}

Result<Priority> ParsePriorityName(std::string_view name) {
  for (size_t i = 0; i < kPriorityNames.size(); ++i)
    if (kPriorityNames[i] == name) return static_cast<Priority>(i);
  return Status::InvalidArgument(
      "must be gold, silver or bronze (or an integer: < 0 gold, 0 "
      "silver, > 0 bronze), got '" +
      std::string(name.substr(0, 64)) + "'");
}

Priority PriorityFromInt(int64_t v) {
  if (v < 0) return Priority::kGold;
  return v == 0 ? Priority::kSilver : Priority::kBronze;
}

int64_t PriorityToInt(Priority p) { return static_cast<int64_t>(p) - 1; }

std::string_view KvTierName(KvTier t) {
  const auto i = static_cast<size_t>(t);
  return i < kTierNames.size() ? kTierNames[i] : "?";
}

Result<KvTier> ParseKvTierName(std::string_view name) {
  for (size_t i = 0; i < kTierNames.size(); ++i)
    if (kTierNames[i] == name) return static_cast<KvTier>(i);
  return Status::InvalidArgument("unknown KV tier '" + std::string(name.substr(0, 64)) +
                                 "' (pool, ram, disk, redis)");
}

}  // namespace strata::protocol
