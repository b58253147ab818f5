// yamlcfg/yaml_decode: the strict YAML decoding toolkit of every Strata configuration file (the
// replica's config, the gateway's config, the control plane's deployment spec): documents loaded
// within bounds (size; a node budget against alias fan-out where wanted), scalar decoders that
// check type and range (integers, numbers, booleans, strings, sizes, enumerations by name), and a
// table-of-fields section decoder that refuses unknown keys (with a did-you-mean) and duplicate
// keys. Every decode error is InvalidArgument and names the key path ("pools[1].replicas.max:
// ...").
//
// yaml-cpp throws; DecodeDocument catches its exceptions (and those of the decode it runs). The
// node budget bounds the work of a hostile document (alias fan-out, deep nesting) before anything
// walks or re-emits it.
//
// Used by the decoders of src/engine/serving, src/gateway and src/control. Thread contract:
// stateless functions.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
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

// ---- documents: bounds and yaml-cpp's exceptions ----

// One kind of configuration document and its bounds.
struct DocumentKind {
  // What errors call the document: "gateway config: larger than ...", "cannot open gateway config
  // PATH"; "" names neither.
  std::string_view name = {};
  size_t max_bytes = 0;  // larger text is refused before yaml-cpp sees it
  // How that error names the bound ("64 KiB"); "" : "<max_bytes> bytes".
  std::string_view max_bytes_text = {};
  // A node budget (every alias use counted again) and a depth, checked before `decode` runs; 0:
  // none. Needed where a free-form part is walked or re-emitted whole; a decoder that follows the
  // schema (a node not in it is an error) is bounded by the text already.
  size_t max_nodes = 0;
  int max_depth = 0;
};

// Loads `text` as one YAML document within `kind`'s bounds and returns decode(root). yaml-cpp's
// exceptions (syntax errors, its depth guard, bad_alloc), thrown by the load or by `decode`, are
// InvalidArgument "YAML error: ...".
Status DecodeDocument(std::string_view text, const DocumentKind& kind,
                      const std::function<Status(const YAML::Node& root)>& decode);

// The text of the file at `path`, at most kind.max_bytes: NotFound "cannot open <name> <path>",
// InvalidArgument "<path>: larger than ...", IoError "cannot read <path>".
Result<std::string> ReadDocumentFile(const std::string& path, const DocumentKind& kind);

// At most `max_nodes` nodes (every alias use counted again) and `max_depth` levels under `n`.
Status CheckNodeBudget(const YAML::Node& n, size_t max_nodes, int max_depth);

// ---- scalars ----

Result<int64_t> DecodeInt(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi);
// A finite number in [lo, hi] (or (lo, hi] when lo_open).
Result<double> DecodeNumber(const YAML::Node& n, const std::string& path, double lo, double hi,
                            bool lo_open = false);
Result<bool> DecodeBool(const YAML::Node& n, const std::string& path);
// `key:` with no value is the empty string.
Result<std::string> DecodeString(const YAML::Node& n, const std::string& path);
Result<std::vector<std::string>> DecodeStringList(const YAML::Node& n, const std::string& path);
// A byte size in ParseMemorySize's syntax ("2GiB", "500MB", "0.25" of RAM); `0` is 0.
Result<uint64_t> DecodeSize(const YAML::Node& n, const std::string& path);

// A list of finite numbers in [lo, hi] (or (lo, hi] when lo_open), each greater than the one
// before (canary weights, bucket bounds). `what` names the list in the "expected a list of ..."
// error.
Result<std::vector<double>> DecodeIncreasingNumbers(const YAML::Node& n, const std::string& path,
                                                    std::string_view what, double lo, double hi,
                                                    bool lo_open = false);

// ---- enumerations by name ----

template <typename E>
using EnumEntry = std::pair<std::string_view, E>;

// How a choice error lists the names: "expected one of a, b, c" or "expected a, b or c".
enum class Choices { kOneOf, kEither };

