// Scheduler: decides, each engine step, which sequences run how many tokens — pure logic over the
// KvManager, no threads, time from an injected Clock.
//
// Model. A request has n completions ("sequences"). Before its prompt is computed a request with
// n > 1 has one sequence (index 0); when the prompt's last chunk is sampled the engine samples n
// first tokens and calls Fork, which creates the other completions sharing the prompt's blocks.
// A sequence holds tokens = prompt + generated and num_computed = positions whose KV is written;
// its pending tokens are tokens[num_computed, size). Pending == 1 is a decode, more is a prefill
// (a prompt, or the recomputation of a preempted sequence); a chunk that reaches the end of
// `tokens` is sampled.
//
// Priority (a strict total order, recomputed every step):
//   key = (level, deadline or +inf, arrival order), smaller first, where
//   level = priority - floor(time since submission / aging_s)   (gold 0, silver 1, bronze 2)
// so a request that has waited aging_s moves up one level, and after (priority + 1) * aging_s it is
// ahead of every newly arrived gold request: bronze never starves under a gold flood. Level may go
// below gold. The same key orders waiting requests (admission) and running ones (who is preempted).
//
// Step (Schedule): token budget max_batched_tokens, at most max_num_seqs admitted sequences.
//   A. running decodes in priority order (1 token each);
//   B. in priority order, prefill chunks of running sequences and admissions of waiting requests
//      (prefix-cache hits via KvPlan::MatchPrefix skip computed tokens; a prompt larger than the
//      remaining budget is split into chunks over several steps — chunked prefill).
//   When a sequence cannot get its blocks (its KvPlan does not fit) or a waiting request
//   has no seat, the lowest-priority running request below it is preempted — even if it was already
//   scheduled for a decode in this step (it is taken out of the batch) — so a gold request arriving
//   at a full engine is scheduled before bronze requests that are merely decoding. If nothing lower
//   is running, a running request preempts itself; a waiting one stays waiting (admission stops
//   for this step, keeping the order strict).
// Shared-prefix deferral: a waiting request whose first not-yet-cached FULL prompt block (same
// chained hash: same salt and preceding tokens) is currently being computed by a running request's
// prefill is skipped for this step (it keeps its place; lower-priority requests may still be
// admitted) and admitted once that block is committed to the prefix cache, so N simultaneous
// requests with a common prefix compute it once instead of N times. "In flight" = the full prompt
// blocks of running requests from their admission's prefix hit up to what they have committed;
// they leave the set on commit, preemption, abort and finish, so a deferred request always becomes
// admissible (no deadlock). Only blocks a prefix hit could give the waiting request count
// (MatchPrefix always leaves one token to compute). Off when the KvManager's prefix cache is off.
// Prompt block hashes are computed once per request (lazily) and cached in its RequestState.
//
// Preemption is by recompute: all blocks are freed, the request goes back to waiting, and on
// readmission each sequence recomputes prompt + generated tokens (full blocks usually come back
// from the prefix cache). Its Samplers are kept, so it resumes exactly where it was and produces
// the same tokens. There is no separate swap space: on CPU the KV already lives in host memory. The
// preempted request's full blocks stay in the prefix cache, and with a RAM KV tier configured
// (Engine::AttachKvTier) the ones the pool recycles meanwhile are demoted there and prefetched back
// at readmission -- that is the "swap" path; only blocks lost from every tier and the last partial
// block are recomputed. Measured (docs/perf.md, `bench offline --kv-cache-memory 64MiB`): the RAM
// tier restores most preempted blocks and raises 1B throughput over pure recompute.
//
// Tiered KV (see Engine::AttachKvTier): a waiting request whose TierStaging is fetching is skipped
// like a deferred one (it keeps its place) while the engine prefetches its blocks from lower
// tiers. At its next admission (first, or after a preemption; single-completion requests) the
// staged blocks that continue the pool hit are planned for adoption into the pool together with
// the prefix hit and the first chunk (KvPlan::Adopt; content written by the BlockFillFn on
// apply) and skipped like a prefix hit; `tier_hit_tokens` counts them. MatchPrefix's rule holds
// for the total: at least one token of the sequence is always computed.
//
// KV plans: every admission and every chunk is first planned on the KvManager (prefix hits,
// adoption, slots, copy-on-write) and applied only once it fits, preempting lower-priority
// requests between plans; a request that cannot fit is left exactly as it was (no hit counted,
// nothing to undo). The chunk sizes of an admission are fixed by the budget when it started.
//
// Embedding requests (RequestKind::kEmbed) are scheduled like a prompt with no decode: chunks of
// the prompt, the last one marked `sample`, after which the engine calls FinishEmbedding. They
// never touch the prefix cache: no MatchPrefix at admission (every position must be computed), no
// registration of their blocks on commit, no in-flight hashes, no shared-prefix deferral.
//
// LoRA active set (SubmitRequest::lora): at most max_loras distinct adapters are active, and every
// running request's adapter is one of them, so no step ever carries more than max_loras distinct
// adapters (the runner's cost grows with them). An adapter is identified by its digest: two names
// of the same file and scale are one slot (they compute the same thing and share prefix-cache
// blocks); the slot lists every name it was admitted under. A running request pins its slot;
// preemption, finish and abort unpin it (the slot stays active, unpinned, until evicted). A
// waiting request whose adapter is not active takes a free slot, or evicts the least recently
// used unpinned one (pin and unpin both count as a use); when every slot is pinned it is skipped
// for the step, keeping its place, and requests behind it that fit — the base model, or an active
// adapter — may still be admitted (no head-of-line blocking across adapters; priority order holds
// among the requests that can go). So that a busy adapter cannot starve it, the first such
// request for each missing adapter reserves one pinned slot for the step (the one with the fewest
// running requests, then the least recently used): requests behind it cannot pin or take that
// slot, so it drains as its running requests finish and the waiting request gets it. Requests
// ahead of it in priority order are not held back. A blocked request never preempts for a slot.
//
// Deadlines: a request that has never started (never been admitted to running) when its deadline
// passes is expired by the engine (ExpiredWaiting, once per step, before Schedule), so a client
// that set deadline_ms learns at once that its request was not served in time. Started requests
// keep running: the deadline bounds the wait for admission, not the generation.
//
// Admission bound: requests that have never started (never been admitted to running) are limited
// by max_queued_requests and max_queued_prompt_tokens; preempted requests are not counted (they are
// never rejected once accepted). The bound is checked in one place, where requests are accepted
// (Engine::Submit, with CheckQueueBound); the scheduler only counts them.
//
// Ownership: the Scheduler owns every RequestState until it is finished and taken with
// TakeFinished (or returned by Abort). It does not own the KvManager or Clock.
// Thread contract: single-threaded (the engine thread).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/kv/kv_manager.h"
#include "engine/sampler/sampler.h"
#include "engine/sched/clock.h"
#include "engine/sched/request.h"
#include "engine/sched/tier_staging.h"
#include "engine/sched/timeline.h"

