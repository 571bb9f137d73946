// Jinja-subset interpreter: lexer (with HF's whitespace rules), recursive-descent parser to an AST,
// and a tree-walking evaluator with Python-like values. See jinja.h for the supported subset.
#include "runtime/text/jinja.h"

#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/text/utf8.h"

namespace tandem::text::jinja {
namespace {

// ================================ Values ================================

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python dicts

struct Value {
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace
  };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // kString: the text; kUndefined: what was looked up (for messages)
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // kDict and kNamespace

  static Value Undefined(std::string what) {
    Value v;
    v.s = std::move(what);
    return v;
  }
  static Value None() {
    Value v;
    v.kind = Kind::kNone;
    return v;
  }
  static Value Bool(bool x) {
    Value v;
    v.kind = Kind::kBool;
    v.b = x;
    return v;
  }
  static Value Int(int64_t x) {
    Value v;
    v.kind = Kind::kInt;
    v.i = x;
    return v;
  }
  static Value Float(double x) {
    Value v;
    v.kind = Kind::kFloat;
    v.f = x;
    return v;
  }
  static Value Str(std::string x) {
    Value v;
    v.kind = Kind::kString;
    v.s = std::move(x);
    return v;
  }
  static Value MakeList(List items) {
    Value v;
    v.kind = Kind::kList;
    v.list = std::make_shared<List>(std::move(items));
    return v;
  }
  static Value MakeDict(Dict items, Kind kind = Kind::kDict) {
    Value v;
    v.kind = kind;
    v.dict = std::make_shared<Dict>(std::move(items));
    return v;
  }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  double as_double() const {
    return kind == Kind::kFloat ? f : static_cast<double>(kind == Kind::kBool ? b : i);
  }
  int64_t as_int() const { return kind == Kind::kBool ? b : i; }
};

const char* KindName(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kUndefined:
      return "undefined";
    case Value::Kind::kNone:
      return "none";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "string";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "namespace";
  }
  return "?";
}

Value FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::Int(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::Str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& e : j) items.push_back(FromJson(e));
      return Value::MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      for (auto it = j.begin(); it != j.end(); ++it)
        items.emplace_back(it.key(), FromJson(it.value()));
      return Value::MakeDict(std::move(items));
    }
    default:
      return Value::None();
  }
}

bool Truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.b;
    case Value::Kind::kInt:
      return v.i != 0;
    case Value::Kind::kFloat:
      return v.f != 0;
    case Value::Kind::kString:
      return !v.s.empty();
    case Value::Kind::kList:
      return !v.list->empty();
    case Value::Kind::kDict:
      return !v.dict->empty();
    case Value::Kind::kNamespace:
      return true;
  }
  return false;
}

std::string FloatRepr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), x);
  std::string s(buffer, end);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string Repr(const Value& v);

// Python str().
std::string ToStr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return FloatRepr(v.f);
    case Value::Kind::kString:
      return v.s;
    default:
      return Repr(v);
  }
}

// Python repr() for the container renderings.
std::string Repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString: {
      const char quote =
          v.s.find('\'') != std::string::npos && v.s.find('"') == std::string::npos ? '"' : '\'';
      std::string out(1, quote);
      for (char c : v.s) {
        if (c == '\\') {
          out += "\\\\";
        } else if (c == quote) {
          out += '\\';
          out += c;
        } else if (c == '\n') {
          out += "\\n";
        } else if (c == '\t') {
          out += "\\t";
        } else if (c == '\r') {
          out += "\\r";
        } else {
          out += c;
        }
      }
      return out + quote;
    }
    case Value::Kind::kList: {
      std::string out = "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += Repr((*v.list)[k]);
      }
      return out + "]";
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      std::string out = v.kind == Value::Kind::kNamespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [key, value] : *v.dict) {
        if (!first) out += ", ";
        first = false;
        out += Repr(Value::Str(key)) + ": " + Repr(value);
      }
      return out + (v.kind == Value::Kind::kNamespace ? "}>" : "}");
    }
    default:
      return ToStr(v);
  }
}

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (u < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", u);
          *out += buffer;
        } else {
          out->push_back(c);  // ensure_ascii=False: UTF-8 passes through
        }
    }
  }
  out->push_back('"');
}

// json.dumps(value, ensure_ascii=False) with the default separators, as HF's tojson filter.
absl::Status ToJson(const Value& v, std::string* out) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return absl::InvalidArgumentError(absl::StrCat("tojson: '", v.s, "' is undefined"));
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.b ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      *out += std::to_string(v.i);
      return absl::OkStatus();
    case Value::Kind::kFloat:
      *out += FloatRepr(v.f);
      return absl::OkStatus();
    case Value::Kind::kString:
      AppendJsonString(v.s, out);
      return absl::OkStatus();
    case Value::Kind::kList:
      *out += "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) *out += ", ";
        TANDEM_RETURN_IF_ERROR(ToJson((*v.list)[k], out));
      }
      *out += "]";
      return absl::OkStatus();
    case Value::Kind::kDict:
      *out += "{";
      for (size_t k = 0; k < v.dict->size(); ++k) {
        if (k) *out += ", ";
        AppendJsonString((*v.dict)[k].first, out);
        *out += ": ";
        TANDEM_RETURN_IF_ERROR(ToJson((*v.dict)[k].second, out));
      }
      *out += "}";
      return absl::OkStatus();
    case Value::Kind::kNamespace:
      return absl::InvalidArgumentError("tojson: a namespace is not JSON serialisable");
  }
  return absl::OkStatus();
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::kFloat || b.kind == Value::Kind::kFloat)
      return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.s == b.s;
    case Value::Kind::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!Equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [key, value] : *a.dict) {
        bool found = false;
        for (const auto& [key2, value2] : *b.dict) {
          if (key == key2) {
            found = Equal(value, value2);
            break;
          }
        }
        if (!found) return false;
      }
      return true;
    case Value::Kind::kNamespace:
      return a.dict == b.dict;
    default:
      return false;
  }
}

std::vector<std::string> CodePoints(std::string_view s) {
  std::vector<std::string> out;
  size_t pos = 0;
  char32_t cp;
  while (pos < s.size()) {
    size_t n = DecodeUtf8(s, pos, &cp);
    if (n == 0) n = 1;
    out.emplace_back(s.substr(pos, n));
    pos += n;
  }
  return out;
}

const Value* DictFind(const Dict& dict, std::string_view key) {
  for (const auto& [k, v] : dict) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Python str.strip/lstrip/rstrip; `chars` null means whitespace.
std::string Strip(std::string_view s, const std::string* chars, bool left, bool right) {
  auto strip_char = [&](char c) {
    return chars ? chars->find(c) != std::string::npos : IsSpace(c);
  };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end && strip_char(s[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip_char(s[end - 1])) --end;
  }
  return std::string(s.substr(begin, end - begin));
}

// ================================ Lexer ================================

struct Token {
  enum class Kind {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEnd
  };
  Kind kind;
  std::string text;
  int line;
};

absl::Status SyntaxError(int line, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("chat template line ", line, ": ", std::string(what)));
}

