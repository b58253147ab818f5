#include "engine/kvtier/block_codec.h"

#include <lz4.h>
#include <xxhash.h>
#include <zstd.h>

#include <cstring>

namespace strata::engine::kvtier {
namespace {

constexpr uint8_t kMagic[4] = {'S', 'K', 'V', 'B'};
constexpr size_t kChecksumOffset = 72;
constexpr int kZstdLevel = 1;

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t Checksum(const uint8_t* header, std::span<const uint8_t> rest) {
  uint8_t h[kEntryHeaderBytes];
  std::memcpy(h, header, kEntryHeaderBytes);
  std::memset(h + kChecksumOffset, 0, 8);
  XXH3_state_t* state = XXH3_createState();
  if (state == nullptr) return 0;  // allocation failure: the checksum then never matches
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, h, kEntryHeaderBytes);
  if (!rest.empty()) XXH3_64bits_update(state, rest.data(), rest.size());
  uint64_t sum = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return sum;
}

// Compresses into `out`; returns false when compression fails or saves less than 1/8.
bool TryCompress(Compression c, std::span<const uint8_t> in, std::vector<uint8_t>* out) {
  const size_t limit = in.size() - in.size() / 8;
  if (in.empty()) return false;
  if (c == Compression::kLz4) {
    if (in.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) return false;
    out->resize(static_cast<size_t>(LZ4_compressBound(static_cast<int>(in.size()))));
    int n = LZ4_compress_default(reinterpret_cast<const char*>(in.data()),
                                 reinterpret_cast<char*>(out->data()), static_cast<int>(in.size()),
                                 static_cast<int>(out->size()));
    if (n <= 0 || static_cast<size_t>(n) > limit) return false;
    out->resize(static_cast<size_t>(n));
    return true;
  }
  if (c == Compression::kZstd) {
    out->resize(ZSTD_compressBound(in.size()));
    size_t n = ZSTD_compress(out->data(), out->size(), in.data(), in.size(), kZstdLevel);
    if (ZSTD_isError(n) || n > limit) return false;
    out->resize(n);
    return true;
  }
  return false;
}

}  // namespace

uint64_t FormatHash(std::string_view format_id) {
  return XXH3_64bits(format_id.data(), format_id.size());
}

std::string KeyHex(const BlockKey& key) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(64, '0');
  for (size_t i = 0; i < key.size(); ++i) {
    s[2 * i] = kHex[key[i] >> 4];
    s[2 * i + 1] = kHex[key[i] & 15];
  }
  return s;
}

Result<std::vector<uint8_t>> EncodeEntry(const BlockKey& key, uint64_t format_hash,
                                         std::string_view tenant, std::span<const uint8_t> payload,
                                         Compression compression) {
  if (tenant.size() > kMaxTenantBytes) {
    return Status::InvalidArgument("kv entry: tenant name longer than " +
                                   std::to_string(kMaxTenantBytes) + " bytes");
  }
  if (payload.size() > kMaxPayloadBytes)
    return Status::InvalidArgument("kv entry: payload too large");
  std::vector<uint8_t> packed;
  Compression used = Compression::kNone;
  if (compression != Compression::kNone && TryCompress(compression, payload, &packed))
    used = compression;
  std::span<const uint8_t> stored =
      used == Compression::kNone ? payload : std::span<const uint8_t>(packed);

  std::vector<uint8_t> out(kEntryHeaderBytes + tenant.size() + stored.size());
  uint8_t* h = out.data();
  std::memcpy(h, kMagic, 4);
  Put16(h + 4, kEntryVersion);
  Put16(h + 6, static_cast<uint16_t>(used));
  std::memcpy(h + 8, key.data(), 32);
  Put64(h + 40, format_hash);
  Put64(h + 48, payload.size());
  Put64(h + 56, stored.size());
  Put16(h + 64, static_cast<uint16_t>(tenant.size()));
  Put16(h + 66, 0);
  Put32(h + 68, 0);
  Put64(h + 72, 0);
  if (!tenant.empty()) std::memcpy(h + kEntryHeaderBytes, tenant.data(), tenant.size());
  if (!stored.empty())
    std::memcpy(h + kEntryHeaderBytes + tenant.size(), stored.data(), stored.size());
  Put64(h + kChecksumOffset, Checksum(h, std::span<const uint8_t>(out).subspan(kEntryHeaderBytes)));
  return out;
}

