#include "tokenizer/chat/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <unordered_map>

#include "base/ascii.h"
#include "tokenizer/chat/interpreter.h"

namespace strata::tokenizer::chat {

namespace {

Status Err(std::string msg) { return Interpreter::RuntimeError(std::move(msg)); }

// Positional argument `i` or keyword `name`; Undefined when absent.
Value Arg(const CallArgs& a, size_t i, std::string_view name) {
  for (const auto& [k, v] : a.keyword) {
    if (k == name) return v;
  }
  if (i < a.positional.size()) return a.positional[i];
  return Value();
}

bool IsPyWhitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

std::vector<uint32_t> Decode(std::string_view s) {
  std::vector<uint32_t> cps;
  size_t i = 0;
  while (i < s.size()) cps.push_back(DecodeUtf8At(s, &i));
  return cps;
}

std::string Encode(const std::vector<uint32_t>& cps, size_t a, size_t b) {
  std::string out;
  for (size_t i = a; i < b; ++i) AppendUtf8(out, cps[i]);
  return out;
}

// Python str.strip/lstrip/rstrip; `chars` undefined/none → whitespace.
Result<std::string> Strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<uint32_t> set;
  bool ws = chars.is_undefined() || chars.is_none();
  if (!ws) {
    if (!chars.is_string()) return Err("strip arg must be None or str");
    set = Decode(chars.str());
  }
  auto strip_it = [&](uint32_t c) {
    return ws ? IsPyWhitespace(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  std::vector<uint32_t> cps = Decode(s);
  size_t a = 0, b = cps.size();
  if (left) {
    while (a < b && strip_it(cps[a])) ++a;
  }
  if (right) {
    while (b > a && strip_it(cps[b - 1])) --b;
  }
  return Encode(cps, a, b);
}

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string Capitalize(const std::string& s) {
  std::string out = AsciiStrToLower(s);
  if (!out.empty()) out[0] = AsciiUpper(out[0]);
  return out;
}
// Python str.title(): a letter after a non-letter starts a word.
std::string PyTitle(const std::string& s) {
  std::string out = s;
  bool prev_alpha = false;
  for (char& c : out) {
    bool alpha = IsAlpha(c) || (static_cast<unsigned char>(c) >= 0x80);
    if (IsAlpha(c)) c = prev_alpha ? AsciiLower(c) : AsciiUpper(c);
    prev_alpha = alpha;
  }
  return out;
}
// Jinja's title filter: words start after '-', whitespace, '(', '{', '[', '<'.
std::string JinjaTitle(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    bool delim = c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
                 c == '\v' || c == '(' || c == '{' || c == '[' || c == '<';
    if (delim) {
      start = true;
      continue;
    }
    c = start ? AsciiUpper(c) : AsciiLower(c);
    start = false;
  }
  return out;
}

Result<std::string> Replace(Interpreter& in, const std::string& s, const std::string& old,
                            const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::vector<size_t> offs = CodePointOffsets(s);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < offs.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      out.append(s, offs[i], offs[i + 1] - offs[i]);
      RETURN_IF_ERROR(in.ChargeBytes(out.size()));
    }
    if (count < 0 || done < count) out += repl;
    RETURN_IF_ERROR(in.ChargeBytes(out.size()));
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += repl;
    pos = f + old.size();
    ++done;
    if (out.size() > in.max_bytes()) return in.ChargeBytes(out.size());
  }
  out.append(s, pos, std::string::npos);
  RETURN_IF_ERROR(in.ChargeBytes(out.size()));
  return out;
}

Result<std::string> ArgString(const Value& v, const char* what) {
  if (!v.is_string()) return Err(std::string(what) + " must be a string");
  return v.str();
}

// Jinja's environment.getitem for attribute paths used by map/selectattr/sort ("a.b", "0").
Value GetPath(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Value next;
    if (cur.is_dict() || cur.is_namespace()) {
      const Value* f = cur.dict().Find(part);
      if (f != nullptr) next = *f;
    } else if (cur.is_list() && !part.empty() &&
               std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      size_t idx = std::strtoull(part.c_str(), nullptr, 10);
      if (idx < cur.list().size()) next = cur.list()[idx];
    }
    if (next.is_undefined()) {
      return Value::Undefined("'" + std::string(cur.TypeName()) + " object' has no attribute '" +
                              part + "'");
    }
    cur = next;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

// `%(key)s`: the mapping entry named between the parentheses at `*j`; moves *j past them.
Result<Value> PercentKeyArg(const std::string& fmt, const Value& args, size_t* j) {
  size_t close = fmt.find(')', *j);
  if (close == std::string::npos || !args.is_dict()) return Err("format requires a mapping");
  const Value* f = args.dict().Find(fmt.substr(*j + 1, close - *j - 1));
  if (f == nullptr) return Err("format key not found");
  *j = close + 1;
  return *f;
}

// Appends one %-conversion of `arg`; `spec` is '%' plus the flags, width and precision.
Status AppendPercentConversion(char conv, const std::string& spec, const Value& arg,
                               std::string& out) {
  if (conv == 's') {
    out += ToPyStr(arg);
    return Status::Ok();
  }
  if (conv == 'r') {
    out += ToPyRepr(arg);
    return Status::Ok();
  }
  const bool integral = std::string_view("dixXoc").find(conv) != std::string_view::npos;
  const bool floating = std::string_view("fFeEgG").find(conv) != std::string_view::npos;
  if (!integral && !floating)
    return Err(std::string("unsupported format character '") + conv + "'");
  if (!arg.is_number()) return Err("%" + std::string(1, conv) + " format: a number is required");
  char buf[512];
  if (integral) {
    long long v = arg.is_float() ? static_cast<long long>(arg.as_float()) : arg.as_int();
    std::string f = spec + "ll" + (conv == 'i' ? 'd' : conv);
    std::snprintf(buf, sizeof(buf), f.c_str(), v);
  } else {
    std::string f = spec + conv;
    std::snprintf(buf, sizeof(buf), f.c_str(), arg.as_float());
  }
  out += buf;
  return Status::Ok();
}

// Python %-formatting (subset: %s %r %d %i %f %x %o %e %g %c %% with flags/width/precision).
Result<std::string> PyPercentFormat(Interpreter& in, const std::string& fmt, const Value& args) {
  ValueList list;
  if (args.is_list())
    list = args.list();
  else
    list.push_back(args);
  std::string out;
  size_t ai = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    size_t j = i + 1;
    if (j < fmt.size() && fmt[j] == '%') {
      out.push_back('%');
      i = j;
      continue;
    }
    Value arg;
    if (j < fmt.size() && fmt[j] == '(') {
      ASSIGN_OR_RETURN(arg, PercentKeyArg(fmt, args, &j));
    }
    std::string spec = "%";
    while (j < fmt.size() && std::string_view("-+ #0").find(fmt[j]) != std::string_view::npos) {
      spec.push_back(fmt[j++]);
    }
    while (j < fmt.size() && ((fmt[j] >= '0' && fmt[j] <= '9') || fmt[j] == '.')) {
      spec.push_back(fmt[j++]);
    }
    if (spec.size() > 12) return Err("format specifier too long");
    if (j >= fmt.size()) return Err("incomplete format");
    char conv = fmt[j];
    if (arg.is_undefined()) {
      if (ai >= list.size()) return Err("not enough arguments for format string");
      arg = list[ai++];
    }
    RETURN_IF_ERROR(AppendPercentConversion(conv, spec, arg, out));
    RETURN_IF_ERROR(in.ChargeBytes(out.size()));
    i = j;
  }
  return out;
}

