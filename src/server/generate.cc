// GenerationJobs (generate.h): /v1/completions and /v1/chat/completions — submit, stream
// events back on the response's work strand (Responder::Post, woken by RequestStream::SetNotify),
// build the OpenAI responses.
#include "server/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "http/sse.h"
#include "protocol/wire.h"
#include "server/api_internal.h"
#include "server/request_spans.h"
#include "server/request_timing.h"
#include "server/response_id.h"
#include "tokenizer/utf8.h"

namespace strata::server {

using engine::sched::FinishReason;
using engine::sched::TokenEvent;
using http::Exchange;
using http::HttpResponse;
// Insertion-ordered objects: response keys in the order written, and completions' top_logprobs
// maps most likely first.
using json = nlohmann::ordered_json;

struct GenerationJobs::Job {
  struct Choice {
    size_t sub = 0;  // its engine request (prompt) in Job::handles
    std::unique_ptr<tokenizer::IncrementalDecoder> dec;
    std::unique_ptr<StopMatcher> stop;
    std::string text;
    bool started = false;  // its first event was seen (echo written)
    // Logprobs, one entry per reported token (echo: the prompt's tokens first). chat: content
    // entries; completions: the four parallel arrays of the legacy shape.
    json chat_lp = json::array();
    json lp_tokens = json::array(), lp_values = json::array(), lp_top = json::array(),
         lp_offsets = json::array();
    size_t lp_sent = 0;     // entries already streamed
    size_t text_chars = 0;  // code points of the token strings so far (the next text_offset)
    bool done = false;
    std::string finish;
    std::vector<int32_t> token_ids;  // every sampled token (return_token_ids)
    size_t ids_sent = 0;             // streamed: token_ids[0, ids_sent) went out in chunks
    bool streamed = false;           // streamed: this choice's first chunk went out
  };
  GenRequest req;
  // One engine request per prompt (a batch), all submitted together; choice p * n + j is
  // completion j of handles[p].
  std::vector<engine::sched::RequestHandle> handles;
  std::shared_ptr<http::Responder> out;
  std::string id;           // random (response_id.h)
  int64_t created = 0;      // this response's creation time (Unix seconds)
  bool sent_first = false;  // streamed: the first chunk (prompt_token_ids) went out
  std::string labels;       // model_name + tier (the priority label)
  std::string model;        // the response's `model`: the adapter's name, or the base model's
  std::atomic<bool> gone{false};
  bool finished = false;  // on the work strand: Process returned true, the job is forgotten
  std::vector<Choice> choices;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  SteadyTime arrival, first_token, last_token;
  bool have_first = false;
  // The latest timeline snapshot of each engine request (handles[k]), for the breakdown.
  std::vector<std::shared_ptr<const engine::sched::RequestTimeline>> timelines;
  bool timing = false;                  // x-strata-timing: 1 (the breakdown on the response)
  std::unique_ptr<RequestTrace> trace;  // sampled for tracing (request_spans.h); else null
  int answer_status = 200;              // the HTTP status answered (499: the client left)
  std::string answer_error;             // why it failed, for the span status
  bool error = false;
  std::string error_message;
  Status error_status;  // the engine's: a runner failure, DeadlineExceeded or displaced

