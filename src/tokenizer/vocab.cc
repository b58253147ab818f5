// Vocabulary sources: GGUF metadata, SentencePiece ModelProto, and the built-in byte vocabulary.
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {
namespace {

constexpr int64_t kMaxTokens = int64_t{1} << 24;  // far above any real vocabulary

std::string IdKeyError(std::string_view key, int64_t id, size_t n) {
  return std::string(key) + " = " + std::to_string(id) + " is out of range (vocabulary has " +
         std::to_string(n) + " tokens)";
}

// A per-token array (`key`) whose length is not the number of tokens.
Status CountMismatch(std::string_view key, size_t count, size_t n) {
  return Status::InvalidArgument(std::string(key) + " has " + std::to_string(count) +
                                 " entries but tokenizer.ggml.tokens has " + std::to_string(n));
}

// Element `i` of tokenizer.ggml.token_type must be a TokenType (0..6).
Status CheckTokenType(size_t i, int64_t t) {
  if (t < 0 || t > 6) {
    return Status::InvalidArgument("tokenizer.ggml.token_type[" + std::to_string(i) +
                                   "] = " + std::to_string(t) + " is not a token type (0..6)");
  }
  return Status::Ok();
}

// Reads an optional token id key into `*id`; absent keys leave the default.
Status ReadTokenId(const gguf::GgufFile& f, std::string_view key, size_t n_tokens, int32_t* id) {
  if (!f.Has(key)) return Status::Ok();
  Result<int64_t> v = f.GetInt(key);
  if (!v.ok()) return v.status();
  if (*v < 0 || static_cast<uint64_t>(*v) >= n_tokens) {
    return Status::InvalidArgument(IdKeyError(key, *v, n_tokens));
  }
  *id = static_cast<int32_t>(*v);
  return Status::Ok();
}

}  // namespace

Status ValidateVocab(const Vocab& v) {
  const size_t n = v.tokens.size();
  if (n == 0) return Status::InvalidArgument("tokenizer.ggml.tokens: vocabulary is empty");
  if (static_cast<int64_t>(n) > kMaxTokens) {
    return Status::InvalidArgument("tokenizer.ggml.tokens: " + std::to_string(n) +
                                   " tokens is more than the supported maximum");
  }
  if (!v.scores.empty() && v.scores.size() != n) {
    return CountMismatch("tokenizer.ggml.scores", v.scores.size(), n);
  }
  if (!v.types.empty() && v.types.size() != n) {
    return CountMismatch("tokenizer.ggml.token_type", v.types.size(), n);
  }
  for (size_t i = 0; i < v.scores.size(); ++i) {
    if (v.scores[i] != v.scores[i]) {
      return Status::InvalidArgument("tokenizer.ggml.scores[" + std::to_string(i) + "] is NaN");
    }
  }
  for (size_t i = 0; i < v.types.size(); ++i) {
    RETURN_IF_ERROR(CheckTokenType(i, static_cast<int32_t>(v.types[i])));
  }
  for (const SpecialTokenId& t : kSpecialTokenIds) {
    const int32_t id = v.*t.id;
    if (id != -1 && (id < 0 || static_cast<size_t>(id) >= n)) {
      return Status::InvalidArgument(IdKeyError(t.gguf_key, id, n));
    }
  }
  if (v.add_bos && v.bos < 0) {
    return Status::InvalidArgument(
        "tokenizer.ggml.add_bos_token is true but there is no BOS token");
  }
  if (v.add_eos && v.eos < 0) {
    return Status::InvalidArgument(
        "tokenizer.ggml.add_eos_token is true but there is no EOS token");
  }
  if (v.kind == Vocab::Kind::kBpe) {
    for (size_t i = 0; i < v.merges.size(); ++i) {
      const std::string& m = v.merges[i];
      const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (sp == std::string::npos || sp + 1 >= m.size()) {
        return Status::InvalidArgument("tokenizer.ggml.merges[" + std::to_string(i) +
                                       "] is not of the form \"left right\"");
      }
    }
  } else if (!v.merges.empty()) {
    return Status::InvalidArgument("tokenizer.ggml.merges given for a SentencePiece vocabulary");
  }
  return Status::Ok();
}

// VocabFromGguf, step by step. The keys are read in a fixed order, so a file with several bad
// keys always reports the same (first) one.
namespace {

// tokenizer.ggml.model (which tokenizer) and tokenizer.ggml.pre.
Status ReadModel(const gguf::GgufFile& f, Vocab* v) {
  Result<std::string> model = f.GetString("tokenizer.ggml.model");
  if (!model.ok()) {
    return Status::InvalidArgument("tokenizer.ggml.model: " + model.status().message());
  }
  v->model = *model;
  if (v->model == "llama") {
    v->kind = Vocab::Kind::kSpm;
  } else if (v->model == "gpt2") {
    v->kind = Vocab::Kind::kBpe;
  } else {
    return Status::Unimplemented("tokenizer.ggml.model = '" + v->model +
                                 "' is not supported (supported: 'llama' (SentencePiece), "
                                 "'gpt2' (byte-level BPE))");
  }
  ASSIGN_OR_RETURN(v->pre, f.GetStringOr("tokenizer.ggml.pre", "default"));
  if (v->pre.empty()) v->pre = "default";
  return Status::Ok();
}

// The per-token arrays: tokens, then the optional scores and types, then (BPE) the merges.
Status ReadTokenArrays(const gguf::GgufFile& f, Vocab* v) {
  ASSIGN_OR_RETURN(auto tokens, f.GetStringArray("tokenizer.ggml.tokens"));
  if (static_cast<int64_t>(tokens.size()) > kMaxTokens) {
    return Status::InvalidArgument("tokenizer.ggml.tokens: too many tokens (" +
                                   std::to_string(tokens.size()) + ")");
  }
  v->tokens.assign(tokens.begin(), tokens.end());
  const size_t n = v->tokens.size();
  if (f.Has("tokenizer.ggml.scores")) {
    ASSIGN_OR_RETURN(auto scores, f.GetFloatArray("tokenizer.ggml.scores"));
    if (scores.size() != n) return CountMismatch("tokenizer.ggml.scores", scores.size(), n);
    v->scores.reserve(n);
    for (double s : scores) v->scores.push_back(static_cast<float>(s));
  }
  if (f.Has("tokenizer.ggml.token_type")) {
    ASSIGN_OR_RETURN(auto types, f.GetIntArray("tokenizer.ggml.token_type"));
    if (types.size() != n) return CountMismatch("tokenizer.ggml.token_type", types.size(), n);
    v->types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      RETURN_IF_ERROR(CheckTokenType(i, types[i]));
      v->types.push_back(static_cast<TokenType>(types[i]));
    }
  }
  if (v->kind == Vocab::Kind::kBpe) {
    if (!f.Has("tokenizer.ggml.merges")) {
      return Status::InvalidArgument("tokenizer.ggml.merges: missing (required for model 'gpt2')");
    }
    ASSIGN_OR_RETURN(auto merges, f.GetStringArray("tokenizer.ggml.merges"));
    v->merges.assign(merges.begin(), merges.end());
  }
  return Status::Ok();
}

// Special tokens and flags: the defaults llama.cpp applies, then the explicit keys over them.
Status ReadSpecials(const gguf::GgufFile& f, Vocab* v) {
  const size_t n = v->tokens.size();
  if (v->kind == Vocab::Kind::kSpm) {
    v->bos = n > 1 ? 1 : -1;
    v->eos = n > 2 ? 2 : -1;
    v->unk = 0;
    v->add_bos = true;
    v->add_space_prefix = true;
  } else {
    v->add_bos =
        v->pre == "llama-bpe" || v->pre == "llama3" || v->pre == "llama-v3" || v->pre == "falcon3";
    v->add_space_prefix = false;
  }
  for (const SpecialTokenId& t : kSpecialTokenIds) {
    RETURN_IF_ERROR(ReadTokenId(f, t.gguf_key, n, &(v->*t.id)));
  }
  ASSIGN_OR_RETURN(v->add_bos, f.GetBoolOr("tokenizer.ggml.add_bos_token", v->add_bos));
  ASSIGN_OR_RETURN(v->add_eos, f.GetBoolOr("tokenizer.ggml.add_eos_token", v->add_eos));
  ASSIGN_OR_RETURN(v->add_space_prefix,
                   f.GetBoolOr("tokenizer.ggml.add_space_prefix", v->add_space_prefix));
  ASSIGN_OR_RETURN(v->chat_template, f.GetStringOr("tokenizer.chat_template", ""));
  return Status::Ok();
}

}  // namespace

