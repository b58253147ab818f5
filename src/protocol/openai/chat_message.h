// protocol/openai/chat_message: one chat message of `messages` as a chat template sees it — read
// once for the replica (which renders and tokenizes it) and the gateway (which measures it).
//
//   role      required, a string.
//   content   a string, absent/null, or an array of text parts ({"type": "text", "text": ...})
//             joined into one string; other part types are refused by name.
//   the rest  passed through as sent (name, tool_calls, tool_call_id, ...), in the client's order.
//
// Thread contract: pure functions. Errors: InvalidArgument "messages[i].<field>: <what>" (or
// "messages: ..." for the list) with field() "messages".
#pragma once

#include <cstddef>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/status.h"

namespace strata::protocol {

Result<nlohmann::ordered_json> TemplateMessage(const nlohmann::json& m, size_t i);

// `messages` (the field's value): a non-empty array of at most `max_messages` messages.
Result<std::vector<nlohmann::ordered_json>> TemplateMessages(
    const nlohmann::json& messages, size_t max_messages = std::numeric_limits<size_t>::max());

}  // namespace strata::protocol