  bool chat() const { return req.endpoint == Endpoint::kChat; }
  const char* route() const { return chat() ? "/v1/chat/completions" : "/v1/completions"; }
  const char* chunk_object() const { return chat() ? "chat.completion.chunk" : "text_completion"; }
  void CancelAll(engine::sched::Engine* engine) const {
    for (const auto& h : handles) engine->Cancel(h.id);
  }
};

namespace {

using Job = GenerationJobs::Job;

// Unicode code points of valid UTF-8 (what the decoder releases): bytes that are not
// continuation bytes.
size_t CodePoints(std::string_view s) {
  size_t n = 0;
  for (char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

// An alternative token's string (top_logprobs): its piece as text, invalid or partial UTF-8
// replaced by U+FFFD (so pieces that show alike are one key of a completions map).
std::string AltPiece(const tokenizer::Tokenizer& tok, int32_t id) {
  return tokenizer::SanitizeUtf8(tok.TokenToPiece(id));
}

// Records one reported token on the choice. `text` is what the token adds to the choice's text
// (the decoder's output for it; empty for a byte that only starts a character, the completing
// token carries the whole character); `logprob` null for the first prompt token (no context);
// `top` the alternatives, most likely first (null: none reported at this position).
void RecordLogprob(const tokenizer::Tokenizer& tok, bool chat, Job::Choice& c,
                   const std::string& text, int32_t id, std::optional<float> logprob,
                   std::optional<std::span<const engine::sched::TopLogprob>> top) {
  if (chat) {
    json alts = json::array();
    for (const auto& t : top.value_or(std::span<const engine::sched::TopLogprob>{})) {
      std::string tp = AltPiece(tok, t.id);
      alts.push_back({{"token", tp},
                      {"logprob", t.logprob},
                      {"bytes", std::vector<uint8_t>(tp.begin(), tp.end())}});
    }
    const std::string raw = tok.TokenToPiece(id);
    c.chat_lp.push_back({{"token", text},
                         {"logprob", logprob ? json(*logprob) : json(nullptr)},
                         {"bytes", std::vector<uint8_t>(raw.begin(), raw.end())},
                         {"top_logprobs", alts}});
  } else {
    json m = json::object();
    if (top) {
      for (const auto& t : *top) {
        std::string tp = AltPiece(tok, t.id);
        if (!m.contains(tp)) m[tp] = t.logprob;  // pieces equal as text: the likelier one
      }
    }
    c.lp_tokens.push_back(text);
    c.lp_values.push_back(logprob ? json(*logprob) : json(nullptr));
    c.lp_top.push_back(top ? m : json(nullptr));
    c.lp_offsets.push_back(c.text_chars);
  }
  c.text_chars += CodePoints(text);
}

// Entries [from, end) of a choice's logprobs in the response's shape.
json LogprobsFrom(const Job::Choice& c, bool chat, size_t from) {
  auto slice = [from](const json& a) {
    json out = json::array();
    for (size_t i = from; i < a.size(); ++i) out.push_back(a[i]);
    return out;
  };
  if (chat) return {{"content", slice(c.chat_lp)}};
  return {{"tokens", slice(c.lp_tokens)},
          {"token_logprobs", slice(c.lp_values)},
          {"top_logprobs", slice(c.lp_top)},
          {"text_offset", slice(c.lp_offsets)}};
}

size_t LogprobCount(const Job::Choice& c, bool chat) {
  return chat ? c.chat_lp.size() : c.lp_tokens.size();
}

// Ends choice `c` if `ev` finished it (or a stop string matched), appending the held-back text.
void FinishChoice(Job::Choice& c, const TokenEvent& ev, std::string* delta) {
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

// How an engine error event ends a request (non-streamed: the HTTP status and error body;
// streamed: the same body as an SSE error event, then [DONE]), by the event's status code.
// Anything else is a runner failure (500, "engine error").
struct EngineErrorKind {
  StatusCode code;
  int http_status;
  std::string_view type, error_code, param, metric;
};
constexpr EngineErrorKind kEngineErrors[] = {
    // Not admitted before deadline_ms / x-strata-deadline-ms passed: 504, as a gateway answers a
    // request its upstream did not serve in time (Envoy's upstream timeout, gRPC
    // DEADLINE_EXCEEDED).
    {StatusCode::kDeadlineExceeded, 504, "timeout_error", "deadline_exceeded", "deadline_ms",
     "strata:requests_deadline_exceeded_total"},
    // Displaced from the full waiting queue by a higher-priority request: 429 + Retry-After.
    {StatusCode::kResourceExhausted, 429, "rate_limit_error", "displaced", "priority",
     "strata:requests_displaced_total"},
};

const EngineErrorKind* FindEngineError(const Status& s) {
  for (const EngineErrorKind& k : kEngineErrors)
    if (k.code == s.code()) return &k;
  return nullptr;
}

// return_token_ids: the prompt's ids on the response (and, streamed, on the first chunk); a batch
// has one list per prompt (each choice also carries its own prompt's, where vLLM has it).
void AddPromptIds(const Job& job, json* obj) {
  if (!job.req.return_token_ids) return;
  if (job.req.prompts.size() > 1)
    (*obj)["prompt_token_ids"] = job.req.prompts;
  else
    (*obj)["prompt_token_ids"] = job.req.submit.prompt;
}

std::optional<HttpResponse> ApplyHeaders(const http::HttpRequest& req, GenRequest& g) {
  using protocol::kHeaderDeadlineMs;
  using protocol::kHeaderTenant;
  // Tenant: owns the request's KV-tier quota and isolates its prefix cache (the tenant is bound
  // into every block hash, so tenants never share or probe each other's blocks).
  if (std::string_view tenant = req.Header(kHeaderTenant); !tenant.empty()) {
    if (tenant.size() > protocol::kMaxTenantBytes)
      return http::ErrorResponse(Status::InvalidField(
          kHeaderTenant, fmt::format("longer than {} bytes", protocol::kMaxTenantBytes)));
    for (char c : tenant) {
      if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e)
        return http::ErrorResponse(
            Status::InvalidField(kHeaderTenant, "must be printable ASCII without spaces"));
    }
    g.submit.tenant.assign(tenant);  // the engine binds it into the prefix-cache salt
  }
  std::optional<int64_t> deadline_ms = g.deadline_ms;
  if (std::string_view h = req.Header(kHeaderDeadlineMs); !deadline_ms && !h.empty()) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(h.data(), h.data() + h.size(), v);
    if (ec != std::errc() || end != h.data() + h.size() || v < 1 || v > protocol::kMaxDeadlineMs)
      return http::ErrorResponse(
          Status::InvalidField(kHeaderDeadlineMs, "must be a positive integer (milliseconds)"));
    deadline_ms = v;
  }
  if (deadline_ms)
    g.submit.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(*deadline_ms);
  return std::nullopt;
}

// SSE headers, and for chat the first chunk (every choice's assistant role).
void StartStream(Job& job) {
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
                {"model", job.model},
                {"choices", choices}};
  AddPromptIds(job, &chunk);
  job.sent_first = true;
  job.out->Write(http::SseEvent(Dump(chunk)));
}

// One chunk of choice `index`: `delta` (appended to the choice's text here) and the logprobs
// entries not streamed yet.
void StreamDelta(Job& job, size_t index, const std::string& delta) {
  auto& c = job.choices[index];
  const bool chat = job.chat();
  json lp = nullptr;
  if (job.req.submit.logprobs && LogprobCount(c, chat) > c.lp_sent) {
    lp = LogprobsFrom(c, chat, c.lp_sent);
    c.lp_sent = LogprobCount(c, chat);
  }
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
    if (!chat && !c.streamed) choice["prompt_token_ids"] = job.req.prompts[c.sub];  // vLLM's place
  }
  c.streamed = true;
  json chunk = {{"id", job.id},
                {"object", job.chunk_object()},
                {"created", job.created},
                {"model", job.model},
                {"choices", json::array({choice})}};
  if (!job.sent_first) AddPromptIds(job, &chunk);
  job.sent_first = true;
  job.out->Write(http::SseEvent(Dump(chunk)));
}

void FinishStream(Job& job, const json& usage) {
  if (const EngineErrorKind* k = job.error ? FindEngineError(job.error_status) : nullptr) {
    job.out->Write(
        http::SseEvent(http::ErrorBody(job.error_message, k->type, k->param, k->error_code)));
  } else if (job.error) {
    job.out->Write(
        http::SseEvent(http::ErrorBody(job.error_message, "server_error", "", "engine_error")));
  } else if (job.req.include_usage) {
    json chunk = {{"id", job.id},       {"object", job.chunk_object()}, {"created", job.created},
                  {"model", job.model}, {"choices", json::array()},     {"usage", usage}};
    job.out->Write(http::SseEvent(Dump(chunk)));
  }
  http::SseWriter(job.out).Done();
}

json FinalChoices(const Job& job) {
  const bool chat = job.chat();
  json choices = json::array();
  for (size_t i = 0; i < job.choices.size(); ++i) {
    const auto& c = job.choices[i];
    json lp = nullptr;
    if (job.req.submit.logprobs) lp = LogprobsFrom(c, chat, 0);
    json choice = {{"index", i}, {"logprobs", lp}, {"finish_reason", c.finish}};
    if (chat)
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    else
      choice["text"] = c.text;
    if (job.req.return_token_ids) {
      choice["token_ids"] = c.token_ids;
      if (!chat) choice["prompt_token_ids"] = job.req.prompts[c.sub];  // where vLLM has it
    }
    choices.push_back(choice);
  }
  return choices;
}

}  // namespace

