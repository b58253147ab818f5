#include "server/request_spans.h"

#include <algorithm>

namespace strata::server {

using engine::sched::RequestTimeline;
using trace::Attribute;
using trace::Span;
using trace::SpanKind;

namespace {

bool Set(SteadyClockTime t) { return t != SteadyClockTime{}; }

void Earliest(SteadyClockTime t, SteadyClockTime* out) {
  if (Set(t) && (!Set(*out) || t < *out)) *out = t;
}
void Latest(SteadyClockTime t, SteadyClockTime* out) {
  if (Set(t) && t > *out) *out = t;
}

// The request's engine phases over all its engine requests (a batch: earliest start, latest end).
struct Phases {
  SteadyClockTime submitted{}, scheduled{}, first_token{}, finished{};
  bool all_finished = true;
  int cached_tokens = 0, preemptions = 0;
  int64_t decode_steps = 0;
};

Phases Aggregate(std::span<const std::shared_ptr<const RequestTimeline>> timelines,
                 SteadyClockTime last_token) {
  Phases p;
  for (const auto& t : timelines) {
    if (t == nullptr) {
      p.all_finished = false;
      continue;
    }
    Earliest(t->submitted, &p.submitted);
    Earliest(t->first_scheduled, &p.scheduled);
    Earliest(t->first_token, &p.first_token);
    Latest(t->finished, &p.finished);
    p.all_finished = p.all_finished && RequestTimeline::Set(t->finished);
    p.cached_tokens += t->cached_tokens;
    p.preemptions += t->preemptions;
    p.decode_steps += t->decode_steps;
  }
  // A stop string ended the request before the engine's terminal event came back.
  if (!p.all_finished && Set(p.first_token)) Latest(last_token, &p.finished);
  return p;
}

class Builder {
 public:
  Builder(const RequestTrace& t, std::vector<Span>* out) : t_(t), out_(out) {}

  // A child of `parent` over [start, end] (end clamped to start), appended; returns its index.
  size_t Child(const trace::SpanId& parent, std::string name, SteadyClockTime start,
               SteadyClockTime end) {
    Span s;
    s.trace_id = t_.trace_id;
    s.span_id = trace::NewSpanId();
    s.parent_span_id = parent;
    s.tracestate = t_.tracestate;
    s.name = std::move(name);
    s.kind = SpanKind::kInternal;
    s.start_unix_ns = trace::ToUnixNanos(start);
    s.end_unix_ns = trace::ToUnixNanos(std::max(start, end));
    out_->push_back(std::move(s));
    return out_->size() - 1;
  }
  Span& Ref(size_t i) { return (*out_)[i]; }

