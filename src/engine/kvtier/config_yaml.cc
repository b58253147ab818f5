// ParseTieredKvConfigYaml / LoadTieredKvConfigFile (declared in tiered_cache.h). yaml-cpp throws;
// every exception is caught here and turned into an InvalidArgument naming the key.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/kv/kv_storage.h"
#include "engine/kvtier/tiered_cache.h"

namespace strata::engine::kvtier {
namespace {

constexpr size_t kMaxConfigBytes = 1 << 20;

Status Bad(const std::string& key, const std::string& what) {
  return Status::InvalidArgument("kv tiers config: " + key + ": " + what);
}

Status CheckKeys(const YAML::Node& node, const std::string& where, const std::set<std::string>& allowed) {
  if (!node.IsMap()) return Bad(where.empty() ? "(top level)" : where, "expected a mapping");
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) return Bad(where, "keys must be strings");
    std::string k = kv.first.as<std::string>();
    if (allowed.count(k) == 0) return Bad(where.empty() ? k : where + "." + k, "unknown key");
  }
  return Status::Ok();
}

Result<std::string> Str(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) return Bad(key, "expected a string");
  return n.as<std::string>();
}

Result<uint64_t> Size(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) return Bad(key, "expected a size such as 2GiB");
  auto v = kv::ParseMemorySize(n.as<std::string>());
  if (!v.ok()) return Bad(key, v.status().message());
  return *v;
}

Result<double> Number(const YAML::Node& n, const std::string& key) {
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v) || v < 0) {
    return Bad(key, "expected a non-negative number");
  }
  return v;
}

Result<int64_t> Int(const YAML::Node& n, const std::string& key) {
  int64_t v = 0;
  if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) return Bad(key, "expected an integer");
  return v;
}

Result<bool> Bool(const YAML::Node& n, const std::string& key) {
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) return Bad(key, "expected true or false");
  return v;
}

// Fills the TierLimits fields present in `node`.
Status ParseLimits(const YAML::Node& node, const std::string& tier, TierLimits* l) {
  if (auto n = node["capacity"]) {
    ASSIGN_OR_RETURN(l->capacity_bytes, Size(n, tier + ".capacity"));
  }
  if (auto n = node["ttl_s"]) {
    ASSIGN_OR_RETURN(l->ttl_s, Number(n, tier + ".ttl_s"));
  }
  if (auto n = node["default_tenant_quota"]) {
    ASSIGN_OR_RETURN(l->default_tenant_quota_bytes, Size(n, tier + ".default_tenant_quota"));
  }
  if (auto n = node["tenant_quota"]) {
    if (!n.IsMap()) return Bad(tier + ".tenant_quota", "expected a mapping tenant: size");
    for (const auto& kv : n) {
      if (!kv.first.IsScalar()) return Bad(tier + ".tenant_quota", "tenant names must be strings");
      std::string tenant = kv.first.as<std::string>();
      ASSIGN_OR_RETURN(uint64_t q, Size(kv.second, tier + ".tenant_quota." + tenant));
      l->tenant_quota_bytes.emplace_back(tenant, q);
    }
  }
  return Status::Ok();
}

Result<TieredKvConfig> Parse(const YAML::Node& root) {
  TieredKvConfig c;
  if (root.IsNull()) return c;  // empty file: no tiers
  RETURN_IF_ERROR(CheckKeys(root, "", {"ram", "disk", "redis", "compression", "max_queued_writes", "io_threads"}));
  if (auto n = root["ram"]) {
    RETURN_IF_ERROR(CheckKeys(n, "ram", {"capacity", "ttl_s", "tenant_quota", "default_tenant_quota"}));
    RamTierConfig ram;
    RETURN_IF_ERROR(ParseLimits(n, "ram", &ram.limits));
    c.ram = std::move(ram);
  }
  if (auto n = root["disk"]) {
    RETURN_IF_ERROR(CheckKeys(
        n, "disk", {"dir", "capacity", "ttl_s", "tenant_quota", "default_tenant_quota", "write_through", "fsync"}));
    DiskTierConfig disk;
    if (auto d = n["dir"]) {
      ASSIGN_OR_RETURN(disk.dir, Str(d, "disk.dir"));
    }
    RETURN_IF_ERROR(ParseLimits(n, "disk", &disk.limits));
    if (auto d = n["write_through"]) {
      ASSIGN_OR_RETURN(disk.write_through, Bool(d, "disk.write_through"));
    }
    if (auto d = n["fsync"]) {
      ASSIGN_OR_RETURN(disk.fsync, Bool(d, "disk.fsync"));
    }
    c.disk = std::move(disk);
  }
  if (auto n = root["redis"]) {
    RETURN_IF_ERROR(CheckKeys(n, "redis", {"url", "key_prefix", "ttl_s", "tenant_quota", "default_tenant_quota",
                                           "write_through", "timeout_s"}));
    RedisTierConfig redis;
    if (auto d = n["url"]) {
      ASSIGN_OR_RETURN(redis.url, Str(d, "redis.url"));
    }
    if (auto d = n["key_prefix"]) {
      ASSIGN_OR_RETURN(redis.key_prefix, Str(d, "redis.key_prefix"));
    }
    RETURN_IF_ERROR(ParseLimits(n, "redis", &redis.limits));
    if (auto d = n["write_through"]) {
      ASSIGN_OR_RETURN(redis.write_through, Bool(d, "redis.write_through"));
    }
    if (auto d = n["timeout_s"]) {
      ASSIGN_OR_RETURN(redis.timeout_s, Number(d, "redis.timeout_s"));
    }
    c.redis = std::move(redis);
  }
  if (auto n = root["compression"]) {
    ASSIGN_OR_RETURN(std::string s, Str(n, "compression"));
    if (s == "none") c.compression = Compression::kNone;
    else if (s == "lz4") c.compression = Compression::kLz4;
    else if (s == "zstd") c.compression = Compression::kZstd;
    else return Bad("compression", "expected none, lz4 or zstd (got \"" + s + "\")");
  }
  if (auto n = root["max_queued_writes"]) {
    ASSIGN_OR_RETURN(int64_t v, Int(n, "max_queued_writes"));
    if (v < 1) return Bad("max_queued_writes", "must be >= 1");
    c.max_queued_writes = static_cast<size_t>(v);
  }
  if (auto n = root["io_threads"]) {
    ASSIGN_OR_RETURN(int64_t v, Int(n, "io_threads"));
    if (v < 1 || v > 64) return Bad("io_threads", "must be in [1, 64]");
    c.io_threads = static_cast<int>(v);
  }
  Status s = c.Validate();
  if (!s.ok()) return s.WithContext("kv tiers config");
  return c;
}

}  // namespace

Result<TieredKvConfig> ParseTieredKvConfigYaml(std::string_view yaml_text) {
  if (yaml_text.size() > kMaxConfigBytes) return Status::InvalidArgument("kv tiers config: larger than 1 MiB");
  try {
    return Parse(YAML::Load(std::string(yaml_text)));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("kv tiers config: YAML error: ") + e.what());
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("kv tiers config: ") + e.what());
  }
}

Result<TieredKvConfig> LoadTieredKvConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("kv tiers config: cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError("kv tiers config: cannot read " + path);
  auto c = ParseTieredKvConfigYaml(ss.str());
  if (!c.ok()) return c.status().WithContext(path);
  return c;
}

}  // namespace strata::engine::kvtier
