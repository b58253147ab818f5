// Names of an enum whose values run 0, 1, ... N-1 with no gaps, kept in a
// std::array<std::string_view, N> indexed by the value:
//
//   constexpr auto kDTypeNames = EnumNames<KvDType::kQ8_0>("f16", "f32", "q8_0");
//   std::string_view KvDTypeName(KvDType t) { return EnumName(kDTypeNames, t, "unknown"); }
//
// Thread contract: pure functions. Errors: a value past the table gives `past_end` (a name that
// is not in the table gives nullopt).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace strata {

// The table of an enum whose last value is kLast: one name per value 0 .. kLast, in order (a name
// too many or too few does not compile).
template <auto kLast, typename... Names>
constexpr std::array<std::string_view, sizeof...(Names)> EnumNames(Names... names) {
  static_assert(sizeof...(Names) == static_cast<size_t>(kLast) + 1, "one name per enum value");
  return {std::string_view(names)...};
}

// names[e], or `past_end` for a value outside the table (a cast from a wider integer).
template <typename E, size_t kN>
constexpr std::string_view EnumName(const std::array<std::string_view, kN>& names, E e,
                                    std::string_view past_end = "?") {
  const auto i = static_cast<size_t>(e);
  return i < kN ? names[i] : past_end;
}

// The value whose name is `name` exactly, nullopt when none is.
template <typename E, size_t kN>
constexpr std::optional<E> EnumValue(const std::array<std::string_view, kN>& names,
                                     std::string_view name) {
  for (size_t i = 0; i < kN; ++i)
    if (names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}

}  // namespace strata
