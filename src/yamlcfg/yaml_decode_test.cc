// yamlcfg/yaml_decode: the toolkit's own contract (the config files' tests cover their schemas):
// choice wording, unknown and duplicate keys, sizes, the document's bounds, the field makers.
#include "yamlcfg/yaml_decode.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace strata::yamlcfg {
namespace {

enum class Colour { kRed, kGreen, kBlue };
constexpr EnumEntry<Colour> kColours[] = {
    {"red", Colour::kRed}, {"green", Colour::kGreen}, {"blue", Colour::kBlue}};

std::string ErrorOf(const Status& s) { return s.ok() ? "(ok)" : s.message(); }
template <typename T>
std::string ErrorOf(const Result<T>& r) {
  return ErrorOf(r.status());
}

TEST(YamlDecode, EnumsByNameInEitherWording) {
  auto green = DecodeEnum(YAML::Load("green"), "c", kColours);
  ASSERT_TRUE(green.ok());
  EXPECT_EQ(*green, Colour::kGreen);
  EXPECT_EQ(ErrorOf(DecodeEnum(YAML::Load("pink"), "c", kColours)),
            "c: expected one of red, green, blue (got \"pink\")");
  EXPECT_EQ(ErrorOf(DecodeEnum(YAML::Load("pink"), "c", kColours, Choices::kEither)),
            "c: expected red, green or blue (got \"pink\")");
  // Not a scalar (null included): no value to echo.
  EXPECT_EQ(ErrorOf(DecodeEnum(YAML::Load("[red]"), "c", kColours)),
            "c: expected one of red, green, blue");
  EXPECT_EQ(ErrorOf(DecodeEnum(YAML::Load("~"), "c", kColours)),
            "c: expected one of red, green, blue");
  // A hostile value is echoed cut.
  EXPECT_EQ(ErrorOf(DecodeEnum(YAML::Load(std::string(500, 'x')), "c", kColours)),
            "c: expected one of red, green, blue (got \"" + std::string(80, 'x') + "...\")");
  constexpr std::string_view kNames[] = {"a", "b"};
  auto b = DecodeEnum(YAML::Load("b"), "n", kNames, Choices::kEither);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, "b");
  EXPECT_EQ(ErrorOf(DecodeEnum(YAML::Load("c"), "n", kNames, Choices::kEither)),
            "n: expected a or b (got \"c\")");
  EXPECT_EQ(EnumName(Colour::kBlue, kColours), "blue");
  EXPECT_EQ(EnumName(static_cast<Colour>(9), kColours, "none"), "none");
}

struct Inner {
  int64_t n = 0;
  Colour colour = Colour::kRed;
};
struct Outer {
  std::string name;
  Inner inner;
  std::optional<Inner> maybe;
  std::vector<Inner> list;
  std::chrono::milliseconds wait{0};
  std::chrono::milliseconds timeout{0};
};
// The tables, as every config writes them (a function per table, so tables may name each other).
const Fields<Inner>& InnerFields() {
  static const Fields<Inner> kFields = {Int<Inner>("n", &Inner::n, 0, 9),
                                        Enum<Inner>("colour", &Inner::colour, kColours)};
  return kFields;
}
const Fields<Outer>& OuterFields() {
  static const Fields<Outer> kFields = {
      Sub("inner", &Outer::inner, InnerFields),
      OptSub("maybe", &Outer::maybe, InnerFields),
      SubList("list", &Outer::list, InnerFields),
      Duration<std::chrono::seconds, Outer>("wait_s", &Outer::wait, 0, 60),
      Seconds<Outer>("timeout_s", &Outer::timeout, 0, 60),
      Str<Outer>("name", &Outer::name),
  };
  return kFields;
}

Status Decode(const std::string& yaml, Outer* out) {
  return DecodeSection(OuterFields(), YAML::Load(yaml), "", out);
}

TEST(YamlDecode, SectionsRefuseUnknownAndDuplicateKeys) {
  Outer o;
  ASSERT_TRUE(Decode("{name: x, inner: {n: 3, colour: blue}, maybe: {}, list: [{n: 1}, {n: 2}], "
                     "wait_s: 2, timeout_s: 0.25}",
                     &o)
                  .ok());
  EXPECT_EQ(o.name, "x");
  EXPECT_EQ(o.inner.n, 3);
  EXPECT_EQ(o.inner.colour, Colour::kBlue);
  ASSERT_TRUE(o.maybe.has_value());  // present, even empty: set
  EXPECT_EQ(o.list.size(), 2u);
  EXPECT_EQ(o.wait, std::chrono::seconds(2));
  EXPECT_EQ(o.timeout, std::chrono::milliseconds(250));
  Outer d;
  EXPECT_EQ(ErrorOf(Decode("{name: x, name: y}", &d)), "name: duplicate key");
  EXPECT_EQ(ErrorOf(Decode("{inner: {n: 1, n: 2}}", &d)), "inner.n: duplicate key");
  EXPECT_EQ(ErrorOf(Decode("{list: [{n: 1}, {colour: red, colour: red}]}", &d)),
            "list[1].colour: duplicate key");
  EXPECT_EQ(ErrorOf(Decode("{inner: {colur: red}}", &d)),
            "inner.colur: unknown key (did you mean colour?)");
  EXPECT_EQ(ErrorOf(Decode("{[a]: 1}", &d)), "(top level): keys must be strings");
  EXPECT_EQ(ErrorOf(Decode("[1]", &d)), "(top level): expected a mapping");
  EXPECT_EQ(ErrorOf(Decode("{inner: {n: 10}}", &d)), "inner.n: must be in [0, 9], got 10");
  EXPECT_EQ(ErrorOf(Decode("{timeout_s: 0}", &d)), "timeout_s: must be in (0, 60], got 0");
  EXPECT_EQ(ErrorOf(Decode("{list: {n: 1}}", &d)), "list: expected a list");
  EXPECT_TRUE(Decode("~", &d).ok());  // null: nothing set
}

