// UTF-8 and GPT-2 byte-to-unicode helpers shared by the tokenizers (internal to tokenizer/), and
// the two UTF-8 checks the server shares with them (IsValidUtf8, SanitizeUtf8 in
// strata::tokenizer). All functions are pure and thread-safe; none of them throws or reads past the
// given bounds.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::tokenizer::internal {

// Length of the UTF-8 sequence that starts with `lead` judged by the lead byte alone (1 for
// continuation or invalid lead bytes, so that a scan always makes progress).
inline size_t Utf8SeqLen(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Appends the UTF-8 encoding of `cp` (must be <= 0x10FFFF).
void AppendUtf8(uint32_t cp, std::string* out);

// Result of examining the bytes at the start of `s` as one UTF-8 sequence.
struct Utf8Step {
  enum Kind { kValid, kInvalid, kIncomplete } kind;
  size_t len;   // kValid: bytes of the code point; kInvalid: bytes to replace by one U+FFFD;
                // kIncomplete: all of `s` (a valid but unfinished prefix)
  uint32_t cp;  // kValid only
};
// Strict decoding (no overlongs, no surrogates, nothing above U+10FFFF). `s` must be non-empty.
Utf8Step DecodeUtf8Step(std::string_view s);

// Replaces invalid sequences (and an unfinished tail) by U+FFFD.
std::string SanitizeUtf8(std::string_view s);

// GPT-2 byte-level BPE spelling: every byte maps to one printable code point (printable Latin-1
// bytes to themselves, the other 68 bytes to U+0100.. in byte order).
class ByteUnicodeMap {
 public:
  static const ByteUnicodeMap& Get();
  // UTF-8 spelling of one byte (1 or 2 bytes long).
  std::string_view Encode(uint8_t b) const { return {enc_[b].data(), enc_len_[b]}; }
  // Byte for a code point, or -1 if the code point is not one of the 256.
  int Decode(uint32_t cp) const { return cp < dec_.size() ? dec_[cp] : -1; }
  // Byte-encodes a whole string.
  std::string EncodeString(std::string_view bytes) const;

 private:
  ByteUnicodeMap();
  std::array<std::array<char, 2>, 256> enc_{};
  std::array<uint8_t, 256> enc_len_{};
  std::array<int16_t, 512> dec_{};
};

}  // namespace strata::tokenizer::internal

namespace strata::tokenizer {

// Whether `s` is well-formed UTF-8 (strict, as DecodeUtf8Step: no overlongs, surrogates, code
// points above U+10FFFF or unfinished tail).
bool IsValidUtf8(std::string_view s);
// `s` with every invalid sequence (maximal subpart) and an unfinished tail replaced by U+FFFD.
inline std::string SanitizeUtf8(std::string_view s) { return internal::SanitizeUtf8(s); }

}  // namespace strata::tokenizer
