// Split arms: the sticky point of a key, the arm of a point, the key of a request, and the table
// of runtime weights.
#include "gateway/split.h"

#include <xxhash.h>

#include <cmath>
#include <numeric>

#include "http/json_fields.h"

namespace strata::gateway {

double StickyPoint(std::string_view route, std::string_view key) {
  std::string buf;
  buf.reserve(route.size() + 1 + key.size());
  buf.append(route);
  buf.push_back('\0');
  buf.append(key);
  const uint64_t h = XXH3_64bits(buf.data(), buf.size());
  return static_cast<double>(h >> 11) * 0x1.0p-53;  // the top 53 bits: exact in a double, < 1
}

size_t ArmForPoint(const std::vector<double>& weights, double u) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  const double target = u * total;
  double upto = 0;
  size_t last = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    last = i;
    upto += weights[i];
    if (target < upto) return i;
  }
  return last;  // rounding at the very top of [0, 1): the last arm with weight
}

std::string StickyKeyOf(const StickyConfig& sticky, const nlohmann::json& body,
                        const http::HttpRequest& req, std::string_view tenant) {
  std::string key;
  switch (sticky.key) {
    case StickyKey::kUser: {
      std::string user;
      if (http::Fields(body).String("user", &user).ok() && !user.empty()) key = "user:" + user;
      break;
    }
    case StickyKey::kHeader:
      if (std::string_view v = req.Header(sticky.header); !v.empty())
        key = "header:" + std::string(v);
      break;
    case StickyKey::kTenant:
      break;
  }
  if (key.empty() && !tenant.empty()) key = "tenant:" + std::string(tenant);
  return key;
}

ArmChoice ChooseArm(std::string_view route, const std::vector<double>& weights,
                    std::string_view key, double random_u) {
  if (key.empty()) return {ArmForPoint(weights, random_u), false};
  return {ArmForPoint(weights, StickyPoint(route, key)), true};
}

namespace {

std::vector<double> ConfigWeights(const std::vector<ArmConfig>& arms) {
  std::vector<double> w;
  w.reserve(arms.size());
  for (const ArmConfig& a : arms) w.push_back(a.weight);
  return w;
}

bool SameArms(const std::vector<ArmConfig>& a, const std::vector<ArmConfig>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].pool != b[i].pool || a[i].weight != b[i].weight) return false;
  return true;
}

Status CheckWeights(const std::vector<double>& w) {
  double sum = 0;
  for (double x : w) {
    if (!std::isfinite(x) || x < 0 || x > 1e6)
      return Status::InvalidArgument("weights must be numbers in [0, 1000000]");
    sum += x;
  }
  if (sum <= 0) return Status::InvalidArgument("the weights must not all be 0");
  return Status::Ok();
}

}  // namespace

void SplitWeights::Reconfigure(const GatewayConfig& cfg) {
  MutexLock lock(&mu_);
  std::map<std::string, Entry, std::less<>> next;
  for (const RouteConfig& r : cfg.routes) {
    if (r.arms.empty()) continue;
    auto old = routes_.find(r.name);
    if (old != routes_.end() && SameArms(old->second.arms, r.arms)) {
      next.emplace(r.name, std::move(old->second));
      continue;
    }
    next.emplace(r.name, Entry{r.arms, ConfigWeights(r.arms), false});
  }
  routes_ = std::move(next);
}

std::vector<double> SplitWeights::Weights(const RouteConfig& route) const {
  MutexLock lock(&mu_);
  auto it = routes_.find(route.name);
  if (it == routes_.end() || !SameArms(it->second.arms, route.arms))
    return ConfigWeights(route.arms);
  return it->second.current;
}

Status SplitWeights::Set(std::string_view route,
                         const std::map<std::string, double, std::less<>>& by_pool) {
  MutexLock lock(&mu_);
  auto it = routes_.find(route);
  if (it == routes_.end()) return Status::NotFound("no split route '" + std::string(route) + "'");
  for (const auto& [pool, weight] : by_pool) {
    bool known = false;
    for (const ArmConfig& a : it->second.arms) known = known || a.pool == pool;
    if (!known) return Status::InvalidArgument("'" + pool + "' is not an arm of this route");
  }
  std::vector<double> w;
  for (const ArmConfig& a : it->second.arms) {
    auto f = by_pool.find(a.pool);
    if (f == by_pool.end()) return Status::InvalidArgument("no weight for arm '" + a.pool + "'");
    w.push_back(f->second);
  }
  return Assign(&it->second, std::move(w));
}

Status SplitWeights::SetByIndex(std::string_view route, std::vector<double> weights) {
  MutexLock lock(&mu_);
  auto it = routes_.find(route);
  if (it == routes_.end()) return Status::NotFound("no split route '" + std::string(route) + "'");
  return Assign(&it->second, std::move(weights));
}

Status SplitWeights::Assign(Entry* e, std::vector<double> weights) {
  if (weights.size() != e->arms.size()) return Status::InvalidArgument("one weight per arm");
  RETURN_IF_ERROR(CheckWeights(weights));
  e->current = std::move(weights);
  e->overridden = true;
  return Status::Ok();
}

std::vector<RouteWeights> SplitWeights::List() const {
  MutexLock lock(&mu_);
  std::vector<RouteWeights> out;
  for (const auto& [name, e] : routes_) {
    RouteWeights rw{name, {}, ConfigWeights(e.arms), e.current, e.overridden};
    for (const ArmConfig& a : e.arms) rw.pools.push_back(a.pool);
    out.push_back(std::move(rw));
  }
  return out;
}

}  // namespace strata::gateway
