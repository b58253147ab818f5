// Api, generation half: /v1/completions and /v1/chat/completions — submit, stream events back on
// the response's work strand (Responder::Post, woken by RequestStream::SetNotify), build the OpenAI
// responses.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>

#include "http/sse.h"
#include "server/api.h"
#include "server/api_internal.h"
#include "server/response_id.h"

namespace strata::server {

using engine::sched::FinishReason;
using engine::sched::TokenEvent;
using http::Exchange;
using http::HttpResponse;
using nlohmann::json;

struct Api::Job {
  struct Choice {
    std::unique_ptr<tokenizer::IncrementalDecoder> dec;
    std::unique_ptr<StopMatcher> stop;
    std::string text;
    json logprobs = json::array();  // chat: content entries; completions: built at the end
    std::vector<std::string> lp_tokens;
    std::vector<float> lp_values;
    std::vector<json> lp_top;
    bool done = false;
    std::string finish;
    std::vector<int32_t> token_ids;  // every sampled token (return_token_ids)
    size_t ids_sent = 0;             // streamed: token_ids[0, ids_sent) went out in chunks
    bool streamed = false;           // streamed: this choice's first chunk went out
  };
  GenRequest req;
  engine::sched::RequestHandle handle;
  std::shared_ptr<http::Responder> out;
  std::string id;           // random (response_id.h)
  int64_t created = 0;      // this response's creation time (Unix seconds)
  bool sent_first = false;  // streamed: the first chunk (prompt_token_ids) went out
  std::string labels;       // model_name + tier (the priority label)
  std::atomic<bool> gone{false};
  bool finished = false;  // on the work strand: Process returned true, the job is forgotten
  std::vector<Choice> choices;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  SteadyTime arrival, first_token, last_token;
  bool have_first = false;
  bool error = false;
  std::string error_message;

