// Unit tests: special tokens, BOS/EOS, EOG ids, decoding, incremental decoding, the SentencePiece
// model parser, hostile metadata, and the built-in byte vocabulary.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "testing/shared_dir.h"

namespace strata::tokenizer {
namespace {

std::unique_ptr<Tokenizer> LoadGguf(const std::string& path) {
  auto file = gguf::GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return nullptr;
  auto vocab = VocabFromGguf(**file);
  EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
  if (!vocab.ok()) return nullptr;
  auto tok = Tokenizer::Create(std::move(*vocab));
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return tok.ok() ? std::move(*tok) : nullptr;
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

using Ids = std::vector<int32_t>;

// ---- Llama 3 (byte-level BPE) --------------------------------------------------------------

TEST(Llama3, SpecialTokensParsedOnlyWhenAsked) {
  STRATA_REQUIRE_SHARED(path, "vocab/llama3-vocab.gguf");
  auto tok = LoadGguf(path);
  ASSERT_NE(tok, nullptr);
  // Facts from the vocabulary README: <|begin_of_text|> 128000, <|eot_id|> 128009,
  // "Hello" -> 9906, " Hello" -> 22691.
  EXPECT_EQ(tok->Encode("Hello<|eot_id|>", false, true), (Ids{9906, 128009}));
  const Ids plain = tok->Encode("Hello<|eot_id|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 128009), 0);
  EXPECT_GT(plain.size(), 2u);
  EXPECT_EQ(tok->Decode(plain), "Hello<|eot_id|>");
  // Longest special first, text after a special token is ordinary text.
  EXPECT_EQ(tok->Encode("<|begin_of_text|> Hello", false, true), (Ids{128000, 22691}));
}

TEST(Llama3, AddsBosAndDetectsEog) {
  STRATA_REQUIRE_SHARED(path, "vocab/llama3-vocab.gguf");
  auto tok = LoadGguf(path);
  ASSERT_NE(tok, nullptr);
  EXPECT_TRUE(tok->vocab().add_bos);
  EXPECT_EQ(tok->Encode("Hello", true, false), (Ids{128000, 9906}));
  EXPECT_EQ(tok->Encode("Hello", false, false), (Ids{9906}));
  EXPECT_EQ(tok->Encode("", true, false), (Ids{128000}));
  EXPECT_TRUE(tok->IsEog(128001));
  EXPECT_TRUE(tok->IsEog(128008));
  EXPECT_TRUE(tok->IsEog(128009));
  EXPECT_FALSE(tok->IsEog(128000));
  EXPECT_FALSE(tok->IsEog(9906));
  EXPECT_FALSE(tok->IsEog(-1));
  EXPECT_EQ(tok->eog_ids(), (Ids{128001, 128008, 128009}));
  // Control tokens render only with special = true.
  EXPECT_EQ(tok->TokenToPiece(128009), "");
  EXPECT_EQ(tok->TokenToPiece(128009, true), "<|eot_id|>");
  EXPECT_EQ(tok->Decode(Ids{128000, 9906}, false), "Hello");
  EXPECT_EQ(tok->Decode(Ids{128000, 9906}, true), "<|begin_of_text|>Hello");
  EXPECT_EQ(tok->TokenToPiece(22691), " Hello");
  EXPECT_EQ(tok->TokenToPiece(-5), "");
  EXPECT_EQ(tok->TokenToPiece(1 << 30), "");
}

TEST(Llama3, IncrementalDecoderHoldsBackSplitEmoji) {
  STRATA_REQUIRE_SHARED(path, "vocab/llama3-vocab.gguf");
  auto tok = LoadGguf(path);
  ASSERT_NE(tok, nullptr);
  // Find single-byte tokens for the four bytes of U+1F600 (F0 9F 98 80): in a byte-level vocab
  // each byte is a token spelled with the GPT-2 byte map.
  const std::string emoji = "\xF0\x9F\x98\x80";
  Ids bytes;
  for (char c : emoji) {
    const Ids ids = tok->Encode(std::string(1, c), false, false);
    ASSERT_EQ(ids.size(), 1u);
    bytes.push_back(ids[0]);
  }
  IncrementalDecoder dec(*tok);
  std::string out = dec.Push(9906);  // "Hello"
  EXPECT_EQ(out, "Hello");
  EXPECT_EQ(dec.Push(bytes[0]), "");
  EXPECT_EQ(dec.Push(bytes[1]), "");
  EXPECT_EQ(dec.Push(bytes[2]), "");
  EXPECT_EQ(dec.Push(bytes[3]), emoji);
  EXPECT_EQ(dec.Flush(), "");
  // A truncated sequence followed by ASCII: the broken bytes become one U+FFFD.
  EXPECT_EQ(dec.Push(bytes[0]), "");
  EXPECT_EQ(dec.Push(bytes[1]), "");
  EXPECT_EQ(dec.Push(9906), "\xEF\xBF\xBDHello");
  // Unfinished at the end of the stream.
  EXPECT_EQ(dec.Push(bytes[0]), "");
  EXPECT_EQ(dec.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.Flush(), "");
  // A lone continuation byte is invalid immediately.
  EXPECT_EQ(dec.Push(bytes[3]), "\xEF\xBF\xBD");
}

// ---- Qwen2 / GPT-2 ---------------------------------------------------------------------------

TEST(Qwen2, NoBosAndEogFromTokenText) {
  STRATA_REQUIRE_SHARED(path, "vocab/qwen2-vocab.gguf");
  auto tok = LoadGguf(path);
  ASSERT_NE(tok, nullptr);
  EXPECT_FALSE(tok->vocab().add_bos);
  EXPECT_EQ(tok->Encode("Hello", true, false), tok->Encode("Hello", false, false));
  // README: llama.cpp's EOG set for this vocab is {128247, 151643, 151645}.
  EXPECT_EQ(tok->eog_ids(), (Ids{128247, 151643, 151645}));
  EXPECT_EQ(tok->Encode("<|im_start|>", false, true), (Ids{151644}));
  // Unused [PAD] rows are never parsed as special tokens and render as nothing.
  EXPECT_EQ(tok->TokenToPiece(151700, true), "");
}

TEST(Gpt2, AddBosNotSet) {
  STRATA_REQUIRE_SHARED(path, "vocab/gpt-2-vocab.gguf");
  auto tok = LoadGguf(path);
  ASSERT_NE(tok, nullptr);
  EXPECT_FALSE(tok->vocab().add_bos);
  EXPECT_EQ(tok->bos(), 50256);
  EXPECT_TRUE(tok->IsEog(50256));
  EXPECT_EQ(tok->Encode("<|endoftext|>", false, true), (Ids{50256}));
}

// ---- SentencePiece ---------------------------------------------------------------------------

TEST(LlamaSpm, SpacePrefixBosAndDecode) {
  STRATA_REQUIRE_SHARED(path, "vocab/llama-spm-vocab.gguf");
  auto tok = LoadGguf(path);
  ASSERT_NE(tok, nullptr);
  // Facts from the golden README: "Hello" -> 15043, " Hello" -> 29871 15043, " " -> 259.
  EXPECT_EQ(tok->Encode("Hello", false, false), (Ids{15043}));
  EXPECT_EQ(tok->Encode(" Hello", false, false), (Ids{29871, 15043}));
  EXPECT_EQ(tok->Encode(" ", false, false), (Ids{259}));
  EXPECT_EQ(tok->Encode("Hello", true, false), (Ids{1, 15043}));
  EXPECT_EQ(tok->Encode("", true, false), (Ids{1}));
  EXPECT_EQ(tok->Decode(Ids{1, 15043}), "Hello");
  EXPECT_EQ(tok->Decode(Ids{1, 15043}, true), "<s> Hello");
  EXPECT_EQ(tok->Decode(Ids{29871, 15043}), " Hello");
  // Special parsing: "<s>" is a control token; after it the text gets the space prefix again.
  EXPECT_EQ(tok->Encode("<s>Hello", false, true), (Ids{1, 15043}));
  const Ids plain = tok->Encode("<s>Hello", false, false);
  EXPECT_NE(plain.front(), 1);
  EXPECT_EQ(tok->Decode(plain), "<s>Hello");
  EXPECT_TRUE(tok->IsEog(2));
}

TEST(LlamaSpm, ByteFallbackAndIncrementalDecode) {
  STRATA_REQUIRE_SHARED(path, "vocab/llama-spm-vocab.gguf");
  auto tok = LoadGguf(path);
  ASSERT_NE(tok, nullptr);
  // U+1F600 is not in the Llama 2 vocabulary: it falls back to <0xF0> <0x9F> <0x98> <0x80>,
  // which are ids 3 + byte value (<0x00> is id 3).
  const Ids ids = tok->Encode("\xF0\x9F\x98\x80", false, false);
  ASSERT_EQ(ids.size(), 5u);  // "▁" + 4 bytes
  EXPECT_EQ(ids[0], 29871);
  EXPECT_EQ((Ids{ids[1], ids[2], ids[3], ids[4]}), (Ids{3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80}));
  EXPECT_EQ(tok->Decode(ids), "\xF0\x9F\x98\x80");
  IncrementalDecoder dec(*tok);
  std::string streamed;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string part = dec.Push(ids[i]);
    if (i + 1 < ids.size()) {
      EXPECT_EQ(part, "") << i;
    }
    streamed += part;
  }
  streamed += dec.Flush();
  EXPECT_EQ(streamed, "\xF0\x9F\x98\x80");
}

TEST(SentencePieceModel, MatchesGgufVocabulary) {
  STRATA_REQUIRE_SHARED(model_path, "models/llama2-tokenizer.model");
  STRATA_REQUIRE_SHARED(gguf_path, "vocab/llama-spm-vocab.gguf");
  const auto bytes = ReadBytes(model_path);
  auto sp = VocabFromSentencePieceModel(bytes);
  ASSERT_TRUE(sp.ok()) << sp.status().ToString();
  EXPECT_EQ(sp->tokens.size(), 32000u);
  EXPECT_EQ(sp->unk, 0);
  EXPECT_EQ(sp->bos, 1);
  EXPECT_EQ(sp->eos, 2);
  EXPECT_EQ(sp->tokens[0], "<unk>");
  EXPECT_EQ(sp->tokens[1], "<s>");
  EXPECT_EQ(sp->tokens[2], "</s>");
  EXPECT_TRUE(sp->add_space_prefix);

  auto file = gguf::GgufFile::Open(gguf_path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto gv = VocabFromGguf(**file);
  ASSERT_TRUE(gv.ok()) << gv.status().ToString();
  ASSERT_EQ(gv->tokens.size(), sp->tokens.size());
  EXPECT_EQ(gv->tokens, sp->tokens);
  EXPECT_EQ(gv->scores, sp->scores);
  EXPECT_EQ(gv->types, sp->types);

  auto tok = Tokenizer::Create(std::move(*sp));
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->Encode(" Hello", false, false), (Ids{29871, 15043}));
}

TEST(SentencePieceModel, HostileInputIsAnError) {
  // Truncated varint, length past the end, bad wire type, no pieces.
  const std::vector<std::vector<uint8_t>> bad = {
      {},
      {0x0A},
      {0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F},
      {0x0A, 0x05, 0x0A, 0x01},
      {0x0B},
      {0x0A, 0x02, 0x18, 0x09},  // piece type 9
      {0x0A, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
      {0x12, 0x02, 0xC8, 0x02},  // trainer_spec with a truncated field
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    auto r = VocabFromSentencePieceModel(bad[i]);
    EXPECT_FALSE(r.ok()) << "case " << i;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("sentencepiece model"), std::string::npos);
    }
  }
  // A minimal valid model: one piece "a" (type normal) plus an out-of-range bos id (41 = 5).
  const std::vector<uint8_t> bos_out = {0x0A, 0x03, 0x0A, 0x01, 'a', 0x12, 0x03, 0xC8, 0x02, 0x05};
  EXPECT_FALSE(VocabFromSentencePieceModel(bos_out).ok());
}

// ---- Hostile metadata -------------------------------------------------------------------------

gguf::GgufWriter MinimalBpeWriter() {
  gguf::GgufWriter w;
  w.Set("general.architecture", gguf::Value::String("llama"));
  w.Set("tokenizer.ggml.model", gguf::Value::String("gpt2"));
  w.Set("tokenizer.ggml.pre", gguf::Value::String("gpt-2"));
  w.Set("tokenizer.ggml.tokens", gguf::Value::StringArray({"a", "b", "ab", "<|eos|>"}));
  w.Set("tokenizer.ggml.token_type", gguf::Value::Int32Array({1, 1, 1, 3}));
  w.Set("tokenizer.ggml.merges", gguf::Value::StringArray({"a b"}));
  w.Set("tokenizer.ggml.eos_token_id", gguf::Value::Uint(gguf::ValueType::kUint32, 3));
  return w;
}

Result<Vocab> VocabFromWriter(const gguf::GgufWriter& w, std::vector<uint8_t>* storage) {
  ASSIGN_OR_RETURN(*storage, w.WriteToBuffer());
  ASSIGN_OR_RETURN(auto file, gguf::GgufFile::Parse(*storage));
  return VocabFromGguf(*file);
}

TEST(HostileMetadata, ValidMinimalVocabWorks) {
  std::vector<uint8_t> buf;
  auto v = VocabFromWriter(MinimalBpeWriter(), &buf);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  auto tok = Tokenizer::Create(std::move(*v));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->Encode("abab", false, false), (Ids{2, 2}));
  EXPECT_TRUE((*tok)->IsEog(3));
}

TEST(HostileMetadata, Errors) {
  struct Case {
    const char* what;
    std::function<void(gguf::GgufWriter&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"scores length",
       [](auto& w) {
         w.Set("tokenizer.ggml.scores", gguf::Value::Float32Array({0, 0}));
       },
       "tokenizer.ggml.scores"},
      {"types length",
       [](auto& w) { w.Set("tokenizer.ggml.token_type", gguf::Value::Int32Array({1})); },
       "tokenizer.ggml.token_type"},
      {"type value",
       [](auto& w) {
         w.Set("tokenizer.ggml.token_type", gguf::Value::Int32Array({1, 1, 1, 42}));
       },
       "tokenizer.ggml.token_type"},
      {"bos range",
       [](auto& w) {
         w.Set("tokenizer.ggml.bos_token_id", gguf::Value::Uint(gguf::ValueType::kUint32, 4));
       },
       "tokenizer.ggml.bos_token_id"},
      {"eos range",
       [](auto& w) {
         w.Set("tokenizer.ggml.eos_token_id",
               gguf::Value::Uint(gguf::ValueType::kUint32, 1u << 31));
       },
       "tokenizer.ggml.eos_token_id"},
      {"bad merge",
       [](auto& w) { w.Set("tokenizer.ggml.merges", gguf::Value::StringArray({"ab"})); },
       "tokenizer.ggml.merges[0]"},
      {"model", [](auto& w) { w.Set("tokenizer.ggml.model", gguf::Value::String("bert")); },
       "'llama'"},
      {"pre", [](auto& w) { w.Set("tokenizer.ggml.pre", gguf::Value::String("klingon")); },
       "klingon"},
      {"tokens type",
       [](auto& w) {
         w.Set("tokenizer.ggml.tokens", gguf::Value::Int32Array({1, 2}));
       },
       "tokenizer.ggml.tokens"},
      {"add_bos without bos",
       [](auto& w) { w.Set("tokenizer.ggml.add_bos_token", gguf::Value::Bool(true)); }, "add_bos"},
  };
  for (const auto& c : cases) {
    gguf::GgufWriter w = MinimalBpeWriter();
    c.edit(w);
    std::vector<uint8_t> buf;
    Result<Vocab> v = VocabFromWriter(w, &buf);
    Status st = v.ok() ? Tokenizer::Create(std::move(*v)).status() : v.status();
    EXPECT_FALSE(st.ok()) << c.what;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << c.what << ": " << st.ToString();
  }
}

TEST(HostileMetadata, ValidateVocabDirect) {
  Vocab v = BuiltinByteVocab();
  v.unk = static_cast<int32_t>(v.tokens.size());
  EXPECT_FALSE(Tokenizer::Create(v).ok());
  v = BuiltinByteVocab();
  v.tokens.clear();
  EXPECT_FALSE(Tokenizer::Create(v).ok());
}

// ---- Built-in byte vocabulary ------------------------------------------------------------------

TEST(BuiltinByteVocab, ShapeAndRoundTrip) {
  Vocab v = BuiltinByteVocab();
  EXPECT_EQ(v.kind, Vocab::Kind::kBpe);
  EXPECT_GE(v.merges.size(), 200u);
  EXPECT_EQ(v.tokens[static_cast<size_t>(v.bos)], "<|begin_of_text|>");
  EXPECT_EQ(v.tokens[static_cast<size_t>(v.eos)], "<|end_of_text|>");
  EXPECT_EQ(v.tokens[' '], "\xC4\xA0");  // GPT-2 spelling of a space: U+0120
  EXPECT_EQ(v.tokens['a'], "a");
  EXPECT_EQ(BuiltinByteVocab().merges, v.merges);  // deterministic
  auto tok = Tokenizer::Create(v);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::string texts[] = {
      "The quick brown fox jumps over the lazy dog.",
      "Once upon a time, there was a little model.\n\n  Hello   world!",
      "\xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80 caf\xC3\xA9 \t\r\n 12345",
      std::string("\x00\x01\xFF\xFE binary", 11),
  };
  for (const auto& t : texts) {
    const Ids ids = (*tok)->Encode(t, true, false);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], v.bos);
    EXPECT_EQ((*tok)->Decode(ids), t);
    EXPECT_LT(ids.size(), t.size() + 1) << "merges should shorten English text: " << t;
  }
  // Common words become single tokens.
  EXPECT_EQ((*tok)->Encode(" the", false, false).size(), 1u);
  EXPECT_EQ((*tok)->Encode(" hello world", false, false).size(), 2u);
  EXPECT_TRUE((*tok)->IsEog(v.eos));
  EXPECT_EQ((*tok)->Encode("<|end_of_text|>", false, true), (Ids{v.eos}));
}

}  // namespace
}  // namespace strata::tokenizer
