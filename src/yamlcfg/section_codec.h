// yamlcfg/section_codec: a configuration tree as tables — one table (Section<S>) per section
// struct S, one row (Key<S>) per key, each row a few small functions built from a member pointer:
// decode a node (through yaml_decode.h's DecodeSection, which refuses unknown and duplicate keys),
// print the value, check its range (errors naming the key's path and, when asked, its command-line
// flag) and list the leaf paths. Decoding, printing, validating and the key list walk the same
// tables, so a key added to a table is parsed, printed, validated and documented at once. Used by
// the replica config (engine/serving's `engine:` section, replica/'s whole file).
//
// Thread contract: tables are immutable once built (function-local statics); the functions are
// pure. Errors: Status values (InvalidArgument naming the key path); encoders cannot fail.
#pragma once

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/status.h"
#include "yamlcfg/yaml_decode.h"

namespace strata::yamlcfg {

// ---- range checks: "" when the value is fine, else what is wrong ----

template <typename V>
using Check = std::function<std::string(const V&)>;

template <typename V>
Check<V> InRange(V lo, V hi) {
  return [lo, hi](const V& v) {
    return v >= lo && v <= hi ? std::string()
                              : fmt::format("must be in [{}, {}], got {}", lo, hi, v);
  };
}

// A string among `allowed` ("must be one of "a", "b", got "c"").
Check<std::string> OneOf(std::vector<std::string> allowed);

// ---- value codecs: YAML node <-> one C++ value (decoding is yaml_decode.h's) ----

template <typename V>
struct Codec {
  std::function<Result<V>(const YAML::Node& n, const std::string& path)> decode;
  void (*encode)(const V& v, YAML::Emitter& out);
  Check<V> check;  // none: any value of the type
};

template <typename V>
void EncodeInt(const V& v, YAML::Emitter& out) {
  out << static_cast<long long>(v);
}
// An integer in [lo, hi].
template <typename V>
Codec<V> IntIn(V lo, V hi) {
  return {[lo, hi](const YAML::Node& n, const std::string& path) -> Result<V> {
            ASSIGN_OR_RETURN(
                int64_t v, DecodeInt(n, path, static_cast<int64_t>(lo), static_cast<int64_t>(hi)));
            return static_cast<V>(v);
          },
          EncodeInt<V>, InRange(lo, hi)};
}

// A finite number in [lo, hi], printed shortest round trip.
Codec<double> NumIn(double lo, double hi);
Codec<bool> BoolCodec();
Codec<std::string> StringCodec();                   // printed double-quoted
Codec<std::vector<std::string>> StringListCodec();  // a flow list of quoted strings
Codec<uint64_t> SizeCodec();                        // DecodeSize; printed "4GiB", 0 as `0`
void EncodeSize(const uint64_t& v, YAML::Emitter& out);

// An enumeration by name, from a table of yaml_decode.h's EnumEntry.
template <const auto& kNames>
auto EnumOf() {
  using E = std::remove_cvref_t<decltype(kNames[0].second)>;
  return Codec<E>{
      [](const YAML::Node& n, const std::string& path) { return DecodeEnum(n, path, kNames); },
      [](const E& v, YAML::Emitter& out) { out << std::string(EnumName(v, kNames)); },
      {}};
}

// ---- keys and sections ----

// One key of a section of type S: a leaf value or a nested section.
template <typename S>
struct Key {
  std::string_view name;
  // Sets *s from `n` (`path` is this key's full path, for errors).
  std::function<Status(const YAML::Node& n, const std::string& path, S* s)> decode;
  // Writes the value (the emitter is positioned after the key).
  std::function<void(const S& s, YAML::Emitter& out)> encode;
  // Checks the value; errors name `path`, and the key's flag when `with_flags`.
  std::function<Status(const S& s, const std::string& path, bool with_flags)> check;
  // Appends the leaf paths under `path`.
  std::function<void(const std::string& path, std::vector<std::string>* out)> paths;
  // Whether the key is printed (an absent optional section is not).
  std::function<bool(const S& s)> present = [](const S&) { return true; };
};

template <typename S>
using Section = std::vector<Key<S>>;

template <typename S>
void EncodeSection(const Section<S>& keys, const S& s, YAML::Emitter& out) {
  out << YAML::BeginMap;
  for (const auto& k : keys) {
    if (!k.present(s)) continue;
    out << YAML::Key << std::string(k.name) << YAML::Value;
    k.encode(s, out);
  }
  out << YAML::EndMap;
}

template <typename S>
Status CheckSection(const Section<S>& keys, const S& s, const std::string& path, bool with_flags) {
  for (const auto& k : keys) {
    if (k.present(s)) RETURN_IF_ERROR(k.check(s, Join(path, k.name), with_flags));
  }
  return Status::Ok();
}

template <typename S>
void SectionPaths(const Section<S>& keys, const std::string& path, std::vector<std::string>* out) {
  for (const auto& k : keys) k.paths(Join(path, k.name), out);
}

// A leaf: S::*m decoded with `codec`, checked with `check` (none: the codec's own check).
template <typename S, typename V>
Key<S> Leaf(std::string_view name, std::string_view flag, V S::*m, Codec<V> codec,
            Check<V> check = {}) {
  Key<S> k;
  k.name = name;
  if (!check) check = codec.check;
  auto checked = [check, flag](const V& v, const std::string& path, bool with_flags) {
    const std::string what = check ? check(v) : std::string();
    if (what.empty()) return Status::Ok();
    return Bad(with_flags && !flag.empty() ? path + " (" + std::string(flag) + ")" : path, what);
  };
  k.decode = [m, codec, checked](const YAML::Node& n, const std::string& path, S* s) {
    ASSIGN_OR_RETURN(V v, codec.decode(n, path));
    RETURN_IF_ERROR(checked(v, path, false));
    s->*m = std::move(v);
    return Status::Ok();
  };
  k.encode = [m, codec](const S& s, YAML::Emitter& out) { codec.encode(s.*m, out); };
  k.check = [m, checked](const S& s, const std::string& path, bool with_flags) {
    return checked(s.*m, path, with_flags);
  };
  k.paths = [](const std::string& path, std::vector<std::string>* out) { out->push_back(path); };
  return k;
}

// A nested section T at S::*m.
template <typename S, typename T>
Key<S> Sub(std::string_view name, T S::*m, const Section<T>& keys) {
  Key<S> k;
  k.name = name;
  k.decode = [m, &keys](const YAML::Node& n, const std::string& path, S* s) {
    return DecodeSection(keys, n, path, &(s->*m));
  };
  k.encode = [m, &keys](const S& s, YAML::Emitter& out) { EncodeSection(keys, s.*m, out); };
  k.check = [m, &keys](const S& s, const std::string& path, bool with_flags) {
    return CheckSection(keys, s.*m, path, with_flags);
  };
  k.paths = [&keys](const std::string& path, std::vector<std::string>* out) {
    SectionPaths(keys, path, out);
  };
  return k;
}

// An optional section: present in the YAML (even empty) means enabled.
template <typename S, typename T>
Key<S> OptionalSub(std::string_view name, std::optional<T> S::*m, const Section<T>& keys) {
  Key<S> k;
  k.name = name;
  k.decode = [m, &keys](const YAML::Node& n, const std::string& path, S* s) {
    if (!(s->*m)) (s->*m).emplace();
    return DecodeSection(keys, n, path, &*(s->*m));
  };
  k.encode = [m, &keys](const S& s, YAML::Emitter& out) { EncodeSection(keys, *(s.*m), out); };
  k.check = [m, &keys](const S& s, const std::string& path, bool with_flags) {
    return CheckSection(keys, *(s.*m), path, with_flags);
  };
  k.paths = [&keys](const std::string& path, std::vector<std::string>* out) {
    SectionPaths(keys, path, out);
  };
  k.present = [m](const S& s) { return (s.*m).has_value(); };
  return k;
}

// The keys of T::*m's section spliced into S's own (the tiers' limits sit beside their other keys).
template <typename S, typename T>
Section<S> Inline(T S::*m, const Section<T>& keys) {
  Section<S> out;
  for (const Key<T>& inner : keys) {
    Key<S> k;
    k.name = inner.name;
    k.decode = [m, inner](const YAML::Node& n, const std::string& path, S* s) {
      return inner.decode(n, path, &(s->*m));
    };
    k.encode = [m, inner](const S& s, YAML::Emitter& o) { inner.encode(s.*m, o); };
    k.check = [m, inner](const S& s, const std::string& path, bool with_flags) {
      return inner.check(s.*m, path, with_flags);
    };
    k.paths = inner.paths;
    out.push_back(std::move(k));
  }
  return out;
}

template <typename S>
Section<S> Concat(Section<S> a, const Section<S>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace strata::yamlcfg
