// The YAML table of the `engine:` section (yamlcfg/section_codec.h), for the replica config's
// codec (replica/replica_config.cc) that nests it, and the bounds of a config document.
//
// Thread contract: the table is built once (a function-local static) and immutable.
#pragma once

#include "engine/serving/serving_config.h"
#include "yamlcfg/section_codec.h"

namespace strata::engine::serving {

// A replica config is a few KiB; the bound keeps yaml-cpp's node tree of hostile input small (a
// 1 MiB list of one-character items costs it ~250 MiB; 64 KiB, ~16 MiB). No node budget: the
// decoder follows the tables, so an alias is walked only where a key expects a section. The
// replica config file and the older kv-tiers file share it.
inline constexpr yamlcfg::DocumentKind kConfigDocument{.max_bytes = 64 << 10,
                                                       .max_bytes_text = "64 KiB"};

// The rows of `engine:` (threads, max_model_len, kv_cache, scheduler, lora, kv_tiers, ...).
const yamlcfg::Section<ServingConfig>& ServingConfigKeys();

}  // namespace strata::engine::serving