TEST(YamlDecode, PairsAndSizes) {
  auto pairs = DecodeStringPairs(YAML::Load("{b: x, a: ~}"), "p");
  ASSERT_TRUE(pairs.ok());
  EXPECT_EQ(*pairs, (std::vector<std::pair<std::string, std::string>>{{"b", "x"}, {"a", ""}}));
  EXPECT_EQ(ErrorOf(DecodeStringPairs(YAML::Load("{a: x, a: y}"), "p")), "p.a: duplicate key");
  EXPECT_EQ(ErrorOf(DecodeStringPairs(YAML::Load("[a]"), "p")),
            "p: expected a mapping of name: value");
  auto sizes =
      DecodePairs<uint64_t>(YAML::Load("{t: 2GiB, u: 0}"), "q", "tenant: size", DecodeSize);
  ASSERT_TRUE(sizes.ok());
  EXPECT_EQ((*sizes)[0].second, 2ull << 30);
  EXPECT_EQ((*sizes)[1].second, 0u);
  EXPECT_EQ(ErrorOf(DecodeSize(YAML::Load("[1]"), "s")), "s: expected a size such as 2GiB");
  EXPECT_EQ(ErrorOf(DecodeSize(YAML::Load("lots"), "s")).rfind("s: memory size 'lots'", 0), 0u);
}

TEST(YamlDecode, DocumentsWithinTheirBounds) {
  auto count = [](const YAML::Node& root) {
    return root.IsMap() ? Status::Ok() : Bad("", "expected a mapping");
  };
  constexpr DocumentKind kPlain{.max_bytes = 16};
  constexpr DocumentKind kNamed{.name = "thing", .max_bytes = 1024, .max_bytes_text = "1 KiB"};
  EXPECT_TRUE(DecodeDocument("a: 1", kPlain, count).ok());
  EXPECT_EQ(ErrorOf(DecodeDocument(std::string(17, ' '), kPlain, count)), "larger than 16 bytes");
  EXPECT_EQ(ErrorOf(DecodeDocument(std::string(1025, ' '), kNamed, count)),
            "thing: larger than 1 KiB");
  EXPECT_EQ(ErrorOf(DecodeDocument("a: [", kNamed, count)).rfind("YAML error: ", 0), 0u);
  // A throw inside the decode is caught too.
  EXPECT_EQ(ErrorOf(DecodeDocument("a: 1", kNamed,
                                   [](const YAML::Node& root) {
                                     (void)root["a"].as<std::vector<int>>();  // throws
                                     return Status::Ok();
                                   }))
                .rfind("YAML error: ", 0),
            0u);
  // The node budget counts every alias use.
  constexpr DocumentKind kBudget{.max_bytes = 4096, .max_nodes = 1000, .max_depth = 8};
  std::string laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'e'; ++c) {
    laughs += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) laughs += std::string(i ? ", *" : "*") + static_cast<char>(c - 1);
    laughs += "]\n";
  }
  EXPECT_TRUE(DecodeDocument(laughs, kNamed, count).ok());  // no budget: not walked
  EXPECT_NE(ErrorOf(DecodeDocument(laughs, kBudget, count)).find("too large or too deep"),
            std::string::npos);
}

TEST(YamlDecode, FilesWithinTheirBounds) {
  constexpr DocumentKind kNamed{.name = "thing", .max_bytes = 8};
  auto missing = ReadDocumentFile("/nonexistent/x.yaml", kNamed);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "cannot open thing /nonexistent/x.yaml");
  EXPECT_EQ(
      ReadDocumentFile("/nonexistent/x.yaml", DocumentKind{.max_bytes = 8}).status().message(),
      "cannot open /nonexistent/x.yaml");
  const std::string path = ::testing::TempDir() + "/yaml_decode_test.yaml";
  std::ofstream(path) << "a: 1\n";
  auto small = ReadDocumentFile(path, kNamed);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(*small, "a: 1\n");
  std::ofstream(path) << "a: 123456789\n";
  EXPECT_EQ(ErrorOf(ReadDocumentFile(path, kNamed)), path + ": larger than 8 bytes");
}

}  // namespace
}  // namespace strata::yamlcfg
