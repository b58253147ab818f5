// yamlcfg/wrong_kind_sweep: the wrong-type sweep the tests of every strict config decoder run
// (replica config, gateway config, deployment spec). Test-only (header-only, no gtest): it returns
// what broke the contract and the test asserts that nothing did.
//
// Every key of a valid document (in mappings, and in mappings inside lists), in turn, gets each
// of kWrongKinds as its value; the document is re-emitted and parsed. The contract:
//   - an error is InvalidArgument and names the key: its full path first ("pools[0].name: ...")
//     where the value had to be refused, else at least the key's own name (a cross-field check may
//     report a neighbour: "pools[1].version: model 'tiny' has no version ...");
//   - it had to be refused where its kind differs from the document's (a scalar, a list or a
//     mapping in place of another; null excepted: it may mean empty or absent), and where a
//     non-number or a non-finite one replaces a plain number or boolean (a negative one may be in
//     range).
// Thread contract: stateless functions.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "yamlcfg/yaml_decode.h"

namespace strata::yamlcfg {

// A scalar that is no number, a negative and a non-finite number, a list, a mapping, null.
inline constexpr std::string_view kWrongKinds[] = {"not-a-number", "-7",     "1e400",
                                                   "[1, 2]",       "{x: 1}", "~"};

struct SweepResult {
  std::vector<std::string> paths;     // every key swept, in document order
  int cases = 0;                      // documents parsed
  int errors = 0;                     // of them refused
  std::vector<std::string> failures;  // what broke the contract, one line each
};

namespace sweep_internal {

enum class Kind { kNull, kScalar, kList, kMap };

inline Kind KindOf(const YAML::Node& n) {
  if (n.IsMap()) return Kind::kMap;
  if (n.IsSequence()) return Kind::kList;
  if (n.IsScalar()) return Kind::kScalar;
  return Kind::kNull;
}

// A plain (unquoted) scalar that reads as a number or a boolean.
inline bool IsTyped(const YAML::Node& n) {
  double d = 0;
  bool b = false;
  return n.IsScalar() && n.Tag() == "?" &&
         (YAML::convert<double>::decode(n, d) || YAML::convert<bool>::decode(n, b));
}

inline bool IsFiniteNumber(const YAML::Node& n) {
  double d = 0;
  return n.IsScalar() && YAML::convert<double>::decode(n, d) && std::isfinite(d);
}

struct Sweep {
  YAML::Node root;
  const std::function<Status(const std::string& yaml)>* parse;
  const std::set<std::string>* opaque;
  SweepResult* out;

  void Try(const std::string& path, const std::string& key, const YAML::Node& original,
           std::string_view wrong) {
    const YAML::Node w = YAML::Load(std::string(wrong));
    const Kind was = KindOf(original), now = KindOf(w);
    const bool must_fail = (now != Kind::kNull && was != Kind::kNull && now != was) ||
                           (now == Kind::kScalar && IsTyped(original) && !IsFiniteNumber(w));
    YAML::Emitter text;
    text << root;
    const Status s = (*parse)(text.c_str());
    ++out->cases;
    const std::string what = path + " = " + std::string(wrong) + ": ";
    if (s.ok()) {
      if (must_fail) out->failures.push_back(what + "accepted");
      return;
    }
    ++out->errors;
    const std::string& m = s.message();
    if (s.code() != StatusCode::kInvalidArgument) {
      out->failures.push_back(what + "not InvalidArgument: " + s.ToString());
    } else if (must_fail ? m.rfind(path, 0) != 0 : m.find(key) == std::string::npos) {
      out->failures.push_back(what + "the error does not name it: " + m);
    }
  }

  void Walk(YAML::Node node, const std::string& path) {
    if (node.IsSequence()) {
      for (size_t i = 0; i < node.size(); ++i) Walk(node[i], At(path, i));
      return;
    }
    if (!node.IsMap()) return;
    std::vector<std::string> keys;
    for (const auto& kv : node) keys.push_back(kv.first.as<std::string>());
    for (const std::string& key : keys) {
      const std::string key_path = Join(path, key);
      const YAML::Node original = YAML::Clone(node[key]);
      out->paths.push_back(key_path);
      for (std::string_view wrong : kWrongKinds) {
        node[key] = YAML::Load(std::string(wrong));
        Try(key_path, key, original, wrong);
      }
      node[key] = original;
      if (!opaque->contains(key_path)) Walk(node[key], key_path);
    }
  }
};

}  // namespace sweep_internal

// Sweeps `yaml` (a document `parse` accepts) as above; keys whose full path is in `opaque` (YAML
// kept as text, checked by another parser later) are swept but not walked into.
inline SweepResult SweepWrongKinds(const std::string& yaml,
                                   const std::function<Status(const std::string& yaml)>& parse,
                                   const std::set<std::string>& opaque = {}) {
  SweepResult out;
  sweep_internal::Sweep s{YAML::Load(yaml), &parse, &opaque, &out};
  if (const Status ok = parse(yaml); !ok.ok()) {
    out.failures.push_back("the document itself is refused: " + ok.message());
    return out;
  }
  s.Walk(s.root, "");
  return out;
}

}  // namespace strata::yamlcfg
