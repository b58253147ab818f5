// trace/trace_context: W3C traceparent parse/format and random ids (see trace_context.h).
#include "trace/trace_context.h"

#include <algorithm>
#include <random>

namespace strata::trace {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

// Lower-case hex digit value, or -1 (upper case is invalid in traceparent).
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

template <size_t kN>
std::string ToHex(const std::array<uint8_t, kN>& bytes) {
  std::string out(2 * kN, '0');
  for (size_t i = 0; i < kN; ++i) {
    out[2 * i] = kHexDigits[bytes[i] >> 4];
    out[2 * i + 1] = kHexDigits[bytes[i] & 0xf];
  }
  return out;
}

// Parses exactly 2 * kN lower-case hex digits into `out`.
template <size_t kN>
bool FromHex(std::string_view hex, std::array<uint8_t, kN>* out) {
  if (hex.size() != 2 * kN) return false;
  for (size_t i = 0; i < kN; ++i) {
    const int hi = HexValue(hex[2 * i]);
    const int lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

template <size_t kN>
bool AnyNonZero(const std::array<uint8_t, kN>& bytes) {
  return std::any_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b != 0; });
}

std::mt19937_64& Generator() {
  thread_local std::mt19937_64 gen = [] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }();
  return gen;
}

template <size_t kN>
void FillRandom(std::array<uint8_t, kN>* bytes) {
  do {
    for (size_t i = 0; i < kN; i += 8) {
      uint64_t v = Generator()();
      for (size_t j = i; j < kN && j < i + 8; ++j) {
        (*bytes)[j] = static_cast<uint8_t>(v);
        v >>= 8;
      }
    }
  } while (!AnyNonZero(*bytes));
}

}  // namespace

bool TraceId::valid() const { return AnyNonZero(bytes); }
std::string TraceId::Hex() const { return ToHex(bytes); }
bool SpanId::valid() const { return AnyNonZero(bytes); }
std::string SpanId::Hex() const { return ToHex(bytes); }

std::optional<TraceContext> ParseTraceparent(std::string_view traceparent,
                                             std::string_view tracestate) {
  // version(2) - trace-id(32) - parent-id(16) - flags(2) = 55 characters for version 00.
  constexpr size_t kV0Size = 55;
  if (traceparent.size() < kV0Size) return std::nullopt;
  if (traceparent[2] != '-' || traceparent[35] != '-' || traceparent[52] != '-') {
    return std::nullopt;
  }
  std::array<uint8_t, 1> version{};
  if (!FromHex(traceparent.substr(0, 2), &version) || version[0] == 0xff) return std::nullopt;
  // Version 00 is exactly 55 characters; a later version may append "-..." after the four fields.
  if (version[0] == 0 && traceparent.size() != kV0Size) return std::nullopt;
  if (version[0] != 0 && traceparent.size() > kV0Size && traceparent[kV0Size] != '-') {
    return std::nullopt;
  }
  TraceContext ctx;
  std::array<uint8_t, 1> flags{};
  if (!FromHex(traceparent.substr(3, 32), &ctx.trace_id.bytes) ||
      !FromHex(traceparent.substr(36, 16), &ctx.span_id.bytes) ||
      !FromHex(traceparent.substr(53, 2), &flags)) {
    return std::nullopt;
  }
  if (!ctx.trace_id.valid() || !ctx.span_id.valid()) return std::nullopt;
  ctx.sampled = (flags[0] & 0x01) != 0;
  if (tracestate.size() <= kMaxTracestateBytes) ctx.tracestate = std::string(tracestate);
  return ctx;
}

std::string FormatTraceparent(const TraceContext& ctx) {
  std::string out = "00-";
  out += ctx.trace_id.Hex();
  out += '-';
  out += ctx.span_id.Hex();
  out += ctx.sampled ? "-01" : "-00";
  return out;
}

TraceId NewTraceId() {
  TraceId id;
  FillRandom(&id.bytes);
  return id;
}

SpanId NewSpanId() {
  SpanId id;
  FillRandom(&id.bytes);
  return id;
}

}  // namespace strata::trace