absl::Status Unsupported(int line, std::string_view construct) {
  return absl::UnimplementedError(
      absl::StrCat("chat template line ", line, ": unsupported Jinja construct ",
                   std::string(construct), " (outside the subset this interpreter implements)"));
}

class Lexer {
 public:
  explicit Lexer(std::string_view raw) {
    // Jinja normalises \r\n and \r to \n and drops one trailing newline (keep_trailing_newline
    // is false in HF's environment).
    src_.reserve(raw.size());
    for (size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] == '\r') {
        src_.push_back('\n');
        if (k + 1 < raw.size() && raw[k + 1] == '\n') ++k;
      } else {
        src_.push_back(raw[k]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t tag = FindTagStart(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        Emit(Token::Kind::kText, std::move(text));
        pos_ = tag;
        break;
      }
      const char type = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')
                            ? src_[tag + 2]
                            : 0;
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && IsSpace(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && type != '{') {
        // lstrip_blocks: whitespace between the start of the line and a block or comment tag.
        const size_t line_begin = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (line_begin > 0 || line_starting) {
          bool blank = line_begin < text.size();
          for (size_t k = line_begin; k < text.size(); ++k) blank = blank && IsSpace(text[k]);
          if (blank) text.resize(line_begin);
        }
      }
      line_ += CountNewlines(src_.substr(pos_, tag - pos_));
      Emit(Token::Kind::kText, std::move(text));
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (type == '#') {
        TANDEM_RETURN_IF_ERROR(SkipComment());
      } else {
        TANDEM_RETURN_IF_ERROR(LexTag(type == '{'));
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    Emit(Token::Kind::kEnd, "");
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k) {
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#'))
        return k;
    }
    return src_.size();
  }
  static int CountNewlines(std::string_view s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
  }
  void Emit(Token::Kind kind, std::string text) {
    if (kind == Token::Kind::kText && text.empty()) return;
    tokens_.push_back({kind, std::move(text), line_});
  }
  // After a closing delimiter: '-' strips all following whitespace, otherwise trim_blocks removes
  // one newline after block and comment tags ('+' keeps it).
  void AfterClose(char sign, bool is_block_or_comment) {
    if (sign == '-') {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) {
        line_ += src_[pos_] == '\n';
        ++pos_;
      }
    } else if (sign != '+' && is_block_or_comment && pos_ < src_.size() && src_[pos_] == '\n') {
      ++line_;
      ++pos_;
    }
  }
  absl::Status SkipComment() {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) return SyntaxError(line_, "unterminated comment {# ... #}");
    const char sign =
        close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
    line_ += CountNewlines(src_.substr(pos_, close - pos_));
    pos_ = close + 2;
    AfterClose(sign, true);
    return absl::OkStatus();
  }
  absl::Status LexTag(bool is_var) {
    Emit(is_var ? Token::Kind::kVarBegin : Token::Kind::kBlockBegin, is_var ? "{{" : "{%");
    const char close_char = is_var ? '}' : '%';
    int depth = 0;  // brackets: a closing "}}" inside {...} is an operator, as in Jinja
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) {
        line_ += src_[pos_] == '\n';
        ++pos_;
      }
      if (pos_ >= src_.size()) {
        return SyntaxError(line_, is_var ? "unterminated {{ ... }}" : "unterminated {% ... %}");
      }
      const std::string_view rest = std::string_view(src_).substr(pos_);
      if (depth == 0) {
        for (char sign : {'-', '+', '\0'}) {
          if (sign == '+' && is_var) continue;
          std::string close;
          if (sign) close += sign;
          close += close_char;
          close += '}';
          if (rest.substr(0, close.size()) == close) {
            pos_ += close.size();
            Emit(is_var ? Token::Kind::kVarEnd : Token::Kind::kBlockEnd, close);
            AfterClose(sign, !is_var);
            return absl::OkStatus();
          }
        }
      }
      const char c = rest[0];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t n = 1;
        while (n < rest.size() &&
               (std::isalnum(static_cast<unsigned char>(rest[n])) || rest[n] == '_'))
          ++n;
        Emit(Token::Kind::kName, std::string(rest.substr(0, n)));
        pos_ += n;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t n = 1;
        while (n < rest.size() &&
               (std::isdigit(static_cast<unsigned char>(rest[n])) || rest[n] == '_'))
          ++n;
        bool is_float = false;
        if (n + 1 < rest.size() && rest[n] == '.' &&
            std::isdigit(static_cast<unsigned char>(rest[n + 1]))) {
          is_float = true;
          ++n;
          while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) ++n;
        }
        std::string number;
        for (char d : rest.substr(0, n)) {
          if (d != '_') number += d;
        }
        Emit(is_float ? Token::Kind::kFloat : Token::Kind::kInt, number);
        pos_ += n;
      } else if (c == '\'' || c == '"') {
        TANDEM_RETURN_IF_ERROR(LexString(c));
      } else {
        static constexpr std::string_view kTwoChar[] = {"==", "!=", "<=", ">=", "//", "**"};
        std::string op(1, c);
        for (std::string_view two : kTwoChar) {
          if (rest.substr(0, 2) == two) op = std::string(two);
        }
        if (op.size() == 1 &&
            std::string_view("+-*/%~<>()[]{}.,:|=").find(c) == std::string_view::npos) {
          return SyntaxError(line_, absl::StrCat("unexpected character '", op, "'"));
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        Emit(Token::Kind::kOp, op);
        pos_ += op.size();
      }
    }
  }
  absl::Status LexString(char quote) {
    std::string value;
    size_t k = pos_ + 1;
    for (; k < src_.size() && src_[k] != quote; ++k) {
      char c = src_[k];
      if (c == '\n') ++line_;
      if (c != '\\' || k + 1 >= src_.size()) {
        value += c;
        continue;
      }
      // Python string-literal escapes (Jinja evaluates literals the same way).
      const char e = src_[++k];
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case '\\':
        case '\'':
        case '"':
          value += e;
          break;
        case '\n':
          break;  // line continuation
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case 'a':
          value += '\a';
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t digits = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          char32_t cp = 0;
          bool ok = k + digits < src_.size();
          for (size_t d = 1; ok && d <= digits; ++d) {
            const char h = src_[k + d];
            ok = std::isxdigit(static_cast<unsigned char>(h)) != 0;
            cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                     ? h - '0'
                                                     : std::tolower(static_cast<unsigned char>(h)) -
                                                           'a' + 10);
          }
          if (!ok || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return SyntaxError(
                line_, absl::StrCat("bad \\", std::string(1, e), " escape in a string literal"));
          }
          AppendUtf8(cp, &value);
          k += digits;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {  // octal, up to three digits
            int v = e - '0';
            for (int d = 0;
                 d < 2 && k + 1 < src_.size() && src_[k + 1] >= '0' && src_[k + 1] <= '7'; ++d) {
              v = v * 8 + (src_[++k] - '0');
            }
            AppendUtf8(static_cast<char32_t>(v), &value);
            break;
          }
          value += '\\';
          value += e;
      }
    }
    if (k >= src_.size()) return SyntaxError(line_, "unterminated string literal");
    Emit(Token::Kind::kString, std::move(value));
    pos_ = k + 1;
    return absl::OkStatus();
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