// "expected <names> (got \"<value>\")"; the value (cut to 80 characters) only when `n` is a
// scalar.
Status NotAChoice(const YAML::Node& n, const std::string& path,
                  const std::vector<std::string_view>& names, Choices style);

// The value of the entry of `names` that `n` names.
template <typename E, size_t kN>
Result<E> DecodeEnum(const YAML::Node& n, const std::string& path, const EnumEntry<E> (&names)[kN],
                     Choices style = Choices::kOneOf) {
  std::vector<std::string_view> all;
  all.reserve(kN);
  for (const auto& [name, v] : names) {
    if (n.IsScalar() && n.Scalar() == name) return v;
    all.push_back(name);
  }
  return NotAChoice(n, path, all, style);
}
// The same over plain names (a string that must be one of them).
template <size_t kN>
Result<std::string_view> DecodeEnum(const YAML::Node& n, const std::string& path,
                                    const std::string_view (&names)[kN],
                                    Choices style = Choices::kOneOf) {
  for (std::string_view name : names) {
    if (n.IsScalar() && n.Scalar() == name) return name;
  }
  return NotAChoice(n, path, {std::begin(names), std::end(names)}, style);
}

// The name of `v` in `names`, or `none`.
template <typename E, size_t kN>
std::string_view EnumName(E v, const EnumEntry<E> (&names)[kN], std::string_view none = "?") {
  for (const auto& [name, value] : names) {
    if (value == v) return name;
  }
  return none;
}

// The entry of a decoded list whose `key` member is `value` (the pool named "x"), or null.
template <typename T, typename K>
const T* FindBy(const std::vector<T>& list, K T::*key, std::string_view value) {
  const auto it = std::ranges::find(list, value, key);
  return it == list.end() ? nullptr : &*it;
}

// " (did you mean X?)" for the closest of `known`, or "".
std::string Suggest(std::string_view name, const std::vector<std::string_view>& known);

// ---- mappings ----

// Walks the mapping `n` in document order: every key a string, none twice; returns the first error
// of fn(key, value, key_path). Null = empty. Not a mapping: "expected <expected>".
template <typename Fn>
Status ForEachKey(const YAML::Node& n, const std::string& path, std::string_view expected,
                  Fn&& fn) {
  if (n.IsNull()) return Status::Ok();
  if (!n.IsMap()) return Bad(path, "expected " + std::string(expected));
  std::set<std::string> seen;
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) return Bad(path, "keys must be strings");
    const std::string key = kv.first.Scalar();
    const std::string key_path = Join(path, key);
    if (!seen.insert(key).second) return Bad(key_path, "duplicate key");
    RETURN_IF_ERROR(fn(key, kv.second, key_path));
  }
  return Status::Ok();
}

// A mapping of string keys to values decoded by decode(node, path) -> Result<V>, in document
// order; `shape` ends the "expected a mapping of ..." error ("name: value").
template <typename V, typename Decode>
Result<std::vector<std::pair<std::string, V>>> DecodePairs(const YAML::Node& n,
                                                           const std::string& path,
                                                           std::string_view shape,
                                                           const Decode& decode) {
  std::vector<std::pair<std::string, V>> v;
  RETURN_IF_ERROR(ForEachKey(
      n, path, "a mapping of " + std::string(shape),
      [&](const std::string& key, const YAML::Node& value, const std::string& key_path) -> Status {
        ASSIGN_OR_RETURN(V x, decode(value, key_path));
        v.emplace_back(key, std::move(x));
        return Status::Ok();
      }));
  return v;
}
// name: value strings.
Result<std::vector<std::pair<std::string, std::string>>> DecodeStringPairs(const YAML::Node& n,
                                                                           const std::string& path);

// ---- sections: a table of fields per struct ----

template <typename T>
struct Field {
  std::string_view name;
  std::function<Status(const YAML::Node& n, const std::string& path, T* out)> decode;
};
template <typename T>
using Fields = std::vector<Field<T>>;

