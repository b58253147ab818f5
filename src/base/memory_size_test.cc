// ParseMemorySize / FormatMemorySize (moved here from engine/kv with ParseMemorySize).
#include "base/memory_size.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(ParseMemorySizeTest, UnitsAndFractions) {
  const uint64_t ram = 1000000;
  auto ok = [&](std::string_view s) -> uint64_t {
    auto r = ParseMemorySize(s, ram);
    EXPECT_TRUE(r.ok()) << s << ": " << r.status().ToString();
    return r.ok() ? *r : 0;
  };
  EXPECT_EQ(ok("4GiB"), 4ull << 30);
  EXPECT_EQ(ok("512MiB"), 512ull << 20);
  EXPECT_EQ(ok("64kib"), 64ull << 10);
  EXPECT_EQ(ok("1TiB"), 1ull << 40);
  EXPECT_EQ(ok("1.5GiB"), 3ull << 29);
  EXPECT_EQ(ok("2G"), 2ull << 30);
  EXPECT_EQ(ok("4GB"), 4000000000ull);
  EXPECT_EQ(ok("500MB"), 500000000ull);
  EXPECT_EQ(ok("1048576B"), 1048576ull);
  EXPECT_EQ(ok(" 2 GiB "), 2ull << 30);
  EXPECT_EQ(ok("0.5"), 500000u);
  EXPECT_EQ(ok(".25"), 250000u);
  EXPECT_EQ(ok("1"), ram);
  EXPECT_EQ(ok("50%"), 500000u);
  EXPECT_EQ(ok("100%"), ram);
  for (std::string_view bad :
       {"", "GiB", "0", "0GiB", "-1GiB", "-0.5", "100", "1.5", "101%", "0%", "4XB", "1e3GiB", "nan",
        "inf", "0x10MiB", "1..5GiB", "100000000TiB", "0.1B", "4 GiB extra"}) {
    auto r = ParseMemorySize(bad, ram);
    EXPECT_FALSE(r.ok()) << "'" << bad << "' parsed as " << (r.ok() ? *r : 0);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
  // Unknown physical memory: fractions are refused, absolute sizes still work.
  EXPECT_FALSE(ParseMemorySize("0.5", 0).ok());
  EXPECT_TRUE(ParseMemorySize("1GiB", 0).ok());
  // The real machine has some RAM.
  EXPECT_GT(PhysicalMemoryBytes(), 0u);
  auto half = ParseMemorySize("0.5");
  ASSERT_TRUE(half.ok());
  EXPECT_NEAR(static_cast<double>(*half), PhysicalMemoryBytes() / 2.0, 1.0);
}

TEST(FormatMemorySizeTest, ReadsBackExactly) {
  EXPECT_EQ(FormatMemorySize(2ull << 30), "2GiB");
  EXPECT_EQ(FormatMemorySize(1536ull << 20), "1536MiB");
  EXPECT_EQ(FormatMemorySize(1ull << 40), "1TiB");
  EXPECT_EQ(FormatMemorySize(1000), "1000B");
  EXPECT_EQ(FormatMemorySize(4096), "4KiB");
  EXPECT_EQ(FormatMemorySize(0), "0B");
  for (uint64_t v : {1ull, 1000ull, 4096ull, 3ull << 29, 50ull << 30, (1ull << 50) + 1}) {
    auto r = ParseMemorySize(FormatMemorySize(v), 0);
    ASSERT_TRUE(r.ok()) << v << ": " << r.status().ToString();
    EXPECT_EQ(*r, v);
  }
}

}  // namespace
}  // namespace strata
