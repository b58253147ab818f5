// Small URL helpers for integration tests that talk to real processes: percent-encoding of a
// query value (a PromQL expression) and the port of "http://host:PORT".
// Thread contract: pure functions.
#pragma once

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace strata::testing {

inline std::string Encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
      out += static_cast<char>(c);
    } else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      out += b;
    }
  }
  return out;
}

inline int PortOf(const std::string& url) {
  const size_t p = url.rfind(':');
  return p == std::string::npos ? 0 : std::atoi(url.c_str() + p + 1);
}

}  // namespace strata::testing
