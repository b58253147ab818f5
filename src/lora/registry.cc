#include "lora/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace strata::lora {
namespace {

constexpr size_t kMaxNameBytes = 256;
// A Get() whose entry is replaced (Remove + Add of the name) while it loads starts over; this many
// times at most.
constexpr int kMaxGetAttempts = 4;

Status CheckName(const std::string& name) {
  if (name.empty()) return Status::InvalidArgument("LoRA adapter name is empty");
  if (name.size() > kMaxNameBytes)
    return Status::InvalidArgument(
        fmt::format("LoRA adapter name is {} bytes, longer than {}", name.size(), kMaxNameBytes));
  for (unsigned char c : name) {
    // Names go into metric label lists joined by ',' (strata:lora_requests_info) and JSON.
    if (c <= 0x20 || c == 0x7f || c == ',' || c == '"')
      return Status::InvalidArgument(
          fmt::format("LoRA adapter name '{}' has a space, control character, ',' or '\"'", name));
  }
  return Status::Ok();
}

}  // namespace

struct Registry::Entry {
  std::string name, path;
  float scale = 1.0f;
  uint64_t id = 0;
  std::string digest;  // of the last load
  int rank = 0;
  std::shared_ptr<const Adapter> loaded;  // null when evicted
  uint64_t last_use = 0;

  void Install(std::shared_ptr<const Adapter> adapter) {
    loaded = std::move(adapter);
    digest = loaded->digest();
    rank = loaded->max_rank();
  }
};

Registry::Registry(std::shared_ptr<const model::Model> base, RegistryOptions options)
    : base_(std::move(base)), options_(options) {}
Registry::~Registry() = default;

Registry::Entry* Registry::FindLocked(const std::string& name) const {
  for (const auto& e : entries_)
    if (e->name == name) return e.get();
  return nullptr;
}

void Registry::EvictLocked(const Entry* keep) {
  if (options_.max_cpu_loras <= 0) return;
  auto cached = static_cast<int>(std::count_if(entries_.begin(), entries_.end(),
                                               [](const auto& e) { return e->loaded != nullptr; }));
  while (cached > options_.max_cpu_loras) {
    Entry* victim = nullptr;
    for (const auto& e : entries_) {
      if (e.get() == keep || e->loaded == nullptr || e->loaded.use_count() > 1) continue;
      if (victim == nullptr || e->last_use < victim->last_use) victim = e.get();
    }
    if (victim == nullptr) return;  // every other cached adapter is in use
    victim->loaded.reset();
    ++counters_.evictions;
    --cached;
  }
}

Result<std::shared_ptr<const Adapter>> Registry::ReadFile(const std::string& name,
                                                          const std::string& path,
                                                          float scale) const {
  return Adapter::Load(name, path, *base_, LoadOptions{scale, options_.max_rank});
}

bool Registry::CountReadLocked(bool ok) {
  ++(ok ? counters_.loads : counters_.load_errors);
  return ok;
}

Status Registry::Add(const std::string& name, const std::string& path, float scale) {
  RETURN_IF_ERROR(CheckName(name));
  auto already = [&name] {
    return Status::InvalidArgument(fmt::format("LoRA adapter '{}' is already loaded", name));
  };
  {
    MutexLock lock(&mu_);
    if (FindLocked(name) != nullptr) return already();
  }
  auto loaded = ReadFile(name, path, scale);
  MutexLock lock(&mu_);
  if (!CountReadLocked(loaded.ok())) {
    // A missing file is bad input to Add, not an unknown adapter (NotFound would read as 404).
    return Status::InvalidArgument(
        fmt::format("LoRA adapter '{}': {}", name, loaded.status().message()));
  }
  if (FindLocked(name) != nullptr) return already();  // a concurrent Add won
  auto e = std::make_unique<Entry>();
  e->name = name;
  e->path = path;
  e->scale = scale;
  e->id = ++next_id_;
  e->Install(std::move(loaded).value());
  e->last_use = ++tick_;
  entries_.push_back(std::move(e));
  EvictLocked(entries_.back().get());
  return Status::Ok();
}

Status Registry::Remove(const std::string& name) {
  MutexLock lock(&mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&name](const auto& e) { return e->name == name; });
  if (it == entries_.end())
    return Status::NotFound(fmt::format("LoRA adapter '{}' is not loaded", name));
  entries_.erase(it);
  ++counters_.unloads;
  return Status::Ok();
}

Result<std::shared_ptr<const Adapter>> Registry::Get(const std::string& name) {
  auto not_found = [&name] {
    return Status::NotFound(fmt::format("LoRA adapter '{}' is not loaded", name));
  };
  for (int attempt = 0; attempt < kMaxGetAttempts; ++attempt) {
    std::string path;
    float scale = 1.0f;
    uint64_t id = 0;
    {
      MutexLock lock(&mu_);
      Entry* e = FindLocked(name);
      if (e == nullptr) return not_found();
      e->last_use = ++tick_;
      if (e->loaded != nullptr) {
        EvictLocked(e);  // others may have been released since the last Add/Get
        return e->loaded;
      }
      path = e->path;
      scale = e->scale;
      id = e->id;
    }
    // Evicted: read the file again, outside the lock.
    auto loaded = ReadFile(name, path, scale);
    MutexLock lock(&mu_);
    if (!CountReadLocked(loaded.ok())) {
      // The adapter is known (not a 404) but its file went bad since Add: a server-side problem.
      return Status::Unavailable(
          fmt::format("LoRA adapter '{}': reloading failed: {}", name, loaded.status().message()));
    }
    Entry* e = FindLocked(name);
    if (e == nullptr) return not_found();  // removed while loading
    if (e->id != id) continue;             // replaced while loading: the new entry's file
    if (e->loaded == nullptr) e->Install(std::move(loaded).value());
    e->last_use = ++tick_;
    EvictLocked(e);
    return e->loaded;
  }
  return Status::Unavailable(
      fmt::format("LoRA adapter '{}' was replaced while loading; try again", name));
}

bool Registry::Contains(const std::string& name) const {
  MutexLock lock(&mu_);
  return FindLocked(name) != nullptr;
}

std::vector<AdapterInfo> Registry::List() const {
  std::vector<AdapterInfo> out;
  {
    MutexLock lock(&mu_);
    for (const auto& e : entries_)
      out.push_back(AdapterInfo{e->name, e->path, e->digest, e->rank, e->loaded != nullptr});
  }
  std::sort(out.begin(), out.end(),
            [](const AdapterInfo& a, const AdapterInfo& b) { return a.name < b.name; });
  return out;
}

RegistryCounters Registry::counters() const {
  MutexLock lock(&mu_);
  return counters_;
}

}  // namespace strata::lora
