// The `engine:` section's YAML table (one row per key: decode, print, check with its flag, key
// path; yamlcfg/section_codec.h) and its validation, and the older kv-tiers file.
#include "engine/serving/serving_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <utility>
#include <vector>

#include "base/memory_size.h"
#include "engine/serving/serving_config_keys.h"
#include "yamlcfg/section_codec.h"

namespace strata::engine::serving {
namespace {

using yamlcfg::Check;
using yamlcfg::Concat;
using yamlcfg::EnumOf;
using yamlcfg::Inline;
using yamlcfg::IntIn;
using yamlcfg::Key;
using yamlcfg::Leaf;
using yamlcfg::NumIn;
using yamlcfg::OptionalSub;
using yamlcfg::Section;
using yamlcfg::Sub;

const yamlcfg::Codec<bool> kBool = yamlcfg::BoolCodec();
const yamlcfg::Codec<std::string> kString = yamlcfg::StringCodec();
const yamlcfg::Codec<uint64_t> kSize = yamlcfg::SizeCodec();

using Quotas = std::vector<std::pair<std::string, uint64_t>>;
Result<Quotas> DecodeQuotas(const YAML::Node& n, const std::string& path) {
  return yamlcfg::DecodePairs<uint64_t>(n, path, "tenant: size", yamlcfg::DecodeSize);
}
void EncodeQuotas(const Quotas& v, YAML::Emitter& out) {
  out << YAML::Flow << YAML::BeginMap;
  for (const auto& [tenant, q] : v) {
    out << YAML::Key << YAML::DoubleQuoted << tenant << YAML::Value;
    yamlcfg::EncodeSize(q, out);
  }
  out << YAML::EndMap;
}
const yamlcfg::Codec<Quotas> kQuotas{DecodeQuotas, EncodeQuotas, {}};

// Enumerations by name.
constexpr yamlcfg::EnumEntry<kv::KvDType> kKvDTypes[] = {
    {"f16", kv::KvDType::kF16}, {"f32", kv::KvDType::kF32}, {"q8_0", kv::KvDType::kQ8_0}};
constexpr yamlcfg::EnumEntry<kvtier::Compression> kCompressions[] = {
    {"none", kvtier::Compression::kNone},
    {"lz4", kvtier::Compression::kLz4},
    {"zstd", kvtier::Compression::kZstd}};

Check<std::string> MemorySize() {
  return [](const std::string& v) {
    auto r = ParseMemorySize(v);
    return r.ok() ? std::string() : std::string(r.status().message());
  };
}

constexpr double kMaxSeconds = 1e6;
constexpr int kMaxLoraRank = 1024;
constexpr int kMaxCpuLoras = 1 << 16;

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

}  // namespace

const Section<ServingConfig>& ServingConfigKeys() {
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

namespace {

// Validates the tier section on its own (its messages name keys relative to it).
Status ValidateTiers(const kvtier::TieredKvConfig& t, const std::string& path) {
  if (!t.enabled()) return Status::Ok();
  Status s = t.Validate();
  return path.empty() ? s : s.WithContext(path);
}

}  // namespace

Status ServingConfig::Validate() const {
  RETURN_IF_ERROR(yamlcfg::CheckSection(ServingConfigKeys(), *this, "engine", /*with_flags=*/true));
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

Result<kvtier::TieredKvConfig> ParseKvTiersYaml(std::string_view yaml_text) {
  kvtier::TieredKvConfig c;
  Status s = yamlcfg::DecodeDocument(yaml_text, kConfigDocument, [&](const YAML::Node& root) {
    return yamlcfg::DecodeSection(TierKeys(), root, "", &c);
  });
  if (s.ok()) s = ValidateTiers(c, "");
  if (!s.ok()) return s.WithContext("kv tiers config");
  return c;
}

Result<kvtier::TieredKvConfig> LoadKvTiersFile(const std::string& path) {
  auto text = yamlcfg::ReadDocumentFile(path, kConfigDocument);
  if (!text.ok()) return text.status().WithContext("kv tiers config");
  auto c = ParseKvTiersYaml(*text);
  if (!c.ok()) return c.status().WithContext(path);
  return c;
}

}  // namespace strata::engine::serving
