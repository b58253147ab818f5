// Test seams of TieredKvCache (not for the engine): an injectable clock and a hook that runs on a
// worker before each queued write (tests use it to hold a worker and fill the queue).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/kvtier/tier_policy.h"
#include "engine/kvtier/tiered_cache.h"

namespace strata::engine::kvtier {

struct TieredKvTestHooks {
  Clock clock;                         // default: WallClockSeconds
  std::function<void()> before_write;  // runs on a worker thread before each queued write
};

Result<std::unique_ptr<TieredKvCache>> CreateTieredKvCacheWithHooks(const TieredKvConfig& config,
                                                                    uint64_t block_bytes,
                                                                    std::string format_id,
                                                                    TieredKvTestHooks hooks,
                                                                    TierObserver observer = {});

}  // namespace strata::engine::kvtier
