#include "tokenizer/chat/builtin_templates.h"

namespace strata::tokenizer::chat {
namespace {

// Every output goes through {{- ... }} and every tag strips the whitespace before it, so the
// sources can be laid out one statement per line without adding text (with trim_blocks the
// newline after the last tag is dropped too).

constexpr std::string_view kChatMl = R"TPL(
{%- for message in messages %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- endif %}
)TPL";

// The system turn is always present: the knowledge cutoff, today's date, then the caller's system
// message (if any). Contents are trimmed.
constexpr std::string_view kLlama3 = R"TPL(
{%- if messages and messages[0].role == 'system' %}
{%- set system_text = messages[0].content | trim %}
{%- set turns = messages[1:] %}
{%- else %}
{%- set system_text = '' %}
{%- set turns = messages %}
{%- endif %}
{%- if date_string is not defined %}
{%- set date_string = strftime_now('%d %b %Y') %}
{%- endif %}
{{- bos_token + '<|start_header_id|>system<|end_header_id|>\n\n' }}
{{- 'Cutting Knowledge Date: December 2023\nToday Date: ' + date_string + '\n\n' }}
{{- system_text + '<|eot_id|>' }}
{%- for message in turns %}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' }}
{{- (message.content | trim) + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)TPL";

// The format has no generation-prompt suffix: a conversation ending in a user turn already ends
// with [/INST].
constexpr std::string_view kMistral = R"TPL(
{%- set state = namespace(system='', last_user=-1) %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- set state.system = message.content %}
{%- elif message.role == 'user' %}
{%- set state.last_user = loop.index0 %}
{%- endif %}
{%- endfor %}
{{- bos_token }}
{%- for message in messages %}
{%- if message.role == 'user' %}
{%- if loop.index0 == state.last_user and state.system %}
{{- '[INST]' + state.system + '\n\n' + message.content + '[/INST]' }}
{%- else %}
{{- '[INST]' + message.content + '[/INST]' }}
{%- endif %}
{%- elif message.role == 'assistant' %}
{{- message.content + eos_token }}
{%- endif %}
{%- endfor %}
)TPL";

constexpr std::string_view kGemma = R"TPL(
{%- if messages and messages[0].role == 'system' %}
{{- raise_exception('System role not supported') }}
{%- endif %}
{{- bos_token }}
{%- for message in messages %}
{%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}
{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
{%- endif %}
{%- if message.role == 'assistant' %}
{%- set speaker = 'model' %}
{%- else %}
{%- set speaker = message.role %}
{%- endif %}
{{- '<start_of_turn>' + speaker + '\n' + (message.content | trim) + '<end_of_turn>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<start_of_turn>model\n' }}
{%- endif %}
)TPL";

// An empty system message is left out; without a generation prompt the text ends with EOS.
constexpr std::string_view kPhi3 = R"TPL(
{%- for message in messages %}
{%- if message.role == 'user' or message.role == 'assistant' or (message.role == 'system' and message.content) %}
{{- '<|' + message.role + '|>\n' + message.content + '<|end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|assistant|>\n' }}
{%- else %}
{{- eos_token }}
{%- endif %}
)TPL";

// System messages go first, right after BOS (joined by blank lines); an assistant turn keeps only
// the answer after its reasoning (the text after the last </think>).
constexpr std::string_view kDeepSeekR1 = R"TPL(
{%- set state = namespace(system='') %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- if state.system %}
{%- set state.system = state.system + '\n\n' %}
{%- endif %}
{%- set state.system = state.system + message.content %}
{%- endif %}
{%- endfor %}
{{- bos_token + state.system }}
{%- for message in messages %}
{%- if message.role == 'user' %}
{{- '<｜User｜>' + message.content }}
{%- elif message.role == 'assistant' %}
{{- '<｜Assistant｜>' + message.content.split('</think>')[-1] + '<｜end▁of▁sentence｜>' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<｜Assistant｜><think>\n' }}
{%- endif %}
)TPL";

constexpr BuiltinTemplate kTemplates[] = {
    {"chatml", "ChatML (<|im_start|>role ... <|im_end|>): Qwen, SmolLM and many fine-tunes",
     kChatMl},
    {"llama3", "Llama 3.1/3.2 (header ids, <|eot_id|>, a dated system turn)", kLlama3},
    {"mistral", "Mistral Nemo / v3-tekken ([INST]...[/INST]; system before the last user turn)",
     kMistral},
    {"gemma", "Gemma 2 (<start_of_turn>user|model; no system role)", kGemma},
    {"phi3", "Phi-3/3.5 (<|user|> <|assistant|> ... <|end|>)", kPhi3},
    {"deepseek-r1", "DeepSeek-R1 and its distills (<｜User｜> <｜Assistant｜>, a <think> opener)",
     kDeepSeekR1},
};

}  // namespace

std::span<const BuiltinTemplate> BuiltinTemplates() { return kTemplates; }

const BuiltinTemplate* FindBuiltinTemplate(std::string_view name) {
  for (const BuiltinTemplate& t : kTemplates)
    if (t.name == name) return &t;
  return nullptr;
}

std::string BuiltinTemplateNames() {
  std::string out;
  for (const BuiltinTemplate& t : kTemplates) {
    if (!out.empty()) out += ", ";
    out += t.name;
  }
  return out;
}

}  // namespace strata::tokenizer::chat
