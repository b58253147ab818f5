// The server's LoRA adapters: what the Api needs of the adapter registry (AdapterStore, with
// RegistryStore over lora::Registry for `strata serve` and an in-memory one in the tests), and the
// worker thread that reads adapter files for /v1/load_lora_adapter (AdapterLoader), so a load
// never runs on an I/O thread or the engine thread.
//
// A request names its adapter in `model` (vLLM's convention) or in the `lora` field; the Api looks
// it up with Get() and the SubmitRequest holds the shared_ptr, so Remove() (unload) never affects
// a request that already has its adapter.
//
// Ownership: RegistryStore borrows the registry (it must outlive the store). AdapterLoader owns its
// thread; its destructor runs the task in progress to its end, drops the queued ones (their
// responders are never answered: the HTTP server is stopped before the Api goes) and joins.
// Thread contract: AdapterStore implementations are thread-safe (every method from any thread).
// AdapterLoader::Post from any thread; tasks run one at a time, in order, on its thread.
// Errors: as lora::Registry's: Add → InvalidArgument (the loader's message) / AlreadyExists;
// Get / Remove → NotFound naming the adapter.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "lora/adapter.h"
#include "lora/registry.h"

namespace strata::server {

class AdapterStore {
 public:
  virtual ~AdapterStore() = default;
  // Reads and validates the file, then registers it under `name`.
  virtual Status Add(const std::string& name, const std::string& path) = 0;
  virtual Status Remove(const std::string& name) = 0;
  virtual Result<std::shared_ptr<const lora::Adapter>> Get(const std::string& name) = 0;
  virtual bool Contains(const std::string& name) const = 0;
  virtual std::vector<lora::AdapterInfo> List() const = 0;  // sorted by name
  virtual lora::RegistryCounters counters() const = 0;
};

// The store of `strata serve`: the replica's lora::Registry.
class RegistryStore final : public AdapterStore {
 public:
  explicit RegistryStore(lora::Registry* registry) : registry_(registry) {}
  Status Add(const std::string& name, const std::string& path) override {
    return registry_->Add(name, path);
  }
  Status Remove(const std::string& name) override { return registry_->Remove(name); }
  Result<std::shared_ptr<const lora::Adapter>> Get(const std::string& name) override {
    return registry_->Get(name);
  }
  bool Contains(const std::string& name) const override { return registry_->Contains(name); }
  std::vector<lora::AdapterInfo> List() const override { return registry_->List(); }
  lora::RegistryCounters counters() const override { return registry_->counters(); }

 private:
  lora::Registry* registry_;
};

// One worker thread running posted tasks in order (adapter file loads).
class AdapterLoader {
 public:
  AdapterLoader();
  ~AdapterLoader();
  AdapterLoader(const AdapterLoader&) = delete;
  AdapterLoader& operator=(const AdapterLoader&) = delete;

  void Post(std::function<void()> task);
  int pending() const;  // queued or running

 private:
  void Loop();
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  bool busy_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace strata::server
