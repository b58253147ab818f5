#include "engine/sched/request.h"

#include <array>
#include <string>

#include "base/enum_names.h"

namespace strata::engine::sched {

constexpr auto kFinishReasonNames =
    EnumNames<FinishReason::kError>("", "stop", "length", "cancelled", "error");

std::string_view FinishReasonName(FinishReason r) { return EnumName(kFinishReasonNames, r); }

namespace {
// `client`: the ids are a client's field (the error is about it), not the model's.
Status CheckIds(std::string_view field, std::span<const int32_t> ids, int n_vocab, bool client) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab) {
      Status s = Status::InvalidArgument(std::string(field) + "[" + std::to_string(i) +
                                         "]: token id " + std::to_string(ids[i]) +
                                         " out of range [0, " + std::to_string(n_vocab) + ")");
      return client ? s.WithField(std::string(field)) : s;
    }
  }
  return Status::Ok();
}
// An adapter's digest becomes the request's `adapter` fact (Engine::Submit): an empty one would
// give the base model's prefix-cache salt, a long one exceed the salt bound.
Status CheckLora(const lora::Adapter* lora) {
  if (lora == nullptr) return Status::Ok();
  if (lora->digest().empty())
    return Status::InvalidArgument("lora: adapter '" + lora->name() + "' has an empty digest");
  if (lora->digest().size() > kMaxAdapterBytes)
    return Status::InvalidArgument("lora: adapter '" + lora->name() +
                                   "' has a digest longer than " +
                                   std::to_string(kMaxAdapterBytes) + " bytes");
  return Status::Ok();
}
// The fields every kind of request carries: who it is for and what applies to it.
Status CheckTenantAdapterPriority(const SubmitRequest& r) {
  if (r.tenant.size() > kMaxTenantBytes)
    return Status::InvalidField("tenant",
                                "longer than " + std::to_string(kMaxTenantBytes) + " bytes");
  if (r.adapter.size() > kMaxAdapterBytes)
    return Status::InvalidArgument("adapter: longer than " + std::to_string(kMaxAdapterBytes) +
                                   " bytes");
  RETURN_IF_ERROR(CheckLora(r.lora.get()));
  if (static_cast<uint8_t>(r.priority) > static_cast<uint8_t>(Priority::kBronze))
    return Status::InvalidField("priority",
                                "invalid value " + std::to_string(static_cast<int>(r.priority)));
  return Status::Ok();
}
}  // namespace

Status SubmitRequest::Validate(int n_vocab, int max_model_len) const {
  if (kind == RequestKind::kEmbed) return ValidateEmbed(n_vocab, max_model_len);
  if (kind != RequestKind::kGenerate)
    return Status::InvalidArgument("kind: invalid value " + std::to_string(static_cast<int>(kind)));
  if (prompt.empty()) return Status::InvalidField("prompt", "must contain at least one token");
  RETURN_IF_ERROR(CheckIds("prompt", prompt, n_vocab, true));
  if (Status s = sampling.Validate(); !s.ok()) return s.WithContext("sampling");
  for (const sampler::LogitBias& b : sampling.logit_bias)
    if (b.id >= n_vocab)
      return Status::InvalidField("logit_bias", "token id " + std::to_string(b.id) +
                                                    " is out of range [0, " +
                                                    std::to_string(n_vocab) + ")");
  if (max_tokens < 1)
    return Status::InvalidField("max_tokens", "must be >= 1, got " + std::to_string(max_tokens));
  if (static_cast<int64_t>(prompt.size()) + max_tokens > max_model_len) {
    return Status::InvalidField(
        "max_tokens", "prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
                          std::to_string(max_tokens) + ") exceeds max_model_len (" +
                          std::to_string(max_model_len) + ")");
  }
  if (stop_token_ids.size() > kMaxStopTokenIds)
    return Status::InvalidField("stop_token_ids",
                                "more than " + std::to_string(kMaxStopTokenIds) + " ids");
  RETURN_IF_ERROR(CheckIds("stop_token_ids", stop_token_ids, n_vocab, true));
  if (eog_ids.size() > kMaxStopTokenIds)
    return Status::InvalidArgument("eog_ids: more than " + std::to_string(kMaxStopTokenIds) +
                                   " ids");
  RETURN_IF_ERROR(CheckIds("eog_ids", eog_ids, n_vocab, false));
  if (n < 1 || n > kMaxN)
    return Status::InvalidField(
        "n", "must be in [1, " + std::to_string(kMaxN) + "], got " + std::to_string(n));
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs)
    return Status::InvalidField("top_logprobs", "must be in [0, " +
                                                    std::to_string(kMaxTopLogprobs) + "], got " +
                                                    std::to_string(top_logprobs));
  if (top_logprobs > 0 && !logprobs)
    return Status::InvalidField("top_logprobs", "requires logprobs = true");
  if (prompt_logprobs < -1 || prompt_logprobs > kMaxTopLogprobs)
    return Status::InvalidField("prompt_logprobs", "must be in [-1, " +
                                                       std::to_string(kMaxTopLogprobs) + "], got " +
                                                       std::to_string(prompt_logprobs));
  return CheckTenantAdapterPriority(*this);
}

