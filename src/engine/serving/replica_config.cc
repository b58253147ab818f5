// The ReplicaConfig YAML codec and validation: one table per section, one row per key, each row a
// few small functions (decode a node, encode the value, check its range) built from member
// pointers. Decoding, printing, validating and the list of key paths all walk the same tables, so
// a key added to a table is parsed, printed, validated and documented-checked at once.
// yaml-cpp throws; every exception is caught at the two entry points below.
#include "engine/serving/replica_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <type_traits>

#include "base/memory_size.h"
#include "tokenizer/chat/builtin_templates.h"
#include "yamlcfg/yaml_decode.h"

namespace strata::engine::serving {
namespace {

// A replica config is a few KiB; the bound keeps yaml-cpp's node tree of hostile input small (a
// 1 MiB list of one-character items costs it ~250 MiB; 64 KiB, ~16 MiB).
constexpr size_t kMaxYamlBytes = 64 << 10;

Status Bad(const std::string& path, std::string_view what) {
  return Status::InvalidArgument((path.empty() ? std::string("(top level)") : path) + ": " +
                                 std::string(what));
}

std::string Join(const std::string& prefix, std::string_view name) {
  return prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
}

// ---- value codecs: YAML node <-> one C++ value ----

template <typename V>
struct Codec {
  Result<V> (*decode)(const YAML::Node& n, const std::string& path);
  void (*encode)(const V& v, YAML::Emitter& out);
};

template <typename V>
Result<V> DecodeInt(const YAML::Node& n, const std::string& path) {
  long long v = 0;
  if (!n.IsScalar() || !YAML::convert<long long>::decode(n, v))
    return Bad(path, "expected an integer");
  bool fits = false;
  if constexpr (std::is_signed_v<V>) {
    fits = v >= static_cast<long long>(std::numeric_limits<V>::min()) &&
           v <= static_cast<long long>(std::numeric_limits<V>::max());
  } else {
    fits = v >= 0 && static_cast<unsigned long long>(v) <= std::numeric_limits<V>::max();
  }
  if (!fits) return Bad(path, "integer out of range");
  return static_cast<V>(v);
}
template <typename V>
void EncodeInt(const V& v, YAML::Emitter& out) {
  out << static_cast<long long>(v);
}
template <typename V>
constexpr Codec<V> kInt{DecodeInt<V>, EncodeInt<V>};

Result<double> DecodeDouble(const YAML::Node& n, const std::string& path) {
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v)) {
    return Bad(path, "expected a number");
  }
  return v;
}
void EncodeDouble(const double& v, YAML::Emitter& out) { out << fmt::format("{}", v); }
constexpr Codec<double> kDouble{DecodeDouble, EncodeDouble};

Result<bool> DecodeBool(const YAML::Node& n, const std::string& path) {
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v))
    return Bad(path, "expected true or false");
  return v;
}
void EncodeBool(const bool& v, YAML::Emitter& out) { out << (v ? "true" : "false"); }
constexpr Codec<bool> kBool{DecodeBool, EncodeBool};

// A missing value (`key:`) is the empty string.
Result<std::string> DecodeString(const YAML::Node& n, const std::string& path) {
  if (n.IsNull()) return std::string();
  if (!n.IsScalar()) return Bad(path, "expected a string");
  return n.Scalar();
}
void EncodeString(const std::string& v, YAML::Emitter& out) { out << YAML::DoubleQuoted << v; }
constexpr Codec<std::string> kString{DecodeString, EncodeString};

Result<std::vector<std::string>> DecodeStringList(const YAML::Node& n, const std::string& path) {
  std::vector<std::string> v;
  if (n.IsNull()) return v;
  if (!n.IsSequence()) return Bad(path, "expected a list of strings");
  for (size_t i = 0; i < n.size(); ++i) {
    if (!n[i].IsScalar()) return Bad(fmt::format("{}[{}]", path, i), "expected a string");
    v.push_back(n[i].Scalar());
  }
  return v;
}
void EncodeStringList(const std::vector<std::string>& v, YAML::Emitter& out) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const auto& s : v) out << YAML::DoubleQuoted << s;
  out << YAML::EndSeq;
}
constexpr Codec<std::vector<std::string>> kStringList{DecodeStringList, EncodeStringList};

