// Shared tokenizer machinery: special-token splitting, pieces, decoding, EOG ids, and the
// incremental decoder. Encoding of plain text lives in spm.cc and bpe.cc.
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}

bool Tokenizer::IsEog(int32_t id) const {
  return id >= 0 && std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::Create(Vocab vocab) {
  RETURN_IF_ERROR(ValidateVocab(vocab));
  if (vocab.kind == Vocab::Kind::kSpm) return internal::CreateSpm(std::move(vocab));
  return internal::CreateBpe(std::move(vocab));
}

namespace internal {
namespace {

// Token texts that end generation in chat models (llama.cpp's list, matched exactly).
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
    "<|endoftext|>", "<|eom_id|>", "<EOT>",   "</s>",
};

bool IsSpecialType(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
}

}  // namespace

Status TokenizerImpl::InitCommon() {
  const size_t n = vocab_.tokens.size();
  if (vocab_.types.empty()) vocab_.types.assign(n, TokenType::kNormal);
  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (vocab_.tokens[i].empty()) continue;  // an empty token can never be produced by encoding
    token_to_id_.insert_or_assign(vocab_.tokens[i], static_cast<int32_t>(i));  // last one wins
  }

  // End-of-generation set: eos/eot/eom plus tokens whose text marks the end of a turn. Like
  // llama.cpp, such tokens are treated as control tokens even if the file types them otherwise.
  std::vector<int32_t> eog;
  for (int32_t id : {vocab_.eos, vocab_.eot, vocab_.eom}) {
    if (id >= 0) eog.push_back(id);
  }
  for (std::string_view t : kEogTexts) {
    const int32_t id = Find(t);
    if (id < 0) continue;
    eog.push_back(id);
    vocab_.types[static_cast<size_t>(id)] = TokenType::kControl;
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  eog_ids_ = std::move(eog);

  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    if (IsSpecialType(type(id)) && !vocab_.tokens[i].empty()) specials_.push_back(id);
  }
  std::stable_sort(specials_.begin(), specials_.end(), [this](int32_t a, int32_t b) {
    return vocab_.tokens[static_cast<size_t>(a)].size() >
           vocab_.tokens[static_cast<size_t>(b)].size();
  });

  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    switch (type(id)) {
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined:
        pieces_[i] = vocab_.tokens[i];
        break;
      case TokenType::kNormal:
      case TokenType::kByte:
        pieces_[i] = NormalPiece(id);
        break;
      default:  // unused / undefined tokens render as nothing (as llama.cpp)
        break;
    }
  }
  return Status::Ok();
}

std::vector<int32_t> TokenizerImpl::Encode(std::string_view text, bool add_special,
                                           bool parse_special) const {
  // Fragments: raw text ranges or already-resolved special tokens. Special tokens are split out
  // longest first; control and unknown tokens only when parse_special, user-defined always.
  struct Frag {
    int32_t id;  // -1: raw text
    size_t off, len;
  };
  std::vector<Frag> frags;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  std::vector<Frag> next;
  for (int32_t sid : specials_) {
    const TokenType t = type(sid);
    if (!parse_special && t != TokenType::kUserDefined) continue;
    const std::string& st = vocab_.tokens[static_cast<size_t>(sid)];
    if (text.find(st) == std::string_view::npos) continue;
    next.clear();
    for (const Frag& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.off;
      const size_t end = f.off + f.len;
      while (pos < end) {
        const size_t m = text.substr(0, end).find(st, pos);
        if (m == std::string_view::npos) break;
        if (m > pos) next.push_back({-1, pos, m - pos});
        next.push_back({sid, m, st.size()});
        pos = m + st.size();
      }
      if (pos < end) next.push_back({-1, pos, end - pos});
    }
    frags.swap(next);
  }

  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  bool after_special = true;
  for (const Frag& f : frags) {
    if (f.id >= 0) {
      out.push_back(f.id);
      after_special = true;
    } else {
      EncodeText(text.substr(f.off, f.len), after_special, &out);
      after_special = false;
    }
  }
  if (add_special && vocab_.add_eos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  return out;
}

std::string TokenizerImpl::TokenToPiece(int32_t id, bool special) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return {};
  const TokenType t = type(id);
  if (!special && (t == TokenType::kControl || t == TokenType::kUnknown)) return {};
  return pieces_[static_cast<size_t>(id)];
}

std::string TokenizerImpl::Decode(std::span<const int32_t> ids, bool special) const {
  std::string out;
  bool strip = vocab_.kind == Vocab::Kind::kSpm && vocab_.add_space_prefix;
  for (int32_t id : ids) {
    std::string piece = TokenToPiece(id, special);
    if (strip && !piece.empty()) {
      if (piece[0] == ' ') piece.erase(0, 1);
      strip = false;
    }
    out += piece;
  }
  return out;
}

}  // namespace internal

// ---------------------------------------------------------------------------------------------

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tok, bool special)
    : tok_(tok), special_(special) {
  first_ = tok.vocab().kind == Vocab::Kind::kSpm && tok.vocab().add_space_prefix;
}

std::string IncrementalDecoder::Push(int32_t id) {
  std::string piece = tok_.TokenToPiece(id, special_);
  if (first_ && !piece.empty()) {
    if (piece[0] == ' ') piece.erase(0, 1);
    first_ = false;
  }
  pending_ += piece;
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const internal::Utf8Step st = internal::DecodeUtf8Step(std::string_view(pending_).substr(i));
    if (st.kind == internal::Utf8Step::kIncomplete) break;  // wait for the rest
    if (st.kind == internal::Utf8Step::kValid) {
      out.append(pending_, i, st.len);
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += st.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDecoder::Flush() {
  std::string out = internal::SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace strata::tokenizer