// Python str.format (subset: {} / {0} / {name} with no format spec).
Result<std::string> PyStrFormat(Interpreter& in, const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out.push_back('}');
      ++i;
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) return Err("single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    Value v;
    if (field.empty()) {
      if (auto_idx >= args.positional.size()) return Err("format: not enough arguments");
      v = args.positional[auto_idx++];
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return d >= '0' && d <= '9'; })) {
      size_t idx = std::strtoull(field.c_str(), nullptr, 10);
      if (idx >= args.positional.size()) return Err("format: index out of range");
      v = args.positional[idx];
    } else {
      v = Arg(args, SIZE_MAX, field);
      if (v.is_undefined()) return Err("format: missing argument '" + field + "'");
    }
    out += ToPyStr(v);
    RETURN_IF_ERROR(in.ChargeBytes(out.size()));
    i = close;
  }
  return out;
}

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  std::string cur;
  size_t i = 0;
  while (i < s.size()) {
    size_t start = i;
    uint32_t c = DecodeUtf8At(s, &i);
    bool br = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
              c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!br) {
      cur.append(s, start, i - start);
      continue;
    }
    if (c == '\r' && i < s.size() && s[i] == '\n') ++i;
    lines.push_back(std::move(cur));
    cur.clear();
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  return lines;
}

Result<Value> ToInt(const Value& v, const Value& def) {
  Value fallback = def.is_undefined() ? Value::Int(0) : def;
  if (v.is_int() || v.is_bool()) return Value::Int(v.as_int());
  if (v.is_float()) {
    double f = v.as_float();
    if (!std::isfinite(f) || std::fabs(f) > 9.2e18) return fallback;
    return Value::Int(static_cast<int64_t>(f));
  }
  if (v.is_string()) {
    std::string s = v.str();
    while (!s.empty() && IsPyWhitespace(static_cast<unsigned char>(s.back()))) s.pop_back();
    size_t a = 0;
    while (a < s.size() && IsPyWhitespace(static_cast<unsigned char>(s[a]))) ++a;
    s = s.substr(a);
    if (s.empty()) return fallback;
    char* end = nullptr;
    errno = 0;
    long long i = std::strtoll(s.c_str(), &end, 10);
    if (end == s.c_str() + s.size() && errno == 0) return Value::Int(i);
    double f = std::strtod(s.c_str(), &end);
    if (end == s.c_str() + s.size() && std::isfinite(f) && std::fabs(f) < 9.2e18) {
      return Value::Int(static_cast<int64_t>(f));
    }
  }
  return fallback;
}

Result<Value> ToFloat(const Value& v, const Value& def) {
  Value fallback = def.is_undefined() ? Value::Float(0.0) : def;
  if (v.is_number()) return Value::Float(v.as_float());
  if (v.is_string()) {
    const std::string& s = v.str();
    char* end = nullptr;
    double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value::Float(f);
  }
  return fallback;
}

// Sort helper: Python-like ordering, case-insensitive strings unless asked otherwise.
Result<ValueList> Sorted(ValueList items, bool reverse, bool case_sensitive,
                         const Value& attribute) {
  Status err;
  auto key = [&](const Value& v) {
    Value k = attribute.is_string() ? GetPath(v, attribute.str()) : v;
    if (k.is_string() && !case_sensitive) return Value::String(AsciiStrToLower(k.str()));
    return k;
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& v : items) keyed.emplace_back(key(v), std::move(v));
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    auto c = Compare(a.first, b.first);
    if (!c.ok()) {
      if (err.ok()) err = Interpreter::RuntimeError(c.status().message());
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  if (!err.ok()) return err;
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

Result<std::string> Indent(Interpreter& in, const std::string& s0, const Value& width, bool first,
                           bool blank) {
  std::string ind;
  if (width.is_string()) {
    ind = width.str();
  } else {
    int64_t w = width.is_undefined() ? 4 : width.as_int();
    if (w < 0 || w > 1024) return Err("indent width out of range");
    ind.assign(static_cast<size_t>(w), ' ');
  }
  std::vector<std::string> lines = SplitLines(s0 + "\n");
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
      if (rv.size() > in.max_bytes()) break;
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += ind;
      rv += lines[i];
      if (rv.size() > in.max_bytes()) break;
    }
  }
  if (first) rv = ind + rv;
  RETURN_IF_ERROR(in.ChargeBytes(rv.size()));
  return rv;
}

const std::set<std::string_view>& TestNames() {
  static const std::set<std::string_view> kTable = {
      "defined",     "undefined", "none",        "string",  "mapping",  "iterable", "sequence",
      "number",      "integer",   "float",       "boolean", "true",     "false",    "callable",
      "odd",         "even",      "divisibleby", "lower",   "upper",    "sameas",   "in",
      "eq",          "equalto",   "ne",          "lt",      "lessthan", "le",       "gt",
      "greaterthan", "ge",        "escaped",     "filter",  "test",     "==",       "!=",
      "<",           "<=",        ">",           ">="};
  return kTable;
}