// A byte size in ParseMemorySize syntax ("2GiB", "500MB", "0.25" of RAM); 0 is written `0`.
Result<uint64_t> DecodeSize(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) return Bad(path, "expected a size such as 2GiB");
  if (n.Scalar() == "0") return uint64_t{0};
  auto v = ParseMemorySize(n.Scalar());
  if (!v.ok()) return Bad(path, v.status().message());
  return *v;
}
void EncodeSize(const uint64_t& v, YAML::Emitter& out) {
  out << (v == 0 ? std::string("0") : FormatMemorySize(v));
}
constexpr Codec<uint64_t> kSize{DecodeSize, EncodeSize};

Result<std::vector<std::pair<std::string, uint64_t>>> DecodeQuotas(const YAML::Node& n,
                                                                   const std::string& path) {
  std::vector<std::pair<std::string, uint64_t>> v;
  if (n.IsNull()) return v;
  if (!n.IsMap()) return Bad(path, "expected a mapping tenant: size");
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) return Bad(path, "tenant names must be strings");
    const std::string tenant = kv.first.Scalar();
    ASSIGN_OR_RETURN(uint64_t q, DecodeSize(kv.second, Join(path, tenant)));
    v.emplace_back(tenant, q);
  }
  return v;
}
void EncodeQuotas(const std::vector<std::pair<std::string, uint64_t>>& v, YAML::Emitter& out) {
  out << YAML::Flow << YAML::BeginMap;
  for (const auto& [tenant, q] : v) {
    out << YAML::Key << YAML::DoubleQuoted << tenant << YAML::Value;
    EncodeSize(q, out);
  }
  out << YAML::EndMap;
}
constexpr Codec<std::vector<std::pair<std::string, uint64_t>>> kQuotas{DecodeQuotas, EncodeQuotas};

// Enumerations by name.
template <typename E>
struct EnumName {
  std::string_view name;
  E value;
};
constexpr EnumName<kv::KvDType> kKvDTypes[] = {
    {"f16", kv::KvDType::kF16}, {"f32", kv::KvDType::kF32}, {"q8_0", kv::KvDType::kQ8_0}};
constexpr EnumName<kvtier::Compression> kCompressions[] = {{"none", kvtier::Compression::kNone},
                                                           {"lz4", kvtier::Compression::kLz4},
                                                           {"zstd", kvtier::Compression::kZstd}};

template <typename E, const auto& kNames>
Result<E> DecodeEnum(const YAML::Node& n, const std::string& path) {
  std::string expected;
  for (const auto& e : kNames) expected += (expected.empty() ? "" : ", ") + std::string(e.name);
  if (n.IsScalar()) {
    for (const auto& e : kNames) {
      if (n.Scalar() == e.name) return e.value;
    }
    return Bad(path, "expected one of " + expected + " (got \"" + n.Scalar() + "\")");
  }
  return Bad(path, "expected one of " + expected);
}
template <typename E, const auto& kNames>
void EncodeEnum(const E& v, YAML::Emitter& out) {
  for (const auto& e : kNames) {
    if (e.value == v) out << std::string(e.name);
  }
}
constexpr Codec<kv::KvDType> kKvDType{DecodeEnum<kv::KvDType, kKvDTypes>,
                                      EncodeEnum<kv::KvDType, kKvDTypes>};
constexpr Codec<kvtier::Compression> kCompression{DecodeEnum<kvtier::Compression, kCompressions>,
                                                  EncodeEnum<kvtier::Compression, kCompressions>};

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
Status DecodeSection(const Section<S>& keys, const YAML::Node& node, const std::string& path,
                     S* s) {
  if (node.IsNull()) return Status::Ok();
  if (!node.IsMap()) return Bad(path, "expected a mapping");
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) return Bad(path, "keys must be strings");
    const std::string name = kv.first.Scalar();
    auto it =
        std::find_if(keys.begin(), keys.end(), [&](const Key<S>& k) { return k.name == name; });
    if (it == keys.end()) {
      std::vector<std::string_view> known;
      for (const auto& k : keys) known.push_back(k.name);
      return Bad(Join(path, name), "unknown key" + yamlcfg::Suggest(name, known));
    }
    RETURN_IF_ERROR(it->decode(kv.second, Join(path, name), s));
  }
  return Status::Ok();
}

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

