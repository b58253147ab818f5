#include "tokenizer/utf8.h"

namespace strata::tokenizer::internal {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

Utf8Step DecodeUtf8Step(std::string_view s) {
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return {Utf8Step::kValid, 1, b0};
  size_t need;
  uint32_t cp;
  // Allowed range of the second byte (Unicode table 3-7): excludes overlongs and surrogates.
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Step::kInvalid, 1, 0};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= s.size()) return {Utf8Step::kIncomplete, s.size(), 0};
    const auto b = static_cast<uint8_t>(s[i]);
    const uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return {Utf8Step::kInvalid, i, 0};  // maximal subpart -> one U+FFFD
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Step::kValid, need, cp};
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Step st = DecodeUtf8Step(s.substr(i));
    if (st.kind == Utf8Step::kValid) {
      out.append(s.substr(i, st.len));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += st.len;
  }
  return out;
}

const ByteUnicodeMap& ByteUnicodeMap::Get() {
  static const ByteUnicodeMap kMap;
  return kMap;
}

ByteUnicodeMap::ByteUnicodeMap() {
  dec_.fill(-1);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
    std::string s;
    AppendUtf8(cp, &s);
    enc_len_[b] = static_cast<uint8_t>(s.size());
    for (size_t i = 0; i < s.size(); ++i) enc_[b][i] = s[i];
    dec_[cp] = static_cast<int16_t>(b);
  }
}

std::string ByteUnicodeMap::EncodeString(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(Encode(static_cast<uint8_t>(c)));
  return out;
}

}  // namespace strata::tokenizer::internal

namespace strata::tokenizer {

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const internal::Utf8Step st = internal::DecodeUtf8Step(s.substr(i));
    if (st.kind != internal::Utf8Step::kValid) return false;
    i += st.len;
  }
  return true;
}

}  // namespace strata::tokenizer