 private:
  const RequestTrace& t_;
  std::vector<Span>* out_;
};

Span ServerSpan(const RequestTrace& t, const SpanFacts& f, const Phases& p, SteadyClockTime end) {
  Span s;
  s.trace_id = t.trace_id;
  s.span_id = t.span_id;
  s.parent_span_id = t.parent_span_id;
  s.tracestate = t.tracestate;
  const std::string op = f.chat ? "chat" : "text_completion";
  s.name = op + " " + f.model;
  s.kind = SpanKind::kServer;
  s.start_unix_ns = trace::ToUnixNanos(t.stamps.arrival);
  s.end_unix_ns = trace::ToUnixNanos(std::max(t.stamps.arrival, end));
  s.attributes.reserve(16);  // what follows, in one allocation
  s.AddAttribute("gen_ai.operation.name", op);
  s.AddAttribute("gen_ai.request.model", f.model);
  s.AddAttribute("gen_ai.request.max_tokens", int64_t{f.max_tokens});
  if (!f.response_id.empty()) s.AddAttribute("gen_ai.response.id", f.response_id);
  s.AddAttribute("gen_ai.usage.input_tokens", int64_t{f.input_tokens});
  s.AddAttribute("gen_ai.usage.output_tokens", int64_t{f.output_tokens});
  s.AddAttribute("gen_ai.response.finish_reasons", f.finish_reasons);
  s.AddAttribute("strata.priority", f.priority);
  s.AddAttribute("strata.tenant", f.tenant);
  s.AddAttribute("strata.cached_tokens", int64_t{p.cached_tokens});
  s.AddAttribute("strata.preemptions", int64_t{p.preemptions});
  s.AddAttribute("strata.stream", f.stream);
  s.AddAttribute("http.response.status_code", int64_t{f.http_status});
  if (!f.error.empty()) {
    s.status = trace::SpanStatus::kError;
    s.status_message = f.error;
  }
  return s;
}

// strata.queue and its tier fetches; returns where the queue ended.
SteadyClockTime AddQueue(Builder& b, const trace::SpanId& root, const Phases& p,
                         std::span<const std::shared_ptr<const RequestTimeline>> timelines,
                         SteadyClockTime cursor, SteadyClockTime end) {
  if (!Set(p.submitted)) return cursor;
  // From where tokenize ended: the field checks and Engine::Submit before the engine's `submitted`
  // take microseconds, and keeping the phases contiguous lets them add up to the SERVER span.
  const SteadyClockTime start = Set(cursor) ? cursor : p.submitted;
  const SteadyClockTime stop = Set(p.scheduled) ? p.scheduled : Set(p.finished) ? p.finished : end;
  const size_t q = b.Child(root, "strata.queue", start, stop);
  b.Ref(q).AddAttribute(
      "strata.queue_ms",
      std::chrono::duration<double, std::milli>(std::max(p.submitted, stop) - p.submitted).count());
  const trace::SpanId queue_id = b.Ref(q).span_id;
  for (const auto& t : timelines) {
    if (t == nullptr) continue;
    for (const RequestTimeline::TierFetch& f : t->tier_fetches) {
      const size_t i = b.Child(queue_id, "strata.kv_tier.fetch", f.start,
                               RequestTimeline::Set(f.end) ? f.end : stop);
      Span& s = b.Ref(i);
      s.AddAttribute("strata.tier", std::string("kv_tiers"));
      s.AddAttribute("strata.blocks", int64_t{f.blocks});
      s.AddAttribute("strata.blocks_requested", int64_t{f.blocks_requested});
      s.AddAttribute("strata.timed_out", f.timed_out);
    }
  }
  return std::max(start, stop);
}

void AddPrefill(Builder& b, const trace::SpanId& root,
                std::span<const std::shared_ptr<const RequestTimeline>> timelines) {
  const bool batch = timelines.size() > 1;
  for (size_t k = 0; k < timelines.size(); ++k) {
    const auto& t = timelines[k];
    if (t == nullptr) continue;
    for (size_t c = 0; c < t->prefill_chunks.size(); ++c) {
      const RequestTimeline::Chunk& chunk = t->prefill_chunks[c];
      Span& s = b.Ref(b.Child(root, "strata.prefill", chunk.start, chunk.end));
      s.AddAttribute("strata.chunk_index", static_cast<int64_t>(c));
      s.AddAttribute("strata.chunk_tokens", int64_t{chunk.tokens});
      s.AddAttribute("strata.cached_tokens", int64_t{t->cached_tokens});
      if (batch) s.AddAttribute("strata.prompt_index", static_cast<int64_t>(k));
    }
  }
}

void AddDecode(Builder& b, const trace::SpanId& root, const Phases& p,
               std::span<const std::shared_ptr<const RequestTimeline>> timelines,
               const TraceStamps& stamps) {
  Span& s = b.Ref(b.Child(root, "strata.decode", p.first_token, p.finished));
  s.AddAttribute("strata.decode_steps", p.decode_steps);
  s.AddEvent("first_token", trace::ToUnixNanos(p.first_token));
  for (const auto& t : timelines) {
    if (t == nullptr) continue;
    for (SteadyClockTime at : t->preempted_at) s.AddEvent("preempted", trace::ToUnixNanos(at));
    for (SteadyClockTime at : t->resumed_at) s.AddEvent("resumed", trace::ToUnixNanos(at));
  }
  for (const auto& [at, tokens] : stamps.token_marks)
    s.AddEvent("tokens", trace::ToUnixNanos(at), {Attribute{"strata.tokens", int64_t{tokens}}});
}

}  // namespace

std::vector<Span> BuildRequestSpans(
    const RequestTrace& t, const SpanFacts& facts,
    std::span<const std::shared_ptr<const RequestTimeline>> timelines, SteadyClockTime last_token,
    SteadyClockTime end) {
  const Phases p = Aggregate(timelines, last_token);
  std::vector<Span> out;
  out.reserve(8);
  out.push_back(ServerSpan(t, facts, p, end));
  const trace::SpanId root = t.span_id;
  Builder b(t, &out);
  const TraceStamps& st = t.stamps;
  SteadyClockTime cursor = st.arrival;
  if (Set(st.prompt_start)) {
    b.Child(root, "strata.parse", cursor, st.prompt_start);
    cursor = std::max(cursor, st.prompt_start);
    if (facts.chat && Set(st.template_end)) {
      b.Child(root, "strata.template", cursor, st.template_end);
      cursor = std::max(cursor, st.template_end);
    }
    if (Set(st.tokenize_end)) {
      b.Child(root, "strata.tokenize", cursor, st.tokenize_end);
      cursor = std::max(cursor, st.tokenize_end);
    }
  }
  cursor = AddQueue(b, root, p, timelines, cursor, end);
  if (Set(p.scheduled)) AddPrefill(b, root, timelines);
  if (Set(p.first_token)) {
    AddDecode(b, root, p, timelines, st);
    cursor = std::max(cursor, p.finished);
  } else if (Set(p.finished)) {
    cursor = std::max(cursor, p.finished);
  }
  Span& stream = b.Ref(b.Child(root, "strata.stream", cursor, end));
  stream.AddAttribute("strata.detokenize_ms", static_cast<double>(st.detokenize_ns) / 1e6);
  return out;
}

}  // namespace strata::server
