#include "gateway/replica_set.h"

#include <fmt/format.h>

// clang-format off
#include <utility>  // std::exchange, used by Boost 1.74's awaitable.hpp: must come before it
// clang-format on

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/mutex.h"
#include "cachekey/block_hash.h"
#include "gateway/prom_scrape.h"
#include "http/client.h"
#include "http/json_fields.h"

namespace strata::gateway {

namespace asio = boost::asio;
using cachekey::BlockHash;
using HashList = std::vector<BlockHash>;

namespace {

// The content digest the replica published for `adapter` ("" for the base model, or when the
// replica published none: then its blocks for that adapter are not matched).
std::string AdapterDigest(const ReplicaMetrics& m, std::string_view adapter) {
  if (adapter.empty()) return "";
  auto it = std::lower_bound(m.lora_digests.begin(), m.lora_digests.end(), adapter,
                             [](const auto& e, std::string_view a) { return e.first < a; });
  if (it == m.lora_digests.end() || it->first != adapter) return "";
  return it->second;
}

constexpr double kRateEwmaWeight = 0.3;     // weight of a new prefill-rate sample
constexpr double kPrefillEwmaWeight = 0.2;  // weight of a new request in mean_prefill_tokens
constexpr int kNotPublishingReprobe = 40;   // kv_events intervals between probes after a 404
constexpr int kMaxPagesInARow = 8;
constexpr size_t kMaxReadyBody = 4096;
constexpr size_t kMaxMetricsBody = 8u << 20;
constexpr size_t kMaxEventsBody = 16u << 20;

enum class Publishes { kUnknown, kYes, kNo };

struct Replica {
  uint64_t id = 0;
  std::string url;
  http::Url parsed;
  bool static_member = false, dns_member = false;
  // Health.
  bool healthy = false, draining = false, ejected = false;
  Clock::time_point ejected_until{};
  int consecutive_failures = 0;
  int eject_level = 0;  // ejections since it last served successfully
  int64_t ejections = 0;
  // Load.
  ReplicaMetrics metrics;
  double last_prompt_total = -1, last_waiting = 0;
  Clock::time_point last_metrics_at{};
  int64_t in_flight = 0;
  int64_t sent_tokens = 0, sent_requests = 0;      // totals since it joined
  int64_t polled_tokens = 0, polled_requests = 0;  // the totals the last poll covers
  double mean_prefill_tokens = 0;
  // Predicted prefill backlog: the uncached tokens sent, drained at the prefill rate since
  // `backlog_at` (so work that must be done by now stops counting before the next poll says so).
  double backlog_tokens = 0;
  Clock::time_point backlog_at{};
  double recent_share = 0;  // EWMA of [picked] over the pool's picks (balancer.h hot_s)
  // KV events.
  Publishes publishes = Publishes::kUnknown;
  std::string instance;
  int64_t cursor = 0;
  std::vector<uint8_t> model_salt;
  int block_size = 0;
  int skip_polls = 0;  // after a 404: polls to skip before probing again

