// EmbeddingJobs: the /v1/embeddings requests in flight, as engine requests.
//
// Each input of an HTTP request is submitted to the engine as its own embedding request
// (engine::sched::RequestKind::kEmbed), so the inputs of one request and of concurrent requests are
// scheduled and batched by the engine like any prompt; the I/O thread that submits them returns at
// once (nothing blocks on the engine). Every embedding request delivers exactly one event; its
// stream's push wake-up (RequestStream::SetNotify, run on the engine thread) counts the inputs done
// (and Submit counts itself once it has all the handles), and when the count reaches zero the job
// goes to this object's worker thread, which collects the vectors and calls the job's `done` (which
// renders and sends the HTTP response). A client disconnect cancels the job's engine requests
// (Responder::OnClose -> Engine::Cancel).
//
// Ownership: borrows the engine, which must outlive this object. Owns the worker thread.
// Thread contract: Submit from any thread; `done` runs on the worker thread, one job at a time. The
// destructor cancels the jobs still in flight (their `done` never runs) and joins the worker.
// Errors: Submit returns the engine's Submit error (InvalidArgument, ResourceExhausted for a full
// queue, Unimplemented without hidden-state output) after cancelling the inputs already submitted;
// a job's result carries the first input's kError status, or Unavailable when it was cancelled.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "engine/sched/engine.h"
#include "http/server.h"

namespace strata::server {

struct EmbeddingResult {
  Status status;                            // OK, or why the job has no vectors
  std::vector<std::vector<float>> vectors;  // one per input, in input order (when OK)
};
using EmbeddingDone = std::function<void(EmbeddingResult result)>;

class EmbeddingJobs {
 public:
  explicit EmbeddingJobs(engine::sched::Engine* engine);
  ~EmbeddingJobs();
  EmbeddingJobs(const EmbeddingJobs&) = delete;
  EmbeddingJobs& operator=(const EmbeddingJobs&) = delete;

  // Submits one embedding request per input (each >= 1 token). On OK, `done` runs once on the
  // worker thread when every input has finished (or one failed / was cancelled). `out` is the
  // connection whose disconnect cancels the job (may be null). `lora`: the adapter every input
  // is computed with (null: the base model).
  Status Submit(std::vector<std::vector<int32_t>> inputs, engine::sched::Priority priority,
                const std::shared_ptr<http::Responder>& out, EmbeddingDone done,
                std::shared_ptr<const lora::Adapter> lora = nullptr);

  // Jobs submitted and not yet handed to `done`.
  int live() const;

 private:
  struct Job {
    uint64_t key = 0;
    std::vector<engine::sched::RequestHandle> handles;
    std::atomic<int> remaining{0};
    EmbeddingDone done;
  };
  // Shared with the engine-thread callbacks (which may outlive this object).
  struct State {
    Mutex mu;
    CondVar cv;
    std::unordered_map<uint64_t, std::shared_ptr<Job>> live GUARDED_BY(mu);
    std::deque<std::shared_ptr<Job>> ready GUARDED_BY(mu);
    bool stop GUARDED_BY(mu) = false;
  };
  static void InputDone(const std::weak_ptr<State>& state, const std::weak_ptr<Job>& job);
  static EmbeddingResult Collect(Job& job);
  void WorkerLoop();

  engine::sched::Engine* engine_;
  std::shared_ptr<State> state_;
  uint64_t next_key_ GUARDED_BY(state_->mu) = 1;
  std::thread worker_;
};

}  // namespace strata::server
