#include "engine/kvtier/tier_policy.h"

namespace strata::engine::kvtier {

double WallClockSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void TierCounters::Fill(TierStats* s) const {
  auto ld = [](const std::atomic<int64_t>& a) { return a.load(std::memory_order_relaxed); };
  s->hits = ld(hits);
  s->misses = ld(misses);
  s->bytes_in = ld(bytes_in);
  s->bytes_out = ld(bytes_out);
  s->evictions = ld(evictions);
  s->expirations = ld(expirations);
  s->corrupt = ld(corrupt);
  s->errors = ld(errors);
  s->read_ops = ld(read_ops);
  s->read_seconds_total = static_cast<double>(ld(read_ns)) * 1e-9;
  s->write_ops = ld(write_ops);
  s->write_seconds_total = static_cast<double>(ld(write_ns)) * 1e-9;
}

}  // namespace strata::engine::kvtier
