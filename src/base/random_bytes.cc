#include "base/random_bytes.h"

#include <openssl/rand.h>

#include <cstdint>
#include <random>

namespace strata {

void FillRandomBytes(std::span<unsigned char> out) {
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) == 1) return;
  std::random_device rd;  // /dev/urandom on Linux
  for (size_t i = 0; i < out.size(); i += 4) {
    const uint32_t r = rd();
    for (size_t k = 0; k < 4 && i + k < out.size(); ++k) {
      out[i + k] = static_cast<unsigned char>(r >> (8 * k));
    }
  }
}

void AppendHexLower(std::span<const unsigned char> bytes, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->reserve(out->size() + 2 * bytes.size());
  for (unsigned char b : bytes) {
    *out += kHex[b >> 4];
    *out += kHex[b & 15];
  }
}

}  // namespace strata