  bool chat() const { return req.endpoint == Endpoint::kChat; }
  const char* route() const { return chat() ? "/v1/chat/completions" : "/v1/completions"; }
  const char* chunk_object() const { return chat() ? "chat.completion.chunk" : "text_completion"; }
};

namespace {

// The logprobs entry of one sampled token (chat's shape); also recorded on the choice for the
// final response.
json RecordLogprobs(const tokenizer::Tokenizer& tok, Api::Job::Choice& c, const TokenEvent& ev) {
  std::string piece = tok.TokenToPiece(ev.token);
  json top = json::array();
  json top_map = json::object();
  for (const auto& t : ev.top_logprobs()) {
    std::string tp = tok.TokenToPiece(t.id);
    top.push_back({{"token", tp},
                   {"logprob", t.logprob},
                   {"bytes", std::vector<uint8_t>(tp.begin(), tp.end())}});
    top_map[tp] = t.logprob;
  }
  json entry = {{"token", piece},
                {"logprob", ev.logprob},
                {"bytes", std::vector<uint8_t>(piece.begin(), piece.end())},
                {"top_logprobs", top}};
  c.logprobs.push_back(entry);
  c.lp_tokens.push_back(piece);
  c.lp_values.push_back(ev.logprob);
  c.lp_top.push_back(top_map);
  return entry;
}

// A streamed completions chunk's logprobs (the legacy shape) from chat-shaped entries.
json CompletionChunkLogprobs(const json& lp_chunk, size_t text_offset) {
  json tops = json::array();
  for (const auto& e : lp_chunk) {
    json m = json::object();
    for (const auto& t : e["top_logprobs"]) m[t["token"].get<std::string>()] = t["logprob"];
    tops.push_back(m);
  }
  return {{"tokens", json::array({lp_chunk[0]["token"]})},
          {"token_logprobs", json::array({lp_chunk[0]["logprob"]})},
          {"top_logprobs", tops},
          {"text_offset", json::array({text_offset})}};
}

// A choice's whole-response logprobs in the completions shape.
json CompletionLogprobs(const Api::Job::Choice& c) {
  std::vector<size_t> offsets;
  size_t off = 0;
  for (const auto& t : c.lp_tokens) {
    offsets.push_back(off);
    off += t.size();
  }
  return {{"tokens", c.lp_tokens},
          {"token_logprobs", c.lp_values},
          {"top_logprobs", c.lp_top},
          {"text_offset", offsets}};
}

// Ends choice `c` if `ev` finished it (or a stop string matched), appending the held-back text.
void FinishChoice(Api::Job::Choice& c, const TokenEvent& ev, std::string* delta) {
  if (c.stop->matched()) {
    c.done = true;
    c.finish = "stop";
    return;
  }
  if (ev.finish == FinishReason::kNone) return;
  *delta += c.stop->Push(c.dec->Flush());
  if (!c.stop->matched()) *delta += c.stop->Flush();
  c.done = true;
  c.finish = c.stop->matched() || ev.finish == FinishReason::kStop ? "stop"
             : ev.finish == FinishReason::kLength                  ? "length"
                                                                   : "abort";
}

// Engine fields (SubmitRequest::Validate names them first) that are also the client's OpenAI
// params.
constexpr std::string_view kEngineFields[] = {"prompt",       "max_tokens",     "n",
                                              "top_logprobs", "stop_token_ids", "tenant",
                                              "priority",     "logit_bias"};

// return_token_ids: the prompt's ids on the response (and, streamed, on the first chunk).
void AddPromptIds(const Api::Job& job, json* obj) {
  if (job.req.return_token_ids) (*obj)["prompt_token_ids"] = job.req.submit.prompt;
}

}  // namespace

HttpResponse FromEngineStatus(const Status& s) {
  std::string_view param;
  for (std::string_view f : kEngineFields) {
    const std::string& m = s.message();
    if (m.size() > f.size() + 1 && m.compare(0, f.size(), f) == 0 &&
        m.compare(f.size(), 2, ": ") == 0)
      param = f;
  }
  return Error(http::HttpStatusOf(s.code()), s.message(), param);
}

Api::~Api() {
  embeddings_.reset();  // joins its worker; cancels embeddings in flight
  std::vector<std::shared_ptr<Job>> jobs;
  {
    MutexLock lock(&mu_);
    jobs.swap(jobs_);
  }
  for (auto& j : jobs) {
    j->handle.stream->SetNotify(nullptr);
    engine_->Cancel(j->handle.id);
  }
}

std::optional<HttpResponse> Api::ApplyHeaders(const http::HttpRequest& req, GenRequest& g) {
  // Tenant (x-strata-tenant): owns the request's KV-tier quota and isolates its prefix cache (the
  // tenant is bound into every block hash, so tenants never share or probe each other's blocks).
  if (std::string_view tenant = req.Header("x-strata-tenant"); !tenant.empty()) {
    if (tenant.size() > engine::sched::kMaxTenantBytes)
      return Error(400, "x-strata-tenant: longer than 256 bytes", "x-strata-tenant");
    for (char c : tenant) {
      if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e)
        return Error(400, "x-strata-tenant: must be printable ASCII without spaces",
                     "x-strata-tenant");
    }
    g.submit.tenant.assign(tenant);  // the engine binds it into the prefix-cache salt
  }
  std::optional<int64_t> deadline_ms = g.deadline_ms;
  if (!deadline_ms && !req.Header("x-strata-deadline-ms").empty()) {
    std::string_view h = req.Header("x-strata-deadline-ms");
    int64_t v = 0;
    auto [end, ec] = std::from_chars(h.data(), h.data() + h.size(), v);
    if (ec != std::errc() || end != h.data() + h.size() || v < 1 || v > (int64_t{1} << 40))
      return Error(400, "x-strata-deadline-ms: must be a positive integer (milliseconds)",
                   "x-strata-deadline-ms");
    deadline_ms = v;
  }
  if (deadline_ms)
    g.submit.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(*deadline_ms);
  return std::nullopt;
}