std::shared_ptr<Callable> Native(std::string name,
                                 std::function<Result<Value>(Interpreter&, CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->native = std::move(fn);
  return c;
}

// Filters taking a test: select/reject(/attr).
Result<Value> SelectLike(Interpreter& in, const Value& value, CallArgs& args, bool by_attr,
                         bool keep_if) {
  ASSIGN_OR_RETURN(ValueList items, Iterate(in, value));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty() || !args.positional[0].is_string()) {
      return Err("selectattr/rejectattr need an attribute name");
    }
    attr = args.positional[0].str();
    next = 1;
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) return Err("test name must be a string");
    test = args.positional[next].str();
    if (!IsKnownTest(test)) return Err("no test named '" + test + "'");
    ++next;
  }
  CallArgs targs;
  targs.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next),
                          args.positional.end());
  ValueList out;
  for (const Value& item : items) {
    RETURN_IF_ERROR(in.Charge(1));
    Value subject = by_attr ? GetPath(item, attr) : item;
    bool r;
    if (test.empty()) {
      r = subject.Truthy();
    } else {
      ASSIGN_OR_RETURN(r, ApplyTest(in, test, subject, targs));
    }
    if (r == keep_if) out.push_back(item);
  }
  return Value::List(std::move(out));
}

// ---- filters: one small function each, found by name in FilterTable() ----

// `name` is the name the filter was called by (several share a function: first/last, ...).
using FilterFn = Result<Value> (*)(Interpreter& in, std::string_view name, const Value& value,
                                   CallArgs& args);

// The string most filters work on: the value itself, or str(value).
std::string StrOf(const Value& value) { return value.is_string() ? value.str() : ToPyStr(value); }

Result<Value> FilterDefault(Interpreter&, std::string_view, const Value& value, CallArgs& args) {
  Value def = Arg(args, 0, "default_value");
  if (def.is_undefined()) def = Value::String("");
  bool boolean = Arg(args, 1, "boolean").Truthy();
  if (value.is_undefined() || (boolean && !value.Truthy())) return def;
  return value;
}

Result<Value> FilterSafe(Interpreter&, std::string_view, const Value& value, CallArgs&) {
  return value;
}

Result<Value> FilterString(Interpreter& in, std::string_view, const Value& value, CallArgs&) {
  if (value.is_string()) return value;
  std::string s = ToPyStr(value);
  RETURN_IF_ERROR(in.ChargeBytes(s.size()));
  return Value::String(std::move(s));
}

Result<Value> FilterToJson(Interpreter& in, std::string_view, const Value& value, CallArgs& args) {
  JsonDumpOptions o;
  Value indent = Arg(args, 1, "indent");
  if (indent.is_int()) {
    if (indent.as_int() < 0 || indent.as_int() > 64) return Err("tojson indent out of range");
    o.indent = static_cast<int>(indent.as_int());
    o.item_sep = ",";
  } else if (!indent.is_undefined() && !indent.is_none()) {
    return Err("tojson indent must be an integer");
  }
  Value seps = Arg(args, 2, "separators");
  if (seps.is_list()) {
    if (seps.list().size() != 2 || !seps.list()[0].is_string() || !seps.list()[1].is_string()) {
      return Err("tojson separators must be two strings");
    }
    o.item_sep = seps.list()[0].str();
    o.key_sep = seps.list()[1].str();
  }
  o.ensure_ascii = Arg(args, 0, "ensure_ascii").Truthy();
  o.sort_keys = Arg(args, 3, "sort_keys").Truthy();
  auto r = ToJson(value, o, in.max_bytes());
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kOutOfRange) return r.status();
    return Err(r.status().message());
  }
  RETURN_IF_ERROR(in.ChargeBytes(r->size()));
  return Value::String(std::move(r).value());
}

Result<Value> FilterLength(Interpreter&, std::string_view, const Value& value, CallArgs&) {
  if (value.is_string()) return Value::Int(static_cast<int64_t>(CodePointCount(value.str())));
  if (value.is_list()) return Value::Int(static_cast<int64_t>(value.list().size()));
  if (value.is_dict() || value.is_namespace()) {
    return Value::Int(static_cast<int64_t>(value.dict().size()));
  }
  if (value.is_undefined()) return Value::Int(0);
  return Err("object of type '" + std::string(value.TypeName()) + "' has no len()");
}

Result<Value> FilterItems(Interpreter& in, std::string_view, const Value& value, CallArgs&) {
  if (value.is_undefined()) return Value::List();
  if (!value.is_dict()) return Err("items filter needs a mapping");
  ValueList out;
  for (const auto& [k, v] : value.dict().entries()) {
    out.push_back(Value::List({Value::String(k), v}));
  }
  RETURN_IF_ERROR(in.Charge(out.size()));
  return Value::List(std::move(out));
}

Result<Value> FilterDictSort(Interpreter&, std::string_view, const Value& value, CallArgs& args) {
  if (!value.is_dict()) return Err("dictsort needs a mapping");
  ValueList out;
  for (const auto& [k, v] : value.dict().entries())
    out.push_back(Value::List({Value::String(k), v}));
  bool by_value = Arg(args, 1, "by").is_string() && Arg(args, 1, "by").str() == "value";
  ASSIGN_OR_RETURN(
      out, Sorted(std::move(out), Arg(args, 2, "reverse").Truthy(),
                  Arg(args, 0, "case_sensitive").Truthy(), Value::String(by_value ? "1" : "0")));
  return Value::List(std::move(out));
}

Result<Value> FilterList(Interpreter& in, std::string_view, const Value& value, CallArgs&) {
  ASSIGN_OR_RETURN(ValueList items, Iterate(in, value));
  return Value::List(std::move(items));
}

// first, last
Result<Value> FilterFirstLast(Interpreter& in, std::string_view name, const Value& value,
                              CallArgs&) {
  ASSIGN_OR_RETURN(ValueList items, Iterate(in, value));
  if (items.empty()) return Value::Undefined("sequence is empty");
  return name == "first" ? items.front() : items.back();
}

