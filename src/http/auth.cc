#include "http/auth.h"

#include <algorithm>

namespace strata::http {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

bool BearerKeyAccepted(std::string_view authorization, const std::vector<std::string>& keys) {
  if (keys.empty()) return true;
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.substr(0, kBearer.size()) != kBearer) return false;
  std::string_view token = authorization.substr(kBearer.size());
  bool ok = false;
  for (const auto& k : keys) ok |= ConstantTimeEquals(token, k);
  return ok;
}

}  // namespace strata::http
