// Registry: the adapters a replica knows by name (--lora name=path and /v1/load_lora_adapter), and
// the host-memory cache of their loaded (f32) forms.
//
// A registered name keeps its path and options; its loaded Adapter is cached, at most
// max_cpu_loras of them (LRU). Eviction drops only the registry's shared_ptr, and only of an
// adapter no one else holds (dropping a held one would free nothing and make the next Get() load a
// second copy), so while every cached adapter is in use the count may exceed the bound; the next
// Add()/Get() evicts again. After an eviction Get() loads the file again (its digest is that of the
// file's bytes then, so a file changed on disk gives a new digest and never reuses old blocks).
// Add() loads and validates at once (a bad file is refused before the name exists). Remove() takes
// the name away; requests that already hold the Adapter finish with it. Two Get()s of an evicted
// adapter at once may both read the file; one copy is kept.
// (Which adapters the engine may batch in one step — the active set of --max-loras — is the
// engine's business: sched::Scheduler, not this class.)
//
// Thread-safety: every method may be called from any thread (one internal mutex; file loading
// happens outside it, so a slow load never blocks Get() of a cached adapter).
// Errors: Add → InvalidArgument (bad name: empty, over 256 bytes, a control/space character or
// ',' or '"'; bad or missing file: Adapter::Load's message; name taken: "... is already loaded" —
// base/status.h has no AlreadyExists code, and vLLM answers 400 there too); Get/Remove → NotFound
// naming the adapter; Get after an eviction → Unavailable with Adapter::Load's message when the
// file went bad since Add (the name stays registered).
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
  Entry* FindLocked(const std::string& name) const REQUIRES(mu_);
  // Drops least-recently-used cached adapters that no one else holds, down to max_cpu_loras;
  // never `keep`.
  void EvictLocked(const Entry* keep) REQUIRES(mu_);
  // Reads an adapter file with the registry's options; call without mu_ (it takes a while).
  Result<std::shared_ptr<const Adapter>> ReadFile(const std::string& name, const std::string& path,
                                                  float scale) const;
  // Counts one finished read in counters_ (a load, or a load error if !ok); returns ok.
  bool CountReadLocked(bool ok) REQUIRES(mu_);

  std::shared_ptr<const model::Model> base_;
  const RegistryOptions options_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ GUARDED_BY(mu_);
  uint64_t tick_ GUARDED_BY(mu_) = 0;     // LRU clock
  uint64_t next_id_ GUARDED_BY(mu_) = 0;  // identity of an Add (a name re-added is a new entry)
  RegistryCounters counters_ GUARDED_BY(mu_);
};

}  // namespace strata::lora