Result<Value> FilterReverse(Interpreter& in, std::string_view, const Value& value, CallArgs&) {
  if (value.is_string()) {
    std::vector<uint32_t> cps = Decode(value.str());
    std::reverse(cps.begin(), cps.end());
    return Value::String(Encode(cps, 0, cps.size()));
  }
  ASSIGN_OR_RETURN(ValueList items, Iterate(in, value));
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

Result<Value> FilterJoin(Interpreter& in, std::string_view, const Value& value, CallArgs& args) {
  ASSIGN_OR_RETURN(ValueList items, Iterate(in, value));
  Value sep = Arg(args, 0, "d");
  Value attr = Arg(args, 1, "attribute");
  std::string d = sep.is_undefined() ? "" : ToPyStr(sep);
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += d;
    out += ToPyStr(attr.is_string() ? GetPath(items[i], attr.str()) : items[i]);
    if (out.size() > in.max_bytes()) break;
  }
  RETURN_IF_ERROR(in.ChargeBytes(out.size()));
  return Value::String(std::move(out));
}

Result<Value> FilterUnique(Interpreter& in, std::string_view, const Value& value, CallArgs& args) {
  ASSIGN_OR_RETURN(ValueList items, Iterate(in, value));
  bool cs = Arg(args, 0, "case_sensitive").Truthy();
  Value attr = Arg(args, 1, "attribute");
  ValueList out, keys;
  for (const Value& v : items) {
    Value k = attr.is_string() ? GetPath(v, attr.str()) : v;
    if (k.is_string() && !cs) k = Value::String(AsciiStrToLower(k.str()));
    bool seen = false;
    for (const Value& s : keys) {
      if (Equals(s, k)) {
        seen = true;
        break;
      }
    }
    RETURN_IF_ERROR(in.Charge(keys.size()));
    if (!seen) {
      keys.push_back(k);
      out.push_back(v);
    }
  }
  return Value::List(std::move(out));
}

Result<Value> FilterSort(Interpreter& in, std::string_view, const Value& value, CallArgs& args) {
  ASSIGN_OR_RETURN(ValueList items, Iterate(in, value));
  RETURN_IF_ERROR(in.Charge(items.size() * 8));
  ASSIGN_OR_RETURN(items,
                   Sorted(std::move(items), Arg(args, 0, "reverse").Truthy(),
                          Arg(args, 1, "case_sensitive").Truthy(), Arg(args, 2, "attribute")));
  return Value::List(std::move(items));
}

Result<Value> FilterMap(Interpreter& in, std::string_view, const Value& value, CallArgs& args) {
  ASSIGN_OR_RETURN(ValueList items, Iterate(in, value));
  Value attr = Arg(args, SIZE_MAX, "attribute");
  ValueList out;
  if (attr.is_string()) {
    Value def = Arg(args, SIZE_MAX, "default");
    for (const Value& v : items) {
      Value r = GetPath(v, attr.str());
      out.push_back(r.is_undefined() && !def.is_undefined() ? def : r);
    }
    return Value::List(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return Err("map needs a filter name or attribute=");
  }
  std::string f = args.positional[0].str();
  if (!IsKnownFilter(f)) return Err("no filter named '" + f + "'");
  CallArgs fargs;
  fargs.positional.assign(args.positional.begin() + 1, args.positional.end());
  fargs.keyword = args.keyword;
  for (const Value& v : items) {
    CallArgs a = fargs;
    ASSIGN_OR_RETURN(Value r, ApplyFilter(in, f, v, a));
    out.push_back(std::move(r));
  }
  return Value::List(std::move(out));
}

// select, reject, selectattr, rejectattr
Result<Value> FilterSelect(Interpreter& in, std::string_view name, const Value& value,
                           CallArgs& args) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep_if = name == "select" || name == "selectattr";
  return SelectLike(in, value, args, by_attr, keep_if);
}

Result<Value> FilterAttr(Interpreter&, std::string_view, const Value& value, CallArgs& args) {
  Value n = Arg(args, 0, "name");
  if (!n.is_string()) return Err("attr needs a name");
  if (value.is_dict() || value.is_namespace()) {
    const Value* f = value.dict().Find(n.str());
    if (f != nullptr) return *f;
  }
  return Value::Undefined("object has no attribute '" + n.str() + "'");
}

// sum, min, max
Result<Value> FilterSumMinMax(Interpreter& in, std::string_view name, const Value& value,
                              CallArgs& args) {
  ASSIGN_OR_RETURN(ValueList items, Iterate(in, value));
  Value attr = Arg(args, name == "sum" ? 0 : 1, "attribute");
  for (Value& v : items) {
    if (attr.is_string()) v = GetPath(v, attr.str());
  }
  if (name == "sum") {
    Value acc = Arg(args, 1, "start");
    if (acc.is_undefined()) acc = Value::Int(0);
    for (const Value& v : items) {
      if (!v.is_number() || !acc.is_number()) return Err("sum needs numbers");
      if (acc.is_float() || v.is_float()) {
        acc = Value::Float(acc.as_float() + v.as_float());
      } else {
        int64_t r;
        if (__builtin_add_overflow(acc.as_int(), v.as_int(), &r)) return Err("integer overflow");
        acc = Value::Int(r);
      }
    }
    return acc;
  }
  if (items.empty()) return Value::Undefined("sequence is empty");
  ASSIGN_OR_RETURN(
      items, Sorted(std::move(items), false, Arg(args, 0, "case_sensitive").Truthy(), Value()));
  return name == "min" ? items.front() : items.back();
}

Result<Value> FilterAbs(Interpreter&, std::string_view, const Value& value, CallArgs&) {
  if (value.is_float()) return Value::Float(std::fabs(value.as_float()));
  if (value.is_int() || value.is_bool()) {
    if (value.as_int() == INT64_MIN) return Err("integer overflow");
    return Value::Int(std::llabs(value.as_int()));
  }
  return Err("bad operand type for abs()");
}

Result<Value> FilterRound(Interpreter&, std::string_view, const Value& value, CallArgs& args) {
  if (!value.is_number()) return Err("round needs a number");
  Value p = Arg(args, 0, "precision");
  int64_t prec = p.is_undefined() ? 0 : p.as_int();
  if (prec < 0 || prec > 15) return Err("round precision out of range");
  Value m = Arg(args, 1, "method");
  std::string method = m.is_string() ? m.str() : "common";
  double scale = std::pow(10.0, static_cast<double>(prec));
  double x = value.as_float() * scale;
  double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
  return Value::Float(r / scale);
}

