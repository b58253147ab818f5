#include "protocol/openai/request_fields.h"

#include "http/json_fields.h"

namespace strata::protocol {

using http::ApiError;
using nlohmann::json;

http::ApiResult<ModelFields> ReadModelFields(const json& body) {
  const http::Fields f(body);
  ModelFields out;
  RETURN_IF_API_ERROR(f.String("model", &out.model));
  RETURN_IF_API_ERROR(f.String("lora", &out.lora));
  return out;
}

http::ApiResult<std::optional<Priority>> ReadPriority(const json& body,
                                                      std::string_view tier_header) {
  if (const json* p = http::Fields(body).Find("priority")) {
    if (p->is_number_integer()) {
      ASSIGN_OR_RETURN_API(int64_t v, http::AsInt(*p, "priority", INT64_MIN, INT64_MAX));
      return std::optional<Priority>(PriorityFromInt(v));
    }
    if (!p->is_string())
      return ApiError::Param("priority", "must be gold, silver or bronze, or an integer");
    auto name = ParsePriorityName(p->get_ref<const std::string&>());  // json-access: is_string
    if (!name.ok()) return ApiError::Param("priority", name.status().message());
    return std::optional<Priority>(*name);
  }
  if (tier_header.empty()) return std::optional<Priority>();
  auto name = ParsePriorityName(tier_header);
  if (!name.ok()) return ApiError::Param(kHeaderTier, name.status().message());
  return std::optional<Priority>(*name);
}

http::ApiResult<std::optional<int64_t>> ReadMaxTokens(const json& body, bool chat,
                                                      MaxTokensBounds bounds) {
  const http::Fields f(body);
  std::optional<int64_t> max_tokens;
  RETURN_IF_API_ERROR(f.Int("max_tokens", bounds.lo, bounds.hi, &max_tokens));
  if (chat) {
    std::optional<int64_t> mct;
    RETURN_IF_API_ERROR(
        f.Int("max_completion_tokens", std::max<int64_t>(bounds.lo, 1), bounds.hi, &mct));
    if (mct) max_tokens = mct;
  }
  return max_tokens;
}

}  // namespace strata::protocol
