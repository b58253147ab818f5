// Engine: the serving engine's core loop. One engine thread owns the Scheduler, the KvManager and
// (uses) the ModelRunner; callers on any thread Submit requests, read their token streams, Cancel
// them and read Stats.
//
// Step = drain the inbox and cancellations -> Scheduler::Schedule (blocks for every scheduled token
// are allocated there, copy-on-write copies planned) -> block copies -> ModelRunner::Run over the
// whole batch -> per sampled sequence: Sampler (per completion, seeded with ChoiceSeed, penalties
// over prompt + generated) -> commit (num_computed, prefix-cache registration, append token, finish
// on stop ids / EOG / max_tokens, free blocks) -> push TokenEvents.
// n > 1: completion i samples with sampler::ChoiceSeed(seed, i) (seed itself for i = 0); the n
// first tokens are all drawn from the prompt's logits, then completions 1..n-1 are forked from
// completion 0 (sharing its blocks).
// Allocation: after a request is admitted, a step allocates nothing per token except the growth of
// the caller-visible event buffer (amortised) — token vectors are reserved to prompt + max_tokens,
// batch/logits/scratch vectors keep their capacity.
//
// Embedding requests (SubmitRequest::kind == kEmbed; the runner must have hidden-state output,
// hidden_dim() > 0): their prompt chunks are batched like any other, with BatchSeq::want_hidden;
// after each chunk the engine adds its rows to the request's running sum (double, position order),
// and after the last one it pushes the one final event carrying the L2-normalised mean and frees
// the request's blocks.
//
// Prompt logprobs (SubmitRequest::prompt_logprobs >= 0): until they are delivered the request's
// prompt chunks run with BatchSeq::want_all_logits and it reads no cached prefix (see
// RequestState::reads_no_cache); after each chunk the engine records the log-softmax of the next
// prompt token and the top-k at each position, and the first token events carry them.
//
// Tiered KV (AttachKvTier): each step, a waiting request whose reusable blocks are not all in the
// pool — a new request, one whose cached blocks were evicted while it waited, or a preempted one
// (single completion) — has the missing blocks prefetched from the lower tiers (the scheduler holds
// it at most prefetch_timeout_s; a slow or failing tier only costs that wait, then the blocks are
// computed); loaded blocks are adopted at admission and skip prefill. A request is prefetched again
// only when its pool coverage dropped since its last prefetch (so misses are not retried). New
// prefetches get up to 2 ms (kPrefetchSyncWait) to finish within the step that started them, so a
// quick answer (a local miss or hit) admits the request in that step rather than the next. Each
// request's prefetch state is its TierStaging (tier_staging.h); the loop only starts and polls
// them. Cached blocks evicted from the pool are demoted to the tiers; newly computed blocks are
// published (write-through) when the port wants them. FlushKvTier() demotes every cached block
// (graceful shutdown, so a restarted server finds them on disk).
//
// Block events: the KV manager reports every block entering or leaving the prefix cache to the
// engine's KvEventLog (kv_events()), with or without tiers; the log never changes what the engine
// does.
//
// Prefix-cache salt: the engine composes every request's salt from the model salt
// (SetModelSalt) and the request's facts (SubmitRequest::adapter, ::tenant); see cachekey.
// LoRA: a request's adapter (SubmitRequest::lora) replaces its `adapter` fact with the adapter's
// digest at Submit (so its blocks are keyed on the adapter's content), is applied by the runner to
// its rows (BatchSeq::lora, the pointer valid for the Run; the request holds the adapter), and is
// scheduled within the scheduler's active set of max_loras adapters (scheduler.h). EngineStats
// lists the active, running and waiting adapters by name.
//
// Ownership: the Engine does not own the runner, the clock or the block copier's target; they must
// outlive it. Thread contract: Submit/Cancel/Stats are thread-safe. Either Start() the engine
// thread, or drive it with Step() from a single thread (deterministic tests) — never both.
// Deadlines: at the start of each step, a request that has not been admitted yet and whose
// SubmitRequest::deadline has passed (engine clock) is ended with finish_reason error and a
// DeadlineExceeded status (counted in EngineStats::deadline_expired).
// Displacement: when the waiting queue is full (max_queued_requests / max_queued_prompt_tokens),
// Submit does not refuse a request if never-started requests of a lower priority class are queued:
// the newest one of the lowest class strictly below the new request's (then the next newest, until
// the bound holds) is displaced — ended at the next step with finish_reason error and a
// ResourceExhausted status (EngineStats::displaced) — and the new one is accepted. A victim the
// engine admitted meanwhile (the race between Submit and the step) keeps running; only requests
// that never started are ended.
// Errors: Submit returns InvalidArgument (field named) or ResourceExhausted (queue bounds, nothing
// to displace); a runner failure ends the requests of that batch with finish_reason error.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "engine/kv/kv_manager.h"
#include "engine/runner/model_runner.h"
#include "engine/sched/clock.h"
#include "engine/sched/request.h"
#include "engine/sched/scheduler.h"
#include "engine/sched/tier_port.h"

