// gateway_trace: see gateway_trace.h.
#include "gateway/gateway_trace.h"

#include <algorithm>
#include <charconv>

#include "base/enum_names.h"
#include "http/client.h"

namespace strata::gateway {
namespace {

using trace::Span;
using trace::SpanKind;
using trace::SpanStatus;

void SetHeader(std::vector<std::pair<std::string, std::string>>* headers, std::string_view name,
               std::string value) {
  std::erase_if(*headers, [name](const auto& h) { return h.first == name; });
  if (!value.empty()) headers->emplace_back(std::string(name), std::move(value));
}

void AddIfSet(Span* s, std::string_view key, std::string_view v) {
  if (!v.empty()) s->AddAttribute(key, std::string(v));
}

}  // namespace

std::string_view GenAiOperation(Endpoint e) {
  static constexpr auto kNames =
      EnumNames<Endpoint::kEmbeddings>("text_completion", "chat", "embeddings");
  return EnumName(kNames, e, "text_completion");
}

std::unique_ptr<RequestTrace> StartRequestTrace(const trace::Tracer& tracer,
                                                const http::HttpRequest& req,
                                                Clock::time_point start) {
  auto t = std::make_unique<RequestTrace>();
  const std::optional<trace::TraceContext> parent =
      trace::ParseTraceparent(req.Header("traceparent"), req.Header("tracestate"));
  t->trace_id = parent ? parent->trace_id : trace::NewTraceId();
  t->tracestate = parent ? parent->tracestate : std::string();
  t->sampled = tracer.ShouldSample(parent, t->trace_id);
  if (!t->sampled) return t;
  // The server span: child of the client's span, or the root of a new trace.
  const trace::TraceContext ctx =
      parent ? *parent : trace::TraceContext{t->trace_id, trace::SpanId{}, true, ""};
  t->server = trace::ChildOf(ctx, "", SpanKind::kServer);
  t->server.start_unix_ns = trace::ToUnixNanos(start);
  t->route = trace::ChildOf(t->server.Context(), "gateway.route", SpanKind::kInternal);
  t->route.start_unix_ns = t->server.start_unix_ns;
  t->route_open = true;
  return t;
}

void BeginUpstream(RequestTrace* t, const Pick& pick, int attempt, std::string_view route,
                   std::string_view pool, Clock::time_point now,
                   std::vector<std::pair<std::string, std::string>>* headers) {
  const int64_t now_ns = trace::ToUnixNanos(now);
  trace::SpanId upstream_id = trace::NewSpanId();
  if (t->sampled && t->route_open) {
    t->route_open = false;
    t->route.end_unix_ns = now_ns;
    AddIfSet(&t->route, "strata.route", route);
    AddIfSet(&t->route, "strata.pool", pool);
    t->route.AddAttribute("strata.replica", pick.url);
    t->route.AddAttribute("strata.decision", std::string(RouteReasonName(pick.reason)));
    t->route.AddAttribute("strata.predicted_cached_tokens", pick.cached_tokens);
  }
  if (t->sampled && t->upstreams.size() < kMaxUpstreamSpans) {
    Span s = trace::ChildOf(t->server.Context(), "gateway.upstream", SpanKind::kClient);
    upstream_id = s.span_id;
    s.start_unix_ns = now_ns;
    s.AddAttribute("strata.replica", pick.url);
    s.AddAttribute("strata.attempt", int64_t{attempt});
    if (auto url = http::ParseUrl(pick.url); url.ok()) {
      s.AddAttribute("server.address", url->host);
      int64_t port = 0;
      const char* end = url->port.data() + url->port.size();
      if (std::from_chars(url->port.data(), end, port).ptr == end)
        s.AddAttribute("server.port", port);
    }
    t->upstreams.push_back(std::move(s));
    t->upstream_open = true;
  }
  const trace::TraceContext sent{t->trace_id, upstream_id, t->sampled, t->tracestate};
  SetHeader(headers, "traceparent", trace::FormatTraceparent(sent));
  SetHeader(headers, "tracestate", t->tracestate);
}

void EndUpstream(RequestTrace* t, const UpstreamResult& r, Clock::time_point now) {
  if (!t->sampled || !t->upstream_open || t->upstreams.empty()) return;
  t->upstream_open = false;
  Span& s = t->upstreams.back();
  s.end_unix_ns = trace::ToUnixNanos(now);
  if (r.http_status > 0) s.AddAttribute("http.response.status_code", int64_t{r.http_status});
  s.AddAttribute("strata.upstream_result", std::string(UpstreamKindName(r.kind)));
  const bool failed = r.kind == UpstreamResult::Kind::kRetryable ||
                      r.kind == UpstreamResult::Kind::kFailedMidStream || r.http_status >= 400;
  if (failed) {
    s.status = SpanStatus::kError;
    s.status_message = r.status.ok() ? "HTTP " + std::to_string(r.http_status) : r.status.message();
  }
}

std::vector<Span> FinishRequestTrace(RequestTrace* t, const TraceFacts& facts, int status,
                                     const UpstreamResult* r, Clock::time_point now) {
  std::vector<Span> out;
  if (!t->sampled) return out;
  const int64_t now_ns = trace::ToUnixNanos(now);
  if (t->upstream_open && !t->upstreams.empty()) t->upstreams.back().end_unix_ns = now_ns;
  Span& s = t->server;
  const std::string_view op = GenAiOperation(facts.endpoint);
  s.name = facts.model.empty() ? std::string(op) : std::string(op) + " " + std::string(facts.model);
  s.end_unix_ns = now_ns;
  s.attributes.reserve(s.attributes.size() + 14);  // what follows, in one allocation
  s.AddAttribute("gen_ai.operation.name", std::string(op));
  AddIfSet(&s, "gen_ai.request.model", facts.model);
  if (facts.max_tokens) s.AddAttribute("gen_ai.request.max_tokens", *facts.max_tokens);
  if (r && r->prompt_tokens >= 0) s.AddAttribute("gen_ai.usage.input_tokens", r->prompt_tokens);
  if (r && r->completion_tokens >= 0)
    s.AddAttribute("gen_ai.usage.output_tokens", r->completion_tokens);
  if (r && !r->finish_reasons.empty())
    s.AddAttribute("gen_ai.response.finish_reasons", r->finish_reasons);
  AddIfSet(&s, "strata.route", facts.route);
  AddIfSet(&s, "strata.pool", facts.pool);
  AddIfSet(&s, "strata.tenant", facts.tenant);
  s.AddAttribute("strata.priority", std::string(PriorityName(facts.priority)));
  s.AddAttribute("strata.attempts", int64_t{facts.attempts});
  s.AddAttribute("http.response.status_code", int64_t{status});
  if (status >= 500) {
    s.status = SpanStatus::kError;
    s.status_message = "HTTP " + std::to_string(status);
  }
  if (t->route_open) {  // never dispatched: refused by admission, no replica, client gone
    t->route_open = false;
    t->route.end_unix_ns = now_ns;
    AddIfSet(&t->route, "strata.route", facts.route);
    AddIfSet(&t->route, "strata.pool", facts.pool);
    if (status >= 400) {
      t->route.status = SpanStatus::kError;
      t->route.status_message = "HTTP " + std::to_string(status);
    }
  }
  out.reserve(2 + t->upstreams.size());
  out.push_back(std::move(s));
  out.push_back(std::move(t->route));
  for (Span& u : t->upstreams) out.push_back(std::move(u));
  t->upstreams.clear();
  t->sampled = false;  // exported once
  return out;
}

}  // namespace strata::gateway
