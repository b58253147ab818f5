// Block codec: the byte format of one stored KV entry, shared by every tier (RAM, disk, Redis).
//
// Layout (all integers little-endian), kEntryHeaderBytes = 80 fixed bytes, then the tenant name,
// then the stored bytes:
//   0  magic "SKVB"            4  version u16 (= 1)     6  flags u16 (bits 0-1: compression
//                                                          0 none, 1 lz4, 2 zstd; others must be 0)
//   8  key (32 bytes)          40 format hash u64 (XXH3-64 of the engine's format_id)
//   48 payload length u64 (uncompressed)                56 stored length u64
//   64 tenant length u16 (<= kMaxTenantBytes)           66 reserved u16 + 68 reserved u32 (= 0)
//   72 checksum u64: XXH3-64 over the 80 header bytes with this field zeroed, the tenant bytes
//      and the stored bytes.
// The entry is exactly 80 + tenant length + stored length bytes long. Compressed payloads are kept
// only when they save at least 1/8 of the payload; otherwise the payload is stored raw.
//
// Decoding treats the bytes as hostile: every length is checked against the buffer before use,
// decompression writes into exactly `payload length` bytes, and any mismatch is an
// InvalidArgument Status naming the problem (never a crash, never an allocation larger than the
// expected payload).
// Thread contract: pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/kvtier/tiered_cache.h"
#include "protocol/wire.h"

namespace strata::engine::kvtier {

inline constexpr size_t kEntryHeaderBytes = 80;
inline constexpr uint16_t kEntryVersion = 1;
using protocol::kMaxTenantBytes;  // the wire's bound on a tenant name
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 32;  // 4 GiB: far above any KV block

// XXH3-64 of the format id string, stored in every header.
uint64_t FormatHash(std::string_view format_id);

// Lower-case 64-char hex of the key (file names, Redis keys).
std::string KeyHex(const BlockKey& key);

struct EntryMeta {
  BlockKey key{};
  uint64_t format_hash = 0;
  uint64_t payload_len = 0;
  uint64_t stored_len = 0;
  Compression compression = Compression::kNone;
  std::string tenant;
};

// Builds a stored entry. InvalidArgument when the tenant name or payload is too long.
Result<std::vector<uint8_t>> EncodeEntry(const BlockKey& key, uint64_t format_hash,
                                         std::string_view tenant, std::span<const uint8_t> payload,
                                         Compression compression);

// Structural check of the header prefix of an entry whose total size is `total_size` (magic,
// version, flags, tenant length, lengths adding up to total_size). `prefix` must hold at least the
// fixed header; the tenant is filled when the prefix holds it. Does not verify the checksum.
Result<EntryMeta> ParseEntryHeader(std::span<const uint8_t> prefix, uint64_t total_size);

// Full verification and decoding: structure, checksum, key, format hash, payload length, then
// bounded decompression. Returns the payload (exactly expected_payload_len bytes).
Result<std::vector<uint8_t>> DecodeEntry(std::span<const uint8_t> entry,
                                         const BlockKey& expected_key,
                                         uint64_t expected_format_hash,
                                         uint64_t expected_payload_len,
                                         EntryMeta* meta_out = nullptr);

}  // namespace strata::engine::kvtier