namespace strata::engine::sched {

class RequestStream;

struct SchedulerConfig {
  int max_batched_tokens = 2048;  // tokens per step (prefill chunks + decodes)
  // When > 0: in a step that runs decodes, prompt chunks get at most this many tokens, so a long
  // prompt arriving at a busy engine cannot stall everyone's next token for a whole
  // max_batched_tokens prefill (it is chunked over several steps instead). 0: no cap.
  int max_prefill_tokens_with_decodes = 0;
  int max_num_seqs = 64;          // sequences admitted (and so per step)
  int max_queued_requests = 256;  // the replica default (engine.scheduler, serving_config.h)
  int64_t max_queued_prompt_tokens = 1 << 20;
  int max_model_len = 4096;  // positions per sequence
  double aging_s = 10.0;     // waiting this long promotes a request by one priority level
  // Distinct LoRA adapters active at once (vLLM's --max-loras): the most any step carries.
  int max_loras = 1;
  static constexpr int kMaxLoras = 64;
  Status Validate() const;
};

// ResourceExhausted (naming the bound) when one more never-started request with `prompt_tokens`
// would exceed max_queued_requests or max_queued_prompt_tokens, given what is already queued.
Status CheckQueueBound(const SchedulerConfig& config, int queued_requests,
                       int64_t queued_prompt_tokens, int64_t prompt_tokens);

struct SequenceState {
  int index = 0;
  kv::SeqId kv_id = -1;  // -1 while it holds no blocks (waiting / finished)
  std::vector<int32_t> tokens;
  int num_computed = 0;
  int num_generated = 0;
  FinishReason finish = FinishReason::kNone;
  std::unique_ptr<sampler::Sampler> sampler;  // used by the engine; kept across preemption
  bool live() const { return finish == FinishReason::kNone; }
  int pending() const { return static_cast<int>(tokens.size()) - num_computed; }
};

struct RequestState {
  enum class Phase : uint8_t { kWaiting, kRunning, kFinished };
  RequestId id = 0;
  SubmitRequest req;
  TimePoint arrival{};
  uint64_t arrival_seq = 0;
  int prompt_len = 0;
  Phase phase = Phase::kWaiting;
  bool started = false;  // admitted to running at least once
  bool forked = false;   // n > 1 completions created (always true for n == 1)
  int num_preemptions = 0;
  std::vector<SequenceState> seqs;        // n entries; before the fork only seqs[0] is active
  std::shared_ptr<RequestStream> stream;  // the engine's; unused by the scheduler