Result<Value> FilterInt(Interpreter&, std::string_view, const Value& value, CallArgs& args) {
  return ToInt(value, Arg(args, 0, "default"));
}

Result<Value> FilterFloat(Interpreter&, std::string_view, const Value& value, CallArgs& args) {
  return ToFloat(value, Arg(args, 0, "default"));
}

Result<Value> FilterFormat(Interpreter& in, std::string_view, const Value& value, CallArgs& args) {
  if (!value.is_string()) return Err("format filter needs a format string");
  Value fargs;
  if (args.positional.size() == 1) {
    fargs = args.positional[0];
  } else if (!args.keyword.empty()) {
    fargs = Value::Dict();
    for (const auto& [k, v] : args.keyword) fargs.dict().Set(k, v);
  } else {
    fargs = Value::List(args.positional);
  }
  ASSIGN_OR_RETURN(std::string s, PyPercentFormat(in, value.str(), fargs));
  return Value::String(std::move(s));
}

Result<Value> FilterWordCount(Interpreter&, std::string_view, const Value& value, CallArgs&) {
  Value parts = SplitString(ToPyStr(value), Value(), -1);
  return Value::Int(static_cast<int64_t>(parts.list().size()));
}

// trim, strip, lstrip, rstrip
Result<Value> FilterStrip(Interpreter&, std::string_view name, const Value& value, CallArgs& args) {
  bool left = name != "rstrip", right = name != "lstrip";
  ASSIGN_OR_RETURN(std::string r, Strip(StrOf(value), Arg(args, 0, "chars"), left, right));
  return Value::String(std::move(r));
}

Result<Value> FilterUpper(Interpreter&, std::string_view, const Value& value, CallArgs&) {
  return Value::String(AsciiStrToUpper(StrOf(value)));
}

Result<Value> FilterLower(Interpreter&, std::string_view, const Value& value, CallArgs&) {
  return Value::String(AsciiStrToLower(StrOf(value)));
}

Result<Value> FilterCapitalize(Interpreter&, std::string_view, const Value& value, CallArgs&) {
  return Value::String(Capitalize(StrOf(value)));
}

Result<Value> FilterTitle(Interpreter&, std::string_view, const Value& value, CallArgs&) {
  return Value::String(JinjaTitle(StrOf(value)));
}

Result<Value> FilterReplace(Interpreter& in, std::string_view, const Value& value, CallArgs& args) {
  Value old = Arg(args, 0, "old"), repl = Arg(args, 1, "new"), count = Arg(args, 2, "count");
  if (!old.is_string() || !repl.is_string()) return Err("replace needs two strings");
  ASSIGN_OR_RETURN(std::string r, Replace(in, StrOf(value), old.str(), repl.str(),
                                          count.is_int() ? count.as_int() : -1));
  return Value::String(std::move(r));
}

Result<Value> FilterIndent(Interpreter& in, std::string_view, const Value& value, CallArgs& args) {
  ASSIGN_OR_RETURN(std::string r,
                   Indent(in, StrOf(value), Arg(args, 0, "width"), Arg(args, 1, "first").Truthy(),
                          Arg(args, 2, "blank").Truthy()));
  return Value::String(std::move(r));
}

