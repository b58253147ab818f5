#include "cachekey/block_hash.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

namespace strata::cachekey {
namespace {

std::vector<uint8_t> Salt(std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }

BlockHash FromHex(std::string_view hex) {
  BlockHash h{};
  for (size_t i = 0; i < 32; ++i) {
    auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    h[i] = static_cast<uint8_t>(nib(hex[2 * i]) * 16 + nib(hex[2 * i + 1]));
  }
  return h;
}

std::string ToHex(const std::vector<uint8_t>& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : bytes) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

TEST(BlockHashTest, KnownAnswerMatchesDocumentedFormat) {
  // Expected values from coreutils sha256sum over the bytes documented in block_hash.h:
  //  (head -c 32 /dev/zero; printf
  //  '\x03\0\0\0\0\0\0\0abc\x01\0\0\0\x02\0\0\0\xff\xff\xff\xff\0\x01\0\0')
  //    | sha256sum
  const std::vector<uint8_t> salt = Salt("abc");
  const std::vector<int32_t> tokens = {1, 2, -1, 256, 5, 6, 7, 8, 9};
  const auto hashes = ComputeBlockHashes(tokens, 4, salt);
  ASSERT_EQ(hashes.size(), 2u);  // the partial third block has no hash
  EXPECT_EQ(HashToHex(hashes[0]),
            "b428e5b655d4d8ab4fe64060d543abd3edbf33fd3811c2d18c82f537b8545091");
  // Second block: parent = the hash above, same salt, tokens 5 6 7 8.
  EXPECT_EQ(HashToHex(hashes[1]),
            "7f725a61df7c281731df9b5a4d1b7fecdacfd551b8648d0d6cffe25ac4192f05");
  // Empty salt, zero parent, tokens 5 6 7 8: 32 zero bytes, 8 zero bytes, then the tokens.
  const std::vector<int32_t> block = {5, 6, 7, 8};
  EXPECT_EQ(HashToHex(HashBlock(BlockHash{}, {}, block)),
            "87aecd27b6a72746c78671a1d842091c5122701965926dce15bcf3a0b230dfa0");
  EXPECT_EQ(FromHex(HashToHex(hashes[0])), hashes[0]);
}

TEST(BlockHashTest, ChainedAndSalted) {
  const auto salt = Salt("model-a");
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> b = {9, 9, 9, 9, 5, 6, 7, 8};
  const auto ha = ComputeBlockHashes(a, 4, salt);
  const auto hb = ComputeBlockHashes(b, 4, salt);
  ASSERT_EQ(ha.size(), 2u);
  ASSERT_EQ(hb.size(), 2u);
  EXPECT_NE(ha[1], hb[1]);  // same tokens, different parents
  EXPECT_EQ(ha[1], HashBlock(ha[0], salt, std::span(a).subspan(4, 4)));
  EXPECT_NE(ha[0], ComputeBlockHashes(a, 4, Salt("model-b"))[0]);
  EXPECT_EQ(ha, ComputeBlockHashes(a, 4, salt));  // deterministic
  EXPECT_TRUE(ComputeBlockHashes(a, 16, salt).empty());
  EXPECT_TRUE(ComputeBlockHashes(a, 0, salt).empty());
  // Salt parts are length-prefixed, so moving a byte between parts changes the salt.
  EXPECT_NE(JoinSaltParts({"ab", "c"}), JoinSaltParts({"a", "bc"}));
  EXPECT_EQ(JoinSaltParts({"ab"}).size(), 10u);
}

// Values computed with the engine's hashing before it moved here (kv::MakePrefixSalt of
// {"model", fingerprint, "f16", "16"}, then of {"tenant", "acme"}, and kv::ComputeBlockHashes):
// the keys of blocks already stored in disk/Redis tiers must not change.
constexpr std::string_view kFingerprint = "0123456789abcdef0123456789abcdef";

std::vector<int32_t> PinnedTokens() {
  std::vector<int32_t> t;
  t.reserve(48);
  for (int i = 0; i < 48; ++i) t.push_back(i * 7 - 5);
  return t;
}

TEST(BlockHashTest, PinnedKeysOfTheModelSalt) {
  const auto salt = ModelSalt({kFingerprint, "f16", 16});
  const auto h = ComputeBlockHashes(PinnedTokens(), 16, salt);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(HashToHex(h[0]), "2b82dd083c337ade3c9418f793b2bce0c158c110aeffc3a4252beaa9de68d722");
  EXPECT_EQ(HashToHex(h[1]), "27a3916ce2cfea052e73f3975e3750a3ee19cfea713b9c63fb773ace1fa76b4d");
  EXPECT_EQ(HashToHex(h[2]), "9770a8cb92fce785761d8b76d62fc147bb46e5d812afcc58eb4cfe3702c8bfad");
  // A request without adapter or tenant uses the model salt unchanged.
  EXPECT_EQ(RequestSalt(salt, {}), salt);
}

TEST(BlockHashTest, PinnedKeysWithATenant) {
  const auto model = ModelSalt({kFingerprint, "f16", 16});
  const auto salt = RequestSalt(model, {.adapter = "", .tenant = "acme"});
  EXPECT_EQ(ToHex(salt),
            "05000000000000006d6f64656c200000000000000030313233343536373839616263646566303132333435"
            "36373839616263646566030000000000000066313602000000000000003136060000000000000074656e61"
            "6e74040000000000000061636d65");
  const auto h = ComputeBlockHashes(PinnedTokens(), 16, salt);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(HashToHex(h[0]), "a84888b2761eaeec60f1f2eeec8b4dc640aea3f2bb692bf1aa865e6a6ff7fb4d");
  EXPECT_EQ(HashToHex(h[1]), "3ac27c0770f65b44dab217690fa46c864453766c76200d6d3aa8e8b284ab1e89");
  EXPECT_EQ(HashToHex(h[2]), "fc805a3b3eaa730abd6d25ca8a72b116089809cdd510df87008dadbdcffeaa50");
  // Empty salt, block size 4, a trailing partial block.
  const auto e = ComputeBlockHashes(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, -1}, 4, {});
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(HashToHex(e[0]), "0ef3c9f6ae8968026875ea9128fbaa06aae53945a8da2e5a53a448919dd0a5ca");
  EXPECT_EQ(HashToHex(e[1]), "c2dd1734ecf962e549652e9a2fc917eb27311b227b06761ecae2169d7e3cc555");
}

TEST(BlockHashTest, SaltCompositionSeparatesFacts) {
  const auto model = ModelSalt({kFingerprint, "f16", 16});
  EXPECT_EQ(model, JoinSaltParts({"model", kFingerprint, "f16", "16"}));
  EXPECT_NE(model, ModelSalt({kFingerprint, "q8_0", 16}));
  EXPECT_NE(model, ModelSalt({kFingerprint, "f16", 32}));
  const auto tenant_a = RequestSalt(model, {.adapter = "", .tenant = "a"});
  const auto adapter_a = RequestSalt(model, {.adapter = "a", .tenant = ""});
  EXPECT_NE(tenant_a, adapter_a);  // the same string as a different fact is a different salt
  EXPECT_NE(tenant_a, model);
  const auto both = RequestSalt(model, {.adapter = "lora1", .tenant = "t"});
  std::vector<uint8_t> expect = model;
  for (const auto& part : {JoinSaltParts({"adapter", "lora1"}), JoinSaltParts({"tenant", "t"})})
    expect.insert(expect.end(), part.begin(), part.end());
  EXPECT_EQ(both, expect);
}

}  // namespace
}  // namespace strata::cachekey
