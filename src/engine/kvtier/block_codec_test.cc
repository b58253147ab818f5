#include "engine/kvtier/block_codec.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <random>

namespace strata::engine::kvtier {
namespace {

BlockKey MakeKey(uint8_t seed) {
  BlockKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(seed * 31 + i);
  return k;
}

std::vector<uint8_t> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

std::vector<uint8_t> Compressible(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i / 64) % 7);
  return v;
}

uint64_t Le64(const std::vector<uint8_t>& b, size_t off) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[off + i];
  return v;
}
void SetLe64(std::vector<uint8_t>* b, size_t off, uint64_t v) {
  for (int i = 0; i < 8; ++i) (*b)[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Recomputes the checksum as the format documents it (XXH3-64 over the header with the checksum
// field zeroed, then the rest), so tests can forge entries whose only defect is elsewhere.
void Reseal(std::vector<uint8_t>* b) {
  SetLe64(b, 72, 0);
  SetLe64(b, 72, XXH3_64bits(b->data(), b->size()));
}

const uint64_t kFmt = FormatHash("model=abc;dtype=f16;block=16");

TEST(BlockCodecTest, LayoutMatchesTheDocumentedFormat) {
  BlockKey key = MakeKey(1);
  std::vector<uint8_t> payload = Random(100, 1);
  auto e = EncodeEntry(key, kFmt, "acme", payload, Compression::kNone);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const auto& b = *e;
  ASSERT_EQ(b.size(), 80u + 4 + 100);
  EXPECT_EQ(std::memcmp(b.data(), "SKVB", 4), 0);
  EXPECT_EQ(b[4] | (b[5] << 8), 1);
  EXPECT_EQ(b[6] | (b[7] << 8), 0);
  EXPECT_EQ(std::memcmp(b.data() + 8, key.data(), 32), 0);
  EXPECT_EQ(Le64(b, 40), XXH3_64bits("model=abc;dtype=f16;block=16", 28));
  EXPECT_EQ(Le64(b, 48), 100u);
  EXPECT_EQ(Le64(b, 56), 100u);
  EXPECT_EQ(b[64] | (b[65] << 8), 4);
  EXPECT_EQ(std::string(b.begin() + 80, b.begin() + 84), "acme");
  EXPECT_EQ(std::memcmp(b.data() + 84, payload.data(), 100), 0);
  std::vector<uint8_t> copy = b;
  Reseal(&copy);
  EXPECT_EQ(copy, b) << "checksum is XXH3-64 over the entry with the checksum field zeroed";
}

TEST(BlockCodecTest, RoundTripAllCompressions) {
  BlockKey key = MakeKey(2);
  for (Compression c : {Compression::kNone, Compression::kLz4, Compression::kZstd}) {
    for (const auto& payload :
         {Compressible(64 * 1024), Random(64 * 1024, 2), std::vector<uint8_t>(1, 7)}) {
      auto e = EncodeEntry(key, kFmt, "", payload, c);
      ASSERT_TRUE(e.ok());
      EntryMeta meta;
      auto d = DecodeEntry(*e, key, kFmt, payload.size(), &meta);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      EXPECT_EQ(*d, payload);
      EXPECT_EQ(meta.payload_len, payload.size());
    }
  }
}

TEST(BlockCodecTest, CompressesOnlyWhenItSaves) {
  BlockKey key = MakeKey(3);
  for (Compression c : {Compression::kLz4, Compression::kZstd}) {
    auto comp = EncodeEntry(key, kFmt, "t", Compressible(64 * 1024), c);
    ASSERT_TRUE(comp.ok());
    EXPECT_EQ((*comp)[6], static_cast<uint8_t>(c));
    EXPECT_LT(comp->size(), 64u * 1024 / 4);
    auto raw = EncodeEntry(key, kFmt, "t", Random(64 * 1024, 3), c);
    ASSERT_TRUE(raw.ok());
    EXPECT_EQ((*raw)[6], 0) << "incompressible payload stays raw";
    EXPECT_EQ(raw->size(), 80u + 1 + 64 * 1024);
  }
}

TEST(BlockCodecTest, EveryBitFlipIsRejected) {
  BlockKey key = MakeKey(4);
  for (Compression c : {Compression::kNone, Compression::kLz4, Compression::kZstd}) {
    std::vector<uint8_t> payload = c == Compression::kNone ? Random(48, 4) : Compressible(512);
    auto e = EncodeEntry(key, kFmt, "ab", payload, c);
    ASSERT_TRUE(e.ok());
    for (size_t i = 0; i < e->size(); ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        std::vector<uint8_t> bad = *e;
        bad[i] ^= static_cast<uint8_t>(1u << bit);
        EXPECT_FALSE(DecodeEntry(bad, key, kFmt, payload.size()).ok())
            << "byte " << i << " bit " << bit;
      }
    }
  }
}

TEST(BlockCodecTest, EveryTruncationIsRejected) {
  BlockKey key = MakeKey(5);
  for (Compression c : {Compression::kNone, Compression::kZstd}) {
    std::vector<uint8_t> payload = Compressible(700);
    auto e = EncodeEntry(key, kFmt, "tenant", payload, c);
    ASSERT_TRUE(e.ok());
    for (size_t n = 0; n < e->size(); ++n) {
      std::vector<uint8_t> cut(e->begin(), e->begin() + static_cast<std::ptrdiff_t>(n));
      EXPECT_FALSE(DecodeEntry(cut, key, kFmt, payload.size()).ok()) << n;
    }
    std::vector<uint8_t> longer = *e;
    longer.push_back(0);
    EXPECT_FALSE(DecodeEntry(longer, key, kFmt, payload.size()).ok());
  }
}

TEST(BlockCodecTest, WrongKeyFormatOrSizeIsRejected) {
  BlockKey key = MakeKey(6);
  auto payload = Random(256, 6);
  auto e = EncodeEntry(key, kFmt, "", payload, Compression::kNone);
  ASSERT_TRUE(e.ok());
  auto wrong_key = DecodeEntry(*e, MakeKey(7), kFmt, 256);
  EXPECT_FALSE(wrong_key.ok());
  EXPECT_NE(wrong_key.status().message().find("key"), std::string::npos);
  auto wrong_fmt = DecodeEntry(*e, key, FormatHash("model=other"), 256);
  EXPECT_FALSE(wrong_fmt.ok());
  EXPECT_NE(wrong_fmt.status().message().find("format"), std::string::npos);
  EXPECT_FALSE(DecodeEntry(*e, key, kFmt, 255).ok());
  EXPECT_TRUE(DecodeEntry(*e, key, kFmt, 256).ok());
}

TEST(BlockCodecTest, ForgedHeadersWithValidChecksumAreRejected) {
  BlockKey key = MakeKey(8);
  auto payload = Compressible(4096);
  auto good = EncodeEntry(key, kFmt, "x", payload, Compression::kLz4);
  ASSERT_TRUE(good.ok());
  auto expect_bad = [&](std::vector<uint8_t> b, const char* what, const char* needle) {
    Reseal(&b);
    auto d = DecodeEntry(b, key, kFmt, payload.size());
    ASSERT_FALSE(d.ok()) << what;
    EXPECT_NE(d.status().message().find(needle), std::string::npos)
        << what << ": " << d.status().ToString();
  };
  auto b = *good;
  b[4] = 2;
  expect_bad(b, "version 2", "version");
  b = *good;
  b[0] = 'X';
  expect_bad(b, "magic", "magic");
  b = *good;
  b[6] = 3;
  expect_bad(b, "flags", "flags");
  b = *good;
  SetLe64(&b, 56, ~uint64_t{0});
  expect_bad(b, "huge stored length", "length");
  b = *good;
  SetLe64(&b, 48, ~uint64_t{0} / 2);
  expect_bad(b, "huge payload length", "length");
  b = *good;
  b[64] = 0xff;
  b[65] = 0xff;
  expect_bad(b, "huge tenant length", "tenant");
  b = *good;
  SetLe64(&b, 48, payload.size() + 1);
  expect_bad(b, "payload length off by one", "length");
  b = *good;
  b[68] = 1;
  expect_bad(b, "reserved", "reserved");
  // Compressed data that does not decompress to exactly the payload length.
  b = *good;
  std::fill(b.begin() + 81, b.end(), 0);  // token 0, match offset 0: not a valid lz4 stream
  expect_bad(b, "broken lz4 stream", "lz4");
  // Raw flag on a compressed body: stored length != payload length.
  b = *good;
  b[6] = 0;
  expect_bad(b, "raw flag on compressed body", "length");
}

TEST(BlockCodecTest, TenantTooLongIsRefused) {
  EXPECT_FALSE(
      EncodeEntry(MakeKey(9), kFmt, std::string(300, 't'), Random(8, 9), Compression::kNone).ok());
}

TEST(BlockCodecTest, ParseHeaderFromPrefix) {
  BlockKey key = MakeKey(10);
  auto e = EncodeEntry(key, kFmt, "acme", Random(1000, 10), Compression::kNone);
  ASSERT_TRUE(e.ok());
  auto meta = ParseEntryHeader(std::span<const uint8_t>(*e).first(84), e->size());
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(meta->tenant, "acme");
  EXPECT_EQ(meta->key, key);
  EXPECT_FALSE(ParseEntryHeader(std::span<const uint8_t>(*e).first(84), e->size() - 1).ok());
  EXPECT_EQ(KeyHex(key).substr(0, 6), "363738");  // key[i] = (310 + i) mod 256
  EXPECT_EQ(KeyHex(key).size(), 64u);
}

}  // namespace
}  // namespace strata::engine::kvtier
