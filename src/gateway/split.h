// gateway/split: the arm of a split route (`to: [{pool, weight}, ...]`) for one request, and the
// runtime weights of every split route.
//
// Stickiness by consistent hashing: the request's sticky key (StickyKeyOf: the body's `user`, a
// header, or the tenant, per the route's `sticky:`; then the tenant; then none) is hashed with
// XXH3 (salted with the route name, so two routes split independently) to a point u in [0, 1);
// the arms, in config order, own consecutive intervals of [0, 1) as wide as their share of the
// total weight, and the arm whose interval holds u is chosen. Changing weights moves only the
// points between the old and the new interval boundaries: raising arm 2 of two from 10 % to 20 %
// moves exactly the keys with u in [0.8, 0.9) (arm 1 → arm 2), every other key keeps its arm. With
// more than two arms, weight moved between neighbours in config order moves only keys between
// them; other changes can shift a middle arm's interval. A request without any key is drawn at
// random by weight. Arms of weight 0 are never chosen.
//
// SplitWeights: the current weights of the split routes, starting from the config, changed by
// the admin API or by a canary (canary.h). A reload keeps a route's runtime weights when its arms
// (pools in order and their configured weights) are unchanged; otherwise the config's weights
// apply again. Routes that are gone are dropped.
//
// Thread contract: the free functions are pure; SplitWeights is thread-safe (one mutex).
// Errors: SplitWeights::Set returns NotFound (no such split route) or InvalidArgument (a pool
// that is not an arm, a missing arm, a negative / non-finite weight, all weights 0).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "gateway/config.h"
#include "http/server.h"

namespace strata::gateway {

// The point of `key` for route `route`, in [0, 1) (XXH3 of route NUL key, top 53 bits).
double StickyPoint(std::string_view route, std::string_view key);

// The index of the arm whose cumulative-weight interval holds u (u in [0, 1)). Weights must be
// >= 0 with a positive sum; an arm of weight 0 is never returned.
size_t ArmForPoint(const std::vector<double>& weights, double u);

// The request's sticky key, prefixed by its kind ("user:", "header:", "tenant:") so values of
// different kinds never collide; "" when the request has none (then: a random draw). A body
// `user` that is not a string counts as absent (the replica answers about it).
std::string StickyKeyOf(const StickyConfig& sticky, const nlohmann::json& body,
                        const http::HttpRequest& req, std::string_view tenant);

struct ArmChoice {
  size_t index = 0;
  bool sticky = false;  // chosen by the key (false: the random draw)
};
// The arm for `key` ("" → by `random_u`, a uniform draw in [0, 1) the caller supplies).
ArmChoice ChooseArm(std::string_view route, const std::vector<double>& weights,
                    std::string_view key, double random_u);

// One route's arms as the admin API shows them.
struct RouteWeights {
  std::string route;
  std::vector<std::string> pools;  // the arms, in config order
  std::vector<double> config, current;
  bool overridden = false;  // current was set at run time (admin API or canary)
};

class SplitWeights {
 public:
  // Adopts a configuration (see the header comment for what survives).
  void Reconfigure(const GatewayConfig& cfg);
  // The current weights of `route`'s arms, in config order. Falls back to the route's config
  // weights when the table knows the route with other arms (a request on an older snapshot).
  std::vector<double> Weights(const RouteConfig& route) const;
  // Sets the weights of `route` by pool name; every arm must be named.
  Status Set(std::string_view route, const std::map<std::string, double, std::less<>>& by_pool);
  // Sets by index (the canary's use); `weights` has one entry per arm.
  Status SetByIndex(std::string_view route, std::vector<double> weights);
  std::vector<RouteWeights> List() const;

 private:
  struct Entry {
    std::vector<ArmConfig> arms;  // as configured (pools and weights)
    std::vector<double> current;
    bool overridden = false;
  };
  static Status Assign(Entry* e, std::vector<double> weights);
  mutable Mutex mu_;
  std::map<std::string, Entry, std::less<>> routes_ GUARDED_BY(mu_);
};

}  // namespace strata::gateway
