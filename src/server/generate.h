// GenerationJobs: POST /v1/completions and /v1/chat/completions — the table of generation jobs in
// flight, from submit to the last byte.
//
// Handle parses the body into a GenRequest (openai_request.h), submits one engine request per
// prompt and installs a notification on each request's stream (RequestStream::SetNotify). The
// engine thread's push posts one drain per batch of events to the response's work strand
// (http::Responder::Post, an I/O thread, kept apart from the socket's strand); the drain
// detokenizes incrementally, applies stop strings and hands SSE events (or, at the end, the whole
// response) to the connection's Responder. Nothing polls: an idle server blocks. A client
// disconnect cancels the job's engine requests at once (Responder::OnClose -> Engine::Cancel).
//
// Ownership: borrows the ApiContext and the LoraRoutes (adapter lookup and counting); the jobs
// hold Responders of their connections. The destructor detaches every live job from its streams
// and cancels it.
// Thread contract: Handle, live and CutAtShutdown from any thread; the job table is guarded by
// mu_; one job's drains run on its response's work strand, so a job is never processed by two
// threads at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "engine/sched/engine.h"
#include "http/chain.h"
#include "server/api_context.h"
#include "server/lora_routes.h"
#include "server/openai_request.h"

namespace strata::server {

struct RequestBreakdown;  // request_timing.h
struct RequestTrace;      // request_spans.h

class GenerationJobs {
 public:
  GenerationJobs(ApiContext* ctx, LoraRoutes* lora);
  ~GenerationJobs();
  GenerationJobs(const GenerationJobs&) = delete;
  GenerationJobs& operator=(const GenerationJobs&) = delete;

  // The route handler of `ep`: an error response, or http::kDeferred (the job answers).
  http::HttpResponse Handle(Endpoint ep, http::Exchange& ex);
  // Generations in flight.
  int live() const;
  // Ends every generation in flight (Api::CutAtShutdown) and returns how many were cut.
  int CutAtShutdown(std::chrono::milliseconds wait);

  struct Job;

 private:
  using SteadyTimePoint = std::chrono::steady_clock::time_point;
  // Every prompt of the request submitted; an error response (the ones submitted cancelled) if
  // the engine refuses one.
  std::optional<http::HttpResponse> Submit(const GenRequest& g,
                                           std::vector<engine::sched::RequestHandle>* handles);
  std::shared_ptr<Job> NewJob(Endpoint ep, GenRequest g,
                              std::vector<engine::sched::RequestHandle> handles);
  void Watch(const std::shared_ptr<Job>& job);
  void Drain(const std::shared_ptr<Job>& job);  // on the response's work strand
  bool Process(Job& job);                       // returns true when the job is finished
  // An event of engine request `sub` (the batch's prompt); false: an error ended the job.
  bool OnEvent(Job& job, size_t sub, const engine::sched::TokenEvent& ev);
  // A choice's first event: its echo text (and prompt logprobs).
  std::string StartChoice(Job& job, size_t index, const engine::sched::TokenEvent& ev);
  void CountAbort(Job& job);
  void CutJob(Job& job);  // on the job's work strand
  void Finish(Job& job);
  void ObserveBreakdown(const Job& job, const RequestBreakdown& b);
  // Tracing: the sampled request's trace identity (null: not traced), and its spans exported when
  // the job ends (on its work strand).
  std::unique_ptr<RequestTrace> StartTrace(const http::HttpRequest& req, SteadyTimePoint arrival);
  void ExportTrace(const Job& job);
  void Forget(const Job& job);

  ApiContext* ctx_;
  LoraRoutes* lora_;
  mutable Mutex mu_;
  std::vector<std::shared_ptr<Job>> jobs_ GUARDED_BY(mu_);  // live generation jobs
};

}  // namespace strata::server
