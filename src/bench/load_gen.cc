#include "bench/load_gen.h"

#include <fmt/format.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench/arrivals.h"
#include "http/client.h"
#include "http/sse.h"

namespace strata::bench {

namespace asio = boost::asio;
using http::HttpClient;
using http::HttpResult;
using http::ParseUrl;
using http::SseParser;
using http::Url;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string BuildRequestBody(const LoadOptions& o, const std::string& model, const Prompt& prompt,
                             const std::vector<std::string>& chat_history, int64_t max_tokens) {
  json b = json::object();
  if (!model.empty()) b["model"] = model;
  if (o.endpoint == "chat") {
    json msgs = json::array();
    for (size_t i = 0; i < chat_history.size(); ++i)
      msgs.push_back({{"role", i % 2 == 0 ? "user" : "assistant"}, {"content", chat_history[i]}});
    msgs.push_back({{"role", "user"}, {"content", prompt.text}});
    b["messages"] = std::move(msgs);
  } else if (prompt.is_ids) {
    b["prompt"] = prompt.ids;
  } else {
    b["prompt"] = prompt.text;
  }
  b["max_tokens"] = max_tokens;
  b["temperature"] = o.temperature;
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  if (o.ignore_eos) b["ignore_eos"] = true;
  return b.dump(-1, ' ', false, json::error_handler_t::replace);
}

Status ValidateLoadOptions(const LoadOptions& o, const Dataset& d) {
  RETURN_IF_ERROR(ParseUrl(o.base_url).status());
  if (o.endpoint != "completions" && o.endpoint != "chat")
    return Status::InvalidArgument("--endpoint must be 'completions' or 'chat'");
  if (!(o.request_rate > 0)) return Status::InvalidArgument("--request-rate must be > 0 (or inf)");
  if (!(o.burstiness > 0) || std::isinf(o.burstiness))
    return Status::InvalidArgument("--burstiness must be a finite number > 0");
  if (o.max_concurrency < 0 || o.max_concurrency > kMaxPrompts)
    return Status::InvalidArgument(
        fmt::format("--max-concurrency must be in [1, {}]", kMaxPrompts));
  if (!(o.request_timeout_s > 0) || o.request_timeout_s > 86400)
    return Status::InvalidArgument("--request-timeout must be in (0, 86400] seconds");
  if (!(o.max_duration_s > 0) || o.max_duration_s > 7 * 86400)
    return Status::InvalidArgument("--max-duration-s must be in (0, 604800]");
  if (!(o.temperature >= 0) || o.temperature > 100)
    return Status::InvalidArgument("--temperature must be >= 0");
  if (!(o.think_time_s >= 0) || o.think_time_s > 3600)
    return Status::InvalidArgument("--mt-think-time-s must be in [0, 3600]");
  if (o.endpoint == "chat")
    for (const auto& u : d.units)
      for (const auto& t : u.turns)
        if (t.prompt.is_ids)
          return Status::InvalidArgument(
              "--endpoint chat needs text prompts (add --prompt-format text)");
  if (d.units.empty()) return Status::InvalidArgument("the dataset is empty");
  return Status::Ok();
}

namespace {

// One run's shared state; lives on RunLoad's stack while the io_context runs.
class Runner {
 public:
  Runner(const LoadOptions& o, const Dataset& d, std::string model, asio::io_context& io,
         HttpClient& client, std::vector<double> arrivals)
      : o_(o),
        d_(d),
        model_(std::move(model)),
        io_(io),
        client_(client),
        arrivals_(std::move(arrivals)) {
    size_t off = 0;
    for (const auto& u : d.units) {
      offsets_.push_back(off);
      off += u.turns.size();
    }
    records_.resize(off);
    started_.assign(off, false);
    total_ = static_cast<int64_t>(off);
  }

  void Start() {
    start_ = Clock::now();
    deadline_ = start_ + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(o_.max_duration_s));
    if (o_.max_concurrency > 0) {
      int64_t workers =
          std::min<int64_t>(o_.max_concurrency, static_cast<int64_t>(d_.units.size()));
      for (int64_t w = 0; w < workers; ++w) asio::co_spawn(io_, Worker(), asio::detached);
    } else {
      asio::co_spawn(io_, Scheduler(), asio::detached);
    }
  }

  LoadResult Finish() {
    LoadResult r;
    r.model = model_;
    for (size_t i = 0; i < records_.size(); ++i) {
      if (started_[i])
        r.records.push_back(std::move(records_[i]));
      else
        ++r.not_sent;
    }
    r.duration_s = std::chrono::duration<double>(last_end_ - start_).count();
    if (r.duration_s <= 0)
      r.duration_s = std::chrono::duration<double>(Clock::now() - start_).count();
    if (o_.progress) std::fputs("\n", stderr);
    return r;
  }

