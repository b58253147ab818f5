// Adapter::Load: part `adapter` of issue 20 (placeholder until it lands).
#include "lora/adapter.h"

namespace strata::lora {

Result<std::shared_ptr<const Adapter>> Adapter::Load(const std::string& name,
                                                     const std::string& path,
                                                     const model::Model& base,
                                                     const LoadOptions& options) {
  (void)base;
  (void)options;
  return Status::Unimplemented("LoRA adapter '" + name + "' (" + path + "): loading is not built");
}

}  // namespace strata::lora
