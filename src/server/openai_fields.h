// What Strata does with every field of an OpenAI /v1/completions and /v1/chat/completions request:
// the table (RequestFieldTable) that marks each field, per endpoint, implemented, accepted and
// ignored (metadata), unsupported or not supported yet, and the check that refuses an unsupported
// field by name. Plus the parser of `logit_bias`.
//
// Contract: CheckFieldSupport answers 400 (InvalidArgument, `param` = the field) for a field marked
// unsupported / not yet that is present with a value other than null or its default-equivalent
// (e.g. `store: false`, `response_format: {"type":"text"}`, `suffix: ""`); the message is
// "<field>: not supported ..." or "<field>: not supported yet ...". Ignored (metadata) fields are
// type-checked and have no effect. Implemented fields are read by openai_request.cc's field
// parsers (the table only names them). Fields in no table (unknown, non-OpenAI) are ignored, as
// vLLM does by default. src/server/README.md documents the same table for users.
// Thread contract: immutable table and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>
#include <vector>

#include "engine/sampler/sampler.h"
#include "http/json_fields.h"
#include "http/openai_error.h"
#include "server/openai_request.h"

namespace strata::server {

enum class FieldSupport : uint8_t {
  kImplemented,  // does what the field says
  kIgnored,      // metadata: accepted (type-checked), no effect
  kUnsupported,  // 400 "<field>: not supported" unless null / default-equivalent
  kNotYet,       // 400 "<field>: not supported yet" (structured output, tools; echo: other branch)
};
std::string_view FieldSupportName(FieldSupport s);  // "implemented", "ignored", ...

// Endpoint masks.
inline constexpr unsigned kOnCompletions = 1u << 0, kOnChat = 1u << 1,
                          kOnBoth = kOnCompletions | kOnChat;

struct FieldSpec {
  std::string_view name;
  unsigned endpoints = kOnBoth;
  FieldSupport support = FieldSupport::kImplemented;
  // Not null for ignored / unsupported / not-yet fields: the field is present (not null); returns
  // the 400 for a refused value (or a wrong type), OK for an accepted one.
  http::ApiError (*check)(const http::Fields& body, std::string_view key) = nullptr;
  // JSON texts for tests and docs: a value that is refused ("" when none is) and one that is
  // accepted ("" when the check accepts none).
  std::string_view refused;
  std::string_view accepted;
};

// Every OpenAI field of the two endpoints plus Strata's / vLLM's extensions.
std::span<const FieldSpec> RequestFieldTable();
bool OnEndpoint(const FieldSpec& spec, Endpoint endpoint);

// Runs the checks of the fields of `endpoint` that are present in `body` (an object).
http::ApiError CheckFieldSupport(Endpoint endpoint, const nlohmann::json& body);

// `logit_bias`: an object {"<token id>": bias}; ids are decimal integers in [0, n_vocab), biases
// numbers in [-100, 100]. Absent or null: empty. Errors name `logit_bias`. Sorted by id.
http::ApiResult<std::vector<engine::sampler::LogitBias>> ParseLogitBias(const nlohmann::json& body,
                                                                        size_t n_vocab);

}  // namespace strata::server