HttpResponse FromEngineStatus(const Status& s) {
  return Error(http::HttpStatusOf(s.code()), s.message(), s.field());
}

GenerationJobs::GenerationJobs(ApiContext* ctx, LoraRoutes* lora) : ctx_(ctx), lora_(lora) {}

GenerationJobs::~GenerationJobs() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    MutexLock lock(&mu_);
    jobs.swap(jobs_);
  }
  for (auto& j : jobs) {
    for (auto& h : j->handles) h.stream->SetNotify(nullptr);
    j->CancelAll(ctx_->engine);
  }
}

int GenerationJobs::live() const {
  MutexLock lock(&mu_);
  return static_cast<int>(jobs_.size());
}

HttpResponse GenerationJobs::Handle(Endpoint ep, Exchange& ex) {
  SteadyTime arrival = std::chrono::steady_clock::now();
  std::unique_ptr<RequestTrace> traced = StartTrace(ex.request, arrival);
  ParseStamps stamps;
  auto parsed = ParseGenRequest(ep, ex.body, ctx_->model, ex.request.Header(protocol::kHeaderTier),
                                traced ? &stamps : nullptr);
  if (!parsed.ok()) return http::ErrorResponse(parsed.error());
  GenRequest g = std::move(*parsed);
  if (auto bad = ApplyHeaders(ex.request, g)) return std::move(*bad);
  if (auto bad = lora_->ResolveAdapter(ex.body, &g.submit.lora)) return std::move(*bad);
  std::vector<engine::sched::RequestHandle> handles;
  if (auto bad = Submit(g, &handles)) return std::move(*bad);
  if (g.submit.lora) lora_->CountRequest(*g.submit.lora);
  std::shared_ptr<Job> job = NewJob(ep, std::move(g), std::move(handles));
  job->out = ex.out;
  job->arrival = arrival;
  job->timing = ex.request.Header(protocol::kHeaderTiming) == "1";
  if (traced) {
    traced->stamps.prompt_start = stamps.prompt_start;
    traced->stamps.template_end = stamps.template_end;
    traced->stamps.tokenize_end = stamps.tokenize_end;
    job->trace = std::move(traced);
  }
  ctx_->metrics.Add("strata:requests_received_total", job->labels, 1);
  ctx_->metrics.Add("strata:prompt_tokens_total", job->labels, job->prompt_tokens);
  if (job->req.stream) StartStream(*job);
  Watch(job);
  HttpResponse r;
  r.status = http::kDeferred;
  return r;
}

