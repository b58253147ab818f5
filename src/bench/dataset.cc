#include "bench/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace strata::bench {
namespace {

using json = nlohmann::json;

// Plain words for text prompts when no tokenizer is given (most are one token in common
// vocabularies).
constexpr const char* kWords[] = {
    "the",       "of",        "and",      "to",      "in",      "is",       "it",      "that",
    "for",       "was",       "on",       "are",     "as",      "with",     "his",     "they",
    "at",        "be",        "this",     "from",    "have",    "or",       "by",      "one",
    "had",       "not",       "but",      "what",    "all",     "were",     "when",    "we",
    "there",     "can",       "an",       "your",    "which",   "their",    "said",    "if",
    "do",        "will",      "each",     "about",   "how",     "up",       "out",     "them",
    "then",      "she",       "many",     "some",    "so",      "these",    "would",   "other",
    "into",      "has",       "more",     "her",     "two",     "like",     "him",     "see",
    "time",      "could",     "no",       "make",    "than",    "first",    "been",    "its",
    "who",       "now",       "people",   "my",      "made",    "over",     "did",     "down",
    "only",      "way",       "find",     "use",     "may",     "water",    "long",    "little",
    "very",      "after",     "words",    "called",  "just",    "where",    "most",    "know",
    "get",       "through",   "back",     "much",    "before",  "go",       "good",    "new",
    "write",     "our",       "used",     "me",      "man",     "day",      "too",     "any",
    "same",      "right",     "look",     "think",   "also",    "around",   "another", "came",
    "come",      "work",      "three",    "word",    "must",    "because",  "does",    "part",
    "even",      "place",     "well",     "such",    "here",    "take",     "why",     "help",
    "put",       "different", "away",     "again",   "off",     "went",     "old",     "number",
    "great",     "tell",      "men",      "say",     "small",   "every",    "found",   "still",
    "between",   "name",      "should",   "home",    "big",     "give",     "air",     "line",
    "set",       "own",       "under",    "read",    "last",    "never",    "us",      "left",
    "end",       "along",     "while",    "might",   "next",    "sound",    "below",   "saw",
    "something", "thought",   "both",     "few",     "those",   "always",   "show",    "large",
    "often",     "together",  "asked",    "house",   "world",   "going",    "want",    "school",
    "important", "until",     "form",     "food",    "keep",    "children", "feet",    "land",
    "side",      "without",   "boy",      "once",    "animal",  "life",     "enough",  "took",
    "sometimes", "four",      "head",     "above",   "kind",    "began",    "almost",  "live",
    "page",      "got",       "earth",    "need",    "far",     "hand",     "high",    "year",
    "mother",    "light",     "country",  "father",  "let",     "night",    "picture", "being",
    "study",     "second",    "soon",     "story",   "since",   "white",    "ever",    "paper",
    "hard",      "near",      "sentence", "better",  "best",    "across",   "during",  "today",
    "however",   "sure",      "knew",     "try",     "told",    "young",    "sun",     "thing",
    "whole",     "hear",      "example",  "heard",   "several", "change",   "answer",  "room",
    "sea",       "against",   "top",      "turned",  "learn",   "point",    "city",    "play",
    "toward",    "five",      "himself",  "usually", "money",   "seen",     "car",     "morning",
    "body",      "upon",      "family",   "later",   "move",    "face",     "door",    "cut",
    "done",      "group",     "true",     "leave",   "color",   "red",      "friends", "easy",
    "river",     "music",     "open",     "stone"};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

Status CheckLen(int64_t v, const char* name, int64_t min = 1) {
  if (v < min || v > kMaxTokensPerPrompt)
    return Status::InvalidArgument(
        fmt::format("{} must be in [{}, {}], got {}", name, min, kMaxTokensPerPrompt, v));
  return Status::Ok();
}

Prompt MakePrompt(const TextSource& src, Rng& rng, bool text, int64_t n) {
  Prompt p;
  p.approx_tokens = n;
  if (text) {
    p.text = src.Text(rng, n);
  } else {
    p.is_ids = true;
    p.ids = src.Ids(rng, n);
  }
  return p;
}

Prompt Concat(const Prompt& a, const Prompt& b) {
  Prompt p = a;
  p.approx_tokens += b.approx_tokens;
  if (p.is_ids)
    p.ids.insert(p.ids.end(), b.ids.begin(), b.ids.end());
  else
    p.text += b.text;
  return p;
}

int64_t Ranged(Rng& rng, int64_t len, double ratio, int64_t min) {
  int64_t lo = std::max<int64_t>(
      min, static_cast<int64_t>(std::floor(static_cast<double>(len) * (1.0 - ratio))));
  int64_t hi = std::max<int64_t>(
      lo, static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1.0 + ratio))));
  if (ratio == 0) lo = hi = std::max(min, len);
  return rng.UniformInt(lo, hi);
}

