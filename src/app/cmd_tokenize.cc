// `strata tokenize` / `strata detokenize`: run the tokenizer of a model (or vocabulary-only)
// GGUF file, or of a SentencePiece `tokenizer.model`, on the command line.
#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/cli_common.h"
#include "app/commands.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace strata::app {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string file;
  std::string ids;
  bool json = false;
  bool no_bos = false;
  bool parse_special = false;
  bool special = false;
};

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::IoError("cannot open '" + path + "'");
  std::string data{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  if (f.bad()) return Status::IoError("cannot read '" + path + "'");
  return data;
}

Result<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizer(const std::string& model_arg) {
  const std::string path = model_arg.empty() ? DefaultModelPath() : model_arg;
  std::ifstream probe(path, std::ios::binary);
  if (!probe) return Status::NotFound("cannot open model '" + path + "'");
  char magic[4] = {};
  probe.read(magic, 4);
  probe.close();
  if (std::string_view(magic, 4) != "GGUF") {
    // Not GGUF: try a SentencePiece ModelProto (tokenizer.model).
    ASSIGN_OR_RETURN(std::string data, ReadFile(path));
    auto vocab = tokenizer::VocabFromSentencePieceModel(
        std::span(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
    if (!vocab.ok()) {
      return Status::InvalidArgument("'" + path + "' is neither GGUF nor a SentencePiece model (" +
                                     vocab.status().message() + ")");
    }
    return tokenizer::Tokenizer::Create(std::move(*vocab));
  }
  ASSIGN_OR_RETURN(auto file, gguf::GgufFile::Open(path));
  ASSIGN_OR_RETURN(auto vocab, tokenizer::VocabFromGguf(*file));
  return tokenizer::Tokenizer::Create(std::move(vocab));
}

// Printable form of a piece: valid UTF-8 stays, control characters and stray bytes are escaped.
std::string EscapePiece(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '\n':
        out += "\\n";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      default:
        break;
    }
    if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
      continue;
    }
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      continue;
    }
    // Copy a complete, well-formed multi-byte sequence; escape anything else byte by byte.
    size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    bool ok = len > 0 && c >= 0xC2 && c <= 0xF4 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(s, i, len);
      i += len - 1;
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

Result<std::vector<int32_t>> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t b = item.find_first_not_of(" \t\n"), e = item.find_last_not_of(" \t\n");
    if (b == std::string::npos) continue;
    item = item.substr(b, e - b + 1);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (errno != 0 || end == item.c_str() || *end != '\0' || v < 0 || v > INT32_MAX) {
      return Status::InvalidArgument("not a token id: '" + item + "'");
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

Status RunTokenize(const TokenizeOptions& o) {
  if (!o.text.empty() && !o.file.empty()) {
    return Status::InvalidArgument("give either --text or --file, not both");
  }
  std::string text = o.text;
  if (!o.file.empty()) {
    ASSIGN_OR_RETURN(text, ReadFile(o.file));
  }
  ASSIGN_OR_RETURN(auto tok, LoadTokenizer(o.model));
  const auto ids = tok->Encode(text, /*add_special=*/!o.no_bos, o.parse_special);
  if (o.json) {
    nlohmann::ordered_json j;
    j["tokens"] = ids;
    auto pieces = nlohmann::ordered_json::array();
    for (int32_t id : ids) pieces.push_back(tok->TokenToPiece(id, /*special=*/true));
    j["pieces"] = std::move(pieces);
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  } else {
    for (int32_t id : ids) {
      std::cout << id << '\t' << EscapePiece(tok->TokenToPiece(id, /*special=*/true)) << '\n';
    }
  }
  std::cout.flush();
  return Status::Ok();
}

Status RunDetokenize(const TokenizeOptions& o) {
  ASSIGN_OR_RETURN(auto ids, ParseIds(o.ids));
  ASSIGN_OR_RETURN(auto tok, LoadTokenizer(o.model));
  for (int32_t id : ids) {
    if (static_cast<size_t>(id) >= tok->n_vocab()) {
      return Status::InvalidArgument(fmt::format(
          "token id {} is out of range (vocabulary has {} tokens)", id, tok->n_vocab()));
    }
  }
  std::cout << tok->Decode(ids, o.special) << "\n";
  std::cout.flush();
  return Status::Ok();
}

}  // namespace

void RegisterTokenize(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<TokenizeOptions>();

  CLI::App* tk = app.add_subcommand("tokenize", "Print the token ids and pieces of a text");
  tk->add_option("-m,--model", opts->model,
                 "GGUF model or vocabulary file, or a SentencePiece tokenizer.model "
                 "(default: the bundled model)");
  auto* text_opt = tk->add_option("--text", opts->text, "Text to tokenize");
  auto* file_opt = tk->add_option("--file", opts->file, "Read the text from this file");
  text_opt->excludes(file_opt);
  tk->add_flag("--json", opts->json, "Print {\"tokens\":[...],\"pieces\":[...]}");
  tk->add_flag("--no-bos", opts->no_bos, "Do not add BOS/EOS even if the vocabulary asks for it");
  tk->add_flag("--parse-special", opts->parse_special,
               "Recognise special-token text such as <|eot_id|> in the input");
  tk->callback([opts, exit_code, text_opt, file_opt] {
    if (text_opt->count() == 0 && file_opt->count() == 0) {
      ReportError(Status::InvalidArgument("one of --text or --file is required"), exit_code);
      return;
    }
    ReportError(RunTokenize(*opts), exit_code);
  });

  CLI::App* dt = app.add_subcommand("detokenize", "Print the text of a list of token ids");
  dt->add_option("-m,--model", opts->model,
                 "GGUF model or vocabulary file, or a SentencePiece tokenizer.model "
                 "(default: the bundled model)");
  dt->add_option("--ids", opts->ids, "Comma-separated token ids, e.g. 1,15043")->required();
  dt->add_flag("--special", opts->special, "Render control tokens such as <|eot_id|> as text");
  dt->callback([opts, exit_code] { ReportError(RunDetokenize(*opts), exit_code); });
}

}  // namespace strata::app
