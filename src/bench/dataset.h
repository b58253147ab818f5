// Benchmark workloads: deterministic (by seed) lists of units to send.
//
// A Unit is what the load generator schedules: one request for `random`, `shared-prefix` and
// `jsonl`; one conversation of sequential turns for `multi-turn` (turn k+1 is built after turn k's
// reply: previous prompt + generated text + the new user text, so each history is a strict textual
// prefix of the next prompt — the shape a prefix/tiered KV cache is for).
//
// Prompts are token ids (sent as a completions `prompt` array) or text. Text comes from a
// TextSource: random ids decoded with our tokenizer when a GGUF is given, else random English
// words. Token ids without a tokenizer come from [100, 500) unless --vocab-size is given: every
// vocabulary of at least 500 tokens (including the bundled tiny model's 569) accepts them.
//
// Errors: InvalidArgument naming the option, the file and line for JSONL problems. Sizes are
// bounded (kMaxPrompts units, kMaxTokensPerPrompt tokens per prompt, JSONL file <= 1 GiB).
// Thread-safety: immutable values after Build().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/arrivals.h"

namespace strata::tokenizer {
class Tokenizer;
}

namespace strata::bench {

inline constexpr int64_t kMaxPrompts = 100000;
inline constexpr int64_t kMaxTokensPerPrompt = 1 << 20;

struct Prompt {
  bool is_ids = false;
  std::vector<int32_t> ids;   // when is_ids
  std::string text;           // when !is_ids
  int64_t approx_tokens = 0;  // what the generator aimed for (ids: exact)
};

struct Turn {
  Prompt prompt;           // the full prompt, or for multi-turn only the new user text
  int64_t output_len = 0;  // max_tokens
};

struct Unit {
  std::vector<Turn> turns;  // size 1 except multi-turn
  int group = -1;           // shared-prefix group id (for reporting), else -1
};

struct DatasetOptions {
  std::string name = "random";  // random | shared-prefix | multi-turn | jsonl
  int64_t num_prompts = -1;     // -1: dataset's natural count (required for random)
  uint64_t seed = 0;
  bool text = false;           // --prompt-format text
  std::string tokenizer_path;  // GGUF with a vocabulary (optional)
  int64_t vocab_size = 0;      // 0: unknown
  // random
  int64_t random_input_len = 128, random_output_len = 128, random_prefix_len = 0;
  double random_range_ratio = 0.0;
  // shared-prefix
  int64_t sp_num_groups = 4, sp_prompts_per_group = 8, sp_system_prompt_len = 512,
          sp_question_len = 32, sp_output_len = 64;
  // multi-turn
  int64_t mt_num_conversations = 8, mt_turns = 4, mt_user_len = 32, mt_output_len = 32;
  int64_t mt_first_len = 0;  // first user message (a document, an agent's context); 0: mt_user_len
  // jsonl
  std::string dataset_path;
  int64_t jsonl_output_len = 128;  // when a line has neither output_len nor max_tokens
};

struct Dataset {
  std::string name;
  std::vector<Unit> units;
  bool multi_turn = false;
  int64_t num_requests() const;  // total turns
};

// Makes random prompt material (token ids or text) from a tokenizer, a vocabulary size, or words.
class TextSource {
 public:
  // Loads the tokenizer from a GGUF when tokenizer_path is non-empty.
  static Result<std::unique_ptr<TextSource>> Create(const std::string& tokenizer_path,
                                                    int64_t vocab_size);
  ~TextSource();
  std::vector<int32_t> Ids(Rng& rng, int64_t n) const;
  std::string Text(Rng& rng, int64_t n) const;  // about n tokens
  const tokenizer::Tokenizer* tokenizer() const { return tok_.get(); }
  std::string Describe() const;

 private:
  TextSource() = default;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::vector<int32_t> normal_ids_;  // tokenizer: tokens that decode to plain text
  int32_t lo_ = 100, hi_ = 500;      // [lo, hi) without a tokenizer
};

Result<Dataset> BuildDataset(const DatasetOptions& o);

// Makes a string valid UTF-8 (invalid bytes become U+FFFD) so it can be put into JSON.
std::string SanitizeUtf8(std::string_view s);

}  // namespace strata::bench