Result<Value> FilterEscape(Interpreter& in, std::string_view, const Value& value, CallArgs&) {
  std::string out;
  for (char c : StrOf(value)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  RETURN_IF_ERROR(in.ChargeBytes(out.size()));
  return Value::String(std::move(out));
}

const std::unordered_map<std::string_view, FilterFn>& FilterTable() {
  static const std::unordered_map<std::string_view, FilterFn> kTable = {
      {"abs", FilterAbs},
      {"attr", FilterAttr},
      {"capitalize", FilterCapitalize},
      {"count", FilterLength},
      {"d", FilterDefault},
      {"default", FilterDefault},
      {"dictsort", FilterDictSort},
      {"e", FilterEscape},
      {"escape", FilterEscape},
      {"first", FilterFirstLast},
      {"float", FilterFloat},
      {"format", FilterFormat},
      {"indent", FilterIndent},
      {"int", FilterInt},
      {"items", FilterItems},
      {"join", FilterJoin},
      {"last", FilterFirstLast},
      {"length", FilterLength},
      {"list", FilterList},
      {"lower", FilterLower},
      {"map", FilterMap},
      {"max", FilterSumMinMax},
      {"min", FilterSumMinMax},
      {"reject", FilterSelect},
      {"rejectattr", FilterSelect},
      {"replace", FilterReplace},
      {"reverse", FilterReverse},
      {"round", FilterRound},
      {"safe", FilterSafe},
      {"select", FilterSelect},
      {"selectattr", FilterSelect},
      {"sort", FilterSort},
      {"string", FilterString},
      {"sum", FilterSumMinMax},
      {"title", FilterTitle},
      {"tojson", FilterToJson},
      {"trim", FilterStrip},
      {"unique", FilterUnique},
      {"upper", FilterUpper},
      {"wordcount", FilterWordCount},
      {"strip", FilterStrip},
      {"lstrip", FilterStrip},
      {"rstrip", FilterStrip},
  };
  return kTable;
}

// ---- methods of str, dict and list: one small function each, found by receiver type and name ----

using MethodFn = Result<Value> (*)(Interpreter& in, const Value& self, std::string_view name,
                                   CallArgs& args);
using MethodTable = std::unordered_map<std::string_view, MethodFn>;

// str.strip, lstrip, rstrip
Result<Value> StrStrip(Interpreter&, const Value& self, std::string_view name, CallArgs& args) {
  ASSIGN_OR_RETURN(std::string r,
                   Strip(self.str(), Arg(args, 0, "chars"), name != "rstrip", name != "lstrip"));
  return Value::String(std::move(r));
}

// rsplit with maxsplit >= 0: splits from the right.
Value RSplit(const std::string& s, const std::string& sep, int64_t ms) {
  ValueList parts;
  size_t end = s.size();
  int64_t done = 0;
  while (done < ms) {
    size_t f = end >= sep.size() ? s.rfind(sep, end - sep.size()) : std::string::npos;
    if (f == std::string::npos) break;
    parts.insert(parts.begin(), Value::String(s.substr(f + sep.size(), end - f - sep.size())));
    end = f;
    ++done;
  }
  parts.insert(parts.begin(), Value::String(s.substr(0, end)));
  return Value::List(std::move(parts));
}

// str.split, rsplit
Result<Value> StrSplit(Interpreter& in, const Value& self, std::string_view name, CallArgs& args) {
  const std::string& s = self.str();
  Value sep = Arg(args, 0, "sep");
  Value maxsplit = Arg(args, 1, "maxsplit");
  if (sep.is_string() && sep.str().empty()) return Err("empty separator");
  if (!sep.is_undefined() && !sep.is_none() && !sep.is_string()) {
    return Err("split separator must be a string");
  }
  RETURN_IF_ERROR(in.ChargeBytes(s.size()));
  int64_t ms = maxsplit.is_int() ? maxsplit.as_int() : -1;
  if (name == "rsplit" && ms >= 0) {
    if (!sep.is_string()) return Err("rsplit with maxsplit needs a separator");
    return RSplit(s, sep.str(), ms);
  }
  return SplitString(s, sep, ms);
}

// str.startswith, endswith
Result<Value> StrStartsEnds(Interpreter&, const Value& self, std::string_view name,
                            CallArgs& args) {
  const std::string& s = self.str();
  Value p = Arg(args, 0, "prefix");
  ValueList cands = p.is_list() ? p.list() : ValueList{p};
  for (const Value& c : cands) {
    if (!c.is_string()) return Err(std::string(name) + " needs a string or tuple of strings");
    const std::string& x = c.str();
    bool hit = name == "startswith"
                   ? s.compare(0, x.size(), x) == 0
                   : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
    if (hit) return Value::Bool(true);
  }
  return Value::Bool(false);
}

Result<Value> StrReplace(Interpreter& in, const Value& self, std::string_view, CallArgs& args) {
  Value old = Arg(args, 0, "old"), repl = Arg(args, 1, "new"), count = Arg(args, 2, "count");
  if (!old.is_string() || !repl.is_string()) return Err("replace needs two strings");
  ASSIGN_OR_RETURN(std::string r, Replace(in, self.str(), old.str(), repl.str(),
                                          count.is_int() ? count.as_int() : -1));
  return Value::String(std::move(r));
}

Result<Value> StrUpper(Interpreter&, const Value& self, std::string_view, CallArgs&) {
  return Value::String(AsciiStrToUpper(self.str()));
}

Result<Value> StrLower(Interpreter&, const Value& self, std::string_view, CallArgs&) {
  return Value::String(AsciiStrToLower(self.str()));
}

Result<Value> StrTitle(Interpreter&, const Value& self, std::string_view, CallArgs&) {
  return Value::String(PyTitle(self.str()));
}

Result<Value> StrCapitalize(Interpreter&, const Value& self, std::string_view, CallArgs&) {
  return Value::String(Capitalize(self.str()));
}

// str.find, rfind, index, count
Result<Value> StrFind(Interpreter&, const Value& self, std::string_view name, CallArgs& args) {
  const std::string& s = self.str();
  ASSIGN_OR_RETURN(std::string sub, ArgString(Arg(args, 0, "sub"), "argument"));
  if (name == "count") {
    if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointCount(s)) + 1);
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value::Int(n);
  }
  size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
  if (p == std::string::npos) {
    if (name == "index") return Err("substring not found");
    return Value::Int(-1);
  }
  return Value::Int(static_cast<int64_t>(CodePointCount(std::string_view(s).substr(0, p))));
}

Result<Value> StrJoin(Interpreter& in, const Value& self, std::string_view, CallArgs& args) {
  const std::string& s = self.str();
  ASSIGN_OR_RETURN(ValueList items, Iterate(in, Arg(args, 0, "iterable")));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) return Err("join: sequence item must be str");
    if (i) out += s;
    out += items[i].str();
    if (out.size() > in.max_bytes()) break;
  }
  RETURN_IF_ERROR(in.ChargeBytes(out.size()));
  return Value::String(std::move(out));
}

Result<Value> StrSplitLines(Interpreter&, const Value& self, std::string_view, CallArgs&) {
  ValueList out;
  for (std::string& l : SplitLines(self.str())) out.push_back(Value::String(std::move(l)));
  return Value::List(std::move(out));
}

// str.removeprefix, removesuffix
Result<Value> StrRemoveFix(Interpreter&, const Value& self, std::string_view name, CallArgs& args) {
  const std::string& s = self.str();
  ASSIGN_OR_RETURN(std::string x, ArgString(Arg(args, 0, "fix"), "argument"));
  if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) {
    return Value::String(s.substr(x.size()));
  }
  if (name == "removesuffix" && !x.empty() && s.size() >= x.size() &&
      s.compare(s.size() - x.size(), x.size(), x) == 0) {
    return Value::String(s.substr(0, s.size() - x.size()));
  }
  return self;
}

Result<Value> StrFormat(Interpreter& in, const Value& self, std::string_view, CallArgs& args) {
  ASSIGN_OR_RETURN(std::string r, PyStrFormat(in, self.str(), args));
  return Value::String(std::move(r));
}

// str.isdigit, isalpha, isalnum, isspace, islower, isupper
Result<Value> StrIs(Interpreter&, const Value& self, std::string_view name, CallArgs&) {
  const std::string& s = self.str();
  if (s.empty()) return Value::Bool(false);
  if (name == "islower") return Value::Bool(AsciiStrToLower(s) == s && AsciiStrToUpper(s) != s);
  if (name == "isupper") return Value::Bool(AsciiStrToUpper(s) == s && AsciiStrToLower(s) != s);
  for (char c : s) {
    bool ok = name == "isdigit"   ? (c >= '0' && c <= '9')
              : name == "isalpha" ? IsAlpha(c)
              : name == "isalnum" ? (IsAlpha(c) || (c >= '0' && c <= '9'))
                                  : IsPyWhitespace(static_cast<unsigned char>(c));
    if (!ok) return Value::Bool(false);
  }
  return Value::Bool(true);
}