  bool Eligible() const { return healthy && !draining && !ejected; }
};

double PrefillRate(const Replica& r, const BalancerConfig& bal) {
  return r.metrics.prefill_tokens_per_s > 0 ? r.metrics.prefill_tokens_per_s
                                            : bal.default_prefill_tokens_per_s;
}

double DrainedBacklog(const Replica& r, const BalancerConfig& bal, Clock::time_point now) {
  const double elapsed = std::chrono::duration<double>(now - r.backlog_at).count();
  return std::max(0.0, r.backlog_tokens - PrefillRate(r, bal) * std::max(0.0, elapsed));
}

ReplicaView ViewOf(const Replica& r, const BalancerConfig& bal, Clock::time_point now) {
  ReplicaView v;
  v.url = r.url;
  v.eligible = r.Eligible();
  v.metrics = r.metrics;
  v.in_flight = r.in_flight;
  // Sent since the poll and not finished: at most in_flight of them (a request that finished
  // before the next poll never shows in the replica's numbers and no longer loads it). Their
  // tokens are scaled down in proportion.
  const int64_t since_requests = std::max<int64_t>(0, r.sent_requests - r.polled_requests);
  const int64_t since_tokens = std::max<int64_t>(0, r.sent_tokens - r.polled_tokens);
  v.sent_since_poll_requests = std::min(since_requests, r.in_flight);
  v.sent_since_poll_tokens =
      since_requests == 0 ? 0 : since_tokens * v.sent_since_poll_requests / since_requests;
  // ... and no more than what is predicted to be still waiting for its prefill.
  v.sent_since_poll_tokens = std::min<int64_t>(
      v.sent_since_poll_tokens, static_cast<int64_t>(std::ceil(DrainedBacklog(r, bal, now))));
  // The waiting requests the last poll saw drain at the prefill rate too (each worth the mean
  // prefill work sent there), so a poll that is nearly a window old does not overstate the queue.
  if (v.metrics.valid && r.mean_prefill_tokens > 0 &&
      r.metrics.at.time_since_epoch().count() != 0) {
    const double elapsed = std::max(0.0, std::chrono::duration<double>(now - r.metrics.at).count());
    v.metrics.waiting =
        std::max(0.0, v.metrics.waiting - PrefillRate(r, bal) * elapsed / r.mean_prefill_tokens);
  }
  v.model_salt = r.model_salt;
  v.block_size = r.block_size;
  v.publishes_events = r.publishes == Publishes::kYes;
  v.mean_prefill_tokens = r.mean_prefill_tokens;
  v.healthy = r.healthy;
  v.draining = r.draining;
  v.ejected = r.ejected;
  v.consecutive_failures = r.consecutive_failures;
  v.ejections = r.ejections;
  v.recent_share = r.recent_share;
  return v;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool ParseHex(std::string_view hex, uint8_t* out, size_t n) {
  if (hex.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    int hi = HexDigit(hex[2 * i]), lo = HexDigit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

const std::vector<uint8_t>& HistorySalt() {
  static const std::vector<uint8_t> kSalt = cachekey::JoinSaltParts({"strata-gateway-history"});
  return kSalt;
}

// History keys of a text prompt: chained hashes of its 64-byte chunks (bytes as ids 0..255).
HashList TextChunkHashes(std::string_view text, std::string_view tenant) {
  std::vector<int32_t> bytes(text.size());
  for (size_t i = 0; i < text.size(); ++i) bytes[i] = static_cast<unsigned char>(text[i]);
  std::vector<uint8_t> salt = cachekey::JoinSaltParts({"text", tenant});
  return cachekey::ComputeBlockHashes(bytes, static_cast<int>(kTextChunkBytes), salt);
}

// One parsed kv-events answer, validated completely before anything is applied.
struct EventsPage {
  std::string instance;
  int block_size = 0;
  std::vector<uint8_t> model_salt;
  int64_t cursor = 0;
  bool reset = false;
  struct Op {
    KvTier tier;
    bool add;
    HashList hashes;
  };
  std::vector<Op> ops;
  int64_t hashes = 0;
};

Status ParseOp(const nlohmann::json& e, size_t i, EventsPage* page) {
  const std::string where = fmt::format("events[{}]", i);
  http::Fields f(e, where + ".");
  if (!f.IsObject()) return Status::InvalidArgument(where + ": not an object");
  std::string op, tier;
  const nlohmann::json* hashes = nullptr;
  for (const http::ApiError& err :
       {f.String("op", &op), f.String("tier", &tier), f.Array("hashes", &hashes)})
    if (!err.ok()) return err.status();
  if (op != "add" && op != "remove") return Status::InvalidArgument(where + ".op: add or remove");
  Result<KvTier> t = ParseKvTierName(tier);
  if (!t.ok()) return Status::InvalidArgument(where + ".tier: " + t.status().message());
  EventsPage::Op out{*t, op == "add", {}};
  if (hashes) {
    out.hashes.reserve(hashes->size());
    for (const nlohmann::json& h : *hashes) {
      http::ApiResult<std::string> s = http::AsString(h, where + ".hashes");
      BlockHash bh{};
      if (!s.ok() || !ParseHex(*s, bh.data(), bh.size()))
        return Status::InvalidArgument(where + ".hashes: 64 hex digits expected");
      out.hashes.push_back(bh);
    }
  }
  page->hashes += static_cast<int64_t>(out.hashes.size());
  page->ops.push_back(std::move(out));
  return Status::Ok();
}

Result<EventsPage> ParseEventsPage(std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument("kv events: not a JSON object");
  http::Fields f(j);
  EventsPage p;
  std::string salt_hex;
  const nlohmann::json* events = nullptr;
  for (const http::ApiError& err :
       {f.String("instance", &p.instance), f.Int("block_size", 1, 1 << 20, &p.block_size),
        f.String("model_salt", &salt_hex), f.Int("cursor", 0, INT64_MAX, &p.cursor),
        f.Bool("reset", &p.reset), f.Array("events", &events)})
    if (!err.ok()) return Status::InvalidArgument("kv events: " + err.message());
  if (salt_hex.size() % 2 != 0 || salt_hex.size() > 4096)
    return Status::InvalidArgument("kv events: model_salt: even-length hex expected");
  p.model_salt.resize(salt_hex.size() / 2);
  if (!ParseHex(salt_hex, p.model_salt.data(), p.model_salt.size()))
    return Status::InvalidArgument("kv events: model_salt: hex expected");
  if (events) {
    for (size_t i = 0; i < events->size(); ++i)
      if (Status s = ParseOp((*events)[i], i, &p); !s.ok())
        return Status::InvalidArgument("kv events: " + s.message());
  }
  return p;
}

std::string DnsUrl(const asio::ip::address& a, uint16_t port) {
  return a.is_v6() ? fmt::format("http://[{}]:{}", a.to_string(), port)
                   : fmt::format("http://{}:{}", a.to_string(), port);
}

}  // namespace

struct ReplicaSet::State : std::enable_shared_from_this<ReplicaSet::State> {
  explicit State(asio::io_context& io) : io(io) {}

  asio::io_context& io;
  PrefixIndex prefix;  // its own mutex
  mutable Mutex mu;
  PoolConfig pool GUARDED_BY(mu);
  BalancerConfig bal GUARDED_BY(mu);
  HealthConfig health GUARDED_BY(mu);
  std::map<std::string, Replica, std::less<>> reps GUARDED_BY(mu);
  Balancer balancer GUARDED_BY(mu);
  bool started GUARDED_BY(mu) = false;
  bool stopped GUARDED_BY(mu) = false;
  bool dns_running GUARDED_BY(mu) = false;
  uint64_t next_id GUARDED_BY(mu) = 1;
  std::vector<std::weak_ptr<asio::steady_timer>> timers GUARDED_BY(mu);

  // Adds a member (or marks an existing one); returns its id when it is new.
  uint64_t AddLocked(const std::string& url, bool from_dns) REQUIRES(mu) {
    auto it = reps.find(url);
    if (it != reps.end()) {
      (from_dns ? it->second.dns_member : it->second.static_member) = true;
      return 0;
    }
    Result<http::Url> parsed = http::ParseUrl(url);
    if (!parsed.ok()) return 0;  // config validation rejects these; DNS URLs always parse
    Replica r;
    r.id = next_id++;
    r.url = url;
    r.parsed = *parsed;
    (from_dns ? r.dns_member : r.static_member) = true;
    reps.emplace(url, std::move(r));
    return reps.find(url)->second.id;
  }
  void RemoveLocked(std::map<std::string, Replica, std::less<>>::iterator it) REQUIRES(mu) {
    prefix.Remove(it->first);
    reps.erase(it);
  }
  std::shared_ptr<asio::steady_timer> NewTimer() EXCLUDES(mu) {
    auto t = std::make_shared<asio::steady_timer>(io);
    MutexLock lock(&mu);
    std::erase_if(timers, [](const std::weak_ptr<asio::steady_timer>& w) { return w.expired(); });
    timers.push_back(t);
    return t;
  }
  void SpawnPollers(std::vector<std::pair<std::string, uint64_t>> fresh) EXCLUDES(mu);
  void SpawnDns() EXCLUDES(mu);
};

// ---- state transitions (what the pollers and the request path feed in) ----

namespace {

void ObserveReadyIn(ReplicaSet::State& s, const std::string& url, bool transport_ok,
                    int http_status, std::string_view body, Clock::time_point now) {
  MutexLock lock(&s.mu);
  auto it = s.reps.find(url);
  if (it == s.reps.end()) return;
  Replica& r = it->second;
  if (transport_ok && http_status == 200) {
    r.healthy = true;
    r.draining = false;
    if (r.ejected && now >= r.ejected_until) {
      r.ejected = false;
      r.consecutive_failures = 0;
    }
    return;
  }
  r.healthy = false;
  r.draining =
      transport_ok && http_status == 503 && body.find("draining") != std::string_view::npos;
}

void OnFinishedIn(ReplicaSet::State& s, const std::string& url, bool transport_ok, int http_status,
                  Clock::time_point now) {
  MutexLock lock(&s.mu);
  auto it = s.reps.find(url);
  if (it == s.reps.end()) return;
  Replica& r = it->second;
  r.in_flight = std::max<int64_t>(0, r.in_flight - 1);
  const bool failed = !transport_ok || http_status >= 500;
  if (!failed) {
    r.consecutive_failures = 0;
    if (!r.ejected) r.eject_level = 0;
    return;
  }
  if (r.ejected) return;  // late failures of requests sent before the ejection
  if (++r.consecutive_failures < std::max(1, s.health.eject_after_failures)) return;
  r.ejected = true;
  r.consecutive_failures = 0;
  ++r.ejections;
  r.eject_level = std::min(r.eject_level + 1, 30);
  auto backoff = s.health.ejection_base * (int64_t{1} << (r.eject_level - 1));
  r.ejected_until = now + std::min(backoff, s.health.ejection_max);
}

Status ObserveMetricsIn(ReplicaSet::State& s, const std::string& url, std::string_view text,
                        Clock::time_point now, const ReplicaSet::SentTotals* at_poll) {
  Result<std::vector<PromSample>> parsed = ParsePromText(text);
  bool has_waiting = false, has_running = false, has_prompt = false;
  double waiting = 0, running = 0, kv = 0, prompt_total = 0;
  PromLoraAdapters adapters;
  if (parsed.ok()) {
    adapters = ReadLoraAdapters(*parsed);
    waiting = SumPromSamples(*parsed, "strata:num_requests_waiting", &has_waiting);
    running = SumPromSamples(*parsed, "strata:num_requests_running", &has_running);
    kv = MaxPromSamples(*parsed, "strata:kv_cache_usage_perc");
    prompt_total = SumPromSamples(*parsed, "strata:prompt_tokens_total", &has_prompt);
  }
  MutexLock lock(&s.mu);
  auto it = s.reps.find(url);
  if (it == s.reps.end()) return Status::NotFound("no replica " + url);
  Replica& r = it->second;
  if (!parsed.ok() || !has_waiting || !has_running) {
    r.metrics.valid = false;
    return parsed.ok() ? Status::InvalidArgument(
                             "metrics: no strata:num_requests_waiting / _running series")
                       : Status::InvalidArgument("metrics: " + parsed.status().message());
  }
  double dt = std::chrono::duration<double>(now - r.last_metrics_at).count();
  if (has_prompt && r.last_prompt_total >= 0 && prompt_total > r.last_prompt_total &&
      r.last_waiting > 0 && waiting > 0 && dt > 0) {
    double sample = (prompt_total - r.last_prompt_total) / dt;
    double& rate = r.metrics.prefill_tokens_per_s;
    rate = rate > 0 ? (1 - kRateEwmaWeight) * rate + kRateEwmaWeight * sample : sample;
  }
  r.last_prompt_total = has_prompt ? prompt_total : -1;  // a restart (counter drop) resamples
  r.last_waiting = waiting;
  r.last_metrics_at = now;
  r.metrics.valid = true;
  r.metrics.waiting = waiting;
  r.metrics.running = running;
  r.metrics.kv_usage = kv;
  r.metrics.lora_published = adapters.published;
  r.metrics.lora_registered = std::move(adapters.registered);
  r.metrics.lora_active = std::move(adapters.active);
  r.metrics.lora_digests = std::move(adapters.digests);
  r.metrics.at = now;
  r.polled_tokens = at_poll ? at_poll->tokens : r.sent_tokens;
  r.polled_requests = at_poll ? at_poll->requests : r.sent_requests;
  return Status::Ok();
}

Result<bool> ObserveKvEventsIn(ReplicaSet::State& s, const std::string& url, int http_status,
                               std::string_view body) {
  if (http_status == 404) {
    MutexLock lock(&s.mu);
    auto it = s.reps.find(url);
    if (it == s.reps.end()) return false;
    Replica& r = it->second;
    if (r.publishes == Publishes::kYes) s.prefix.ResetEvents(url);
    r.publishes = Publishes::kNo;
    r.skip_polls = kNotPublishingReprobe;
    r.instance.clear();
    r.cursor = 0;
    return false;
  }
  if (http_status != 200)
    return Status::Unavailable(fmt::format("kv events: HTTP {}", http_status));
  Result<EventsPage> page = ParseEventsPage(body);
  if (!page.ok()) return page.status();
  MutexLock lock(&s.mu);
  auto it = s.reps.find(url);
  if (it == s.reps.end()) return false;
  Replica& r = it->second;
  if (!page->reset && page->instance != r.instance) {
    // A new process behind the same address answered a cursor that was not its own: start over.
    s.prefix.ResetEvents(url);
    r.instance.clear();
    r.cursor = 0;
    return true;
  }
  if (page->reset) s.prefix.ResetEvents(url);
  for (const EventsPage::Op& op : page->ops) s.prefix.Apply(url, op.tier, op.add, op.hashes);
  r.publishes = Publishes::kYes;
  r.instance = page->instance;
  r.cursor = page->cursor;
  r.block_size = page->block_size;
  r.model_salt = std::move(page->model_salt);
  return page->hashes >= kKvEventsPageHashes;
}

}  // namespace

// ---- pollers: coroutines on the upstream io_context ----

namespace {

using StatePtr = std::shared_ptr<ReplicaSet::State>;

asio::awaitable<void> Sleep(asio::steady_timer& t, std::chrono::milliseconds d) {
  boost::system::error_code ec;
  t.expires_after(std::max(d, std::chrono::milliseconds(1)));
  co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

http::HttpClient::BodySink Collect(std::string* out, size_t cap) {
  return [out, cap](std::string_view piece) {
    if (out->size() + piece.size() > cap) return Status::OutOfRange("body too large");
    out->append(piece);
    return Status::Ok();
  };
}

struct PollSetup {
  http::Url url;
  std::string api_key;
  std::chrono::milliseconds health_interval, health_timeout, metrics_interval, events_interval;
};

bool Setup(ReplicaSet::State& s, const std::string& url, uint64_t id, PollSetup* out) {
  MutexLock lock(&s.mu);
  auto it = s.reps.find(url);
  if (s.stopped || it == s.reps.end() || it->second.id != id) return false;
  out->url = it->second.parsed;
  out->api_key = s.pool.api_key;
  out->health_interval = s.health.interval;
  out->health_timeout = s.health.timeout;
  out->metrics_interval = s.bal.metrics_interval;
  out->events_interval = s.bal.kv_events_interval;
  return true;
}

// The HttpClient of one poller, made again when a reload changed the pool's api_key.
class PollClient {
 public:
  explicit PollClient(asio::io_context& io) : io_(io) {}
  http::HttpClient& For(const PollSetup& c) {
    if (!client_ || key_ != c.api_key) {
      client_ = std::make_unique<http::HttpClient>(io_, c.url, c.api_key);
      key_ = c.api_key;
    }
    return *client_;
  }

 private:
  asio::io_context& io_;
  std::unique_ptr<http::HttpClient> client_;
  std::string key_;
};

// One poll of a replica (its readiness, metrics or KV events), made with the poller's client.
using PollOnce = asio::awaitable<void> (*)(ReplicaSet::State& s, const std::string& url,
                                           const PollSetup& c, PollClient& client);

// Runs `poll` every `interval` (of the setup, re-read each time) for as long as `url` is the
// replica spawned as `id`: it ends when the replica is removed or re-added or the set stops.
asio::awaitable<void> PollLoop(StatePtr s, std::string url, uint64_t id,
                               std::chrono::milliseconds PollSetup::*interval, PollOnce poll) {
  PollSetup c;
  if (!Setup(*s, url, id, &c)) co_return;
  PollClient client(s->io);
  auto timer = s->NewTimer();
  while (Setup(*s, url, id, &c)) {
    co_await poll(*s, url, c, client);
    co_await Sleep(*timer, c.*interval);
  }
}

asio::awaitable<void> PollReady(ReplicaSet::State& s, const std::string& url, const PollSetup& c,
                                PollClient& client) {
  std::string body;
  http::HttpResult r = co_await client.For(c).Request(
      "GET", "/ready", "", Clock::now() + c.health_timeout, Collect(&body, kMaxReadyBody));
  if (!r.status.ok()) client.For(c).CloseIdle();
  ObserveReadyIn(s, url, r.status.ok(), r.http_status, body.empty() ? r.error_body : body,
                 Clock::now());
}

asio::awaitable<void> PollMetrics(ReplicaSet::State& s, const std::string& url, const PollSetup& c,
                                  PollClient& client) {
  ReplicaSet::SentTotals at_poll;
  {
    MutexLock lock(&s.mu);
    const Replica& r = s.reps.find(url)->second;
    at_poll = {r.sent_tokens, r.sent_requests};
  }
  std::string body;
  http::HttpResult r = co_await client.For(c).Request(
      "GET", "/metrics", "", Clock::now() + c.health_timeout, Collect(&body, kMaxMetricsBody));
  if (r.status.ok() && r.http_status == 200) {
    (void)ObserveMetricsIn(s, url, body, Clock::now(), &at_poll);  // invalid on error
  } else {
    if (!r.status.ok()) client.For(c).CloseIdle();
    MutexLock lock(&s.mu);
    auto it = s.reps.find(url);
    if (it != s.reps.end()) it->second.metrics.valid = false;
  }
}

// Whether to poll now (after a 404 the replica is probed again only every few intervals), and
// the query to send.
bool EventsQuery(ReplicaSet::State& s, const std::string& url, std::string* path) {
  MutexLock lock(&s.mu);
  auto it = s.reps.find(url);
  if (it == s.reps.end()) return false;
  Replica& r = it->second;
  if (r.publishes == Publishes::kNo && r.skip_polls-- > 0) return false;
  *path = fmt::format("/v1/kv/events?since={}&max={}", r.cursor, kKvEventsPageHashes);
  return true;
}

asio::awaitable<void> PollKvEvents(ReplicaSet::State& s, const std::string& url, const PollSetup& c,
                                   PollClient& client) {
  std::string path;
  for (int page = 0; page < kMaxPagesInARow && EventsQuery(s, url, &path); ++page) {
    std::string body;
    http::HttpResult r = co_await client.For(c).Request(
        "GET", path, "", Clock::now() + c.health_timeout, Collect(&body, kMaxEventsBody));
    if (!r.status.ok()) {
      client.For(c).CloseIdle();
      break;
    }
    Result<bool> more = ObserveKvEventsIn(s, url, r.http_status, body);
    if (!more.ok() || !*more) break;
  }
}

void SetDnsMembersIn(const StatePtr& s, const std::vector<std::string>& urls) {
  std::set<std::string, std::less<>> wanted(urls.begin(), urls.end());
  std::vector<std::pair<std::string, uint64_t>> fresh;
  {
    MutexLock lock(&s->mu);
    for (const std::string& u : urls)
      if (uint64_t id = s->AddLocked(u, true)) fresh.emplace_back(u, id);
    for (auto it = s->reps.begin(); it != s->reps.end();) {
      auto next = std::next(it);
      if (it->second.dns_member && !wanted.contains(it->first)) {
        it->second.dns_member = false;
        if (!it->second.static_member) s->RemoveLocked(it);
      }
      it = next;
    }
  }
  s->SpawnPollers(std::move(fresh));
}

asio::awaitable<void> DnsLoop(StatePtr s) {
  auto timer = s->NewTimer();
  asio::ip::tcp::resolver resolver(s->io);
  while (true) {
    std::optional<DnsConfig> dns;
    {
      MutexLock lock(&s->mu);
      if (s->stopped || !s->pool.dns) {
        s->dns_running = false;
        co_return;
      }
      dns = s->pool.dns;
    }
    boost::system::error_code ec;
    auto results = co_await resolver.async_resolve(dns->name, std::to_string(dns->port),
                                                   asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) {  // a failed resolution keeps the members we had
      std::set<std::string> urls;
      for (const auto& e : results) urls.insert(DnsUrl(e.endpoint().address(), dns->port));
      SetDnsMembersIn(s, std::vector<std::string>(urls.begin(), urls.end()));
    }
    co_await Sleep(*timer, dns->interval);
  }
}

}  // namespace

void ReplicaSet::State::SpawnPollers(std::vector<std::pair<std::string, uint64_t>> fresh) {
  {
    MutexLock lock(&mu);
    if (!started || stopped) return;
  }
  StatePtr self = shared_from_this();
  asio::post(io, [self, fresh = std::move(fresh)] {
    for (const auto& [url, id] : fresh) {
      asio::co_spawn(self->io, PollLoop(self, url, id, &PollSetup::health_interval, PollReady),
                     asio::detached);
      asio::co_spawn(self->io, PollLoop(self, url, id, &PollSetup::metrics_interval, PollMetrics),
                     asio::detached);
      asio::co_spawn(self->io, PollLoop(self, url, id, &PollSetup::events_interval, PollKvEvents),
                     asio::detached);
    }
  });
}

void ReplicaSet::State::SpawnDns() {
  {
    MutexLock lock(&mu);
    if (!started || stopped || !pool.dns || dns_running) return;
    dns_running = true;
  }
  StatePtr self = shared_from_this();
  asio::post(io, [self] { asio::co_spawn(self->io, DnsLoop(self), asio::detached); });
}

// ---- ReplicaSet ----

ReplicaSet::ReplicaSet(asio::io_context& upstream_io, const PoolConfig& pool,
                       const BalancerConfig& balancer, const HealthConfig& health)
    : s_(std::make_shared<State>(upstream_io)) {
  Update(pool, balancer, health);
}

ReplicaSet::~ReplicaSet() { Stop(); }

void ReplicaSet::Start() {
  std::vector<std::pair<std::string, uint64_t>> all;
  {
    MutexLock lock(&s_->mu);
    if (s_->started || s_->stopped) return;
    s_->started = true;
    for (const auto& [url, r] : s_->reps) all.emplace_back(url, r.id);
  }
  s_->SpawnPollers(std::move(all));
  s_->SpawnDns();
}

void ReplicaSet::Stop() {
  std::vector<std::weak_ptr<asio::steady_timer>> timers;
  {
    MutexLock lock(&s_->mu);
    if (s_->stopped) return;
    s_->stopped = true;
    if (!s_->started) return;
    timers = s_->timers;
  }
  // Timers belong to the io thread: cancel them there, so sleeping pollers wake up and exit.
  asio::post(s_->io, [timers = std::move(timers)] {
    for (const auto& w : timers)
      if (auto t = w.lock()) t->cancel();
  });
}

void ReplicaSet::Update(const PoolConfig& pool, const BalancerConfig& balancer,
                        const HealthConfig& health) {
  std::vector<std::pair<std::string, uint64_t>> fresh;
  {
    MutexLock lock(&s_->mu);
    s_->pool = pool;
    s_->bal = balancer;
    s_->health = health;
    std::set<std::string, std::less<>> listed(pool.replicas.begin(), pool.replicas.end());
    for (const std::string& u : pool.replicas)
      if (uint64_t id = s_->AddLocked(u, false)) fresh.emplace_back(u, id);
    for (auto it = s_->reps.begin(); it != s_->reps.end();) {
      auto next = std::next(it);
      Replica& r = it->second;
      if (r.static_member && !listed.contains(it->first)) r.static_member = false;
      if (!pool.dns) r.dns_member = false;  // dns removed: its members go too
      if (!r.static_member && !r.dns_member) s_->RemoveLocked(it);
      it = next;
    }
  }
  s_->SpawnPollers(std::move(fresh));
  s_->SpawnDns();
}

Result<Pick> ReplicaSet::Choose(const PickRequest& r, Clock::time_point now) {
  std::vector<ReplicaView> views;
  BalancerConfig bal;
  std::string pool_name;
  {
    MutexLock lock(&s_->mu);
    bal = s_->bal;
    pool_name = s_->pool.name;
    for (const auto& [url, rep] : s_->reps)
      if (rep.Eligible()) views.push_back(ViewOf(rep, bal, now));
  }
  for (ReplicaView& v : views) v.eligible_replicas = static_cast<int>(views.size());
  // Prefix keys, outside the lock: one hash chain per (salt, block size) group.
  std::vector<PrefixMatch> matches(views.size());
  std::vector<std::shared_ptr<const HashList>> keys(views.size());
  if (bal.policy == BalancePolicy::kCost && (!r.tokens.empty() || !r.text_key.empty())) {
    std::map<std::string, std::shared_ptr<const HashList>> groups;  // key: block size + salt
    std::shared_ptr<const HashList> text_keys;
    int text_block = 0;
    if (r.tokens.empty()) {
      text_keys = std::make_shared<const HashList>(TextChunkHashes(r.text_key, r.tenant));
      const double per_chunk = static_cast<double>(kTextChunkBytes) *
                               static_cast<double>(std::max<int64_t>(r.prompt_tokens, 0)) /
                               static_cast<double>(r.text_key.size());
      text_block = std::max(1, static_cast<int>(std::lround(per_chunk)));
    }
    for (size_t i = 0; i < views.size(); ++i) {
      ReplicaView& v = views[i];
      if (text_keys) {
        keys[i] = text_keys;
        v.block_size = text_block;
      } else {
        const bool own = v.block_size > 0;
        if (!own) v.block_size = kHistoryBlockTokens;
        const std::vector<uint8_t>& salt = own ? v.model_salt : HistorySalt();
        // The replica salts an adapter's blocks with its content digest (its /metrics say which);
        // the gateway's own history keys use the adapter's name.
        const std::string adapter =
            own ? AdapterDigest(v.metrics, r.adapter) : std::string(r.adapter);
        std::string group = fmt::format("{}:{}:", v.block_size, adapter);
        group.append(salt.begin(), salt.end());
        auto& slot = groups[group];
        if (!slot) {
          std::vector<uint8_t> req_salt =
              cachekey::RequestSalt(salt, {.adapter = adapter, .tenant = r.tenant});
          slot = std::make_shared<const HashList>(
              cachekey::ComputeBlockHashes(r.tokens, v.block_size, req_salt));
        }
        keys[i] = slot;
      }
      matches[i] = s_->prefix.Lookup(v.url, *keys[i], now);
    }
  }
  Result<Pick> pick = Status::Unavailable("");
  {
    MutexLock lock(&s_->mu);
    pick = s_->balancer.Choose(bal, views, matches, r);
  }
  if (!pick.ok())
    return Status::Unavailable(fmt::format("pool '{}': no eligible replica", pool_name));
  for (size_t i = 0; i < views.size(); ++i)
    if (views[i].url == pick->url) pick->block_hashes = keys[i];
  return pick;
}

void ReplicaSet::OnSent(const std::string& url, const Pick& p, const PickRequest& r) {
  OnSent(url, p, r, Clock::now());
}

void ReplicaSet::OnSent(const std::string& url, const Pick& p, const PickRequest& r,
                        Clock::time_point now) {
  Clock::duration ttl{};
  {
    MutexLock lock(&s_->mu);
    auto it = s_->reps.find(url);
    if (it == s_->reps.end()) return;
    Replica& rep = it->second;
    for (auto& [u, other] : s_->reps)
      other.recent_share += ((&other == &rep ? 1.0 : 0.0) - other.recent_share) / kShareWindow;
    const int64_t prefill = std::max<int64_t>(0, r.prompt_tokens - p.cached_tokens);
    ++rep.in_flight;
    ++rep.sent_requests;
    rep.sent_tokens += prefill;
    rep.backlog_tokens = DrainedBacklog(rep, s_->bal, now) + static_cast<double>(prefill);
    rep.backlog_at = now;
    rep.mean_prefill_tokens = rep.mean_prefill_tokens > 0
                                  ? (1 - kPrefillEwmaWeight) * rep.mean_prefill_tokens +
                                        kPrefillEwmaWeight * static_cast<double>(prefill)
                                  : static_cast<double>(std::max<int64_t>(prefill, 1));
    ttl = rep.publishes == Publishes::kYes
              ? Clock::duration(std::max<std::chrono::milliseconds>(std::chrono::seconds(1),
                                                                    2 * s_->bal.kv_events_interval))
              : Clock::duration(s_->bal.history_ttl);
  }
  if (p.block_hashes && !p.block_hashes->empty())
    s_->prefix.RecordHistory(url, *p.block_hashes, now, now + ttl);
}

void ReplicaSet::OnFinished(const std::string& url, bool transport_ok, int http_status,
                            Clock::time_point now) {
  OnFinishedIn(*s_, url, transport_ok, http_status, now);
}

std::vector<ReplicaView> ReplicaSet::Snapshot() const { return Snapshot(Clock::now()); }

std::vector<ReplicaView> ReplicaSet::Snapshot(Clock::time_point now) const {
  MutexLock lock(&s_->mu);
  std::vector<ReplicaView> out;
  out.reserve(s_->reps.size());
  for (const auto& [url, rep] : s_->reps) out.push_back(ViewOf(rep, s_->bal, now));
  return out;
}

bool ReplicaSet::any_eligible() const {
  MutexLock lock(&s_->mu);
  return std::any_of(s_->reps.begin(), s_->reps.end(),
                     [](const auto& kv) { return kv.second.Eligible(); });
}

void ReplicaSet::ObserveReady(const std::string& url, bool transport_ok, int http_status,
                              std::string_view body, Clock::time_point now) {
  ObserveReadyIn(*s_, url, transport_ok, http_status, body, now);
}

Status ReplicaSet::ObserveMetrics(const std::string& url, std::string_view text,
                                  Clock::time_point now) {
  return ObserveMetricsIn(*s_, url, text, now, nullptr);
}

ReplicaSet::SentTotals ReplicaSet::MarkMetricsPoll(const std::string& url) const {
  MutexLock lock(&s_->mu);
  auto it = s_->reps.find(url);
  if (it == s_->reps.end()) return {};
  return {it->second.sent_tokens, it->second.sent_requests};
}

Status ReplicaSet::ObserveMetrics(const std::string& url, std::string_view text,
                                  Clock::time_point now, SentTotals at_poll) {
  return ObserveMetricsIn(*s_, url, text, now, &at_poll);
}

void ReplicaSet::MetricsFailed(const std::string& url) {
  MutexLock lock(&s_->mu);
  auto it = s_->reps.find(url);
  if (it != s_->reps.end()) it->second.metrics.valid = false;
}

Result<bool> ReplicaSet::ObserveKvEvents(const std::string& url, int http_status,
                                         std::string_view body) {
  return ObserveKvEventsIn(*s_, url, http_status, body);
}

void ReplicaSet::SetDnsMembers(const std::vector<std::string>& urls) { SetDnsMembersIn(s_, urls); }

std::vector<std::string> ReplicaSet::members() const {
  MutexLock lock(&s_->mu);
  std::vector<std::string> out;
  for (const auto& [url, rep] : s_->reps) out.push_back(url);
  return out;
}

const PrefixIndex& ReplicaSet::prefix_index() const { return s_->prefix; }

}  // namespace strata::gateway
