#include "cachekey/block_hash.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace strata::cachekey {

namespace {

void AppendLe64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void AppendParts(std::vector<uint8_t>* out, std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts) {
    AppendLe64(out, p.size());
    out->insert(out->end(), p.begin(), p.end());
  }
}

}  // namespace

BlockHash HashBlock(const BlockHash& parent, std::span<const uint8_t> salt,
                    std::span<const int32_t> tokens) {
  // One contiguous buffer (reused per thread) keeps this to a single EVP_Digest call.
  thread_local std::vector<uint8_t> buf;
  buf.clear();
  buf.reserve(parent.size() + 8 + salt.size() + 4 * tokens.size());
  buf.insert(buf.end(), parent.begin(), parent.end());
  AppendLe64(&buf, salt.size());
  buf.insert(buf.end(), salt.begin(), salt.end());
  for (int32_t t : tokens) {
    const uint32_t u = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) buf.push_back(static_cast<uint8_t>(u >> (8 * i)));
  }
  BlockHash out{};
  unsigned int len = 0;
  if (EVP_Digest(buf.data(), buf.size(), out.data(), &len, EVP_sha256(), nullptr) != 1 ||
      len != out.size()) {
    // OpenSSL failing to hash in memory means the library is broken; a wrong key would corrupt
    // other requests' KV, so stop.
    std::abort();
  }
  return out;
}

std::vector<BlockHash> ComputeBlockHashes(std::span<const int32_t> tokens, int block_size,
                                          std::span<const uint8_t> salt) {
  std::vector<BlockHash> out;
  if (block_size <= 0) return out;
  const size_t bs = static_cast<size_t>(block_size);
  const size_t n = tokens.size() / bs;
  out.reserve(n);
  BlockHash parent{};
  for (size_t i = 0; i < n; ++i) {
    parent = HashBlock(parent, salt, tokens.subspan(i * bs, bs));
    out.push_back(parent);
  }
  return out;
}

std::vector<uint8_t> JoinSaltParts(std::initializer_list<std::string_view> parts) {
  std::vector<uint8_t> out;
  AppendParts(&out, parts);
  return out;
}

std::vector<uint8_t> ModelSalt(const ModelFacts& facts) {
  const std::string block_size = std::to_string(facts.block_size);
  return JoinSaltParts({"model", facts.fingerprint, facts.kv_dtype, block_size});
}

std::vector<uint8_t> RequestSalt(std::span<const uint8_t> model_salt, const RequestFacts& facts) {
  std::vector<uint8_t> out(model_salt.begin(), model_salt.end());
  if (!facts.adapter.empty()) AppendParts(&out, {"adapter", facts.adapter});
  if (!facts.tenant.empty()) AppendParts(&out, {"tenant", facts.tenant});
  return out;
}

std::string HashToHex(const BlockHash& h) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : h) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

}  // namespace strata::cachekey