  // Scheduler-internal: prompt full-block hashes (computed once, when first needed) and the range
  // [inflight_lo, inflight_hi) of them this running request has in the scheduler's in-flight set.
  std::vector<kv::BlockHash> prompt_hashes;
  bool hashes_ready = false;
  int inflight_lo = 0;
  int inflight_hi = 0;
  int lora_slot = -1;  // the active-set slot this running request pins (-1: none / base model)

  // Set by the engine: the prefix-cache salt of every block of this request (composed from the
  // model's and the request's facts, cachekey::RequestSalt); the tenant's tag for the KvManager;
  // the request's prefetch/adoption state when the engine has KV tiers (else null).
  std::vector<uint8_t> salt;
  uint32_t tenant_tag = 0;
  std::unique_ptr<TierStaging> tier;

  // Embedding requests (set by the engine): the running sum, in double and position order, of the
  // final-normed hidden rows computed so far (hidden_dim entries; restarted at position 0, so a
  // preempted request recomputes it).
  std::vector<double> embed_sum;
  // Prompt logprobs (SubmitRequest::prompt_logprobs >= 0, set by the engine): filled as prompt
  // chunks are computed (a recompute rewrites the same values), handed to the first token events.
  std::shared_ptr<PromptLogprobs> prompt_lp;
  bool prompt_lp_sent = false;
  // When each phase happened (timeline.h): stamped by the engine, preemptions by the scheduler.
  RequestTimeline timeline;
  int timeline_fetch = -1;  // the tier fetch in flight's index in timeline.tier_fetches

