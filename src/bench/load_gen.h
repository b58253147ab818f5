// The load generator: sends a Dataset to one OpenAI-compatible endpoint and measures every request.
//
// Arrivals: with a request rate, unit i is started at its scheduled time (bench/arrivals.h); with
// --max-concurrency C, at most C units run at once (C coroutines take units in order; unit i starts
// at max(its arrival time, a free slot)). Both may be combined; rate inf + C is a closed loop.
// A unit is one request, or one multi-turn conversation whose turns run back to back.
// Requests are streaming (SSE) with `max_tokens` = the unit's output length, temperature 0,
// `ignore_eos` (unless disabled) and `stream_options.include_usage` so the server reports exact
// token counts; without usage the output is counted in token chunks.
// Token chunk rule: completions — any chunk with a choice (a token may decode to empty text); chat
// — a choice whose delta is not a bare role announcement (a role with empty/null content). Bounds:
// max_duration_s stops issuing new units and aborts in-flight requests at that time (they count as
// failed, "max duration reached"; units never started count as not_sent); every request has its own
// timeout. Failures (connection refused, HTTP errors, timeouts, error events in the stream) are
// recorded per request, never thrown. Threading: one io_context on the calling thread; RunLoad
// blocks until done.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/dataset.h"
#include "bench/metrics.h"

namespace strata::bench {

struct LoadOptions {
  std::string base_url;
  std::string model;  // empty: the first id of GET /v1/models, or none
  std::string api_key;
  std::string endpoint = "completions";  // completions | chat
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  int64_t max_concurrency = 0;  // 0: unbounded
  uint64_t seed = 0;
  bool ignore_eos = true;
  double temperature = 0.0;
  double request_timeout_s = 600;
  double max_duration_s = 3600;
  double think_time_s = 0;  // multi-turn: pause between a reply and the conversation's next turn
  bool progress = false;    // draw a progress bar on stderr
  std::string progress_label;
};

struct LoadResult {
  std::string model;                   // what was sent
  std::vector<RequestRecord> records;  // one per request that was started, in dataset order
  int64_t not_sent = 0;                // requests never started (max duration)
  double duration_s = 0;               // first send to last completion
};

// InvalidArgument for bad options (URL, rate, chat with token-id prompts, ...); the run itself
// reports failures in the records.
Result<LoadResult> RunLoad(const LoadOptions& o, const Dataset& d);

// Validates the options without sending anything.
Status ValidateLoadOptions(const LoadOptions& o, const Dataset& d);

// Opens (and closes) one TCP connection to the server of `base_url` within `timeout_s`: Ok, or
// Unavailable "cannot connect to <url>: <the resolver's or connect's error>" (a run against a
// server that is not there is an error, not a table of failed requests). InvalidArgument for a
// bad URL. Sends nothing.
Status ProbeServer(const std::string& base_url, double timeout_s);

// Builds the JSON request body for one turn (exposed for tests). Completions: `prompt` is the whole
// prompt (for multi-turn: history + new user text). Chat: `chat_history` holds the previous turns
// as alternating user/assistant contents and `prompt` is the new user message.
std::string BuildRequestBody(const LoadOptions& o, const std::string& model, const Prompt& prompt,
                             const std::vector<std::string>& chat_history, int64_t max_tokens);

}  // namespace strata::bench
