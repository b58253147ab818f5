#include "protocol/openai/chat_message.h"

#include <fmt/format.h>

#include <string>

#include "http/json_fields.h"

namespace strata::protocol {

using nlohmann::json;

namespace {
Status Bad(std::string_view where, std::string_view what) {
  return Status::InvalidArgument(fmt::format("{}: {}", where, what)).WithField("messages");
}

// Text content parts joined; anything else is refused by name.
Result<std::string> JoinTextParts(const json& parts, std::string_view where) {
  std::string text;
  for (const json& part : parts) {
    const http::Fields p(part);
    const json* type = p.Find("type");
    const json* part_text = p.Find("text");
    if (!type || !type->is_string() || *type != "text" || !part_text || !part_text->is_string())
      return Bad(where, "only text content parts are supported");
    text += part_text->get_ref<const std::string&>();  // json-access: is_string checked
  }
  return text;
}
}  // namespace

Result<nlohmann::ordered_json> TemplateMessage(const json& m, size_t i) {
  const std::string where = fmt::format("messages[{}]", i);
  if (!m.is_object()) return Bad(where, "must be an object");
  const http::Fields fields(m);
  const json* role = fields.Find("role");
  if (!role || !role->is_string()) return Bad(where + ".role", "must be a string");
  nlohmann::ordered_json om = nlohmann::ordered_json::parse(m.dump());
  const json* c = fields.Find("content");
  if (!c) return om;
  if (c->is_array()) {
    ASSIGN_OR_RETURN(std::string text, JoinTextParts(*c, where + ".content"));
    om["content"] = std::move(text);
  } else if (!c->is_string()) {
    return Bad(where + ".content", "must be a string, an array of text parts or null");
  }
  return om;
}

Result<std::vector<nlohmann::ordered_json>> TemplateMessages(const json& messages,
                                                             size_t max_messages) {
  if (!messages.is_array()) return Bad("messages", "must be an array");
  if (messages.empty()) return Bad("messages", "must contain at least one message");
  if (messages.size() > max_messages)
    return Bad("messages", fmt::format("more than {} messages", max_messages));
  std::vector<nlohmann::ordered_json> out;
  out.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    ASSIGN_OR_RETURN(auto om, TemplateMessage(messages[i], i));
    out.push_back(std::move(om));
  }
  return out;
}

}  // namespace strata::protocol
