// Byte-level BPE tokenizer (GGUF `tokenizer.ggml.model = gpt2`): the text is split into
// pre-tokens by the regexes of `tokenizer.ggml.pre` (PCRE2, UTF + Unicode properties), each
// pre-token is spelled with GPT-2's byte-to-unicode map, optionally looked up whole
// (llama-bpe), and otherwise merged pair by pair, lowest merge rank first (leftmost on ties).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <functional>
#include <optional>

#include "tokenizer/merge.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer::internal {
namespace {

// Pre-tokenizer regexes. When a list has several, each one splits the pieces left by the
// previous ones; text no regex matched stays as its own piece (as llama.cpp does).
constexpr const char* kLlama3[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
constexpr const char* kQwen2[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
#define STRATA_GPT2_REGEX \
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
constexpr const char* kGpt2[] = {STRATA_GPT2_REGEX};
constexpr const char* kDefault[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", STRATA_GPT2_REGEX, "\\p{N}+",
                                    "[0-9][0-9][0-9]"};
constexpr const char* kDeepseekCoder[] = {
    "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
    "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}"};
#undef STRATA_GPT2_REGEX

struct PreConfig {
  std::span<const char* const> regexes;
  bool ignore_merges;
};

Result<PreConfig> LookupPre(const std::string& pre) {
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "falcon3" ||
      pre == "dbrx" || pre == "smaug-bpe") {
    const bool ignore = pre != "dbrx" && pre != "smaug-bpe";
    return PreConfig{kLlama3, ignore};
  }
  if (pre == "qwen2" || pre == "stablelm2" || pre == "megrez") return PreConfig{kQwen2, false};
  if (pre == "gpt-2" || pre == "phi-2" || pre == "roberta-bpe" || pre == "mpt" || pre == "olmo") {
    return PreConfig{kGpt2, false};
  }
  if (pre == "default") return PreConfig{kDefault, false};
  if (pre == "deepseek-coder") return PreConfig{kDeepseekCoder, false};
  return Status::Unimplemented(
      "tokenizer.ggml.pre = '" + pre +
      "' is not supported (supported: llama-bpe/llama3/llama-v3/falcon3/dbrx/smaug-bpe, "
      "qwen2/stablelm2/megrez, gpt-2/phi-2/roberta-bpe/mpt/olmo, deepseek-coder, default)");
}

class Regex {
 public:
  Regex() = default;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() {
    if (code_ != nullptr) pcre2_code_free(code_);
  }
  Status Compile(const char* pattern) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
    if (code_ == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return Status::Internal("pre-tokenizer regex failed to compile at offset " +
                              std::to_string(err_off) + ": " + reinterpret_cast<char*>(msg));
    }
    // Optional speed-up; the interpreter is the fallback.
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
    return Status::Ok();
  }
  pcre2_code* code() const { return code_; }

 private:
  pcre2_code* code_ = nullptr;
};

class BpeTokenizer final : public TokenizerImpl {
 public:
  explicit BpeTokenizer(Vocab v) : TokenizerImpl(std::move(v)) {}

  Status Init() {
    ASSIGN_OR_RETURN(PreConfig pre, LookupPre(vocab_.pre));
    ignore_merges_ = pre.ignore_merges;
    regexes_.reserve(pre.regexes.size());
    for (const char* p : pre.regexes) {
      regexes_.push_back(std::make_unique<Regex>());
      RETURN_IF_ERROR(regexes_.back()->Compile(p));
    }
    ranks_.reserve(vocab_.merges.size());
    for (size_t i = 0; i < vocab_.merges.size(); ++i) {
      ranks_.emplace(vocab_.merges[i], static_cast<int32_t>(i));  // first occurrence wins
    }
    return InitCommon();
  }

 protected:
  std::string NormalPiece(int32_t id) const override {
    const std::string& t = vocab_.tokens[static_cast<size_t>(id)];
    const auto& bu = ByteUnicodeMap::Get();
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      const Utf8Step st = DecodeUtf8Step(std::string_view(t).substr(i));
      const int b = st.kind == Utf8Step::kValid ? bu.Decode(st.cp) : -1;
      if (b >= 0) {
        out.push_back(static_cast<char>(b));
      } else {
        out.append(t, i, st.len);  // not a byte-level character: keep its UTF-8 as is
      }
      i += st.len;
    }
    return out;
  }

