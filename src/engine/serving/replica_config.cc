// The ReplicaConfig YAML codec and validation: one table per section, one row per key, each row a
// few small functions (decode a node, encode the value, check its range) built from member
// pointers. Decoding, printing, validating and the list of key paths all walk the same tables, so
// a key added to a table is parsed, printed, validated and documented-checked at once. Decoding is
// yamlcfg's (yamlcfg/yaml_decode.h: the scalar decoders, the section walk that refuses unknown and
// duplicate keys, the document's bounds and yaml-cpp's exceptions); this file adds the printing,
// the checks with their flags and the key paths.
#include "engine/serving/replica_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <type_traits>

#include "base/memory_size.h"
#include "tokenizer/chat/builtin_templates.h"
#include "yamlcfg/yaml_decode.h"

namespace strata::engine::serving {
namespace {

using yamlcfg::Bad;
using yamlcfg::DecodeSection;
using yamlcfg::Join;

// A replica config is a few KiB; the bound keeps yaml-cpp's node tree of hostile input small (a
// 1 MiB list of one-character items costs it ~250 MiB; 64 KiB, ~16 MiB). No node budget: the
// decoder follows the tables, so an alias is walked only where a key expects a section.
constexpr yamlcfg::DocumentKind kDocument{.max_bytes = 64 << 10, .max_bytes_text = "64 KiB"};

// ---- range checks: "" when the value is fine, else what is wrong ----

template <typename V>
using Check = std::function<std::string(const V&)>;

template <typename V>
Check<V> InRange(V lo, V hi) {
  return [lo, hi](const V& v) {
    return v >= lo && v <= hi ? std::string()
                              : fmt::format("must be in [{}, {}], got {}", lo, hi, v);
  };
}

// ---- value codecs: YAML node <-> one C++ value (decoding is yamlcfg's) ----

template <typename V>
struct Codec {
  std::function<Result<V>(const YAML::Node& n, const std::string& path)> decode;
  void (*encode)(const V& v, YAML::Emitter& out);
  Check<V> check;  // none: any value of the type
};

template <typename V>
void EncodeInt(const V& v, YAML::Emitter& out) {
  out << static_cast<long long>(v);
}
// An integer in [lo, hi].
template <typename V>
Codec<V> IntIn(V lo, V hi) {
  return {[lo, hi](const YAML::Node& n, const std::string& path) -> Result<V> {
            ASSIGN_OR_RETURN(int64_t v, yamlcfg::DecodeInt(n, path, static_cast<int64_t>(lo),
                                                           static_cast<int64_t>(hi)));
            return static_cast<V>(v);
          },
          EncodeInt<V>, InRange(lo, hi)};
}

void EncodeDouble(const double& v, YAML::Emitter& out) { out << fmt::format("{}", v); }
// A finite number in [lo, hi].
Codec<double> NumIn(double lo, double hi) {
  return {[lo, hi](const YAML::Node& n, const std::string& path) {
            return yamlcfg::DecodeNumber(n, path, lo, hi);
          },
          EncodeDouble, InRange(lo, hi)};
}

void EncodeBool(const bool& v, YAML::Emitter& out) { out << (v ? "true" : "false"); }
const Codec<bool> kBool{yamlcfg::DecodeBool, EncodeBool, {}};

void EncodeString(const std::string& v, YAML::Emitter& out) { out << YAML::DoubleQuoted << v; }
const Codec<std::string> kString{yamlcfg::DecodeString, EncodeString, {}};

void EncodeStringList(const std::vector<std::string>& v, YAML::Emitter& out) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const auto& s : v) out << YAML::DoubleQuoted << s;
  out << YAML::EndSeq;
}
const Codec<std::vector<std::string>> kStringList{yamlcfg::DecodeStringList, EncodeStringList, {}};

// A byte size (yamlcfg::DecodeSize); 0 is written `0`.
void EncodeSize(const uint64_t& v, YAML::Emitter& out) {
  out << (v == 0 ? std::string("0") : FormatMemorySize(v));
}
const Codec<uint64_t> kSize{yamlcfg::DecodeSize, EncodeSize, {}};

