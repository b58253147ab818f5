// PageMemory: alignment, zeroed and writable bytes, moves, refusals, and the huge-page advice.
#include "base/page_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

namespace strata {
namespace {

// The "THPeligible:" value of the mapping holding `p` in /proc/self/smaps (-1 when not found).
int ThpEligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

// The system's THP mode: the bracketed word of /sys/kernel/mm/transparent_hugepage/enabled.
std::string ThpMode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t a = all.find('['), b = all.find(']');
  return a != std::string::npos && b != std::string::npos && b > a ? all.substr(a + 1, b - a - 1)
                                                                   : "";
}

TEST(PageMemoryTest, AlignedZeroedWritable) {
  auto m = PageMemory::Allocate(5'000'000);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE(*m);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m->data()) % PageMemory::kAlign, 0u);
  EXPECT_GE(m->size(), 5'000'000u);
  EXPECT_EQ(m->size() % 4096, 0u);
  for (size_t i = 0; i < m->size(); i += 4096) ASSERT_EQ(m->data()[i], 0) << i;
  m->data()[0] = 1;
  m->data()[m->size() - 1] = 2;
  EXPECT_EQ(m->data()[0] + m->data()[m->size() - 1], 3);
}

TEST(PageMemoryTest, MovesOwnership) {
  auto a = PageMemory::Allocate(4096);
  ASSERT_TRUE(a.ok());
  uint8_t* p = a->data();
  PageMemory b = std::move(*a);
  EXPECT_FALSE(*a);  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_EQ(b.data(), p);
  PageMemory c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
  c.data()[4095] = 7;
  EXPECT_EQ(c.data()[4095], 7);
}

TEST(PageMemoryTest, RefusesZeroAndImpossibleSizes) {
  for (uint64_t bytes : {uint64_t{0}, uint64_t{1} << 63, ~uint64_t{0}}) {
    auto m = PageMemory::Allocate(bytes);
    ASSERT_FALSE(m.ok()) << bytes;
    EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(m.status().message().find(std::to_string(bytes)), std::string::npos)
        << m.status().ToString();
  }
}

// The mapping is advised MADV_HUGEPAGE: the kernel reports it eligible for huge pages whenever THP
// is not off (under "madvise" only advised mappings are).
TEST(PageMemoryTest, AdvisedForHugePages) {
  auto m = PageMemory::Allocate(8u << 20);
  ASSERT_TRUE(m.ok());
  const std::string mode = ThpMode();
  const int eligible = ThpEligible(m->data());
  ASSERT_NE(eligible, -1) << "mapping not found in /proc/self/smaps";
  if (mode == "always" || mode == "madvise") {
    EXPECT_EQ(eligible, 1) << "THP mode " << mode;
  } else {
    EXPECT_EQ(eligible, 0) << "THP mode '" << mode << "'";
  }
}

}  // namespace
}  // namespace strata
