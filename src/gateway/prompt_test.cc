// gateway/prompt: the byte estimate and its bound, exact id prompts, and the pool tokenizer
// reproducing the server's ids — against llama.cpp's tokenizer vectors (completions: BOS + ids)
// and the chat goldens (rendered with the built-in template the goldens' family uses).
#include "gateway/prompt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "testing/shared_dir.h"
#include "tokenizer/tokenizer.h"

namespace strata::gateway {
namespace {

using nlohmann::json;

TEST(EstimatePrompt, TextIsCeilBytesOverFourWithABound) {
  PromptInfo p = EstimatePrompt(Endpoint::kCompletions, json{{"prompt", "hello world!!"}});
  EXPECT_TRUE(p.error.empty()) << p.error;
  EXPECT_TRUE(p.estimated);
  EXPECT_EQ(p.tokens, 4);  // ceil(13 / 4)
  EXPECT_EQ(p.upper_bound, 16);
  EXPECT_TRUE(p.ids.empty());
  EXPECT_EQ(p.text, "hello world!!");
  // UTF-8 bytes, not characters: "é" is 2 bytes.
  EXPECT_EQ(
      EstimatePrompt(Endpoint::kCompletions, json{{"prompt", "\xc3\xa9\xc3\xa9\xc3\xa9"}}).tokens,
      2);
  EXPECT_EQ(EstimatePrompt(Endpoint::kCompletions, json{{"prompt", ""}}).tokens, 0);
  // A batch: its first prompt.
  p = EstimatePrompt(Endpoint::kCompletions, json{{"prompt", {"abcdefgh", "x"}}});
  EXPECT_EQ(p.tokens, 2);
  EXPECT_EQ(p.text, "abcdefgh");
  // Embeddings input.
  EXPECT_EQ(EstimatePrompt(Endpoint::kEmbeddings, json{{"input", "abcde"}}).tokens, 2);
  EXPECT_EQ(EstimatePrompt(Endpoint::kEmbeddings, json{{"input", {"abc", "defgh"}}}).tokens, 1);
}

TEST(EstimatePrompt, IdPromptsAreExact) {
  for (const json& body : {json{{"prompt", {5, 6, 7}}}, json{{"prompt", {{5, 6, 7}, {1}}}}}) {
    PromptInfo p = EstimatePrompt(Endpoint::kCompletions, body);
    EXPECT_TRUE(p.error.empty()) << p.error;
    EXPECT_FALSE(p.estimated);
    EXPECT_EQ(p.tokens, 3);
    EXPECT_EQ(p.upper_bound, 3);
    EXPECT_EQ(p.ids, (std::vector<int32_t>{5, 6, 7}));
  }
  PromptInfo e = EstimatePrompt(Endpoint::kEmbeddings, json{{"input", {9, 8}}});
  EXPECT_FALSE(e.estimated);
  EXPECT_EQ(e.ids, (std::vector<int32_t>{9, 8}));
}

TEST(EstimatePrompt, ChatCountsContentsAndMarkers) {
  json body = {
      {"messages",
       {{{"role", "user"}, {"content", "abcdefgh"}},  // "user\nabcdefgh\n" 14 bytes
        {{"role", "assistant"},
         {"content", {{{"type", "text"}, {"text", "ab"}}, {{"type", "text"}, {"text", "cd"}}}}}}}};
  // second: "assistant\nabcd\n" = 15 bytes; total 29 -> ceil(29/4) = 8, + 2 x 4 markers.
  PromptInfo p = EstimatePrompt(Endpoint::kChat, body);
  EXPECT_TRUE(p.error.empty()) << p.error;
  EXPECT_TRUE(p.estimated);
  EXPECT_EQ(p.tokens, 8 + 2 * kChatTokensPerMessage);
  EXPECT_EQ(p.upper_bound, -1);
}

TEST(EstimatePrompt, BadBodiesSayWhy) {
  struct Case {
    Endpoint e;
    json body;
    std::string error;
  };
  const Case cases[] = {
      {Endpoint::kCompletions, json::object(), "prompt: is required"},
      {Endpoint::kCompletions, json{{"prompt", 5}}, "prompt: must be a string"},
      {Endpoint::kCompletions, json{{"prompt", json::array()}}, "prompt: must be"},
      {Endpoint::kCompletions, json{{"prompt", {-1, 2}}}, "prompt"},
      {Endpoint::kCompletions, json{{"prompt", {{true}, {1}}}}, "prompt"},
      {Endpoint::kCompletions, json{{"prompt", {true}}}, "must be a string or an array"},
      {Endpoint::kChat, json{{"messages", "hi"}}, "messages: must be an array"},
      {Endpoint::kChat, json{{"messages", json::array()}}, "at least one message"},
      {Endpoint::kChat, json{{"messages", {{{"content", "x"}}}}}, "messages[0].role"},
      {Endpoint::kChat, json{{"messages", {{{"role", "user"}, {"content", 3}}}}},
       "messages[0].content"},
      {Endpoint::kEmbeddings, json{{"input", json::object()}}, "input: must be"},
      {Endpoint::kCompletions, json::array(), "prompt: is required"},  // not an object
  };
  for (const Case& c : cases) {
    PromptInfo p = EstimatePrompt(c.e, c.body);
    EXPECT_NE(p.error.find(c.error), std::string::npos) << c.body.dump() << " -> " << p.error;
  }
  // A prompt batch whose first element is bad (ids out of int32) names it.
  PromptInfo big = EstimatePrompt(Endpoint::kCompletions, json{{"prompt", {{1LL << 40}}}});
  EXPECT_FALSE(big.error.empty());
}

// ---- real tokenizers (../shared) ----

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Inputs(const std::string& data) {
  static const std::string kSep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  for (size_t pos = 0;;) {
    const size_t at = data.find(kSep, pos);
    if (at == std::string::npos) break;
    out.push_back(data.substr(pos, at - pos));
    pos = at + kSep.size();
  }
  return out;
}

std::vector<std::vector<int32_t>> Outputs(const std::string& data) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream lines(data);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    out.push_back(std::move(ids));
  }
  return out;
}

