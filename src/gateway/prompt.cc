// Prompt measurement. The shapes each endpoint accepts follow the server's parsers
// (server/openai_request.cc CompletionPrompts/ChatPrompt, server/api.cc EmbeddingInputs); the
// gateway reads only the first prompt of a batch, since that is what routing and prefix affinity
// key on. Every field is read through http/json_fields.h.
#include "gateway/prompt.h"

#include <fmt/format.h>

#include <limits>

#include "gguf/gguf.h"
#include "http/json_fields.h"
#include "protocol/openai/chat_message.h"
#include "tokenizer/chat/builtin_templates.h"
#include "tokenizer/chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace strata::gateway {
namespace {

using nlohmann::json;

// Without a tokenizer any non-negative int32 id is accepted (the replica checks its vocabulary).
constexpr size_t kAnyVocab = static_cast<size_t>(std::numeric_limits<int32_t>::max()) + 1;

// The first prompt of a body: text, or token ids, or why neither.
struct RawPrompt {
  bool is_ids = false;
  std::string text;
  std::vector<int32_t> ids;
  std::string error;
};

RawPrompt Fail(std::string what) {
  RawPrompt r;
  r.error = std::move(what);
  return r;
}

// One prompt element: a string or an array of ids (`param` names it in errors).
RawPrompt OneTextOrIds(const json& v, std::string_view param, size_t n_vocab) {
  RawPrompt r;
  if (v.is_string()) {
    auto s = http::AsString(v, param);
    if (!s.ok()) return Fail(s.error().status().message());
    r.text = std::move(*s);
    return r;
  }
  if (v.is_array()) {
    auto ids = http::TokenIds(v, param, n_vocab);
    if (!ids.ok()) return Fail(ids.error().status().message());
    r.is_ids = true;
    r.ids = std::move(*ids);
    return r;
  }
  return Fail(std::string(param) + ": must be a string or an array of token ids");
}

// A prompt field that takes a string, ids, or a batch of those, of which the first is read.
struct BatchField {
  std::string_view name;      // "prompt" | "input"
  bool integer_ids;           // ids: an array whose first element is an integer (else any number)
  std::string_view in_batch;  // how errors name the first of a batch of several
  std::string_view shape;     // the error when the field is none of the shapes
};

// /v1/completions `prompt`.
constexpr BatchField kCompletionPrompt = {
    "prompt", true, "prompt[0]",
    "prompt: must be a string, an array of token ids, or a non-empty array of strings or of "
    "token-id arrays"};
// /v1/embeddings `input`.
constexpr BatchField kEmbeddingInput = {
    "input", false, "input",
    "input: must be a string, an array of token ids, or an array of strings or token-id arrays"};

RawPrompt FirstOfBatch(const json& body, const BatchField& f, size_t n_vocab) {
  const json* p = http::Fields(body).Find(f.name);
  if (p == nullptr) return Fail(std::string(f.name) + ": is required");
  const bool ids = p->is_array() && !p->empty() &&
                   (f.integer_ids ? p->front().is_number_integer() : p->front().is_number());
  if (p->is_string() || ids) return OneTextOrIds(*p, f.name, n_vocab);
  if (!p->is_array() || p->empty()) return Fail(std::string(f.shape));
  return OneTextOrIds(p->front(), p->size() == 1 ? f.name : f.in_batch, n_vocab);
}

RawPrompt TextPrompt(Endpoint e, const json& body, size_t n_vocab) {
  return FirstOfBatch(body, e == Endpoint::kEmbeddings ? kEmbeddingInput : kCompletionPrompt,
                      n_vocab);
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The estimate of a text prompt (see the header for the bound).
PromptInfo EstimateText(std::string text) {
  PromptInfo info;
  const auto bytes = static_cast<int64_t>(text.size());
  info.tokens = CeilDiv(bytes, kEstimateBytesPerToken);
  info.upper_bound = bytes + 3;  // BOS, EOS, SentencePiece's leading space
  info.estimated = true;
  info.text = std::move(text);
  return info;
}

PromptInfo Exact(std::vector<int32_t> ids, std::string text) {
  PromptInfo info;
  info.tokens = static_cast<int64_t>(ids.size());
  info.upper_bound = info.tokens;
  info.ids = std::move(ids);
  info.text = std::move(text);
  return info;
}

// `messages` as the server reads them (protocol::TemplateMessages).
Result<std::vector<nlohmann::ordered_json>> ChatMessages(const json& body) {
  const json* messages = http::Fields(body).Find("messages");
  if (messages == nullptr) return Status::InvalidArgument("messages: is required");
  return protocol::TemplateMessages(*messages);
}

// Without a template: the bytes of roles and string contents, plus markers per message.
PromptInfo EstimateChat(const std::vector<nlohmann::ordered_json>& messages) {
  std::string text;
  for (const auto& m : messages) {
    for (const char* key : {"role", "content"}) {
      auto it = m.find(key);
      if (it != m.end() && it->is_string()) text += it->get_ref<const std::string&>();  // checked
      text += '\n';
    }
  }
  PromptInfo info = EstimateText(std::move(text));
  info.tokens += kChatTokensPerMessage * static_cast<int64_t>(messages.size());
  info.upper_bound = -1;
  return info;
}

PromptInfo WithError(PromptInfo info, std::string error) {
  info.error = std::move(error);
  return info;
}

}  // namespace

PoolTokenizer::~PoolTokenizer() = default;

Result<std::shared_ptr<const PoolTokenizer>> PoolTokenizer::Load(
    const std::string& gguf_path, std::string_view builtin_template) {
  ASSIGN_OR_RETURN(auto file, gguf::GgufFile::Open(gguf_path));
  ASSIGN_OR_RETURN(auto vocab, tokenizer::VocabFromGguf(*file));
  std::string source = vocab.chat_template;
  ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::Create(std::move(vocab)));
  std::shared_ptr<PoolTokenizer> p(new PoolTokenizer());
  if (!builtin_template.empty()) {
    const auto* b = tokenizer::chat::FindBuiltinTemplate(builtin_template);
    if (b == nullptr)
      return Status::InvalidArgument(fmt::format("unknown built-in chat template '{}' (one of: {})",
                                                 builtin_template,
                                                 tokenizer::chat::BuiltinTemplateNames()));
    source.assign(b->source);
  }
  if (!source.empty()) {
    auto t = tokenizer::chat::ChatTemplate::Parse(source);
    if (!t.ok())
      return Status::InvalidArgument(gguf_path + ": chat template: " + t.status().message());
    p->tmpl_ = std::move(*t);
  }
  const auto& v = tok->vocab();  // the server's bos_token / eos_token (app/cmd_serve.cc)
  if (tok->bos() >= 0 && static_cast<size_t>(tok->bos()) < v.tokens.size())
    p->bos_token_ = v.tokens[static_cast<size_t>(tok->bos())];
  if (tok->eos() >= 0 && static_cast<size_t>(tok->eos()) < v.tokens.size())
    p->eos_token_ = v.tokens[static_cast<size_t>(tok->eos())];
  p->tok_ = std::move(tok);
  p->path_ = gguf_path;
  p->builtin_template_ = std::string(builtin_template);
  return std::shared_ptr<const PoolTokenizer>(std::move(p));
}