Result<Dataset> BuildRandom(const DatasetOptions& o, const TextSource& src) {
  if (o.num_prompts < 1)
    return Status::InvalidArgument("--num-prompts is required for the random dataset (>= 1)");
  RETURN_IF_ERROR(CheckLen(o.random_input_len, "--random-input-len", 0));
  RETURN_IF_ERROR(CheckLen(o.random_output_len, "--random-output-len"));
  RETURN_IF_ERROR(CheckLen(o.random_prefix_len, "--random-prefix-len", 0));
  if (!(o.random_range_ratio >= 0 && o.random_range_ratio < 1))
    return Status::InvalidArgument("--random-range-ratio must be in [0, 1)");
  if (o.random_input_len + o.random_prefix_len < 1)
    return Status::InvalidArgument("--random-input-len + --random-prefix-len must be >= 1");
  Rng rng(o.seed);
  Prompt prefix = MakePrompt(src, rng, o.text, o.random_prefix_len);
  Dataset d;
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    int64_t in =
        Ranged(rng, o.random_input_len, o.random_range_ratio, o.random_prefix_len > 0 ? 0 : 1);
    int64_t out = Ranged(rng, o.random_output_len, o.random_range_ratio, 1);
    Unit u;
    u.turns.push_back({Concat(prefix, MakePrompt(src, rng, o.text, in)), out});
    d.units.push_back(std::move(u));
  }
  return d;
}

Result<Dataset> BuildSharedPrefix(const DatasetOptions& o, const TextSource& src) {
  RETURN_IF_ERROR(CheckLen(o.sp_num_groups, "--sp-num-groups"));
  RETURN_IF_ERROR(CheckLen(o.sp_prompts_per_group, "--sp-prompts-per-group"));
  RETURN_IF_ERROR(CheckLen(o.sp_system_prompt_len, "--sp-system-prompt-len", 0));
  RETURN_IF_ERROR(CheckLen(o.sp_question_len, "--sp-question-len"));
  RETURN_IF_ERROR(CheckLen(o.sp_output_len, "--sp-output-len"));
  if (o.sp_num_groups * o.sp_prompts_per_group > kMaxPrompts)
    return Status::InvalidArgument(
        fmt::format("--sp-num-groups x --sp-prompts-per-group exceeds {}", kMaxPrompts));
  Rng rng(o.seed);
  Dataset d;
  for (int64_t g = 0; g < o.sp_num_groups; ++g) {
    Prompt system = MakePrompt(src, rng, o.text, o.sp_system_prompt_len);
    for (int64_t q = 0; q < o.sp_prompts_per_group; ++q) {
      Unit u;
      u.group = static_cast<int>(g);
      u.turns.push_back(
          {Concat(system, MakePrompt(src, rng, o.text, o.sp_question_len)), o.sp_output_len});
      d.units.push_back(std::move(u));
    }
  }
  // Interleave the groups (Fisher-Yates with our Rng), as a shared server sees them.
  for (size_t i = d.units.size(); i > 1; --i)
    std::swap(d.units[i - 1],
              d.units[static_cast<size_t>(rng.UniformInt(0, static_cast<int64_t>(i) - 1))]);
  if (o.num_prompts > 0 && o.num_prompts < static_cast<int64_t>(d.units.size()))
    d.units.resize(static_cast<size_t>(o.num_prompts));
  return d;
}