using Quotas = std::vector<std::pair<std::string, uint64_t>>;
Result<Quotas> DecodeQuotas(const YAML::Node& n, const std::string& path) {
  return yamlcfg::DecodePairs<uint64_t>(n, path, "tenant: size", yamlcfg::DecodeSize);
}
void EncodeQuotas(const Quotas& v, YAML::Emitter& out) {
  out << YAML::Flow << YAML::BeginMap;
  for (const auto& [tenant, q] : v) {
    out << YAML::Key << YAML::DoubleQuoted << tenant << YAML::Value;
    EncodeSize(q, out);
  }
  out << YAML::EndMap;
}
const Codec<Quotas> kQuotas{DecodeQuotas, EncodeQuotas, {}};

// Enumerations by name.
constexpr yamlcfg::EnumEntry<kv::KvDType> kKvDTypes[] = {
    {"f16", kv::KvDType::kF16}, {"f32", kv::KvDType::kF32}, {"q8_0", kv::KvDType::kQ8_0}};
constexpr yamlcfg::EnumEntry<kvtier::Compression> kCompressions[] = {
    {"none", kvtier::Compression::kNone},
    {"lz4", kvtier::Compression::kLz4},
    {"zstd", kvtier::Compression::kZstd}};

template <const auto& kNames>
auto EnumOf() {
  using E = std::remove_cvref_t<decltype(kNames[0].second)>;
  return Codec<E>{
      [](const YAML::Node& n, const std::string& path) {
        return yamlcfg::DecodeEnum(n, path, kNames);
      },
      [](const E& v, YAML::Emitter& out) { out << std::string(yamlcfg::EnumName(v, kNames)); },
      {}};
}

// ---- checks of string values ----

// "" or the name of a built-in chat template (tokenizer/chat/builtin_templates.h).
Check<std::string> BuiltinTemplateName() {
  return [](const std::string& v) {
    if (v.empty() || tokenizer::chat::FindBuiltinTemplate(v) != nullptr) return std::string();
    return fmt::format("unknown built-in chat template '{}' (one of: {})", v,
                       tokenizer::chat::BuiltinTemplateNames());
  };
}

Check<std::string> OneOf(std::vector<std::string> allowed) {
  return [allowed = std::move(allowed)](const std::string& v) {
    if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return std::string();
    std::string list;
    for (const std::string& a : allowed) list += (list.empty() ? "\"" : ", \"") + a + "\"";
    return fmt::format("must be one of {}, got \"{}\"", list, v);
  };
}

Check<std::string> MemorySize() {
  return [](const std::string& v) {
    auto r = ParseMemorySize(v);
    return r.ok() ? std::string() : std::string(r.status().message());
  };
}

// ---- keys and sections ----

// One key of a section of type S: a leaf value or a nested section.
template <typename S>
struct Key {
  std::string_view name;
  // Sets *s from `n` (`path` is this key's full path, for errors).
  std::function<Status(const YAML::Node& n, const std::string& path, S* s)> decode;
  // Writes the value (the emitter is positioned after the key).
  std::function<void(const S& s, YAML::Emitter& out)> encode;
  // Checks the value; errors name `path`, and the key's flag when `with_flags`.
  std::function<Status(const S& s, const std::string& path, bool with_flags)> check;
  // Appends the leaf paths under `path`.
  std::function<void(const std::string& path, std::vector<std::string>* out)> paths;
  // Whether the key is printed (an absent optional section is not).
  std::function<bool(const S& s)> present = [](const S&) { return true; };
};

template <typename S>
using Section = std::vector<Key<S>>;

template <typename S>
void EncodeSection(const Section<S>& keys, const S& s, YAML::Emitter& out) {
  out << YAML::BeginMap;
  for (const auto& k : keys) {
    if (!k.present(s)) continue;
    out << YAML::Key << std::string(k.name) << YAML::Value;
    k.encode(s, out);
  }
  out << YAML::EndMap;
}

template <typename S>
Status CheckSection(const Section<S>& keys, const S& s, const std::string& path, bool with_flags) {
  for (const auto& k : keys) {
    if (k.present(s)) RETURN_IF_ERROR(k.check(s, Join(path, k.name), with_flags));
  }
  return Status::Ok();
}

template <typename S>
void SectionPaths(const Section<S>& keys, const std::string& path, std::vector<std::string>* out) {
  for (const auto& k : keys) k.paths(Join(path, k.name), out);
}

