#include "engine/sched/engine.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "cachekey/block_hash.h"

namespace strata::engine::sched {

using runner::BatchSeq;
using runner::ModelRunner;
using sampler::Sampler;
using sampler::SamplingParams;

Result<std::unique_ptr<Engine>> Engine::Create(ModelRunner* runner,
                                               const kv::KvManagerConfig& kv_config,
                                               const SchedulerConfig& sched_config,
                                               const Clock* clock, BlockCopyFn copy_blocks) {
  if (runner == nullptr) return Status::InvalidArgument("runner: must not be null");
  if (clock == nullptr) return Status::InvalidArgument("clock: must not be null");
  if (runner->n_vocab() < 1) return Status::InvalidArgument("runner: n_vocab must be >= 1");
  if (Status s = kv_config.Validate(); !s.ok()) return s.WithContext("kv config");
  if (Status s = sched_config.Validate(); !s.ok()) return s.WithContext("scheduler config");
  return std::unique_ptr<Engine>(
      new Engine(runner, kv_config, sched_config, clock, std::move(copy_blocks)));
}

Engine::Engine(ModelRunner* runner, const kv::KvManagerConfig& kv_config,
               const SchedulerConfig& sched_config, const Clock* clock, BlockCopyFn copy_blocks)
    : runner_(runner),
      kv_cfg_(kv_config),
      clock_(clock),
      copy_blocks_(std::move(copy_blocks)),
      events_(std::make_shared<kv::KvEventLog>()),
      kv_(kv_config),
      sched_(sched_config, &kv_, kv_config.block_size, clock),
      n_vocab_(runner->n_vocab()),
      hidden_dim_(std::max(0, runner->hidden_dim())) {
  kv_.SetEventLog(events_.get());
  const size_t v = static_cast<size_t>(n_vocab_);
  batch_.reserve(static_cast<size_t>(sched_config.max_num_seqs));
  logits_.reserve(static_cast<size_t>(sched_config.max_num_seqs) * v);
  lp_scratch_.resize(v);
  id_scratch_.resize(v);
  first_tokens_.reserve(kMaxN);
  PublishStats();
}

Engine::~Engine() {
  Stop();
  // Whatever is left (Step-driven use, or requests the thread never finished) ends cancelled.
  std::vector<std::unique_ptr<RequestState>> inbox;
  {
    MutexLock lk(&mu_);
    inbox.swap(inbox_);
  }
  for (auto& r : inbox) {
    for (int i = 0; i < r->req.n; ++i) {
      TokenEvent ev;
      ev.index = i;
      ev.finish = FinishReason::kCancelled;
      r->stream->Push(ev);
    }
  }
  for (RequestId id : sched_.AllIds()) EndRequest(id, FinishReason::kCancelled, Status::Ok());
}

Result<RequestHandle> Engine::Submit(SubmitRequest req) {
  const SchedulerConfig& sc = sched_.config();
  // The adapter's content digest, not the caller's string, keys its prefix-cache blocks.
  if (req.lora != nullptr) req.adapter = req.lora->digest();
  RETURN_IF_ERROR(req.Validate(n_vocab_, sc.max_model_len));
  const bool embed = req.kind == RequestKind::kEmbed;
  if (embed && hidden_dim_ == 0)
    return Status::Unimplemented(
        "kind: embeddings need a runner with hidden-state output, and this one has none");
  if (req.n > sc.max_num_seqs) {
    return Status::InvalidField("n", std::to_string(req.n) + " completions exceed max_num_seqs (" +
                                         std::to_string(sc.max_num_seqs) + ")");
  }
  if (req.n > 1 && !copy_blocks_)
    return Status::Unimplemented(
               "n: n > 1 needs copy-on-write, and this engine has no block copier")
        .WithField("n");
  // The request must fit the KV pool on its own (else it could never finish).
  const int64_t bs = kv_cfg_.block_size;
  const int64_t total = req.MaxPositions();
  const int64_t blocks = (total + bs - 1) / bs + (req.n - 1) * ((req.max_tokens + bs - 1) / bs + 1);
  if (blocks > kv_cfg_.num_blocks) {
    return Status::InvalidField(
        "max_tokens", "prompt + max_tokens (x n) need up to " + std::to_string(blocks) +
                          " KV blocks, the pool has " + std::to_string(kv_cfg_.num_blocks));
  }
  const int64_t prompt_tokens = static_cast<int64_t>(req.prompt.size());
  const int n = req.n;
  const SamplingParams sp = req.sampling;
  // Build the state (its salt, and its samplers or the embedding sum) outside the lock.
  std::vector<uint8_t> salt =
      cachekey::RequestSalt(model_salt_, {.adapter = req.adapter, .tenant = req.tenant});
  auto state = MakeRequestState(0, std::move(req), clock_->Now());
  state->timeline.submitted = state->arrival;
  state->salt = std::move(salt);
  if (embed) state->embed_sum.assign(static_cast<size_t>(hidden_dim_), 0.0);
  if (!embed && state->req.prompt_logprobs >= 0) {
    auto lp = std::make_shared<PromptLogprobs>();
    lp->top_k = std::min(state->req.prompt_logprobs, n_vocab_);
    lp->logprob.assign(static_cast<size_t>(prompt_tokens), std::nanf(""));
    lp->top.resize(static_cast<size_t>(prompt_tokens) * static_cast<size_t>(lp->top_k));
    state->prompt_lp = std::move(lp);
  }
  for (int i = 0; i < (embed ? 0 : n); ++i) {
    SamplingParams p = sp;
    p.seed = sampler::ChoiceSeed(sp.seed, i);
    state->seqs[static_cast<size_t>(i)].sampler =
        std::make_unique<Sampler>(p, static_cast<size_t>(n_vocab_));
  }
  RequestHandle h;
  {
    MutexLock lk(&mu_);
    if (Status bound = CheckQueueBound(sc, queued_requests_, queued_prompt_tokens_, prompt_tokens);
        !bound.ok()) {
      std::vector<size_t> victims;  // rare path: allocation is fine
      if (!PickVictims(state->req.priority, prompt_tokens, &victims)) return bound;
      std::sort(victims.begin(), victims.end());
      for (size_t i = victims.size(); i-- > 0;) {
        const Queued& q = queued_[victims[i]];
        displaced_.push_back(q.id);
        queued_requests_ -= 1;
        queued_prompt_tokens_ -= q.prompt_tokens;
        queued_.erase(queued_.begin() + static_cast<std::ptrdiff_t>(victims[i]));
      }
    }
    state->id = next_id_++;
    queued_.push_back({state->id, state->req.priority, prompt_tokens});
    state->stream = std::make_shared<RequestStream>(state->id, n);
    h.id = state->id;
    h.stream = state->stream;
    queued_requests_ += 1;
    queued_prompt_tokens_ += prompt_tokens;
    inbox_.push_back(std::move(state));
  }
  cv_.NotifyOne();
  return h;
}

void Engine::Cancel(RequestId id) {
  {
    MutexLock lk(&mu_);
    cancels_.push_back(id);
  }
  cv_.NotifyOne();
}

EngineStats Engine::Stats() const {
  MutexLock lk(&stats_mu_);
  return stats_;
}

bool Engine::HasWork() const {
  MutexLock lk(&mu_);
  return !inbox_.empty() || !cancels_.empty() || has_work_.load();
}

void Engine::Start() {
  MutexLock lk(&mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void Engine::Stop() {
  {
    MutexLock lk(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void Engine::Loop() {
  // Named for per-thread tools (top -H, /proc/PID/task/*/comm; scripts/bench_gateway.py).
  pthread_setname_np(pthread_self(), "strata-engine");
  for (;;) {
    {
      MutexLock lk(&mu_);
      while (!(stop_ || !inbox_.empty() || !cancels_.empty() || has_work_.load())) cv_.Wait(&mu_);
      if (stop_) return;
    }
    (void)Step();  // a runner error has already ended the affected requests
    if (has_work_.load() && last_out_ != nullptr && last_out_->seqs.empty()) {
      // Nothing schedulable right now (should not happen with validated requests): don't spin.
      MutexLock lk(&mu_);
      cv_.WaitFor(&mu_, std::chrono::milliseconds(1));
    }
  }
}

void Engine::Dequeued(RequestId id) {
  MutexLock lk(&mu_);
  auto it = std::lower_bound(queued_.begin(), queued_.end(), id,
                             [](const Queued& q, RequestId v) { return q.id < v; });
  if (it == queued_.end() || it->id != id) return;
  queued_requests_ -= 1;
  queued_prompt_tokens_ -= it->prompt_tokens;
  queued_.erase(it);
}

bool Engine::PickVictims(Priority priority, int64_t prompt_tokens,
                         std::vector<size_t>* victims) const {
  const SchedulerConfig& sc = sched_.config();
  int requests = queued_requests_;
  int64_t tokens = queued_prompt_tokens_;
  // Lowest class first (bronze), newest first within a class; never the request's own class.
  for (int c = static_cast<int>(Priority::kBronze); c > static_cast<int>(priority); --c) {
    for (size_t i = queued_.size(); i-- > 0;) {
      if (static_cast<int>(queued_[i].priority) != c) continue;
      victims->push_back(i);
      requests -= 1;
      tokens -= queued_[i].prompt_tokens;
      if (CheckQueueBound(sc, requests, tokens, prompt_tokens).ok()) return true;
    }
  }
  victims->clear();
  return false;
}

void Engine::EndDisplacedAndExpired() {
  for (RequestId id : drained_displaced_) {
    const RequestState* r = sched_.Find(id);
    if (r == nullptr || r->started) continue;  // ended meanwhile, or admitted: it keeps running
    EndRequest(id, FinishReason::kError,
               Status::ResourceExhausted(
                   "priority: displaced from the full waiting queue by a higher-priority request; "
                   "retry later"));
    displaced_count_ += 1;
  }
  drained_displaced_.clear();
  expired_.clear();
  sched_.ExpiredWaiting(clock_->Now(), &expired_);
  for (RequestId id : expired_) {
    EndRequest(id, FinishReason::kError,
               Status::DeadlineExceeded(
                   "deadline_ms: the deadline passed while the request was waiting for admission"));
    deadline_expired_ += 1;
  }
}

void Engine::EndRequest(RequestId id, FinishReason why, const Status& error) {
  RequestState* r = sched_.Find(id);
  if (r == nullptr) return;
  const bool was_queued = !r->started;
  id_list_.clear();  // reused: live completion indexes
  for (int i = 0; i < r->req.n; ++i)
    if (r->seqs[static_cast<size_t>(i)].live()) id_list_.push_back(i);
  std::unique_ptr<RequestState> owned = sched_.Abort(id, why);
  if (was_queued) Dequeued(id);
  CountLoraRequest(*owned);
  std::shared_ptr<const RequestTimeline> timeline;
  if (!id_list_.empty()) {
    owned->timeline.finished = clock_->Now();
    timeline = std::make_shared<const RequestTimeline>(std::move(owned->timeline));
  }
  for (int32_t i : id_list_) {
    TokenEvent ev;
    ev.index = i;
    ev.finish = why;
    ev.error = error;
    ev.timeline = timeline;
    owned->stream->Push(ev);
  }
  finished_requests_ += 1;
}

void Engine::Drain() {
  {
    MutexLock lk(&mu_);
    drained_.swap(inbox_);
    drained_cancels_.swap(cancels_);
    drained_displaced_.swap(displaced_);
  }
  for (auto& r : drained_) {
    std::shared_ptr<RequestStream> stream = r->stream;
    const int n = r->req.n;
    const RequestId id = r->id;
    RequestState* raw = r.get();
    if (tier_ != nullptr) {
      raw->tenant_tag = TenantTag(raw->req.tenant);
      raw->tier = std::make_unique<TierStaging>(kv_cfg_.block_size);
    }
    Status s = sched_.Add(std::move(r));
    if (!s.ok()) {
      Dequeued(id);
      for (int i = 0; i < n; ++i) {
        TokenEvent ev;
        ev.index = i;
        ev.finish = FinishReason::kError;
        ev.error = s;
        stream->Push(ev);
      }
    }
  }
  drained_.clear();
  for (RequestId id : drained_cancels_) EndRequest(id, FinishReason::kCancelled, Status::Ok());
  drained_cancels_.clear();
  EndDisplacedAndExpired();
  if (!fetching_.empty()) PollPrefetches();
  if (tier_ != nullptr && RefreshPrefetches()) {
    // Local tiers answer in microseconds (a miss is a map lookup): give the new prefetches a moment
    // so their requests can be admitted in this very step instead of the next one — on a cold cache
    // the tiers must not add a step of latency. Bounded, so a slow tier never stalls the step.
    const auto until = std::chrono::steady_clock::now() + kPrefetchSyncWait;
    auto all_ready = [&] {
      for (RequestId id : fetching_) {
        const RequestState* r = sched_.Find(id);
        if (r != nullptr && r->tier != nullptr && r->tier->fetching() && !r->tier->ready())
          return false;
      }
      return true;
    };
    while (!all_ready() && std::chrono::steady_clock::now() < until) {
      MutexLock lk(&mu_);
      cv_.WaitUntil(&mu_, until);
    }
    PollPrefetches();
  }
}

void Engine::SetModelSalt(std::vector<uint8_t> salt) { model_salt_ = std::move(salt); }

void Engine::AttachKvTier(TierPort* port, double prefetch_timeout_s) {
  tier_ = port;
  prefetch_timeout_s_ = prefetch_timeout_s;
  kv_.SetListener(port ? this : nullptr);
  if (port) {
    sched_.SetBlockFill(
        [port](int32_t block, const std::vector<uint8_t>& payload) { port->Fill(block, payload); });
  } else {
    sched_.SetBlockFill(nullptr);
  }
  if (tenants_.empty()) tenants_.push_back("");
}

uint32_t Engine::TenantTag(const std::string& tenant) {
  for (size_t i = 0; i < tenants_.size(); ++i)
    if (tenants_[i] == tenant) return static_cast<uint32_t>(i);
  tenants_.push_back(tenant);  // few tenants per server; a linear scan is fine
  return static_cast<uint32_t>(tenants_.size() - 1);
}

bool Engine::RefreshPrefetches() {
  if (!kv_cfg_.enable_prefix_cache) return false;
  bool started = false;
  for (RequestState* r : sched_.waiting()) {
    if (!r->reads_no_cache()) started |= MaybePrefetch(r);  // they use no cached blocks
  }
  return started;
}

bool Engine::MaybePrefetch(RequestState* r) {
  // Forked completions are recomputed (rare).
  if (r->tier == nullptr || r->num_active() != 1) return false;
  const SequenceState& s = r->seqs[0];
  if (!s.live()) return false;
  if (!r->started) sched_.EnsureHashes(r);  // the tier reuses the prompt's hashes
  if (!r->tier->WantsPrefetch(s.tokens, r->started, r->prompt_hashes, r->salt, kv_)) return false;
  const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(prefetch_timeout_s_));
  const TimePoint now = clock_->Now();
  r->tier->Start(
      tier_, r->req.tenant, [this] { cv_.NotifyOne(); }, now + timeout);
  r->timeline_fetch = r->timeline.StartFetch(now, r->tier->blocks_asked());
  fetching_.push_back(r->id);
  tier_prefetches_ += 1;
  return true;
}

void Engine::PollPrefetches() {
  const TimePoint now = clock_->Now();
  size_t keep = 0;
  for (size_t i = 0; i < fetching_.size(); ++i) {
    RequestState* r = sched_.Find(fetching_[i]);
    // Ended meanwhile: its TierStaging cancelled the fetch when it was destroyed.
    if (r == nullptr || r->tier == nullptr) continue;
    if (r->phase != RequestState::Phase::kWaiting) {
      r->tier->Cancel();
      r->timeline.EndFetch(r->timeline_fetch, now, 0, false);
      continue;
    }
    const TierStaging::PollResult p = r->tier->Poll(now);
    if (p == TierStaging::PollResult::kTimedOut) tier_timeouts_ += 1;
    if (p != TierStaging::PollResult::kPending) {
      const bool timed_out = p == TierStaging::PollResult::kTimedOut;
      r->timeline.EndFetch(r->timeline_fetch, now, timed_out ? 0 : r->tier->blocks_staged(),
                           timed_out);
      continue;
    }
    fetching_[keep++] = fetching_[i];
  }
  fetching_.resize(keep);
}

void Engine::OnEvict(int32_t block, const kv::BlockHash& hash, uint32_t tag) {
  tier_->Demote(block, hash, tenants_[tag < tenants_.size() ? tag : 0]);
}

void Engine::OnRegister(int32_t block, const kv::BlockHash& hash, uint32_t tag) {
  if (tier_->WantsPublish()) tier_->Publish(block, hash, tenants_[tag < tenants_.size() ? tag : 0]);
}

void Engine::FlushKvTier() {
  if (tier_ == nullptr) return;
  kv_.ForEachCached(
      [&](int32_t block, const kv::BlockHash& hash, uint32_t tag) { OnEvict(block, hash, tag); });
}

void Engine::Emit(RequestState* r, int index, int32_t token, FinishReason why, Sampler* sampler,
                  std::shared_ptr<const PromptLogprobs> prompt_lp,
                  std::shared_ptr<const RequestTimeline> timeline) {
  TokenEvent ev;
  ev.index = index;
  ev.token = token;
  ev.finish = why;
  ev.prompt_logprobs = std::move(prompt_lp);
  ev.timeline = std::move(timeline);
  if (r->req.logprobs) {
    ev.logprob = sampler->LastLogprob(token);
    const int k = std::min(r->req.top_logprobs, n_vocab_);
    if (k > 0) {
      for (int i = 0; i < n_vocab_; ++i)
        lp_scratch_[static_cast<size_t>(i)] = sampler->LastLogprob(i);
      std::iota(id_scratch_.begin(), id_scratch_.end(), 0);
      std::partial_sort(id_scratch_.begin(), id_scratch_.begin() + k, id_scratch_.end(),
                        [&](int32_t a, int32_t b) {
                          const float la = lp_scratch_[static_cast<size_t>(a)],
                                      lb = lp_scratch_[static_cast<size_t>(b)];
                          return la != lb ? la > lb : a < b;
                        });
      ev.num_top = k;
      for (int i = 0; i < k; ++i) {
        const int32_t id = id_scratch_[static_cast<size_t>(i)];
        ev.top[static_cast<size_t>(i)] = TopLogprob{id, lp_scratch_[static_cast<size_t>(id)]};
      }
    }
  }
  r->stream->Push(ev);
}

void Engine::RecordPromptLogprobs(const ScheduledSeq& e, const float* rows) {
  PromptLogprobs& lp = *e.req->prompt_lp;
  const std::span<const int32_t> prompt(e.req->req.prompt);
  const size_t v = static_cast<size_t>(n_vocab_);
  const size_t k = static_cast<size_t>(lp.top_k);
  for (int t = 0; t < e.num_tokens; ++t) {
    // Row t predicts the token after position start_pos + t.
    const size_t next = static_cast<size_t>(e.start_pos) + static_cast<size_t>(t) + 1;
    if (next >= prompt.size()) break;
    const float* row = rows + static_cast<size_t>(t) * v;
    // The log-softmax as Sampler::LastLogprob computes it (max, then a double sum of exps).
    float mx = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < v; ++i) mx = std::max(mx, row[i]);
    double sum = 0.0;
    for (size_t i = 0; i < v; ++i) sum += std::exp(static_cast<double>(row[i] - mx));
    const float lse = mx + static_cast<float>(std::log(sum));
    lp.logprob[next] = row[static_cast<size_t>(prompt[next])] - lse;
    if (k == 0) continue;
    std::iota(id_scratch_.begin(), id_scratch_.end(), 0);
    std::partial_sort(id_scratch_.begin(), id_scratch_.begin() + static_cast<std::ptrdiff_t>(k),
                      id_scratch_.end(), [&](int32_t a, int32_t b) {
                        const float la = row[static_cast<size_t>(a)],
                                    lb = row[static_cast<size_t>(b)];
                        return la != lb ? la > lb : a < b;
                      });
    for (size_t i = 0; i < k; ++i) {
      const int32_t id = id_scratch_[i];
      lp.top[next * k + i] = TopLogprob{id, row[static_cast<size_t>(id)] - lse};
    }
  }
}

void Engine::SampleAndCommit(const ScheduledSeq& e, std::span<const float> logits) {
  RequestState* r = e.req;
  const std::span<const int32_t> banned = r->req.ignore_eos
                                              ? std::span<const int32_t>(r->req.eog_ids)
                                              : std::span<const int32_t>(no_ban_);
  if (!r->forked) {
    // n > 1: all first tokens come from the prompt's logits, then the completions are forked.
    first_tokens_.clear();
    const std::span<const int32_t> prompt(r->seqs[0].tokens);
    for (SequenceState& s : r->seqs)
      first_tokens_.push_back(s.sampler->Sample(logits, prompt, banned));
    sched_.Fork(r);
    const bool send_prompt_lp = r->wants_prompt_logits();
    r->prompt_lp_sent = true;  // from now on the request may read the prefix cache again
    r->timeline.first_token = run_end_;
    const auto first = std::make_shared<const RequestTimeline>(r->timeline);  // shared by all n
    for (size_t i = 0; i < r->seqs.size(); ++i) {
      const FinishReason why = sched_.AppendToken(r, static_cast<int>(i), first_tokens_[i]);
      Emit(r, static_cast<int>(i), first_tokens_[i], why, r->seqs[i].sampler.get(),
           send_prompt_lp ? r->prompt_lp : nullptr,
           why == FinishReason::kNone ? first : EndTimeline(r));
    }
    generated_tokens_ += static_cast<int64_t>(r->seqs.size());
    if (r->phase == RequestState::Phase::kFinished) finished_requests_ += 1;
    return;
  }
  SequenceState& s = r->seqs[static_cast<size_t>(e.seq_index)];
  const int32_t token = s.sampler->Sample(logits, s.tokens, banned);
  const bool send_prompt_lp = r->wants_prompt_logits();  // n == 1: its first token
  r->prompt_lp_sent = true;
  const bool first = !r->timeline.has_first_token();
  if (first) r->timeline.first_token = run_end_;
  const FinishReason why = sched_.AppendToken(r, e.seq_index, token);
  std::shared_ptr<const RequestTimeline> timeline;
  if (why != FinishReason::kNone) {
    timeline = EndTimeline(r);
  } else if (first) {
    timeline = std::make_shared<const RequestTimeline>(r->timeline);
  }
  Emit(r, e.seq_index, token, why, s.sampler.get(), send_prompt_lp ? r->prompt_lp : nullptr,
       std::move(timeline));
  generated_tokens_ += 1;
  if (r->phase == RequestState::Phase::kFinished) finished_requests_ += 1;
}

void Engine::AccumulateEmbedding(const ScheduledSeq& e, const float* rows) {
  RequestState* r = e.req;
  std::vector<double>& acc = r->embed_sum;
  if (e.start_pos == 0) std::fill(acc.begin(), acc.end(), 0.0);  // first chunk (or recompute)
  const size_t dim = acc.size();
  for (int t = 0; t < e.num_tokens; ++t)
    for (size_t i = 0; i < dim; ++i) acc[i] += rows[static_cast<size_t>(t) * dim + i];
  if (e.sample) FinishEmbedding(r);
}

void Engine::FinishEmbedding(RequestState* r) {
  // Mean direction: the L2 norm of the sum (dividing by the token count would not change it).
  double norm = 0;
  for (double x : r->embed_sum) norm += x * x;
  norm = std::sqrt(norm);
  TokenEvent ev;
  ev.finish = FinishReason::kStop;
  ev.embedding.resize(r->embed_sum.size());
  for (size_t i = 0; i < r->embed_sum.size(); ++i)
    ev.embedding[i] = norm > 0 ? static_cast<float>(r->embed_sum[i] / norm) : 0.0f;
  sched_.FinishEmbedding(r);
  ev.timeline = EndTimeline(r);
  r->stream->Push(ev);
  embeddings_ += 1;
  finished_requests_ += 1;
}

Status Engine::Step() {
  Drain();
  const SchedulerOutput& out = sched_.Schedule();
  last_out_ = &out;
  steps_ += 1;
  for (RequestId id : out.started) Dequeued(id);
  Status status;
  if (!out.seqs.empty()) {
    if (!out.copies.empty()) {
      if (copy_blocks_) {
        copy_blocks_(out.copies);
      } else {
        status = Status::Internal("copy-on-write needed but the engine has no block copier");
      }
    }
    const TimePoint step_start = clock_->Now();
    const BatchShape shape = BuildBatch(out, step_start);
    if (status.ok()) status = runner_->Run(batch_, &logits_, &hidden_);
    run_end_ = clock_->Now();
    if (status.ok()) status = CheckRunnerOutput(shape);
    if (!status.ok()) {
      FailStep(out, status);
    } else {
      CommitStep(out, shape, step_start);
    }
  }
  sched_.TakeFinished(&finished_);
  for (const auto& r : finished_) CountLoraRequest(*r);
  finished_.clear();
  has_work_.store(sched_.has_work());
  PublishStats();
  return status;
}

Engine::BatchShape Engine::BuildBatch(const SchedulerOutput& out, TimePoint step_start) {
  batch_.clear();
  BatchShape shape;
  for (const ScheduledSeq& e : out.seqs) {
    shape.decode_only =
        shape.decode_only && e.num_tokens == 1 && e.sample && e.start_pos >= e.req->prompt_len;
    StampScheduled(e, step_start);
    const SequenceState& s = e.req->seqs[static_cast<size_t>(e.seq_index)];
    BatchSeq b;
    b.seq_id = e.kv_id;
    b.tokens = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(e.start_pos),
                                                          static_cast<size_t>(e.num_tokens));
    b.start_pos = e.start_pos;
    b.block_table = std::span<const int32_t>(kv_.BlockTable(e.kv_id));
    b.want_logits = e.sample && !e.req->is_embed();
    b.want_hidden = e.req->is_embed();
    b.want_all_logits = e.req->wants_prompt_logits() && e.start_pos < e.req->prompt_len;
    b.lora = e.req->req.lora.get();  // kept alive by the request until it ends
    batch_.push_back(b);
    shape.rows += static_cast<int>(b.logit_rows());
    shape.hidden_rows += b.want_hidden ? e.num_tokens : 0;
    tokens_computed_ += e.num_tokens;
  }
  return shape;
}

Status Engine::CheckRunnerOutput(const BatchShape& shape) const {
  const size_t want_logits = static_cast<size_t>(shape.rows) * static_cast<size_t>(n_vocab_);
  if (logits_.size() < want_logits) {
    return Status::Internal("runner returned " + std::to_string(logits_.size()) +
                            " logits, expected " + std::to_string(want_logits));
  }
  const size_t hidden_floats =
      static_cast<size_t>(shape.hidden_rows) * static_cast<size_t>(hidden_dim_);
  if (hidden_.size() < hidden_floats) {
    return Status::Internal("runner returned " + std::to_string(hidden_.size()) +
                            " hidden floats, expected " + std::to_string(hidden_floats));
  }
  return Status::Ok();
}

// Every request with an entry in the step ends with `status` (each once).
void Engine::FailStep(const SchedulerOutput& out, const Status& status) {
  id_list_.clear();
  for (const ScheduledSeq& e : out.seqs) id_list_.push_back(e.req->id);
  std::vector<RequestId> ids(id_list_.begin(), id_list_.end());  // error path: allocation is fine
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (RequestId id : ids) EndRequest(id, FinishReason::kError, status);
}

void Engine::CommitStep(const SchedulerOutput& out, const BatchShape& shape, TimePoint step_start) {
  const size_t v = static_cast<size_t>(n_vocab_);
  size_t row = 0, hidden_row = 0;
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    const ScheduledSeq& e = out.seqs[i];
    sched_.CommitComputed(e);
    StampComputed(e, step_start);
    if (e.req->is_embed()) {
      AccumulateEmbedding(e, hidden_.data() + hidden_row * static_cast<size_t>(hidden_dim_));
      hidden_row += static_cast<size_t>(e.num_tokens);
      continue;
    }
    const size_t n_rows = batch_[i].logit_rows();
    if (batch_[i].want_all_logits) RecordPromptLogprobs(e, logits_.data() + row * v);
    row += n_rows;
    // The sampled row is the chunk's last one.
    if (e.sample) SampleAndCommit(e, std::span<const float>(logits_).subspan((row - 1) * v, v));
  }
  if (shape.decode_only) {
    decode_steps_ += 1;
    decode_tokens_ += shape.rows;
    decode_seconds_ += std::chrono::duration<double>(clock_->Now() - step_start).count();
  }
}

void Engine::StampScheduled(const ScheduledSeq& e, TimePoint step_start) {
  RequestTimeline& t = e.req->timeline;
  if (!t.scheduled()) {
    t.first_scheduled = step_start;
    t.cached_tokens = e.start_pos;  // what the admission did not compute: pool hit + tier adoption
  }
  t.Ran(step_start);
}

void Engine::StampComputed(const ScheduledSeq& e, TimePoint step_start) {
  RequestTimeline& t = e.req->timeline;
  if (e.start_pos < e.req->prompt_len) {
    if (!t.has_first_token()) t.AddChunk(step_start, run_end_, e.num_tokens);
  } else if (e.num_tokens == 1) {
    t.decode_steps += 1;
  }
}

std::shared_ptr<const RequestTimeline> Engine::EndTimeline(RequestState* r) {
  r->timeline.finished = run_end_;
  // The request's last event: nothing is recorded after it, so its timeline moves out.
  if (r->phase == RequestState::Phase::kFinished)
    return std::make_shared<const RequestTimeline>(std::move(r->timeline));
  return std::make_shared<const RequestTimeline>(r->timeline);
}

void Engine::CountLoraRequest(const RequestState& r) {
  if (r.req.lora == nullptr) return;
  const std::string& name = r.req.lora->name();
  if (auto it = lora_requests_.find(name); it != lora_requests_.end()) {
    it->second += 1;
  } else {
    lora_requests_.emplace(name, 1);
  }
  lora_requests_changed_ = true;
}

namespace {
// Sorts and dedups `names` (pointers) and copies them into `out` only when they differ from what
// it holds.
void PublishNames(std::vector<const std::string*>* names, std::vector<std::string>* out) {
  std::sort(names->begin(), names->end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  names->erase(std::unique(names->begin(), names->end(),
                           [](const std::string* a, const std::string* b) { return *a == *b; }),
               names->end());
  const bool same = names->size() == out->size() &&
                    std::equal(names->begin(), names->end(), out->begin(),
                               [](const std::string* a, const std::string& b) { return *a == b; });
  if (same) return;
  out->clear();
  for (const std::string* n : *names) out->push_back(*n);
}
}  // namespace

void Engine::PublishStats() {
  int queued;
  {
    MutexLock lk(&mu_);
    queued = queued_requests_;
  }
  const kv::KvStats ks = kv_.Stats();
  lora_active_.clear();
  lora_running_.clear();
  lora_waiting_.clear();
  sched_.LoraNames(&lora_active_, &lora_running_, &lora_waiting_);
  MutexLock lk(&stats_mu_);
  PublishNames(&lora_active_, &stats_.active_loras);
  PublishNames(&lora_running_, &stats_.running_loras);
  PublishNames(&lora_waiting_, &stats_.waiting_loras);
  stats_.max_loras = sched_.config().max_loras;
  if (lora_requests_changed_) {
    stats_.lora_requests.assign(lora_requests_.begin(), lora_requests_.end());
    lora_requests_changed_ = false;
  }
  stats_.running_requests = sched_.num_running();
  stats_.running_seqs = sched_.num_running_seqs();
  stats_.waiting_requests = sched_.num_waiting();
  stats_.queued_requests = queued;
  stats_.kv_num_blocks = ks.num_blocks;
  stats_.kv_used_blocks = ks.used_blocks;
  stats_.kv_cached_blocks = ks.cached_blocks;
  stats_.kv_usage = ks.usage();
  stats_.prefix_query_tokens = ks.prefix_query_tokens;
  stats_.prefix_hit_tokens = ks.prefix_hit_tokens;
  stats_.preemptions = sched_.num_preemptions();
  stats_.steps = steps_;
  stats_.tokens_computed = tokens_computed_;
  stats_.generated_tokens = generated_tokens_;
  stats_.finished_requests = finished_requests_;
  stats_.decode_steps = decode_steps_;
  stats_.decode_tokens = decode_tokens_;
  stats_.decode_seconds = decode_seconds_;
  stats_.embeddings = embeddings_;
  stats_.deadline_expired = deadline_expired_;
  stats_.displaced = displaced_count_;
  stats_.tier_hit_tokens = sched_.tier_hit_tokens();
  stats_.tier_prefetches = tier_prefetches_;
  stats_.tier_prefetch_timeouts = tier_timeouts_;
}

}  // namespace strata::engine::sched
