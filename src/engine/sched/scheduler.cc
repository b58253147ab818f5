#include "engine/sched/scheduler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

namespace strata::engine::sched {

Status SchedulerConfig::Validate() const {
  if (max_batched_tokens < 1) return Status::InvalidArgument("max_batched_tokens: must be >= 1");
  if (max_num_seqs < 1) return Status::InvalidArgument("max_num_seqs: must be >= 1");
  if (max_prefill_tokens_with_decodes < 0)
    return Status::InvalidArgument("max_prefill_tokens_with_decodes: must be >= 0");
  if (max_queued_requests < 1) return Status::InvalidArgument("max_queued_requests: must be >= 1");
  if (max_queued_prompt_tokens < 1)
    return Status::InvalidArgument("max_queued_prompt_tokens: must be >= 1");
  if (max_model_len < 2) return Status::InvalidArgument("max_model_len: must be >= 2");
  if (!std::isfinite(aging_s) || aging_s < 0)
    return Status::InvalidArgument("aging_s: must be finite and >= 0");
  if (max_loras < 1 || max_loras > kMaxLoras)
    return Status::InvalidArgument("max_loras: must be in [1, " + std::to_string(kMaxLoras) +
                                   "], got " + std::to_string(max_loras));
  return Status::Ok();
}

int RequestState::seats() const {
  if (!forked) return req.n;
  int live = 0;
  for (const SequenceState& s : seqs) live += s.live() ? 1 : 0;
  return live;
}

std::unique_ptr<RequestState> MakeRequestState(RequestId id, SubmitRequest req, TimePoint arrival) {
  auto r = std::make_unique<RequestState>();
  r->id = id;
  r->arrival = arrival;
  r->prompt_len = static_cast<int>(req.prompt.size());
  r->forked = req.n == 1;
  r->seqs.resize(static_cast<size_t>(req.n));
  const size_t final_len = static_cast<size_t>(req.MaxPositions());
  for (int i = 0; i < req.n; ++i) {
    SequenceState& s = r->seqs[static_cast<size_t>(i)];
    s.index = i;
    s.tokens.reserve(final_len);
  }
  r->seqs[0].tokens.assign(req.prompt.begin(), req.prompt.end());
  r->req = std::move(req);
  return r;
}

Scheduler::Scheduler(const SchedulerConfig& config, kv::KvManager* kv, int block_size,
                     const Clock* clock)
    : cfg_(config),
      kv_(kv),
      block_size_(block_size),
      clock_(clock),
      defer_enabled_(kv->config().enable_prefix_cache) {
  out_.seqs.reserve(static_cast<size_t>(cfg_.max_num_seqs));
  out_.copies.reserve(static_cast<size_t>(cfg_.max_num_seqs));
  lora_slots_.resize(static_cast<size_t>(std::max(cfg_.max_loras, 1)));
  lora_blocked_.reserve(lora_slots_.size());
}

Status CheckQueueBound(const SchedulerConfig& cfg, int queued_requests,
                       int64_t queued_prompt_tokens, int64_t prompt_tokens) {
  if (queued_requests + 1 > cfg.max_queued_requests) {
    return Status::ResourceExhausted("engine queue full: " + std::to_string(queued_requests) +
                                     " requests waiting (max_queued_requests " +
                                     std::to_string(cfg.max_queued_requests) + ")");
  }
  if (queued_prompt_tokens + prompt_tokens > cfg.max_queued_prompt_tokens) {
    return Status::ResourceExhausted("engine queue full: " + std::to_string(queued_prompt_tokens) +
                                     " + " + std::to_string(prompt_tokens) +
                                     " prompt tokens waiting (max_queued_prompt_tokens " +
                                     std::to_string(cfg.max_queued_prompt_tokens) + ")");
  }
  return Status::Ok();
}

Status Scheduler::Add(std::unique_ptr<RequestState> r) {
  if (r == nullptr || r->phase != RequestState::Phase::kWaiting || r->started)
    return Status::InvalidArgument("request: must be a new waiting request");
  if (all_.count(r->id))
    return Status::InvalidArgument("request id " + std::to_string(r->id) + " already queued");
  r->arrival_seq = next_arrival_++;
  queued_requests_ += 1;
  queued_prompt_tokens_ += r->prompt_len;
  waiting_.push_back(r.get());
  all_.emplace(r->id, std::move(r));
  return Status::Ok();
}

int64_t Scheduler::Level(const RequestState& r, TimePoint now) const {
  int64_t level = static_cast<int64_t>(r.req.priority);
  if (cfg_.aging_s > 0) {
    double waited = std::chrono::duration<double>(now - r.arrival).count();
    if (waited > 0) level -= static_cast<int64_t>(std::floor(waited / cfg_.aging_s));
  }
  return level;
}

bool Scheduler::Before(const RequestState* a, const RequestState* b) {
  return std::tie(a->key_level, a->key_deadline, a->arrival_seq) <
         std::tie(b->key_level, b->key_deadline, b->arrival_seq);
}

RequestState* Scheduler::Find(RequestId id) const {
  auto it = all_.find(id);
  return it == all_.end() ? nullptr : it->second.get();
}

std::vector<RequestId> Scheduler::AllIds() const {
  std::vector<RequestId> ids;
  ids.reserve(all_.size());
  for (const auto& [id, r] : all_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

int Scheduler::num_running_seqs() const {
  int n = 0;
  for (const RequestState* r : running_) n += r->seats();
  return n;
}

void Scheduler::Remove(std::vector<RequestState*>* v, RequestState* r) {
  auto it = std::find(v->begin(), v->end(), r);
  if (it != v->end()) v->erase(it);
}

void Scheduler::MarkNotQueued(RequestState* r) {
  queued_requests_ -= 1;
  queued_prompt_tokens_ -= r->prompt_len;
}

void Scheduler::Unschedule(RequestState* r) {
  for (size_t i = 0; i < out_.seqs.size();) {
    if (out_.seqs[i].req == r) {
      budget_ += out_.seqs[i].num_tokens;
      out_.num_tokens -= out_.seqs[i].num_tokens;
      out_.seqs.erase(out_.seqs.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  for (size_t i = 0; i < out_.copies.size();) {
    bool mine = false;
    for (const SequenceState& s : r->seqs) mine |= s.kv_id >= 0 && s.kv_id == out_.copies[i].seq;
    if (mine) {
      out_.copies.erase(out_.copies.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

size_t Scheduler::HashKey::operator()(const kv::BlockHash& h) const {
  size_t v = 0;
  std::memcpy(&v, h.data(), sizeof(v));  // SHA-256 output: any 8 bytes are uniform
  return v;
}

void Scheduler::EnsureHashes(RequestState* r) {
  if (r->hashes_ready) return;
  r->prompt_hashes =
      cachekey::ComputeBlockHashes(r->req.prompt, block_size_, std::span<const uint8_t>(r->salt));
  r->hashes_ready = true;
}

int Scheduler::Progress(const RequestState& r) {
  int p = 0;
  for (int i = 0; i < r.num_active(); ++i) {
    const SequenceState& s = r.seqs[static_cast<size_t>(i)];
    if (s.live() && s.kv_id >= 0) p = std::max(p, s.num_computed);
  }
  return p;
}

void Scheduler::AddInflight(RequestState* r) {
  if (!defer_enabled_ || r->is_embed()) return;  // an embedding registers no blocks
  EnsureHashes(r);
  r->inflight_hi = static_cast<int>(r->prompt_hashes.size());
  r->inflight_lo = std::min(r->inflight_hi, Progress(*r) / block_size_);
  for (int i = r->inflight_lo; i < r->inflight_hi; ++i) {
    inflight_[r->prompt_hashes[static_cast<size_t>(i)]] += 1;
    inflight_count_ += 1;
  }
}

void Scheduler::AdvanceInflight(RequestState* r) {
  const int lo = std::min(r->inflight_hi, Progress(*r) / block_size_);
  for (; r->inflight_lo < lo; ++r->inflight_lo) {
    auto it = inflight_.find(r->prompt_hashes[static_cast<size_t>(r->inflight_lo)]);
    if (it != inflight_.end() && --it->second == 0) inflight_.erase(it);
    inflight_count_ -= 1;
  }
}

void Scheduler::DropInflight(RequestState* r) {
  for (int i = r->inflight_lo; i < r->inflight_hi; ++i) {
    auto it = inflight_.find(r->prompt_hashes[static_cast<size_t>(i)]);
    if (it != inflight_.end() && --it->second == 0) inflight_.erase(it);
    inflight_count_ -= 1;
  }
  r->inflight_lo = r->inflight_hi = 0;
}

bool Scheduler::ShouldDefer(RequestState* r) {
  if (!defer_enabled_ || inflight_.empty() || r->reads_no_cache())
    return false;  // could not use a hit
  EnsureHashes(r);
  // Blocks a prefix hit could cover: MatchPrefix leaves at least one token to compute.
  size_t len = 0;
  for (int i = 0; i < r->num_active(); ++i) {
    const SequenceState& s = r->seqs[static_cast<size_t>(i)];
    if (s.live()) len = std::max(len, s.tokens.size());
  }
  const size_t usable =
      len == 0 ? 0
               : std::min(r->prompt_hashes.size(), (len - 1) / static_cast<size_t>(block_size_));
  // The first in-flight block is the first one not cached: every block before an in-flight one is
  // held, registered, by the request computing it.
  for (size_t j = 0; j < usable; ++j) {
    if (inflight_.count(r->prompt_hashes[j])) {
      deferrals_ += 1;
      return true;
    }
  }
  return false;
}

Status Scheduler::CheckInflight() const {
  std::unordered_map<kv::BlockHash, int, HashKey> expect;
  int count = 0;
  for (const auto& [id, owned] : all_) {
    const RequestState& r = *owned;
    const bool running = r.phase == RequestState::Phase::kRunning;
    if (!running || !defer_enabled_ || r.is_embed()) {
      if (r.inflight_lo != 0 || r.inflight_hi != 0)
        return Status::Internal("request " + std::to_string(id) +
                                ": in-flight blocks while not running");
      continue;
    }
    const int hi = static_cast<int>(r.prompt_hashes.size());
    // lo only grows (a finishing completion may lower Progress after its blocks were registered).
    if (!r.hashes_ready || r.inflight_hi != hi || r.inflight_lo > hi ||
        r.inflight_lo < std::min(hi, Progress(r) / block_size_))
      return Status::Internal("request " + std::to_string(id) + ": in-flight range [" +
                              std::to_string(r.inflight_lo) + ", " + std::to_string(r.inflight_hi) +
                              ") disagrees with its progress");
    for (int i = r.inflight_lo; i < r.inflight_hi; ++i) {
      expect[r.prompt_hashes[static_cast<size_t>(i)]] += 1;
      count += 1;
    }
  }
  if (count != inflight_count_ || expect != inflight_)
    return Status::Internal("in-flight block set disagrees with the running requests (" +
                            std::to_string(count) + " expected, " +
                            std::to_string(inflight_count_) + " held)");
  return Status::Ok();
}

int Scheduler::FindLoraSlot(const std::string& digest) const {
  for (size_t i = 0; i < lora_slots_.size(); ++i)
    if (lora_slots_[i].digest == digest) return static_cast<int>(i);
  return -1;
}

int Scheduler::ClaimableLoraSlot() const {
  int best = -1;
  for (size_t i = 0; i < lora_slots_.size(); ++i) {
    const LoraSlot& s = lora_slots_[i];
    if (!s.active()) return static_cast<int>(i);
    if (s.pins > 0 || s.reserved_step == step_) continue;
    if (best < 0 || s.last_used < lora_slots_[static_cast<size_t>(best)].last_used)
      best = static_cast<int>(i);
  }
  return best;
}

bool Scheduler::LoraAdmissible(const RequestState* r) {
  if (r->req.lora == nullptr) return true;
  const std::string& digest = r->req.lora->digest();
  if (const int i = FindLoraSlot(digest); i >= 0)
    return lora_slots_[static_cast<size_t>(i)].reserved_step != step_;
  if (ClaimableLoraSlot() >= 0) return true;
  // Every slot is pinned (or reserved): reserve one for this adapter, once per step, so requests
  // behind this one cannot keep it pinned forever.
  for (const std::string* d : lora_blocked_)
    if (*d == digest) return false;
  int pick = -1;
  for (size_t i = 0; i < lora_slots_.size(); ++i) {
    const LoraSlot& s = lora_slots_[i];
    if (s.reserved_step == step_) continue;
    const LoraSlot* p = pick < 0 ? nullptr : &lora_slots_[static_cast<size_t>(pick)];
    if (p == nullptr || std::tie(s.pins, s.last_used) < std::tie(p->pins, p->last_used))
      pick = static_cast<int>(i);
  }
  if (pick >= 0) {
    lora_slots_[static_cast<size_t>(pick)].reserved_step = step_;
    lora_blocked_.push_back(&digest);
  }
  return false;
}

void Scheduler::PinLora(RequestState* r) {
  if (r->req.lora == nullptr) return;
  const lora::Adapter& a = *r->req.lora;
  int i = FindLoraSlot(a.digest());
  if (i < 0) {
    i = ClaimableLoraSlot();
    assert(i >= 0);  // LoraAdmissible said so, and admitting only unpins
    LoraSlot& s = lora_slots_[static_cast<size_t>(i)];
    s.digest = a.digest();  // evicts what it held (unpinned)
    s.names.clear();
  }
  LoraSlot& s = lora_slots_[static_cast<size_t>(i)];
  s.pins += 1;
  s.last_used = ++lora_clock_;
  if (std::find(s.names.begin(), s.names.end(), a.name()) == s.names.end())
    s.names.push_back(a.name());
  r->lora_slot = i;
}

void Scheduler::UnpinLora(RequestState* r) {
  if (r->lora_slot < 0) return;
  LoraSlot& s = lora_slots_[static_cast<size_t>(r->lora_slot)];
  s.pins -= 1;
  s.last_used = ++lora_clock_;
  r->lora_slot = -1;
}

Status Scheduler::CheckLoras() const {
  std::vector<int> pins(lora_slots_.size(), 0);
  for (const RequestState* r : running_) {
    if (r->req.lora == nullptr) {
      if (r->lora_slot != -1) return Status::Internal("a base-model request pins a LoRA slot");
      continue;
    }
    const int i = r->lora_slot;
    if (i < 0 || static_cast<size_t>(i) >= lora_slots_.size() ||
        lora_slots_[static_cast<size_t>(i)].digest != r->req.lora->digest())
      return Status::Internal("request " + std::to_string(r->id) +
                              " runs without its adapter's slot");
    pins[static_cast<size_t>(i)] += 1;
  }
  for (const RequestState* r : waiting_)
    if (r->lora_slot != -1)
      return Status::Internal("waiting request " + std::to_string(r->id) + " pins a LoRA slot");
  for (size_t i = 0; i < lora_slots_.size(); ++i) {
    const LoraSlot& s = lora_slots_[i];
    if (s.pins != pins[i])
      return Status::Internal("LoRA slot " + std::to_string(i) + ": " + std::to_string(s.pins) +
                              " pins, " + std::to_string(pins[i]) + " running requests");
    if (!s.active() && s.pins != 0) return Status::Internal("a free LoRA slot is pinned");
    for (size_t j = 0; j < i; ++j)
      if (s.active() && lora_slots_[j].digest == s.digest)
        return Status::Internal("LoRA slots " + std::to_string(j) + " and " + std::to_string(i) +
                                " hold the same adapter");
  }
  return Status::Ok();
}

void Scheduler::LoraNames(std::vector<const std::string*>* active,
                          std::vector<const std::string*>* running,
                          std::vector<const std::string*>* waiting) const {
  for (const LoraSlot& s : lora_slots_)
    for (const std::string& n : s.names) active->push_back(&n);
  for (const RequestState* r : running_)
    if (r->req.lora != nullptr) running->push_back(&r->req.lora->name());
  for (const RequestState* r : waiting_)
    if (r->req.lora != nullptr) waiting->push_back(&r->req.lora->name());
}

void Scheduler::ReleaseBlocks(RequestState* r) {
  DropInflight(r);
  for (SequenceState& s : r->seqs) {
    if (s.kv_id >= 0 && kv_->Has(s.kv_id)) kv_->Free(s.kv_id);
    s.kv_id = -1;
    s.num_computed = 0;
  }
}

RequestState* Scheduler::LowestRunningBelow(const RequestState* r) const {
  RequestState* lowest = nullptr;
  for (RequestState* v : running_) {
    if (v == r || !Before(r, v)) continue;
    if (lowest == nullptr || Before(lowest, v)) lowest = v;
  }
  return lowest;
}

void Scheduler::Preempt(RequestState* victim) {
  Unschedule(victim);
  seats_used_ -= victim->seats();
  ReleaseBlocks(victim);
  UnpinLora(victim);
  Remove(&running_, victim);
  victim->phase = RequestState::Phase::kWaiting;
  victim->preempted_in_step = step_;
  victim->num_preemptions += 1;
  victim->timeline.Preempted(clock_->Now());
  waiting_.push_back(victim);
  preemptions_ += 1;
  out_.num_preempted += 1;
}

bool Scheduler::TrySchedule(RequestState* r, SequenceState& s, int n) {
  for (;;) {
    kv_->Plan(&plan_);
    plan_.Allocate(s.kv_id, s.num_computed + n);
    plan_.PrepareWrite(s.kv_id, s.num_computed);  // copy-on-write of a block shared with a fork
    if (plan_.fits()) break;
    if (RequestState* victim = LowestRunningBelow(r)) {
      Preempt(victim);
      continue;
    }
    Preempt(r);  // nothing below it holds blocks: it waits (and recomputes) instead
    return false;
  }
  copies_.clear();
  const bool applied = kv_->Apply(plan_, &copies_);
  assert(applied);  // planned just now, and it fits
  (void)applied;
  for (const kv::CopyOp& op : copies_)
    out_.copies.push_back(BlockCopy{op.src, op.dst, s.num_computed % block_size_, s.kv_id});
  const bool sample = s.num_computed + n == static_cast<int>(s.tokens.size());
  out_.seqs.push_back(ScheduledSeq{r, s.index, s.kv_id, s.num_computed, n, sample});
  out_.num_tokens += n;
  budget_ -= n;
  return true;
}

// Plans r's admission into plan_: every live sequence's prefix hit (hit_), the staged tier blocks
// continuing sequence 0's hit (staged_), then the first chunks within `budget` (chunk_). True when
// it fits the pool as it is now.
bool Scheduler::PlanAdmission(RequestState* r, int budget) {
  kv_->Plan(&plan_);
  const std::span<const uint8_t> salt(r->salt);
  const size_t n = static_cast<size_t>(r->num_active());
  hit_.assign(n, 0);
  chunk_.assign(n, 0);
  staged_ = {};
  for (size_t i = 0; i < n; ++i) {
    SequenceState& s = r->seqs[i];
    // An embedding (or a request that needs prompt logits) computes every position: no prefix
    // match (its table is created by Allocate).
    if (s.live() && !r->reads_no_cache())
      hit_[i] = plan_.MatchPrefix(s.kv_id, s.tokens, salt, r->tenant_tag);
  }
  SequenceState& first = r->seqs[0];
  if (r->tier != nullptr && !r->reads_no_cache() && fill_ && n == 1 && first.live() &&
      hit_[0] % block_size_ == 0) {
    const TierStaging::Staged staged =
        r->tier->StagedFrom(hit_[0] / block_size_, static_cast<int>(first.tokens.size()));
    const int adopted = plan_.Adopt(first.kv_id, staged.hashes);
    staged_ = TierStaging::Staged{staged.hashes.first(static_cast<size_t>(adopted)),
                                  staged.payloads.first(static_cast<size_t>(adopted))};
  }
  const int adopted_tokens = static_cast<int>(staged_.hashes.size()) * block_size_;
  for (size_t i = 0; i < n && budget > 0; ++i) {
    SequenceState& s = r->seqs[i];
    if (!s.live()) continue;
    const int computed = hit_[i] + (i == 0 ? adopted_tokens : 0);
    chunk_[i] = std::min(static_cast<int>(s.tokens.size()) - computed, budget);
    budget -= chunk_[i];
    plan_.Allocate(s.kv_id, computed + chunk_[i]);
  }
  return plan_.fits();
}

bool Scheduler::Admit(RequestState* r) {
  const int need = r->seats();
  while (seats_used_ + need > cfg_.max_num_seqs) {
    RequestState* victim = LowestRunningBelow(r);
    if (victim == nullptr) return false;
    Preempt(victim);
  }
  for (int i = 0; i < r->num_active(); ++i) {
    SequenceState& s = r->seqs[static_cast<size_t>(i)];
    if (s.live()) s.kv_id = NewKvId();
  }
  const int budget = budget_;  // the chunks are sized before any preemption below
  while (!PlanAdmission(r, budget)) {
    RequestState* victim = LowestRunningBelow(r);
    if (victim == nullptr) {
      // Does not fit even with everything below it preempted: stays waiting, unchanged (nothing
      // was applied; staged tier blocks are kept for the retry).
      for (SequenceState& s : r->seqs) s.kv_id = -1;
      return false;
    }
    Preempt(victim);
  }
  const bool applied = kv_->Apply(plan_, nullptr, [&](kv::SeqId, size_t i, int32_t block) {
    fill_(block, staged_.payloads[i]);
  });
  assert(applied);  // planned just now, and it fits
  (void)applied;
  const int adopted = static_cast<int>(staged_.hashes.size()) * block_size_;
  tier_hit_tokens_ += adopted;
  staged_ = {};
  if (r->tier != nullptr) r->tier->Adopted();
  r->phase = RequestState::Phase::kRunning;
  Remove(&waiting_, r);
  running_.push_back(r);
  seats_used_ += need;
  for (int i = 0; i < r->num_active(); ++i) {
    SequenceState& s = r->seqs[static_cast<size_t>(i)];
    if (!s.live()) continue;
    s.num_computed = hit_[static_cast<size_t>(i)] + (i == 0 ? adopted : 0);
    const int chunk = chunk_[static_cast<size_t>(i)];
    if (chunk == 0) continue;
    const bool sample = s.num_computed + chunk == static_cast<int>(s.tokens.size());
    out_.seqs.push_back(ScheduledSeq{r, s.index, s.kv_id, s.num_computed, chunk, sample});
    out_.num_tokens += chunk;
    budget_ -= chunk;
  }
  AddInflight(r);
  if (!r->started) {
    r->started = true;
    MarkNotQueued(r);
    out_.started.push_back(r->id);
  }
  return true;
}

const SchedulerOutput& Scheduler::Schedule() {
  ++step_;
  out_.seqs.clear();
  out_.copies.clear();
  out_.started.clear();
  out_.num_tokens = 0;
  out_.num_preempted = 0;
  const TimePoint now = clock_->Now();
  order_.clear();
  order_.insert(order_.end(), running_.begin(), running_.end());
  order_.insert(order_.end(), waiting_.begin(), waiting_.end());
  for (RequestState* r : order_) {
    r->key_level = Level(*r, now);
    r->key_deadline = r->req.deadline ? r->req.deadline->time_since_epoch().count()
                                      : std::numeric_limits<int64_t>::max();
  }
  std::sort(order_.begin(), order_.end(), Before);
  budget_ = cfg_.max_batched_tokens;
  seats_used_ = num_running_seqs();
  lora_blocked_.clear();

  // A. Running decodes, in priority order.
  for (RequestState* r : order_) {
    if (budget_ == 0) break;
    if (r->phase != RequestState::Phase::kRunning) continue;
    for (int i = 0; i < r->num_active() && budget_ > 0; ++i) {
      SequenceState& s = r->seqs[static_cast<size_t>(i)];
      if (!s.live() || s.pending() != 1) continue;
      if (!TrySchedule(r, s, 1)) break;
    }
  }
  // B. Prefill chunks of running sequences and admissions, in priority order. With decodes in the
  // step, the prefill cap holds back the rest of the budget (returned below; nothing else reads
  // it).
  int held_back = 0;
  if (cfg_.max_prefill_tokens_with_decodes > 0 && !out_.seqs.empty() &&
      budget_ > cfg_.max_prefill_tokens_with_decodes) {
    held_back = budget_ - cfg_.max_prefill_tokens_with_decodes;
    budget_ = cfg_.max_prefill_tokens_with_decodes;
  }
  bool admission_open = true;
  for (RequestState* r : order_) {
    if (budget_ == 0) break;
    if (r->phase == RequestState::Phase::kRunning) {
      for (int i = 0; i < r->num_active() && budget_ > 0; ++i) {
        SequenceState& s = r->seqs[static_cast<size_t>(i)];
        if (!s.live() || s.pending() <= 1) continue;
        if (!TrySchedule(r, s, std::min(s.pending(), budget_))) break;
        if (r->phase != RequestState::Phase::kRunning) break;
      }
    } else if (r->phase == RequestState::Phase::kWaiting && admission_open &&
               r->preempted_in_step != step_) {
      if (r->tier_fetching()) continue;  // prefetching from lower tiers; keeps its place
      if (!LoraAdmissible(r)) continue;  // its adapter has no slot; keeps its place
      if (ShouldDefer(r)) continue;      // keeps its place; lower-priority requests may go
      if (Admit(r)) {
        PinLora(r);
      } else {
        admission_open = false;
      }
    }
  }
  budget_ += held_back;
  return out_;
}

void Scheduler::CommitComputed(const ScheduledSeq& e) {
  SequenceState& s = e.req->seqs[static_cast<size_t>(e.seq_index)];
  s.num_computed += e.num_tokens;
  if (e.req->is_embed()) return;  // its blocks stay out of the prefix cache
  kv_->CommitComputed(s.kv_id, s.tokens, s.num_computed, std::span<const uint8_t>(e.req->salt));
  if (e.req->inflight_lo < e.req->inflight_hi) AdvanceInflight(e.req);
}

void Scheduler::Fork(RequestState* r) {
  if (r->forked) return;
  SequenceState& parent = r->seqs[0];
  for (size_t i = 1; i < r->seqs.size(); ++i) {
    SequenceState& c = r->seqs[i];
    c.tokens.assign(parent.tokens.begin(), parent.tokens.end());
    c.num_computed = parent.num_computed;
    c.kv_id = NewKvId();
    kv_->Fork(parent.kv_id, c.kv_id);
  }
  r->forked = true;
}

void Scheduler::FinishRequest(RequestState* r) {
  ReleaseBlocks(r);
  UnpinLora(r);
  Remove(&running_, r);
  Remove(&waiting_, r);
  r->phase = RequestState::Phase::kFinished;
  finished_.push_back(r);
}

FinishReason Scheduler::AppendToken(RequestState* r, int seq_index, int32_t token) {
  SequenceState& s = r->seqs[static_cast<size_t>(seq_index)];
  s.tokens.push_back(token);
  s.num_generated += 1;
  const SubmitRequest& q = r->req;
  FinishReason why = FinishReason::kNone;
  auto has = [token](const std::vector<int32_t>& v) {
    return std::find(v.begin(), v.end(), token) != v.end();
  };
  if (has(q.stop_token_ids) || (!q.ignore_eos && has(q.eog_ids))) {
    why = FinishReason::kStop;
  } else if (s.num_generated >= q.max_tokens ||
             static_cast<int>(s.tokens.size()) >= cfg_.max_model_len) {
    why = FinishReason::kLength;
  }
  if (why == FinishReason::kNone) return why;
  s.finish = why;
  if (s.kv_id >= 0 && kv_->Has(s.kv_id)) kv_->Free(s.kv_id);
  s.kv_id = -1;
  bool all_done = r->forked;
  for (const SequenceState& t : r->seqs) all_done = all_done && !t.live();
  if (all_done) FinishRequest(r);
  return why;
}

void Scheduler::FinishEmbedding(RequestState* r) {
  SequenceState& s = r->seqs[0];
  s.finish = FinishReason::kStop;
  FinishRequest(r);
}

std::unique_ptr<RequestState> Scheduler::Abort(RequestId id, FinishReason reason) {
  auto it = all_.find(id);
  if (it == all_.end()) return nullptr;
  RequestState* r = it->second.get();
  Unschedule(r);
  ReleaseBlocks(r);
  UnpinLora(r);
  if (r->phase == RequestState::Phase::kWaiting && !r->started) MarkNotQueued(r);
  Remove(&running_, r);
  Remove(&waiting_, r);
  Remove(&finished_, r);
  for (SequenceState& s : r->seqs)
    if (s.live()) s.finish = reason;
  r->phase = RequestState::Phase::kFinished;
  std::unique_ptr<RequestState> owned = std::move(it->second);
  all_.erase(it);
  return owned;
}

void Scheduler::ExpiredWaiting(TimePoint now, std::vector<RequestId>* out) const {
  const size_t first = out->size();
  for (const RequestState* r : waiting_) {
    if (!r->started && r->req.deadline && *r->req.deadline <= now) out->push_back(r->id);
  }
  std::sort(out->begin() + static_cast<std::ptrdiff_t>(first), out->end());  // ids follow arrival
}

void Scheduler::TakeFinished(std::vector<std::unique_ptr<RequestState>>* out) {
  for (RequestState* r : finished_) {
    auto it = all_.find(r->id);
    out->push_back(std::move(it->second));
    all_.erase(it);
  }
  finished_.clear();
}

}  // namespace strata::engine::sched