// A leaf: S::*m decoded with `codec`, checked with `check` (none: the codec's own check).
template <typename S, typename V>
Key<S> Leaf(std::string_view name, std::string_view flag, V S::*m, Codec<V> codec,
            Check<V> check = {}) {
  Key<S> k;
  k.name = name;
  if (!check) check = codec.check;
  auto checked = [check, flag](const V& v, const std::string& path, bool with_flags) {
    const std::string what = check ? check(v) : std::string();
    if (what.empty()) return Status::Ok();
    return Bad(with_flags && !flag.empty() ? path + " (" + std::string(flag) + ")" : path, what);
  };
  k.decode = [m, codec, checked](const YAML::Node& n, const std::string& path, S* s) {
    ASSIGN_OR_RETURN(V v, codec.decode(n, path));
    RETURN_IF_ERROR(checked(v, path, false));
    s->*m = std::move(v);
    return Status::Ok();
  };
  k.encode = [m, codec](const S& s, YAML::Emitter& out) { codec.encode(s.*m, out); };
  k.check = [m, checked](const S& s, const std::string& path, bool with_flags) {
    return checked(s.*m, path, with_flags);
  };
  k.paths = [](const std::string& path, std::vector<std::string>* out) { out->push_back(path); };
  return k;
}

// A nested section T at S::*m.
template <typename S, typename T>
Key<S> Sub(std::string_view name, T S::*m, const Section<T>& keys) {
  Key<S> k;
  k.name = name;
  k.decode = [m, &keys](const YAML::Node& n, const std::string& path, S* s) {
    return DecodeSection(keys, n, path, &(s->*m));
  };
  k.encode = [m, &keys](const S& s, YAML::Emitter& out) { EncodeSection(keys, s.*m, out); };
  k.check = [m, &keys](const S& s, const std::string& path, bool with_flags) {
    return CheckSection(keys, s.*m, path, with_flags);
  };
  k.paths = [&keys](const std::string& path, std::vector<std::string>* out) {
    SectionPaths(keys, path, out);
  };
  return k;
}

// An optional section: present in the YAML (even empty) means enabled.
template <typename S, typename T>
Key<S> OptionalSub(std::string_view name, std::optional<T> S::*m, const Section<T>& keys) {
  Key<S> k;
  k.name = name;
  k.decode = [m, &keys](const YAML::Node& n, const std::string& path, S* s) {
    if (!(s->*m)) (s->*m).emplace();
    return DecodeSection(keys, n, path, &*(s->*m));
  };
  k.encode = [m, &keys](const S& s, YAML::Emitter& out) { EncodeSection(keys, *(s.*m), out); };
  k.check = [m, &keys](const S& s, const std::string& path, bool with_flags) {
    return CheckSection(keys, *(s.*m), path, with_flags);
  };
  k.paths = [&keys](const std::string& path, std::vector<std::string>* out) {
    SectionPaths(keys, path, out);
  };
  k.present = [m](const S& s) { return (s.*m).has_value(); };
  return k;
}

// The keys of T::*m's section spliced into S's own (the tiers' limits sit beside their other keys).
template <typename S, typename T>
Section<S> Inline(T S::*m, const Section<T>& keys) {
  Section<S> out;
  for (const Key<T>& inner : keys) {
    Key<S> k;
    k.name = inner.name;
    k.decode = [m, inner](const YAML::Node& n, const std::string& path, S* s) {
      return inner.decode(n, path, &(s->*m));
    };
    k.encode = [m, inner](const S& s, YAML::Emitter& o) { inner.encode(s.*m, o); };
    k.check = [m, inner](const S& s, const std::string& path, bool with_flags) {
      return inner.check(s.*m, path, with_flags);
    };
    k.paths = inner.paths;
    out.push_back(std::move(k));
  }
  return out;
}

