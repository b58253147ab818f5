// Registry: the adapters a replica knows by name (--lora name=path and /v1/load_lora_adapter), and
// the host-memory cache of their loaded (f32) forms.
//
// A registered name keeps its path and options; its loaded Adapter is cached, at most
// max_cpu_loras of them (LRU; an adapter a request still holds is never dropped — the registry
// keeps only a shared_ptr, so dropping it merely means the next Get() loads the file again).
// Add() loads and validates at once (a bad file is refused before the name exists). Remove() takes
// the name away; requests that already hold the Adapter finish with it.
// (Which adapters the engine may batch in one step — the active set of --max-loras — is the
// engine's business: sched::Scheduler, not this class.)
//
// Thread-safety: every method may be called from any thread (one internal mutex; file loading
// happens outside it, so a slow load never blocks Get() of a cached adapter).
// Errors: Add → InvalidArgument (bad name, bad file: Adapter::Load's message), AlreadyExists
// (name taken); Get/Remove → NotFound naming the adapter.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "lora/adapter.h"
#include "model/model.h"

namespace strata::lora {

struct RegistryOptions {
  int max_rank = 16;      // --max-lora-rank
  int max_cpu_loras = 0;  // loaded adapters kept in host memory; 0 = no bound
};

struct AdapterInfo {
  std::string name, path, digest;
  int rank = 0;
  bool loaded = false;  // in host memory now
};

struct RegistryCounters {
  int64_t loads = 0;      // files read (Add and reloads after eviction)
  int64_t unloads = 0;    // Remove()
  int64_t evictions = 0;  // loaded forms dropped by the max_cpu_loras bound
  int64_t load_errors = 0;
};

class Registry {
 public:
  Registry(std::shared_ptr<const model::Model> base, RegistryOptions options);
  ~Registry();

  Status Add(const std::string& name, const std::string& path, float scale = 1.0f);
  Status Remove(const std::string& name);
  Result<std::shared_ptr<const Adapter>> Get(const std::string& name);
  bool Contains(const std::string& name) const;
  std::vector<AdapterInfo> List() const;  // sorted by name
  RegistryCounters counters() const;
  const RegistryOptions& options() const { return options_; }

 private:
  struct Entry;
  std::shared_ptr<const model::Model> base_;
  const RegistryOptions options_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ GUARDED_BY(mu_);
  uint64_t tick_ GUARDED_BY(mu_) = 0;
  RegistryCounters counters_ GUARDED_BY(mu_);
};

}  // namespace strata::lora
