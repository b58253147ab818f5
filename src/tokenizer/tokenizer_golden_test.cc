// Encode test vectors for every vocabulary in ../shared/vocab (llama.cpp's vectors, generated
// with the Hugging Face tokenizers): exact ids, and decode(encode(x)) == x.
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "testing/shared_dir.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> ParseInputs(const std::string& data) {
  static const std::string kSep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < data.size()) {
    const size_t m = data.find(kSep, pos);
    if (m == std::string::npos) break;
    out.push_back(data.substr(pos, m - pos));
    pos = m + kSep.size();
  }
  return out;
}

std::vector<std::vector<int32_t>> ParseOutputs(const std::string& data) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream lines(data);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    int64_t id;
    while (ls >> id) ids.push_back(static_cast<int32_t>(id));
    out.push_back(std::move(ids));
  }
  return out;
}

class GoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenTest, EncodeMatchesVectorsAndRoundTrips) {
  const std::string name = GetParam();
  STRATA_REQUIRE_SHARED(gguf_path, "vocab/" + name + ".gguf");
  STRATA_REQUIRE_SHARED(inp_path, "golden/tokenizer/" + name + ".inp");
  STRATA_REQUIRE_SHARED(out_path, "golden/tokenizer/" + name + ".out");

  auto file = gguf::GgufFile::Open(gguf_path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto vocab = VocabFromGguf(**file);
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  auto tok = Tokenizer::Create(std::move(*vocab));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();

  const auto inputs = ParseInputs(ReadAll(inp_path));
  const auto expected = ParseOutputs(ReadAll(out_path));
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(expected.size(), inputs.size());
  int failures = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto ids = (*tok)->Encode(inputs[i], /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, expected[i]) << name << " case " << i << ": '" << inputs[i] << "'";
    if (ids != expected[i]) ++failures;
    EXPECT_EQ((*tok)->Decode(ids), inputs[i]) << name << " case " << i;
  }
  EXPECT_EQ(failures, 0);

  // Lossless round trip on random input: arbitrary bytes (including invalid UTF-8) for
  // byte-level BPE; for SentencePiece, printable ASCII plus a few multi-byte characters (it
  // maps U+2581 in the input to a space, so arbitrary text is not lossless there).
  const bool bpe = (*tok)->vocab().kind == Vocab::Kind::kBpe;
  std::mt19937 rng(1234);
  for (int round = 0; round < 20; ++round) {
    std::string text;
    const int n = static_cast<int>(rng() % 300);
    for (int k = 0; k < n; ++k) {
      if (bpe) {
        text.push_back(static_cast<char>(rng() % 256));
      } else {
        static const char* kExtra[] = {"\xC3\xA9", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80", "\n", "  "};
        if (rng() % 8 == 0) {
          text += kExtra[rng() % 5];
        } else {
          text.push_back(static_cast<char>(32 + rng() % 95));
        }
      }
    }
    // deepseek-coder has no byte tokens for the 13 bytes that never occur in valid UTF-8
    // (0xC0, 0xC1, 0xF5..0xFF): its vocabulary spells them as user-defined text tokens.
    if (name == "deepseek-coder-vocab") text = internal::SanitizeUtf8(text);
    const auto ids = (*tok)->Encode(text, false, false);
    ASSERT_EQ((*tok)->Decode(ids), text) << name << " random round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, GoldenTest,
                         ::testing::Values("llama3-vocab", "qwen2-vocab", "gpt-2-vocab",
                                           "deepseek-coder-vocab", "llama-spm-vocab",
                                           "phi-3-vocab"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace strata::tokenizer
