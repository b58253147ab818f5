#include "gateway/balancer.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace strata::gateway {

AdapterState AdapterStateOf(const ReplicaView& v, std::string_view adapter) {
  const ReplicaMetrics& m = v.metrics;
  if (adapter.empty() || !m.valid || !m.lora_published) return AdapterState::kUnknown;
  auto has = [adapter](const std::vector<std::string>& names) {
    return std::find(names.begin(), names.end(), adapter) != names.end();
  };
  if (has(m.lora_active)) return AdapterState::kActive;
  return has(m.lora_registered) ? AdapterState::kRegistered : AdapterState::kAbsent;
}

PricedReplica Price(const BalancerConfig& cfg, const ReplicaView& v, const PrefixMatch& m,
                    const PickRequest& r) {
  PricedReplica p;
  const double rate = v.metrics.prefill_tokens_per_s > 0 ? v.metrics.prefill_tokens_per_s
                                                         : cfg.default_prefill_tokens_per_s;
  const double safe_rate = rate > 0 ? rate : 1.0;  // config validation keeps it > 0
  const double prompt = static_cast<double>(std::max<int64_t>(r.prompt_tokens, 0));
  const double work = v.mean_prefill_tokens > 0 ? v.mean_prefill_tokens : prompt;
  double queued_tokens = 0, active = 0;
  if (v.metrics.valid) {
    queued_tokens = std::max(0.0, v.metrics.waiting) * work +
                    static_cast<double>(std::max<int64_t>(v.sent_since_poll_tokens, 0));
    active = std::max(0.0, v.metrics.running) +
             static_cast<double>(std::max<int64_t>(v.sent_since_poll_requests, 0));
  } else {
    const double n = static_cast<double>(std::max<int64_t>(v.in_flight, 0));
    queued_tokens = n * work;
    active = n;
  }
  const int64_t block = std::max(v.block_size, 0);
  p.cached_tokens = std::min<int64_t>(std::max<int64_t>(r.prompt_tokens, 0), m.blocks * block);
  p.queue_s = queued_tokens / safe_rate;
  p.prefill_s = (prompt - static_cast<double>(p.cached_tokens)) / safe_rate;
  for (int t = 0; t < kNumKvTiers; ++t)
    p.tier_s +=
        static_cast<double>(m.by_tier[static_cast<size_t>(t)]) * cfg.tier_seconds_per_block[t];
  const double horizon =
      r.max_tokens > 0 ? std::min(1.0, static_cast<double>(r.max_tokens) / kDecodeHorizonTokens)
                       : 1.0;
  p.decode_s = active * cfg.default_decode_step_s * horizon;
  if (v.eligible_replicas > 1)
    p.hot_s = std::max(0.0, v.recent_share * v.eligible_replicas - kHotShare) * kHotWeight *
              prompt / safe_rate;
  if (AdapterStateOf(v, r.adapter) == AdapterState::kRegistered) p.lora_s = cfg.lora_load_s;
  p.cost_s = p.queue_s + p.prefill_s + p.tier_s + p.decode_s + p.hot_s + p.lora_s;
  return p;
}

double ReplicaLoad(const ReplicaView& v) {
  if (!v.metrics.valid) return static_cast<double>(v.in_flight);
  return v.metrics.waiting + v.metrics.running + static_cast<double>(v.sent_since_poll_requests);
}

namespace {

bool Excluded(const PickRequest& r, const std::string& url) {
  return std::find(r.exclude.begin(), r.exclude.end(), url) != r.exclude.end();
}

// Candidate indices into `views`, in URL order (so rotation does not depend on snapshot order).
// When some candidate has the request's adapter, those known not to have it are dropped.
std::vector<size_t> Candidates(std::span<const ReplicaView> views, const PickRequest& r) {
  std::vector<size_t> out;
  for (size_t i = 0; i < views.size(); ++i)
    if (views[i].eligible && !Excluded(r, views[i].url)) out.push_back(i);
  const bool someone_has = std::any_of(out.begin(), out.end(), [&](size_t i) {
    const AdapterState s = AdapterStateOf(views[i], r.adapter);
    return s == AdapterState::kRegistered || s == AdapterState::kActive;
  });
  if (someone_has)
    std::erase_if(out, [&](size_t i) {
      return AdapterStateOf(views[i], r.adapter) == AdapterState::kAbsent;
    });
  std::sort(out.begin(), out.end(),
            [&](size_t a, size_t b) { return views[a].url < views[b].url; });
  return out;
}

std::string Detail(const PricedReplica& p) {
  std::string d = fmt::format("queue={:.4f} prefill={:.4f} tier={:.4f} decode={:.4f} cached={}",
                              p.queue_s, p.prefill_s, p.tier_s, p.decode_s, p.cached_tokens);
  if (p.lora_s > 0) d += fmt::format(" lora={:.4f}", p.lora_s);
  return d;
}

}  // namespace

Result<Pick> Balancer::Choose(const BalancerConfig& cfg, std::span<const ReplicaView> views,
                              std::span<const PrefixMatch> matches, const PickRequest& r) {
  std::vector<size_t> cand = Candidates(views, r);
  if (cand.empty()) return Status::Unavailable("no eligible replica");
  const bool retry = !r.exclude.empty();
  Pick pick;
  auto finish = [&](size_t i, RouteReason reason) {
    pick.url = views[i].url;
    pick.reason = retry ? RouteReason::kRetry : reason;
    return pick;
  };
  switch (cfg.policy) {
    case BalancePolicy::kRoundRobin:
      return finish(cand[Rotate(cand.size())], RouteReason::kFallback);
    case BalancePolicy::kRandom:
      return finish(cand[std::uniform_int_distribution<size_t>(0, cand.size() - 1)(rng_)],
                    RouteReason::kFallback);
    case BalancePolicy::kLeastLoaded: {
      double best = std::numeric_limits<double>::infinity();
      std::vector<size_t> tied;
      for (size_t i : cand) {
        double load = ReplicaLoad(views[i]);
        if (load < best - kCostTieSeconds) {
          tied.clear();
          best = load;
        }
        if (load <= best + kCostTieSeconds) tied.push_back(i);
      }
      return finish(tied[Rotate(tied.size())], RouteReason::kLoad);
    }
    case BalancePolicy::kCost:
      break;
  }
  static const PrefixMatch kNoMatch;
  std::vector<PricedReplica> priced(views.size());
  double best = std::numeric_limits<double>::infinity();
  for (size_t i : cand) {
    priced[i] = Price(cfg, views[i], i < matches.size() ? matches[i] : kNoMatch, r);
    best = std::min(best, priced[i].cost_s);
  }
  std::vector<size_t> tied;
  int64_t fewest = std::numeric_limits<int64_t>::max();
  for (size_t i : cand) {
    if (priced[i].cost_s > best + kCostTieSeconds) continue;
    if (views[i].in_flight < fewest) {
      tied.clear();
      fewest = views[i].in_flight;
    }
    if (views[i].in_flight == fewest) tied.push_back(i);
  }
  const size_t win = tied[Rotate(tied.size())];
  pick.cost_s = priced[win].cost_s;
  pick.cached_tokens = priced[win].cached_tokens;
  pick.detail = Detail(priced[win]);
  RouteReason reason = pick.cached_tokens > 0     ? RouteReason::kAffinity
                       : views[win].metrics.valid ? RouteReason::kLoad
                                                  : RouteReason::kFallback;
  return finish(win, reason);
}

}  // namespace strata::gateway