// Every prompt of a batch is its own engine request, all submitted now; if one is refused, the
// ones already submitted are cancelled and the client gets that error.
std::optional<HttpResponse> GenerationJobs::Submit(
    const GenRequest& g, std::vector<engine::sched::RequestHandle>* handles) {
  for (const std::vector<int32_t>& prompt : g.prompts) {
    engine::sched::SubmitRequest sr = g.submit;
    sr.prompt = prompt;
    sr.max_tokens = g.MaxTokensFor(prompt.size(), ctx_->model.max_model_len);
    auto handle = ctx_->engine->Submit(std::move(sr));
    if (!handle.ok()) {
      for (const auto& h : *handles) ctx_->engine->Cancel(h.id);
      HttpResponse r = FromEngineStatus(handle.status());
      ctx_->AddRetryAfter(r);
      return r;
    }
    handles->push_back(std::move(*handle));
  }
  return std::nullopt;
}

std::shared_ptr<GenerationJobs::Job> GenerationJobs::NewJob(
    Endpoint ep, GenRequest g, std::vector<engine::sched::RequestHandle> handles) {
  auto job = std::make_shared<Job>();
  job->req = std::move(g);
  job->handles = std::move(handles);
  job->timelines.resize(job->handles.size());
  for (const auto& p : job->req.prompts) job->prompt_tokens += static_cast<int>(p.size());
  auto priority = std::string(protocol::PriorityName(job->req.submit.priority));
  job->labels = http::Labels({{"model_name", ctx_->model.name}, {"tier", priority}});
  job->model = job->req.submit.lora ? job->req.submit.lora->name() : ctx_->model.name;
  job->id = NewResponseId(ep == Endpoint::kChat ? "chatcmpl" : "cmpl");
  job->created = UnixSecondsNow();
  const size_t n = static_cast<size_t>(job->req.submit.n);
  job->choices.resize(job->handles.size() * n);
  for (size_t i = 0; i < job->choices.size(); ++i) {
    auto& c = job->choices[i];
    c.sub = i / n;
    c.dec = std::make_unique<tokenizer::IncrementalDecoder>(*ctx_->model.tok);
    c.stop = std::make_unique<StopMatcher>(job->req.stop);
  }
  return job;
}