PromptInfo PoolTokenizer::Measure(Endpoint e, const nlohmann::json& body) const {
  if (e == Endpoint::kChat) return MeasureChat(body);
  RawPrompt raw = TextPrompt(e, body, tok_->n_vocab());
  if (!raw.error.empty()) return WithError(EstimatePrompt(e, body), std::move(raw.error));
  if (raw.is_ids) return Exact(std::move(raw.ids), "");
  std::vector<int32_t> ids = tok_->Encode(raw.text, /*add_special=*/true, /*parse_special=*/true);
  return Exact(std::move(ids), std::move(raw.text));
}

PromptInfo PoolTokenizer::MeasureChat(const nlohmann::json& body) const {
  auto messages = ChatMessages(body);
  if (!messages.ok())
    return WithError(EstimatePrompt(Endpoint::kChat, body), messages.status().message());
  if (!tmpl_)
    return WithError(EstimateChat(*messages), "the pool's tokenizer has no chat template");
  const http::Fields f(body);
  tokenizer::chat::ChatInputs in;
  bool add_gen = true;
  if (auto err = f.Bool("add_generation_prompt", &add_gen); !err.ok())
    return WithError(EstimateChat(*messages), err.status().message());
  const json* extra = f.Find("chat_template_kwargs");
  if (extra != nullptr && !extra->is_object())
    return WithError(EstimateChat(*messages), "chat_template_kwargs: must be an object");
  for (auto& m : *messages) in.messages.push_back(std::move(m));
  in.add_generation_prompt = add_gen;
  in.bos_token = bos_token_;
  in.eos_token = eos_token_;
  if (extra != nullptr) in.variables = nlohmann::ordered_json::parse(extra->dump());
  auto ctx = tokenizer::chat::BuildChatContext(in);
  Result<std::string> text = ctx.ok() ? tmpl_->Render(*ctx) : Result<std::string>(ctx.status());
  if (!text.ok()) {
    PromptInfo est = EstimatePrompt(Endpoint::kChat, body);
    return WithError(std::move(est), "chat template: " + text.status().message());
  }
  std::vector<int32_t> ids = tok_->Encode(*text, /*add_special=*/false, /*parse_special=*/true);
  return Exact(std::move(ids), std::move(*text));
}