namespace strata::engine::sched {

// Performs copy-on-write block copies in KV storage (e.g. KvStorage::CopyBlock for each entry).
using BlockCopyFn = std::function<void(std::span<const BlockCopy>)>;

struct EngineStats {
  int running_requests = 0;
  int running_seqs = 0;
  int waiting_requests = 0;  // in the scheduler's queue, including preempted ones
  int queued_requests = 0;   // accepted, never started (the admission bound counts these)
  int kv_num_blocks = 0;
  int kv_used_blocks = 0;
  int kv_cached_blocks = 0;
  double kv_usage = 0.0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t tokens_computed = 0;  // tokens fed to the runner (prefill, recompute, decode)
  int64_t generated_tokens = 0;
  int64_t finished_requests = 0;
  int64_t tier_hit_tokens = 0;         // prompt tokens served from lower KV tiers
  int64_t tier_prefetches = 0;         // prefetches started
  int64_t tier_prefetch_timeouts = 0;  // prefetches given up after prefetch_timeout_s
  // Decode-only steps: every scheduled sequence computed one generated token and sampled the next
  // (no prompt chunk in the step). Their wall time (engine clock) covers the forward pass and
  // sampling, so decode_tokens / decode_seconds is the steady-state generation rate.
  int64_t decode_steps = 0;
  int64_t decode_tokens = 0;
  double decode_seconds = 0.0;
  int64_t embeddings = 0;        // embedding requests completed (also counted in finished_requests)
  int64_t deadline_expired = 0;  // ended unadmitted at their deadline (DeadlineExceeded)
  int64_t displaced = 0;         // ended unadmitted for a higher-priority one (ResourceExhausted)
  // LoRA adapters (SubmitRequest::lora), by name, each list sorted and unique: the active set
  // (every name a slot was admitted under; an idle slot stays active until evicted), the adapters
  // of running requests and of waiting ones (preempted included; what vLLM's lora_requests_info
  // reports as running/waiting), and max_loras (the active set's size, SchedulerConfig).
  std::vector<std::string> active_loras, running_loras, waiting_loras;
  int max_loras = 1;
  // Requests ended so far (any finish reason) per adapter name, sorted by name; base-model requests
  // are not listed.
  std::vector<std::pair<std::string, int64_t>> lora_requests;
};

struct RequestHandle {
  RequestId id = 0;
  std::shared_ptr<RequestStream> stream;
};

class Engine : private kv::KvManager::Listener {
 public:
  // Validates the configs. `copy_blocks` is needed for n > 1 (copy-on-write); without it Submit
  // rejects n > 1.
  static Result<std::unique_ptr<Engine>> Create(runner::ModelRunner* runner,
                                                const kv::KvManagerConfig& kv_config,
                                                const SchedulerConfig& sched_config,
                                                const Clock* clock, BlockCopyFn copy_blocks = {});
  ~Engine();  // Stop()s; requests still in flight end with finish_reason cancelled.

  // Validates and queues a request. Thread-safe.
  Result<RequestHandle> Submit(SubmitRequest req) EXCLUDES(mu_);
  // Cancels a request: its blocks are freed at the start of the next step, its stream ends with
  // finish_reason cancelled. Unknown/finished ids are ignored. Thread-safe.
  void Cancel(RequestId id) EXCLUDES(mu_);
  // A consistent snapshot as of the end of the last step. Thread-safe.
  EngineStats Stats() const EXCLUDES(stats_mu_);
  // Width of an embedding (the runner's hidden_dim); 0: embedding requests are refused.
  // Thread-safe.
  int hidden_dim() const { return hidden_dim_; }

  // Starts / stops the engine thread.
  void Start() EXCLUDES(mu_);
  void Stop() EXCLUDES(mu_);