Result<Dataset> BuildMultiTurn(const DatasetOptions& o, const TextSource& src) {
  RETURN_IF_ERROR(CheckLen(o.mt_num_conversations, "--mt-num-conversations"));
  RETURN_IF_ERROR(CheckLen(o.mt_turns, "--mt-turns"));
  RETURN_IF_ERROR(CheckLen(o.mt_user_len, "--mt-user-len"));
  RETURN_IF_ERROR(CheckLen(o.mt_output_len, "--mt-output-len"));
  RETURN_IF_ERROR(CheckLen(o.mt_first_len, "--mt-first-len", 0));
  if (o.mt_num_conversations * o.mt_turns > kMaxPrompts)
    return Status::InvalidArgument(
        fmt::format("--mt-num-conversations x --mt-turns exceeds {}", kMaxPrompts));
  Rng rng(o.seed);
  Dataset d;
  d.multi_turn = true;
  for (int64_t c = 0; c < o.mt_num_conversations; ++c) {
    Unit u;
    for (int64_t t = 0; t < o.mt_turns; ++t) {
      Turn turn;
      const int64_t len = t == 0 && o.mt_first_len > 0 ? o.mt_first_len : o.mt_user_len;
      turn.prompt.text = (t == 0 ? "" : "\n") + src.Text(rng, len);
      turn.prompt.approx_tokens = len;
      turn.output_len = o.mt_output_len;
      u.turns.push_back(std::move(turn));
    }
    d.units.push_back(std::move(u));
  }
  return d;
}

Result<Dataset> BuildJsonl(const DatasetOptions& o, const TextSource& src) {
  (void)src;
  if (o.dataset_path.empty())
    return Status::InvalidArgument("the jsonl dataset needs --dataset-path FILE");
  RETURN_IF_ERROR(CheckLen(o.jsonl_output_len, "--jsonl-output-len"));
  std::ifstream in(o.dataset_path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open --dataset-path " + o.dataset_path);
  in.seekg(0, std::ios::end);
  auto size = static_cast<int64_t>(in.tellg());
  if (size > (int64_t{1} << 30))
    return Status::InvalidArgument(o.dataset_path + ": larger than 1 GiB");
  in.seekg(0);
  Dataset d;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    auto where = [&] { return fmt::format("{}:{}", o.dataset_path, lineno); };
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return Status::InvalidArgument(where() + ": not a JSON object");
    if (!j.contains("prompt")) return Status::InvalidArgument(where() + ": missing \"prompt\"");
    const json& p = j["prompt"];
    Turn t;
    if (p.is_string()) {
      t.prompt.text = p.get<std::string>();
      if (t.prompt.text.empty()) return Status::InvalidArgument(where() + ": \"prompt\" is empty");
      t.prompt.approx_tokens = static_cast<int64_t>(t.prompt.text.size() / 4 + 1);
    } else if (p.is_array() && !p.empty() && p.size() <= static_cast<size_t>(kMaxTokensPerPrompt)) {
      t.prompt.is_ids = true;
      for (const auto& x : p) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
          return Status::InvalidArgument(where() +
                                         ": \"prompt\" array must hold non-negative token ids");
        t.prompt.ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
      }
      t.prompt.approx_tokens = static_cast<int64_t>(t.prompt.ids.size());
    } else {
      return Status::InvalidArgument(
          where() + ": \"prompt\" must be a string or a non-empty array of token ids");
    }
    t.output_len = o.jsonl_output_len;
    for (const char* key : {"output_len", "max_tokens"}) {
      if (!j.contains(key)) continue;
      const json& v = j[key];
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxTokensPerPrompt)
        return Status::InvalidArgument(
            where() +
            fmt::format(": \"{}\" must be an integer in [1, {}]", key, kMaxTokensPerPrompt));
      t.output_len = v.get<int64_t>();
      break;
    }
    Unit u;
    u.turns.push_back(std::move(t));
    d.units.push_back(std::move(u));
    if (static_cast<int64_t>(d.units.size()) > kMaxPrompts)
      return Status::InvalidArgument(
          fmt::format("{}: more than {} prompts", o.dataset_path, kMaxPrompts));
  }
  if (d.units.empty()) return Status::InvalidArgument(o.dataset_path + ": no prompts");
  if (o.num_prompts > 0) {  // truncate, or cycle through the file
    std::vector<Unit> units;
    for (int64_t i = 0; i < o.num_prompts; ++i)
      units.push_back(d.units[static_cast<size_t>(i) % d.units.size()]);
    d.units = std::move(units);
  }
  return d;
}

}  // namespace