template <typename S>
Section<S> Concat(Section<S> a, const Section<S>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ---- the tree ----

constexpr double kMaxSeconds = 1e6;
constexpr int kMaxLoraRank = 1024;
constexpr int kMaxCpuLoras = 1 << 16;

const Section<ModelFileConfig>& ModelKeys() {
  using M = ModelFileConfig;
  static const Section<M> kKeys = {
      Leaf<M>("path", "--model", &M::path, kString),
      Leaf<M>("served_model_name", "--served-model-name", &M::served_model_name, kString),
      Leaf<M>("chat_template_file", "--chat-template-file", &M::chat_template_file, kString),
      Leaf<M>("chat_template", "--chat-template", &M::chat_template, kString,
              BuiltinTemplateName()),
  };
  return kKeys;
}

const Section<ServerConfig>& ServerKeys() {
  using S = ServerConfig;
  static const Section<S> kKeys = {
      Leaf<S>("host", "--host", &S::host, kString),
      Leaf<S>("port", "--port", &S::port, IntIn<int>(0, 65535)),
      Leaf<S>("api_keys", "--api-key", &S::api_keys, kStringList),
      Leaf<S>("api_key_file", "--api-key-file", &S::api_key_file, kString),
      Leaf<S>("io_threads", "--io-threads", &S::io_threads, IntIn<int>(1, 256)),
      Leaf<S>("max_body_bytes", "--max-body-bytes", &S::max_body_bytes,
              IntIn<uint64_t>(1, uint64_t{1} << 30)),
      Leaf<S>("max_header_bytes", "", &S::max_header_bytes, IntIn<uint32_t>(1024, 1u << 20)),
      Leaf<S>("max_connections", "", &S::max_connections, IntIn<int>(1, 1 << 20)),
      Leaf<S>("idle_timeout_s", "--idle-timeout", &S::idle_timeout_s, NumIn(0.0, kMaxSeconds)),
      Leaf<S>("request_timeout_s", "--request-timeout", &S::request_timeout_s,
              NumIn(0.0, kMaxSeconds)),
      Leaf<S>("shutdown_timeout_s", "--shutdown-timeout", &S::shutdown_timeout_s,
              NumIn(0.0, kMaxSeconds)),
      Leaf<S>("max_tokens_cap", "--max-tokens-cap", &S::max_tokens_cap, IntIn<int>(1, 1 << 24)),
      Leaf<S>("retry_after_s", "", &S::retry_after_s, IntIn<int>(0, 3600)),
      Leaf<S>("metrics_compat", "--metrics-compat", &S::metrics_compat, kString,
              OneOf({"", "vllm"})),
  };
  return kKeys;
}

const Section<TracingConfig>& TracingKeys() {
  using T = TracingConfig;
  static const Section<T> kKeys = {
      Leaf<T>("otlp_endpoint", "--otlp-endpoint", &T::otlp_endpoint, kString),
      Leaf<T>("sample_ratio", "--otlp-sample-ratio", &T::sample_ratio, NumIn(0.0, 1.0)),
      Leaf<T>("service_name", "--otlp-service-name", &T::service_name, kString),
  };
  return kKeys;
}

const Section<KvCacheConfig>& KvCacheKeys() {
  using K = KvCacheConfig;
  static const Section<K> kKeys = {
      Leaf<K>("memory", "--kv-cache-memory", &K::memory, kString, MemorySize()),
      Leaf<K>("dtype", "--kv-dtype", &K::dtype, EnumOf<kKvDTypes>()),
      Leaf<K>("block_size", "--block-size", &K::block_size, IntIn<int>(1, 1024)),
      Leaf<K>("prefix_cache", "--no-prefix-cache", &K::prefix_cache, kBool),
  };
  return kKeys;
}

const Section<sched::SchedulerConfig>& SchedulerKeys() {
  using C = sched::SchedulerConfig;
  static const Section<C> kKeys = {
      Leaf<C>("max_num_seqs", "--max-num-seqs", &C::max_num_seqs, IntIn<int>(1, 1024)),
      Leaf<C>("max_batched_tokens", "--max-batched-tokens", &C::max_batched_tokens,
              IntIn<int>(1, 1 << 20)),
      Leaf<C>("max_prefill_tokens_with_decodes", "--max-prefill-tokens-with-decodes",
              &C::max_prefill_tokens_with_decodes, IntIn<int>(0, 1 << 20)),
      Leaf<C>("max_queued_requests", "--max-queued-requests", &C::max_queued_requests,
              IntIn<int>(1, 1 << 20)),
      Leaf<C>("max_queued_prompt_tokens", "", &C::max_queued_prompt_tokens,
              IntIn<int64_t>(1, int64_t{1} << 40)),
      Leaf<C>("aging_s", "", &C::aging_s, NumIn(0.0, kMaxSeconds)),
  };
  return kKeys;
}

const Section<LoraConfig>& LoraKeys() {
  using L = LoraConfig;
  static const Section<L> kKeys = {
      Leaf<L>("max_loras", "--max-loras", &L::max_loras,
              IntIn<int>(1, sched::SchedulerConfig::kMaxLoras)),
      Leaf<L>("max_lora_rank", "--max-lora-rank", &L::max_lora_rank, IntIn<int>(1, kMaxLoraRank)),
      Leaf<L>("max_cpu_loras", "--max-cpu-loras", &L::max_cpu_loras, IntIn<int>(0, kMaxCpuLoras)),
  };
  return kKeys;
}

const Section<kvtier::TierLimits>& LimitKeys() {
  using L = kvtier::TierLimits;
  static const Section<L> kKeys = {
      Leaf<L>("capacity", "", &L::capacity_bytes, kSize),
      Leaf<L>("ttl_s", "", &L::ttl_s, NumIn(0.0, 1e9)),
      Leaf<L>("tenant_quota", "", &L::tenant_quota_bytes, kQuotas),
      Leaf<L>("default_tenant_quota", "", &L::default_tenant_quota_bytes, kSize),
  };
  return kKeys;
}

const Section<kvtier::RamTierConfig>& RamKeys() {
  using R = kvtier::RamTierConfig;
  static const Section<R> kKeys = Inline(&R::limits, LimitKeys());
  return kKeys;
}

const Section<kvtier::DiskTierConfig>& DiskKeys() {
  using D = kvtier::DiskTierConfig;
  static const Section<D> kKeys =
      Concat<D>(Concat<D>({Leaf<D>("dir", "--kv-tier-disk", &D::dir, kString)},
                          Inline(&D::limits, LimitKeys())),
                {Leaf<D>("write_through", "", &D::write_through, kBool),
                 Leaf<D>("fsync", "", &D::fsync, kBool)});
  return kKeys;
}

const Section<kvtier::RedisTierConfig>& RedisKeys() {
  using R = kvtier::RedisTierConfig;
  // No capacity: Redis's own maxmemory policy bounds it.
  static const Section<R> kLimits = [] {
    Section<R> out;
    for (Key<R>& k : Inline(&R::limits, LimitKeys())) {
      if (k.name != "capacity") out.push_back(std::move(k));
    }
    return out;
  }();
  static const Section<R> kKeys = Concat<R>(
      Concat<R>({Leaf<R>("url", "--kv-tier-redis", &R::url, kString),
                 Leaf<R>("key_prefix", "", &R::key_prefix, kString)},
                kLimits),
      {Leaf<R>("write_through", "--kv-tier-redis-write-through", &R::write_through, kBool),
       Leaf<R>("timeout_s", "", &R::timeout_s, NumIn(0.0, 60.0))});
  return kKeys;
}

const Section<kvtier::TieredKvConfig>& TierKeys() {
  using T = kvtier::TieredKvConfig;
  static const Section<T> kKeys = {
      OptionalSub<T>("ram", &T::ram, RamKeys()),
      OptionalSub<T>("disk", &T::disk, DiskKeys()),
      OptionalSub<T>("redis", &T::redis, RedisKeys()),
      Leaf<T>("compression", "--kv-tier-compression", &T::compression, EnumOf<kCompressions>()),
      Leaf<T>("max_queued_writes", "", &T::max_queued_writes, IntIn<size_t>(1, size_t{1} << 20)),
      Leaf<T>("io_threads", "", &T::io_threads, IntIn<int>(1, 64)),
  };
  return kKeys;
}

const Section<ServingConfig>& EngineKeys() {
  using E = ServingConfig;
  static const Section<E> kKeys = {
      Leaf<E>("threads", "--threads", &E::threads, IntIn<int>(0, 1024)),
      Leaf<E>("max_model_len", "--max-model-len", &E::max_model_len, IntIn<int>(0, 1 << 24)),
      Leaf<E>("kv_tier_prefetch_timeout_s", "--kv-tier-prefetch-timeout",
              &E::kv_tier_prefetch_timeout_s, NumIn(0.0, 3600.0)),
      Sub<E>("kv_cache", &E::kv_cache, KvCacheKeys()),
      Sub<E>("scheduler", &E::scheduler, SchedulerKeys()),
      Sub<E>("lora", &E::lora, LoraKeys()),
      Sub<E>("kv_tiers", &E::kv_tiers, TierKeys()),
  };
  return kKeys;
}

const Section<ReplicaConfig>& ReplicaKeys() {
  using R = ReplicaConfig;
  static const Section<R> kKeys = {
      Sub<R>("model", &R::model, ModelKeys()),
      Sub<R>("server", &R::server, ServerKeys()),
      Sub<R>("engine", &R::engine, EngineKeys()),
      Sub<R>("tracing", &R::tracing, TracingKeys()),
  };
  return kKeys;
}

// Validates the tier section on its own (its messages name keys relative to it).
Status ValidateTiers(const kvtier::TieredKvConfig& t, const std::string& path) {
  if (!t.enabled()) return Status::Ok();
  Status s = t.Validate();
  return path.empty() ? s : s.WithContext(path);
}

// Parses `text` into *out (the document's bounds and yaml-cpp's exceptions are yamlcfg's).
template <typename S>
Status DecodeText(std::string_view text, const Section<S>& keys, S* out) {
  return yamlcfg::DecodeDocument(
      text, kDocument, [&](const YAML::Node& root) { return DecodeSection(keys, root, "", out); });
}

}  // namespace

