// base/ascii.h: only ASCII letters change case; other bytes (UTF-8 included) stay as they are.
#include "base/ascii.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace strata {
namespace {

TEST(AsciiTest, CharCaseChangesLettersOnly) {
  for (int i = 0; i < 256; ++i) {
    const char c = static_cast<char>(i);
    const bool upper = c >= 'A' && c <= 'Z', lower = c >= 'a' && c <= 'z';
    EXPECT_EQ(AsciiLower(c), upper ? static_cast<char>(c + 32) : c) << i;
    EXPECT_EQ(AsciiUpper(c), lower ? static_cast<char>(c - 32) : c) << i;
  }
}

TEST(AsciiTest, StringCase) {
  EXPECT_EQ(AsciiStrToLower("Content-Type: GiB \xC3\x89t\xC3\xA9"),
            "content-type: gib \xC3\x89t\xC3\xA9");
  EXPECT_EQ(AsciiStrToUpper("q8_0 [x]@`{"), "Q8_0 [X]@`{");
  std::string s = "MiXeD";
  AsciiStrToLower(&s);
  EXPECT_EQ(s, "mixed");
  EXPECT_EQ(AsciiStrToLower(""), "");
}

TEST(AsciiTest, EqualsIgnoreCase) {
  static_assert(EqualsIgnoreCase("GiB", "gib"));
  struct Case {
    std::string_view a, b;
    bool equal;
  };
  // '@' / '`' (0x40 / 0x60) differ by 32 but are not letters; É / é are not ASCII.
  const Case cases[] = {
      {"Q8_0", "q8_0", true}, {"", "", true},    {"f16", "f1", false},
      {"f16", "f32", false},  {"@", "`", false}, {"\xC3\x89", "\xC3\xA9", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(EqualsIgnoreCase(c.a, c.b), c.equal) << c.a << " / " << c.b;
    EXPECT_EQ(EqualsIgnoreCase(c.b, c.a), c.equal) << c.b << " / " << c.a;
  }
}

}  // namespace
}  // namespace strata