HttpResponse Api::Generate(Endpoint ep, Exchange& ex) {
  SteadyTime arrival = std::chrono::steady_clock::now();
  auto parsed = ParseGenRequest(ep, ex.body, model_, ex.request.Header("x-strata-tier"));
  if (!parsed.ok()) return http::ErrorResponse(parsed.error());
  GenRequest g = std::move(*parsed);
  if (auto bad = ApplyHeaders(ex.request, g)) return std::move(*bad);
  auto handle = engine_->Submit(g.submit);
  if (!handle.ok()) {
    HttpResponse r = FromEngineStatus(handle.status());
    if (r.status == 429)
      r.headers.emplace_back("Retry-After", std::to_string(options_.retry_after_s));
    return r;
  }
  std::shared_ptr<Job> job = NewJob(ep, std::move(g), *handle);
  job->out = ex.out;
  job->arrival = arrival;
  metrics_.Observe("strata:request_queue_time_seconds", job->labels,
                   Seconds(arrival, std::chrono::steady_clock::now()));
  metrics_.Add("strata:prompt_tokens_total", job->labels, job->prompt_tokens);
  if (job->req.stream) StartStream(*job);
  Watch(job);
  HttpResponse r;
  r.status = http::kDeferred;
  return r;
}

std::shared_ptr<Api::Job> Api::NewJob(Endpoint ep, GenRequest g,
                                      engine::sched::RequestHandle handle) {
  auto job = std::make_shared<Job>();
  job->req = std::move(g);
  job->handle = std::move(handle);
  job->prompt_tokens = static_cast<int>(job->req.submit.prompt.size());
  auto priority = std::string(engine::sched::PriorityName(job->req.submit.priority));
  job->labels = http::Labels({{"model_name", model_.name}, {"tier", priority}});
  job->id = NewResponseId(ep == Endpoint::kChat ? "chatcmpl" : "cmpl");
  job->created = UnixSecondsNow();
  job->choices.resize(static_cast<size_t>(job->req.submit.n));
  for (auto& c : job->choices) {
    c.dec = std::make_unique<tokenizer::IncrementalDecoder>(*model_.tok);
    c.stop = std::make_unique<StopMatcher>(job->req.stop);
  }
  return job;
}

// SSE headers, and for chat the first chunk (every choice's assistant role).
void Api::StartStream(Job& job) {
  http::SseWriter(job.out).Begin();
  if (!job.chat()) return;
  json choices = json::array();
  for (size_t i = 0; i < job.choices.size(); ++i)
    choices.push_back({{"index", i},
                       {"delta", {{"role", "assistant"}, {"content", ""}}},
                       {"logprobs", nullptr},
                       {"finish_reason", nullptr}});
  json chunk = {{"id", job.id},
                {"object", "chat.completion.chunk"},
                {"created", job.created},
                {"model", model_.name},
                {"choices", choices}};
  AddPromptIds(job, &chunk);
  job.sent_first = true;
  job.out->Write(http::SseEvent(Dump(chunk)));
}

// Registers the job and wires its two wake-ups: the engine's push (a drain posted to the
// response's work strand per batch of events) and the client's disconnect (cancel, then drain).
void Api::Watch(const std::shared_ptr<Job>& job) {
  {
    MutexLock lock(&mu_);
    jobs_.push_back(job);
  }
  std::weak_ptr<Job> weak = job;
  auto* engine = engine_;
  const auto rid = job->handle.id;
  job->out->OnClose([weak, engine, rid, this] {  // runs on the connection's strand
    engine->Cancel(rid);
    if (auto j = weak.lock()) {
      j->gone.store(true);
      j->out->Post([this, j] { Drain(j); });
    }
  });
  job->handle.stream->SetNotify([weak, this] {  // runs on the engine thread: hand over only
    if (auto j = weak.lock()) j->out->Post([this, j] { Drain(j); });
  });
}