// A leaf: S::*m decoded with `codec`, checked with `check` (none: any value of the type).
template <typename S, typename V>
Key<S> Leaf(std::string_view name, std::string_view flag, V S::*m, Codec<V> codec,
            Check<V> check = {}) {
  Key<S> k;
  k.name = name;
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
      Leaf<S>("port", "--port", &S::port, kInt<int>, InRange(0, 65535)),
      Leaf<S>("api_keys", "--api-key", &S::api_keys, kStringList),
      Leaf<S>("api_key_file", "--api-key-file", &S::api_key_file, kString),
      Leaf<S>("io_threads", "--io-threads", &S::io_threads, kInt<int>, InRange(1, 256)),
      Leaf<S>("max_body_bytes", "--max-body-bytes", &S::max_body_bytes, kInt<uint64_t>,
              InRange<uint64_t>(1, uint64_t{1} << 30)),
      Leaf<S>("max_header_bytes", "", &S::max_header_bytes, kInt<uint32_t>,
              InRange<uint32_t>(1024, 1u << 20)),
      Leaf<S>("max_connections", "", &S::max_connections, kInt<int>, InRange(1, 1 << 20)),
      Leaf<S>("idle_timeout_s", "--idle-timeout", &S::idle_timeout_s, kDouble,
              InRange(0.0, kMaxSeconds)),
      Leaf<S>("request_timeout_s", "--request-timeout", &S::request_timeout_s, kDouble,
              InRange(0.0, kMaxSeconds)),
      Leaf<S>("shutdown_timeout_s", "--shutdown-timeout", &S::shutdown_timeout_s, kDouble,
              InRange(0.0, kMaxSeconds)),
      Leaf<S>("max_tokens_cap", "--max-tokens-cap", &S::max_tokens_cap, kInt<int>,
              InRange(1, 1 << 24)),
      Leaf<S>("retry_after_s", "", &S::retry_after_s, kInt<int>, InRange(0, 3600)),
      Leaf<S>("metrics_compat", "--metrics-compat", &S::metrics_compat, kString,
              OneOf({"", "vllm"})),
  };
  return kKeys;
}

const Section<TracingConfig>& TracingKeys() {
  using T = TracingConfig;
  static const Section<T> kKeys = {
      Leaf<T>("otlp_endpoint", "--otlp-endpoint", &T::otlp_endpoint, kString),
      Leaf<T>("sample_ratio", "--otlp-sample-ratio", &T::sample_ratio, kDouble, InRange(0.0, 1.0)),
      Leaf<T>("service_name", "--otlp-service-name", &T::service_name, kString),
  };
  return kKeys;
}

const Section<KvCacheConfig>& KvCacheKeys() {
  using K = KvCacheConfig;
  static const Section<K> kKeys = {
      Leaf<K>("memory", "--kv-cache-memory", &K::memory, kString, MemorySize()),
      Leaf<K>("dtype", "--kv-dtype", &K::dtype, kKvDType),
      Leaf<K>("block_size", "--block-size", &K::block_size, kInt<int>, InRange(1, 1024)),
      Leaf<K>("prefix_cache", "--no-prefix-cache", &K::prefix_cache, kBool),
  };
  return kKeys;
}

const Section<sched::SchedulerConfig>& SchedulerKeys() {
  using C = sched::SchedulerConfig;
  static const Section<C> kKeys = {
      Leaf<C>("max_num_seqs", "--max-num-seqs", &C::max_num_seqs, kInt<int>, InRange(1, 1024)),
      Leaf<C>("max_batched_tokens", "--max-batched-tokens", &C::max_batched_tokens, kInt<int>,
              InRange(1, 1 << 20)),
      Leaf<C>("max_prefill_tokens_with_decodes", "--max-prefill-tokens-with-decodes",
              &C::max_prefill_tokens_with_decodes, kInt<int>, InRange(0, 1 << 20)),
      Leaf<C>("max_queued_requests", "--max-queued-requests", &C::max_queued_requests, kInt<int>,
              InRange(1, 1 << 20)),
      Leaf<C>("max_queued_prompt_tokens", "", &C::max_queued_prompt_tokens, kInt<int64_t>,
              InRange<int64_t>(1, int64_t{1} << 40)),
      Leaf<C>("aging_s", "", &C::aging_s, kDouble, InRange(0.0, kMaxSeconds)),
  };
  return kKeys;
}

