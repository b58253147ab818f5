// gateway/prom_scrape: a small parser of the Prometheus text exposition format (0.0.4), enough to
// read a replica's /metrics: `name{label="value",...} value [timestamp]` sample lines, `#`
// comment/HELP/TYPE lines (skipped), blank lines. Values: decimal/exponent floats, NaN, +Inf,
// -Inf. Label values may contain the escapes \\ \" \n.
//
// Bounds: at most kMaxPromLines sample lines and kMaxPromLabels labels per sample are accepted; a
// body above them is an error (a replica's exposition is a few hundred lines).
// Thread contract: pure functions.
// Errors: InvalidArgument naming the 1-based line and what is wrong; never throws, never crashes
// on any input (the upstream is not trusted).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace strata::gateway {

inline constexpr size_t kMaxPromLines = 100000;
inline constexpr size_t kMaxPromLabels = 64;

struct PromSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written
  double value = 0;
};

Result<std::vector<PromSample>> ParsePromText(std::string_view text);

// Sum / maximum of the values of every series named `name`; `found` (optional) tells whether any
// series has that name. Sum and Max are 0 when none does.
double SumPromSamples(const std::vector<PromSample>& samples, std::string_view name,
                      bool* found = nullptr);
double MaxPromSamples(const std::vector<PromSample>& samples, std::string_view name,
                      bool* found = nullptr);

// A replica's LoRA adapters: `published` when it exports strata:lora_requests_info or
// strata:lora_adapter_active (a strata replica that serves adapters, even none yet); every
// `adapter` label of strata:lora_adapter_active is registered, those with value 1 (>= 0.5) are in
// its active set. Sorted, unique; empty names ignored; at most kMaxPromAdapters are kept.
inline constexpr size_t kMaxPromAdapters = 4096;
struct PromLoraAdapters {
  bool published = false;
  std::vector<std::string> registered, active;
  std::vector<std::pair<std::string, std::string>> digests;  // (adapter, digest label), by name
};
PromLoraAdapters ReadLoraAdapters(const std::vector<PromSample>& samples);

}  // namespace strata::gateway
