#include "server/embeddings.h"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace strata::server {

using engine::sched::FinishReason;

EmbeddingJobs::EmbeddingJobs(engine::sched::Engine* engine)
    : engine_(engine), state_(std::make_shared<State>()) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

EmbeddingJobs::~EmbeddingJobs() {
  std::vector<std::shared_ptr<Job>> left;
  {
    MutexLock lock(&state_->mu);
    state_->stop = true;
    for (auto& [key, job] : state_->live) left.push_back(std::move(job));
    state_->live.clear();
    state_->ready.clear();
  }
  state_->cv.NotifyAll();
  worker_.join();
  for (const auto& job : left)
    for (const auto& h : job->handles) engine_->Cancel(h.id);
}

int EmbeddingJobs::live() const {
  MutexLock lock(&state_->mu);
  return static_cast<int>(state_->live.size() + state_->ready.size());
}

// Runs on the engine thread after the one event of an input's stream was pushed.
void EmbeddingJobs::InputDone(const std::weak_ptr<State>& state,
                              const std::weak_ptr<Job>& weak_job) {
  std::shared_ptr<Job> job = weak_job.lock();
  if (!job || job->remaining.fetch_sub(1) != 1) return;
  std::shared_ptr<State> st = state.lock();
  if (!st) return;
  {
    MutexLock lock(&st->mu);
    auto it = st->live.find(job->key);
    if (st->stop || it == st->live.end()) return;  // shut down, or its Submit failed
    st->ready.push_back(std::move(it->second));
    st->live.erase(it);
  }
  st->cv.NotifyOne();
}

Status EmbeddingJobs::Submit(std::vector<std::vector<int32_t>> inputs,
                             engine::sched::Priority priority,
                             const std::shared_ptr<http::Responder>& out, EmbeddingDone done,
                             std::shared_ptr<const lora::Adapter> lora) {
  if (inputs.empty()) return Status::InvalidArgument("input: no inputs");
  auto job = std::make_shared<Job>();
  job->done = std::move(done);
  // One count per input, plus the submitter's, released below: the worker never sees the job
  // before this thread is done filling `handles`.
  job->remaining.store(static_cast<int>(inputs.size()) + 1);
  job->handles.reserve(inputs.size());
  {
    MutexLock lock(&state_->mu);
    if (state_->stop) return Status::Unavailable("the server is shutting down");
    job->key = next_key_++;
    state_->live.emplace(job->key, job);
  }
  const std::weak_ptr<State> weak_state = state_;
  const std::weak_ptr<Job> weak_job = job;
  for (auto& tokens : inputs) {
    engine::sched::SubmitRequest r;
    r.kind = engine::sched::RequestKind::kEmbed;
    r.prompt = std::move(tokens);
    r.priority = priority;
    r.lora = lora;
    auto h = engine_->Submit(std::move(r));
    if (!h.ok()) {
      {
        MutexLock lock(&state_->mu);
        state_->live.erase(job->key);  // its callbacks now find nothing to hand over
      }
      for (const auto& done_handle : job->handles) engine_->Cancel(done_handle.id);
      return h.status();
    }
    // The stream's push wake-up (engine thread) counts the input done. SetNotify may announce the
    // one event twice (once at registration if it already arrived, once from the Push racing it),
    // so each input counts once.
    auto counted = std::make_shared<std::atomic<bool>>(false);
    h->stream->SetNotify([weak_state, weak_job, counted] {
      if (!counted->exchange(true)) InputDone(weak_state, weak_job);
    });
    job->handles.push_back(std::move(h).value());  // json-access: not JSON (Result)
  }
  if (out) {
    engine::sched::Engine* engine = engine_;
    out->OnClose([weak_job, engine] {
      if (auto j = weak_job.lock())
        for (const auto& h : j->handles) engine->Cancel(h.id);
    });
  }
  InputDone(weak_state, weak_job);  // the submitter's count
  return Status::Ok();
}

EmbeddingResult EmbeddingJobs::Collect(Job& job) {
  EmbeddingResult result;
  result.vectors.reserve(job.handles.size());
  for (const auto& h : job.handles) {
    std::optional<engine::sched::TokenEvent> ev = h.stream->TryNext();
    if (!ev || ev->finish == FinishReason::kNone) {
      result.status =
          Status::Internal("embedding request " + std::to_string(h.id) + " ended without a result");
    } else if (ev->finish == FinishReason::kError) {
      result.status = ev->error.ok() ? Status::Internal("embedding failed") : ev->error;
    } else if (ev->finish == FinishReason::kCancelled) {
      result.status = Status::Unavailable("the embedding request was cancelled");
    } else {
      result.vectors.push_back(std::move(ev->embedding));
      continue;
    }
    result.vectors.clear();
    return result;
  }
  return result;
}

void EmbeddingJobs::WorkerLoop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      MutexLock lock(&state_->mu);
      while (!(state_->stop || !state_->ready.empty())) state_->cv.Wait(&state_->mu);
      if (state_->stop) return;
      job = std::move(state_->ready.front());
      state_->ready.pop_front();
    }
    EmbeddingResult result = Collect(*job);
    job->done(std::move(result));
  }
}

}  // namespace strata::server
