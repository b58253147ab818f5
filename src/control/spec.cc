// The deployment spec's YAML decoder: one table of fields per struct (yamlcfg/yaml_decode.h),
// then the cross-field checks (names, references, bounds), then the gateway section's check
// through the gateway's own parser (control/gateway_yaml.h). yaml-cpp's exceptions are caught at
// the one entry point, ParseDeploymentSpec.
#include "control/spec.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "control/gateway_yaml.h"
#include "yamlcfg/yaml_decode.h"

namespace strata::control {
namespace {

using namespace yamlcfg;  // NOLINT(google-build-using-namespace): the decoder toolkit

// The spec's bounds. The node budget (every alias use counted) and depth guard the free-form maps
// (`serve:`, `gateway:`) that are re-emitted whole.
constexpr DocumentKind kDocument{
    .name = "deployment spec", .max_bytes = kMaxSpecBytes, .max_nodes = 200'000, .max_depth = 64};
constexpr double kMaxMs = 3'600'000;  // an hour, in ms: the largest latency objective

constexpr std::pair<std::string_view, Workload> kWorkloads[] = {
    {"balanced", Workload::kBalanced},
    {"decode_heavy", Workload::kDecodeHeavy},
    {"prefill_heavy", Workload::kPrefillHeavy}};
constexpr std::string_view kPrecisions[] = {"fp32", "fp16", "bf16", "int8", "fp8"};
constexpr std::pair<std::string_view, RolloutStrategy> kStrategies[] = {
    {"surge", RolloutStrategy::kSurge}, {"canary", RolloutStrategy::kCanary}};

// The top level's own fields, decoded into this before the spec is assembled.
struct Document {
  std::string api_version, kind;
  DeploymentSpec spec;
};

// ---- small decoders ----

// A YAML map re-emitted as block-style text (the serve config, the gateway's keys); `skip` keys
// are left out. Duplicate keys stay (the consumer's strict parser names them).
std::string EmitMap(const YAML::Node& n, const std::set<std::string>& skip) {
  YAML::Emitter out;
  out << YAML::Block << YAML::BeginMap;
  size_t emitted = 0;
  for (const auto& kv : n) {
    if (kv.first.IsScalar() && skip.contains(kv.first.Scalar())) continue;
    out << YAML::Key << kv.first << YAML::Value << kv.second;
    ++emitted;
  }
  out << YAML::EndMap;
  return emitted == 0 ? std::string() : std::string(out.c_str());
}

Status DecodePrecisions(const YAML::Node& n, const std::string& path, DeviceNeeds* out) {
  if (n.IsNull()) return Status::Ok();
  if (!n.IsSequence()) return Bad(path, "expected a list of strings");
  out->precisions.clear();
  std::set<std::string_view> seen;
  for (size_t i = 0; i < n.size(); ++i) {
    ASSIGN_OR_RETURN(std::string_view p, DecodeEnum(n[i], At(path, i), kPrecisions));
    if (!seen.insert(p).second) return Bad(At(path, i), fmt::format("duplicate precision '{}'", p));
    out->precisions.emplace_back(p);
  }
  return Status::Ok();
}

// `serve:` the replica's own config (a map), kept as YAML text. Its model path and served name
// come from the spec's models, so `serve.model.path` and `serve.model.served_model_name` are
// refused.
Status DecodeServe(const YAML::Node& n, const std::string& path, PoolSpec* out) {
  if (n.IsNull()) return Status::Ok();
  if (!n.IsMap()) return Bad(path, "expected a mapping (the config of `strata serve --config`)");
  const YAML::Node model = n["model"];
  if (model && model.IsMap() && model["path"])
    return Bad(Join(path, "model.path"),
               "is set by the spec (models[].versions[].path and the pool's version)");
  if (model && model.IsMap() && model["served_model_name"])
    return Bad(Join(path, "model.served_model_name"),
               "is set by the spec (clients send models[].name)");
  out->serve_yaml = EmitMap(n, {});
  return Status::Ok();
}

// `serve_args:` extra `strata serve` flags; the served model name is the spec's
// (kServedModelNameFlag), as the model path is.
Status DecodeServeArgs(const YAML::Node& n, const std::string& path, PoolSpec* out) {
  ASSIGN_OR_RETURN(out->serve_args, DecodeStringList(n, path));
  const std::string flag(kServedModelNameFlag);
  for (size_t i = 0; i < out->serve_args.size(); ++i) {
    const std::string& a = out->serve_args[i];
    if (a == flag || a.starts_with(flag + "="))
      return Bad(At(path, i), flag + " is set by the spec (clients send models[].name)");
  }
  return Status::Ok();
}

Status DecodeLabels(const YAML::Node& n, const std::string& path, PoolSpec* out) {
  ASSIGN_OR_RETURN(auto pairs, DecodeStringPairs(n, path));
  for (auto& [k, v] : pairs) {
    const bool ok = !k.empty() && k.size() <= 63 &&
                    !std::isdigit(static_cast<unsigned char>(k[0])) &&
                    std::all_of(k.begin(), k.end(),
                                [](unsigned char c) { return std::isalnum(c) || c == '_'; });
    if (!ok)
      return Bad(Join(path, k), "a label name is 1 to 63 of [A-Za-z0-9_], not a digit first");
    out->labels[k] = std::move(v);
  }
  return Status::Ok();
}

// `gateway:` {port, ...}: port is decoded; `pools` is refused (they come from the spec's pools);
// every other key is kept as YAML for the gateway's parser.
Status DecodeGateway(const YAML::Node& n, const std::string& path, DeploymentSpec* out) {
  if (n.IsNull()) return Status::Ok();
  if (!n.IsMap()) return Bad(path, "expected a mapping");
  RETURN_IF_ERROR(ForEachKey(
      n, path, "a mapping",
      [&](const std::string& key, const YAML::Node& value, const std::string& key_path) -> Status {
        if (key == "pools")
          return Bad(key_path, "the gateway's pools are the spec's pools (remove this key)");
        if (key != "port") return Status::Ok();  // the gateway's parser's
        ASSIGN_OR_RETURN(int64_t port, DecodeInt(value, key_path, 0, 65535));
        out->gateway.port = static_cast<int>(port);
        return Status::Ok();
      }));
  out->gateway.extra_yaml = EmitMap(n, {"port"});
  return Status::Ok();
}

// ---- the tables ----

const Fields<ModelVersion>& VersionFields() {
  using V = ModelVersion;
  static const Fields<V> kFields = {Str<V>("version", &V::version), Str<V>("path", &V::path)};
  return kFields;
}

const Fields<ModelSpec>& ModelFields() {
  using M = ModelSpec;
  static const Fields<M> kFields = {
      Str<M>("name", &M::name),
      SubList("versions", &M::versions, VersionFields),
  };
  return kFields;
}

const Fields<ReplicaBounds>& BoundsFields() {
  using R = ReplicaBounds;
  static const Fields<R> kFields = {Int<R>("min", &R::min, 0, kMaxReplicas),
                                    Int<R>("max", &R::max, 0, kMaxReplicas)};
  return kFields;
}

const Fields<DeviceNeeds>& NeedsFields() {
  using D = DeviceNeeds;
  static const Fields<D> kFields = {
      {"precisions", DecodePrecisions},
      Num<D>("memory_gb", &D::memory_gb, 0, 1e6, /*lo_open=*/true),
      Num<D>("cpus", &D::cpus, 0, 4096, /*lo_open=*/true),
      Int<D>("gpus", &D::gpus, 0, 64),
  };
  return kFields;
}

const Fields<SloSpec>& SloFields() {
  using S = SloSpec;
  static const Fields<S> kFields = {
      Num<S>("ttft_p95_ms", &S::ttft_p95_ms, 0, kMaxMs),
      Num<S>("tpot_p95_ms", &S::tpot_p95_ms, 0, kMaxMs),
      Num<S>("e2e_p95_ms", &S::e2e_p95_ms, 0, kMaxMs),
      Num<S>("error_rate", &S::error_rate, 0, 1),
  };
  return kFields;
}

// steps: [10, 50, 100] — canary weights in %, each in (0, 100] and above the one before.
Status DecodeRolloutSteps(const YAML::Node& n, const std::string& path, RolloutSpec* out) {
  if (n.IsSequence() && n.size() == 0) return Bad(path, "at least one step is required");
  if (n.IsSequence() && n.size() > 100) return Bad(path, "at most 100 steps");
  ASSIGN_OR_RETURN(out->steps,
                   DecodeIncreasingNumbers(n, path, "canary weights", 0, 100, /*lo_open=*/true));
  return Status::Ok();
}

const Fields<RolloutGuards>& RolloutGuardFields() {
  using G = RolloutGuards;
  static const Fields<G> kFields = {
      Num<G>("ttft_p95_max_ratio", &G::ttft_p95_max_ratio, 0, 1000, /*lo_open=*/true),
      Num<G>("tpot_p95_max_ratio", &G::tpot_p95_max_ratio, 0, 1000, /*lo_open=*/true),
      Num<G>("latency_min_delta_s", &G::latency_min_delta_s, 0, 3600),
      Num<G>("error_rate_max_delta", &G::error_rate_max_delta, 0, 1),
  };
  return kFields;
}

const Fields<RolloutSpec>& RolloutFields() {
  using R = RolloutSpec;
  using std::chrono::seconds;
  static const Fields<R> kFields = {
      Enum<R>("strategy", &R::strategy, kStrategies, Choices::kEither),
      {"steps", DecodeRolloutSteps},
      Int<R>("min_requests", &R::min_requests, 1, 1'000'000),
      Duration<seconds, R>("min_duration_s", &R::min_duration, 0, 86400),
      Duration<seconds, R>("interval_s", &R::interval, 1, 3600),
      Sub("guards", &R::guards, RolloutGuardFields),
  };
  return kFields;
}

const Fields<PoolSpec>& PoolFields() {
  using P = PoolSpec;
  static const Fields<P> kFields = {
      Str<P>("name", &P::name),
      Str<P>("model", &P::model),
      Str<P>("version", &P::version),
      Sub("replicas", &P::replicas, BoundsFields),
      Sub("devices", &P::devices, NeedsFields),
      Sub("slo", &P::slo, SloFields),
      Enum<P>("workload", &P::workload, kWorkloads, Choices::kEither),
      {"serve", DecodeServe},
      {"serve_args", DecodeServeArgs},
      {"labels", DecodeLabels},
      Sub("rollout", &P::rollout, RolloutFields),  // checked here, merged in Validate
  };
  return kFields;
}

const Fields<AutoscalingSpec>& AutoscalingFields() {
  using A = AutoscalingSpec;
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  static const Fields<A> kFields = {
      Duration<seconds, A>("interval_s", &A::interval, 1, 3600),
      Num<A>("scale_up_max_factor", &A::scale_up_max_factor, 1, 100, /*lo_open=*/true),
      Duration<seconds, A>("scale_down_stabilization_s", &A::scale_down_stabilization, 0, 86400),
      Duration<seconds, A>("scale_to_zero_idle_s", &A::scale_to_zero_idle, 1, 7 * 86400),
      Duration<milliseconds, A>("cold_start_hold_ms", &A::cold_start_hold, 0, 600'000),
      Num<A>("hysteresis", &A::hysteresis, 0, 0.99),
      Num<A>("error_weight", &A::error_weight, 0, 1e9),
      Bool<A>("enabled", &A::enabled),
  };
  return kFields;
}

const Fields<PrometheusSpec>& PrometheusFields() {
  using P = PrometheusSpec;
  static const Fields<P> kFields = {
      Int<P>("port", &P::port, 0, 65535),
      Duration<std::chrono::seconds, P>("scrape_interval_s", &P::scrape_interval, 1, 3600),
      Str<P>("binary", &P::binary),
  };
  return kFields;
}

const Fields<DeploymentSpec>& MetadataFields() {
  static const Fields<DeploymentSpec> kFields = {
      Str<DeploymentSpec>("name", &DeploymentSpec::name)};
  return kFields;
}

const Fields<Document>& TopFields() {
  using D = Document;
  using S = DeploymentSpec;
  static const Fields<D> kFields = {
      Str<D>("apiVersion", &D::api_version),
      Str<D>("kind", &D::kind),
      Within(&D::spec, Field<S>{"metadata",
                                [](const YAML::Node& n, const std::string& path, S* out) {
                                  return DecodeSection(MetadataFields(), n, path, out);
                                }}),
      Within(&D::spec, SubList("models", &S::models, ModelFields)),
      Within(&D::spec, SubList("pools", &S::pools, PoolFields)),
      Within(&D::spec, Field<S>{"gateway", DecodeGateway}),
      Within(&D::spec, Sub("autoscaling", &S::autoscaling, AutoscalingFields)),
      Within(&D::spec, Sub("prometheus", &S::prometheus, PrometheusFields)),
      Within(&D::spec, Sub("rollout", &S::rollout, RolloutFields)),
  };
  return kFields;
}

// ---- cross-field checks ----

// A Kubernetes name part: 1..max of [a-z0-9-], starting and ending with a letter or digit.
Status CheckKubeName(const std::string& name, const std::string& path, size_t max) {
  if (name.empty()) return Bad(path, "is required");
  const bool ok = name.size() <= max && name.front() != '-' && name.back() != '-' &&
                  std::all_of(name.begin(), name.end(), [](unsigned char c) {
                    return std::islower(c) || std::isdigit(c) || c == '-';
                  });
  if (ok) return Status::Ok();
  return Bad(path, fmt::format("must be 1 to {} of [a-z0-9-], not starting or ending with '-' "
                               "(got \"{}\")",
                               max, name.size() > 80 ? name.substr(0, 80) + "..." : name));
}

// Model and version names (label values): 1..63 of [A-Za-z0-9._-].
Status CheckLabelValue(const std::string& name, const std::string& path) {
  if (name.empty()) return Bad(path, "is required");
  const bool ok = name.size() <= 63 && std::all_of(name.begin(), name.end(), [](unsigned char c) {
                    return std::isalnum(c) || c == '-' || c == '_' || c == '.';
                  });
  if (ok) return Status::Ok();
  return Bad(path, "must be 1 to 63 letters, digits, '-', '_' or '.'");
}

Status CheckModels(const DeploymentSpec& s) {
  if (s.models.empty()) return Bad("models", "at least one model is required");
  std::set<std::string> names;
  for (size_t i = 0; i < s.models.size(); ++i) {
    const ModelSpec& m = s.models[i];
    const std::string path = At("models", i);
    RETURN_IF_ERROR(CheckLabelValue(m.name, Join(path, "name")));
    if (!names.insert(m.name).second)
      return Bad(Join(path, "name"), "duplicate model '" + m.name + "'");
    if (m.versions.empty()) return Bad(Join(path, "versions"), "at least one version is required");
    std::set<std::string> versions;
    for (size_t v = 0; v < m.versions.size(); ++v) {
      const std::string vpath = At(Join(path, "versions"), v);
      RETURN_IF_ERROR(CheckLabelValue(m.versions[v].version, Join(vpath, "version")));
      if (!versions.insert(m.versions[v].version).second)
        return Bad(Join(vpath, "version"), "duplicate version '" + m.versions[v].version + "'");
      if (m.versions[v].path.empty()) return Bad(Join(vpath, "path"), "is required (a GGUF file)");
    }
  }
  return Status::Ok();
}

// Resolves the pool's model and version (a model with one version may leave `version` out).
Status CheckPool(const DeploymentSpec& s, PoolSpec* p, const std::string& path) {
  RETURN_IF_ERROR(CheckKubeName(p->name, Join(path, "name"), 40));
  if (p->model.empty()) return Bad(Join(path, "model"), "is required (a models[].name)");
  const ModelSpec* m = s.FindModel(p->model);
  if (m == nullptr) return Bad(Join(path, "model"), "no model named '" + p->model + "'");
  if (p->version.empty() && m->versions.size() == 1) p->version = m->versions.front().version;
  if (p->version.empty())
    return Bad(Join(path, "version"), fmt::format("is required (model '{}' has {} versions)",
                                                  m->name, m->versions.size()));
  if (m->Find(p->version) == nullptr)
    return Bad(Join(path, "version"),
               fmt::format("model '{}' has no version '{}'", m->name, p->version));
  if (p->replicas.max < 1) return Bad(Join(path, "replicas.max"), "must be >= 1");
  if (p->replicas.max < p->replicas.min)
    return Bad(Join(path, "replicas.max"),
               fmt::format("must be >= replicas.min ({} > {})", p->replicas.min, p->replicas.max));
  return Status::Ok();
}

// A single pool with no routes gets the default route to it.
void DefaultRoute(DeploymentSpec* s) {
  if (s->pools.size() != 1) return;
  if (!s->gateway.extra_yaml.empty()) {
    const YAML::Node extra = YAML::Load(s->gateway.extra_yaml);
    if (extra.IsMap() && extra["routes"]) return;
  }
  YAML::Emitter out;
  out << YAML::Block << YAML::BeginMap << YAML::Key << "routes" << YAML::Value << YAML::BeginSeq
      << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "default" << YAML::Key << "to"
      << YAML::Value << s->pools.front().name << YAML::EndMap << YAML::EndSeq << YAML::EndMap;
  if (!s->gateway.extra_yaml.empty()) s->gateway.extra_yaml += "\n";
  s->gateway.extra_yaml += out.c_str();
}

// Each pool's rollout: the top level's with the pool's own `rollout:` keys decoded over it (the
// pool's section was checked as it was decoded; document order does not matter).
Status MergeRollouts(const YAML::Node& root, DeploymentSpec* s) {
  const YAML::Node pools = root["pools"];
  for (size_t i = 0; i < s->pools.size(); ++i) {
    PoolSpec& p = s->pools[i];
    p.rollout = s->rollout;
    const YAML::Node own = pools && pools.IsSequence() && i < pools.size() && pools[i].IsMap()
                               ? pools[i]["rollout"]
                               : YAML::Node();
    if (own)
      RETURN_IF_ERROR(DecodeSection(RolloutFields(), own, At("pools", i) + ".rollout", &p.rollout));
  }
  return Status::Ok();
}

// A canary rollout needs a route to split: `to:` naming the pool alone.
Status CheckRollouts(const DeploymentSpec& s) {
  for (size_t i = 0; i < s.pools.size(); ++i) {
    const PoolSpec& p = s.pools[i];
    if (p.rollout.strategy != RolloutStrategy::kCanary) continue;
    ASSIGN_OR_RETURN(std::vector<std::string> routes, PlainRoutesTo(s, p.name));
    if (routes.empty())
      return Bad(At("pools", i) + ".rollout.strategy",
                 fmt::format("canary needs a route in gateway.routes whose to: is pool '{}' "
                             "alone (none is; use strategy: surge)",
                             p.name));
  }
  return Status::Ok();
}

Status Validate(Document* d) {
  if (d->api_version != kApiVersion)
    return Bad("apiVersion",
               fmt::format("must be {} (got \"{}\")", kApiVersion, d->api_version.substr(0, 80)));
  if (d->kind != "Deployment")
    return Bad("kind", fmt::format("must be Deployment (got \"{}\")", d->kind.substr(0, 80)));
  DeploymentSpec& s = d->spec;
  RETURN_IF_ERROR(CheckKubeName(s.name, "metadata.name", 40));
  RETURN_IF_ERROR(CheckModels(s));
  if (s.pools.empty()) return Bad("pools", "at least one pool is required");
  std::set<std::string> names;
  for (size_t i = 0; i < s.pools.size(); ++i) {
    RETURN_IF_ERROR(CheckPool(s, &s.pools[i], At("pools", i)));
    if (!names.insert(s.pools[i].name).second)
      return Bad(At("pools", i) + ".name", "duplicate pool '" + s.pools[i].name + "'");
  }
  if (s.prometheus.binary.empty()) return Bad("prometheus.binary", "is required");
  DefaultRoute(&s);
  RETURN_IF_ERROR(CheckGatewaySection(s));
  return CheckRollouts(s);
}

}  // namespace

std::string_view WorkloadName(Workload w) { return EnumName(w, kWorkloads); }

std::string_view RolloutStrategyName(RolloutStrategy s) { return EnumName(s, kStrategies, "auto"); }

const ModelVersion* ModelSpec::Find(std::string_view v) const {
  return FindBy(versions, &ModelVersion::version, v);
}

const ModelSpec* DeploymentSpec::FindModel(std::string_view n) const {
  return FindBy(models, &ModelSpec::name, n);
}

const PoolSpec* DeploymentSpec::FindPool(std::string_view n) const {
  return FindBy(pools, &PoolSpec::name, n);
}

std::string DeploymentSpec::ModelPath(const PoolSpec& pool) const {
  const ModelSpec* m = FindModel(pool.model);
  const ModelVersion* v = m == nullptr ? nullptr : m->Find(pool.version);
  if (v == nullptr) return "";
  const std::filesystem::path p(v->path);
  if (p.is_absolute() || base_dir.empty()) return p.lexically_normal().string();
  return (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

Result<DeploymentSpec> ParseDeploymentSpec(std::string_view yaml_text, std::string base_dir) {
  Document d;
  RETURN_IF_ERROR(DecodeDocument(yaml_text, kDocument, [&](const YAML::Node& root) -> Status {
    if (!root.IsMap()) return Bad("", "expected a mapping (apiVersion, kind, metadata, ...)");
    RETURN_IF_ERROR(DecodeSection(TopFields(), root, "", &d));
    RETURN_IF_ERROR(MergeRollouts(root, &d.spec));
    return Validate(&d);
  }));
  d.spec.base_dir = std::move(base_dir);
  return std::move(d.spec);
}

Result<DeploymentSpec> LoadDeploymentSpec(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadDocumentFile(path, kDocument));
  // The folder absolute, so model paths stay right in children started in another folder.
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::absolute(path, ec).parent_path();
  if (ec) dir = std::filesystem::path(path).parent_path();
  auto spec = ParseDeploymentSpec(text, dir.empty() ? std::string(".") : dir.string());
  if (!spec.ok()) return spec.status().WithContext(path);
  return spec;
}

}  // namespace strata::control