Status ServingConfig::Validate() const {
  RETURN_IF_ERROR(CheckSection(EngineKeys(), *this, "engine", /*with_flags=*/true));
  if (lora.max_cpu_loras != 0 && lora.max_cpu_loras < lora.max_loras) {
    return Status::InvalidArgument(fmt::format(
        "engine.lora.max_cpu_loras (--max-cpu-loras): must be 0 (unbounded) or at least "
        "engine.lora.max_loras (--max-loras, {}), got {}",
        lora.max_loras, lora.max_cpu_loras));
  }
  if (kv_tiers.enabled() && !kv_cache.prefix_cache) {
    return Status::InvalidArgument(
        "engine.kv_tiers: KV tiers need the prefix cache (set engine.kv_cache.prefix_cache: true, "
        "drop --no-prefix-cache)");
  }
  return ValidateTiers(kv_tiers, "engine.kv_tiers");
}

Status ReplicaConfig::Validate() const {
  RETURN_IF_ERROR(CheckSection(ModelKeys(), model, "model", /*with_flags=*/true));
  if (!model.chat_template.empty() && !model.chat_template_file.empty())
    return Status::InvalidArgument(
        "model.chat_template (--chat-template) and model.chat_template_file "
        "(--chat-template-file): set one of them, not both");
  RETURN_IF_ERROR(CheckSection(ServerKeys(), server, "server", /*with_flags=*/true));
  RETURN_IF_ERROR(CheckSection(TracingKeys(), tracing, "tracing", /*with_flags=*/true));
  return engine.Validate();
}