  // One step on the calling thread (when the engine thread is not started). Returns the runner's
  // error, if any (the affected requests have been ended with finish_reason error).
  Status Step();
  // Whether anything is queued, waiting or running (engine-thread view + inbox).
  bool HasWork() const EXCLUDES(mu_);

  // Engine-thread-only views for tests.
  const kv::KvManager& kv() const { return kv_; }
  // The block events of this engine's KV pool (every prefix-cache registration and eviction, see
  // kv::KvEventLog), plus whatever the assembly forwards from the KV tiers (serving_engine.cc).
  // Thread-safe; lives as long as the engine (shared: tier observers may hold it longer).
  kv::KvEventLog& kv_events() const { return *events_; }
  const std::shared_ptr<kv::KvEventLog>& shared_kv_events() const { return events_; }
  // The model salt (SetModelSalt) and the KV block size: what a gateway needs to compute this
  // engine's block keys. Thread-safe once the engine runs (read-only by then).
  const std::vector<uint8_t>& model_salt() const { return model_salt_; }
  int block_size() const { return kv_cfg_.block_size; }
  // The prefix-cache salt of the served model and KV format (cachekey::ModelSalt). Each request's
  // salt is composed from it and the request's facts (adapter, tenant: cachekey::RequestSalt), so
  // callers never build salts. Before Start()/Step()/Submit(); empty by default.
  void SetModelSalt(std::vector<uint8_t> salt);
  // Before Start()/Step(). `port` must outlive the engine.
  void AttachKvTier(TierPort* port, double prefetch_timeout_s);
  // Demotes every block in the prefix cache to the tiers. Only when the engine thread is stopped
  // (after Stop(), or between Step() calls).
  void FlushKvTier();

  const Scheduler& scheduler() const { return sched_; }
  const SchedulerOutput& last_schedule() const { return *last_out_; }

 private:
  Engine(runner::ModelRunner* runner, const kv::KvManagerConfig& kv_config,
         const SchedulerConfig& sched_config, const Clock* clock, BlockCopyFn copy_blocks);
  void Loop();
  void Drain();
  // One step's phases (Step): the batch of a schedule (batch_), the runner's output checked
  // against it, then committed (samples, embeddings, stamps) or failed (every request in it).
  struct BatchShape {
    int rows = 0;             // logit rows the batch asks for
    int64_t hidden_rows = 0;  // hidden rows (embedding requests)
    bool decode_only = true;  // every entry one sampled decode token
  };
  BatchShape BuildBatch(const SchedulerOutput& out, TimePoint step_start);
  Status CheckRunnerOutput(const BatchShape& shape) const;
  void CommitStep(const SchedulerOutput& out, const BatchShape& shape, TimePoint step_start);
  void FailStep(const SchedulerOutput& out, const Status& status);
  void SampleAndCommit(const ScheduledSeq& e, std::span<const float> logits);
  // Embedding requests: adds a chunk's hidden rows to the running sum; after the last chunk,
  // pushes the pooled vector and finishes the request.
  void AccumulateEmbedding(const ScheduledSeq& e, const float* rows);
  void FinishEmbedding(RequestState* r);
  // Prompt logprobs of the positions a want_all_logits chunk predicts (rows = its logits).
  void RecordPromptLogprobs(const ScheduledSeq& e, const float* rows);
  void Emit(RequestState* r, int index, int32_t token, FinishReason why, sampler::Sampler* sampler,
            std::shared_ptr<const PromptLogprobs> prompt_lp = nullptr,
            std::shared_ptr<const RequestTimeline> timeline = nullptr);
  // Timeline stamps (timeline.h): a scheduled entry (first_scheduled, cached tokens, a resumption)
  // before the forward pass, a computed one (prefill chunk, decode step) after it; EndTimeline
  // stamps `finished` at run_end_ and returns the snapshot of a completion's terminal event.
  void StampScheduled(const ScheduledSeq& e, TimePoint step_start);
  void StampComputed(const ScheduledSeq& e, TimePoint step_start);
  std::shared_ptr<const RequestTimeline> EndTimeline(RequestState* r);
  void EndRequest(RequestId id, FinishReason why, const Status& error);
  // Removes a never-started request from the queue bound's count (no-op when it is not counted:
  // already dequeued or displaced).
  void Dequeued(RequestId id) EXCLUDES(mu_);
  // Submit's displacement (see the class comment): which queued_ entries to displace so that a
  // request of `priority` with `prompt_tokens` fits the bound. False (none) when it cannot fit.
  bool PickVictims(Priority priority, int64_t prompt_tokens, std::vector<size_t>* victims) const
      REQUIRES(mu_);
  // Ends the displaced and the expired waiting requests (engine thread, in Drain).
  void EndDisplacedAndExpired();
  void PublishStats() EXCLUDES(mu_, stats_mu_);
  void CountLoraRequest(const RequestState& r);  // an ended request, into lora_requests
  bool RefreshPrefetches();                      // true when a prefetch was started
  bool MaybePrefetch(RequestState* r);
  void PollPrefetches();
  uint32_t TenantTag(const std::string& tenant);
  void OnEvict(int32_t block, const kv::BlockHash& hash, uint32_t tag) override;
  void OnRegister(int32_t block, const kv::BlockHash& hash, uint32_t tag) override;