Status SubmitRequest::ValidateEmbed(int n_vocab, int max_model_len) const {
  if (prompt.empty()) return Status::InvalidField("prompt", "must contain at least one token");
  RETURN_IF_ERROR(CheckIds("prompt", prompt, n_vocab, true));
  if (static_cast<int64_t>(prompt.size()) > max_model_len) {
    return Status::InvalidField("prompt", std::to_string(prompt.size()) +
                                              " tokens exceed max_model_len (" +
                                              std::to_string(max_model_len) + ")");
  }
  if (n != 1)
    return Status::InvalidField(
        "n", "an embedding request has one output, got n = " + std::to_string(n));
  if (logprobs || top_logprobs != 0)
    return Status::InvalidArgument("logprobs: not available for an embedding request");
  if (prompt_logprobs != -1)
    return Status::InvalidField("prompt_logprobs", "not available for an embedding request");
  return CheckTenantAdapterPriority(*this);
}

int64_t SubmitRequest::MaxPositions() const {
  const int64_t p = static_cast<int64_t>(prompt.size());
  return kind == RequestKind::kEmbed ? p : p + max_tokens;
}

void RequestStream::Push(const TokenEvent& ev) {
  bool was_empty = false;
  {
    MutexLock lk(&mu_);
    if (head_ == buf_.size()) {  // drained: reuse from the start
      buf_.clear();
      head_ = 0;
      was_empty = true;
    }
    buf_.push_back(ev);
    if (ev.finish != FinishReason::kNone) ++finished_;
  }
  cv_.NotifyAll();
  if (was_empty) {
    MutexLock lk(&notify_mu_);
    if (notify_) notify_();
  }
}

void RequestStream::SetNotify(std::function<void()> notify) {
  MutexLock lk(&notify_mu_);
  notify_ = std::move(notify);
  bool waiting = false;
  {
    MutexLock data_lk(&mu_);
    waiting = head_ < buf_.size();
  }
  // Events pushed before the callback was there: announce them now.
  if (waiting && notify_) notify_();
}

std::optional<TokenEvent> RequestStream::PopLocked() {
  if (head_ == buf_.size()) return std::nullopt;
  TokenEvent ev = buf_[head_++];
  if (head_ == buf_.size()) {
    buf_.clear();
    head_ = 0;
  }
  return ev;
}

std::optional<TokenEvent> RequestStream::Next() {
  MutexLock lk(&mu_);
  while (!(head_ < buf_.size() || CompleteLocked())) cv_.Wait(&mu_);
  return PopLocked();
}

std::optional<TokenEvent> RequestStream::NextFor(std::chrono::nanoseconds timeout) {
  MutexLock lk(&mu_);
  // What wait_for(lock, timeout, pred) does: wait until the condition or the deadline.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!(head_ < buf_.size() || CompleteLocked())) {
    if (!cv_.WaitUntil(&mu_, deadline)) break;
  }
  return PopLocked();
}

std::optional<TokenEvent> RequestStream::TryNext() {
  MutexLock lk(&mu_);
  return PopLocked();
}

bool RequestStream::complete() const {
  MutexLock lk(&mu_);
  return CompleteLocked();
}

std::vector<TokenEvent> RequestStream::DrainAll() {
  std::vector<TokenEvent> out;
  while (auto ev = Next()) out.push_back(*ev);
  return out;
}

}  // namespace strata::engine::sched
