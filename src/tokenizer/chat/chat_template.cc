#include "tokenizer/chat/chat_template.h"

#include <array>

#include "tokenizer/chat/ast.h"
#include "tokenizer/chat/interpreter.h"
#include "tokenizer/chat/lexer.h"
#include "tokenizer/chat/parser.h"

namespace strata::tokenizer::chat {

struct ChatTemplate::Impl {
  explicit Impl(std::string text) : source(std::move(text)) {}
  SourceMap source;
  Body body;
};

ChatTemplate::~ChatTemplate() = default;

Status ChatTemplateLimits::Validate() const {
  if (max_steps == 0 || max_steps > (uint64_t{1} << 40)) {
    return Status::InvalidArgument("chat template limits: max_steps must be in [1, 2^40]");
  }
  if (max_call_depth < 1 || max_call_depth > 10000) {
    return Status::InvalidArgument("chat template limits: max_call_depth must be in [1, 10000]");
  }
  if (max_nesting < 4 || max_nesting > 10000) {
    return Status::InvalidArgument("chat template limits: max_nesting must be in [4, 10000]");
  }
  if (max_output_bytes == 0 || max_source_bytes == 0) {
    return Status::InvalidArgument(
        "chat template limits: max_output_bytes and max_source_bytes must be positive");
  }
  return Status::Ok();
}

namespace {

Result<std::string> FormatTime(const std::tm& tm, std::string_view format) {
  if (format.size() > 256) return Status::InvalidArgument("strftime_now: format too long");
  std::array<char, 1024> buf{};
  std::string fmt(format);
  size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  if (n == 0 && !fmt.empty()) return std::string();
  return std::string(buf.data(), n);
}

}  // namespace

StrftimeFn SystemClockStrftime() {
  return [](std::string_view format) -> Result<std::string> {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    return FormatTime(tm, format);
  };
}

StrftimeFn FixedClockStrftime(std::time_t t) {
  return [t](std::string_view format) -> Result<std::string> {
    std::tm tm{};
    gmtime_r(&t, &tm);
    return FormatTime(tm, format);
  };
}

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::Parse(std::string_view source,
                                                          const ChatTemplateLimits& limits) {
  RETURN_IF_ERROR(limits.Validate());
  if (source.size() > limits.max_source_bytes) {
    return Status::OutOfRange("chat template is " + std::to_string(source.size()) +
                              " bytes, over the limit of " +
                              std::to_string(limits.max_source_bytes));
  }
  std::unique_ptr<ChatTemplate> t(new ChatTemplate());
  t->limits_ = limits;
  t->impl_ = std::make_unique<Impl>(NormaliseSource(source));
  // Every token needs at least one source byte, so this bound never rejects a valid template.
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(t->impl_->source, source.size() + 2));
  ASSIGN_OR_RETURN(t->impl_->body, ParseTemplate(t->impl_->source, tokens, limits.max_nesting));
  return t;
}

Result<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context,
                                         const RenderOptions& options) const {
  if (!context.is_object()) {
    return Status::Internal("chat template context must be a JSON object");
  }
  ASSIGN_OR_RETURN(Value ctx, Value::FromJson(context));
  Interpreter in(impl_->source, limits_,
                 options.strftime_now ? options.strftime_now : SystemClockStrftime());
  return in.Render(impl_->body, ctx);
}

Result<std::string> ChatTemplate::Render(const nlohmann::json& context,
                                         const RenderOptions& options) const {
  if (!context.is_object()) {
    return Status::Internal("chat template context must be a JSON object");
  }
  Interpreter in(impl_->source, limits_,
                 options.strftime_now ? options.strftime_now : SystemClockStrftime());
  ASSIGN_OR_RETURN(Value ctx, Value::FromJson(context));
  return in.Render(impl_->body, ctx);
}

Result<nlohmann::ordered_json> BuildChatContext(const ChatInputs& inputs) {
  if (!inputs.messages.is_array()) {
    return Status::InvalidArgument("chat context: messages must be an array");
  }
  if (!inputs.tools.is_null() && !inputs.tools.is_array()) {
    return Status::InvalidArgument("chat context: tools must be an array or null");
  }
  if (!inputs.variables.is_object()) {
    return Status::InvalidArgument("chat context: variables must be an object");
  }
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = inputs.messages;
  ctx["tools"] = inputs.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = inputs.add_generation_prompt;
  ctx["bos_token"] = inputs.bos_token;
  ctx["eos_token"] = inputs.eos_token;
  for (const auto& [k, v] : inputs.variables.items()) ctx[k] = v;
  return ctx;
}

}  // namespace strata::tokenizer::chat
