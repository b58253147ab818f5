#include "protocol/wire.h"

#include <array>
#include <optional>
#include <string>

namespace strata::protocol {
namespace {
constexpr std::array<std::string_view, kNumPriorities> kPriorityNames = {"gold", "silver",
                                                                         "bronze"};
constexpr std::array<std::string_view, kNumKvTiers> kTierNames = {"pool", "ram", "disk", "redis"};

// A wire enum's name (its value indexes the table), "?" for a value past it.
template <typename E, size_t kN>
std::string_view NameOf(const std::array<std::string_view, kN>& names, E e) {
  const auto i = static_cast<size_t>(e);
  return i < kN ? names[i] : "?";
}

// The value whose name is `name` exactly, nullopt when none is.
template <typename E, size_t kN>
std::optional<E> ValueOf(const std::array<std::string_view, kN>& names, std::string_view name) {
  for (size_t i = 0; i < kN; ++i)
    if (names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}

// Client data quoted in an error: at most 64 bytes of it.
std::string Quoted(std::string_view name) { return "'" + std::string(name.substr(0, 64)) + "'"; }
}  // namespace

std::string_view PriorityName(Priority p) { return NameOf(kPriorityNames, p); }

Result<Priority> ParsePriorityName(std::string_view name) {
  if (auto p = ValueOf<Priority>(kPriorityNames, name)) return *p;
  return Status::InvalidArgument(
      "must be gold, silver or bronze (or an integer: < 0 gold, 0 silver, > 0 bronze), got " +
      Quoted(name));
}

Priority PriorityFromInt(int64_t v) {
  if (v < 0) return Priority::kGold;
  return v == 0 ? Priority::kSilver : Priority::kBronze;
}

int64_t PriorityToInt(Priority p) { return static_cast<int64_t>(p) - 1; }

std::string_view KvTierName(KvTier t) { return NameOf(kTierNames, t); }

Result<KvTier> ParseKvTierName(std::string_view name) {
  if (auto t = ValueOf<KvTier>(kTierNames, name)) return *t;
  return Status::InvalidArgument("unknown KV tier " + Quoted(name) + " (pool, ram, disk, redis)");
}

}  // namespace strata::protocol
