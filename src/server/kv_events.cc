#include "server/kv_events.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>

#include "cachekey/block_hash.h"
#include "protocol/wire.h"

namespace strata::server {
namespace {

// A decimal unsigned integer that fits uint64_t; nullopt otherwise.
std::optional<uint64_t> ParseDecimal(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  for (char c : s)
    if (c < '0' || c > '9') return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// A parameter name fit for an error message (a client's bytes, shortened and printable).
std::string Printable(std::string_view name) {
  std::string out;
  for (char c : name.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

}  // namespace

http::ApiResult<KvEventsQuery> ParseKvEventsQuery(std::string_view query) {
  KvEventsQuery q;
  bool seen_since = false, seen_max = false;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (part.empty()) continue;  // "a=1&&b=2", a trailing '&'
    const size_t eq = part.find('=');
    const std::string_view key = part.substr(0, eq);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view{} : part.substr(eq + 1);
    bool* seen = key == "since" ? &seen_since : key == "max" ? &seen_max : nullptr;
    if (seen == nullptr)
      return http::ApiError::Param(Printable(key),
                                   "is not a parameter of /v1/kv/events (since, max)");
    if (*seen) return http::ApiError::Param(key, "is given more than once");
    *seen = true;
    const std::optional<uint64_t> v = ParseDecimal(value);
    if (key == "since") {
      if (!v) return http::ApiError::Param("since", "must be a cursor (a decimal integer >= 0)");
      q.since = *v;
    } else {
      if (!v || *v == 0)
        return http::ApiError::Param(
            "max",
            fmt::format("must be a decimal integer >= 1 (at most {} are used)", kKvEventsHardMax));
      q.max = static_cast<size_t>(std::min<uint64_t>(*v, kKvEventsHardMax));
    }
  }
  return q;
}

std::string HexBytes(std::span<const uint8_t> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (uint8_t b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

nlohmann::ordered_json KvEventsJson(const engine::kv::KvEventPage& page, const KvKeyInfo& info) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (const engine::kv::KvEventGroup& g : page.events) {
    nlohmann::ordered_json hashes = nlohmann::ordered_json::array();
    for (const cachekey::BlockHash& h : g.hashes) hashes.push_back(cachekey::HashToHex(h));
    nlohmann::ordered_json e;
    e["op"] = engine::kv::KvEventOpName(g.op);
    e["tier"] = protocol::KvTierName(g.tier);
    e["hashes"] = std::move(hashes);
    events.push_back(std::move(e));
  }
  nlohmann::ordered_json j;
  j["instance"] = info.instance;
  j["block_size"] = info.block_size;
  j["model_salt"] = HexBytes(info.model_salt);
  j["cursor"] = page.cursor;
  j["reset"] = page.reset;
  j["events"] = std::move(events);
  return j;
}

}  // namespace strata::server