 private:
  Clock::time_point At(double s) const {
    return start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  asio::awaitable<void> WaitUntil(Clock::time_point t) {
    if (t <= Clock::now()) co_return;
    asio::steady_timer timer(io_);
    timer.expires_at(t);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }

  asio::awaitable<void> Scheduler() {
    for (size_t i = 0; i < d_.units.size(); ++i) {
      co_await WaitUntil(std::min(At(arrivals_[i]), deadline_));
      if (Clock::now() >= deadline_) co_return;
      asio::co_spawn(io_, RunUnit(i), asio::detached);
    }
  }

  asio::awaitable<void> Worker() {
    for (;;) {
      size_t i = next_unit_++;
      if (i >= d_.units.size()) co_return;
      co_await WaitUntil(std::min(At(arrivals_[i]), deadline_));
      if (Clock::now() >= deadline_) co_return;
      co_await RunUnit(i);
    }
  }

  asio::awaitable<void> RunUnit(size_t u) {
    const Unit& unit = d_.units[u];
    std::string history;                    // completions: prompt + generated text so far
    std::vector<std::string> chat_history;  // chat: user, assistant, user, ...
    bool failed = false;
    for (size_t t = 0; t < unit.turns.size(); ++t) {
      size_t idx = offsets_[u] + t;
      if (Clock::now() >= deadline_ && t > 0) break;  // the rest of a conversation is not sent
      started_[idx] = true;
      RequestRecord& rec = records_[idx];
      const Turn& turn = unit.turns[t];
      if (failed) {
        rec.error = "not sent: an earlier turn of this conversation failed";
        Done();
        continue;
      }
      Prompt prompt = turn.prompt;
      if (d_.multi_turn && o_.endpoint != "chat") {
        prompt.text = history + turn.prompt.text;
        prompt.approx_tokens = 0;  // unknown; usage gives the real count
      }
      std::string body = BuildRequestBody(o_, model_, prompt, chat_history, turn.output_len);
      co_await Send(body, prompt.approx_tokens, &rec);
      if (!rec.success) failed = true;
      if (d_.multi_turn) {
        history = prompt.text + rec.generated_text;
        chat_history.push_back(turn.prompt.text);
        chat_history.push_back(rec.generated_text);
      }
      Done();
      if (d_.multi_turn && o_.think_time_s > 0 && t + 1 < unit.turns.size() && !failed) {
        // The user reads the reply and types the next message (the conversation keeps its slot).
        co_await WaitUntil(
            std::min(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(o_.think_time_s)),
                     deadline_));
      }
    }
  }

  void Done() {
    ++done_;
    last_end_ = Clock::now();
    if (!o_.progress) return;
    int width = 40;
    int filled = total_ > 0 ? static_cast<int>(width * done_ / total_) : width;
    double el = std::chrono::duration<double>(last_end_ - start_).count();
    std::fprintf(stderr, "\r%s[%s%s] %lld/%lld  %.1fs", o_.progress_label.c_str(),
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(width - filled), '.').c_str(),
                 static_cast<long long>(done_), static_cast<long long>(total_), el);
    std::fflush(stderr);
  }

