// protocol/openai/request_fields: the request fields that both the replica (`strata serve`) and
// the gateway read from an OpenAI-style body, read once here so both refuse and accept the same
// values with the same errors.
//
//   model, lora   strings ("" when absent or null); which names exist is the reader's business.
//   priority      the body's `priority` (a Priority name, or vLLM's integer: < 0 gold, 0 silver,
//                 > 0 bronze) wins over the x-strata-tier header (a name); nullopt when neither
//                 is set (the caller's default applies: the tenant's, else silver).
//   max_tokens    completions: `max_tokens`; chat: `max_completion_tokens` wins over the
//                 deprecated `max_tokens` (OpenAI's precedence). Both are integers in [lo, hi]:
//                 the replica passes its configured limit as `hi` (and lo 0 only with echo); the
//                 gateway, which does not know the replica's limit, passes kMaxTokensOnWire.
//
// Thread contract: pure functions. Errors: ApiError naming the field (its `param`): the body's
// field, or the header (x-strata-tier) when the header is what is wrong.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "http/openai_error.h"
#include "protocol/wire.h"

namespace strata::protocol {

// The largest max_tokens any reader accepts (the replica's own limit is lower).
inline constexpr int64_t kMaxTokensOnWire = INT32_MAX;

struct ModelFields {
  std::string model;  // "" : the replica's served model (or the gateway's routes decide)
  std::string lora;   // "" : none named
};
http::ApiResult<ModelFields> ReadModelFields(const nlohmann::json& body);

http::ApiResult<std::optional<Priority>> ReadPriority(const nlohmann::json& body,
                                                      std::string_view tier_header);

struct MaxTokensBounds {
  int64_t lo = 1;
  int64_t hi = kMaxTokensOnWire;
};
// nullopt when the body sets neither field (the caller's default applies).
http::ApiResult<std::optional<int64_t>> ReadMaxTokens(const nlohmann::json& body, bool chat,
                                                      MaxTokensBounds bounds);

}  // namespace strata::protocol