void Api::Drain(const std::shared_ptr<Job>& job) {
  if (job->finished || !Process(*job)) return;
  job->finished = true;
  Forget(*job);
}

void Api::Forget(const Job& job) {
  job.handle.stream->SetNotify(nullptr);
  MutexLock lock(&mu_);
  std::erase_if(jobs_, [&](const std::shared_ptr<Job>& j) { return j.get() == &job; });
}

bool Api::Process(Job& job) {
  if (job.gone.load()) {
    CountAbort(job);
    return true;
  }
  while (auto ev = job.handle.stream->TryNext())
    if (!OnEvent(job, *ev)) break;
  for (const auto& c : job.choices)
    if (!c.done) return false;
  engine_->Cancel(
      job.handle.id);  // no-op when the engine already finished it (stop strings end early)
  Finish(job);
  return true;
}

bool Api::OnEvent(Job& job, const TokenEvent& ev) {
  if (ev.index < 0 || static_cast<size_t>(ev.index) >= job.choices.size()) return true;
  auto& c = job.choices[static_cast<size_t>(ev.index)];
  if (c.done) return true;
  if (ev.finish == FinishReason::kError) {
    job.error = true;
    job.error_message = std::string(ev.error.message());
    for (auto& x : job.choices) x.done = true;
    return false;
  }
  if (ev.token >= 0) {
    SteadyTime now = std::chrono::steady_clock::now();
    ++job.completion_tokens;
    if (job.req.return_token_ids) c.token_ids.push_back(ev.token);
    if (!job.have_first) {
      job.have_first = true;
      job.first_token = now;
      metrics_.Observe("strata:time_to_first_token_seconds", job.labels, Seconds(job.arrival, now));
    } else {
      metrics_.Observe("strata:inter_token_latency_seconds", job.labels,
                       Seconds(job.last_token, now));
    }
    job.last_token = now;
  }
  std::string delta;
  json lp_chunk = json::array();
  if (ev.token >= 0 && ev.finish != FinishReason::kStop) {
    delta = c.stop->Push(c.dec->Push(ev.token));
    if (job.req.submit.logprobs) lp_chunk.push_back(RecordLogprobs(*model_.tok, c, ev));
  }
  FinishChoice(c, ev, &delta);
  if (!job.req.stream) {
    c.text += delta;
  } else if (!delta.empty() || c.done || !lp_chunk.empty()) {
    StreamDelta(job, ev.index, delta, lp_chunk);
  }
  return true;
}

void Api::StreamDelta(Job& job, int index, const std::string& delta, const json& lp_chunk) {
  auto& c = job.choices[static_cast<size_t>(index)];
  const bool chat = job.chat();
  json lp = nullptr;
  if (job.req.submit.logprobs && !lp_chunk.empty())
    lp = chat ? json{{"content", lp_chunk}} : CompletionChunkLogprobs(lp_chunk, c.text.size());
  c.text += delta;
  json choice = {{"index", index},
                 {"logprobs", lp},
                 {"finish_reason", c.done ? json(c.finish) : json(nullptr)}};
  if (chat)
    choice["delta"] = delta.empty() ? json::object() : json{{"content", delta}};
  else
    choice["text"] = delta;
  if (job.req.return_token_ids) {  // the ids sampled since this choice's last chunk
    choice["token_ids"] = std::vector<int32_t>(
        c.token_ids.begin() + static_cast<std::ptrdiff_t>(c.ids_sent), c.token_ids.end());
    c.ids_sent = c.token_ids.size();
    if (!chat && !c.streamed) choice["prompt_token_ids"] = job.req.submit.prompt;  // vLLM's place
  }
  c.streamed = true;
  json chunk = {{"id", job.id},
                {"object", job.chunk_object()},
                {"created", job.created},
                {"model", model_.name},
                {"choices", json::array({choice})}};
  if (!job.sent_first) AddPromptIds(job, &chunk);
  job.sent_first = true;
  job.out->Write(http::SseEvent(Dump(chunk)));
}