  // Scheduler-internal, valid during Schedule().
  int64_t key_level = 0;
  int64_t key_deadline = 0;
  uint64_t preempted_in_step = 0;
  int num_active() const { return forked ? static_cast<int>(seqs.size()) : 1; }
  int seats() const;  // sequence slots held while running
  bool tier_fetching() const { return tier != nullptr && tier->fetching(); }  // held by a prefetch
  bool is_embed() const { return req.kind == RequestKind::kEmbed; }
  // Needs the logits of every prompt position (prompt logprobs not yet delivered).
  bool wants_prompt_logits() const { return prompt_lp != nullptr && !prompt_lp_sent; }
  // Computes every prompt position: reads no cached prefix (no hit, no tier adoption, no
  // shared-prefix deferral). Embeddings always; prompt-logprobs requests until delivered.
  bool reads_no_cache() const { return is_embed() || wants_prompt_logits(); }
};

// Builds a RequestState from a validated request (n sequences, tokens reserved to their final
// size).
std::unique_ptr<RequestState> MakeRequestState(RequestId id, SubmitRequest req, TimePoint arrival);

// Copy-on-write: before a sequence writes into a shared block, rows [0, num_slots) of src are
// copied into dst (all layers). `seq` is the KV sequence that will write.
struct BlockCopy {
  int32_t src = -1;
  int32_t dst = -1;
  int num_slots = 0;
  kv::SeqId seq = -1;
};

struct ScheduledSeq {
  RequestState* req = nullptr;
  int seq_index = 0;
  kv::SeqId kv_id = -1;
  int start_pos = 0;    // == the sequence's num_computed
  int num_tokens = 0;   // tokens[start_pos, start_pos + num_tokens) are fed
  bool sample = false;  // the chunk reaches the end of tokens: sample the next token
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;  // the batch, in priority order
  std::vector<BlockCopy> copies;   // to perform before the forward pass
  std::vector<RequestId> started;  // admitted for the first time in this step
  int num_tokens = 0;
  int num_preempted = 0;  // preemptions in this step
};

// One slot of the LoRA active set (see the header comment).
struct LoraSlot {
  std::string digest;              // the adapter's digest; "" = a free slot
  std::vector<std::string> names;  // the names it was admitted under since it became active
  int pins = 0;                    // running requests using it
  uint64_t last_used = 0;          // LRU clock: its last pin or unpin
  uint64_t reserved_step = 0;      // == the current step: held for a waiting request
  bool active() const { return !digest.empty(); }
};

// Writes a block's KV content loaded from a lower tier into the pool's storage (engine thread).
using BlockFillFn = std::function<void(int32_t block, const std::vector<uint8_t>& payload)>;

class Scheduler {
 public:
  // `kv` and `clock` must outlive the scheduler; `block_size` is the KvManager's.
  Scheduler(const SchedulerConfig& config, kv::KvManager* kv, int block_size, const Clock* clock);

  const SchedulerConfig& config() const { return cfg_; }
  // Queues a request (the caller has checked the queue bound: CheckQueueBound). The request must be
  // in phase kWaiting with a unique id.
  Status Add(std::unique_ptr<RequestState> r);

  // Plans one step. The returned reference is valid until the next Schedule/Abort/commit call.
  const SchedulerOutput& Schedule();

  // After the forward pass, for each scheduled entry (in batch order):
  //   the chunk's KV is written: advances num_computed, registers full blocks in the prefix cache.
  void CommitComputed(const ScheduledSeq& s);
  //   n > 1, first sample of the prompt: creates completions 1..n-1 sharing seqs[0]'s blocks.
  void Fork(RequestState* r);
  //   appends a sampled token; returns why the sequence finished (kNone: it continues). A finished
  //   sequence's blocks are freed at once; a request whose sequences all finished becomes
  //   kFinished.
  FinishReason AppendToken(RequestState* r, int seq_index, int32_t token);
  //   an embedding request's last chunk is committed: it finishes (kStop), its blocks are freed.
  void FinishEmbedding(RequestState* r);

  // Removes a request now, freeing its blocks; live sequences get `reason`. nullptr if unknown.
  std::unique_ptr<RequestState> Abort(RequestId id, FinishReason reason);
  // Deadlines: appends to `out` the ids of the never-started waiting requests whose
  // SubmitRequest::deadline is at or before `now`, in arrival order (the engine ends them with
  // DeadlineExceeded). A request that has started (running, or preempted back to waiting) never
  // expires: its deadline only orders it.
  void ExpiredWaiting(TimePoint now, std::vector<RequestId>* out) const;
  // Moves finished requests out (appends to `out`).
  void TakeFinished(std::vector<std::unique_ptr<RequestState>>* out);

