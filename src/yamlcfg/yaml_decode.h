// yamlcfg/yaml_decode: the strict YAML decoding toolkit of Strata's configuration files (the
// gateway's config, the control plane's deployment spec): scalar decoders that check type and
// range, and a table-of-fields section decoder that refuses unknown keys (with a did-you-mean) and
// duplicate keys. Every error is InvalidArgument and names the key path ("pools[1].replicas.max:
// ...").
//
// yaml-cpp throws; callers wrap their whole decode in one try/catch (see spec.cc). The node
// budget (CheckNodeBudget) bounds the work of a hostile document (alias fan-out, deep nesting)
// before anything walks or re-emits it.
//
// Used by the decoders of src/gateway and src/control. Thread contract: stateless functions.
#pragma once

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace strata::yamlcfg {

// "path: what" ("(top level): what" for the empty path).
Status Bad(const std::string& path, std::string_view what);
std::string Join(const std::string& path, std::string_view name);  // "a.b"
std::string At(const std::string& path, size_t i);                 // "a[3]"

Result<int64_t> DecodeInt(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi);
// A finite number in [lo, hi] (or (lo, hi] when lo_open).
Result<double> DecodeNumber(const YAML::Node& n, const std::string& path, double lo, double hi,
                            bool lo_open = false);
Result<bool> DecodeBool(const YAML::Node& n, const std::string& path);
// `key:` with no value is the empty string.
Result<std::string> DecodeString(const YAML::Node& n, const std::string& path);
Result<std::vector<std::string>> DecodeStringList(const YAML::Node& n, const std::string& path);
// A mapping of string keys to string values, in document order; duplicate keys are errors.
Result<std::vector<std::pair<std::string, std::string>>> DecodeStringPairs(const YAML::Node& n,
                                                                           const std::string& path);

// A list of finite numbers in [lo, hi] (or (lo, hi] when lo_open), each greater than the one
// before (canary weights, bucket bounds). `what` names the list in the "expected a list of ..."
// error.
Result<std::vector<double>> DecodeIncreasingNumbers(const YAML::Node& n, const std::string& path,
                                                    std::string_view what, double lo, double hi,
                                                    bool lo_open = false);

// At most `max_nodes` nodes (every alias use counted again) and `max_depth` levels under `n`.
Status CheckNodeBudget(const YAML::Node& n, size_t max_nodes, int max_depth);

// " (did you mean X?)" for the closest of `known`, or "".
std::string Suggest(std::string_view name, const std::vector<std::string_view>& known);

// ---- sections: a table of fields per struct ----

template <typename T>
struct Field {
  std::string_view name;
  std::function<Status(const YAML::Node& n, const std::string& path, T* out)> decode;
};
template <typename T>
using Fields = std::vector<Field<T>>;

// Decodes the map `n` field by field; unknown and duplicate keys are errors. Null = nothing set.
template <typename T>
Status DecodeSection(const Fields<T>& fields, const YAML::Node& n, const std::string& path,
                     T* out) {
  if (n.IsNull()) return Status::Ok();
  if (!n.IsMap()) return Bad(path, "expected a mapping");
  std::set<std::string> seen;
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) return Bad(path, "keys must be strings");
    const std::string name = kv.first.Scalar();
    const Field<T>* field = nullptr;
    for (const Field<T>& f : fields) {
      if (f.name == name) field = &f;
    }
    if (field == nullptr) {
      std::vector<std::string_view> known;
      known.reserve(fields.size());
      for (const Field<T>& f : fields) known.push_back(f.name);
      return Bad(Join(path, name), "unknown key" + Suggest(name, known));
    }
    if (!seen.insert(name).second) return Bad(Join(path, name), "duplicate key");
    RETURN_IF_ERROR(field->decode(kv.second, Join(path, name), out));
  }
  return Status::Ok();
}

// A list of sections (`n` a sequence of maps). Null = empty.
template <typename T>
Status DecodeList(const Fields<T>& fields, const YAML::Node& n, const std::string& path,
                  std::vector<T>* out) {
  if (n.IsNull()) return Status::Ok();
  if (!n.IsSequence()) return Bad(path, "expected a list");
  out->reserve(n.size());
  for (size_t i = 0; i < n.size(); ++i) {
    T item;
    RETURN_IF_ERROR(DecodeSection(fields, n[i], At(path, i), &item));
    out->push_back(std::move(item));
  }
  return Status::Ok();
}

// Field makers.
template <typename T>
Field<T> Str(std::string_view name, std::string T::*m) {
  return {name, [m](const YAML::Node& n, const std::string& path, T* out) {
            ASSIGN_OR_RETURN(out->*m, DecodeString(n, path));
            return Status::Ok();
          }};
}
template <typename T, typename V>
Field<T> Int(std::string_view name, V T::*m, int64_t lo, int64_t hi) {
  return {name, [m, lo, hi](const YAML::Node& n, const std::string& path, T* out) {
            ASSIGN_OR_RETURN(int64_t v, DecodeInt(n, path, lo, hi));
            out->*m = static_cast<V>(v);
            return Status::Ok();
          }};
}
template <typename T>
Field<T> Num(std::string_view name, double T::*m, double lo, double hi, bool lo_open = false) {
  return {name, [m, lo, hi, lo_open](const YAML::Node& n, const std::string& path, T* out) {
            ASSIGN_OR_RETURN(out->*m, DecodeNumber(n, path, lo, hi, lo_open));
            return Status::Ok();
          }};
}
template <typename T>
Field<T> Bool(std::string_view name, bool T::*m) {
  return {name, [m](const YAML::Node& n, const std::string& path, T* out) {
            ASSIGN_OR_RETURN(out->*m, DecodeBool(n, path));
            return Status::Ok();
          }};
}
// A duration given as an integer count of unit U (seconds, milliseconds), stored as D.
template <typename U, typename T, typename D>
Field<T> Duration(std::string_view name, D T::*m, int64_t lo, int64_t hi) {
  return {name, [m, lo, hi](const YAML::Node& n, const std::string& path, T* out) {
            ASSIGN_OR_RETURN(int64_t v, DecodeInt(n, path, lo, hi));
            out->*m = std::chrono::duration_cast<D>(U(v));
            return Status::Ok();
          }};
}

}  // namespace strata::yamlcfg
