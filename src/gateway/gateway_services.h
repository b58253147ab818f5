// gateway_services: what the parts of the Gateway share — the configuration snapshots (Snapshot,
// held and swapped by Snapshots) and the services every request uses (RequestServices: the
// upstream thread, admission, split weights, canaries, metrics, tracer, access log, shadow slots,
// cold-start holds).
//
// Ownership: Gateway owns one Snapshots and one RequestServices and outlives every request flow,
// admin, status-page and models call that points at them.
// Thread contract: Snapshot is immutable once built; Snapshots::current() is called from any
// thread, Build/StopPoolsNotIn/Publish/Start/Stop/Reset from the controlling thread (Reload,
// Start, Stop). RequestServices' members are each thread-safe (or, like `tracer`, set at
// start-up and read-only after).
// Errors: Build returns InvalidArgument when a pool's tokenizer cannot be loaded.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "base/mutex.h"
#include "base/status.h"
#include "gateway/admission.h"
#include "gateway/canary.h"
#include "gateway/config.h"
#include "gateway/gateway_metrics.h"
#include "gateway/pool_hold.h"
#include "gateway/prompt.h"
#include "gateway/proxy.h"
#include "gateway/replica_set.h"
#include "gateway/shadow.h"
#include "gateway/split.h"
#include "http/prometheus.h"
#include "trace/tracer.h"

namespace strata::gateway {

// One configuration generation: immutable once built.
struct Snapshot {
  std::shared_ptr<const GatewayConfig> cfg;
  std::map<std::string, std::shared_ptr<ReplicaSet>, std::less<>> pools;
  // Pool name → its tokenizer (absent: prompt lengths are estimated from bytes).
  std::map<std::string, std::shared_ptr<const PoolTokenizer>, std::less<>> tokenizers;
  uint64_t generation = 0;
};

// Shadow calls in flight at most (over it a mirrored request is dropped and counted).
inline constexpr int kMaxShadowInFlight = 64;
// The primary's answer kept for the shadow comparison, at most (bytes).
inline constexpr size_t kMaxShadowCopy = 1u << 20;
// Stop() gives the tracer this long to send the last spans.
inline constexpr std::chrono::milliseconds kTracerFlushTimeout{1000};

// The current Snapshot and how the next one is built: pools that remain keep their ReplicaSet
// (updated in place, so health and load state carry over); new pools get one on `io`, started
// when the holder is.
class Snapshots {
 public:
  explicit Snapshots(boost::asio::io_context* io) : io_(io) {}

  // The next generation from `cfg` (the first when nothing is published yet).
  Result<std::shared_ptr<const Snapshot>> Build(std::shared_ptr<const GatewayConfig> cfg);
  // Stops the current pools that `next` lacks (in-flight requests keep the objects alive).
  void StopPoolsNotIn(const Snapshot& next);
  void Publish(std::shared_ptr<const Snapshot> next);
  std::shared_ptr<const Snapshot> current() const;

  // Starts (stops) the current pools' health checks and polls; pools built later start at once.
  void Start();
  void Stop();
  // Drops the current snapshot (before the io_context its pools live on goes).
  void Reset();

 private:
  boost::asio::io_context* io_;
  bool started_ = false;  // the controlling thread's
  mutable Mutex mu_;
  std::shared_ptr<const Snapshot> snap_ GUARDED_BY(mu_);
};

// The services a request uses on its way (gateway_flow.h), shared by every request.
struct RequestServices {
  std::unique_ptr<Upstreams> upstreams = std::make_unique<Upstreams>();
  std::unique_ptr<Admission> admission;
  SplitWeights splits;  // the split routes' current weights (config, admin API, canary)
  std::unique_ptr<CanaryController> canary;  // uses splits
  http::MetricsRegistry metrics;
  std::unique_ptr<trace::Tracer> tracer;  // null: tracing off (set in Create, then read-only)
  AccessLog access_log;
  std::atomic<int64_t> in_flight{0};
  std::atomic<bool> stopped{false};
  ShadowSlots shadow_slots{kMaxShadowInFlight};
  PoolHolds holds;  // requests waiting for a pool's first eligible replica
};

}  // namespace strata::gateway
