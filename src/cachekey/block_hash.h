// cachekey: the prefix-cache key of a KV block, computable without the engine (the gateway links
// this module to route requests by prefix and must compute exactly the keys a replica computes).
//
// A FULL block of block_size tokens is keyed by a chained SHA-256 hash
//   h_i = SHA256(h_{i-1} || salt || token ids of block i)      (h_{-1} = 32 zero bytes)
// Exact byte input of one hash (see HashBlock):
//   32 bytes   parent hash h_{i-1}
//   8 bytes    salt length, unsigned little-endian
//   n bytes    salt
//   4*bs bytes the block's token ids, each int32 little-endian (two's complement)
// The salt binds everything that changes the meaning of the KV or must not be shared, so keys
// cannot collide across models, KV formats, adapters or tenants. It is composed from facts by
// ModelSalt (per replica: weights fingerprint, KV dtype, block size) and RequestSalt (per request:
// adapter, tenant); the parts are length-prefixed (JoinSaltParts), so no two different fact sets
// give the same salt.
//
// Thread contract: pure functions, safe from any thread.
// Errors: none; a broken libcrypto (SHA-256 failing in memory) aborts, since a wrong key would
// serve another request's KV.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::cachekey {

using BlockHash = std::array<uint8_t, 32>;

// Hash of one full block given its parent's hash (32 zero bytes for the first block); the byte
// format is documented at the top of this file. `tokens` is the block's tokens (block_size ids).
BlockHash HashBlock(const BlockHash& parent, std::span<const uint8_t> salt,
                    std::span<const int32_t> tokens);

// The chained hashes of the FULL blocks of `tokens` (a trailing partial block has none); empty
// for block_size <= 0.
std::vector<BlockHash> ComputeBlockHashes(std::span<const int32_t> tokens, int block_size,
                                          std::span<const uint8_t> salt);

// Joins salt parts without ambiguity: each part as 8-byte little-endian length + bytes.
std::vector<uint8_t> JoinSaltParts(std::initializer_list<std::string_view> parts);

// What a replica binds into every key: the model file's content fingerprint, the KV dtype's name
// ("f16", "f32", "q8_0") and the block size.
struct ModelFacts {
  std::string_view fingerprint;
  std::string_view kv_dtype;
  int block_size = 0;
};
// JoinSaltParts({"model", fingerprint, kv_dtype, decimal block_size}).
std::vector<uint8_t> ModelSalt(const ModelFacts& facts);

// What a request adds: the LoRA adapter's digest ("" = the base model) and the tenant ("" = the
// default tenant). An empty fact adds nothing, so a request without them uses the model salt.
struct RequestFacts {
  std::string_view adapter;
  std::string_view tenant;
};
// model_salt, then JoinSaltParts({"adapter", adapter}) if set, then JoinSaltParts({"tenant",
// tenant}) if set.
std::vector<uint8_t> RequestSalt(std::span<const uint8_t> model_salt, const RequestFacts& facts);

// Lower-case hex of a hash (logs, tests).
std::string HashToHex(const BlockHash& h);

}  // namespace strata::cachekey