// Registers the job and wires its two wake-ups: the engine's push (a drain posted to the
// response's work strand per batch of events) and the client's disconnect (cancel, then drain).
void GenerationJobs::Watch(const std::shared_ptr<Job>& job) {
  {
    MutexLock lock(&mu_);
    jobs_.push_back(job);
  }
  std::weak_ptr<Job> weak = job;
  auto* engine = ctx_->engine;
  std::vector<engine::sched::RequestId> ids;
  for (const auto& h : job->handles) ids.push_back(h.id);
  job->out->OnClose([weak, engine, ids, this] {  // runs on the connection's strand
    for (auto rid : ids) engine->Cancel(rid);
    if (auto j = weak.lock()) {
      j->gone.store(true);
      j->out->Post([this, j] { Drain(j); });
    }
  });
  for (const auto& h : job->handles) {
    h.stream->SetNotify([weak, this] {  // runs on the engine thread: hand over only
      if (auto j = weak.lock()) j->out->Post([this, j] { Drain(j); });
    });
  }
}

void GenerationJobs::Drain(const std::shared_ptr<Job>& job) {
  if (job->finished || !Process(*job)) return;
  job->finished = true;
  if (job->trace) {
    // After the response's last write, which Process() posted to the connection: building and
    // encoding the spans would otherwise delay it. Forgotten after, so a drain waits for it.
    job->out->Post([this, job] {
      ExportTrace(*job);
      Forget(*job);
    });
    return;
  }
  Forget(*job);
}

std::unique_ptr<RequestTrace> GenerationJobs::StartTrace(const http::HttpRequest& req,
                                                         SteadyTime arrival) {
  if (ctx_->options.tracer == nullptr) return nullptr;
  const std::optional<trace::TraceContext> parent =
      trace::ParseTraceparent(req.Header("traceparent"), req.Header("tracestate"));
  const trace::TraceId id = parent ? parent->trace_id : trace::NewTraceId();
  if (!ctx_->options.tracer->ShouldSample(parent, id)) return nullptr;
  auto t = std::make_unique<RequestTrace>();
  t->trace_id = id;
  t->span_id = trace::NewSpanId();
  if (parent) {
    t->parent_span_id = parent->span_id;
    t->tracestate = parent->tracestate;
  }
  t->stamps.arrival = arrival;
  return t;
}

