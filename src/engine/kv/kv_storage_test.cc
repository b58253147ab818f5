#include "engine/kv/kv_storage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tensor/fp16.h"

namespace strata::engine::kv {
namespace {

KvLayout SmallLayout(KvDType dtype) {
  KvLayout l;
  l.n_layers = 3;
  l.kv_dim = 64;
  l.block_size = 4;
  l.num_blocks = 5;
  l.dtype = dtype;
  return l;
}

std::vector<float> RandomRow(std::mt19937* rng, int n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(*rng);
  return v;
}

TEST(KvDTypeTest, NamesRoundTrip) {
  for (KvDType t : {KvDType::kF16, KvDType::kF32, KvDType::kQ8_0}) {
    auto parsed = ParseKvDType(KvDTypeName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_EQ(KvDTypeName(KvDType::kQ8_0), "q8_0");
  EXPECT_TRUE(ParseKvDType("F16").ok());
  auto bad = ParseKvDType("q4_0");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("q4_0"), std::string::npos);
}

TEST(KvLayoutTest, RowBytesFollowFormats) {
  KvLayout l = SmallLayout(KvDType::kF16);
  EXPECT_EQ(l.RowBytes(), 128u);  // 2 bytes per half
  l.dtype = KvDType::kF32;
  EXPECT_EQ(l.RowBytes(), 256u);
  l.dtype = KvDType::kQ8_0;
  EXPECT_EQ(l.RowBytes(), 68u);  // 2 blocks of (f16 scale + 32 int8)
  // K and V, 3 layers, 4 slots.
  EXPECT_EQ(l.BlockBytes(), 68u * 4 * 2 * 3);
  EXPECT_EQ(l.BlockBytesChecked(), l.BlockBytes());
  EXPECT_EQ(l.TotalBytes(), l.BlockBytes() * 5);
}

TEST(KvLayoutTest, ValidateRefusesBadLayouts) {
  EXPECT_TRUE(SmallLayout(KvDType::kF16).Validate().ok());
  EXPECT_TRUE(SmallLayout(KvDType::kQ8_0).Validate().ok());
  auto refuse = [](KvLayout l, const char* word) {
    Status s = l.Validate();
    EXPECT_FALSE(s.ok()) << word;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(word), std::string::npos) << s.message();
  };
  KvLayout l = SmallLayout(KvDType::kF16);
  l.n_layers = 0;
  refuse(l, "n_layers");
  l = SmallLayout(KvDType::kF16);
  l.kv_dim = -64;
  refuse(l, "kv_dim");
  l = SmallLayout(KvDType::kF16);
  l.block_size = 0;
  refuse(l, "block_size");
  l = SmallLayout(KvDType::kF16);
  l.num_blocks = 0;
  refuse(l, "num_blocks");
  l = SmallLayout(KvDType::kQ8_0);
  l.kv_dim = 48;
  refuse(l, "multiple of 32");
  l = SmallLayout(KvDType::kF16);
  l.kv_dim = 48;  // fine for f16
  EXPECT_TRUE(l.Validate().ok());
  // Overflowing totals.
  l = SmallLayout(KvDType::kF32);
  l.n_layers = INT_MAX;
  l.kv_dim = INT_MAX;
  l.block_size = INT_MAX;
  refuse(l, "overflow");
  l = SmallLayout(KvDType::kF32);
  l.kv_dim = 1 << 30;
  l.block_size = 1 << 20;
  l.num_blocks = INT_MAX;
  refuse(l, "overflow");
  EXPECT_EQ(l.TotalBytes(), 0u);
}

TEST(KvLayoutTest, NumBlocksForBudget) {
  KvLayout l;
  l.n_layers = 2;
  l.kv_dim = 64;
  l.block_size = 16;
  l.dtype = KvDType::kF16;
  // 128 bytes/row * 16 slots * (K + V) * 2 layers = 8 KiB per block.
  ASSERT_EQ(l.BlockBytesChecked(), 8192u);
  EXPECT_EQ(NumBlocksForBudget(l, 1 << 20), 128);
  EXPECT_EQ(NumBlocksForBudget(l, 8191), 0);
  EXPECT_EQ(NumBlocksForBudget(l, 8192 * 3 + 5), 3);
  EXPECT_EQ(NumBlocksForBudget(l, UINT64_MAX), INT32_MAX);
  l.kv_dim = 0;
  EXPECT_EQ(NumBlocksForBudget(l, 1 << 20), 0);
}

TEST(KvStorageTest, CreateValidatesAndReportsAllocationFailure) {
  KvLayout bad = SmallLayout(KvDType::kQ8_0);
  bad.kv_dim = 40;
  auto r = KvStorage::Create(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  // Valid layout but 2 x 2^50 bytes: more than this machine's RAM (refused before allocating).
  KvLayout huge;
  huge.n_layers = 1;
  huge.kv_dim = 1 << 20;      // 4 MiB rows (f32)
  huge.block_size = 1 << 8;   // 1 GiB per block and array
  huge.num_blocks = 1 << 20;  // 2^50 bytes per array
  huge.dtype = KvDType::kF32;
  ASSERT_TRUE(huge.Validate().ok());
  auto h = KvStorage::Create(huge);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kResourceExhausted);
}

TEST(KvStorageTest, StartsZeroed) {
  auto st = KvStorage::Create(SmallLayout(KvDType::kF32));
  ASSERT_TRUE(st.ok());
  std::vector<float> out(64, 1.0f);
  (*st)->ReadV(2, 4, 3, out.data());
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

// Fills every (layer, block, slot) of K and V with distinct data, then reads all of it back:
// checks both the per-dtype error bound and that no two rows overlap.
void RoundTrip(KvDType dtype) {
  const KvLayout layout = SmallLayout(dtype);
  auto created = KvStorage::Create(layout);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  KvStorage& st = **created;
  std::mt19937 rng(42);
  struct Row {
    std::vector<float> k, v;
  };
  std::vector<Row> rows;
  for (int l = 0; l < layout.n_layers; ++l) {
    for (int b = 0; b < layout.num_blocks; ++b) {
      for (int s = 0; s < layout.block_size; ++s) {
        const float scale = 0.01f + static_cast<float>(rows.size());  // distinct magnitudes
        Row r{RandomRow(&rng, layout.kv_dim, scale), RandomRow(&rng, layout.kv_dim, scale)};
        st.Write(l, b, s, r.k.data(), r.v.data());
        rows.push_back(std::move(r));
      }
    }
  }
  size_t index = 0;
  std::vector<float> k(static_cast<size_t>(layout.kv_dim)), v(k.size());
  for (int l = 0; l < layout.n_layers; ++l) {
    for (int b = 0; b < layout.num_blocks; ++b) {
      for (int s = 0; s < layout.block_size; ++s, ++index) {
        st.ReadK(l, b, s, k.data());
        st.ReadV(l, b, s, v.data());
        for (int which = 0; which < 2; ++which) {
          const std::vector<float>& want = which ? rows[index].v : rows[index].k;
          const std::vector<float>& got = which ? v : k;
          for (size_t i = 0; i < want.size(); ++i) {
            float bound = 0.0f;
            if (dtype == KvDType::kF16) {
              // 11-bit mantissa: rel. error <= 2^-11; below 2^-14 the subnormal spacing is 2^-24.
              bound = std::max(1e-3f * std::fabs(want[i]), 0x1p-25f);
            } else if (dtype == KvDType::kQ8_0) {
              const size_t start = i / 32 * 32;
              float amax = 0.0f;
              for (size_t j = start; j < start + 32; ++j) amax = std::max(amax, std::fabs(want[j]));
              // Rounding to the nearest multiple of d = amax/127 gives amax/254; storing d in f16
              // adds at most 127 * d * 2^-11 = amax * 2^-11.
              bound = amax / 254.0f + amax / 2048.0f;
            }
            ASSERT_LE(std::fabs(got[i] - want[i]), bound)
                << KvDTypeName(dtype) << " layer " << l << " block " << b << " slot " << s
                << (which ? " V" : " K") << " elem " << i;
          }
        }
      }
    }
  }
}

TEST(KvStorageTest, RoundTripF32IsExact) { RoundTrip(KvDType::kF32); }
TEST(KvStorageTest, RoundTripF16) { RoundTrip(KvDType::kF16); }
TEST(KvStorageTest, RoundTripQ8_0) { RoundTrip(KvDType::kQ8_0); }

TEST(KvStorageTest, EncodedBytesFollowFormats) {
  // F16: IEEE half bit patterns, little-endian.
  KvLayout l = SmallLayout(KvDType::kF16);
  auto st = KvStorage::Create(l);
  ASSERT_TRUE(st.ok());
  std::vector<float> k(64, 0.0f), v(64, 0.0f);
  k[0] = 1.0f;
  k[1] = -2.0f;
  k[2] = 0.5f;
  (*st)->Write(1, 2, 3, k.data(), v.data());
  const uint8_t* p = (*st)->K(1, 2, 3);
  EXPECT_EQ(p[0] | (p[1] << 8), 0x3C00);
  EXPECT_EQ(p[2] | (p[3] << 8), 0xC000);
  EXPECT_EQ(p[4] | (p[5] << 8), 0x3800);
  // Rows of a block are RowBytes() apart, blocks block_size rows apart, layers num_blocks blocks.
  EXPECT_EQ((*st)->K(1, 2, 3) - (*st)->K(1, 2, 0), static_cast<ptrdiff_t>(3 * l.RowBytes()));
  EXPECT_EQ((*st)->K(1, 3, 0) - (*st)->K(1, 2, 0), static_cast<ptrdiff_t>(4 * l.RowBytes()));
  EXPECT_EQ((*st)->K(2, 0, 0) - (*st)->K(1, 0, 0), static_cast<ptrdiff_t>(20 * l.RowBytes()));

  // Q8_0: per 32 values, d = f16(amax / 127), q = round(x / d), computed here independently.
  l = SmallLayout(KvDType::kQ8_0);
  auto q = KvStorage::Create(l);
  ASSERT_TRUE(q.ok());
  std::mt19937 rng(7);
  k = RandomRow(&rng, 64, 3.0f);
  v = RandomRow(&rng, 64, 0.1f);
  (*q)->Write(0, 4, 1, k.data(), v.data());
  for (int half = 0; half < 2; ++half) {
    const uint8_t* blk = (*q)->K(0, 4, 1) + 34 * half;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(k[32 * half + j]));
    const uint16_t d = static_cast<uint16_t>(blk[0] | (blk[1] << 8));
    EXPECT_EQ(d, F32ToF16(amax / 127.0f));
    for (int j = 0; j < 32; ++j) {
      const float exact = k[32 * half + j] * 127.0f / amax;
      const int8_t got = static_cast<int8_t>(blk[2 + j]);
      EXPECT_LE(std::fabs(got - exact), 0.5f + 1e-4f) << j;
    }
  }
}

// F16 rows (hardware conversion where the CPU has it) round every finite value to the nearest half,
// ties to even, overflow to infinity, tiny values to signed zero or subnormals -- checked against
// the exact rounding computed here in double precision.
TEST(KvStorageTest, F16EncodingRoundsToNearestEven) {
  std::mt19937 rng(11);
  std::vector<float> src;
  for (int e = -30; e <= 17; ++e)
    for (int i = 0; i < 40; ++i) {
      const float m = 1.0f + static_cast<float>(rng() % 4096) / 4096.0f +
                      static_cast<float>(rng() % 3) * 0x1p-12f;
      src.push_back(std::ldexp(m, e) * (rng() % 2 ? 1.0f : -1.0f));
    }
  for (float x :
       {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, 1e30f, -1e30f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f,
        0x1p-26f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, std::numeric_limits<float>::infinity()})
    src.push_back(x);
  while (src.size() % 8 != 3) src.push_back(0.25f);  // a scalar tail after the vector part
  std::vector<uint8_t> dst(2 * src.size());
  KvStorage::EncodeRow(KvDType::kF16, src.data(), dst.data(), static_cast<int>(src.size()));
  for (size_t i = 0; i < src.size(); ++i) {
    const uint16_t got = static_cast<uint16_t>(dst[2 * i] | (dst[2 * i + 1] << 8));
    // Exact: the nearest half by enumeration of the two neighbours of |x| (ties: even mantissa).
    const double ax = std::fabs(static_cast<double>(src[i]));
    uint16_t want;
    if (ax >= 65520.0) {
      want = 0x7C00;
    } else {
      uint16_t lo = 0;
      auto value = [](uint16_t h) {
        const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
        return e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
      };
      uint16_t top = 0x7BFF;  // largest finite half; binary search for the last half <= |x|
      while (lo < top) {
        const uint16_t mid = static_cast<uint16_t>((lo + top + 1) / 2);
        if (value(mid) <= ax) {
          lo = mid;
        } else {
          top = static_cast<uint16_t>(mid - 1);
        }
      }
      const uint16_t hi = static_cast<uint16_t>(lo + 1);
      const double dl = ax - value(lo), dh = value(hi) - ax;
      want = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
    }
    if (std::signbit(src[i])) want |= 0x8000;
    ASSERT_EQ(got, want) << "x = " << src[i];
  }
}

TEST(KvStorageTest, CopyBlockCopiesRequestedSlotsOfEveryLayer) {
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kQ8_0}) {
    const KvLayout l = SmallLayout(dtype);
    auto created = KvStorage::Create(l);
    ASSERT_TRUE(created.ok());
    KvStorage& st = **created;
    std::mt19937 rng(3);
    for (int layer = 0; layer < l.n_layers; ++layer) {
      for (int b = 0; b < l.num_blocks; ++b) {
        for (int s = 0; s < l.block_size; ++s) {
          auto k = RandomRow(&rng, l.kv_dim, 1.0f);
          auto v = RandomRow(&rng, l.kv_dim, 1.0f);
          st.Write(layer, b, s, k.data(), v.data());
        }
      }
    }
    // Snapshot raw bytes of everything.
    auto snapshot = [&](int layer, int b, int s, bool is_v) {
      const uint8_t* p = is_v ? st.V(layer, b, s) : st.K(layer, b, s);
      return std::vector<uint8_t>(p, p + l.RowBytes());
    };
    std::vector<std::vector<uint8_t>> before;
    for (int layer = 0; layer < l.n_layers; ++layer)
      for (int b = 0; b < l.num_blocks; ++b)
        for (int s = 0; s < l.block_size; ++s)
          for (int is_v = 0; is_v < 2; ++is_v) before.push_back(snapshot(layer, b, s, is_v));
    st.CopyBlock(1, 3, 3);
    size_t i = 0;
    for (int layer = 0; layer < l.n_layers; ++layer) {
      for (int b = 0; b < l.num_blocks; ++b) {
        for (int s = 0; s < l.block_size; ++s) {
          for (int is_v = 0; is_v < 2; ++is_v, ++i) {
            std::vector<uint8_t> want = before[i];
            if (b == 3 && s < 3) {
              // index of (layer, block 1, slot s, is_v)
              const size_t src = ((static_cast<size_t>(layer) * l.num_blocks + 1) * l.block_size +
                                  static_cast<size_t>(s)) *
                                     2 +
                                 static_cast<size_t>(is_v);
              want = before[src];
            }
            EXPECT_EQ(snapshot(layer, b, s, is_v), want)
                << KvDTypeName(dtype) << " layer " << layer << " block " << b << " slot " << s;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata::engine::kv