class PoolTokenizerVectors : public ::testing::TestWithParam<std::string> {};

// Completions: the server encodes with add_special (BOS when the vocabulary adds one); llama.cpp's
// vectors are without specials, so the ids are BOS + vector. Also the byte bound holds for every
// input, and ids / embeddings prompts agree.
TEST_P(PoolTokenizerVectors, CompletionsAreBosPlusTheReferenceIds) {
  const std::string name = GetParam();
  STRATA_REQUIRE_SHARED(vocab, "vocab/" + name + ".gguf");
  STRATA_REQUIRE_SHARED(inp, "golden/tokenizer/" + name + ".inp");
  STRATA_REQUIRE_SHARED(out, "golden/tokenizer/" + name + ".out");
  auto tok = PoolTokenizer::Load(vocab);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const auto inputs = Inputs(ReadAll(inp));
  const auto outputs = Outputs(ReadAll(out));
  ASSERT_EQ(inputs.size(), outputs.size());
  ASSERT_GT(inputs.size(), 40u);
  const tokenizer::Vocab& v = (*tok)->tokenizer().vocab();
  int compared = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    // Vector inputs that spell a special token parse differently with parse_special (the server's
    // choice); none of llama.cpp's vectors does, which this checks.
    std::vector<int32_t> want;
    if (v.add_bos) want.push_back(v.bos);
    want.insert(want.end(), outputs[i].begin(), outputs[i].end());
    if (v.add_eos) want.push_back(v.eos);
    PromptInfo p = (*tok)->Measure(Endpoint::kCompletions, json{{"prompt", inputs[i]}});
    ASSERT_TRUE(p.error.empty()) << p.error;
    EXPECT_FALSE(p.estimated);
    EXPECT_EQ(p.ids, want) << name << " input " << i;
    EXPECT_EQ(p.tokens, static_cast<int64_t>(want.size()));
    PromptInfo est = EstimatePrompt(Endpoint::kCompletions, json{{"prompt", inputs[i]}});
    EXPECT_LE(p.tokens, est.upper_bound) << "the documented bound fails on input " << i;
    PromptInfo emb = (*tok)->Measure(Endpoint::kEmbeddings, json{{"input", {inputs[i]}}});
    EXPECT_EQ(emb.ids, want);
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(inputs.size()));
  // An id prompt is passed through; ids outside the vocabulary are an error (as the server says).
  PromptInfo ids = (*tok)->Measure(Endpoint::kCompletions, json{{"prompt", {1, 2, 3}}});
  EXPECT_EQ(ids.ids, (std::vector<int32_t>{1, 2, 3}));
  PromptInfo bad = (*tok)->Measure(Endpoint::kCompletions,
                                   json{{"prompt", {static_cast<int64_t>(v.tokens.size())}}});
  EXPECT_FALSE(bad.error.empty());
}