// Anything with a name and a decode into T (Field<T>, or a richer row such as the replica
// config's, which also prints and checks).
template <typename F, typename T>
concept FieldOf = requires(const F& f, const YAML::Node& n, const std::string& path, T* out) {
  { f.name } -> std::convertible_to<std::string_view>;
  { f.decode(n, path, out) } -> std::same_as<Status>;
};

// Decodes the map `n` field by field; unknown and duplicate keys are errors. Null = nothing set.
template <typename T, typename F>
requires FieldOf<F, T> Status DecodeSection(const std::vector<F>& fields, const YAML::Node& n,
                                            const std::string& path, T* out) {
  return ForEachKey(
      n, path, "a mapping",
      [&](const std::string& name, const YAML::Node& value, const std::string& key_path) -> Status {
        for (const F& f : fields) {
          if (f.name == name) return f.decode(value, key_path, out);
        }
        std::vector<std::string_view> known;
        known.reserve(fields.size());
        for (const F& f : fields) known.push_back(f.name);
        return Bad(key_path, "unknown key" + Suggest(name, known));
      });
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

// ---- field makers ----

// A field whose value decode(node, path) -> Result<V> reads (DecodeStringList, or a config's own
// decoder such as the gateway's DecodePriority), assigned to T::*m (a V, or an optional of one).
template <typename T, typename M, typename V>
Field<T> Decoded(std::string_view name, M T::*m,
                 Result<V> (*decode)(const YAML::Node& n, const std::string& path)) {
  return {name, [m, decode](const YAML::Node& n, const std::string& path, T* out) {
            ASSIGN_OR_RETURN(out->*m, decode(n, path));
            return Status::Ok();
          }};
}
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
template <typename T, typename E, size_t kN>
Field<T> Enum(std::string_view name, E T::*m, const EnumEntry<E> (&names)[kN],
              Choices style = Choices::kOneOf) {
  return {name, [m, &names, style](const YAML::Node& n, const std::string& path, T* out) {
            ASSIGN_OR_RETURN(out->*m, DecodeEnum(n, path, names, style));
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
// A duration given as a number of seconds (fractions allowed) in (lo, hi], stored as D.
template <typename T, typename D>
Field<T> Seconds(std::string_view name, D T::*m, double lo, double hi) {
  return {name, [m, lo, hi](const YAML::Node& n, const std::string& path, T* out) {
            ASSIGN_OR_RETURN(double v, DecodeNumber(n, path, lo, hi, /*lo_open=*/true));
            out->*m = std::chrono::duration_cast<D>(std::chrono::duration<double>(v));
            return Status::Ok();
          }};
}
// A nested section at T::*m (`fields` a function: tables may name each other in any order).
template <typename T, typename M>
Field<T> Sub(std::string_view name, M T::*m, const Fields<M>& (*fields)()) {
  return {name, [m, fields](const YAML::Node& n, const std::string& path, T* out) {
            return DecodeSection(fields(), n, path, &(out->*m));
          }};
}
// An optional section: present (even empty) means set.
template <typename T, typename M>
Field<T> OptSub(std::string_view name, std::optional<M> T::*m, const Fields<M>& (*fields)()) {
  return {name, [m, fields](const YAML::Node& n, const std::string& path, T* out) {
            if (!(out->*m)) (out->*m).emplace();
            return DecodeSection(fields(), n, path, &*(out->*m));
          }};
}
// A list of sections at T::*m.
template <typename T, typename M>
Field<T> SubList(std::string_view name, std::vector<M> T::*m, const Fields<M>& (*fields)()) {
  return {name, [m, fields](const YAML::Node& n, const std::string& path, T* out) {
            return DecodeList(fields(), n, path, &(out->*m));
          }};
}
// A field of the member T::*m, as a field of T (a section whose keys sit beside T's own).
template <typename T, typename M>
Field<T> Within(M T::*m, Field<M> f) {
  return {f.name,
          [m, decode = std::move(f.decode)](const YAML::Node& n, const std::string& path, T* out) {
            return decode(n, path, &(out->*m));
          }};
}

}  // namespace strata::yamlcfg