void GenerationJobs::ExportTrace(const Job& job) {
  SpanFacts f;
  f.chat = job.chat();
  f.stream = job.req.stream;
  f.model = job.model;
  f.max_tokens = job.req.max_tokens;
  f.response_id = job.id;
  f.input_tokens = job.prompt_tokens;
  f.output_tokens = job.completion_tokens;
  for (const auto& c : job.choices)
    if (!c.finish.empty()) f.finish_reasons.push_back(c.finish);
  f.priority = std::string(protocol::PriorityName(job.req.submit.priority));
  f.tenant = job.req.submit.tenant;
  f.http_status = job.answer_status;
  f.error = job.answer_error;
  ctx_->options.tracer->Export(BuildRequestSpans(*job.trace, f, job.timelines,
                                                 job.have_first ? job.last_token : SteadyTime{},
                                                 std::chrono::steady_clock::now()));
}

void GenerationJobs::Forget(const Job& job) {
  for (const auto& h : job.handles) h.stream->SetNotify(nullptr);
  MutexLock lock(&mu_);
  std::erase_if(jobs_, [&](const std::shared_ptr<Job>& j) { return j.get() == &job; });
}

bool GenerationJobs::Process(Job& job) {
  if (job.gone.load()) {
    CountAbort(job);
    return true;
  }
  bool ended = false;  // an engine error ended every choice
  for (size_t k = 0; k < job.handles.size() && !ended; ++k) {
    while (auto ev = job.handles[k].stream->TryNext()) {
      if (!OnEvent(job, k, *ev)) {
        ended = true;
        break;
      }
    }
  }
  for (const auto& c : job.choices)
    if (!c.done) return false;
  job.CancelAll(
      ctx_->engine);  // no-op when the engine already finished them (stop strings end early)
  Finish(job);
  return true;
}

// The first event of a choice: with echo, the prompt's text (decoded by the choice's own decoder,
// so the completion continues it exactly) and, with logprobs, the prompt's tokens.
std::string GenerationJobs::StartChoice(Job& job, size_t index, const TokenEvent& ev) {
  Job::Choice& c = job.choices[index];
  c.started = true;
  if (!job.req.echo) return {};
  const std::vector<int32_t>& prompt = job.req.prompts[c.sub];
  const engine::sched::PromptLogprobs* plp = ev.prompt_logprobs.get();
  const bool lp = job.req.submit.logprobs && plp != nullptr && plp->logprob.size() == prompt.size();
  std::string text;
  for (size_t i = 0; i < prompt.size(); ++i) {
    std::string piece = c.dec->Push(prompt[i]);
    if (lp) {
      std::optional<float> value;
      std::optional<std::span<const engine::sched::TopLogprob>> top;
      if (i > 0) {
        value = plp->logprob[i];
        top = plp->TopAt(i);
      }
      RecordLogprob(*ctx_->model.tok, job.chat(), c, piece, prompt[i], value, top);
    } else {
      c.text_chars += CodePoints(piece);
    }
    text += piece;
  }
  return text;
}