INSTANTIATE_TEST_SUITE_P(Vocabs, PoolTokenizerVectors,
                         ::testing::Values("llama3-vocab", "llama-spm-vocab", "phi-3-vocab",
                                           "gpt-2-vocab"));

// The model files in ../shared/models load as pool tokenizers; completions ids are the
// tokenizer's own with specials (BOS where the vocabulary adds it), and the Llama-3 model's equal
// those of the separate Llama-3 vocabulary file (the same tokenizer keys).
class PoolTokenizerModels : public ::testing::TestWithParam<std::string> {};

TEST_P(PoolTokenizerModels, CompletionsMatchTheTokenizerWithSpecials) {
  STRATA_REQUIRE_SHARED(model, "models/" + GetParam());
  auto tok = PoolTokenizer::Load(model);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const tokenizer::Tokenizer& t = (*tok)->tokenizer();
  for (const std::string text :
       {"Hello world", " leading space", "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80",
        "line\n\nbreaks\tand tabs", ""}) {
    PromptInfo p = (*tok)->Measure(Endpoint::kCompletions, json{{"prompt", text}});
    ASSERT_TRUE(p.error.empty()) << p.error;
    EXPECT_EQ(p.ids, t.Encode(text, true, true)) << text;
    EXPECT_EQ(p.tokens, static_cast<int64_t>(p.ids.size()));
    if (t.vocab().add_bos) {
      ASSERT_FALSE(p.ids.empty());
      EXPECT_EQ(p.ids.front(), t.bos());
    }
    EXPECT_LE(p.tokens, EstimatePrompt(Endpoint::kCompletions, json{{"prompt", text}}).upper_bound);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PoolTokenizerModels,
                         ::testing::Values("tiny-llama3-Q4_K_M.gguf", "tiny-qwen2-Q8_0.gguf",
                                           "llama-2-tiny-random.gguf"));

TEST(PoolTokenizer, Llama3ModelAndVocabAgree) {
  STRATA_REQUIRE_SHARED(model, "models/tiny-llama3-Q4_K_M.gguf");
  STRATA_REQUIRE_SHARED(vocab, "vocab/llama3-vocab.gguf");
  auto a = PoolTokenizer::Load(model);
  auto b = PoolTokenizer::Load(vocab);
  ASSERT_TRUE(a.ok() && b.ok());
  const json body = {{"prompt", "The quick brown fox <|begin_of_text|> jumps 12345"}};
  PromptInfo pa = (*a)->Measure(Endpoint::kCompletions, body);
  EXPECT_EQ(pa.ids, (*b)->Measure(Endpoint::kCompletions, body).ids);
  ASSERT_GE(pa.ids.size(), 3u);
  EXPECT_EQ(pa.ids[0], 128000);  // BOS added
  // parse_special: the special token's text is one id, as the server tokenizes it.
  EXPECT_NE(std::find(pa.ids.begin() + 1, pa.ids.end(), 128000), pa.ids.end());
}

// Errors and the fallbacks of a model without a chat template.
TEST(PoolTokenizer, LoadsAModelGguf) {
  STRATA_REQUIRE_SHARED(model, "models/tiny-qwen2-Q8_0.gguf");
  auto tok = PoolTokenizer::Load(model);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const std::string text = "Hello <|endoftext|> world";
  PromptInfo p = (*tok)->Measure(Endpoint::kCompletions, json{{"prompt", text}});
  EXPECT_EQ(p.ids, (*tok)->tokenizer().Encode(text, true, true));  // special text parsed
  EXPECT_FALSE(p.estimated);
  // No chat template in this GGUF: chat falls back to the estimate, with the reason.
  PromptInfo chat =
      (*tok)->Measure(Endpoint::kChat, json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  EXPECT_TRUE(chat.estimated);
  EXPECT_NE(chat.error.find("no chat template"), std::string::npos);
  EXPECT_FALSE(PoolTokenizer::Load("/nonexistent.gguf").ok());
  EXPECT_FALSE(PoolTokenizer::Load(model, "no-such-template").ok());
}

// Chat: the golden renderings of Phi-3.5's template (shared/golden/chat), with the built-in phi3
// template on the Phi-3 vocabulary, tokenized as the server does (no specials added, special
// text parsed).
TEST(PoolTokenizer, ChatMatchesTheGoldenRenderings) {
  STRATA_REQUIRE_SHARED(vocab, "vocab/phi-3-vocab.gguf");
  STRATA_REQUIRE_SHARED(golden, "golden/chat/microsoft-Phi-3.5-mini-instruct.json");
  auto tok = PoolTokenizer::Load(vocab, "phi3");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  ASSERT_TRUE((*tok)->has_chat_template());
  const json g = json::parse(ReadAll(golden));
  int compared = 0;
  for (const json& c : g["cases"]) {
    if (!c["expected"].is_string()) continue;
    // The goldens' bos/eos are the vocabulary's: the gateway passes the same to the template.
    const tokenizer::Vocab& v = (*tok)->tokenizer().vocab();
    ASSERT_EQ(c["bos_token"], v.tokens[static_cast<size_t>(v.bos)]);
    json body = {{"messages", c["messages"]},
                 {"add_generation_prompt", c["add_generation_prompt"]},
                 {"chat_template_kwargs", c["variables"]}};
    PromptInfo p = (*tok)->Measure(Endpoint::kChat, body);
    ASSERT_TRUE(p.error.empty()) << c["id"] << ": " << p.error;
    EXPECT_EQ(p.text, c["expected"].get<std::string>()) << c["id"];
    EXPECT_EQ(p.ids, (*tok)->tokenizer().Encode(c["expected"].get<std::string>(), false, true))
        << c["id"];
    EXPECT_FALSE(p.estimated);
    ++compared;
  }
  EXPECT_GE(compared, 3);
}

// The GGUF's own template is used when the pool names none (phi-3-vocab carries one).
TEST(PoolTokenizer, UsesTheGgufTemplate) {
  STRATA_REQUIRE_SHARED(vocab, "vocab/phi-3-vocab.gguf");
  auto tok = PoolTokenizer::Load(vocab);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  ASSERT_TRUE((*tok)->has_chat_template());
  PromptInfo p = (*tok)->Measure(Endpoint::kChat,
                                 json{{"messages", {{{"role", "user"}, {"content", "Hi there"}}}}});
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.text, "<s><|user|>\nHi there<|end|>\n<|assistant|>\n");
  EXPECT_EQ(p.ids, (*tok)->tokenizer().Encode(p.text, false, true));
  EXPECT_EQ(p.tokens, static_cast<int64_t>(p.ids.size()));
}

TEST(LoadPoolTokenizers, SharesReusesAndNamesTheKeyPath) {
  STRATA_REQUIRE_SHARED(vocab, "vocab/llama-spm-vocab.gguf");
  STRATA_REQUIRE_SHARED(phi, "vocab/phi-3-vocab.gguf");
  auto parse = [](const std::string& yaml) {
    auto c = ParseGatewayConfig(yaml);
    EXPECT_TRUE(c.ok()) << c.status().message();
    return *c;
  };
  const std::string routes = "routes: [{name: r, to: a}]\n";
  auto cfg = parse("pools:\n  - {name: a, replicas: ['http://h:1'], tokenizer: '" + vocab +
                   "'}\n  - {name: b, replicas: ['http://h:2'], tokenizer: '" + vocab +
                   "'}\n  - {name: c, replicas: ['http://h:3']}\n" + routes);
  auto first = LoadPoolTokenizers(*cfg);
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_EQ(first->size(), 2u);               // c has none: it estimates
  EXPECT_EQ(first->at("a"), first->at("b"));  // one object per source
  // A reload keeps the unchanged one and loads the changed one.
  auto next_cfg = parse("pools:\n  - {name: a, replicas: ['http://h:1'], tokenizer: '" + vocab +
                        "'}\n  - {name: b, replicas: ['http://h:2'], tokenizer: '" + phi +
                        "', chat_template: phi3}\n" + routes);
  auto next = LoadPoolTokenizers(*next_cfg, &*first);
  ASSERT_TRUE(next.ok()) << next.status().message();
  EXPECT_EQ(next->at("a"), first->at("a"));
  EXPECT_NE(next->at("b"), first->at("b"));
  EXPECT_TRUE(next->at("b")->has_chat_template());
  auto bad = parse(
      "pools:\n  - {name: a, replicas: ['http://h:1']}\n  - {name: b, replicas: "
      "['http://h:2'], tokenizer: /nonexistent.gguf}\n" +
      routes);
  auto err = LoadPoolTokenizers(*bad);
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.status().message().rfind("pools[1].tokenizer: ", 0), 0u) << err.status().message();
  // MeasurePrompt: the tokenizer when there is one, else the estimate.
  const json body = {{"prompt", "Hello world"}};
  EXPECT_FALSE(MeasurePrompt(next->at("a").get(), Endpoint::kCompletions, body).estimated);
  EXPECT_TRUE(MeasurePrompt(nullptr, Endpoint::kCompletions, body).estimated);
}

}  // namespace
}  // namespace strata::gateway
