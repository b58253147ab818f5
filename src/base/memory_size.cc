#include "base/memory_size.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <string>

#include "base/ascii.h"
#include "base/checked.h"

namespace strata {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  auto total = CheckedMul(static_cast<uint64_t>(pages), static_cast<uint64_t>(page_size));
  return total ? *total : 0;
}

Result<uint64_t> ParseMemorySize(std::string_view text) {
  return ParseMemorySize(text, PhysicalMemoryBytes());
}

Result<uint64_t> ParseMemorySize(std::string_view text, uint64_t physical_bytes) {
  const std::string quoted = "memory size '" + std::string(text) + "'";
  std::string_view s = Trim(text);
  // Number: digits with an optional fraction. No sign, no exponent, no hex.
  size_t n = 0;
  bool digits = false;
  while (n < s.size() && s[n] >= '0' && s[n] <= '9') ++n, digits = true;
  if (n < s.size() && s[n] == '.') {
    ++n;
    while (n < s.size() && s[n] >= '0' && s[n] <= '9') ++n, digits = true;
  }
  if (!digits) {
    return Status::InvalidArgument(quoted +
                                   ": expected a number with a unit (e.g. 4GiB, 512MiB) or a "
                                   "fraction of RAM (e.g. 0.5)");
  }
  double value = 0.0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + n, value);
  if (ec != std::errc() || ptr != s.data() + n || !std::isfinite(value)) {
    return Status::InvalidArgument(quoted + ": bad number");
  }
  const std::string_view unit = Trim(s.substr(n));
  double bytes = 0.0;
  if (unit.empty() || unit == "%") {
    const double fraction = unit.empty() ? value : value / 100.0;
    if (!(fraction > 0.0) || fraction > 1.0) {
      return Status::InvalidArgument(
          quoted + (unit.empty() ? ": a number without unit is a fraction of RAM and must be in "
                                   "(0, 1]; add a unit such as GiB for an absolute size"
                                 : ": a percentage must be in (0, 100]"));
    }
    if (physical_bytes == 0) {
      return Status::InvalidArgument(quoted +
                                     ": physical memory size is unknown; give an absolute size");
    }
    bytes = fraction * static_cast<double>(physical_bytes);
  } else {
    struct UnitDef {
      std::string_view name;
      double scale;
    };
    static constexpr UnitDef kUnits[] = {
        {"b", 1.0},   {"k", 1024.0},          {"kib", 1024.0},
        {"kb", 1e3},  {"m", 1048576.0},       {"mib", 1048576.0},
        {"mb", 1e6},  {"g", 1073741824.0},    {"gib", 1073741824.0},
        {"gb", 1e9},  {"t", 1099511627776.0}, {"tib", 1099511627776.0},
        {"tb", 1e12},
    };
    double scale = 0.0;
    for (const UnitDef& u : kUnits) {
      if (EqualsIgnoreCase(unit, u.name)) scale = u.scale;
    }
    if (scale == 0.0) {
      return Status::InvalidArgument(quoted + ": unknown unit '" + std::string(unit) +
                                     "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
    }
    bytes = value * scale;
  }
  bytes = std::floor(bytes);
  if (!(bytes >= 1.0)) return Status::InvalidArgument(quoted + ": must be at least 1 byte");
  if (bytes >= 9223372036854775808.0) return Status::InvalidArgument(quoted + ": too large");
  return static_cast<uint64_t>(bytes);
}

std::string FormatMemorySize(uint64_t bytes) {
  static constexpr struct {
    const char* name;
    int shift;
  } kUnits[] = {{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}};
  if (bytes != 0) {
    for (const auto& u : kUnits) {
      const uint64_t unit = uint64_t{1} << u.shift;
      if (bytes % unit == 0) return std::to_string(bytes / unit) + u.name;
    }
  }
  return std::to_string(bytes) + "B";
}

}  // namespace strata