bool GenerationJobs::OnEvent(Job& job, size_t sub, const TokenEvent& ev) {
  const size_t n = static_cast<size_t>(job.req.submit.n);
  if (ev.timeline != nullptr) job.timelines[sub] = ev.timeline;
  if (ev.index < 0 || static_cast<size_t>(ev.index) >= n) return true;
  const size_t index = sub * n + static_cast<size_t>(ev.index);
  auto& c = job.choices[index];
  if (c.done) return true;
  if (ev.finish == FinishReason::kError) {
    job.error = true;
    job.error_message = std::string(ev.error.message());
    job.error_status = ev.error;
    if (const EngineErrorKind* k = FindEngineError(ev.error))
      ctx_->metrics.Add(k->metric, job.labels, 1);
    for (auto& x : job.choices) x.done = true;
    return false;
  }
  std::string echo = c.started ? std::string() : StartChoice(job, index, ev);
  if (job.req.max_tokens == 0) {
    // echo with max_tokens 0: the prompt alone; the engine's one token is dropped.
    c.done = true;
    c.finish = "length";
    if (job.req.stream) {
      StreamDelta(job, index, echo);
    } else {
      c.text += echo;
    }
    return true;
  }
  if (ev.token >= 0) {
    SteadyTime now = std::chrono::steady_clock::now();
    ++job.completion_tokens;
    if (job.req.return_token_ids) c.token_ids.push_back(ev.token);
    if (!job.have_first) {
      job.have_first = true;
      job.first_token = now;
      ctx_->metrics.Observe("strata:time_to_first_token_seconds", job.labels,
                            Seconds(job.arrival, now));
    } else {
      ctx_->metrics.Observe("strata:inter_token_latency_seconds", job.labels,
                            Seconds(job.last_token, now));
    }
    job.last_token = now;
    if (job.trace && job.completion_tokens % kTokensEvery == 0 &&
        job.trace->stamps.token_marks.size() < trace::kMaxEvents)
      job.trace->stamps.token_marks.emplace_back(now, job.completion_tokens);
  }
  const SteadyTime detok_start = job.trace ? std::chrono::steady_clock::now() : SteadyTime{};
  std::string delta;
  if (ev.token >= 0 && ev.finish != FinishReason::kStop) {
    std::string piece = c.dec->Push(ev.token);
    if (job.req.submit.logprobs)
      RecordLogprob(*ctx_->model.tok, job.chat(), c, piece, ev.token, ev.logprob,
                    ev.top_logprobs());
    delta = c.stop->Push(piece);
  }
  FinishChoice(c, ev, &delta);
  if (job.trace)
    job.trace->stamps.detokenize_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::steady_clock::now() - detok_start)
                                           .count();
  // The prompt is not subject to stop strings: it goes before the completion's text as is.
  if (!job.req.stream) {
    c.text += echo + delta;
  } else if (!echo.empty() || !delta.empty() || c.done || LogprobCount(c, job.chat()) > c.lp_sent) {
    StreamDelta(job, index, echo + delta);
  }
  return true;
}

void GenerationJobs::CountAbort(Job& job) {
  job.answer_status = 499;
  job.answer_error = "the client disconnected";
  ctx_->metrics.Add("strata:request_success_total",
                    http::Labels({{"model_name", ctx_->model.name},
                                  {"tier", protocol::PriorityName(job.req.submit.priority)},
                                  {"finished_reason", "abort"}}),
                    1);
  ctx_->CountHttp(job.route(), 499);
}

