// Tokenizers built from GGUF metadata: SentencePiece-style (`tokenizer.ggml.model = llama`, scores,
// byte fallback) and byte-level BPE (`gpt2`) with the pre-tokenizers `llama-bpe` (Llama 3),
// `qwen2`, `gpt-2`, `deepseek-coder` (and `default`).
//
// Thread-safety: a Tokenizer is immutable after Create() and safe to use from many threads.
// Errors: Create()/VocabFromGguf() return InvalidArgument naming the key or token that is wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata::gguf {
class GgufFile;
}

namespace strata::tokenizer {

enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Everything a tokenizer needs, independent of where it came from.
struct Vocab {
  enum class Kind { kSpm, kBpe };
  Kind kind = Kind::kSpm;
  std::string model;            // tokenizer.ggml.model ("llama", "gpt2")
  std::string pre = "default";  // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<float> scores;        // may be empty (BPE)
  std::vector<TokenType> types;     // may be empty -> all normal
  std::vector<std::string> merges;  // BPE only, "left right" in GPT-2 byte-to-unicode spelling
  int32_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1, eom = -1;
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = true;  // SPM: prepend "▁"-space (tokenizer.ggml.add_space_prefix)
  std::string chat_template;     // tokenizer.chat_template, empty if none
};

// The special token ids a vocabulary names, in the order they are read: the short name used in
// messages, the GGUF key, the member of Vocab.
struct SpecialTokenId {
  const char* name;
  const char* gguf_key;
  int32_t Vocab::*id;
};
inline constexpr SpecialTokenId kSpecialTokenIds[] = {
    {"bos", "tokenizer.ggml.bos_token_id", &Vocab::bos},
    {"eos", "tokenizer.ggml.eos_token_id", &Vocab::eos},
    {"unk", "tokenizer.ggml.unknown_token_id", &Vocab::unk},
    {"pad", "tokenizer.ggml.padding_token_id", &Vocab::pad},
    {"eot", "tokenizer.ggml.eot_token_id", &Vocab::eot},
    {"eom", "tokenizer.ggml.eom_token_id", &Vocab::eom},
};

// Reads tokenizer.ggml.* keys. Works on vocabulary-only GGUF files.
Result<Vocab> VocabFromGguf(const gguf::GgufFile& file);
// Parses a SentencePiece ModelProto (`tokenizer.model`, protobuf) into an SPM vocab.
Result<Vocab> VocabFromSentencePieceModel(std::span<const uint8_t> bytes);
// Built-in byte-level vocabulary (for synthetic models that need nothing outside the repository):
// byte-level BPE with 256 byte tokens + merges for common English pairs + BOS/EOS control tokens.
Vocab BuiltinByteVocab();
// Checks a vocabulary for consistency (array lengths, id ranges, token types, merge syntax,
// required keys for its kind). Create() calls it; InvalidArgument names the problem.
Status ValidateVocab(const Vocab& vocab);

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> Create(Vocab vocab);
  virtual ~Tokenizer() = default;

  // add_special: prepend BOS if vocab.add_bos (append EOS if add_eos).
  // parse_special: recognise control/user-defined token text ("<|eot_id|>") in the input.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;
  // Raw bytes of one token (byte tokens -> the byte, "▁" -> ' ', GPT-2 unicode -> bytes).
  // Control tokens render as their text only when `special` is true.
  virtual std::string TokenToPiece(int32_t id, bool special = false) const = 0;
  // Concatenated pieces (SPM: the leading space of the first token is dropped if add_space_prefix).
  virtual std::string Decode(std::span<const int32_t> ids, bool special = false) const = 0;

  const Vocab& vocab() const { return vocab_; }
  size_t n_vocab() const { return vocab_.tokens.size(); }
  int32_t bos() const { return vocab_.bos; }
  int32_t eos() const { return vocab_.eos; }
  // End-of-generation: eos, eot, eom and control tokens llama.cpp treats as EOG
  // ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "</s>", ...).
  bool IsEog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }

 protected:
  explicit Tokenizer(Vocab vocab);
  Vocab vocab_;
  std::vector<int32_t> eog_ids_;
};

// Turns a stream of token ids into text without ever emitting a broken UTF-8 sequence: bytes of an
// incomplete code point are held back until completed; invalid sequences become U+FFFD.
// Thread contract: one instance per stream, single-threaded.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tok, bool special = false);
  // Returns the newly completed text (possibly empty).
  std::string Push(int32_t id);
  // Returns whatever is held back (incomplete sequences become U+FFFD).
  std::string Flush();

 private:
  const Tokenizer& tok_;
  bool special_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace strata::tokenizer