Result<EntryMeta> ParseEntryHeader(std::span<const uint8_t> prefix, uint64_t total_size) {
  if (prefix.size() < kEntryHeaderBytes || total_size < kEntryHeaderBytes) {
    return Status::InvalidArgument("kv entry: shorter than the " +
                                   std::to_string(kEntryHeaderBytes) + "-byte header (" +
                                   std::to_string(total_size) + " bytes)");
  }
  const uint8_t* h = prefix.data();
  if (std::memcmp(h, kMagic, 4) != 0) return Status::InvalidArgument("kv entry: bad magic");
  uint16_t version = Get16(h + 4);
  if (version != kEntryVersion) {
    return Status::InvalidArgument("kv entry: unsupported version " + std::to_string(version));
  }
  uint16_t flags = Get16(h + 6);
  if (flags > 2) return Status::InvalidArgument("kv entry: bad flags " + std::to_string(flags));
  if (Get16(h + 66) != 0 || Get32(h + 68) != 0)
    return Status::InvalidArgument("kv entry: reserved bytes set");
  EntryMeta meta;
  meta.compression = static_cast<Compression>(flags);
  std::memcpy(meta.key.data(), h + 8, 32);
  meta.format_hash = Get64(h + 40);
  meta.payload_len = Get64(h + 48);
  meta.stored_len = Get64(h + 56);
  uint64_t tenant_len = Get16(h + 64);
  if (tenant_len > kMaxTenantBytes)
    return Status::InvalidArgument("kv entry: tenant length too large");
  if (meta.payload_len > kMaxPayloadBytes)
    return Status::InvalidArgument("kv entry: payload length too large");
  // Compare without overflow: total_size >= header + tenant is known to be reachable first.
  if (total_size < kEntryHeaderBytes + tenant_len ||
      meta.stored_len != total_size - kEntryHeaderBytes - tenant_len) {
    return Status::InvalidArgument("kv entry: stored length " + std::to_string(meta.stored_len) +
                                   " does not match the entry size " + std::to_string(total_size));
  }
  if (meta.compression == Compression::kNone ? meta.stored_len != meta.payload_len
                                             : meta.stored_len >= meta.payload_len) {
    return Status::InvalidArgument("kv entry: stored length " + std::to_string(meta.stored_len) +
                                   " inconsistent with payload length " +
                                   std::to_string(meta.payload_len));
  }
  if (prefix.size() >= kEntryHeaderBytes + tenant_len) {
    meta.tenant.assign(reinterpret_cast<const char*>(h + kEntryHeaderBytes), tenant_len);
  }
  return meta;
}

Result<std::vector<uint8_t>> DecodeEntry(std::span<const uint8_t> entry,
                                         const BlockKey& expected_key,
                                         uint64_t expected_format_hash,
                                         uint64_t expected_payload_len, EntryMeta* meta_out) {
  ASSIGN_OR_RETURN(EntryMeta meta, ParseEntryHeader(entry, entry.size()));
  if (Get64(entry.data() + kChecksumOffset) !=
      Checksum(entry.data(), entry.subspan(kEntryHeaderBytes))) {
    return Status::InvalidArgument("kv entry: checksum mismatch");
  }
  if (meta.key != expected_key) return Status::InvalidArgument("kv entry: key mismatch");
  if (meta.format_hash != expected_format_hash)
    return Status::InvalidArgument("kv entry: format_id mismatch");
  if (meta.payload_len != expected_payload_len) {
    return Status::InvalidArgument("kv entry: payload length " + std::to_string(meta.payload_len) +
                                   " != block size " + std::to_string(expected_payload_len));
  }
  std::span<const uint8_t> stored = entry.subspan(entry.size() - meta.stored_len);
  std::vector<uint8_t> out;
  switch (meta.compression) {
    case Compression::kNone:
      out.assign(stored.begin(), stored.end());
      break;
    case Compression::kLz4: {
      if (meta.payload_len > static_cast<uint64_t>(LZ4_MAX_INPUT_SIZE) ||
          stored.size() > static_cast<size_t>(INT32_MAX)) {
        return Status::InvalidArgument("kv entry: lz4 block too large");
      }
      out.resize(meta.payload_len);
      int n = LZ4_decompress_safe(reinterpret_cast<const char*>(stored.data()),
                                  reinterpret_cast<char*>(out.data()),
                                  static_cast<int>(stored.size()), static_cast<int>(out.size()));
      if (n < 0 || static_cast<uint64_t>(n) != meta.payload_len) {
        return Status::InvalidArgument("kv entry: lz4 decompression failed");
      }
      break;
    }
    case Compression::kZstd: {
      out.resize(meta.payload_len);
      size_t n = ZSTD_decompress(out.data(), out.size(), stored.data(), stored.size());
      if (ZSTD_isError(n) || n != meta.payload_len) {
        return Status::InvalidArgument("kv entry: zstd decompression failed");
      }
      break;
    }
  }
  if (meta_out != nullptr) *meta_out = std::move(meta);
  return out;
}

}  // namespace strata::engine::kvtier