Result<ReplicaConfig> ParseReplicaConfigYaml(std::string_view yaml_text) {
  ReplicaConfig c;
  RETURN_IF_ERROR(DecodeText(yaml_text, ReplicaKeys(), &c));
  RETURN_IF_ERROR(c.Validate());
  return c;
}

Result<ReplicaConfig> LoadReplicaConfigFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, yamlcfg::ReadDocumentFile(path, kDocument));
  auto c = ParseReplicaConfigYaml(text);
  if (!c.ok()) return c.status().WithContext(path);
  return c;
}

std::string ReplicaConfigToYaml(const ReplicaConfig& config) {
  YAML::Emitter out;
  out.SetIndent(2);
  EncodeSection(ReplicaKeys(), config, out);
  return std::string(out.c_str()) + "\n";
}

Result<kvtier::TieredKvConfig> ParseKvTiersYaml(std::string_view yaml_text) {
  kvtier::TieredKvConfig c;
  Status s = DecodeText(yaml_text, TierKeys(), &c);
  if (s.ok()) s = ValidateTiers(c, "");
  if (!s.ok()) return s.WithContext("kv tiers config");
  return c;
}

Result<kvtier::TieredKvConfig> LoadKvTiersFile(const std::string& path) {
  auto text = yamlcfg::ReadDocumentFile(path, kDocument);
  if (!text.ok()) return text.status().WithContext("kv tiers config");
  auto c = ParseKvTiersYaml(*text);
  if (!c.ok()) return c.status().WithContext(path);
  return c;
}

std::vector<std::string> ReplicaConfigKeyPaths() {
  std::vector<std::string> out;
  SectionPaths(ReplicaKeys(), "", &out);
  return out;
}

}  // namespace strata::engine::serving