void GenerationJobs::Finish(Job& job) {
  SteadyTime now = std::chrono::steady_clock::now();
  json usage = {{"prompt_tokens", job.prompt_tokens},
                {"completion_tokens", job.completion_tokens},
                {"total_tokens", job.prompt_tokens + job.completion_tokens}};
  const EngineErrorKind* kind = job.error ? FindEngineError(job.error_status) : nullptr;
  const int status = job.req.stream || !job.error ? 200 : kind ? kind->http_status : 500;
  job.answer_status = status;
  if (job.error) job.answer_error = job.error_message;
  // Counted before the response goes out, so a client that reads /metrics after its response
  // always sees its request.
  std::string reason = job.error ? "error" : job.choices.empty() ? "stop" : job.choices[0].finish;
  ctx_->metrics.Add("strata:request_success_total",
                    http::Labels({{"model_name", ctx_->model.name},
                                  {"tier", protocol::PriorityName(job.req.submit.priority)},
                                  {"finished_reason", reason}}),
                    1);
  ctx_->CountHttp(job.route(), status);
  ctx_->metrics.Observe("strata:e2e_request_latency_seconds", job.labels,
                        Seconds(job.arrival, now));
  const RequestBreakdown breakdown = ComputeBreakdown(
      job.timelines, job.arrival, job.have_first ? job.last_token : SteadyTime{}, now);
  if (!job.error && breakdown.known) ObserveBreakdown(job, breakdown);
  if (job.timing && !job.error) usage["strata_timing"] = TimingJson(breakdown);
  ctx_->metrics.Observe("strata:request_prompt_tokens", job.labels, job.prompt_tokens);
  ctx_->metrics.Observe("strata:request_generation_tokens", job.labels, job.completion_tokens);
  ctx_->metrics.Add("strata:generation_tokens_total", job.labels, job.completion_tokens);
  if (job.req.stream) return FinishStream(job, usage);
  if (job.error && kind == nullptr)
    return job.out->Respond(Error(500, "engine error: " + job.error_message));
  if (job.error) {
    HttpResponse r;
    r.status = kind->http_status;
    r.body = http::ErrorBody(job.error_message, kind->type, kind->param, kind->error_code);
    ctx_->AddRetryAfter(r);
    return job.out->Respond(std::move(r));
  }
  json resp = {{"id", job.id},
               {"object", job.chat() ? "chat.completion" : "text_completion"},
               {"created", job.created},
               {"model", job.model},
               {"choices", FinalChoices(job)},
               {"usage", usage}};
  AddPromptIds(job, &resp);
  HttpResponse r = OrderedJsonResponse(200, resp);
  if (job.timing) r.headers.emplace_back(protocol::kHeaderTiming, TimingHeaderValue(breakdown));
  job.out->Respond(std::move(r));
}

void GenerationJobs::ObserveBreakdown(const Job& job, const RequestBreakdown& b) {
  ctx_->metrics.Observe("strata:request_queue_time_seconds", job.labels, b.queue_s);
  ctx_->metrics.Observe("strata:request_prefill_time_seconds", job.labels, b.prefill_s);
  ctx_->metrics.Observe("strata:request_decode_time_seconds", job.labels, b.decode_s);
  ctx_->metrics.Observe("strata:request_inference_time_seconds", job.labels, b.inference_s);
}

// Shutdown: every generation still in flight ends now, on its work strand — a stream with an SSE
// error event and [DONE], a non-streamed request (its response has not started) with a 503 —
// instead of a bare close when the server stops.
int GenerationJobs::CutAtShutdown(std::chrono::milliseconds wait) {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    MutexLock lock(&mu_);
    jobs = jobs_;
  }
  for (const auto& j : jobs) {
    // The engine's requests are cancelled on the strand, after the cut is written: cancelled
    // first, their abort events could reach the strand before the cut and end the stream with
    // finish_reason "abort" instead of the shutdown error (Drain ignores a finished job).
    j->out->Post([this, j] {
      if (j->finished) return;  // finished meanwhile: its response is complete
      j->finished = true;
      CutJob(*j);
      for (const auto& h : j->handles) ctx_->engine->Cancel(h.id);
      if (j->trace) ExportTrace(*j);
      Forget(*j);
    });
  }
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (jobs_.empty()) break;
    }
    if (std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return static_cast<int>(jobs.size());
}

void GenerationJobs::CutJob(Job& job) {
  constexpr std::string_view kWhy =
      "the server is shutting down: the request was still running when --shutdown-timeout expired";
  ctx_->metrics.Add("strata:requests_cut_at_shutdown_total", job.labels, 1);
  job.answer_status = job.req.stream ? 200 : 503;
  job.answer_error = std::string(kWhy);
  ctx_->CountHttp(job.route(), job.answer_status);
  if (!job.req.stream) return job.out->Respond(Error(503, kWhy));
  job.out->Write(http::SseEvent(http::ErrorBody(kWhy, "service_unavailable", "", "shutdown")));
  http::SseWriter(job.out).Done();
}

}  // namespace strata::server
