#include "yamlcfg/section_codec.h"

#include <algorithm>

#include "base/memory_size.h"

namespace strata::yamlcfg {
namespace {

void EncodeDouble(const double& v, YAML::Emitter& out) { out << fmt::format("{}", v); }
void EncodeBool(const bool& v, YAML::Emitter& out) { out << (v ? "true" : "false"); }
void EncodeString(const std::string& v, YAML::Emitter& out) { out << YAML::DoubleQuoted << v; }
void EncodeStringList(const std::vector<std::string>& v, YAML::Emitter& out) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const auto& s : v) out << YAML::DoubleQuoted << s;
  out << YAML::EndSeq;
}

}  // namespace

Check<std::string> OneOf(std::vector<std::string> allowed) {
  return [allowed = std::move(allowed)](const std::string& v) {
    if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return std::string();
    std::string list;
    for (const std::string& a : allowed) list += (list.empty() ? "\"" : ", \"") + a + "\"";
    return fmt::format("must be one of {}, got \"{}\"", list, v);
  };
}

Codec<double> NumIn(double lo, double hi) {
  return {[lo, hi](const YAML::Node& n, const std::string& path) {
            return DecodeNumber(n, path, lo, hi);
          },
          EncodeDouble, InRange(lo, hi)};
}

Codec<bool> BoolCodec() { return {DecodeBool, EncodeBool, {}}; }
Codec<std::string> StringCodec() { return {DecodeString, EncodeString, {}}; }
Codec<std::vector<std::string>> StringListCodec() {
  return {DecodeStringList, EncodeStringList, {}};
}

void EncodeSize(const uint64_t& v, YAML::Emitter& out) {
  out << (v == 0 ? std::string("0") : FormatMemorySize(v));
}
Codec<uint64_t> SizeCodec() { return {DecodeSize, EncodeSize, {}}; }

}  // namespace strata::yamlcfg