Result<Vocab> VocabFromGguf(const gguf::GgufFile& f) {
  Vocab v;
  RETURN_IF_ERROR(ReadModel(f, &v));
  RETURN_IF_ERROR(ReadTokenArrays(f, &v));
  RETURN_IF_ERROR(ReadSpecials(f, &v));
  RETURN_IF_ERROR(ValidateVocab(v));
  return v;
}

// ---------------------------------------------------------------------------------------------
// SentencePiece ModelProto (protobuf wire format, parsed by hand with bounds checks).
// ModelProto: 1 = repeated SentencePiece {1 piece, 2 score (float), 3 type (enum)},
//             2 = TrainerSpec {40 unk_id, 41 bos_id, 42 eos_id, 43 pad_id},
//             3 = NormalizerSpec {3 add_dummy_prefix}.
namespace {

class ProtoReader {
 public:
  ProtoReader(std::span<const uint8_t> b, std::string ctx) : b_(b), ctx_(std::move(ctx)) {}
  bool done() const { return pos_ >= b_.size(); }

  Status Varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos_ >= b_.size()) return Err("truncated varint");
      const uint8_t byte = b_[pos_++];
      if (shift == 63 && byte > 1) return Err("varint overflows 64 bits");
      v |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) {
        *out = v;
        return Status::Ok();
      }
    }
    return Err("varint longer than 10 bytes");
  }
  Status Tag(uint32_t* field, uint32_t* wire) {
    uint64_t t;
    RETURN_IF_ERROR(Varint(&t));
    *field = static_cast<uint32_t>(t >> 3);
    *wire = static_cast<uint32_t>(t & 7);
    if (*field == 0 || (t >> 3) > 0x1FFFFFFF) return Err("bad field number");
    return Status::Ok();
  }
  Status Bytes(std::span<const uint8_t>* out) {
    uint64_t len;
    RETURN_IF_ERROR(Varint(&len));
    if (len > b_.size() - pos_) {
      return Err("length " + std::to_string(len) + " runs past the end (" +
                 std::to_string(b_.size() - pos_) + " bytes left)");
    }
    *out = b_.subspan(pos_, static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return Status::Ok();
  }
  Status Fixed32(uint32_t* out) {
    if (b_.size() - pos_ < 4) return Err("truncated fixed32");
    *out = uint32_t{b_[pos_]} | uint32_t{b_[pos_ + 1]} << 8 | uint32_t{b_[pos_ + 2]} << 16 |
           uint32_t{b_[pos_ + 3]} << 24;
    pos_ += 4;
    return Status::Ok();
  }
  Status Skip(uint32_t wire) {
    switch (wire) {
      case 0: {
        uint64_t v;
        return Varint(&v);
      }
      case 1:
        if (b_.size() - pos_ < 8) return Err("truncated fixed64");
        pos_ += 8;
        return Status::Ok();
      case 2: {
        std::span<const uint8_t> s;
        return Bytes(&s);
      }
      case 5: {
        uint32_t v;
        return Fixed32(&v);
      }
      default:
        return Err("unsupported wire type " + std::to_string(wire));
    }
  }
  Status Err(const std::string& what) const {
    return Status::InvalidArgument("sentencepiece model: " + ctx_ + " at byte " +
                                   std::to_string(pos_) + ": " + what);
  }

 private:
  std::span<const uint8_t> b_;
  std::string ctx_;
  size_t pos_ = 0;
};

