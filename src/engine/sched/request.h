// Request API types of the serving engine: what a caller submits (SubmitRequest), what it gets
// back (a RequestStream of TokenEvents), and the SLA priorities.
//
// Two kinds of request (RequestKind): kGenerate samples tokens; kEmbed computes the prompt's
// embedding — the mean over all prompt positions of the final-normed hidden state, L2-normalised
// (summed in double, in position order) — delivered as ONE final event (finish kStop, token -1,
// `embedding` = hidden_dim floats). An embedding request is scheduled like a prompt (chunked
// prefill, batched with everything else, preemptible, cancellable, counted in EngineStats); it
// never reads or fills the prefix cache (every position's hidden state is needed, so a hit could
// not be used, and its blocks stay out of the cache generation requests share) and ignores the
// sampling fields, max_tokens, stop/EOG ids and logprobs.
//
// Ownership: SubmitRequest is moved into the engine on Submit. A RequestStream is shared (via
// shared_ptr) between the engine thread (producer) and the caller (consumer).
// Thread contract: RequestStream is thread-safe (one producer, any number of consumers);
// everything else is a plain value type.
// Errors: SubmitRequest::Validate returns InvalidArgument naming the offending field.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "engine/sampler/sampler.h"
#include "engine/sched/clock.h"
#include "engine/sched/timeline.h"
#include "lora/adapter.h"
#include "protocol/wire.h"

namespace strata::engine::sched {

using RequestId = int64_t;

// SLA priority (the wire's classes, protocol/wire.h): lower value = served first. Default silver.
// (The KV "tiers" are something else: the cache levels below the block pool.)
using protocol::kMaxTenantBytes;
using protocol::ParsePriorityName;
using protocol::Priority;
using protocol::PriorityName;

enum class RequestKind : uint8_t { kGenerate = 0, kEmbed = 1 };

enum class FinishReason : uint8_t { kNone, kStop, kLength, kCancelled, kError };
std::string_view FinishReasonName(FinishReason r);  // "", "stop", "length", "cancelled", "error"

inline constexpr int kMaxTopLogprobs = 20;
inline constexpr int kMaxN = 64;
inline constexpr size_t kMaxAdapterBytes = 256;
inline constexpr size_t kMaxStopTokenIds = 1024;

struct SubmitRequest {
  std::vector<int32_t> prompt;  // token ids, >= 1
  sampler::SamplingParams sampling;
  int max_tokens = 256;                 // generated tokens per completion, >= 1
  std::vector<int32_t> stop_token_ids;  // finish (reason stop) when one is sampled
  bool ignore_eos = false;              // EOG ids are never sampled (banned) and do not stop
  std::vector<int32_t> eog_ids;         // end-of-generation ids, from Tokenizer::eog_ids()
  Priority priority = Priority::kSilver;
  // Orders requests within a priority (earliest first); a request not yet admitted when it passes
  // is ended with kError / DeadlineExceeded (see Engine).
  std::optional<TimePoint> deadline;
  int n = 1;              // completions; they share the prompt's KV blocks
  bool logprobs = false;  // report the sampled token's logprob
  int top_logprobs = 0;   // 0..20 most likely tokens with their logprobs (needs logprobs)
  // Prompt logprobs (echo): -1 = none; k in 0..20 = the logprob of every prompt token given the
  // tokens before it, plus the k most likely tokens at each prompt position (PromptLogprobs),
  // delivered on the first token event of every completion. Such a request reads no cached prefix
  // (every prompt position's logits are needed: no prefix-cache hit, no tier adoption, no
  // shared-prefix deferral) until those are delivered; its blocks are registered as usual.
  int prompt_logprobs = -1;
  // Facts the engine binds into the request's prefix-cache salt (with the model's: see
  // Engine::SetModelSalt), so requests that differ in them never share KV blocks:
  std::string tenant;  // isolates the prefix cache; owns the tiered-KV quota ("" = default tenant);
                       // <= kMaxTenantBytes
  std::string
      adapter;  // digest of the LoRA adapter applied ("" = the base model); <= kMaxAdapterBytes
  // The LoRA adapter the runner applies to this request's rows (null = the base model). When set,
  // Engine::Submit overrides `adapter` with lora->digest(), so the prefix-cache and KV-tier keys
  // follow the adapter's content, not its name. The request holds the adapter alive until it ends
  // (unloading it from a registry never affects a queued or running request).
  std::shared_ptr<const lora::Adapter> lora;
  RequestKind kind = RequestKind::kGenerate;

