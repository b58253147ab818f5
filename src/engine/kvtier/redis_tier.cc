#include "engine/kvtier/redis_tier.h"

#include <sys/time.h>

#include <charconv>
#include <cmath>

#include "engine/kvtier/block_codec.h"

namespace strata::engine::kvtier {
namespace {

constexpr double kMinBackoffS = 0.05;
constexpr double kMaxBackoffS = 2.0;

timeval ToTimeval(double s) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(s);
  tv.tv_usec = static_cast<suseconds_t>((s - static_cast<double>(tv.tv_sec)) * 1e6);
  return tv;
}

bool ParseInt(std::string_view s, int lo, int hi, int* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && *out >= lo && *out <= hi;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

}  // namespace

Result<RedisUrl> ParseRedisUrl(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return Status::InvalidArgument("redis.url: must start with redis:// (got \"" +
                                   std::string(url) + "\")");
  }
  std::string_view rest = url.substr(kScheme.size());
  RedisUrl out;
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && !ParseInt(db, 0, 1 << 20, &out.db)) {
      return Status::InvalidArgument("redis.url: bad database number \"" + std::string(db) + "\"");
    }
    rest = rest.substr(0, slash);
  }
  if (rest.find('@') != std::string_view::npos) {
    return Status::InvalidArgument("redis.url: credentials in the URL are not supported");
  }
  if (size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    if (!ParseInt(rest.substr(colon + 1), 1, 65535, &out.port)) {
      return Status::InvalidArgument("redis.url: bad port \"" +
                                     std::string(rest.substr(colon + 1)) + "\"");
    }
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return Status::InvalidArgument("redis.url: missing host");
  out.host = std::string(rest);
  return out;
}

RedisTier::RedisTier(const RedisTierConfig& config, RedisUrl url, int connections,
                     uint64_t max_entry_bytes)
    : config_(config),
      url_(std::move(url)),
      max_entry_bytes_(max_entry_bytes),
      ttl_ms_(config.limits.ttl_s > 0
                  ? std::max<long long>(
                        1, static_cast<long long>(std::ceil(config.limits.ttl_s * 1000)))
                  : 0) {
  for (int i = 0; i < std::max(1, connections); ++i) conns_.push_back(std::make_unique<Conn>());
}

Result<std::unique_ptr<RedisTier>> RedisTier::Create(const RedisTierConfig& config, int connections,
                                                     uint64_t max_entry_bytes) {
  ASSIGN_OR_RETURN(RedisUrl url, ParseRedisUrl(config.url));
  if (!(config.timeout_s > 0)) return Status::InvalidArgument("redis.timeout_s: must be > 0");
  std::unique_ptr<RedisTier> tier(
      new RedisTier(config, std::move(url), connections, max_entry_bytes));
  {
    Conn& c = *tier->conns_[0];
    MutexLock lock(&c.mu);
    tier->Ready(c);  // best effort; a failure only schedules a retry
  }
  return tier;
}

RedisTier::~RedisTier() {
  for (auto& c : conns_) {
    if (c->ctx != nullptr) redisFree(c->ctx);
  }
}

std::string RedisTier::RedisKey(const BlockKey& key) const {
  return config_.key_prefix + KeyHex(key);
}

redisContext* RedisTier::Ready(Conn& c) {
  if (c.ctx != nullptr) return c.ctx;
  auto now = std::chrono::steady_clock::now();
  if (now < c.next_try) {  // backing off: fail fast
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  timeval tv = ToTimeval(config_.timeout_s);
  redisContext* ctx = redisConnectWithTimeout(url_.host.c_str(), url_.port, tv);
  bool ok = ctx != nullptr && ctx->err == 0 && redisSetTimeout(ctx, tv) == REDIS_OK;
  if (ok && url_.db != 0) {
    Reply r(static_cast<redisReply*>(redisCommand(ctx, "SELECT %d", url_.db)));
    ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
  }
  if (!ok) {
    {
      MutexLock error_lock(&error_mu_);
      last_error_ = ctx == nullptr  ? std::string("cannot allocate a connection")
                    : ctx->err != 0 ? std::string(ctx->errstr)
                                    : std::string("SELECT or setting the timeout failed");
    }
    if (ctx != nullptr) redisFree(ctx);
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    c.backoff_s = c.backoff_s == 0 ? kMinBackoffS : std::min(kMaxBackoffS, c.backoff_s * 2);
    c.next_try = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(c.backoff_s));
    return nullptr;
  }
  c.ctx = ctx;
  c.backoff_s = 0;
  live_.fetch_add(1, std::memory_order_relaxed);
  return ctx;
}