Status ParsePiece(std::span<const uint8_t> bytes, size_t index, Vocab* v) {
  ProtoReader r(bytes, "piece " + std::to_string(index));
  std::string piece;
  float score = 0.0f;
  int64_t type = 1;  // NORMAL is the proto default
  while (!r.done()) {
    uint32_t field, wire;
    RETURN_IF_ERROR(r.Tag(&field, &wire));
    if (field == 1 && wire == 2) {
      std::span<const uint8_t> s;
      RETURN_IF_ERROR(r.Bytes(&s));
      piece.assign(reinterpret_cast<const char*>(s.data()), s.size());
    } else if (field == 2 && wire == 5) {
      uint32_t bits;
      RETURN_IF_ERROR(r.Fixed32(&bits));
      std::memcpy(&score, &bits, sizeof(score));
    } else if (field == 3 && wire == 0) {
      uint64_t t;
      RETURN_IF_ERROR(r.Varint(&t));
      if (t < 1 || t > 6) return r.Err("piece type " + std::to_string(t) + " is not 1..6");
      type = static_cast<int64_t>(t);
    } else {
      RETURN_IF_ERROR(r.Skip(wire));
    }
  }
  v->tokens.push_back(std::move(piece));
  v->scores.push_back(score);
  v->types.push_back(static_cast<TokenType>(type));
  return Status::Ok();
}

