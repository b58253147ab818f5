#include "server/response_id.h"

#include <array>
#include <chrono>

#include "base/random_bytes.h"

namespace strata::server {

std::string NewResponseId(std::string_view prefix) {
  std::array<unsigned char, 16> bytes{};
  FillRandomBytes(bytes);
  std::string id(prefix);
  id.reserve(prefix.size() + 1 + 2 * bytes.size());
  id += '-';
  AppendHexLower(bytes, &id);
  return id;
}

int64_t UnixSecondsNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace strata::server
