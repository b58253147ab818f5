// Registry: part `adapter` of issue 20 (placeholder until it lands).
#include "lora/registry.h"

#include <utility>

namespace strata::lora {

struct Registry::Entry {};

Registry::Registry(std::shared_ptr<const model::Model> base, RegistryOptions options)
    : base_(std::move(base)), options_(options) {}
Registry::~Registry() = default;

// Placeholders (part `server` needs the symbols to link `strata serve`; part `adapter` replaces
// this file): every registration is refused, so nothing is ever found.
Status Registry::Add(const std::string& name, const std::string& path, float scale) {
  (void)scale;
  return Status::Unimplemented("LoRA adapter '" + name + "' (" + path +
                               "): the adapter registry is not built");
}
Status Registry::Remove(const std::string& name) {
  return Status::NotFound("LoRA adapter '" + name + "' is not loaded");
}
Result<std::shared_ptr<const Adapter>> Registry::Get(const std::string& name) {
  return Status::NotFound("LoRA adapter '" + name + "' is not loaded");
}
bool Registry::Contains(const std::string& name) const {
  (void)name;
  return false;
}
std::vector<AdapterInfo> Registry::List() const { return {}; }
RegistryCounters Registry::counters() const { return {}; }

}  // namespace strata::lora
