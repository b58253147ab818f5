// Fuzz target: bytes -> replica::ParseReplicaConfigYaml (the file the control plane writes
// for `strata serve --config`) and ParseKvTiersYaml (the older --kv-tier-config file). Must never
// crash, hang or allocate without bound; errors are fine. A config that parses must print to YAML
// that parses back to the same print (the --print-config round trip); anything else aborts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "replica/replica_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = strata::replica::ParseReplicaConfigYaml(text);
  if (config.ok()) {
    const std::string printed = strata::replica::ReplicaConfigToYaml(*config);
    auto back = strata::replica::ParseReplicaConfigYaml(printed);
    if (!back.ok() || strata::replica::ReplicaConfigToYaml(*back) != printed) std::abort();
  }
  (void)strata::engine::serving::ParseKvTiersYaml(text);
  return 0;
}
