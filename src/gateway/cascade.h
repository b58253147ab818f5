// gateway/cascade: the pure logic of a small→large cascade (README.md "Cascade") — the first
// stage's request rewrite (non-streaming, token logprobs with two alternatives), the confidence
// signals of its answer (mean and min token logprob, mean top-1 − top-2 margin), the undoing of
// the rewrite in the answer the client gets (logprobs it did not ask for stripped), and the
// conversion of a buffered completion / chat answer into the OpenAI SSE chunk sequence for a
// client that asked `stream: true`.
//
// The orchestration (Fetch on the first pool, the decision, escalation to `then`) is in
// gateway.cc; nothing here does I/O.
// Thread contract: pure functions over values.
// Errors: a client body whose cascade-relevant fields have the wrong type → ApiError (400); an
// answer that is not an OpenAI completion/chat object → InvalidArgument (the gateway escalates).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/status.h"
#include "gateway/config.h"
#include "gateway/prompt.h"
#include "http/openai_error.h"

namespace strata::gateway {

// What the client asked of the fields the first stage rewrites, to undo the rewrite.
struct CascadeAsk {
  Endpoint endpoint = Endpoint::kCompletions;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // completions: `logprobs` present; chat: `logprobs: true`
  int64_t top_logprobs = 0;    // alternatives per token the client asked (completions: logprobs)
  bool echo = false;           // completions `echo: true` (the cascade escalates it)
};

inline constexpr int64_t kCascadeTopLogprobs = 2;  // the first stage asks for top-2 alternatives

struct CascadeFirstStage {
  std::string body;  // the rewritten request for the first pool
  CascadeAsk ask;
};

// Rewrites the client's request body for the first stage: `stream` false (stream_options
// dropped), logprobs on with max(client's, 2) alternatives — completions `logprobs: k`, chat
// `logprobs: true, top_logprobs: k`. Every other field is kept as sent.
http::ApiResult<CascadeFirstStage> FirstStageRequest(Endpoint endpoint, const nlohmann::json& body);

// The confidence of an answer, over the sampled tokens of all its choices (tokens whose logprob
// is null, such as the first of an echoed prompt, are skipped).
struct CascadeSignals {
  int64_t tokens = 0;              // tokens with a logprob
  double mean_logprob = 0;         // mean of their logprobs (0 when tokens == 0)
  double min_logprob = 0;          // the smallest (0 when tokens == 0)
  int64_t margin_tokens = 0;       // tokens with at least two alternatives
  double margin = 0;               // mean over those of top-1 − top-2 alternative logprob
  int64_t completion_tokens = -1;  // usage.completion_tokens (-1: not reported)
};

// Reads the signals from a completion (`choices[].logprobs.token_logprobs / top_logprobs`) or chat
// (`choices[].logprobs.content[].logprob / top_logprobs[]`) answer. InvalidArgument when `answer`
// is not an object with a `choices` array.
Result<CascadeSignals> ComputeSignals(Endpoint endpoint, const nlohmann::json& answer);

// The configured signal's value; nullopt when the answer has no token to measure it on (no
// logprobs; for kMargin, no position with two alternatives) — the cascade escalates then.
std::optional<double> SignalValue(const CascadeSignals& s, CascadeSignal which);

// Undoes the first stage's rewrite in its answer: a client that did not ask for logprobs gets
// `logprobs: null` in every choice; one that asked for k < 2 alternatives gets the k likeliest.
void StripLogprobs(const CascadeAsk& ask, nlohmann::json* answer);

// The buffered answer as the OpenAI SSE stream a `stream: true` client expects: chat — a first
// chunk with every choice's `{"role": "assistant", "content": ""}`, then per choice one chunk with
// the rest of its message as `delta`, its logprobs and finish_reason; completions — per choice
// one chunk with its text, logprobs and finish_reason; then (include_usage) a chunk with
// `choices: []` and the usage; then `data: [DONE]`. Returns the whole event stream.
std::string AnswerAsSse(const CascadeAsk& ask, const nlohmann::json& answer);

}  // namespace strata::gateway
