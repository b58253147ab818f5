#include "server/response_id.h"

#include <openssl/rand.h>

#include <array>
#include <chrono>
#include <random>

namespace strata::server {

std::string NewResponseId(std::string_view prefix) {
  std::array<unsigned char, 16> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    std::random_device rd;  // /dev/urandom on Linux
    for (size_t i = 0; i < bytes.size(); i += 4) {
      const uint32_t r = rd();
      for (size_t k = 0; k < 4; ++k) bytes[i + k] = static_cast<unsigned char>(r >> (8 * k));
    }
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  id.reserve(prefix.size() + 1 + 2 * bytes.size());
  id += '-';
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

int64_t UnixSecondsNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace strata::server