PromptInfo EstimatePrompt(Endpoint e, const nlohmann::json& body) {
  if (e == Endpoint::kChat) {
    auto messages = ChatMessages(body);
    if (!messages.ok()) return WithError(EstimateText(""), messages.status().message());
    return EstimateChat(*messages);
  }
  RawPrompt raw = TextPrompt(e, body, kAnyVocab);
  if (!raw.error.empty()) return WithError(EstimateText(""), std::move(raw.error));
  if (raw.is_ids) return Exact(std::move(raw.ids), "");
  return EstimateText(std::move(raw.text));
}

PromptInfo MeasurePrompt(const PoolTokenizer* tok, Endpoint e, const nlohmann::json& body) {
  return tok != nullptr ? tok->Measure(e, body) : EstimatePrompt(e, body);
}

Result<PoolTokenizers> LoadPoolTokenizers(const GatewayConfig& cfg,
                                          const PoolTokenizers* previous) {
  PoolTokenizers out;
  auto same_source = [](const std::shared_ptr<const PoolTokenizer>& t, const PoolConfig& p) {
    return t->path() == p.tokenizer && t->builtin_template() == p.chat_template;
  };
  for (size_t i = 0; i < cfg.pools.size(); ++i) {
    const PoolConfig& p = cfg.pools[i];
    if (p.tokenizer.empty()) continue;
    std::shared_ptr<const PoolTokenizer> found;
    for (const PoolTokenizers* m : {static_cast<const PoolTokenizers*>(&out), previous}) {
      if (m == nullptr || found) continue;
      for (const auto& entry : *m) {
        if (same_source(entry.second, p)) {
          found = entry.second;
          break;
        }
      }
    }
    if (!found) {
      auto t = PoolTokenizer::Load(p.tokenizer, p.chat_template);
      if (!t.ok()) return t.status().WithContext(fmt::format("pools[{}].tokenizer", i));
      found = std::move(*t);
    }
    out.emplace(p.name, std::move(found));
  }
  return out;
}

}  // namespace strata::gateway