const Section<LoraConfig>& LoraKeys() {
  using L = LoraConfig;
  static const Section<L> kKeys = {
      Leaf<L>("max_loras", "--max-loras", &L::max_loras, kInt<int>,
              InRange(1, sched::SchedulerConfig::kMaxLoras)),
      Leaf<L>("max_lora_rank", "--max-lora-rank", &L::max_lora_rank, kInt<int>,
              InRange(1, kMaxLoraRank)),
      Leaf<L>("max_cpu_loras", "--max-cpu-loras", &L::max_cpu_loras, kInt<int>,
              InRange(0, kMaxCpuLoras)),
  };
  return kKeys;
}

const Section<kvtier::TierLimits>& LimitKeys() {
  using L = kvtier::TierLimits;
  static const Section<L> kKeys = {
      Leaf<L>("capacity", "", &L::capacity_bytes, kSize),
      Leaf<L>("ttl_s", "", &L::ttl_s, kDouble, InRange(0.0, 1e9)),
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
       Leaf<R>("timeout_s", "", &R::timeout_s, kDouble, InRange(0.0, 60.0))});
  return kKeys;
}

const Section<kvtier::TieredKvConfig>& TierKeys() {
  using T = kvtier::TieredKvConfig;
  static const Section<T> kKeys = {
      OptionalSub<T>("ram", &T::ram, RamKeys()),
      OptionalSub<T>("disk", &T::disk, DiskKeys()),
      OptionalSub<T>("redis", &T::redis, RedisKeys()),
      Leaf<T>("compression", "--kv-tier-compression", &T::compression, kCompression),
      Leaf<T>("max_queued_writes", "", &T::max_queued_writes, kInt<size_t>,
              InRange<size_t>(1, size_t{1} << 20)),
      Leaf<T>("io_threads", "", &T::io_threads, kInt<int>, InRange(1, 64)),
  };
  return kKeys;
}

const Section<ServingConfig>& EngineKeys() {
  using E = ServingConfig;
  static const Section<E> kKeys = {
      Leaf<E>("threads", "--threads", &E::threads, kInt<int>, InRange(0, 1024)),
      Leaf<E>("max_model_len", "--max-model-len", &E::max_model_len, kInt<int>,
              InRange(0, 1 << 24)),
      Leaf<E>("kv_tier_prefetch_timeout_s", "--kv-tier-prefetch-timeout",
              &E::kv_tier_prefetch_timeout_s, kDouble, InRange(0.0, 3600.0)),
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

// Parses `text` into *out with yaml-cpp, turning its exceptions into errors.
template <typename S>
Status DecodeText(std::string_view text, const Section<S>& keys, const std::string& path, S* out) {
  if (text.size() > kMaxYamlBytes) return Status::InvalidArgument("larger than 64 KiB");
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    return DecodeSection(keys, root, path, out);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("YAML error: ") + e.what());
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("YAML error: ") + e.what());
  }
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + path);
  std::string text;
  char buf[64 << 10];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxYamlBytes) return Status::InvalidArgument(path + ": larger than 64 KiB");
  }
  if (in.bad()) return Status::IoError("cannot read " + path);
  return text;
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
  RETURN_IF_ERROR(DecodeText(yaml_text, ReplicaKeys(), "", &c));
  RETURN_IF_ERROR(c.Validate());
  return c;
}

Result<ReplicaConfig> LoadReplicaConfigFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
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
  Status s = DecodeText(yaml_text, TierKeys(), "", &c);
  if (s.ok()) s = ValidateTiers(c, "");
  if (!s.ok()) return s.WithContext("kv tiers config");
  return c;
}

Result<kvtier::TieredKvConfig> LoadKvTiersFile(const std::string& path) {
  auto text = ReadFile(path);
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
