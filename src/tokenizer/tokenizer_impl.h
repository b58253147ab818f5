// Internal to tokenizer/: the shared base of the SentencePiece and byte-level BPE tokenizers.
// It owns the token -> id index, the special-token splitter, the piece cache and the EOG set;
// subclasses only encode a plain text fragment and render a normal token.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace strata::tokenizer::internal {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIndex = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class TokenizerImpl : public Tokenizer {
 public:
  std::vector<int32_t> Encode(std::string_view text, bool add_special,
                              bool parse_special) const final;
  std::string TokenToPiece(int32_t id, bool special = false) const final;
  std::string Decode(std::span<const int32_t> ids, bool special = false) const final;

  // -1 if `text` is not a token.
  int32_t Find(std::string_view text) const {
    auto it = token_to_id_.find(text);
    return it == token_to_id_.end() ? -1 : it->second;
  }
  // Valid after InitCommon() (which fills missing types with kNormal).
  TokenType type(int32_t id) const { return vocab_.types[static_cast<size_t>(id)]; }

 protected:
  explicit TokenizerImpl(Vocab vocab) : Tokenizer(std::move(vocab)) {}
  // Builds the indexes; subclasses call it at the end of their own initialisation.
  Status InitCommon();
  // Encodes text without special tokens. `after_special`: at the start or after a special token.
  virtual void EncodeText(std::string_view text, bool after_special,
                          std::vector<int32_t>* out) const = 0;
  // Bytes of a normal (or byte) token.
  virtual std::string NormalPiece(int32_t id) const = 0;

  StringIndex token_to_id_;

 private:
  std::vector<int32_t> specials_;    // control / user-defined / unknown, longest text first
  std::vector<std::string> pieces_;  // rendering of every token (control tokens: their text)
};

// Builds a T (a TokenizerImpl with `Status Init()`) over `vocab` and initialises it.
template <typename T>
Result<std::unique_ptr<Tokenizer>> CreateInitialized(Vocab vocab) {
  auto tok = std::make_unique<T>(std::move(vocab));
  RETURN_IF_ERROR(tok->Init());
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

Result<std::unique_ptr<Tokenizer>> CreateSpm(Vocab vocab);
Result<std::unique_ptr<Tokenizer>> CreateBpe(Vocab vocab);

}  // namespace strata::tokenizer::internal