  // Sends one streaming request and fills *rec.
  asio::awaitable<void> Send(const std::string& body, int64_t approx_prompt_tokens,
                             RequestRecord* rec) {
    const bool chat = o_.endpoint == "chat";
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    Clock::time_point t0 = Clock::now();
    rec->start_s = std::chrono::duration<double>(t0 - start_).count();
    Clock::time_point req_deadline =
        std::min(deadline_, t0 + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(o_.request_timeout_s)));
    SseParser sse;
    std::vector<std::string> events;
    std::optional<Clock::time_point> first, last;
    int64_t chunks = 0;
    std::optional<int64_t> usage_prompt, usage_completion;
    std::string stream_error;
    bool done_marker = false;
    auto sink = [&](std::string_view bytes) -> Status {
      Clock::time_point now = Clock::now();
      events.clear();
      RETURN_IF_ERROR(sse.Feed(bytes, &events));
      for (const auto& ev : events) {
        if (ev == "[DONE]") {
          done_marker = true;
          continue;
        }
        json j = json::parse(ev, nullptr, false);
        if (j.is_discarded() || !j.is_object())
          return Status::Internal("malformed SSE event: " + ev.substr(0, 200));
        if (j.contains("error")) {
          const json& e = j["error"];
          stream_error = e.is_object() && e.contains("message") && e["message"].is_string()
                             ? e["message"].get<std::string>()
                             : e.dump();
          continue;
        }
        if (j.contains("usage") && j["usage"].is_object()) {
          const json& u = j["usage"];
          if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
            usage_prompt = u["prompt_tokens"].get<int64_t>();
          if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
            usage_completion = u["completion_tokens"].get<int64_t>();
        }
        if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) continue;
        const json& c = j["choices"][0];
        if (!c.is_object()) continue;
        bool token = true;
        std::string text;
        if (chat) {
          const json* delta = c.contains("delta") && c["delta"].is_object() ? &c["delta"] : nullptr;
          bool has_content = delta && delta->contains("content") && (*delta)["content"].is_string();
          if (has_content) text = (*delta)["content"].get<std::string>();
          if (!delta || (delta->contains("role") && text.empty()))
            token = false;  // role announcement
        } else if (c.contains("text") && c["text"].is_string()) {
          text = c["text"].get<std::string>();
        }
        rec->generated_text += text;
        if (!token) continue;
        ++chunks;
        if (!first)
          first = now;
        else
          rec->itl_s.push_back(std::chrono::duration<double>(now - *last).count());
        last = now;
      }
      return Status::Ok();
    };
    HttpResult r = co_await client_.Request("POST", path, body, req_deadline, sink);
    Clock::time_point t1 = Clock::now();
    rec->e2el_s = std::chrono::duration<double>(t1 - t0).count();
    if (!r.status.ok()) {
      rec->error = r.status.message();
      if (t1 >= deadline_ && req_deadline == deadline_)
        rec->error = "max duration reached (" + rec->error + ")";
      co_return;
    }
    if (r.http_status < 200 || r.http_status >= 300) {
      std::string msg = r.error_body;
      json j = json::parse(msg, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object() &&
          j["error"].contains("message") && j["error"]["message"].is_string())
        msg = j["error"]["message"].get<std::string>();
      rec->error = fmt::format("HTTP {}: {}", r.http_status, msg.substr(0, 300));
      co_return;
    }
    if (!stream_error.empty()) {
      rec->error = "error event in the stream: " + stream_error;
      co_return;
    }
    if (!first) {
      rec->error =
          done_marker ? "the stream ended without any token" : "the response was not an SSE stream";
      co_return;
    }
    rec->success = true;
    rec->ttft_s = std::chrono::duration<double>(*first - t0).count();
    rec->output_tokens = usage_completion.value_or(chunks);
    rec->prompt_tokens = usage_prompt.value_or(approx_prompt_tokens);
  }

  const LoadOptions& o_;
  const Dataset& d_;
  std::string model_;
  asio::io_context& io_;
  HttpClient& client_;
  std::vector<double> arrivals_;
  std::vector<size_t> offsets_;
  std::vector<RequestRecord> records_;
  std::vector<bool> started_;
  Clock::time_point start_, deadline_, last_end_;
  size_t next_unit_ = 0;
  int64_t done_ = 0, total_ = 0;
};

// GET /v1/models → the first model id, or "" when the server has no such route.
asio::awaitable<void> DiscoverModel(HttpClient& client, double timeout_s, std::string* out) {
  std::string body;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_s));
  HttpResult r =
      co_await client.Request("GET", "/v1/models", "", deadline, [&](std::string_view b) -> Status {
        if (body.size() + b.size() > (16u << 20))
          return Status::ResourceExhausted("/v1/models response too large");
        body.append(b);
        return Status::Ok();
      });
  if (!r.status.ok() || r.http_status != 200) co_return;
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array() ||
      j["data"].empty())
    co_return;
  const json& m = j["data"][0];
  if (m.is_object() && m.contains("id") && m["id"].is_string()) *out = m["id"].get<std::string>();
}

}  // namespace

Status ProbeServer(const std::string& base_url, double timeout_s) {
  ASSIGN_OR_RETURN(Url url, ParseUrl(base_url));
  asio::io_context io(1);
  asio::ip::tcp::resolver resolver(io);
  asio::ip::tcp::socket socket(io);
  boost::system::error_code result = asio::error::timed_out;
  resolver.async_resolve(url.host, url.port, [&](boost::system::error_code ec, auto endpoints) {
    if (ec) {
      result = ec;
      return;
    }
    asio::async_connect(socket, endpoints,
                        [&](boost::system::error_code cec, const auto&) { result = cec; });
  });
  io.run_for(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_s)));
  if (!result) return Status::Ok();
  return Status::Unavailable(fmt::format("cannot connect to {}: {}", base_url, result.message()));
}

Result<LoadResult> RunLoad(const LoadOptions& o, const Dataset& d) {
  RETURN_IF_ERROR(ValidateLoadOptions(o, d));
  ASSIGN_OR_RETURN(Url url, ParseUrl(o.base_url));
  // Arrival times per unit (a multi-turn conversation arrives once; its turns follow their
  // replies).
  ASSIGN_OR_RETURN(auto arrivals, ArrivalTimes(static_cast<int64_t>(d.units.size()), o.request_rate,
                                               o.burstiness, o.seed ^ 0x9e3779b97f4a7c15ULL));
  asio::io_context io(1);
  HttpClient client(io, url, o.api_key);
  std::string model = o.model;
  if (model.empty()) {
    asio::co_spawn(io, DiscoverModel(client, std::min(10.0, o.request_timeout_s), &model),
                   asio::detached);
    io.run();
    io.restart();
  }
  Runner runner(o, d, model, io, client, std::move(arrivals));
  runner.Start();
  io.run();
  client.CloseIdle();
  return runner.Finish();
}

}  // namespace strata::bench
