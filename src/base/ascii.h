// ASCII case mapping for protocol and config words (header names, units, dtype names): only
// 'A'-'Z' <-> 'a'-'z' change, every other byte (UTF-8 included) is left as it is, and no locale
// is consulted (std::tolower in the "C" locale, which Strata never changes, gives the same bytes).
// Header-only, thread-safe, no allocation except where a std::string is returned.
#pragma once

#include <string>
#include <string_view>

namespace strata {

constexpr char AsciiLower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}
constexpr char AsciiUpper(char c) {
  return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
}

// Lower-cases `*s` in place.
inline void AsciiStrToLower(std::string* s) {
  for (char& c : *s) c = AsciiLower(c);
}
inline std::string AsciiStrToLower(std::string_view s) {
  std::string out(s);
  AsciiStrToLower(&out);
  return out;
}
inline std::string AsciiStrToUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = AsciiUpper(c);
  return out;
}

// True if `a` and `b` are equal once both are lower-cased.
constexpr bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

}  // namespace strata