// ================================ AST ================================

struct Expr {
  enum class Kind {
    kLiteral,
    kName,
    kList,
    kAttr,
    kItem,
    kSlice,
    kCall,
    kMethod,
    kFilter,
    kTest,
    kNot,
    kNeg,
    kBinary,
    kCond,
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  std::string name;  // name, attribute, function, method, filter, test or binary operator
  Value literal;
  bool negated = false;  // `is not`
  std::vector<std::unique_ptr<Expr>>
      args;  // operands; kSlice: object, start, stop, step (may be null)
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
};
using ExprPtr = std::unique_ptr<Expr>;

ExprPtr NewExpr(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;  // kText: the text; kFor: loop variable; kSet: target name
  std::string attr;  // kSet: namespace attribute, if any
  ExprPtr expr;      // kOutput / kSet value / kFor iterable
  std::vector<std::pair<ExprPtr, std::vector<Node>>>
      branches;  // kIf: (condition, body); kFor: (null, body)
  std::vector<Node> else_body;
};

Node NewNode(Node::Kind kind, int line) {
  Node node;
  node.kind = kind;
  node.line = line;
  return node;
}

const std::set<std::string, std::less<>>& KnownFilters() {
  static const std::set<std::string, std::less<>> names = {"length", "count",   "trim",  "string",
                                                           "lower",  "upper",   "first", "last",
                                                           "join",   "default", "d",     "tojson"};
  return names;
}
const std::set<std::string, std::less<>>& KnownTests() {
  static const std::set<std::string, std::less<>> names = {
      "defined", "undefined", "none",     "string",   "number", "integer",
      "boolean", "mapping",   "sequence", "iterable", "true",   "false"};
  return names;
}
const std::set<std::string, std::less<>>& KnownMethods() {
  static const std::set<std::string, std::less<>> names = {
      "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "upper",
      "lower",      "replace",  "get",   "items",  "keys",   "values"};
  return names;
}

// ================================ Parser ================================

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<std::vector<Node>> ParseTemplate() {
    std::vector<Node> body;
    std::string end_keyword;
    TANDEM_RETURN_IF_ERROR(ParseBody({}, &body, &end_keyword));
    return body;
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kOp && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kName && Peek(ahead).text == name;
  }
  absl::Status Expect(Token::Kind kind, std::string_view text, std::string_view what) {
    const Token& t = Peek();
    if (t.kind != kind || (!text.empty() && t.text != text)) {
      return SyntaxError(t.line,
                         absl::StrCat("expected ", std::string(what), ", found '", t.text, "'"));
    }
    ++pos_;
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() { return Expect(Token::Kind::kBlockEnd, "", "'%}'"); }

  // Parses nodes until a block tag whose keyword is in `ends` (consumed up to the keyword, which
  // is returned in *end_keyword) or the end of the template (only when `ends` is empty).
  absl::Status ParseBody(const std::vector<std::string_view>& ends, std::vector<Node>* body,
                         std::string* end_keyword) {
    while (true) {
      const Token& t = Peek();
      switch (t.kind) {
        case Token::Kind::kEnd:
          if (!ends.empty()) {
            return SyntaxError(t.line,
                               absl::StrCat("missing {% ", std::string(ends.back()), " %}"));
          }
          return absl::OkStatus();
        case Token::Kind::kText: {
          Node node = NewNode(Node::Kind::kText, t.line);
          node.text = t.text;
          body->push_back(std::move(node));
          ++pos_;
          break;
        }
        case Token::Kind::kVarBegin: {
          ++pos_;
          Node node = NewNode(Node::Kind::kOutput, t.line);
          TANDEM_ASSIGN_OR_RETURN(node.expr, ParseExpr());
          TANDEM_RETURN_IF_ERROR(Expect(Token::Kind::kVarEnd, "", "'}}'"));
          body->push_back(std::move(node));
          break;
        }
        case Token::Kind::kBlockBegin: {
          const Token& keyword = Peek(1);
          if (keyword.kind != Token::Kind::kName)
            return SyntaxError(keyword.line, "expected a statement after {%");
          for (std::string_view end : ends) {
            if (keyword.text == end) {
              pos_ += 2;
              *end_keyword = keyword.text;
              return absl::OkStatus();
            }
          }
          pos_ += 2;
          TANDEM_RETURN_IF_ERROR(ParseStatement(keyword, body));
          break;
        }
        default:
          return SyntaxError(t.line, absl::StrCat("unexpected '", t.text, "'"));
      }
    }
  }

  absl::Status ParseStatement(const Token& keyword, std::vector<Node>* body) {
    const std::string& k = keyword.text;
    if (k == "if") {
      Node node = NewNode(Node::Kind::kIf, keyword.line);
      std::string end;
      ExprPtr cond;
      TANDEM_ASSIGN_OR_RETURN(cond, ParseExpr());
      TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
      while (true) {
        std::vector<Node> branch;
        TANDEM_RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &branch, &end));
        node.branches.emplace_back(std::move(cond), std::move(branch));
        if (end == "elif") {
          TANDEM_ASSIGN_OR_RETURN(cond, ParseExpr());
          TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
          continue;
        }
        TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
        if (end == "else") {
          TANDEM_RETURN_IF_ERROR(ParseBody({"endif"}, &node.else_body, &end));
          TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
        }
        break;
      }
      body->push_back(std::move(node));
      return absl::OkStatus();
    }
    if (k == "for") {
      Node node = NewNode(Node::Kind::kFor, keyword.line);
      if (Peek().kind != Token::Kind::kName)
        return SyntaxError(Peek().line, "expected a loop variable");
      node.text = Next().text;
      if (IsOp(","))
        return Unsupported(keyword.line, "'{% for a, b in ... %}' (several loop variables)");
      TANDEM_RETURN_IF_ERROR(Expect(Token::Kind::kName, "in", "'in'"));
      TANDEM_ASSIGN_OR_RETURN(node.expr, ParseOr());
      if (IsName("if")) return Unsupported(keyword.line, "'{% for ... if ... %}' (loop filter)");
      if (IsName("recursive")) return Unsupported(keyword.line, "'{% for ... recursive %}'");
      TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
      std::vector<Node> loop_body;
      std::string end;
      TANDEM_RETURN_IF_ERROR(ParseBody({"else", "endfor"}, &loop_body, &end));
      TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
      node.branches.emplace_back(nullptr, std::move(loop_body));
      if (end == "else") {
        TANDEM_RETURN_IF_ERROR(ParseBody({"endfor"}, &node.else_body, &end));
        TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
      }
      body->push_back(std::move(node));
      return absl::OkStatus();
    }
    if (k == "set") {
      Node node = NewNode(Node::Kind::kSet, keyword.line);
      if (Peek().kind != Token::Kind::kName)
        return SyntaxError(Peek().line, "expected a name after set");
      node.text = Next().text;
      if (IsOp(".")) {
        ++pos_;
        if (Peek().kind != Token::Kind::kName)
          return SyntaxError(Peek().line, "expected an attribute name");
        node.attr = Next().text;
      }
      if (IsOp(",")) return Unsupported(keyword.line, "'{% set a, b = ... %}' (tuple assignment)");
      if (Peek().kind == Token::Kind::kBlockEnd) {
        return Unsupported(keyword.line, "'{% set x %}...{% endset %}' (block assignment)");
      }
      TANDEM_RETURN_IF_ERROR(Expect(Token::Kind::kOp, "=", "'='"));
      TANDEM_ASSIGN_OR_RETURN(node.expr, ParseExpr());
      TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
      body->push_back(std::move(node));
      return absl::OkStatus();
    }
    static const std::set<std::string, std::less<>> kKnownUnsupported = {
        "macro", "call", "filter", "with",     "include", "import",     "from",       "extends",
        "block", "raw",  "break",  "continue", "do",      "generation", "autoescape", "trans"};
    if (kKnownUnsupported.count(k) > 0)
      return Unsupported(keyword.line, absl::StrCat("'{% ", k, " %}'"));
    return SyntaxError(keyword.line,
                       absl::StrCat("unknown or misplaced statement '{% ", k, " %}'"));
  }

  // ---- expressions, lowest precedence first (as Jinja's parser) ----
  absl::StatusOr<ExprPtr> ParseExpr() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    while (IsName("if")) {
      const int line = Next().line;
      auto cond = NewExpr(Expr::Kind::kCond, line);
      TANDEM_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr otherwise;
      if (IsName("else")) {
        ++pos_;
        TANDEM_ASSIGN_OR_RETURN(otherwise, ParseExpr());
      }
      cond->args.push_back(std::move(e));
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(otherwise));
      e = std::move(cond);
    }
    return e;
  }
  ExprPtr Binary(std::string op, int line, ExprPtr a, ExprPtr b) {
    auto e = NewExpr(Expr::Kind::kBinary, line);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  absl::StatusOr<ExprPtr> ParseOr() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParseAnd());
    while (IsName("or")) {
      const int line = Next().line;
      TANDEM_ASSIGN_OR_RETURN(ExprPtr rhs, ParseAnd());
      e = Binary("or", line, std::move(e), std::move(rhs));
    }
    return e;
  }
  absl::StatusOr<ExprPtr> ParseAnd() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParseNot());
    while (IsName("and")) {
      const int line = Next().line;
      TANDEM_ASSIGN_OR_RETURN(ExprPtr rhs, ParseNot());
      e = Binary("and", line, std::move(e), std::move(rhs));
    }
    return e;
  }
  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      const int line = Next().line;
      auto e = NewExpr(Expr::Kind::kNot, line);
      TANDEM_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      e->args.push_back(std::move(operand));
      return e;
    }
    return ParseCompare();
  }
  absl::StatusOr<ExprPtr> ParseCompare() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParseMath1());
    int compares = 0;
    while (true) {
      std::string op;
      const int line = Peek().line;
      if (Peek().kind == Token::Kind::kOp &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
           Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++pos_;
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        pos_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (++compares > 1) return Unsupported(line, "chained comparison (a < b < c)");
      TANDEM_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
      e = Binary(op, line, std::move(e), std::move(rhs));
    }
    return e;
  }
  absl::StatusOr<ExprPtr> ParseMath1() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const Token& t = Next();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr rhs, ParseConcat());
      e = Binary(t.text, t.line, std::move(e), std::move(rhs));
    }
    return e;
  }
  absl::StatusOr<ExprPtr> ParseConcat() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParseMath2());
    while (IsOp("~")) {
      const Token& t = Next();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath2());
      e = Binary("~", t.line, std::move(e), std::move(rhs));
    }
    return e;
  }
  absl::StatusOr<ExprPtr> ParseMath2() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParseUnary());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%") || IsOp("**")) {
      const Token& t = Next();
      if (t.text == "**") return Unsupported(t.line, "'**' (power)");
      TANDEM_ASSIGN_OR_RETURN(ExprPtr rhs, ParseUnary());
      e = Binary(t.text, t.line, std::move(e), std::move(rhs));
    }
    return e;
  }
  absl::StatusOr<ExprPtr> ParseUnary() {
    if (IsOp("-") || IsOp("+")) {
      const Token& t = Next();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary());
      if (t.text == "+") return operand;
      auto e = NewExpr(Expr::Kind::kNeg, t.line);
      e->args.push_back(std::move(operand));
      return e;
    }
    TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParsePrimary());
    TANDEM_ASSIGN_OR_RETURN(e, ParsePostfix(std::move(e)));
    return ParseFilters(std::move(e));
  }
  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Next();
    auto literal = [&](Value v) {
      auto e = NewExpr(Expr::Kind::kLiteral, t.line);
      e->literal = std::move(v);
      return e;
    };
    switch (t.kind) {
      case Token::Kind::kName:
        if (t.text == "true" || t.text == "True") return literal(Value::Bool(true));
        if (t.text == "false" || t.text == "False") return literal(Value::Bool(false));
        if (t.text == "none" || t.text == "None") return literal(Value::None());
        {
          auto e = NewExpr(Expr::Kind::kName, t.line);
          e->name = t.text;
          return e;
        }
      case Token::Kind::kString: {
        std::string s = t.text;
        while (Peek().kind == Token::Kind::kString) s += Next().text;  // adjacent literals join
        return literal(Value::Str(std::move(s)));
      }
      case Token::Kind::kInt: {
        int64_t v = 0;
        auto [ptr, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (ec != std::errc())
          return SyntaxError(t.line, absl::StrCat("integer literal out of range: ", t.text));
        return literal(Value::Int(v));
      }
      case Token::Kind::kFloat:
        return literal(Value::Float(std::strtod(t.text.c_str(), nullptr)));
      case Token::Kind::kOp:
        if (t.text == "(") {
          TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParseExpr());
          if (IsOp(",")) return Unsupported(t.line, "tuple literal");
          TANDEM_RETURN_IF_ERROR(Expect(Token::Kind::kOp, ")", "')'"));
          return e;
        }
        if (t.text == "[") {
          auto e = NewExpr(Expr::Kind::kList, t.line);
          while (!IsOp("]")) {
            TANDEM_ASSIGN_OR_RETURN(ExprPtr item, ParseExpr());
            e->args.push_back(std::move(item));
            if (!IsOp(",")) break;
            ++pos_;
          }
          TANDEM_RETURN_IF_ERROR(Expect(Token::Kind::kOp, "]", "']'"));
          return e;
        }
        if (t.text == "{") return Unsupported(t.line, "dict literal {...}");
        break;
      default:
        break;
    }
    return SyntaxError(t.line, absl::StrCat("unexpected '", t.text, "' in an expression"));
  }
  absl::Status ParseArgs(Expr* call) {
    TANDEM_RETURN_IF_ERROR(Expect(Token::Kind::kOp, "(", "'('"));
    while (!IsOp(")")) {
      if (Peek().kind == Token::Kind::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        ++pos_;
        TANDEM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpr());
        call->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!call->kwargs.empty())
          return SyntaxError(Peek().line, "positional argument after keyword argument");
        TANDEM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpr());
        call->args.push_back(std::move(value));
      }
      if (!IsOp(",")) break;
      ++pos_;
    }
    return Expect(Token::Kind::kOp, ")", "')'");
  }
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr e) {
    while (true) {
      if (IsOp(".")) {
        const int line = Next().line;
        if (Peek().kind != Token::Kind::kName && Peek().kind != Token::Kind::kInt) {
          return SyntaxError(line, "expected an attribute name after '.'");
        }
        const std::string attr = Next().text;
        if (IsOp("(")) {
          if (KnownMethods().count(attr) == 0)
            return Unsupported(line, absl::StrCat("method call '.", attr, "()'"));
          auto call = NewExpr(Expr::Kind::kMethod, line);
          call->name = attr;
          call->args.push_back(std::move(e));
          TANDEM_RETURN_IF_ERROR(ParseArgs(call.get()));
          e = std::move(call);
        } else {
          auto access = NewExpr(Expr::Kind::kAttr, line);
          access->name = attr;
          access->args.push_back(std::move(e));
          e = std::move(access);
        }
      } else if (IsOp("[")) {
        const int line = Next().line;
        ExprPtr parts[3];
        int colons = 0;
        while (!IsOp("]")) {
          if (IsOp(":")) {
            if (++colons > 2) return SyntaxError(line, "too many ':' in a slice");
            ++pos_;
            continue;
          }
          if (parts[colons]) return SyntaxError(line, "expected ':' or ']' in a subscript");
          TANDEM_ASSIGN_OR_RETURN(parts[colons], ParseExpr());
        }
        ++pos_;
        if (colons == 0) {
          if (!parts[0]) return SyntaxError(line, "empty subscript []");
          auto item = NewExpr(Expr::Kind::kItem, line);
          item->args.push_back(std::move(e));
          item->args.push_back(std::move(parts[0]));
          e = std::move(item);
        } else {
          auto slice = NewExpr(Expr::Kind::kSlice, line);
          slice->args.push_back(std::move(e));
          for (ExprPtr& p : parts) slice->args.push_back(std::move(p));
          e = std::move(slice);
        }
      } else if (IsOp("(")) {
        const int line = Peek().line;
        if (e->kind != Expr::Kind::kName)
          return Unsupported(line, "calling the result of an expression");
        if (e->name != "raise_exception" && e->name != "namespace") {
          return Unsupported(line, absl::StrCat("function call '", e->name, "()'"));
        }
        auto call = NewExpr(Expr::Kind::kCall, line);
        call->name = e->name;
        TANDEM_RETURN_IF_ERROR(ParseArgs(call.get()));
        e = std::move(call);
      } else {
        return e;
      }
    }
  }
  absl::StatusOr<ExprPtr> ParseFilters(ExprPtr e) {
    while (true) {
      if (IsOp("|")) {
        const int line = Next().line;
        if (Peek().kind != Token::Kind::kName)
          return SyntaxError(line, "expected a filter name after '|'");
        const std::string name = Next().text;
        if (KnownFilters().count(name) == 0)
          return Unsupported(line, absl::StrCat("filter '|", name, "'"));
        auto filter = NewExpr(Expr::Kind::kFilter, line);
        filter->name = name;
        filter->args.push_back(std::move(e));
        if (IsOp("(")) TANDEM_RETURN_IF_ERROR(ParseArgs(filter.get()));
        e = std::move(filter);
      } else if (IsName("is")) {
        const int line = Next().line;
        auto test = NewExpr(Expr::Kind::kTest, line);
        if (IsName("not")) {
          ++pos_;
          test->negated = true;
        }
        if (Peek().kind != Token::Kind::kName)
          return SyntaxError(line, "expected a test name after 'is'");
        test->name = Next().text;
        if (KnownTests().count(test->name) == 0) {
          return Unsupported(line, absl::StrCat("test 'is ", test->name, "'"));
        }
        test->args.push_back(std::move(e));
        e = std::move(test);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

// ================================ Evaluator ================================

class Renderer {
 public:
  explicit Renderer(const nlohmann::ordered_json& context) {
    scopes_.emplace_back();
    if (context.is_object()) {
      for (auto it = context.begin(); it != context.end(); ++it)
        scopes_.back()[it.key()] = FromJson(it.value());
    }
  }

  absl::Status RenderBody(const std::vector<Node>& body, std::string* out) {
    for (const Node& node : body) TANDEM_RETURN_IF_ERROR(RenderNode(node, out));
    return absl::OkStatus();
  }

 private:
  absl::Status Error(int line, std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template line ", line, ": ", std::string(what)));
  }

  absl::Status RenderNode(const Node& node, std::string* out) {
    switch (node.kind) {
      case Node::Kind::kText:
        *out += node.text;
        return absl::OkStatus();
      case Node::Kind::kOutput: {
        TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*node.expr));
        *out += ToStr(v);
        return absl::OkStatus();
      }
      case Node::Kind::kIf:
        for (const auto& [cond, branch] : node.branches) {
          TANDEM_ASSIGN_OR_RETURN(Value c, Eval(*cond));
          if (Truthy(c)) return RenderBody(branch, out);
        }
        return RenderBody(node.else_body, out);
      case Node::Kind::kSet: {
        TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*node.expr));
        if (node.attr.empty()) {
          scopes_.back()[node.text] = std::move(v);
          return absl::OkStatus();
        }
        const Value ns = Lookup(node.text);
        if (ns.kind != Value::Kind::kNamespace) {
          return Error(node.line,
                       absl::StrCat("cannot set attribute '", node.attr, "' of ", KindName(ns.kind),
                                    " '", node.text, "' (only of a namespace)"));
        }
        for (auto& [key, value] : *ns.dict) {
          if (key == node.attr) {
            value = std::move(v);
            return absl::OkStatus();
          }
        }
        ns.dict->emplace_back(node.attr, std::move(v));
        return absl::OkStatus();
      }
      case Node::Kind::kFor:
        return RenderFor(node, out);
    }
    return absl::OkStatus();
  }

  absl::Status RenderFor(const Node& node, std::string* out) {
    TANDEM_ASSIGN_OR_RETURN(Value iterable, Eval(*node.expr));
    List items;
    switch (iterable.kind) {
      case Value::Kind::kUndefined:
        break;  // Jinja iterates an undefined value as empty
      case Value::Kind::kList:
        items = *iterable.list;
        break;
      case Value::Kind::kDict:
        for (const auto& [key, value] : *iterable.dict) items.push_back(Value::Str(key));
        break;
      case Value::Kind::kString:
        for (std::string& cp : CodePoints(iterable.s)) items.push_back(Value::Str(std::move(cp)));
        break;
      default:
        return Error(node.line, absl::StrCat("cannot iterate over a ", KindName(iterable.kind)));
    }
    if (items.empty()) return RenderBody(node.else_body, out);
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < n; ++k) {
      // Each iteration gets its own scope: `set` inside a loop does not leak out, as in Jinja.
      scopes_.emplace_back();
      scopes_.back()[node.text] = items[k];
      scopes_.back()["loop"] = Value::MakeDict({
          {"index0", Value::Int(k)},
          {"index", Value::Int(k + 1)},
          {"revindex0", Value::Int(n - k - 1)},
          {"revindex", Value::Int(n - k)},
          {"first", Value::Bool(k == 0)},
          {"last", Value::Bool(k == n - 1)},
          {"length", Value::Int(n)},
          {"previtem", k > 0 ? items[k - 1] : Value::Undefined("loop.previtem")},
          {"nextitem", k + 1 < n ? items[k + 1] : Value::Undefined("loop.nextitem")},
      });
      absl::Status status = RenderBody(node.branches[0].second, out);
      scopes_.pop_back();
      TANDEM_RETURN_IF_ERROR(status);
    }
    return absl::OkStatus();
  }

  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value::Undefined(name);
  }

  absl::StatusOr<Value> GetAttr(const Expr& e, const Value& object, const std::string& attr) {
    switch (object.kind) {
      case Value::Kind::kDict:
      case Value::Kind::kNamespace:
        if (const Value* v = DictFind(*object.dict, attr)) return *v;
        return Value::Undefined(attr);
      case Value::Kind::kUndefined:
        return Error(e.line, absl::StrCat("'", object.s, "' is undefined (reading '.", attr, "')"));
      default:
        return Value::Undefined(attr);
    }
  }

  absl::StatusOr<Value> GetItem(const Expr& e, const Value& object, const Value& key) {
    if (object.kind == Value::Kind::kUndefined) {
      return Error(e.line, absl::StrCat("'", object.s, "' is undefined (subscripting it)"));
    }
    if (key.kind == Value::Kind::kString) return GetAttr(e, object, key.s);
    if (key.kind != Value::Kind::kInt && key.kind != Value::Kind::kBool) {
      return Error(e.line, absl::StrCat("cannot index with a ", KindName(key.kind)));
    }
    if (object.kind == Value::Kind::kList || object.kind == Value::Kind::kString) {
      std::vector<std::string> cps;
      if (object.kind == Value::Kind::kString) cps = CodePoints(object.s);
      const auto size = static_cast<int64_t>(object.kind == Value::Kind::kList ? object.list->size()
                                                                               : cps.size());
      int64_t index = key.as_int();
      if (index < 0) index += size;
      if (index < 0 || index >= size) return Value::Undefined("item out of range");
      if (object.kind == Value::Kind::kList) return (*object.list)[index];
      return Value::Str(cps[index]);
    }
    return Value::Undefined("item");
  }

  absl::StatusOr<Value> Slice(const Expr& e, const Value& object) {
    int64_t bounds[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!e.args[k + 1]) continue;
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.args[k + 1]));
      if (v.kind == Value::Kind::kNone) continue;
      if (v.kind != Value::Kind::kInt) return Error(e.line, "slice bounds must be integers");
      bounds[k] = v.i;
      given[k] = true;
    }
    const int64_t step = bounds[2];
    if (step == 0) return Error(e.line, "slice step cannot be zero");
    std::vector<std::string> cps;
    List source;
    if (object.kind == Value::Kind::kList) {
      source = *object.list;
    } else if (object.kind == Value::Kind::kString) {
      cps = CodePoints(object.s);
    } else {
      return Error(e.line, absl::StrCat("cannot slice a ", KindName(object.kind)));
    }
    const auto n =
        static_cast<int64_t>(object.kind == Value::Kind::kList ? source.size() : cps.size());
    // Python's slice index normalisation.
    auto clamp = [&](int64_t v, bool is_given, int64_t dflt) {
      if (!is_given) return dflt;
      if (v < 0) v += n;
      if (step > 0) return std::clamp<int64_t>(v, 0, n);
      return std::clamp<int64_t>(v, -1, n - 1);
    };
    const int64_t start = clamp(bounds[0], given[0], step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(bounds[1], given[1], step > 0 ? n : -1);
    List items;
    std::string text;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (object.kind == Value::Kind::kList) {
        items.push_back(source[k]);
      } else {
        text += cps[k];
      }
    }
    if (object.kind == Value::Kind::kList) return Value::MakeList(std::move(items));
    return Value::Str(std::move(text));
  }

  absl::StatusOr<Value> Binary(const Expr& e) {
    const std::string& op = e.name;
    TANDEM_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
    if (op == "and") {
      if (!Truthy(a)) return a;
      return Eval(*e.args[1]);
    }
    if (op == "or") {
      if (Truthy(a)) return a;
      return Eval(*e.args[1]);
    }
    TANDEM_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
    if (op == "==") return Value::Bool(Equal(a, b));
    if (op == "!=") return Value::Bool(!Equal(a, b));
    if (op == "~") return Value::Str(ToStr(a) + ToStr(b));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.kind == Value::Kind::kString) {
        if (a.kind != Value::Kind::kString)
          return Error(e.line, "'in <string>' needs a string on the left");
        found = b.s.find(a.s) != std::string::npos;
      } else if (b.kind == Value::Kind::kList) {
        for (const Value& item : *b.list) found = found || Equal(a, item);
      } else if (b.kind == Value::Kind::kDict || b.kind == Value::Kind::kNamespace) {
        found = a.kind == Value::Kind::kString && DictFind(*b.dict, a.s) != nullptr;
      } else if (b.kind == Value::Kind::kUndefined) {
        return Error(e.line, absl::StrCat("'", b.s, "' is undefined (right of 'in')"));
      } else {
        return Error(e.line, absl::StrCat("'in' needs a container, found ", KindName(b.kind)));
      }
      return Value::Bool(op == "in" ? found : !found);
    }
    for (const Value* v : {&a, &b}) {
      if (v->kind == Value::Kind::kUndefined) {
        return Error(e.line, absl::StrCat("'", v->s, "' is undefined (operand of '", op, "')"));
      }
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp;
      if (a.is_number() && b.is_number()) {
        cmp = a.as_double() < b.as_double() ? -1 : (a.as_double() > b.as_double() ? 1 : 0);
      } else if (a.kind == Value::Kind::kString && b.kind == Value::Kind::kString) {
        cmp = a.s.compare(b.s);
      } else {
        return Error(e.line,
                     absl::StrCat("cannot compare ", KindName(a.kind), " and ", KindName(b.kind)));
      }
      if (op == "<") return Value::Bool(cmp < 0);
      if (op == ">") return Value::Bool(cmp > 0);
      if (op == "<=") return Value::Bool(cmp <= 0);
      return Value::Bool(cmp >= 0);
    }
    if (op == "+") {
      if (a.kind == Value::Kind::kString && b.kind == Value::Kind::kString)
        return Value::Str(a.s + b.s);
      if (a.kind == Value::Kind::kList && b.kind == Value::Kind::kList) {
        List items = *a.list;
        items.insert(items.end(), b.list->begin(), b.list->end());
        return Value::MakeList(std::move(items));
      }
    }
    if (!a.is_number() || !b.is_number()) {
      return Error(e.line, absl::StrCat("unsupported operand types for '", op,
                                        "': ", KindName(a.kind), " and ", KindName(b.kind)));
    }
    const bool floating = a.kind == Value::Kind::kFloat || b.kind == Value::Kind::kFloat;
    if (op == "/") {
      if (b.as_double() == 0) return Error(e.line, "division by zero");
      return Value::Float(a.as_double() / b.as_double());
    }
    if ((op == "//" || op == "%") && b.as_double() == 0) return Error(e.line, "division by zero");
    if (floating) {
      const double x = a.as_double(), y = b.as_double();
      if (op == "+") return Value::Float(x + y);
      if (op == "-") return Value::Float(x - y);
      if (op == "*") return Value::Float(x * y);
      if (op == "//") return Value::Float(std::floor(x / y));
      return Value::Float(x - y * std::floor(x / y));
    }
    const int64_t x = a.as_int(), y = b.as_int();
    if (op == "+") return Value::Int(x + y);
    if (op == "-") return Value::Int(x - y);
    if (op == "*") return Value::Int(x * y);
    // Python floors towards negative infinity.
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    if (op == "//") return Value::Int(q);
    return Value::Int(x - q * y);
  }

  absl::StatusOr<std::vector<Value>> EvalArgs(const Expr& e, size_t first) {
    std::vector<Value> values;
    for (size_t k = first; k < e.args.size(); ++k) {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.args[k]));
      values.push_back(std::move(v));
    }
    return values;
  }

  absl::StatusOr<Value> Filter(const Expr& e) {
    TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
    TANDEM_ASSIGN_OR_RETURN(std::vector<Value> args, EvalArgs(e, 1));
    const std::string& f = e.name;
    if (f == "default" || f == "d") {
      const bool use_default =
          v.kind == Value::Kind::kUndefined || (args.size() > 1 && Truthy(args[1]) && !Truthy(v));
      if (!use_default) return v;
      return args.empty() ? Value::Str("") : args[0];
    }
    if (v.kind == Value::Kind::kUndefined && f != "length" && f != "count" && f != "string") {
      return Error(e.line, absl::StrCat("'", v.s, "' is undefined (filter '|", f, "')"));
    }
    if (f == "length" || f == "count") {
      switch (v.kind) {
        case Value::Kind::kUndefined:
          return Value::Int(0);
        case Value::Kind::kString:
          return Value::Int(static_cast<int64_t>(CodePoints(v.s).size()));
        case Value::Kind::kList:
          return Value::Int(static_cast<int64_t>(v.list->size()));
        case Value::Kind::kDict:
          return Value::Int(static_cast<int64_t>(v.dict->size()));
        default:
          return Error(e.line, absl::StrCat("a ", KindName(v.kind), " has no length"));
      }
    }
    if (f == "string") return Value::Str(ToStr(v));
    if (f == "tojson") {
      std::string json;
      absl::Status status = ToJson(v, &json);
      if (!status.ok()) return Error(e.line, std::string(status.message()));
      return Value::Str(std::move(json));
    }
    if (f == "first" || f == "last") {
      if (v.kind == Value::Kind::kList) {
        if (v.list->empty()) return Value::Undefined(f);
        return f == "first" ? v.list->front() : v.list->back();
      }
      if (v.kind == Value::Kind::kString) {
        const std::vector<std::string> cps = CodePoints(v.s);
        if (cps.empty()) return Value::Undefined(f);
        return Value::Str(f == "first" ? cps.front() : cps.back());
      }
      return Error(e.line, absl::StrCat("filter '|", f, "' needs a list or string"));
    }
    if (f == "join") {
      if (v.kind != Value::Kind::kList) return Error(e.line, "filter '|join' needs a list");
      const std::string sep = args.empty() ? "" : ToStr(args[0]);
      std::string out;
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += sep;
        out += ToStr((*v.list)[k]);
      }
      return Value::Str(std::move(out));
    }
    // The rest work on strings.
    const std::string s = ToStr(v);
    if (f == "trim") return Value::Str(Strip(s, nullptr, true, true));
    if (f == "lower" || f == "upper") {
      std::string out = s;
      for (char& c : out)
        c = static_cast<char>(f == "lower" ? std::tolower(static_cast<unsigned char>(c))
                                           : std::toupper(static_cast<unsigned char>(c)));
      return Value::Str(std::move(out));
    }
    return Error(e.line, absl::StrCat("filter '|", f, "' is not implemented"));
  }

  absl::StatusOr<Value> Test(const Expr& e) {
    TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
    const std::string& t = e.name;
    bool result = false;
    if (t == "defined") {
      result = v.kind != Value::Kind::kUndefined;
    } else if (t == "undefined") {
      result = v.kind == Value::Kind::kUndefined;
    } else if (t == "none") {
      result = v.kind == Value::Kind::kNone;
    } else if (t == "string") {
      result = v.kind == Value::Kind::kString;
    } else if (t == "number") {
      result = v.kind == Value::Kind::kInt || v.kind == Value::Kind::kFloat;
    } else if (t == "integer") {
      result = v.kind == Value::Kind::kInt;
    } else if (t == "boolean") {
      result = v.kind == Value::Kind::kBool;
    } else if (t == "mapping") {
      result = v.kind == Value::Kind::kDict;
    } else if (t == "sequence") {
      result = v.kind == Value::Kind::kList || v.kind == Value::Kind::kString ||
               v.kind == Value::Kind::kDict;
    } else if (t == "iterable") {
      result = v.kind == Value::Kind::kList || v.kind == Value::Kind::kString ||
               v.kind == Value::Kind::kDict;
    } else if (t == "true") {
      result = v.kind == Value::Kind::kBool && v.b;
    } else if (t == "false") {
      result = v.kind == Value::Kind::kBool && !v.b;
    }
    return Value::Bool(e.negated ? !result : result);
  }

  absl::StatusOr<Value> Method(const Expr& e) {
    TANDEM_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
    TANDEM_ASSIGN_OR_RETURN(std::vector<Value> args, EvalArgs(e, 1));
    const std::string& m = e.name;
    if (obj.kind == Value::Kind::kDict) {
      if (m == "get") {
        if (args.empty() || args[0].kind != Value::Kind::kString)
          return Error(e.line, ".get() needs a string key");
        if (const Value* v = DictFind(*obj.dict, args[0].s)) return *v;
        return args.size() > 1 ? args[1] : Value::None();
      }
      if (m == "keys" || m == "values" || m == "items") {
        List items;
        for (const auto& [key, value] : *obj.dict) {
          if (m == "keys") {
            items.push_back(Value::Str(key));
          } else if (m == "values") {
            items.push_back(value);
          } else {
            return Error(e.line, "'.items()' needs tuple unpacking, which is unsupported");
          }
        }
        return Value::MakeList(std::move(items));
      }
    }
    if (obj.kind != Value::Kind::kString) {
      return Error(e.line, absl::StrCat("a ", KindName(obj.kind), " has no method '.", m, "()'"));
    }
    const std::string& s = obj.s;
    auto string_arg = [&](size_t k) -> const std::string* {
      return k < args.size() && args[k].kind == Value::Kind::kString ? &args[k].s : nullptr;
    };
    if (m == "startswith" || m == "endswith") {
      const std::string* affix = string_arg(0);
      if (affix == nullptr) return Error(e.line, absl::StrCat(".", m, "() needs a string"));
      if (affix->size() > s.size()) return Value::Bool(false);
      return Value::Bool(m == "startswith"
                             ? s.compare(0, affix->size(), *affix) == 0
                             : s.compare(s.size() - affix->size(), affix->size(), *affix) == 0);
    }
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
      return Value::Str(Strip(s, string_arg(0), m != "rstrip", m != "lstrip"));
    }
    if (m == "upper" || m == "lower") {
      std::string out = s;
      for (char& c : out)
        c = static_cast<char>(m == "lower" ? std::tolower(static_cast<unsigned char>(c))
                                           : std::toupper(static_cast<unsigned char>(c)));
      return Value::Str(std::move(out));
    }
    if (m == "replace") {
      const std::string* from = string_arg(0);
      const std::string* to = string_arg(1);
      if (from == nullptr || to == nullptr || from->empty())
        return Error(e.line, ".replace() needs two strings");
      std::string out;
      size_t pos = 0;
      for (size_t found = s.find(*from); found != std::string::npos; found = s.find(*from, pos)) {
        out.append(s, pos, found - pos);
        out += *to;
        pos = found + from->size();
      }
      out.append(s, pos);
      return Value::Str(std::move(out));
    }
    if (m == "split") {
      List parts;
      const std::string* sep = string_arg(0);
      if (sep == nullptr) {
        // Runs of whitespace, no empty parts.
        size_t k = 0;
        while (k < s.size()) {
          while (k < s.size() && IsSpace(s[k])) ++k;
          size_t end = k;
          while (end < s.size() && !IsSpace(s[end])) ++end;
          if (end > k) parts.push_back(Value::Str(s.substr(k, end - k)));
          k = end;
        }
      } else {
        if (sep->empty()) return Error(e.line, ".split() with an empty separator");
        size_t pos = 0;
        for (size_t found = s.find(*sep); found != std::string::npos; found = s.find(*sep, pos)) {
          parts.push_back(Value::Str(s.substr(pos, found - pos)));
          pos = found + sep->size();
        }
        parts.push_back(Value::Str(s.substr(pos)));
      }
      return Value::MakeList(std::move(parts));
    }
    return Error(e.line, absl::StrCat("a string has no method '.", m, "()'"));
  }

  absl::StatusOr<Value> Call(const Expr& e) {
    TANDEM_ASSIGN_OR_RETURN(std::vector<Value> args, EvalArgs(e, 0));
    if (e.name == "raise_exception") {
      return absl::InvalidArgumentError(absl::StrCat(
          "chat template raised an error: ", args.empty() ? std::string() : ToStr(args[0])));
    }
    // namespace(key=value, ...)
    if (!args.empty()) return Error(e.line, "namespace() takes keyword arguments only");
    Dict attrs;
    for (const auto& [key, value_expr] : e.kwargs) {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*value_expr));
      attrs.emplace_back(key, std::move(v));
    }
    return Value::MakeDict(std::move(attrs), Value::Kind::kNamespace);
  }

  absl::StatusOr<Value> Eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList: {
        TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, EvalArgs(e, 0));
        return Value::MakeList(std::move(items));
      }
      case Expr::Kind::kAttr: {
        TANDEM_ASSIGN_OR_RETURN(Value object, Eval(*e.args[0]));
        return GetAttr(e, object, e.name);
      }
      case Expr::Kind::kItem: {
        TANDEM_ASSIGN_OR_RETURN(Value object, Eval(*e.args[0]));
        TANDEM_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
        return GetItem(e, object, key);
      }
      case Expr::Kind::kSlice: {
        TANDEM_ASSIGN_OR_RETURN(Value object, Eval(*e.args[0]));
        return Slice(e, object);
      }
      case Expr::Kind::kCall:
        return Call(e);
      case Expr::Kind::kMethod:
        return Method(e);
      case Expr::Kind::kFilter:
        return Filter(e);
      case Expr::Kind::kTest:
        return Test(e);
      case Expr::Kind::kNot: {
        TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
        return Value::Bool(!Truthy(v));
      }
      case Expr::Kind::kNeg: {
        TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
        if (v.kind == Value::Kind::kInt) return Value::Int(-v.i);
        if (v.kind == Value::Kind::kFloat) return Value::Float(-v.f);
        return Error(e.line, absl::StrCat("cannot negate a ", KindName(v.kind)));
      }
      case Expr::Kind::kBinary:
        return Binary(e);
      case Expr::Kind::kCond: {
        TANDEM_ASSIGN_OR_RETURN(Value c, Eval(*e.args[1]));
        if (Truthy(c)) return Eval(*e.args[0]);
        if (e.args[2]) return Eval(*e.args[2]);
        return Value::Undefined("else branch");
      }
    }
    return Value::Undefined("?");
  }

  std::vector<std::map<std::string, Value>> scopes_;
};

}  // namespace

struct Template::Program {
  std::vector<Node> body;
};

Template::Template(std::unique_ptr<Program> program) : program_(std::move(program)) {}
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  Lexer lexer(source);
  TANDEM_ASSIGN_OR_RETURN(std::vector<Token> tokens, lexer.Run());
  Parser parser(std::move(tokens));
  auto program = std::make_unique<Program>();
  TANDEM_ASSIGN_OR_RETURN(program->body, parser.ParseTemplate());
  return Template(std::move(program));
}

absl::StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context) const {
  Renderer renderer(context);
  std::string out;
  TANDEM_RETURN_IF_ERROR(renderer.RenderBody(program_->body, &out));
  return out;
}

}  // namespace tandem::text::jinja