// dict.items, keys, values
Result<Value> DictView(Interpreter& in, const Value& self, std::string_view name, CallArgs&) {
  ValueList out;
  for (const auto& [k, v] : self.dict().entries()) {
    if (name == "items")
      out.push_back(Value::List({Value::String(k), v}));
    else if (name == "keys")
      out.push_back(Value::String(k));
    else
      out.push_back(v);
  }
  RETURN_IF_ERROR(in.Charge(out.size()));
  return Value::List(std::move(out));
}

Result<Value> DictGet(Interpreter&, const Value& self, std::string_view, CallArgs& args) {
  Value key = Arg(args, 0, "key");
  Value def = Arg(args, 1, "default");
  if (key.is_string()) {
    const Value* f = self.dict().Find(key.str());
    if (f != nullptr) return *f;
  }
  return def.is_undefined() ? Value::None() : def;
}

Result<Value> DictCopy(Interpreter&, const Value& self, std::string_view, CallArgs&) {
  Value c = Value::Dict();
  for (const auto& [k, v] : self.dict().entries()) c.dict().Set(k, v);
  return c;
}

// list.index, count
Result<Value> ListFind(Interpreter&, const Value& self, std::string_view name, CallArgs& args) {
  Value x = Arg(args, 0, "value");
  int64_t n = 0;
  for (size_t i = 0; i < self.list().size(); ++i) {
    if (Equals(self.list()[i], x)) {
      if (name == "index") return Value::Int(static_cast<int64_t>(i));
      ++n;
    }
  }
  if (name == "index") return Err("value is not in list");
  return Value::Int(n);
}

const MethodTable& StrMethods() {
  static const MethodTable kTable = {
      {"strip", StrStrip},
      {"lstrip", StrStrip},
      {"rstrip", StrStrip},
      {"split", StrSplit},
      {"rsplit", StrSplit},
      {"startswith", StrStartsEnds},
      {"endswith", StrStartsEnds},
      {"replace", StrReplace},
      {"upper", StrUpper},
      {"lower", StrLower},
      {"title", StrTitle},
      {"capitalize", StrCapitalize},
      {"find", StrFind},
      {"rfind", StrFind},
      {"index", StrFind},
      {"count", StrFind},
      {"join", StrJoin},
      {"splitlines", StrSplitLines},
      {"removeprefix", StrRemoveFix},
      {"removesuffix", StrRemoveFix},
      {"format", StrFormat},
      {"isdigit", StrIs},
      {"isalpha", StrIs},
      {"isalnum", StrIs},
      {"isspace", StrIs},
      {"islower", StrIs},
      {"isupper", StrIs},
  };
  return kTable;
}

const MethodTable& DictMethods() {
  static const MethodTable kTable = {
      {"items", DictView}, {"keys", DictView}, {"values", DictView},
      {"get", DictGet},    {"copy", DictCopy},
  };
  return kTable;
}

const MethodTable& ListMethods() {
  static const MethodTable kTable = {{"index", ListFind}, {"count", ListFind}};
  return kTable;
}

const MethodTable* MethodsOf(const Value& self) {
  if (self.is_string()) return &StrMethods();
  if (self.is_dict()) return &DictMethods();
  if (self.is_list()) return &ListMethods();
  return nullptr;
}

}  // namespace

ValueList StringChars(const std::string& s) {
  ValueList items;
  std::vector<size_t> offs = CodePointOffsets(s);
  for (size_t i = 0; i + 1 < offs.size(); ++i) {
    items.push_back(Value::String(s.substr(offs[i], offs[i + 1] - offs[i])));
  }
  return items;
}

Result<ValueList> Iterate(Interpreter& in, const Value& v) {
  ValueList items;
  if (v.is_list()) {
    items = v.list();
  } else if (v.is_dict()) {
    for (const auto& [k, e] : v.dict().entries()) items.push_back(Value::String(k));
  } else if (v.is_string()) {
    items = StringChars(v.str());
  } else if (!v.is_undefined()) {
    return Err("'" + std::string(v.TypeName()) + "' object is not iterable");
  }
  RETURN_IF_ERROR(in.Charge(items.size()));
  return items;
}

bool IsKnownFilter(std::string_view name) { return FilterTable().count(name) != 0; }
bool IsKnownTest(std::string_view name) { return TestNames().count(name) != 0; }

Result<bool> Contains(const Value& container, const Value& x) {
  if (container.is_string()) {
    if (!x.is_string()) {
      return Err("'in <string>' requires string as left operand, not " + std::string(x.TypeName()));
    }
    return container.str().find(x.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& e : container.list()) {
      if (Equals(e, x)) return true;
    }
    return false;
  }
  if (container.is_dict()) return x.is_string() && container.dict().Find(x.str()) != nullptr;
  if (container.is_undefined()) return false;
  return Err("argument of type '" + std::string(container.TypeName()) + "' is not iterable");
}