  // Field checks against the model: n_vocab (token id range) and max_model_len (positions per
  // sequence). Capacity checks (KV pool, max_num_seqs) are the engine's. kEmbed requests are
  // checked by ValidateEmbed.
  Status Validate(int n_vocab, int max_model_len) const;
  // kEmbed: a prompt of 1..max_model_len valid ids, n == 1, no logprobs; the generation-only
  // fields are ignored.
  Status ValidateEmbed(int n_vocab, int max_model_len) const;
  // Positions the request can reach: prompt + max_tokens (kGenerate) or the prompt (kEmbed).
  int64_t MaxPositions() const;
};

struct TopLogprob {
  int32_t id = -1;
  float logprob = 0.0f;
};

// Prompt logprobs of one request (SubmitRequest::prompt_logprobs), the log-softmax of the model's
// raw logits (no penalties, bans or temperature — as vLLM's prompt_logprobs). Position 0 has no
// context: logprob[0] is NaN and its top row is empty.
struct PromptLogprobs {
  int top_k = 0;
  std::vector<float> logprob;   // [prompt size]: log P(prompt[i] | prompt[0, i))
  std::vector<TopLogprob> top;  // [prompt size * top_k]: at position i, most likely first
  std::span<const TopLogprob> TopAt(size_t i) const {
    return std::span<const TopLogprob>(top).subspan(i * static_cast<size_t>(top_k),
                                                    static_cast<size_t>(top_k));
  }
};

// One sampled token of completion `index`, or a terminal event. The last event of a completion
// has finish != kNone: for kStop it carries the matched stop/EOG token; for kLength the last
// generated token; for kCancelled/kError token == -1 (and `error` says why for kError: the
// runner's failure; DeadlineExceeded when the deadline passed before admission; ResourceExhausted
// when a higher-priority request displaced it from the full waiting queue).
struct TokenEvent {
  int index = 0;
  int32_t token = -1;
  float logprob = 0.0f;  // when SubmitRequest::logprobs
  int num_top = 0;
  std::array<TopLogprob, kMaxTopLogprobs> top{};  // [0, num_top), most likely first
  FinishReason finish = FinishReason::kNone;
  Status error;
  std::vector<float> embedding;  // kEmbed: the pooled vector, on the final (kStop) event only
  // SubmitRequest::prompt_logprobs >= 0: on the first token event of each completion (shared).
  std::shared_ptr<const PromptLogprobs> prompt_logprobs;
  // The request's phase times so far (timeline.h), an immutable snapshot: on the first token event
  // of each completion (up to its first token) and on every terminal event (up to that end; null
  // only when the request ended before the engine's step took it in: its Add failed, or the
  // engine was destroyed with it still in the inbox).
  std::shared_ptr<const RequestTimeline> timeline;

  std::span<const TopLogprob> top_logprobs() const {
    return {top.data(), static_cast<size_t>(num_top)};
  }
};

// A request's event stream. The engine pushes; callers pop. The stream is complete once every one
// of the n completions has delivered its terminal event and all events were popped.
//
// Push notification (instead of polling): SetNotify installs a callback that runs whenever the
// stream goes from empty to non-empty (once per batch of events the consumer has not popped yet),
// and once at once if events are already waiting. The consumer pops with TryNext until nullopt;
// the next Push after that calls the callback again, so no event is ever left unannounced. The
// callback runs on the pushing thread (the engine's) while a notify lock is held: it must only
// hand work over (post it to an I/O thread), never call back into this stream. After
// SetNotify(nullptr) returns, the old callback is not running and never runs again.
class RequestStream {
 public:
  RequestStream(RequestId id, int n) : id_(id), n_(n) {}
  RequestId id() const { return id_; }

  // Blocks until an event is available (returns it) or the stream is complete (nullopt).
  std::optional<TokenEvent> Next() EXCLUDES(mu_);
  // Like Next, but gives up after `timeout` (nullopt; check complete() to tell the cases apart).
  std::optional<TokenEvent> NextFor(std::chrono::nanoseconds timeout) EXCLUDES(mu_);
  std::optional<TokenEvent> TryNext() EXCLUDES(mu_);
  bool complete() const EXCLUDES(mu_);
  // Drains every event until complete (blocking).
  std::vector<TokenEvent> DrainAll() EXCLUDES(mu_);

  // Consumer side: see the class comment. nullptr removes the callback.
  void SetNotify(std::function<void()> notify) EXCLUDES(notify_mu_, mu_);

  // Engine side.
  void Push(const TokenEvent& ev) EXCLUDES(notify_mu_, mu_);

 private:
  std::optional<TokenEvent> PopLocked() REQUIRES(mu_);
  bool CompleteLocked() const REQUIRES(mu_) { return finished_ == n_ && head_ == buf_.size(); }
  const RequestId id_;
  const int n_;
  mutable Mutex mu_;
  CondVar cv_;
  // [head_, size) not yet popped; reset when drained (keeps capacity).
  std::vector<TokenEvent> buf_ GUARDED_BY(mu_);
  size_t head_ GUARDED_BY(mu_) = 0;
  int finished_ GUARDED_BY(mu_) = 0;
  // Lock order: notify_mu_, then mu_ (Push never holds both).
  Mutex notify_mu_ ACQUIRED_BEFORE(mu_);
  std::function<void()> notify_ GUARDED_BY(notify_mu_);
};

}  // namespace strata::engine::sched
