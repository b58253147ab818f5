// Registry: part `adapter` of issue 20 (placeholder until it lands).
#include "lora/registry.h"

#include <utility>

namespace strata::lora {

struct Registry::Entry {};

Registry::Registry(std::shared_ptr<const model::Model> base, RegistryOptions options)
    : base_(std::move(base)), options_(options) {}
Registry::~Registry() = default;

}  // namespace strata::lora