void Api::CountAbort(const Job& job) {
  metrics_.Add("strata:request_success_total",
               http::Labels({{"model_name", model_.name},
                             {"tier", engine::sched::PriorityName(job.req.submit.priority)},
                             {"finished_reason", "abort"}}),
               1);
  metrics_.Add(
      "strata:http_requests_total",
      http::Labels({{"model_name", model_.name}, {"route", job.route()}, {"status", "499"}}), 1);
}

void Api::Finish(Job& job) {
  SteadyTime now = std::chrono::steady_clock::now();
  json usage = {{"prompt_tokens", job.prompt_tokens},
                {"completion_tokens", job.completion_tokens},
                {"total_tokens", job.prompt_tokens + job.completion_tokens}};
  const int status = !job.req.stream && job.error ? 500 : 200;
  // Counted before the response goes out, so a client that reads /metrics after its response
  // always sees its request.
  std::string reason = job.error ? "error" : job.choices.empty() ? "stop" : job.choices[0].finish;
  metrics_.Add("strata:request_success_total",
               http::Labels({{"model_name", model_.name},
                             {"tier", engine::sched::PriorityName(job.req.submit.priority)},
                             {"finished_reason", reason}}),
               1);
  metrics_.Add("strata:http_requests_total",
               http::Labels({{"model_name", model_.name},
                             {"route", job.route()},
                             {"status", std::to_string(status)}}),
               1);
  metrics_.Observe("strata:e2e_request_latency_seconds", job.labels, Seconds(job.arrival, now));
  metrics_.Observe("strata:request_prompt_tokens", job.labels, job.prompt_tokens);
  metrics_.Observe("strata:request_generation_tokens", job.labels, job.completion_tokens);
  metrics_.Add("strata:generation_tokens_total", job.labels, job.completion_tokens);
  if (job.req.stream) return FinishStream(job, usage);
  if (job.error) return job.out->Respond(Error(500, "engine error: " + job.error_message));
  json resp = {{"id", job.id},
               {"object", job.chat() ? "chat.completion" : "text_completion"},
               {"created", job.created},
               {"model", model_.name},
               {"choices", FinalChoices(job)},
               {"usage", usage}};
  AddPromptIds(job, &resp);
  job.out->Respond(JsonResponse(200, resp));
}

void Api::FinishStream(Job& job, const json& usage) {
  if (job.error) {
    job.out->Write(
        http::SseEvent(http::ErrorBody(job.error_message, "server_error", "", "engine_error")));
  } else if (job.req.include_usage) {
    json chunk = {{"id", job.id},         {"object", job.chunk_object()}, {"created", job.created},
                  {"model", model_.name}, {"choices", json::array()},     {"usage", usage}};
    job.out->Write(http::SseEvent(Dump(chunk)));
  }
  http::SseWriter(job.out).Done();
}

json Api::FinalChoices(const Job& job) const {
  const bool chat = job.chat();
  json choices = json::array();
  for (size_t i = 0; i < job.choices.size(); ++i) {
    const auto& c = job.choices[i];
    json lp = nullptr;
    if (job.req.submit.logprobs) lp = chat ? json{{"content", c.logprobs}} : CompletionLogprobs(c);
    json choice = {{"index", i}, {"logprobs", lp}, {"finish_reason", c.finish}};
    if (chat)
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    else
      choice["text"] = c.text;
    if (job.req.return_token_ids) {
      choice["token_ids"] = c.token_ids;
      if (!chat) choice["prompt_token_ids"] = job.req.submit.prompt;  // where vLLM has it
    }
    choices.push_back(choice);
  }
  return choices;
}

}  // namespace strata::server