Value SplitString(const std::string& s, const Value& sep, int64_t maxsplit) {
  ValueList parts;
  if (sep.is_undefined() || sep.is_none()) {
    std::vector<uint32_t> cps = Decode(s);
    size_t i = 0;
    int64_t splits = 0;
    while (i < cps.size()) {
      while (i < cps.size() && IsPyWhitespace(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && splits >= maxsplit) {
        size_t end = cps.size();
        while (end > i && IsPyWhitespace(cps[end - 1])) --end;
        parts.push_back(Value::String(Encode(cps, i, end)));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !IsPyWhitespace(cps[j])) ++j;
      parts.push_back(Value::String(Encode(cps, i, j)));
      ++splits;
      i = j;
    }
    return Value::List(std::move(parts));
  }
  const std::string& d = sep.str();
  size_t pos = 0;
  int64_t splits = 0;
  while (maxsplit < 0 || splits < maxsplit) {
    size_t f = s.find(d, pos);
    if (f == std::string::npos) break;
    parts.push_back(Value::String(s.substr(pos, f - pos)));
    pos = f + d.size();
    ++splits;
  }
  parts.push_back(Value::String(s.substr(pos)));
  return Value::List(std::move(parts));
}

Result<Value> ApplyFilter(Interpreter& in, std::string_view name, const Value& value,
                          CallArgs& args) {
  RETURN_IF_ERROR(in.Charge(1));
  const auto& table = FilterTable();
  auto it = table.find(name);
  if (it == table.end()) return Err("filter '" + std::string(name) + "' is not supported");
  return it->second(in, name, value, args);
}

Result<bool> ApplyTest(Interpreter& in, std::string_view name, const Value& value, CallArgs& args) {
  RETURN_IF_ERROR(in.Charge(1));
  const Value other = Arg(args, 0, "value");
  if (name == "defined") return !value.is_undefined();
  if (name == "undefined") return value.is_undefined();
  if (name == "none") return value.is_none();
  if (name == "string") return value.is_string();
  if (name == "mapping") return value.is_dict();
  if (name == "iterable") {
    return value.is_string() || value.is_list() || value.is_dict() || value.is_undefined();
  }
  if (name == "sequence") {
    return value.is_string() || value.is_list() || value.is_dict() || value.is_undefined();
  }
  if (name == "number") return value.is_number();
  if (name == "integer") return value.is_int();
  if (name == "float") return value.is_float();
  if (name == "boolean") return value.is_bool();
  if (name == "true") return value.is_bool() && value.as_bool();
  if (name == "false") return value.is_bool() && !value.as_bool();
  if (name == "callable") return value.is_callable();
  if (name == "escaped") return false;
  if (name == "odd" || name == "even") {
    if (!value.is_int() && !value.is_bool()) return Err("odd/even need an integer");
    bool odd = (value.as_int() % 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "divisibleby") {
    if (!value.is_number() || !other.is_number()) return Err("divisibleby needs numbers");
    if (other.is_float() || value.is_float()) {
      if (other.as_float() == 0) return Err("division by zero");
      return std::fmod(value.as_float(), other.as_float()) == 0;
    }
    if (other.as_int() == 0) return Err("integer division or modulo by zero");
    if (other.as_int() == -1) return true;
    return value.as_int() % other.as_int() == 0;
  }
  if (name == "lower") return value.is_string() && AsciiStrToLower(value.str()) == value.str();
  if (name == "upper") return value.is_string() && AsciiStrToUpper(value.str()) == value.str();
  if (name == "sameas") {
    if (value.kind() != other.kind()) return false;
    if (value.is_list()) return &value.list() == &other.list();
    if (value.is_dict() || value.is_namespace()) return &value.dict() == &other.dict();
    return Equals(value, other);
  }
  if (name == "in") return Contains(other, value);
  if (name == "eq" || name == "equalto" || name == "==") return Equals(value, other);
  if (name == "ne" || name == "!=") return !Equals(value, other);
  if (name == "filter") return other.is_string() && IsKnownFilter(other.str());
  if (name == "test") return other.is_string() && IsKnownTest(other.str());
  ASSIGN_OR_RETURN(int c, Compare(value, other));
  if (name == "lt" || name == "lessthan" || name == "<") return c < 0;
  if (name == "le" || name == "<=") return c <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return c > 0;
  if (name == "ge" || name == ">=") return c >= 0;
  return Err("test '" + std::string(name) + "' is not supported");
}

Result<Value> CallMethod(Interpreter& in, const Value& self, std::string_view name, CallArgs& args,
                         bool* found) {
  *found = true;
  RETURN_IF_ERROR(in.Charge(1));
  if (const MethodTable* methods = MethodsOf(self)) {
    auto it = methods->find(name);
    if (it != methods->end()) return it->second(in, self, name, args);
  }
  if (self.is_dict() && self.dict().Find(name) != nullptr) {
    *found = false;  // a stored callable (e.g. loop.cycle) handled by the caller
    return Value();
  }
  static const std::set<std::string_view> kMutating = {"append", "extend",     "insert", "pop",
                                                       "remove", "clear",      "sort",   "reverse",
                                                       "update", "setdefault", "popitem"};
  if (kMutating.count(name) != 0) {
    return Err("'" + std::string(self.TypeName()) + "." + std::string(name) +
               "()' is not allowed: templates cannot modify values");
  }
  *found = false;
  return Value();
}

Value MakeGlobal(std::string_view name) {
  if (name == "raise_exception") {
    return Value::Function(
        Native("raise_exception", [](Interpreter&, CallArgs& a) -> Result<Value> {
          std::string msg = a.positional.empty() ? "" : ToPyStr(a.positional[0]);
          return Status::InvalidArgument(std::move(msg));
        }));
  }
  if (name == "range") {
    return Value::Function(Native("range", [](Interpreter& in, CallArgs& a) -> Result<Value> {
      int64_t start = 0, stop = 0, step = 1;
      for (const Value& v : a.positional) {
        if (!v.is_int() && !v.is_bool()) return Err("range() arguments must be integers");
      }
      if (a.positional.size() == 1) {
        stop = a.positional[0].as_int();
      } else if (a.positional.size() == 2 || a.positional.size() == 3) {
        start = a.positional[0].as_int();
        stop = a.positional[1].as_int();
        if (a.positional.size() == 3) step = a.positional[2].as_int();
      } else {
        return Err("range() takes 1 to 3 arguments");
      }
      if (step == 0) return Err("range() step must not be zero");
      double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                               static_cast<double>(step));
      if (count < 0) count = 0;
      // Charge before allocating: a hostile range(10**12) fails here, not in the allocator.
      RETURN_IF_ERROR(in.Charge(static_cast<uint64_t>(count)));
      ValueList items;
      items.reserve(static_cast<size_t>(count));
      for (int64_t i = 0; i < static_cast<int64_t>(count); ++i)
        items.push_back(Value::Int(start + i * step));
      return Value::List(std::move(items));
    }));
  }
  if (name == "namespace" || name == "dict") {
    bool ns = name == "namespace";
    return Value::Function(
        Native(std::string(name), [ns](Interpreter& in, CallArgs& a) -> Result<Value> {
          Value v = ns ? Value::Namespace() : Value::Dict();
          if (ns) in.TrackNamespace(v);
          for (const Value& p : a.positional) {
            if (!p.is_dict())
              return Err("namespace()/dict() positional argument must be a mapping");
            for (const auto& [k, e] : p.dict().entries()) v.dict().Set(k, e);
          }
          for (const auto& [k, e] : a.keyword) v.dict().Set(k, e);
          return v;
        }));
  }
  return Value();
}

}  // namespace strata::tokenizer::chat
