// The gateway config's YAML decoder: one table of fields per section, each field a small function
// that decodes its node (type and range checked) into the struct; then the cross-field checks
// (names unique, routes reach pools, API keys unique). yaml-cpp throws; its exceptions are caught
// at the one entry point, ParseGatewayConfig.
#include "gateway/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "base/ascii.h"
#include "http/auth.h"
#include "http/client.h"
#include "tokenizer/chat/builtin_templates.h"
#include "yamlcfg/yaml_decode.h"

namespace strata::gateway {
namespace {

using std::chrono::milliseconds;
using namespace yamlcfg;  // NOLINT(google-build-using-namespace): the decoder toolkit

// No node budget: the decoder follows the tables (an alias is walked only where a key expects a
// section), so the text's size bounds its work.
constexpr DocumentKind kDocument{.name = "gateway config", .max_bytes = kMaxGatewayConfigBytes};

Result<Priority> DecodePriority(const YAML::Node& n, const std::string& path) {
  ASSIGN_OR_RETURN(std::string s, DecodeString(n, path));
  auto p = ParsePriorityName(s);
  if (!p.ok()) return Bad(path, fmt::format("expected gold, silver or bronze (got \"{}\")", s));
  return *p;
}

constexpr std::pair<std::string_view, BalancePolicy> kPolicies[] = {
    {"cost", BalancePolicy::kCost},
    {"round_robin", BalancePolicy::kRoundRobin},
    {"random", BalancePolicy::kRandom},
    {"least_loaded", BalancePolicy::kLeastLoaded}};

// Field makers only the gateway's config needs (the toolkit: yamlcfg/yaml_decode.h).
template <typename T>
Field<T> OptStr(std::string_view name, std::optional<std::string> T::*m) {
  return {name, [m](const YAML::Node& n, const std::string& path, T* out) {
            if (n.IsNull()) return Status::Ok();  // `model:` alone: no condition
            ASSIGN_OR_RETURN(std::string s, DecodeString(n, path));
            out->*m = std::move(s);
            return Status::Ok();
          }};
}
template <typename T>
Field<T> OptInt(std::string_view name, std::optional<int64_t> T::*m, int64_t lo, int64_t hi) {
  return {name, [m, lo, hi](const YAML::Node& n, const std::string& path, T* out) {
            ASSIGN_OR_RETURN(int64_t v, DecodeInt(n, path, lo, hi));
            out->*m = v;
            return Status::Ok();
          }};
}

constexpr int64_t kDayMs = 86'400'000;
constexpr int64_t kMaxCount = 1'000'000'000;
constexpr double kMaxRate = 1e15;

const Fields<DnsConfig>& DnsFields() {
  using D = DnsConfig;
  static const Fields<D> kFields = {
      Str<D>("name", &D::name), Int<D>("port", &D::port, 1, 65535),
      Duration<milliseconds, D>("interval_ms", &D::interval, 100, kDayMs)};
  return kFields;
}

const Fields<PoolConfig>& PoolFields() {
  using P = PoolConfig;
  static const Fields<P> kFields = {
      Str<P>("name", &P::name),
      {"replicas",
       [](const YAML::Node& n, const std::string& path, P* out) {
         ASSIGN_OR_RETURN(out->replicas, DecodeStringList(n, path));
         out->replicas_listed = true;
         return Status::Ok();
       }},
      OptSub("dns", &P::dns, DnsFields),
      Str<P>("tokenizer", &P::tokenizer),
      Str<P>("chat_template", &P::chat_template),
      {"labels",
       [](const YAML::Node& n, const std::string& path, P* out) {
         ASSIGN_OR_RETURN(auto pairs, DecodeStringPairs(n, path));
         out->labels = {pairs.begin(), pairs.end()};
         return Status::Ok();
       }},
      Str<P>("api_key", &P::api_key),
      Int<P>("max_in_flight", &P::max_in_flight, 0, kMaxCount),
      Duration<milliseconds, P>("cold_start_hold_ms", &P::cold_start_hold, 0, kDayMs),
      Int<P>("cold_start_max_held", &P::cold_start_max_held, 1, 100000),
  };
  return kFields;
}

Status DecodeHeaders(const YAML::Node& n, const std::string& path, RouteMatch* out) {
  ASSIGN_OR_RETURN(auto pairs, DecodeStringPairs(n, path));
  for (auto& [name, value] : pairs) {
    if (name.empty()) return Bad(path, "a header name is empty");
    AsciiStrToLower(&name);
    out->headers.emplace_back(std::move(name), std::move(value));
  }
  return Status::Ok();
}

constexpr int64_t kMaxPromptTokens = int64_t{1} << 40;

const Fields<RouteMatch>& MatchFields() {
  using M = RouteMatch;
  static const Fields<M> kFields = {
      OptStr<M>("model", &M::model),
      OptStr<M>("adapter", &M::adapter),
      OptStr<M>("adapter_prefix", &M::adapter_prefix),
      OptStr<M>("tenant", &M::tenant),
      Decoded<M>("priority", &M::priority, DecodePriority),
      OptInt<M>("min_prompt_tokens", &M::min_prompt_tokens, 0, kMaxPromptTokens),
      OptInt<M>("max_prompt_tokens", &M::max_prompt_tokens, 0, kMaxPromptTokens),
      {"header", DecodeHeaders},  // the spelling
      {"headers", DecodeHeaders},
  };
  return kFields;
}

// ---- traffic management (issue 17): the fields of splits, canaries, shadows, cascades ----

constexpr double kMaxWeight = 1e6;

constexpr std::pair<std::string_view, StickyKey> kStickyKeys[] = {
    {"user", StickyKey::kUser}, {"header", StickyKey::kHeader}, {"tenant", StickyKey::kTenant}};
constexpr std::pair<std::string_view, CascadeSignal> kSignals[] = {
    {"mean_logprob", CascadeSignal::kMeanLogprob},
    {"min_logprob", CascadeSignal::kMinLogprob},
    {"margin", CascadeSignal::kMargin}};

const Fields<ArmConfig>& ArmFields() {
  using A = ArmConfig;
  static const Fields<A> kFields = {Str<A>("pool", &A::pool),
                                    Num<A>("weight", &A::weight, 0, kMaxWeight)};
  return kFields;
}

const Fields<StickyConfig>& StickyFields() {
  using S = StickyConfig;
  static const Fields<S> kFields = {
      Enum<S>("key", &S::key, kStickyKeys),
      {"header",
       [](const YAML::Node& n, const std::string& path, S* out) {
         ASSIGN_OR_RETURN(std::string h, DecodeString(n, path));
         AsciiStrToLower(&h);
         out->header = std::move(h);
         return Status::Ok();
       }},
  };
  return kFields;
}

const Fields<CanaryGuards>& GuardFields() {
  using G = CanaryGuards;
  static const Fields<G> kFields = {
      Num<G>("ttft_p95_max_ratio", &G::ttft_p95_max_ratio, 0, kMaxWeight, /*lo_open=*/true),
      Num<G>("tpot_p95_max_ratio", &G::tpot_p95_max_ratio, 0, kMaxWeight, /*lo_open=*/true),
      Num<G>("latency_min_delta_s", &G::latency_min_delta_s, 0, 3600),
      Num<G>("error_rate_max_delta", &G::error_rate_max_delta, 0, 1),
      {"mean_logprob_min_delta",
       [](const YAML::Node& n, const std::string& path, G* out) {
         if (n.IsNull()) return Status::Ok();  // absent: the guard is off
         ASSIGN_OR_RETURN(out->mean_logprob_min_delta, DecodeNumber(n, path, -1000, 1000));
         return Status::Ok();
       }},
  };
  return kFields;
}

// steps: [5, 25, 50, 100] — each in (0, 100], each greater than the one before.
Status DecodeSteps(const YAML::Node& n, const std::string& path, CanaryConfig* out) {
  ASSIGN_OR_RETURN(out->steps,
                   DecodeIncreasingNumbers(n, path, "canary weights", 0, 100, /*lo_open=*/true));
  return Status::Ok();
}

const Fields<CanaryConfig>& CanaryFields() {
  using C = CanaryConfig;
  static const Fields<C> kFields = {
      Str<C>("baseline", &C::baseline),
      Str<C>("canary", &C::canary),
      {"steps", DecodeSteps},
      Int<C>("min_requests", &C::min_requests, 1, kMaxCount),
      Int<C>("min_duration_s", &C::min_duration, 0, 30 * 86400),
      Int<C>("interval_s", &C::interval, 1, 86400),
      Sub("guards", &C::guards, GuardFields),
  };
  return kFields;
}

const Fields<ShadowConfig>& ShadowFields() {
  using S = ShadowConfig;
  static const Fields<S> kFields = {Str<S>("pool", &S::pool),
                                    Num<S>("fraction", &S::fraction, 0, 1)};
  return kFields;
}

const Fields<CascadeConfig>& CascadeFields() {
  using C = CascadeConfig;
  static const Fields<C> kFields = {
      Str<C>("first", &C::first),
      Str<C>("then", &C::then),
      Enum<C>("signal", &C::signal, kSignals),
      Num<C>("threshold", &C::threshold, -1e6, 1e6),
  };
  return kFields;
}

// `to: {cascade: {...}}` — a mapping whose only key is `cascade`.
const Fields<RouteConfig>& TargetFields() {
  using R = RouteConfig;
  static const Fields<R> kFields = {
      {"cascade",
       [](const YAML::Node& n, const std::string& path, R* out) {
         if (!n.IsMap()) return Bad(path, "expected a mapping {first, then, signal, threshold}");
         out->cascade.emplace();
         return DecodeSection(CascadeFields(), n, path, &*out->cascade);
       }},
  };
  return kFields;
}

// `to:` a pool name, a list of arms, or {cascade: {...}}.
Status DecodeRouteTarget(const YAML::Node& n, const std::string& path, RouteConfig* out) {
  if (n.IsSequence()) {
    RETURN_IF_ERROR(DecodeList(ArmFields(), n, path, &out->arms));
    if (out->arms.size() < 2)
      return Bad(path, "a split needs at least 2 arms (use a pool name for one)");
    return Status::Ok();
  }
  if (n.IsMap()) return DecodeSection(TargetFields(), n, path, out);
  ASSIGN_OR_RETURN(out->to, DecodeString(n, path));
  return Status::Ok();
}

const Fields<RouteConfig>& RouteFields() {
  using R = RouteConfig;
  static const Fields<R> kFields = {
      Str<R>("name", &R::name),
      {"match",
       [](const YAML::Node& n, const std::string& path, R* out) {
         if (n.IsNull()) return Status::Ok();  // `match:` alone = the default route
         out->match.emplace();
         return DecodeSection(MatchFields(), n, path, &*out->match);
       }},
      {"to", DecodeRouteTarget},
      Sub("sticky", &R::sticky, StickyFields),
      OptSub("canary", &R::canary, CanaryFields),
      OptSub("shadow", &R::shadow, ShadowFields),
  };
  return kFields;
}

const Fields<TenantConfig>& TenantFields() {
  using T = TenantConfig;
  static const Fields<T> kFields = {
      Str<T>("name", &T::name),
      Decoded<T>("api_keys", &T::api_keys, DecodeStringList),
      Num<T>("tokens_per_minute", &T::tokens_per_minute, 0, kMaxRate),
      Num<T>("requests_per_minute", &T::requests_per_minute, 0, kMaxRate),
      Int<T>("max_concurrency", &T::max_concurrency, 0, kMaxCount),
      Decoded<T>("default_priority", &T::default_priority, DecodePriority),
  };
  return kFields;
}

Field<AdmissionConfig> MaxWait(std::string_view name, Priority p) {
  return {name, [p](const YAML::Node& n, const std::string& path, AdmissionConfig* out) {
            ASSIGN_OR_RETURN(int64_t v, DecodeInt(n, path, 0, 10 * 60 * 1000));
            out->max_wait[static_cast<size_t>(p)] = milliseconds(v);
            return Status::Ok();
          }};
}

const Fields<AdmissionConfig>& AdmissionFields() {
  static const Fields<AdmissionConfig> kFields = {MaxWait("gold_max_wait_ms", Priority::kGold),
                                                  MaxWait("silver_max_wait_ms", Priority::kSilver),
                                                  MaxWait("bronze_max_wait_ms", Priority::kBronze)};
  return kFields;
}

const Fields<HealthConfig>& HealthFields() {
  using H = HealthConfig;
  static const Fields<H> kFields = {
      Duration<milliseconds, H>("interval_ms", &H::interval, 10, kDayMs),
      Duration<milliseconds, H>("timeout_ms", &H::timeout, 1, kDayMs),
      Int<H>("eject_after_failures", &H::eject_after_failures, 1, 1000),
      Duration<milliseconds, H>("ejection_base_ms", &H::ejection_base, 1, kDayMs),
      Duration<milliseconds, H>("ejection_max_ms", &H::ejection_max, 1, kDayMs),
  };
  return kFields;
}

Field<BalancerConfig> TierSeconds(KvTier t) {
  return {KvTierName(t), [t](const YAML::Node& n, const std::string& path, BalancerConfig* out) {
            ASSIGN_OR_RETURN(out->tier_seconds_per_block[static_cast<size_t>(t)],
                             DecodeNumber(n, path, 0, 1000));
            return Status::Ok();
          }};
}

const Fields<BalancerConfig>& TierFields() {
  static const Fields<BalancerConfig> kFields = {
      TierSeconds(KvTier::kPool), TierSeconds(KvTier::kRam), TierSeconds(KvTier::kDisk),
      TierSeconds(KvTier::kRedis)};
  return kFields;
}

const Fields<BalancerConfig>& BalancerFields() {
  using B = BalancerConfig;
  static const Fields<B> kFields = {
      Enum<B>("policy", &B::policy, kPolicies, Choices::kEither),
      Duration<milliseconds, B>("metrics_interval_ms", &B::metrics_interval, 10, kDayMs),
      Duration<milliseconds, B>("kv_events_interval_ms", &B::kv_events_interval, 10, kDayMs),
      Int<B>("history_ttl_s", &B::history_ttl, 1, 7 * 86400),
      Num<B>("default_prefill_tokens_per_s", &B::default_prefill_tokens_per_s, 0, 1e12, true),
      Num<B>("default_decode_step_s", &B::default_decode_step_s, 0, 1000),
      Num<B>("lora_load_s", &B::lora_load_s, 0, 3600),
      {"tier_seconds_per_block", [](const YAML::Node& n, const std::string& path,
                                    B* out) { return DecodeSection(TierFields(), n, path, out); }},
  };
  return kFields;
}

const Fields<UpstreamConfig>& UpstreamFields() {
  using U = UpstreamConfig;
  static const Fields<U> kFields = {Seconds<U>("timeout_s", &U::timeout, 0, 86400.0),
                                    Int<U>("retries", &U::retries, 0, 10)};
  return kFields;
}

const Fields<AdminConfig>& AdminFields() {
  static const Fields<AdminConfig> kFields = {Str<AdminConfig>("api_key", &AdminConfig::api_key)};
  return kFields;
}

const Fields<UiConfig>& UiFields() {
  static const Fields<UiConfig> kFields = {Str<UiConfig>("control_url", &UiConfig::control_url)};
  return kFields;
}

const Fields<TracingConfig>& TracingFields() {
  using T = TracingConfig;
  static const Fields<T> kFields = {Str<T>("otlp_endpoint", &T::otlp_endpoint),
                                    Num<T>("sample_ratio", &T::sample_ratio, 0, 1),
                                    Str<T>("service_name", &T::service_name),
                                    Int<T>("queue_capacity", &T::queue_capacity, 1, 1 << 20)};
  return kFields;
}

const Fields<GatewayConfig>& TopFields() {
  using G = GatewayConfig;
  static const Fields<G> kFields = {
      SubList("pools", &G::pools, PoolFields),
      SubList("routes", &G::routes, RouteFields),
      SubList("tenants", &G::tenants, TenantFields),
      Sub("admission", &G::admission, AdmissionFields),
      Sub("health", &G::health, HealthFields),
      Sub("balancer", &G::balancer, BalancerFields),
      Sub("upstream", &G::upstream, UpstreamFields),
      Sub("admin", &G::admin, AdminFields),
      Sub("ui", &G::ui, UiFields),
      Sub("tracing", &G::tracing, TracingFields),
      Str<G>("access_log", &G::access_log),
  };
  return kFields;
}

// ---- cross-field checks ----

// Names appear in metrics labels, headers and log lines: 1-64 of [A-Za-z0-9._-].
Status CheckName(const std::string& name, const std::string& path) {
  const bool ok = !name.empty() && name.size() <= 64 &&
                  std::all_of(name.begin(), name.end(), [](unsigned char c) {
                    return std::isalnum(c) || c == '-' || c == '_' || c == '.';
                  });
  if (ok) return Status::Ok();
  if (name.empty()) return Bad(path, "is required");
  return Bad(path, "must be 1 to 64 letters, digits, '-', '_' or '.'");
}

Status CheckPool(const PoolConfig& p, const std::string& path) {
  RETURN_IF_ERROR(CheckName(p.name, Join(path, "name")));
  if (!p.replicas_listed && !p.dns)
    return Bad(path, "needs replicas: or dns: (`replicas: []` for a pool with none yet)");
  std::set<std::string> seen;
  for (size_t i = 0; i < p.replicas.size(); ++i) {
    const std::string where = At(Join(path, "replicas"), i);
    auto url = http::ParseUrl(p.replicas[i]);
    if (!url.ok()) return Bad(where, "not an http:// URL (" + url.status().message() + ")");
    if (!seen.insert(url->ToString()).second) return Bad(where, "duplicate replica URL");
  }
  if (p.dns && p.dns->name.empty()) return Bad(Join(path, "dns.name"), "is required");
  if (!p.chat_template.empty() && tokenizer::chat::FindBuiltinTemplate(p.chat_template) == nullptr)
    return Bad(Join(path, "chat_template"),
               fmt::format("unknown built-in chat template '{}' (one of: {})", p.chat_template,
                           tokenizer::chat::BuiltinTemplateNames()));
  return Status::Ok();
}

// ---- traffic management (issue 17): cross-field checks of a route's target ----

Status CheckPoolRef(const std::set<std::string>& pools, const std::string& name,
                    const std::string& path) {
  if (name.empty()) return Bad(path, "is required (a pool name)");
  if (!pools.contains(name)) return Bad(path, "no pool named '" + name + "'");
  return Status::Ok();
}

Status CheckArms(const std::set<std::string>& pools, const RouteConfig& r,
                 const std::string& path) {
  std::set<std::string> seen;
  double sum = 0;
  for (size_t i = 0; i < r.arms.size(); ++i) {
    const std::string where = At(path, i);
    RETURN_IF_ERROR(CheckPoolRef(pools, r.arms[i].pool, Join(where, "pool")));
    if (!seen.insert(r.arms[i].pool).second)
      return Bad(Join(where, "pool"), "pool '" + r.arms[i].pool + "' is already an arm");
    sum += r.arms[i].weight;
  }
  if (sum <= 0 && !r.canary) return Bad(path, "the arms' weights must not all be 0");
  return Status::Ok();
}

Status CheckCanary(const RouteConfig& r, const std::string& path) {
  const CanaryConfig& c = *r.canary;
  if (r.arms.size() != 2) return Bad(path, "needs a split of exactly 2 arms in to:");
  auto is_arm = [&](const std::string& p) { return p == r.arms[0].pool || p == r.arms[1].pool; };
  if (c.baseline.empty())
    return Bad(Join(path, "baseline"), "is required (the current arm's pool)");
  if (c.canary.empty()) return Bad(Join(path, "canary"), "is required (the new arm's pool)");
  if (!is_arm(c.baseline))
    return Bad(Join(path, "baseline"), "must be one of the arms' pools ('" + r.arms[0].pool +
                                           "', '" + r.arms[1].pool + "')");
  if (!is_arm(c.canary) || c.canary == c.baseline)
    return Bad(Join(path, "canary"), "must be the other arm's pool (not the baseline)");
  if (c.steps.empty()) return Bad(Join(path, "steps"), "is required (canary weights in %)");
  return Status::Ok();
}

Status CheckRouteTraffic(const std::set<std::string>& pools, const RouteConfig& r,
                         const std::string& path) {
  const std::string to = Join(path, "to");
  if (r.cascade) {
    const std::string where = Join(to, "cascade");
    RETURN_IF_ERROR(CheckPoolRef(pools, r.cascade->first, Join(where, "first")));
    RETURN_IF_ERROR(CheckPoolRef(pools, r.cascade->then, Join(where, "then")));
    if (r.cascade->first == r.cascade->then)
      return Bad(Join(where, "then"), "must differ from first");
  } else if (!r.arms.empty()) {
    RETURN_IF_ERROR(CheckArms(pools, r, to));
  } else if (r.to.empty()) {
    return Bad(to, "is required (a pool name, a list of arms or {cascade: ...})");
  } else {
    RETURN_IF_ERROR(CheckPoolRef(pools, r.to, to));
  }
  if (r.canary) RETURN_IF_ERROR(CheckCanary(r, Join(path, "canary")));
  if (r.shadow) RETURN_IF_ERROR(CheckPoolRef(pools, r.shadow->pool, Join(path, "shadow.pool")));
  const StickyConfig& st = r.sticky;
  if (st.key == StickyKey::kHeader && st.header.empty())
    return Bad(Join(path, "sticky.header"), "is required with key: header");
  if (st.key != StickyKey::kHeader && !st.header.empty())
    return Bad(Join(path, "sticky.header"), "is used only with key: header");
  return Status::Ok();
}

Status CheckAdmin(const GatewayConfig& c) {
  const std::string& key = c.admin.api_key;
  if (key.empty()) return Status::Ok();
  for (const TenantConfig& t : c.tenants) {
    for (const std::string& k : t.api_keys)  // the key itself is a secret: never echoed
      if (http::ConstantTimeEquals(k, key))
        return Bad("admin.api_key", "must differ from every tenant's API key");
  }
  return Status::Ok();
}

Status CheckRoute(const std::set<std::string>& pools, const RouteConfig& r,
                  const std::string& path) {
  RETURN_IF_ERROR(CheckName(r.name, Join(path, "name")));
  RETURN_IF_ERROR(CheckRouteTraffic(pools, r, path));
  if (r.match && r.match->min_prompt_tokens && r.match->max_prompt_tokens &&
      *r.match->min_prompt_tokens > *r.match->max_prompt_tokens)
    return Bad(Join(path, "match"),
               fmt::format("min_prompt_tokens {} is greater than max_prompt_tokens {}",
                           *r.match->min_prompt_tokens, *r.match->max_prompt_tokens));
  return Status::Ok();
}

Status CheckTenants(const GatewayConfig& c) {
  std::set<std::string> names, keys;
  for (size_t i = 0; i < c.tenants.size(); ++i) {
    const TenantConfig& t = c.tenants[i];
    const std::string path = At("tenants", i);
    RETURN_IF_ERROR(CheckName(t.name, Join(path, "name")));
    if (!names.insert(t.name).second)
      return Bad(Join(path, "name"), "duplicate tenant '" + t.name + "'");
    for (size_t k = 0; k < t.api_keys.size(); ++k) {
      const std::string where = At(Join(path, "api_keys"), k);
      if (t.api_keys[k].empty()) return Bad(where, "an API key is empty");
      // The key itself is a secret: never echoed in the error.
      if (!keys.insert(t.api_keys[k]).second) return Bad(where, "duplicate API key");
    }
  }
  return Status::Ok();
}

Status Validate(const GatewayConfig& c) {
  if (c.pools.empty()) return Bad("pools", "at least one pool is required");
  std::set<std::string> names;
  for (size_t i = 0; i < c.pools.size(); ++i) {
    RETURN_IF_ERROR(CheckPool(c.pools[i], At("pools", i)));
    if (!names.insert(c.pools[i].name).second)
      return Bad(At("pools", i) + ".name", "duplicate pool '" + c.pools[i].name + "'");
  }
  if (c.routes.empty()) return Bad("routes", "at least one route is required");
  const std::set<std::string> pools = std::move(names);  // sets: hostile sizes stay n log n
  names.clear();
  for (size_t i = 0; i < c.routes.size(); ++i) {
    RETURN_IF_ERROR(CheckRoute(pools, c.routes[i], At("routes", i)));
    if (!names.insert(c.routes[i].name).second)
      return Bad(At("routes", i) + ".name", "duplicate route '" + c.routes[i].name + "'");
  }
  RETURN_IF_ERROR(CheckTenants(c));
  RETURN_IF_ERROR(CheckAdmin(c));
  if (c.health.ejection_base > c.health.ejection_max)
    return Bad("health.ejection_base_ms", "must not exceed health.ejection_max_ms");
  if (c.access_log.empty()) return Bad("access_log", "expected stderr, off or a file path");
  if (!c.ui.control_url.empty()) {
    auto url = http::ParseUrl(c.ui.control_url);
    if (!url.ok())
      return Bad("ui.control_url", "not an http:// URL (" + url.status().message() + ")");
  }
  if (!c.tracing.otlp_endpoint.empty()) {
    auto url = http::ParseUrl(c.tracing.otlp_endpoint);
    if (!url.ok())
      return Bad("tracing.otlp_endpoint", "not an http:// URL (" + url.status().message() + ")");
  }
  if (c.tracing.service_name.empty()) return Bad("tracing.service_name", "must not be empty");
  return Status::Ok();
}

}  // namespace

std::string_view BalancePolicyName(BalancePolicy p) { return EnumName(p, kPolicies); }

std::string_view StickyKeyName(StickyKey k) { return EnumName(k, kStickyKeys); }

std::string_view CascadeSignalName(CascadeSignal s) { return EnumName(s, kSignals); }

const std::string& RouteConfig::primary_pool() const {
  if (!to.empty()) return to;
  if (!arms.empty()) return arms.front().pool;
  if (cascade) return cascade->first;
  return to;
}

std::vector<std::string_view> RouteConfig::ReferencedPools() const {
  std::vector<std::string_view> v;
  if (!to.empty()) v.push_back(to);
  for (const ArmConfig& a : arms) v.push_back(a.pool);
  if (cascade) v.insert(v.end(), {cascade->first, cascade->then});
  if (shadow) v.push_back(shadow->pool);
  return v;
}

const PoolConfig* GatewayConfig::FindPool(std::string_view name) const {
  return FindBy(pools, &PoolConfig::name, name);
}

const TenantConfig* GatewayConfig::FindTenant(std::string_view name) const {
  return FindBy(tenants, &TenantConfig::name, name);
}

const TenantConfig* GatewayConfig::TenantForKey(std::string_view key) const {
  const TenantConfig* found = nullptr;
  for (const TenantConfig& t : tenants) {
    for (const std::string& k : t.api_keys) {  // every key compared: no early exit on a match
      if (http::ConstantTimeEquals(k, key) && found == nullptr) found = &t;
    }
  }
  return found;
}

bool GatewayConfig::keys_required() const {
  return std::any_of(tenants.begin(), tenants.end(),
                     [](const TenantConfig& t) { return !t.api_keys.empty(); });
}

Result<std::shared_ptr<const GatewayConfig>> ParseGatewayConfig(std::string_view yaml_text) {
  auto c = std::make_shared<GatewayConfig>();
  RETURN_IF_ERROR(DecodeDocument(yaml_text, kDocument, [&](const YAML::Node& root) {
    return DecodeSection(TopFields(), root, "", c.get());
  }));
  RETURN_IF_ERROR(Validate(*c));
  return std::shared_ptr<const GatewayConfig>(std::move(c));
}

Result<std::shared_ptr<const GatewayConfig>> LoadGatewayConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadDocumentFile(path, kDocument));
  auto c = ParseGatewayConfig(text);
  if (!c.ok()) return c.status().WithContext(path);
  return c;
}

}  // namespace strata::gateway