  RequestState* Find(RequestId id) const;
  // Ids of every request the scheduler holds (waiting, running, finished-not-taken).
  std::vector<RequestId> AllIds() const;
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  const std::vector<RequestState*>& waiting() const { return waiting_; }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_running_seqs() const;
  int num_queued_never_started() const { return queued_requests_; }
  int64_t queued_prompt_tokens() const { return queued_prompt_tokens_; }
  int64_t num_preemptions() const { return preemptions_; }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  // Shared-prefix deferral: admissions skipped so far (one per request per step), and the number
  // of block hashes currently in flight (counted with multiplicity).
  int64_t num_deferrals() const { return deferrals_; }
  int num_inflight_blocks() const { return inflight_count_; }
  // Checks that the in-flight set equals what the running requests' states imply (tests).
  Status CheckInflight() const;
  // LoRA active set: max_loras slots (free ones have an empty digest).
  const std::vector<LoraSlot>& lora_slots() const { return lora_slots_; }
  // Checks the active set against the running requests: every running request with an adapter
  // pins the slot of its digest, pin counts match, digests are unique (tests).
  Status CheckLoras() const;
  // Adapter names (not unique, unordered; pointers into the requests and slots, valid until the
  // next Schedule/Abort/commit call) of the active slots, the running and the waiting requests.
  void LoraNames(std::vector<const std::string*>* active, std::vector<const std::string*>* running,
                 std::vector<const std::string*>* waiting) const;
  // Tiered KV: the fill function for adopted blocks (without one, staged blocks are ignored).
  void SetBlockFill(BlockFillFn fill) { fill_ = std::move(fill); }
  int64_t tier_hit_tokens() const { return tier_hit_tokens_; }
  // Computes r's prompt full-block hashes once (cached in the RequestState).
  void EnsureHashes(RequestState* r);
  // Effective level (see the header comment) at `now`.
  int64_t Level(const RequestState& r, TimePoint now) const;

 private:
  static bool Before(const RequestState* a, const RequestState* b);
  bool TrySchedule(RequestState* r, SequenceState& s, int n);
  bool PlanAdmission(RequestState* r, int budget);
  bool Admit(RequestState* r);
  RequestState* LowestRunningBelow(const RequestState* r) const;
  void Preempt(RequestState* victim);
  void Unschedule(RequestState* r);
  void ReleaseBlocks(RequestState* r);
  void MarkNotQueued(RequestState* r);
  void FinishRequest(RequestState* r);
  static void Remove(std::vector<RequestState*>* v, RequestState* r);
  static int Progress(const RequestState& r);  // max num_computed over active live sequences
  void AddInflight(RequestState* r);
  void AdvanceInflight(RequestState* r);
  void DropInflight(RequestState* r);
  bool ShouldDefer(RequestState* r);
  // LoRA active set: whether r's adapter can be active now (base model: always); when not,
  // reserves a pinned slot for it (see the header comment). PinLora (after Admit) activates and
  // pins it; UnpinLora (leaving running) releases the pin.
  bool LoraAdmissible(const RequestState* r);
  int FindLoraSlot(const std::string& digest) const;
  int ClaimableLoraSlot() const;  // a free slot, else the LRU unpinned unreserved one; -1: none
  void PinLora(RequestState* r);
  void UnpinLora(RequestState* r);
  kv::SeqId NewKvId() { return next_kv_id_++; }

  SchedulerConfig cfg_;
  kv::KvManager* kv_;
  int block_size_;
  const Clock* clock_;
  std::unordered_map<RequestId, std::unique_ptr<RequestState>> all_;
  std::vector<RequestState*> waiting_, running_, finished_;
  std::vector<RequestState*> order_;  // scratch
  SchedulerOutput out_;
  int budget_ = 0;
  int seats_used_ = 0;
  uint64_t step_ = 0;
  uint64_t next_arrival_ = 0;
  kv::SeqId next_kv_id_ = 1;
  int queued_requests_ = 0;
  int64_t queued_prompt_tokens_ = 0;
  int64_t preemptions_ = 0;
  struct HashKey {
    size_t operator()(const kv::BlockHash& h) const;
  };
  bool defer_enabled_ = false;                                // the KvManager's prefix cache is on
  std::unordered_map<kv::BlockHash, int, HashKey> inflight_;  // hash -> providers computing it
  int inflight_count_ = 0;
  int64_t deferrals_ = 0;
  BlockFillFn fill_;
  int64_t tier_hit_tokens_ = 0;
  std::vector<LoraSlot> lora_slots_;  // max_loras entries
  uint64_t lora_clock_ = 0;
  std::vector<const std::string*> lora_blocked_;  // digests that reserved a slot in this step
  // Scratch of the KV plans (capacity kept across steps).
  kv::KvPlan plan_;
  std::vector<kv::CopyOp> copies_;
  std::vector<int> hit_, chunk_;  // per sequence of the admission being planned
  TierStaging::Staged staged_;
};

}  // namespace strata::engine::sched
