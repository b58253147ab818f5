// control/manifest_yaml: the YAML text of Kubernetes manifests built as JSON values (the renderer
// builds objects as nlohmann::json and writes them as YAML), and the reverse for embedding a YAML
// document (a rules file) into an object.
//
// ToYaml writes block-style YAML whose every scalar reads back as the same JSON value: a string
// that a YAML reader could take for another type ("1", "true", "null", "1e3", "") or that has
// characters outside a safe plain set is double-quoted with JSON escapes (valid YAML escapes);
// a multi-line string is a literal block (`|`, `|-`, `|+` by its trailing newlines) when every
// line is printable, otherwise quoted. Numbers, booleans and null are plain. Key order is the
// JSON object's (nlohmann::ordered_json keeps insertion order).
// YamlToJson reads YAML text (at most kMaxYamlToJsonBytes, aliases refused) into JSON where every
// scalar is a string (what the string-valued fields of a PrometheusRule want); errors are
// InvalidArgument naming `what`.
//
// Thread contract: pure functions.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace strata::control {

using OrderedJson = nlohmann::ordered_json;

inline constexpr size_t kMaxYamlToJsonBytes = 1 << 20;

// One YAML document (no leading `---`), ending in a newline.
std::string ToYaml(const OrderedJson& value);

Result<OrderedJson> YamlToJson(std::string_view yaml_text, std::string_view what);

}  // namespace strata::control
