// gateway/prompt: the length in tokens of a request's prompt, as the route's pool measures it —
// exactly (the pool's tokenizer GGUF, tokenized as `strata serve` does) or estimated from bytes.
//
// Exact measurement reproduces the server's token ids (src/server/openai_request.cc, api.cc):
//   /v1/completions  prompt string → Encode(text, add_special=true, parse_special=true) (BOS when
//                    the vocabulary adds one); an id array as is; a batch: its first prompt.
//   /v1/chat/completions  messages (text content parts joined) rendered with the chat template
//                    (bos_token / eos_token from the vocabulary, add_generation_prompt default
//                    true, chat_template_kwargs as extra variables), then
//                    Encode(rendered, add_special=false, parse_special=true).
//   /v1/embeddings   input: a string → Encode(text, true, true); ids as is; a list: its first.
//
// Estimate without a tokenizer (EstimatePrompt), from the UTF-8 bytes of the prompt text:
//   tokens = ceil(bytes / 4)   (kEstimateBytesPerToken; English BPE averages ~4 bytes a token)
//   upper_bound = bytes + 3    for completions and embeddings text: every tokenizer the server
//                              loads (byte-level BPE, SentencePiece with byte fallback) emits at
//                              most one token per input byte, plus BOS, EOS (vocabularies that
//                              add them) and SentencePiece's leading-space piece; special-token
//                              text only shortens it.
//   chat: bytes of every message's role and text content, plus kChatTokensPerMessage tokens per
//         message for the template's markers; upper_bound -1 (the template adds text the
//         gateway cannot see without it).
// Id-array prompts are exact without a tokenizer (estimated = false).
//
// Errors: a body the server would refuse (wrong shapes, ids out of the vocabulary, a template
// that raises) sets PromptInfo::error; `tokens` then holds the byte estimate so routing can go on
// (the replica answers the 400 itself).
// Thread contract: a PoolTokenizer is immutable after Load; Measure is const and safe from many
// threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gateway/config.h"

namespace strata::tokenizer {
class Tokenizer;
namespace chat {
class ChatTemplate;
}
}  // namespace strata::tokenizer

namespace strata::gateway {

enum class Endpoint { kCompletions, kChat, kEmbeddings };

inline constexpr int64_t kEstimateBytesPerToken = 4;
inline constexpr int64_t kChatTokensPerMessage = 4;

struct PromptInfo {
  int64_t tokens = 0;
  bool estimated = false;
  std::vector<int32_t> ids;  // exact only (empty when estimated)
  std::string error;         // "" = measured; else why the body could not be measured
  // Added: the most tokens the prompt can have (exact: == tokens; -1 = unknown).
  int64_t upper_bound = -1;
  // Added: the prompt's text as measured (completions/embeddings: the first text prompt; chat:
  // the rendered template, or without a tokenizer the messages' contents joined); "" for ids.
  // What the balancer's byte-chunk history affinity keys on when there are no ids.
  std::string text;
};

class PoolTokenizer {  // loaded from the pool's `tokenizer:` GGUF (vocab + chat template)
 public:
  // `builtin_template`: a built-in chat template name that replaces the GGUF's own (the pool's
  // `chat_template:`, what its replicas were started with via --chat-template); "" = the GGUF's.
  static Result<std::shared_ptr<const PoolTokenizer>> Load(const std::string& gguf_path,
                                                           std::string_view builtin_template = "");
  ~PoolTokenizer();

  // Tokens of a request body exactly as `strata serve` would produce them (completions: string or
  // ids, first prompt of a batch; chat: rendered template then tokenized; embeddings: first input).
  PromptInfo Measure(Endpoint e, const nlohmann::json& body) const;

  const tokenizer::Tokenizer& tokenizer() const { return *tok_; }
  bool has_chat_template() const { return tmpl_ != nullptr; }
  // What it was loaded from (LoadPoolTokenizers reuses a tokenizer whose source is unchanged).
  const std::string& path() const { return path_; }
  const std::string& builtin_template() const { return builtin_template_; }

 private:
  PoolTokenizer() = default;
  PromptInfo MeasureChat(const nlohmann::json& body) const;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<tokenizer::chat::ChatTemplate> tmpl_;
  std::string bos_token_, eos_token_;
  std::string path_, builtin_template_;
};

// Without a tokenizer: an estimate from UTF-8 bytes (the bound is documented above), ids of an id
// prompt exact.
PromptInfo EstimatePrompt(Endpoint e, const nlohmann::json& body);

// `tok` ? tok->Measure(e, body) : EstimatePrompt(e, body).
PromptInfo MeasurePrompt(const PoolTokenizer* tok, Endpoint e, const nlohmann::json& body);

// Pool name -> its tokenizer, for the pools that name one (`tokenizer:`).
using PoolTokenizers = std::map<std::string, std::shared_ptr<const PoolTokenizer>, std::less<>>;
// Loads the tokenizer of every pool that names one (pools sharing a path and template share one
// object). On a reload pass the previous map: a tokenizer whose path and template are unchanged
// is reused, not re-read (a large vocabulary takes about a second to load). Errors name the key
// path: "pools[1].tokenizer: cannot open ...". Paths are relative to the working directory.
Result<PoolTokenizers> LoadPoolTokenizers(const GatewayConfig& cfg,
                                          const PoolTokenizers* previous = nullptr);

}  // namespace strata::gateway