void RedisTier::Drop(Conn& c) {
  counters_.errors.fetch_add(1, std::memory_order_relaxed);
  if (c.ctx != nullptr) {
    redisFree(c.ctx);
    c.ctx = nullptr;
    live_.fetch_sub(1, std::memory_order_relaxed);
  }
  // The next command may reconnect at once (the server may have restarted); repeated connect
  // failures back off in Ready().
  c.next_try = std::chrono::steady_clock::now();
}

RedisTier::Conn& RedisTier::Pick() {
  return *conns_[next_conn_.fetch_add(1, std::memory_order_relaxed) % conns_.size()];
}

bool RedisTier::Set(const BlockKey& key, const std::vector<uint8_t>& entry) {
  OpTimer timer(&counters_.write_ops, &counters_.write_ns);
  std::string rkey = RedisKey(key);
  Conn& c = Pick();
  MutexLock lock(&c.mu);
  redisContext* ctx = Ready(c);
  if (ctx == nullptr) return false;
  Reply r(static_cast<redisReply*>(
      ttl_ms_ > 0
          ? redisCommand(ctx, "SET %b %b PX %lld", rkey.data(), rkey.size(), entry.data(),
                         entry.size(), ttl_ms_)
          : redisCommand(ctx, "SET %b %b", rkey.data(), rkey.size(), entry.data(), entry.size())));
  if (r == nullptr) {
    Drop(c);
    return false;
  }
  if (r->type !=
      REDIS_REPLY_STATUS) {  // e.g. OOM under maxmemory: the server is fine, the write is not
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  counters_.bytes_in.fetch_add(static_cast<int64_t>(entry.size()), std::memory_order_relaxed);
  return true;
}

std::optional<std::vector<uint8_t>> RedisTier::Get(const BlockKey& key) {
  OpTimer timer(&counters_.read_ops, &counters_.read_ns);
  auto miss = [&] {
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  };
  std::string rkey = RedisKey(key);
  Conn& c = Pick();
  MutexLock lock(&c.mu);
  redisContext* ctx = Ready(c);
  if (ctx == nullptr) return miss();
  Reply r(static_cast<redisReply*>(redisCommand(ctx, "GET %b", rkey.data(), rkey.size())));
  if (r == nullptr) {
    Drop(c);
    return miss();
  }
  if (r->type == REDIS_REPLY_NIL) return miss();
  if (r->type != REDIS_REPLY_STRING) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return miss();
  }
  if (static_cast<uint64_t>(r->len) > max_entry_bytes_) {
    lock.Unlock();
    EraseCorrupt(key);
    return std::nullopt;
  }
  return std::vector<uint8_t>(r->str, r->str + r->len);
}

void RedisTier::EraseCorrupt(const BlockKey& key) {
  counters_.CountCorrupt();
  Delete(key);
}

bool RedisTier::Delete(const BlockKey& key) {
  std::string rkey = RedisKey(key);
  Conn& c = Pick();
  MutexLock lock(&c.mu);
  redisContext* ctx = Ready(c);
  if (ctx == nullptr) return false;
  Reply r(static_cast<redisReply*>(redisCommand(ctx, "DEL %b", rkey.data(), rkey.size())));
  if (r == nullptr) {
    Drop(c);
    return false;
  }
  return r->type == REDIS_REPLY_INTEGER;
}

bool RedisTier::connected() const { return live_.load(std::memory_order_relaxed) > 0; }

TierStats RedisTier::Stats() const {
  // entries / bytes_used stay 0: Redis is shared with other replicas and not tracked here.
  TierStats s = counters_.Snapshot("redis", 0, 0);
  s.up = connected();
  s.address = url_.host + ":" + std::to_string(url_.port);
  MutexLock lock(&error_mu_);
  s.last_error = last_error_;
  return s;
}

}  // namespace strata::engine::kvtier
