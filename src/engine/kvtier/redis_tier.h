// RedisTier (L4): encoded entries as Redis string values, shared by every replica.
//
// Key "<key_prefix><64 hex>" → the whole entry (block_codec.h); SET with PX when a TTL is set.
// A small pool of connections (one per I/O thread) is used; each command runs under the
// connection's mutex with the configured connect/command timeout. Connection failures never
// reach the caller: Get misses, Set/Delete return false, `errors` is counted, and the connection
// is retried with exponential backoff (50 ms doubling to 2 s) — while backing off, calls fail
// fast without touching the network.
// Thread contract: thread-safe.
#pragma once

#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "engine/kvtier/tier_policy.h"

namespace strata::engine::kvtier {

struct RedisUrl {
  std::string host;
  int port = 6379;
  int db = 0;
};
// redis://host[:port][/db]; InvalidArgument naming the problem.
Result<RedisUrl> ParseRedisUrl(std::string_view url);

class RedisTier {
 public:
  // Does not fail when Redis is down (the first command retries the connection).
  static Result<std::unique_ptr<RedisTier>> Create(const RedisTierConfig& config, int connections,
                                                   uint64_t max_entry_bytes);
  ~RedisTier();

  bool Set(const BlockKey& key, const std::vector<uint8_t>& entry);
  // The value, or nullopt (miss, error, oversized value; counted). Hits are counted by the
  // caller once the bytes decode (counters().CountHit).
  std::optional<std::vector<uint8_t>> Get(const BlockKey& key);
  // Deletes a value that failed verification (counted corrupt).
  void EraseCorrupt(const BlockKey& key);
  bool Delete(const BlockKey& key);
  bool connected() const;
  // up = connected(), address "host:port", last_error: the last failed connection's error.
  TierStats Stats() const;
  TierCounters& counters() { return counters_; }
  std::string RedisKey(const BlockKey& key) const;

 private:
  struct Conn {
    Mutex mu;
    redisContext* ctx GUARDED_BY(mu) = nullptr;
    std::chrono::steady_clock::time_point next_try GUARDED_BY(mu){};
    double backoff_s GUARDED_BY(mu) = 0;
  };
  RedisTier(const RedisTierConfig& config, RedisUrl url, int connections, uint64_t max_entry_bytes);
  // Returns a usable context (connecting if allowed), or nullptr. Called with c.mu held.
  redisContext* Ready(Conn& c) REQUIRES(c.mu);
  void Drop(Conn& c) REQUIRES(c.mu);  // after a failed command; schedules the retry
  Conn& Pick();

  RedisTierConfig config_;
  RedisUrl url_;
  uint64_t max_entry_bytes_;
  long long ttl_ms_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::atomic<uint64_t> next_conn_{0};
  std::atomic<int> live_{0};
  TierCounters counters_;
  mutable Mutex error_mu_;
  std::string last_error_ GUARDED_BY(error_mu_);
};

}  // namespace strata::engine::kvtier