Status ParseTrainerSpec(std::span<const uint8_t> bytes, int64_t ids[4]) {
  ProtoReader r(bytes, "trainer_spec");
  while (!r.done()) {
    uint32_t field, wire;
    RETURN_IF_ERROR(r.Tag(&field, &wire));
    if (field >= 40 && field <= 43 && wire == 0) {
      uint64_t x;
      RETURN_IF_ERROR(r.Varint(&x));
      ids[field - 40] = static_cast<int32_t>(static_cast<uint32_t>(x));  // int32 (negative = -1)
    } else {
      RETURN_IF_ERROR(r.Skip(wire));
    }
  }
  return Status::Ok();
}

Status ParseNormalizerSpec(std::span<const uint8_t> bytes, bool* add_dummy_prefix) {
  ProtoReader r(bytes, "normalizer_spec");
  while (!r.done()) {
    uint32_t field, wire;
    RETURN_IF_ERROR(r.Tag(&field, &wire));
    if (field == 3 && wire == 0) {
      uint64_t x;
      RETURN_IF_ERROR(r.Varint(&x));
      *add_dummy_prefix = x != 0;
    } else {
      RETURN_IF_ERROR(r.Skip(wire));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Vocab> VocabFromSentencePieceModel(std::span<const uint8_t> bytes) {
  Vocab v;
  v.kind = Vocab::Kind::kSpm;
  v.model = "llama";
  v.pre = "default";
  int64_t ids[4] = {0, 1, 2, -1};  // unk, bos, eos, pad: TrainerSpec defaults
  bool add_dummy_prefix = true;
  ProtoReader r(bytes, "ModelProto");
  while (!r.done()) {
    uint32_t field, wire;
    RETURN_IF_ERROR(r.Tag(&field, &wire));
    if (wire == 2 && field >= 1 && field <= 3) {
      std::span<const uint8_t> sub;
      RETURN_IF_ERROR(r.Bytes(&sub));
      if (field == 1) {
        if (static_cast<int64_t>(v.tokens.size()) >= kMaxTokens) {
          return Status::InvalidArgument("sentencepiece model: too many pieces");
        }
        RETURN_IF_ERROR(ParsePiece(sub, v.tokens.size(), &v));
      } else if (field == 2) {
        RETURN_IF_ERROR(ParseTrainerSpec(sub, ids));
      } else {
        RETURN_IF_ERROR(ParseNormalizerSpec(sub, &add_dummy_prefix));
      }
    } else {
      RETURN_IF_ERROR(r.Skip(wire));
    }
  }
  if (v.tokens.empty()) return Status::InvalidArgument("sentencepiece model: no pieces");
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  const char* names[4] = {"unk_id", "bos_id", "eos_id", "pad_id"};
  int32_t* dst[4] = {&v.unk, &v.bos, &v.eos, &v.pad};
  for (int i = 0; i < 4; ++i) {
    if (ids[i] >= n) {
      return Status::InvalidArgument("sentencepiece model: trainer_spec." + std::string(names[i]) +
                                     " = " + std::to_string(ids[i]) + " is out of range (" +
                                     std::to_string(n) + " pieces)");
    }
    *dst[i] = ids[i] < 0 ? -1 : static_cast<int32_t>(ids[i]);
  }
  v.add_bos = v.bos >= 0;
  v.add_space_prefix = add_dummy_prefix;
  RETURN_IF_ERROR(ValidateVocab(v));
  return v;
}

// ---------------------------------------------------------------------------------------------
// Built-in byte-level vocabulary. Every merge is derived in code from the word list below, so the
// vocabulary needs no outside data: each word is split into the pieces the merges made so far
// produce, then glued left to right, each glue adding one merge and one token.
namespace {

constexpr const char* kBuiltinWords[] = {
    // frequent letter pairs first, so that words reuse them
    "th",
    "he",
    "in",
    "er",
    "an",
    "re",
    "on",
    "at",
    "en",
    "nd",
    "ti",
    "es",
    "or",
    "te",
    "of",
    "ed",
    "is",
    "it",
    "al",
    "ar",
    "st",
    "to",
    "nt",
    "ng",
    "se",
    "ha",
    "as",
    "ou",
    "io",
    "le",
    "ve",
    "co",
    "me",
    "de",
    "hi",
    "ri",
    "ro",
    "ic",
    "ne",
    "ea",
    "ra",
    "ce",
    "li",
    "ch",
    "ll",
    "be",
    "ma",
    "si",
    "om",
    "ur",
    // words with their leading space (GPT-2 style)
    " the",
    " of",
    " and",
    " to",
    " a",
    " in",
    " is",
    " that",
    " for",
    " it",
    " as",
    " was",
    " with",
    " be",
    " by",
    " on",
    " not",
    " he",
    " I",
    " this",
    " are",
    " or",
    " his",
    " from",
    " at",
    " which",
    " but",
    " have",
    " an",
    " had",
    " they",
    " you",
    " were",
    " their",
    " one",
    " all",
    " we",
    " can",
    " her",
    " has",
    " there",
    " been",
    " if",
    " more",
    " when",
    " will",
    " would",
    " who",
    " so",
    " no",
    " she",
    " other",
    " its",
    " may",
    " these",
    " what",
    " them",
    " than",
    " some",
    " him",
    " time",
    " into",
    " only",
    " do",
    " could",
    " new",
    " about",
    " two",
    " first",
    " also",
    " after",
    " any",
    " like",
    " our",
    " over",
    " such",
    " then",
    " my",
    " me",
    " your",
    " how",
    " model",
    " token",
    " text",
    " hello",
    " world",
    " The",
    " This",
    " It",
    " In",
    " A",
    " We",
    " Hello",
    " quick",
    " brown",
    " fox",
    " jumps",
    " lazy",
    " dog",
    " once",
    " upon",
    " story",
    " said",
    " good",
    " day",
    " little",
    " very",
    " make",
    " just",
    " know",
    " people",
    " year",
    " well",
    " way",
    " because",
    " each",
    " just",
    // suffixes and pieces
    "ing",
    "ion",
    "tion",
    "ed",
    "er",
    "ly",
    "es",
    "ent",
    "ment",
    "ness",
    "able",
    "ous",
    "ive",
    "al",
    "ic",
    "ity",
    "ers",
    "est",
    "ful",
    "less",
    // whitespace and punctuation runs
    "  ",
    "    ",
    "\n\n",
    " (",
    ".\n",
    ",\"",
    " \"",
    "'s",
    "'t",
    "...",
    " -",
    " =",
    " {",
    " }",
    "()",
    "0",
    "00",
    "000",
    " 1",
    " 2",
    " 10",
};

std::string BuiltinMergeKey(const std::string& a, const std::string& b) { return a + " " + b; }

}  // namespace

Vocab BuiltinByteVocab() {
  const auto& bu = internal::ByteUnicodeMap::Get();
  Vocab v;
  v.kind = Vocab::Kind::kBpe;
  v.model = "gpt2";
  v.pre = "gpt-2";
  v.add_space_prefix = false;
  std::unordered_set<std::string> have;
  std::unordered_map<std::string, size_t> rank;
  for (int b = 0; b < 256; ++b) {
    v.tokens.emplace_back(bu.Encode(static_cast<uint8_t>(b)));
    have.insert(v.tokens.back());
  }
  for (const char* word : kBuiltinWords) {
    // Byte-encoded characters of the word, then BPE with the merges so far (lowest rank first).
    const std::string enc = bu.EncodeString(word);
    std::vector<std::string> parts;
    for (size_t i = 0; i < enc.size();) {
      const size_t len =
          std::min(internal::Utf8SeqLen(static_cast<uint8_t>(enc[i])), enc.size() - i);
      parts.push_back(enc.substr(i, len));
      i += len;
    }
    while (parts.size() > 1) {
      size_t best = parts.size();
      size_t best_rank = std::numeric_limits<size_t>::max();
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        auto it = rank.find(BuiltinMergeKey(parts[i], parts[i + 1]));
        if (it != rank.end() && it->second < best_rank) {
          best_rank = it->second;
          best = i;
        }
      }
      if (best == parts.size()) break;
      parts[best] += parts[best + 1];
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    // Glue the remaining pieces left to right, adding the merges that are still missing.
    std::string acc = parts[0];
    for (size_t i = 1; i < parts.size(); ++i) {
      const std::string key = BuiltinMergeKey(acc, parts[i]);
      if (rank.emplace(key, v.merges.size()).second) {
        v.merges.push_back(key);
        const std::string tok = acc + parts[i];
        if (have.insert(tok).second) v.tokens.push_back(tok);
      }
      acc += parts[i];
    }
  }
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  v.bos = static_cast<int32_t>(v.tokens.size());
  v.tokens.push_back("<|begin_of_text|>");
  v.types.push_back(TokenType::kControl);
  v.eos = static_cast<int32_t>(v.tokens.size());
  v.tokens.push_back("<|end_of_text|>");
  v.types.push_back(TokenType::kControl);
  v.add_bos = true;
  v.add_eos = false;
  return v;
}

}  // namespace strata::tokenizer
