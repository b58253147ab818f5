// SentencePiece-style tokenizer (GGUF `tokenizer.ggml.model = llama`), with llama.cpp's "SPM"
// behaviour: spaces become U+2581, a space is prefixed to text at the start / after a special
// token when add_space_prefix, adjacent symbols are merged while their concatenation is a token,
// always taking the pair whose token has the highest score (leftmost on ties), and symbols that
// are not tokens fall back to <0xNN> byte tokens (or the unknown token).
#include <array>
#include <functional>
#include <optional>

#include "tokenizer/merge.h"
#include "tokenizer/tokenizer_impl.h"

namespace strata::tokenizer::internal {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xNN>" -> NN, else -1.
int ParseByteToken(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = HexDigit(t[3]), lo = HexDigit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class SpmTokenizer final : public TokenizerImpl {
 public:
  explicit SpmTokenizer(Vocab v) : TokenizerImpl(std::move(v)) {}

  Status Init() {
    RETURN_IF_ERROR(InitCommon());
    static const char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      int32_t id = Find(std::string_view(name, sizeof(name)));
      if (id < 0) id = Find(std::string_view(std::string(1, static_cast<char>(b))));
      if (id < 0) id = vocab_.unk;
      byte_to_token_[static_cast<size_t>(b)] = id;
    }
    return Status::Ok();
  }

 protected:
  std::string NormalPiece(int32_t id) const override {
    const std::string& t = vocab_.tokens[static_cast<size_t>(id)];
    if (type(id) == TokenType::kByte) {
      const int b = ParseByteToken(t);
      if (b >= 0) return std::string(1, static_cast<char>(b));
    }
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, kSpace.size(), kSpace) == 0) {
        out.push_back(' ');
        i += kSpace.size();
      } else {
        out.push_back(t[i++]);
      }
    }
    return out;
  }

  void EncodeText(std::string_view text, bool after_special,
                  std::vector<int32_t>* out) const override {
    std::string s;
    s.reserve(text.size() + 8);
    if (after_special && vocab_.add_space_prefix) s.append(kSpace);
    for (char c : text) {
      if (c == ' ') {
        s.append(kSpace);
      } else {
        s.push_back(c);
      }
    }
    // A pair merges if it spells a token; the highest token score first.
    auto score = [&](std::string_view pair, size_t /*left_len*/) -> std::optional<float> {
      const int32_t id = Find(pair);
      if (id < 0) return std::nullopt;
      return vocab_.scores.empty() ? 0.0f : vocab_.scores[static_cast<size_t>(id)];
    };
    MergePairs<float, std::less<>>(s, score, [&](std::string_view piece) {
      const int32_t id = Find(piece);
      if (id >= 0) {
        out->push_back(id);
        return;
      }
      for (char c : piece) {
        const int32_t b = byte_to_token_[static_cast<uint8_t>(c)];
        if (b >= 0) out->push_back(b);
      }
    });
  }

 private:
  std::array<int32_t, 256> byte_to_token_{};
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> CreateSpm(Vocab vocab) {
  return CreateInitialized<SpmTokenizer>(std::move(vocab));
}

}  // namespace strata::tokenizer::internal