  void EncodeText(std::string_view text, bool /*after_special*/,
                  std::vector<int32_t>* out) const override {
    const auto& bu = ByteUnicodeMap::Get();
    std::string word;
    std::string key;
    for (const auto& [off, len] : Split(text)) {
      word.clear();
      for (char c : text.substr(off, len)) word.append(bu.Encode(static_cast<uint8_t>(c)));
      EncodeWord(word, &key, out);
    }
  }

 private:
  using Range = std::pair<size_t, size_t>;

  // Applies the regexes in turn; returns (offset, length) pieces covering all of `text`.
  std::vector<Range> Split(std::string_view text) const {
    std::vector<Range> pieces{{0, text.size()}};
    std::vector<Range> next;
    for (const auto& re : regexes_) {
      pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code(), nullptr);
      if (md == nullptr) break;  // out of memory: keep the coarser split
      next.clear();
      for (const auto& [off, len] : pieces) {
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + off);
        size_t last_end = 0, pos = 0;
        while (pos < len) {
          int rc = pcre2_match(re->code(), subject, len, pos, 0, md, nullptr);
          if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
            rc = pcre2_match(re->code(), subject, len, pos, PCRE2_NO_JIT, md, nullptr);
          }
          if (rc < 0) break;  // no (further) match, or a resource limit: rest stays one piece
          const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
          const size_t s = ov[0], e = ov[1];
          if (e <= s) {  // empty match: step over one character
            if (s >= len) break;
            pos = s + std::min(Utf8SeqLen(static_cast<uint8_t>(text[off + s])), len - s);
            continue;
          }
          if (s > last_end) next.emplace_back(off + last_end, s - last_end);
          next.emplace_back(off + s, e - s);
          last_end = pos = e;
        }
        if (last_end < len) next.emplace_back(off + last_end, len - last_end);
      }
      pcre2_match_data_free(md);
      pieces.swap(next);
    }
    return pieces;
  }

  int32_t Rank(std::string_view left, std::string_view right, std::string* key) const {
    key->assign(left);
    key->push_back(' ');
    key->append(right);
    auto it = ranks_.find(*key);
    return it == ranks_.end() ? -1 : it->second;
  }

  void EncodeWord(const std::string& w, std::string* key, std::vector<int32_t>* out) const {
    if (w.empty()) return;
    if (ignore_merges_) {
      const int32_t id = Find(w);
      if (id >= 0) {
        out->push_back(id);
        return;
      }
    }
    // Lowest merge rank first.
    auto rank = [&](std::string_view pair, size_t left_len) -> std::optional<int32_t> {
      const int32_t r = Rank(pair.substr(0, left_len), pair.substr(left_len), key);
      return r >= 0 ? std::optional<int32_t>(r) : std::nullopt;
    };
    MergePairs<int32_t, std::greater<>>(w, rank, [&](std::string_view piece) {
      const int32_t id = Find(piece);
      if (id >= 0) {
        out->push_back(id);
        return;
      }
      // Not a token (incomplete vocabulary): fall back to its characters, then to <unk>.
      for (size_t j = 0; j < piece.size();) {
        const size_t n = std::min(Utf8SeqLen(static_cast<uint8_t>(piece[j])), piece.size() - j);
        const int32_t cid = Find(piece.substr(j, n));
        if (cid >= 0) {
          out->push_back(cid);
        } else if (vocab_.unk >= 0) {
          out->push_back(vocab_.unk);
        }
        j += n;
      }
    });
  }

  bool ignore_merges_ = false;
  std::vector<std::unique_ptr<Regex>> regexes_;
  StringIndex ranks_;  // "left right" -> merge rank
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> CreateBpe(Vocab vocab) {
  return CreateInitialized<BpeTokenizer>(std::move(vocab));
}

}  // namespace strata::tokenizer::internal
