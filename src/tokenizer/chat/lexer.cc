#include "tokenizer/chat/lexer.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <utility>

#include "tokenizer/chat/value.h"

namespace strata::tokenizer::chat {

namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

// Backslash escapes that stand for one character: `\n` is a newline, and so on.
constexpr std::pair<char, char> kSimpleEscapes[] = {
    {'n', '\n'}, {'t', '\t'}, {'r', '\r'},  {'b', '\b'},  {'f', '\f'}, {'v', '\v'},
    {'a', '\a'}, {'0', '\0'}, {'\\', '\\'}, {'\'', '\''}, {'"', '"'}};

class Lexer {
 public:
  Lexer(const SourceMap& src, size_t max_tokens)
      : map_(src), s_(src.text()), max_tokens_(max_tokens) {}

  Result<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      size_t tag = FindTagStart(pos);
      std::string text(s_.substr(pos, tag - pos));
      if (tag == s_.size()) {
        RETURN_IF_ERROR(EmitText(std::move(text), pos));
        break;
      }
      char kind = s_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < s_.size() ? s_[tag + 2] : '\0';
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && IsSpace(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop spaces between the line start and a block/comment tag.
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool all_space =
              std::all_of(text.begin() + static_cast<std::ptrdiff_t>(l_pos), text.end(), IsSpace);
          if (all_space) text.resize(l_pos);
        }
      }
      RETURN_IF_ERROR(EmitText(std::move(text), pos));
      size_t inner = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      size_t after = 0;
      bool strip_after = false;
      bool trim_newline = false;
      if (kind == '#') {
        size_t end = s_.find("#}", inner);
        if (end == std::string_view::npos) {
          return Status::InvalidArgument("chat template parse error at " + map_.Describe(tag) +
                                         ": unterminated comment");
        }
        strip_after = end > inner && s_[end - 1] == '-';
        trim_newline = !(end > inner && s_[end - 1] == '+');
        after = end + 2;
      } else {
        if (kind == '%') {
          ASSIGN_OR_RETURN(bool was_raw, TryRaw(tag, inner, &pos, &line_starting));
          if (was_raw) continue;
        }
        ASSIGN_OR_RETURN(after, LexTag(tag, inner, kind, &strip_after, &trim_newline));
        trim_newline = trim_newline && kind == '%';
      }
      line_starting = false;
      if (strip_after) {
        size_t p = after;
        while (p < s_.size() && IsSpace(s_[p])) ++p;
        line_starting = p > after && s_[p - 1] == '\n';
        after = p;
      } else if (trim_newline && after < s_.size() && s_[after] == '\n') {
        ++after;
        line_starting = true;
      }
      pos = after;
    }
    tokens_.push_back(Token{TokenType::kEof, "", 0, 0, s_.size()});
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    size_t p = from;
    while (true) {
      p = s_.find('{', p);
      if (p == std::string_view::npos || p + 1 >= s_.size()) return s_.size();
      char c = s_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      ++p;
    }
  }

  Status Error(size_t pos, const std::string& msg) const {
    return Status::InvalidArgument("chat template parse error at " + map_.Describe(pos) + ": " +
                                   msg);
  }

  Status Push(Token t) {
    if (tokens_.size() >= max_tokens_) {
      return Status::OutOfRange("chat template has more than " + std::to_string(max_tokens_) +
                                " tokens");
    }
    tokens_.push_back(std::move(t));
    return Status::Ok();
  }

  Status EmitText(std::string text, size_t pos) {
    if (text.empty()) return Status::Ok();
    return Push(Token{TokenType::kText, std::move(text), 0, 0, pos});
  }

  // `{% raw %}...{% endraw %}`: emits the body verbatim. Returns false if this is not a raw tag.
  Result<bool> TryRaw(size_t tag, size_t inner, size_t* pos, bool* line_starting) {
    size_t p = inner;
    while (p < s_.size() && IsSpace(s_[p])) ++p;
    if (s_.compare(p, 3, "raw") != 0 || (p + 3 < s_.size() && IsNameChar(s_[p + 3]))) return false;
    bool strip = false;
    size_t body = CloseBlockTag(p + 3, &strip);
    if (body == std::string_view::npos) return Error(tag, "expected '%}' after 'raw'");
    bool dropped_newline = false;
    body = SkipAfterRawTag(body, strip, &dropped_newline);
    // Find `{%[-+]? endraw [-+]?%}`.
    size_t q = body;
    while (true) {
      q = s_.find("{%", q);
      if (q == std::string_view::npos) return Error(tag, "missing {% endraw %}");
      size_t r = q + 2;
      bool pre_strip = r < s_.size() && s_[r] == '-';
      if (r < s_.size() && (s_[r] == '-' || s_[r] == '+')) ++r;
      while (r < s_.size() && IsSpace(s_[r])) ++r;
      if (s_.compare(r, 6, "endraw") != 0) {
        q += 2;
        continue;
      }
      bool post_strip = false;
      size_t after = CloseBlockTag(r + 6, &post_strip);
      if (after == std::string_view::npos) return Error(q, "expected '%}' after 'endraw'");
      std::string text(s_.substr(body, q - body));
      if (pre_strip) {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      }
      RETURN_IF_ERROR(EmitText(std::move(text), body));
      *pos = SkipAfterRawTag(after, post_strip, line_starting);
      return true;
    }
  }

  // Ends a block tag after its keyword: spaces, an optional `-`/`+` marker, then `%}`. Returns the
  // offset after `%}` (npos if it is not there); *strip says whether the marker was `-`.
  size_t CloseBlockTag(size_t p, bool* strip) const {
    while (p < s_.size() && IsSpace(s_[p])) ++p;
    *strip = false;
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) {
      *strip = s_[p] == '-';
      ++p;
    }
    if (s_.compare(p, 2, "%}") != 0) return std::string_view::npos;
    return p + 2;
  }

  // Where text resumes after a raw/endraw tag ending at `p`: a `-` marker strips all whitespace,
  // otherwise one newline is dropped (trim_blocks); *dropped_newline says whether it was.
  size_t SkipAfterRawTag(size_t p, bool strip, bool* dropped_newline) const {
    *dropped_newline = false;
    if (strip) {
      while (p < s_.size() && IsSpace(s_[p])) ++p;
    } else if (p < s_.size() && s_[p] == '\n') {
      ++p;
      *dropped_newline = true;
    }
    return p;
  }

  // Tokenises the inside of a {{ }} or {% %} tag starting at `p`; returns the offset after the
  // closing delimiter.
  Result<size_t> LexTag(size_t tag, size_t p, char kind, bool* strip_after, bool* trim_newline) {
    RETURN_IF_ERROR(Push(Token{kind == '{' ? TokenType::kVarBegin : TokenType::kBlockBegin,
                               kind == '{' ? "{{" : "{%", 0, 0, tag}));
    const char close = kind == '{' ? '}' : '%';
    int depth = 0;
    while (true) {
      while (p < s_.size() && IsSpace(s_[p])) ++p;
      if (p >= s_.size()) {
        return Error(tag, std::string("unterminated tag, expected '") + close + "}'");
      }
      char c = s_[p];
      // Closing delimiter, optionally with a whitespace marker.
      if (depth == 0) {
        size_t q = p;
        char marker = '\0';
        if ((c == '-' || c == '+') && q + 1 < s_.size()) {
          marker = c;
          ++q;
        }
        if (q + 1 < s_.size() && s_[q] == close && s_[q + 1] == '}') {
          *strip_after = marker == '-';
          *trim_newline = marker != '+';
          RETURN_IF_ERROR(
              Push(Token{kind == '{' ? TokenType::kVarEnd : TokenType::kBlockEnd, "", 0, 0, p}));
          return q + 2;
        }
      }
      if (IsNameStart(c)) {
        size_t start = p;
        while (p < s_.size() && IsNameChar(s_[p])) ++p;
        RETURN_IF_ERROR(
            Push(Token{TokenType::kName, std::string(s_.substr(start, p - start)), 0, 0, start}));
        continue;
      }
      if (IsDigit(c)) {
        ASSIGN_OR_RETURN(p, LexNumber(p));
        continue;
      }
      if (c == '\'' || c == '"') {
        ASSIGN_OR_RETURN(p, LexString(p));
        continue;
      }
      static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
      bool matched = false;
      for (std::string_view op : kTwo) {
        if (s_.compare(p, 2, op) == 0) {
          RETURN_IF_ERROR(Push(Token{TokenType::kOp, std::string(op), 0, 0, p}));
          p += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      static constexpr std::string_view kOne = "+-*/%~<>=()[]{},.:|";
      if (kOne.find(c) == std::string_view::npos) {
        return Error(p, std::string("unexpected character '") + c + "'");
      }
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      RETURN_IF_ERROR(Push(Token{TokenType::kOp, std::string(1, c), 0, 0, p}));
      ++p;
    }
  }

  Result<size_t> LexNumber(size_t p) {
    size_t start = p;
    std::string digits;
    auto take_digits = [&]() {
      while (p < s_.size() &&
             (IsDigit(s_[p]) || (s_[p] == '_' && p + 1 < s_.size() && IsDigit(s_[p + 1])))) {
        if (s_[p] != '_') digits.push_back(s_[p]);
        ++p;
      }
    };
    take_digits();
    bool is_float = false;
    if (p + 1 < s_.size() && s_[p] == '.' && IsDigit(s_[p + 1])) {
      is_float = true;
      digits.push_back('.');
      ++p;
      take_digits();
    }
    if (p < s_.size() && (s_[p] == 'e' || s_[p] == 'E')) {
      size_t q = p + 1;
      if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
      if (q < s_.size() && IsDigit(s_[q])) {
        is_float = true;
        digits.append(s_.substr(p, q - p));
        p = q;
        take_digits();
      }
    }
    Token t{is_float ? TokenType::kFloat : TokenType::kInt, digits, 0, 0, start};
    if (is_float) {
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      auto res = std::from_chars(digits.data(), digits.data() + digits.size(), t.int_value);
      if (res.ec != std::errc()) return Error(start, "integer literal out of range");
    }
    RETURN_IF_ERROR(Push(std::move(t)));
    return p;
  }

  Result<size_t> LexString(size_t p) {
    size_t start = p;
    char quote = s_[p++];
    std::string out;
    while (true) {
      if (p >= s_.size()) return Error(start, "unterminated string literal");
      char c = s_[p];
      if (c == quote) {
        ++p;
        break;
      }
      if (c != '\\') {
        out.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= s_.size()) return Error(start, "unterminated string literal");
      ASSIGN_OR_RETURN(p, LexEscape(p, &out));
    }
    RETURN_IF_ERROR(Push(Token{TokenType::kString, std::move(out), 0, 0, start}));
    return p;
  }

  // Decodes the backslash escape at `p` into `out`; returns the offset after it. Unknown escapes
  // stay as written (Python keeps the backslash).
  Result<size_t> LexEscape(size_t p, std::string* out) {
    char e = s_[p + 1];
    p += 2;
    if (e == '\n') return p;  // line continuation
    for (const auto& [name, c] : kSimpleEscapes) {
      if (e == name) {
        out->push_back(c);
        return p;
      }
    }
    if (e == 'x' || e == 'u' || e == 'U')
      return LexHexEscape(p, e == 'x' ? 2 : e == 'u' ? 4 : 8, out);
    out->push_back('\\');
    out->push_back(e);
    return p;
  }

  // The `n` hex digits of a \x, \u or \U escape starting at `p` (errors point at the backslash).
  Result<size_t> LexHexEscape(size_t p, size_t n, std::string* out) {
    if (p + n > s_.size()) return Error(p - 2, "truncated escape sequence");
    uint32_t cp = 0;
    for (size_t k = 0; k < n; ++k) {
      char h = s_[p + k];
      int v = IsDigit(h)               ? h - '0'
              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                       : -1;
      if (v < 0) return Error(p - 2, "invalid escape sequence");
      cp = cp * 16 + static_cast<uint32_t>(v);
    }
    if (cp > 0x10ffff) return Error(p - 2, "escape sequence out of range");
    AppendUtf8(*out, cp);
    return p + n;
  }

  const SourceMap& map_;
  std::string_view s_;
  size_t max_tokens_;
  std::vector<Token> tokens_;
};

}  // namespace

SourceMap::SourceMap(std::string normalised) : text_(std::move(normalised)) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < text_.size(); ++i) {
    if (text_[i] == '\n') line_starts_.push_back(i + 1);
  }
}

std::string SourceMap::Describe(size_t pos) const {
  pos = std::min(pos, text_.size());
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
  size_t line = static_cast<size_t>(it - line_starts_.begin());
  size_t start = line_starts_[line - 1];
  size_t col = CodePointCount(std::string_view(text_).substr(start, pos - start)) + 1;
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

std::string NormaliseSource(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

Result<std::vector<Token>> Lex(const SourceMap& src, size_t max_tokens) {
  return Lexer(src, max_tokens).Run();
}

}  // namespace strata::tokenizer::chat