  runner::ModelRunner* runner_;
  kv::KvManagerConfig kv_cfg_;
  const Clock* clock_;
  BlockCopyFn copy_blocks_;
  std::shared_ptr<kv::KvEventLog> events_;  // before kv_, which reports into it
  kv::KvManager kv_;
  Scheduler sched_;
  const int n_vocab_;
  const int hidden_dim_;
  const SchedulerOutput* last_out_ = nullptr;
  std::vector<uint8_t> model_salt_;  // set before any Submit; read-only afterwards

  // Inbox.
  mutable Mutex mu_;
  CondVar cv_;
  std::vector<std::unique_ptr<RequestState>> inbox_ GUARDED_BY(mu_);
  std::vector<RequestId> cancels_ GUARDED_BY(mu_);
  int queued_requests_ GUARDED_BY(mu_) = 0;  // accepted, never started (inbox + scheduler)
  int64_t queued_prompt_tokens_ GUARDED_BY(mu_) = 0;
  // The requests those counts cover, in id (= arrival) order: the candidates for displacement.
  struct Queued {
    RequestId id;
    Priority priority;
    int64_t prompt_tokens;
  };
  std::vector<Queued> queued_ GUARDED_BY(mu_);
  std::vector<RequestId> displaced_ GUARDED_BY(mu_);  // to end at the next step
  RequestId next_id_ GUARDED_BY(mu_) = 1;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::atomic<bool> running_thread_{false};

  // Engine-thread state.
  std::vector<std::unique_ptr<RequestState>> drained_, finished_;
  std::vector<RequestId> drained_cancels_, drained_displaced_, expired_;
  std::vector<runner::BatchSeq> batch_;
  std::vector<float> logits_;
  std::vector<float> hidden_;  // want_hidden rows of the step (embedding requests)
  std::vector<float> lp_scratch_;
  std::vector<int32_t> id_scratch_;
  std::vector<int32_t> first_tokens_;
  TimePoint run_end_{};  // when this step's forward pass returned (engine clock)
  std::vector<int32_t> no_ban_;
  std::atomic<bool> has_work_{false};
  std::vector<RequestId> id_list_;

  // Tiered KV (engine thread).
  TierPort* tier_ = nullptr;
  double prefetch_timeout_s_ = 0.05;
  static constexpr std::chrono::microseconds kPrefetchSyncWait{2000};
  std::vector<RequestId> fetching_;   // waiting requests whose TierStaging has a fetch in flight
  std::vector<std::string> tenants_;  // tag -> tenant ("" is tag 0)
  int64_t tier_prefetches_ = 0, tier_timeouts_ = 0;

  mutable Mutex stats_mu_;
  EngineStats stats_ GUARDED_BY(stats_mu_);
  int64_t steps_ = 0, tokens_computed_ = 0, generated_tokens_ = 0, finished_requests_ = 0;
  int64_t decode_steps_ = 0, decode_tokens_ = 0;
  double decode_seconds_ = 0.0;
  int64_t embeddings_ = 0;
  int64_t deadline_expired_ = 0, displaced_count_ = 0;
  // LoRA statistics (engine thread): ended requests per adapter name, and scratch for the name
  // lists (the published lists are replaced only when they change, so steady steps allocate
  // nothing).
  std::map<std::string, int64_t, std::less<>> lora_requests_;
  bool lora_requests_changed_ = false;
  std::vector<const std::string*> lora_active_, lora_running_, lora_waiting_;
};

}  // namespace strata::engine::sched