int64_t Dataset::num_requests() const {
  int64_t n = 0;
  for (const auto& u : units) n += static_cast<int64_t>(u.turns.size());
  return n;
}

TextSource::~TextSource() = default;

Result<std::unique_ptr<TextSource>> TextSource::Create(const std::string& tokenizer_path,
                                                       int64_t vocab_size) {
  std::unique_ptr<TextSource> s(new TextSource());
  if (!tokenizer_path.empty()) {
    ASSIGN_OR_RETURN(auto file, gguf::GgufFile::Open(tokenizer_path));
    ASSIGN_OR_RETURN(auto vocab, tokenizer::VocabFromGguf(*file));
    ASSIGN_OR_RETURN(s->tok_, tokenizer::Tokenizer::Create(std::move(vocab)));
    const auto& v = s->tok_->vocab();
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      auto type = v.types.empty() ? tokenizer::TokenType::kNormal : v.types[i];
      if (type != tokenizer::TokenType::kNormal) continue;
      int32_t id = static_cast<int32_t>(i);
      if (vocab_size > 0 && id >= vocab_size) continue;
      std::string piece = s->tok_->Decode(std::span<const int32_t>(&id, 1));
      if (piece.empty() || SanitizeUtf8(piece) != piece) continue;  // skip partial UTF-8 pieces
      s->normal_ids_.push_back(id);
    }
    if (s->normal_ids_.empty())
      return Status::InvalidArgument(tokenizer_path + ": the vocabulary has no normal tokens");
    return s;
  }
  if (vocab_size > 0) {
    if (vocab_size < 2 || vocab_size > INT32_MAX)
      return Status::InvalidArgument("--vocab-size must be in [2, 2^31)");
    s->lo_ = vocab_size > 200 ? 100 : 1;
    s->hi_ = static_cast<int32_t>(vocab_size);
  }
  return s;
}

std::string TextSource::Describe() const {
  if (tok_) return fmt::format("tokenizer ({} plain-text tokens)", normal_ids_.size());
  return fmt::format("ids in [{}, {}), words", lo_, hi_);
}

std::vector<int32_t> TextSource::Ids(Rng& rng, int64_t n) const {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) {
    if (tok_)
      id = normal_ids_[static_cast<size_t>(
          rng.UniformInt(0, static_cast<int64_t>(normal_ids_.size()) - 1))];
    else
      id = static_cast<int32_t>(rng.UniformInt(lo_, hi_ - 1));
  }
  return ids;
}

std::string TextSource::Text(Rng& rng, int64_t n) const {
  if (tok_) {
    auto ids = Ids(rng, n);
    return SanitizeUtf8(tok_->Decode(ids));
  }
  std::string s;
  for (int64_t i = 0; i < n; ++i) {
    if (i) s.push_back(' ');
    s += kWords[rng.UniformInt(0, static_cast<int64_t>(kNumWords) - 1)];
  }
  return s;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok && len == 2 && c < 0xC2) ok = false;  // overlong
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

Result<Dataset> BuildDataset(const DatasetOptions& o) {
  if (o.num_prompts > kMaxPrompts)
    return Status::InvalidArgument(fmt::format("--num-prompts must be <= {}", kMaxPrompts));
  if (o.num_prompts == 0 || o.num_prompts < -1)
    return Status::InvalidArgument("--num-prompts must be >= 1");
  ASSIGN_OR_RETURN(auto src, TextSource::Create(o.tokenizer_path, o.vocab_size));
  Result<Dataset> d = Status::InvalidArgument("unknown --dataset '" + o.name +
                                              "' (random, shared-prefix, multi-turn, jsonl)");
  if (o.name == "random")
    d = BuildRandom(o, *src);
  else if (o.name == "shared-prefix")
    d = BuildSharedPrefix(o, *src);
  else if (o.name == "multi-turn")
    d = BuildMultiTurn(o, *src);
  else if (o.name == "jsonl")
    d = BuildJsonl(o, *src);
  if (d.ok()) d->name = o.name;
  return d;
}

}  // namespace strata::bench
