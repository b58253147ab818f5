// Fuzz target: JSON body -> server::ParseGenRequest (completions or chat, chosen by the first byte)
// against the builtin byte-level tokenizer and a small chat template, plus /apply-template's
// renderer and a StopMatcher fed with the parsed stop strings. Must never crash, hang or allocate
// without bound; errors are fine.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "server/openai_request.h"

namespace {

struct Fixture {
  std::unique_ptr<strata::tokenizer::Tokenizer> tok;
  std::unique_ptr<strata::tokenizer::chat::ChatTemplate> tmpl;
  strata::server::ModelInfo info;
  Fixture() {
    auto t = strata::tokenizer::Tokenizer::Create(strata::tokenizer::BuiltinByteVocab());
    tok = std::move(*t);
    auto c = strata::tokenizer::chat::ChatTemplate::Parse(
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}{% if "
        "add_generation_prompt %}<|assistant|>{% endif %}");
    tmpl = std::move(*c);
    info.name = "fuzz";
    info.tok = tok.get();
    info.chat_template = tmpl.get();
    info.max_model_len = 512;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture f;
  if (size == 0 || size > (1 << 16)) return 0;
  auto ep =
      (data[0] & 1) ? strata::server::Endpoint::kChat : strata::server::Endpoint::kCompletions;
  auto body = nlohmann::json::parse(reinterpret_cast<const char*>(data) + 1,
                                    reinterpret_cast<const char*>(data) + size, nullptr,
                                    /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  auto r = strata::server::ParseGenRequest(ep, body, f.info, (data[0] & 2) ? "gold" : "");
  if (r.ok()) {
    strata::server::StopMatcher m(r->stop);
    std::string_view text(reinterpret_cast<const char*>(data), size);
    for (size_t i = 0; i < text.size(); i += 3) (void)m.Push(text.substr(i, 3));
    (void)m.Flush();
  }
  if (body.is_object() && body.contains("messages"))
    (void)strata::server::ApplyChatTemplate(body["messages"], true, f.info);
  return 0;
}
