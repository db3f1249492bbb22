// A small interpreter for the Jinja subset of Hugging Face chat templates (see chat_template.h).
#include "text/chat_template.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string_view>
#include <utility>

#include "core/error.h"

namespace canvas {
namespace {

// ---- values -----------------------------------------------------------------------------------------

struct Value;
struct Node;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, as Python dicts

struct Value {
  enum Kind { Undefined, None, Bool, Int, Float, Str, ListKind, DictKind, Macro } kind = Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // shared: a namespace() is changed through any copy of it
  std::shared_ptr<const Node> macro;  // a {% macro %} (its node in the parsed template)
  bool tuple = false;  // a list that Python holds as a tuple (items, dictsort): printed in parentheses

  static Value none() { return with(None); }
  static Value boolean(bool v) {
    Value x = with(Bool);
    x.b = v;
    return x;
  }
  static Value integer(int64_t v) {
    Value x = with(Int);
    x.i = v;
    return x;
  }
  static Value floating(double v) {
    Value x = with(Float);
    x.f = v;
    return x;
  }
  static Value str(std::string v) {
    Value x = with(Str);
    x.s = std::move(v);
    return x;
  }
  static Value make_list(List v = {}) {
    Value x = with(ListKind);
    x.list = std::make_shared<List>(std::move(v));
    return x;
  }
  static Value make_dict(Dict v = {}) {
    Value x = with(DictKind);
    x.dict = std::make_shared<Dict>(std::move(v));
    return x;
  }
  static Value with(Kind k) {
    Value x;
    x.kind = k;
    return x;
  }
  const Value* find(const std::string& key) const {
    if (kind != DictKind) return nullptr;
    for (const auto& [k, v] : *dict)
      if (k == key) return &v;
    return nullptr;
  }
};

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Undefined:
    case Value::None:
      return false;
    case Value::Bool:
      return v.b;
    case Value::Int:
      return v.i != 0;
    case Value::Float:
      return v.f != 0;
    case Value::Str:
      return !v.s.empty();
    case Value::ListKind:
      return !v.list->empty();
    case Value::DictKind:
      return !v.dict->empty();
    case Value::Macro:
      return true;
  }
  return false;
}

bool is_number(const Value& v) {
  return v.kind == Value::Int || v.kind == Value::Bool || v.kind == Value::Float;
}
double as_double(const Value& v) {
  return v.kind == Value::Float ? v.f : v.kind == Value::Int ? double(v.i) : double(v.b);
}

// A float as Python's repr writes it (which is also what str() and json.dumps write): the shortest digits
// that read back to the same double, positional for exponents -4 to 15, else d.ddde+XX.
std::string python_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, ec == std::errc() ? end : buf);
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::atoi(sci.c_str() + e + 1);
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) return sign + "0." + std::string(size_t(-exponent - 1), '0') + digits;
    if (digits.size() <= size_t(exponent) + 1)
      return sign + digits + std::string(size_t(exponent) + 1 - digits.size(), '0') + ".0";
    return sign + digits.substr(0, size_t(exponent) + 1) + "." + digits.substr(size_t(exponent) + 1);
  }
  std::string out = sign + digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int magnitude = std::abs(exponent);
  return out + (exponent < 0 ? "e-" : "e+") + (magnitude < 10 ? "0" : "") + std::to_string(magnitude);
}

// Text built under a byte limit, checked before each piece is appended: past it, a render's text is an
// Error naming the template and the limit; an excerpt of a value for an error message is cut with "...".
struct BoundedText {
  std::string out;
  size_t limit = 0;
  const std::string* source = nullptr;  // the template's name; null: an excerpt
  const std::string* reason = nullptr;  // said after the limit
  bool full = false;

  void add(std::string_view piece) {
    if (full) return;
    if (piece.size() > limit - out.size()) {
      if (source) throw_too_long(out.size() + piece.size());
      out.append(piece.substr(0, limit - out.size()));
      out += "...";
      full = true;
      return;
    }
    out.append(piece);
  }
  [[noreturn]] void throw_too_long(size_t would_be) const {
    throw ChatTemplateTooLong(*source + ": the rendered text would be " +
                              (would_be == size_t(-1) ? "" : std::to_string(would_be) + " bytes or more, ") +
                              "past the limit of " + std::to_string(limit) + " bytes" +
                              (reason && !reason->empty() ? " " + *reason : ""));
  }
};

// A string as Python's repr writes it: single quotes unless it holds one and no double quote.
void write_quoted(BoundedText& t, const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  t.add(std::string_view(&quote, 1));
  size_t from = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    const unsigned char c = static_cast<unsigned char>(s[k]);
    if (c != '\\' && c != static_cast<unsigned char>(quote) && c >= 0x20 && c != 0x7f) continue;
    t.add(std::string_view(s).substr(from, k - from));
    char buf[8];
    if (c == '\n' || c == '\r' || c == '\t')
      std::snprintf(buf, sizeof buf, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
    else if (c < 0x20 || c == 0x7f)
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
    else
      std::snprintf(buf, sizeof buf, "\\%c", c);
    t.add(buf);
    from = k + 1;
  }
  t.add(std::string_view(s).substr(from));
  t.add(std::string_view(&quote, 1));
}

// Past any depth a render lets values reach (the renderer checks kMaxValueDepth where lists and dicts are
// made): a guard for the recursion of the printers.
constexpr int kMaxPrintDepth = 256;

void write_text(BoundedText& t, const Value& v, bool repr = false, int level = 0) {
  check(level < kMaxPrintDepth, "chat template: values nested too deep to print");
  switch (v.kind) {
    case Value::Undefined:
      return;
    case Value::None:
      return t.add("None");
    case Value::Bool:
      return t.add(v.b ? "True" : "False");
    case Value::Int:
      return t.add(std::to_string(v.i));
    case Value::Float:
      return t.add(python_float(v.f));
    case Value::Macro:
      return t.add("<Macro>");
    case Value::Str:
      return repr ? write_quoted(t, v.s) : t.add(v.s);
    case Value::ListKind:
      t.add(v.tuple ? "(" : "[");
      for (size_t k = 0; k < v.list->size() && !t.full; ++k) {
        if (k) t.add(", ");
        write_text(t, (*v.list)[k], true, level + 1);
      }
      if (v.tuple && v.list->size() == 1) t.add(",");
      return t.add(v.tuple ? ")" : "]");
    case Value::DictKind: {
      t.add("{");
      bool first = true;
      for (const auto& [key, val] : *v.dict) {
        if (t.full) break;
        if (!first) t.add(", ");
        write_quoted(t, key);
        t.add(": ");
        write_text(t, val, true, level + 1);
        first = false;
      }
      return t.add("}");
    }
  }
}

void write_json(BoundedText& t, const Value& v, int level = 0) {
  check(level < kMaxPrintDepth, "chat template: values nested too deep to print");
  switch (v.kind) {
    case Value::Undefined:
    case Value::None:
    case Value::Macro:
      return t.add("null");
    case Value::Float:
      return t.add(std::isfinite(v.f) ? python_float(v.f)
                   : std::isnan(v.f)  ? "NaN"
                   : v.f > 0          ? "Infinity"
                                      : "-Infinity");
    case Value::Bool:
      return t.add(v.b ? "true" : "false");
    case Value::Int:
      return t.add(std::to_string(v.i));
    case Value::Str: {
      t.add("\"");
      for (unsigned char c : v.s) {
        char buf[8];
        if (c == '"' || c == '\\') {
          buf[0] = '\\', buf[1] = char(c), buf[2] = 0;
        } else if (c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f') {
          // json.dumps's short escapes
          std::snprintf(buf, sizeof buf, "\\%c",
                        c == '\n'   ? 'n'
                        : c == '\r' ? 'r'
                        : c == '\t' ? 't'
                        : c == '\b' ? 'b'
                                    : 'f');
        } else if (c < 0x20) {
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
        } else {
          buf[0] = char(c), buf[1] = 0;
        }
        t.add(buf);
      }
      return t.add("\"");
    }
    case Value::ListKind:
      t.add("[");
      for (size_t k = 0; k < v.list->size() && !t.full; ++k) {
        if (k) t.add(", ");
        write_json(t, (*v.list)[k], level + 1);
      }
      return t.add("]");
    case Value::DictKind: {
      t.add("{");
      bool first = true;
      for (const auto& [key, val] : *v.dict) {
        if (t.full) break;
        if (!first) t.add(", ");
        write_json(t, Value::str(key));
        t.add(": ");
        write_json(t, val, level + 1);
        first = false;
      }
      return t.add("}");
    }
  }
}

// A value as an error message shows it: its repr, cut at 200 bytes.
std::string excerpt(const Value& v) {
  BoundedText t;
  t.limit = 200;
  write_text(t, v, true);
  return t.out;
}

// ---- expressions ------------------------------------------------------------------------------------

struct Token {
  enum Kind { Name, Number, String, Op, End } kind;
  std::string text;
};

std::vector<Token> lex_expression(const std::string& src) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < src.size()) {
    const char c = src[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_')) ++j;
      out.push_back({Token::Name, src.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      auto digits = [&] {
        while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
      };
      digits();
      if (j + 1 < src.size() && src[j] == '.' && std::isdigit(static_cast<unsigned char>(src[j + 1]))) {
        ++j;
        digits();
      }
      if (j + 1 < src.size() && (src[j] == 'e' || src[j] == 'E')) {
        const size_t sign = src[j + 1] == '+' || src[j + 1] == '-' ? 1 : 0;
        if (j + 1 + sign < src.size() && std::isdigit(static_cast<unsigned char>(src[j + 1 + sign]))) {
          j += 1 + sign;
          digits();
        }
      }
      out.push_back({Token::Number, src.substr(i, j - i)});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string s;
      size_t j = i + 1;
      while (j < src.size() && src[j] != c) {
        if (src[j] == '\\' && j + 1 < src.size()) {
          const char e = src[++j];
          s += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          s += src[j];
        }
        ++j;
      }
      check(j < src.size(), "chat template: unterminated string in '" + src + "'");
      out.push_back({Token::String, s});
      i = j + 1;
    } else {
      static const char* two[] = {"==", "!=", "<=", ">=", "//", "**"};
      bool matched = false;
      for (const char* op : two)
        if (src.compare(i, 2, op) == 0) {
          out.push_back({Token::Op, op});
          i += 2;
          matched = true;
          break;
        }
      if (matched) continue;
      check(std::string("+-*/%~()[]{},:.|=<>").find(c) != std::string::npos,
            std::string("chat template: unexpected character '") + c + "' in '" + src + "'");
      out.push_back({Token::Op, std::string(1, c)});
      ++i;
    }
  }
  out.push_back({Token::End, ""});
  return out;
}

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;
struct Expr {
  enum Kind {
    Literal,
    Name,
    Attr,
    Index,
    Slice,
    Call,
    Filter,
    Test,
    Unary,
    Binary,
    Cond,
    ListLit,
    DictLit
  } kind;
  std::string name;  // Name, Attr, Filter, Test, Unary / Binary operator
  Value literal;
  std::vector<ExprPtr> args;  // operands / arguments (nullptr: an absent slice bound)
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negate = false;  // Test: "is not"
};

ExprPtr node(Expr::Kind kind, std::string name = "", std::vector<ExprPtr> args = {}) {
  auto e = std::make_shared<Expr>();
  e->kind = kind;
  e->name = std::move(name);
  e->args = std::move(args);
  return e;
}

// Nesting bounds: the parser and the evaluator recurse, so a template from a model file nested (or
// chained) thousands deep would exhaust the stack; past these depths it is an error instead.
constexpr int kMaxTemplateNesting = 128;   // {% if %} / {% for %} blocks, parentheses, unary operators
constexpr int kMaxExpressionDepth = 256;  // evaluation of operator chains such as 1 + 1 + ... + 1 (inside the
                                          // blocks above, so both together must fit an ASan build's 8 MB stack)
constexpr int kMaxExpressionTokens = 4096;
constexpr int kMaxExpressionBytes = 8192;
constexpr int64_t kMaxLoopIterations = 1000000;  // in all, over one render
constexpr size_t kMaxListItems = size_t(1) << 20;   // a list a render makes (range, split, +)
constexpr int kMaxValueDepth = 64;  // lists and dicts inside each other (printing, comparing and freeing recurse)
constexpr int kMaxMacroDepth = 64;  // macro calls inside each other (a recursive macro over a nested value)
struct DepthGuard {
  DepthGuard(int& depth, int limit, const char* what) : depth_(depth) {
    check(++depth_ <= limit, std::string("chat template: ") + what + " nested more than " + std::to_string(limit) + " deep");
  }
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
  int& depth_;
};

// An expression's tokens, refusing sources far longer than any real template's expressions before lexing.
std::vector<Token> lex_bounded(const std::string& src) {
  check(src.size() <= size_t(kMaxExpressionBytes),
        "chat template: an expression longer than " + std::to_string(kMaxExpressionBytes) + " bytes");
  return lex_expression(src);
}

class ExprParser {
 public:
  explicit ExprParser(const std::string& src) : tokens_(lex_bounded(src)), src_(src) {
    // A tree is at most as deep as its expression has tokens; this bounds every recursion over it
    // (evaluation, destruction) for operator chains that the nesting guards do not see.
    check(tokens_.size() <= size_t(kMaxExpressionTokens),
          "chat template: an expression of more than " + std::to_string(kMaxExpressionTokens) + " tokens");
  }
  ExprPtr parse_all() {
    ExprPtr e = parse();
    expect_end();
    return e;
  }
  ExprPtr parse() { return conditional(); }
  ExprPtr parse_without_conditional() { return or_expr(); }  // a for loop's iterable, before its `if`
  bool at_name(const std::string& word) const { return peek().kind == Token::Name && peek().text == word; }
  bool at_op(const std::string& op) const { return peek().kind == Token::Op && peek().text == op; }
  bool at_end() const { return peek().kind == Token::End; }
  const Token& next() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  void expect_op(const std::string& op) {
    check(at_op(op), "chat template: expected '" + op + "' in '" + src_ + "'");
    ++pos_;
  }
  void expect_end() { check(at_end(), "chat template: unexpected '" + peek().text + "' in '" + src_ + "'"); }
  std::string expect_name() {
    check(peek().kind == Token::Name, "chat template: expected a name in '" + src_ + "'");
    return next().text;
  }

 private:
  const Token& peek() const { return tokens_[pos_]; }

  ExprPtr conditional() {
    const DepthGuard guard(depth_, kMaxTemplateNesting, "expressions");
    ExprPtr a = or_expr();
    if (at_name("if")) {
      ++pos_;
      ExprPtr cond = or_expr();
      ExprPtr b;
      if (at_name("else")) {
        ++pos_;
        b = conditional();
      } else {
        auto undefined = node(Expr::Literal);
        b = undefined;
      }
      return node(Expr::Cond, "", {a, cond, b});
    }
    return a;
  }
  ExprPtr or_expr() {
    ExprPtr a = and_expr();
    while (at_name("or")) {
      ++pos_;
      a = node(Expr::Binary, "or", {a, and_expr()});
    }
    return a;
  }
  ExprPtr and_expr() {
    ExprPtr a = not_expr();
    while (at_name("and")) {
      ++pos_;
      a = node(Expr::Binary, "and", {a, not_expr()});
    }
    return a;
  }
  ExprPtr not_expr() {
    const DepthGuard guard(depth_, kMaxTemplateNesting, "expressions");
    if (at_name("not")) {
      ++pos_;
      return node(Expr::Unary, "not", {not_expr()});
    }
    return comparison();
  }
  ExprPtr comparison() {
    ExprPtr a = concat();
    while (true) {
      if (at_op("==") || at_op("!=") || at_op("<") || at_op(">") || at_op("<=") || at_op(">=")) {
        const std::string op = next().text;
        a = node(Expr::Binary, op, {a, concat()});
      } else if (at_name("in")) {
        ++pos_;
        a = node(Expr::Binary, "in", {a, concat()});
      } else if (at_name("not") && tokens_[pos_ + 1].kind == Token::Name && tokens_[pos_ + 1].text == "in") {
        pos_ += 2;
        a = node(Expr::Unary, "not", {node(Expr::Binary, "in", {a, concat()})});
      } else {
        return a;
      }
    }
  }
  ExprPtr concat() {
    ExprPtr a = additive();
    while (at_op("~")) {
      ++pos_;
      a = node(Expr::Binary, "~", {a, additive()});
    }
    return a;
  }
  ExprPtr additive() {
    ExprPtr a = multiplicative();
    while (at_op("+") || at_op("-")) {
      const std::string op = next().text;
      a = node(Expr::Binary, op, {a, multiplicative()});
    }
    return a;
  }
  ExprPtr multiplicative() {
    ExprPtr a = unary();
    while (at_op("*") || at_op("/") || at_op("%") || at_op("//")) {
      const std::string op = next().text;
      a = node(Expr::Binary, op, {a, unary()});
    }
    return a;
  }
  // As jinja2 parses it: filters and tests apply to the negated operand (-3 | abs is 3), and bind tighter
  // than any binary operator (a ~ b | upper, a + b is number).
  ExprPtr unary(bool with_filters = true) {
    const DepthGuard guard(depth_, kMaxTemplateNesting, "expressions");
    ExprPtr a;
    if (at_op("-")) {
      ++pos_;
      a = node(Expr::Unary, "-", {unary(false)});
    } else {
      a = postfix();
    }
    return with_filters ? filters_and_tests(a) : a;
  }
  ExprPtr filters_and_tests(ExprPtr a) {
    while (true) {
      if (at_op("|")) {
        ++pos_;
        ExprPtr f = node(Expr::Filter, expect_name(), {a});
        if (at_op("(")) call_arguments(*f);
        a = f;
      } else if (at_name("is")) {
        ++pos_;
        bool negate = false;
        if (at_name("not")) {
          ++pos_;
          negate = true;
        }
        ExprPtr t = node(Expr::Test, expect_name(), {a});
        t->negate = negate;
        // An argument in parentheses, or one literal or name (`is divisibleby 3`, `is sameas none`).
        if (at_op("(")) {
          call_arguments(*t);
        } else if (peek().kind == Token::Number || peek().kind == Token::String ||
                   (peek().kind == Token::Name && !at_name("and") && !at_name("or") && !at_name("if") &&
                    !at_name("else") && !at_name("is") && !at_name("in") && !at_name("not"))) {
          t->args.push_back(postfix());
        }
        a = t;
      } else {
        return a;
      }
    }
  }
  void call_arguments(Expr& call) {
    expect_op("(");
    while (!at_op(")")) {
      if (peek().kind == Token::Name && tokens_[pos_ + 1].kind == Token::Op &&
          tokens_[pos_ + 1].text == "=") {
        const std::string key = next().text;
        ++pos_;
        call.kwargs.emplace_back(key, parse());
      } else {
        call.args.push_back(parse());
      }
      if (!at_op(")")) expect_op(",");
    }
    ++pos_;
  }
  ExprPtr postfix() {
    ExprPtr a = primary();
    while (true) {
      if (at_op(".")) {
        ++pos_;
        a = node(Expr::Attr, expect_name(), {a});
      } else if (at_op("[")) {
        ++pos_;
        ExprPtr lo, hi, step;
        if (!at_op(":")) lo = parse();
        if (at_op(":")) {
          ++pos_;
          if (!at_op("]") && !at_op(":")) hi = parse();
          if (at_op(":")) {
            ++pos_;
            if (!at_op("]")) step = parse();
          }
          expect_op("]");
          a = node(Expr::Slice, "", {a, lo, hi, step});
        } else {
          expect_op("]");
          a = node(Expr::Index, "", {a, lo});
        }
      } else if (at_op("(")) {
        auto call = node(Expr::Call, "", {a});
        call_arguments(*call);
        a = call;
      } else {
        return a;
      }
    }
  }
  ExprPtr primary() {
    const Token t = next();
    if (t.kind == Token::Number && t.text.find_first_not_of("0123456789") != std::string::npos) {
      auto e = node(Expr::Literal);
      e->literal = Value::floating(std::strtod(t.text.c_str(), nullptr));
      return e;
    }
    if (t.kind == Token::Number) {
      auto e = node(Expr::Literal);
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
      check(ec == std::errc() && end == t.text.data() + t.text.size(),
            "chat template: the integer " + t.text.substr(0, 32) + " is out of range");
      e->literal = Value::integer(v);
      return e;
    }
    if (t.kind == Token::String) {
      std::string s = t.text;
      while (peek().kind == Token::String) s += next().text;  // adjacent literals concatenate
      auto e = node(Expr::Literal);
      e->literal = Value::str(s);
      return e;
    }
    if (t.kind == Token::Name) {
      auto e = node(Expr::Literal);
      if (t.text == "true" || t.text == "True")
        e->literal = Value::boolean(true);
      else if (t.text == "false" || t.text == "False")
        e->literal = Value::boolean(false);
      else if (t.text == "none" || t.text == "None")
        e->literal = Value::none();
      else
        return node(Expr::Name, t.text);
      return e;
    }
    if (t.kind == Token::Op && t.text == "(") {
      ExprPtr e = parse();
      expect_op(")");
      return e;
    }
    if (t.kind == Token::Op && t.text == "[") {
      auto e = node(Expr::ListLit);
      while (!at_op("]")) {
        e->args.push_back(parse());
        if (!at_op("]")) expect_op(",");
      }
      ++pos_;
      return e;
    }
    if (t.kind == Token::Op && t.text == "{") {
      auto e = node(Expr::DictLit);
      while (!at_op("}")) {
        ExprPtr key = parse();
        expect_op(":");
        e->args.push_back(key);
        e->args.push_back(parse());
        if (!at_op("}")) expect_op(",");
      }
      ++pos_;
      return e;
    }
    throw Error("chat template: unexpected '" + t.text + "' in '" + src_ + "'");
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::string src_;
  int depth_ = 0;
};

// ---- statements -------------------------------------------------------------------------------------

using Body = std::vector<std::shared_ptr<Node>>;
struct Node {
  enum Kind { Text, Output, If, For, Set, SetBlock, MacroDef, Break, Continue } kind;
  std::string text;                                // Text; MacroDef: the macro's name
  ExprPtr expr;                                    // Output, For (iterable), Set (value)
  ExprPtr filter;                                  // For: the `if` that picks items (null: all)
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (condition, body), else as a null condition
  std::vector<std::string> vars;  // For: loop variables; Set, SetBlock: target (name [, attribute])
  std::vector<std::pair<std::string, ExprPtr>> params;  // MacroDef: parameters, with their defaults (or null)
  Body body, else_body;                                 // For; SetBlock and MacroDef: body
};

struct Piece {
  enum Kind { Text, Expression, Statement } kind;
  std::string content;
};

// Splits the source into text, {{ }} and {% %} pieces (comments dropped), applying '-' whitespace control
// and the trim_blocks / lstrip_blocks rules transformers renders chat templates with.
std::vector<Piece> split_template(const std::string& src) {
  std::vector<Piece> out;
  size_t i = 0;
  bool strip_next = false;    // the previous tag ended with '-'
  bool trim_newline = false;  // the previous tag was a block tag (trim_blocks)
  while (i <= src.size()) {
    size_t open = src.find('{', i);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' &&
           src[open + 1] != '%' && src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(i, (open == std::string::npos ? src.size() : open) - i);
    bool begins_line = i == 0 || (i > 0 && src[i - 1] == '\n');
    if (strip_next) {
      const size_t keep = text.find_first_not_of(" \t\r\n");
      text = keep == std::string::npos ? "" : text.substr(keep);
    } else if (trim_newline && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);
      begins_line = true;
    }
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Piece::Text, text});
      break;
    }
    const char kind = src[open + 1];
    const bool strip_before = open + 2 < src.size() && src[open + 2] == '-';
    if (strip_before) {
      const size_t keep = text.find_last_not_of(" \t\r\n");
      text = keep == std::string::npos ? "" : text.substr(0, keep + 1);
    } else if (kind == '%') {
      // lstrip_blocks: spaces and tabs from the start of the line up to a block tag.
      const size_t line_start = text.find_last_of('\n');
      const std::string tail = text.substr(line_start == std::string::npos ? 0 : line_start + 1);
      if (tail.find_first_not_of(" \t") == std::string::npos &&
          (line_start != std::string::npos || begins_line))
        text.resize(text.size() - tail.size());
    }
    if (!text.empty()) out.push_back({Piece::Text, text});
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t end = src.find(close, open + 2);
    check(end != std::string::npos, "chat template: unclosed '{" + std::string(1, kind) + "'");
    size_t body_start = open + 2 + (strip_before ? 1 : 0);
    size_t body_end = end;
    strip_next = body_end > body_start && src[body_end - 1] == '-';
    if (strip_next) --body_end;
    if (kind != '#')
      out.push_back({kind == '{' ? Piece::Expression : Piece::Statement,
                     src.substr(body_start, body_end - body_start)});
    trim_newline = kind != '{';
    i = end + 2;
  }
  return out;
}

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

  Body parse_body(const std::vector<std::string>& terminators, std::string* ended_by) {
    const DepthGuard guard(depth_, kMaxTemplateNesting, "blocks");
    Body body;
    while (pos_ < pieces_.size()) {
      const Piece& p = pieces_[pos_++];
      if (p.kind == Piece::Text) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Text;
        n->text = p.content;
        body.push_back(n);
        continue;
      }
      if (p.kind == Piece::Expression) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Output;
        n->expr = ExprParser(p.content).parse_all();
        body.push_back(n);
        continue;
      }
      ExprParser words(p.content);
      const std::string keyword = words.expect_name();
      for (const std::string& t : terminators)
        if (keyword == t) {
          *ended_by = keyword;
          statement_ = p.content;
          return body;
        }
      if (keyword == "if") {
        body.push_back(parse_if(p.content));
      } else if (keyword == "for") {
        body.push_back(parse_for(p.content));
      } else if (keyword == "set") {
        body.push_back(parse_set(p.content));
      } else if (keyword == "macro") {
        body.push_back(parse_macro(p.content));
      } else if (keyword == "break" || keyword == "continue") {
        words.expect_end();
        check(loops_ > 0, "chat template: {% " + keyword + " %} outside a loop");
        auto n = std::make_shared<Node>();
        n->kind = keyword == "break" ? Node::Break : Node::Continue;
        body.push_back(n);
      } else if (keyword == "generation" || keyword == "endgeneration") {
        // transformers' assistant-mask markers: no output of their own.
      } else {
        throw Error("chat template: '{% " + keyword + " %}' is not supported by canvas's Jinja subset");
      }
    }
    if (!terminators.empty()) throw Error("chat template: missing {% " + terminators.back() + " %}");
    return body;
  }

 private:
  // The expression after the keyword of the statement just read.
  static std::string after_keyword(const std::string& statement) {
    size_t i = statement.find_first_not_of(" \t\r\n");
    while (i < statement.size() &&
           (std::isalnum(static_cast<unsigned char>(statement[i])) || statement[i] == '_'))
      ++i;
    return statement.substr(i);
  }

  std::shared_ptr<Node> parse_if(const std::string& statement) {
    auto n = std::make_shared<Node>();
    n->kind = Node::If;
    ExprPtr cond = ExprParser(after_keyword(statement)).parse_all();
    while (true) {
      std::string ended;
      Body body = parse_body({"elif", "else", "endif"}, &ended);
      n->branches.emplace_back(cond, std::move(body));
      if (ended == "endif") return n;
      cond = ended == "elif" ? ExprParser(after_keyword(statement_)).parse_all() : nullptr;
      if (ended == "else") {
        Body rest = parse_body({"endif"}, &ended);
        n->branches.emplace_back(nullptr, std::move(rest));
        return n;
      }
    }
  }

  std::shared_ptr<Node> parse_for(const std::string& statement) {
    auto n = std::make_shared<Node>();
    n->kind = Node::For;
    ExprParser p(after_keyword(statement));
    n->vars.push_back(p.expect_name());
    while (p.at_op(",")) {
      p.next();
      n->vars.push_back(p.expect_name());
    }
    check(p.at_name("in"), "chat template: expected 'in' in '{% " + statement + " %}'");
    p.next();
    n->expr = p.parse_without_conditional();
    if (p.at_name("if")) {
      p.next();
      n->filter = p.parse_without_conditional();
    }
    check(!p.at_name("recursive"), "chat template: recursive loops are not supported");
    p.expect_end();
    std::string ended;
    ++loops_;
    n->body = parse_body({"else", "endfor"}, &ended);
    --loops_;
    if (ended == "else") n->else_body = parse_body({"endfor"}, &ended);
    return n;
  }

  std::shared_ptr<Node> parse_macro(const std::string& statement) {
    auto n = std::make_shared<Node>();
    n->kind = Node::MacroDef;
    ExprParser p(after_keyword(statement));
    n->text = p.expect_name();
    p.expect_op("(");
    while (!p.at_op(")")) {
      std::string param = p.expect_name();
      ExprPtr fallback;
      if (p.at_op("=")) {
        p.next();
        fallback = p.parse();
      }
      n->params.emplace_back(std::move(param), std::move(fallback));
      if (!p.at_op(")")) p.expect_op(",");
    }
    p.next();
    p.expect_end();
    const int outer_loops = loops_;
    loops_ = 0;  // a loop around the definition is not one around the body
    std::string ended;
    n->body = parse_body({"endmacro"}, &ended);
    loops_ = outer_loops;
    return n;
  }

  std::shared_ptr<Node> parse_set(const std::string& statement) {
    auto n = std::make_shared<Node>();
    n->kind = Node::Set;
    ExprParser p(after_keyword(statement));
    n->vars.push_back(p.expect_name());
    if (p.at_op(".")) {
      p.next();
      n->vars.push_back(p.expect_name());
    }
    if (p.at_end()) {  // {% set x %}...{% endset %}: the body's text
      n->kind = Node::SetBlock;
      std::string ended;
      n->body = parse_body({"endset"}, &ended);
      return n;
    }
    check(p.at_op("="), "chat template: expected '=' in '{% " + statement + " %}'");
    p.next();
    n->expr = p.parse();
    p.expect_end();
    return n;
  }

  std::vector<Piece> pieces_;
  size_t pos_ = 0;
  std::string statement_;  // the statement that ended the last body
  int depth_ = 0;
  int loops_ = 0;  // loops around the statement being read (break and continue need one)
};

// ---- evaluation -------------------------------------------------------------------------------------

class Renderer {
 public:
  Renderer(std::map<std::string, Value> globals, const ChatTemplateInputs& inputs)
      : max_bytes_(inputs.max_output_bytes),
        cancel_(inputs.cancel),
        source_(inputs.source),
        reason_(inputs.max_output_reason) {
    scopes_.push_back(std::move(globals));
  }

  // Runs a body; stops early (leaving flow_ set) at a break or continue, which the loop around takes.
  void run(const Body& body, BoundedText& out) {
    // Blocks nest at run time across macro calls (a recursive macro), so the depth is bounded here too.
    const DepthGuard guard(run_depth_, kMaxTemplateNesting, "blocks and macro calls");
    for (const auto& n : body) {
      if (flow_ != Flow::Normal) return;
      switch (n->kind) {
        case Node::Text:
          out.add(n->text);
          break;
        case Node::Output:
          write_text(out, eval(*n->expr));
          break;
        case Node::If:
          for (const auto& [cond, branch] : n->branches)
            if (!cond || truthy(eval(*cond))) {
              run(branch, out);
              break;
            }
          break;
        case Node::Set:
          assign(n->vars, eval(*n->expr));
          break;
        case Node::SetBlock: {
          BoundedText text = bounded();
          run(n->body, text);
          charge(1, text.out.size());
          assign(n->vars, Value::str(std::move(text.out)));
          break;
        }
        case Node::MacroDef: {
          Value macro = Value::with(Value::Macro);
          macro.macro = n;
          scopes_.back()[n->text] = std::move(macro);
          break;
        }
        case Node::Break:
          flow_ = Flow::Break;
          return;
        case Node::Continue:
          flow_ = Flow::Continue;
          return;
        case Node::For:
          run_for(*n, out);
          break;
      }
    }
  }

 private:
  enum class Flow { Normal, Break, Continue };
  Flow flow_ = Flow::Normal;
  int run_depth_ = 0;       // blocks being run, across macro calls (DepthGuard)
  int macro_depth_ = 0;     // macro calls inside each other
  size_t frame_ = 0;        // the first scope of the macro being run (0: none); names below it are not seen,
                            // but the template's own (scope 0) are
  int eval_depth_ = 0;      // recursion depth of eval (DepthGuard)
  int64_t iterations_ = 0;  // loop iterations of the whole render
  int64_t steps_ = 0;       // the render's work (kChatTemplateMaxSteps)
  size_t max_bytes_;
  const std::atomic<bool>* cancel_;
  std::string source_, reason_;

  BoundedText bounded() const {
    BoundedText t;
    t.limit = max_bytes_;
    t.source = &source_;
    t.reason = &reason_;
    return t;
  }
  // Counts `steps` of work (and the bytes a value copies, 256 to a step) against the budget; also where a
  // render notices that it was cancelled.
  void charge(int64_t steps, size_t bytes = 0) {
    steps_ += steps + int64_t(bytes >> 8);
    if (steps_ > kChatTemplateMaxSteps)
      throw Error(source_ + ": the render took more than " + std::to_string(kChatTemplateMaxSteps) +
                  " steps (expressions, loop iterations and copies of 256 bytes); it was stopped");
    if (cancel_ && cancel_->load(std::memory_order_relaxed)) throw Error(source_ + ": the render was cancelled");
  }
  // Throws before a text of `bytes` bytes is made when that passes the limit.
  void fits(size_t bytes) const {
    if (bytes > max_bytes_) {
      BoundedText t = bounded();
      t.throw_too_long(bytes);
    }
  }
  void fits_list(size_t items) const {
    if (items > kMaxListItems)
      throw Error(source_ + ": a list of " + std::to_string(items) + " items, past the limit of " +
                  std::to_string(kMaxListItems));
  }
  // A template's own message (raise_exception), cut as an excerpt is.
  static std::string excerpt_text(const Value& v) {
    BoundedText t;
    t.limit = 2000;
    write_text(t, v);
    return t.out;
  }
  std::string text(const Value& v, bool repr = false) const {
    BoundedText t = bounded();
    write_text(t, v, repr);
    return std::move(t.out);
  }

  void run_for(const Node& n, BoundedText& out) {
    const Value seq = eval(*n.expr);
    // The iterations left in the budget bound the items a loop may even list (a long string would otherwise
    // become a list of millions of one-character values before the first iteration).
    const size_t seq_size = seq.kind == Value::ListKind ? seq.list->size()
                            : seq.kind == Value::DictKind ? seq.dict->size()
                            : seq.kind == Value::Str ? seq.s.size()
                                                     : 0;
    if (int64_t(seq_size) > kMaxLoopIterations - iterations_)
      throw Error(source_ + ": loops ran more than " + std::to_string(kMaxLoopIterations) + " iterations in all");
    List listed;  // a dict's keys or a string's characters; a list is looped over in place (lists never change)
    const List* looped = seq.kind == Value::ListKind ? seq.list.get() : &listed;
    if (seq.kind == Value::DictKind) {
      for (const auto& [k, v] : *seq.dict) listed.push_back(Value::str(k));
    } else if (seq.kind == Value::Str) {
      for (char c : seq.s) listed.push_back(Value::str(std::string(1, c)));
    } else if (seq.kind != Value::ListKind) {
      check(seq.kind == Value::Undefined || seq.kind == Value::None,
            "chat template: cannot loop over " + excerpt(seq));
    }
    List picked;  // the items the loop's `if` keeps (loop.length and loop.last count only these)
    if (n.filter) {
      for (const Value& item : *looped) {
        scopes_.push_back(loop_scope(n, item));
        const bool keep = truthy(eval(*n.filter));
        scopes_.pop_back();
        if (keep) picked.push_back(item);
      }
      looped = &picked;
    }
    const List& items = *looped;
    if (items.empty()) {
      run(n.else_body, out);
      return;
    }
    const int64_t count = int64_t(items.size());
    for (int64_t k = 0; k < count; ++k) {
      // Nested loops multiply: a template from a model file must not run for hours.
      if (++iterations_ > kMaxLoopIterations)
        throw Error(source_ + ": loops ran more than " + std::to_string(kMaxLoopIterations) +
                    " iterations in all");
      const Value& item = items[size_t(k)];
      std::map<std::string, Value> scope = loop_scope(n, item);
      scope["loop"] = Value::make_dict({{"index", Value::integer(k + 1)},
                                        {"index0", Value::integer(k)},
                                        {"revindex", Value::integer(count - k)},
                                        {"revindex0", Value::integer(count - k - 1)},
                                        {"first", Value::boolean(k == 0)},
                                        {"last", Value::boolean(k == count - 1)},
                                        {"length", Value::integer(count)},
                                        {"previtem", k > 0 ? items[size_t(k - 1)] : Value()},
                                        {"nextitem", k + 1 < count ? items[size_t(k + 1)] : Value()}});
      // loop.previtem / nextitem copy their neighbours
      charge(1, (k > 0 ? text_bytes(items[size_t(k - 1)]) : 0) + text_bytes(item) +
                    (k + 1 < count ? text_bytes(items[size_t(k + 1)]) : 0));
      scopes_.push_back(std::move(scope));
      run(n.body, out);
      scopes_.pop_back();
      const Flow flow = flow_;
      flow_ = Flow::Normal;
      if (flow == Flow::Break) break;
    }
  }

  // A loop iteration's names for its item (unpacked into several names when the loop has several).
  static std::map<std::string, Value> loop_scope(const Node& n, const Value& item) {
    std::map<std::string, Value> scope;
    if (n.vars.size() == 1) {
      scope[n.vars[0]] = item;
    } else {
      check(item.kind == Value::ListKind && item.list->size() == n.vars.size(),
            "chat template: cannot unpack " + excerpt(item) + " into " + std::to_string(n.vars.size()) +
                " names");
      for (size_t v = 0; v < n.vars.size(); ++v) scope[n.vars[v]] = (*item.list)[v];
    }
    return scope;
  }

  // == on values, Python's way; each element compared is a step of work (shared lists can make many).
  bool equal(const Value& a, const Value& b, int level = 0) {
    if ((a.kind == Value::Int || a.kind == Value::Bool) && (b.kind == Value::Int || b.kind == Value::Bool))
      return (a.kind == Value::Int ? a.i : a.b) == (b.kind == Value::Int ? b.i : b.b);
    if (is_number(a) && is_number(b)) return as_double(a) == as_double(b);
    if (a.kind != b.kind) return false;
    switch (a.kind) {
      case Value::Undefined:
      case Value::None:
        return true;
      case Value::Str:
        charge(0, a.s.size());
        return a.s == b.s;
      case Value::ListKind:
        if (a.list->size() != b.list->size()) return false;
        if (level >= kMaxValueDepth) too_deep();
        for (size_t k = 0; k < a.list->size(); ++k) {
          charge(1);
          if (!equal((*a.list)[k], (*b.list)[k], level + 1)) return false;
        }
        return true;
      case Value::DictKind:
        if (a.dict == b.dict) return true;
        if (a.dict->size() != b.dict->size()) return false;
        if (level >= kMaxValueDepth) too_deep();
        for (const auto& [k, v] : *a.dict) {
          charge(1);
          const Value* other = b.find(k);
          if (!other || !equal(v, *other, level + 1)) return false;
        }
        return true;
      case Value::Macro:
        return a.macro == b.macro;
      default:
        return false;
    }
  }

  [[noreturn]] void too_deep() const {
    throw Error(source_ + ": lists and dicts nested more than " + std::to_string(kMaxValueDepth) + " deep");
  }
  // Checks that `v` nests at most kMaxValueDepth deep (and, given `target`, that it does not hold that
  // namespace: a namespace that held itself would print, compare and free forever); each element visited
  // is a step of work. Returns v.
  Value checked(Value v, const Dict* target = nullptr, int level = 0) {
    if (v.kind != Value::ListKind && v.kind != Value::DictKind) return v;
    if (level >= kMaxValueDepth) too_deep();
    if (target && v.kind == Value::DictKind && v.dict.get() == target)
      throw Error(source_ + ": a namespace cannot hold itself");
    if (v.kind == Value::ListKind) {
      charge(int64_t(v.list->size()));
      for (const Value& x : *v.list) checked(x, target, level + 1);
    } else {
      charge(int64_t(v.dict->size()));
      for (const auto& [k, x] : *v.dict) checked(x, target, level + 1);
    }
    return v;
  }

  Value lookup(const std::string& name) const {
    for (size_t k = scopes_.size(); k-- > 0;) {
      if (k < frame_ && k > 0) k = 0;
      auto found = scopes_[k].find(name);
      if (found != scopes_[k].end()) return found->second;
    }
    return Value();
  }

  // {% set name = v %} in the innermost scope, or {% set ns.attribute = v %} on a namespace.
  void assign(const std::vector<std::string>& target_names, const Value& v) {
    if (target_names.size() == 1) {
      scopes_.back()[target_names[0]] = v;
      return;
    }
    Value target = lookup(target_names[0]);
    check(target.kind == Value::DictKind,
          "chat template: {% set " + target_names[0] + "." + target_names[1] + " %} needs a namespace()");
    checked(v, target.dict.get(), 1);
    for (auto& [k, old] : *target.dict)
      if (k == target_names[1]) {
        old = v;
        return;
      }
    target.dict->emplace_back(target_names[1], v);
  }

  // A macro's text for the arguments given: its parameters bound in a scope of their own (missing ones
  // from their defaults, else undefined), the caller's names out of sight.
  Value call_macro(const Node& macro, const std::vector<Value>& args,
                   const std::vector<std::pair<std::string, Value>>& kwargs) {
    const DepthGuard guard(macro_depth_, kMaxMacroDepth, "macro calls");
    check(args.size() <= macro.params.size(), "chat template: the macro '" + macro.text + "' takes " +
                                                  std::to_string(macro.params.size()) + " arguments, given " +
                                                  std::to_string(args.size()));
    for (const auto& [key, value] : kwargs) {
      bool known = false;
      for (const auto& param : macro.params) known = known || param.first == key;
      check(known, "chat template: the macro '" + macro.text + "' has no argument '" + key + "'");
    }
    const size_t saved_frame = frame_;
    scopes_.emplace_back();
    frame_ = scopes_.size() - 1;
    BoundedText text = bounded();  // (an error ends the whole render: nothing to restore on the way out)
    for (size_t k = 0; k < macro.params.size(); ++k) {
      const auto& [param, fallback] = macro.params[k];
      Value v;
      bool given = k < args.size();
      if (given) v = args[k];
      for (const auto& [key, value] : kwargs)
        if (key == param) {
          v = value;
          given = true;
        }
      if (!given && fallback) v = eval(*fallback);
      scopes_.back()[param] = std::move(v);
    }
    run(macro.body, text);
    scopes_.pop_back();
    frame_ = saved_frame;
    charge(1, text.out.size());
    return Value::str(std::move(text.out));
  }

  static int64_t as_int(const Value& v, const std::string& what) {
    check(v.kind == Value::Int || v.kind == Value::Bool,
          "chat template: " + what + " needs an integer, got " + excerpt(v));
    return v.kind == Value::Int ? v.i : v.b;
  }

  static std::string strip(const std::string& s, bool left, bool right,
                           const std::string& chars = " \t\r\n") {
    size_t a = 0, b = s.size();
    if (left) {
      a = s.find_first_not_of(chars);
      if (a == std::string::npos) return "";
    }
    if (right) b = s.find_last_not_of(chars) + 1;
    return s.substr(a, b - a);
  }

  // Integer arithmetic wraps as two's complement (overflow in C++ would be undefined).
  static int64_t wrapping(int64_t x, int64_t y, char op) {
    const uint64_t a = uint64_t(x), b = uint64_t(y);
    return int64_t(op == '+' ? a + b : op == '-' ? a - b : a * b);
  }
  static size_t text_bytes(const Value& v) { return v.kind == Value::Str ? v.s.size() : 0; }

  Value eval(const Expr& e) {
    const DepthGuard guard(eval_depth_, kMaxExpressionDepth, "expressions");
    Value v = evaluate(e);
    charge(1, text_bytes(v));
    return v;
  }

  Value evaluate(const Expr& e) {
    switch (e.kind) {
      case Expr::Literal:
        return e.literal;
      case Expr::Name:
        return lookup(e.name);
      case Expr::ListLit: {
        List items;
        for (const auto& a : e.args) items.push_back(eval(*a));
        return checked(Value::make_list(std::move(items)));
      }
      case Expr::DictLit: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2)
          d.emplace_back(text(eval(*e.args[k])), eval(*e.args[k + 1]));
        return checked(Value::make_dict(std::move(d)));
      }
      case Expr::Attr: {
        const Value obj = eval(*e.args[0]);
        if (const Value* v = obj.find(e.name)) return *v;
        return Value();
      }
      case Expr::Index: {
        const Value obj = eval(*e.args[0]);
        const Value key = eval(*e.args[1]);
        if (obj.kind == Value::DictKind) {
          const Value* v = obj.find(text(key));
          return v ? *v : Value();
        }
        if (obj.kind == Value::ListKind || obj.kind == Value::Str) {
          const int64_t n = obj.kind == Value::ListKind ? int64_t(obj.list->size()) : int64_t(obj.s.size());
          int64_t k = as_int(key, "an index");
          if (k < 0) k += n;
          if (k < 0 || k >= n) return Value();
          return obj.kind == Value::ListKind ? (*obj.list)[size_t(k)]
                                             : Value::str(obj.s.substr(size_t(k), 1));
        }
        return Value();
      }
      case Expr::Slice: {
        const Value obj = eval(*e.args[0]);
        const int64_t n = obj.kind == Value::ListKind ? int64_t(obj.list->size()) : int64_t(obj.s.size());
        check(obj.kind == Value::ListKind || obj.kind == Value::Str,
              "chat template: cannot slice " + excerpt(obj));
        const int64_t step = e.args[3] ? as_int(eval(*e.args[3]), "a slice's step") : 1;
        check(step != 0, "chat template: a slice's step cannot be zero");
        // Python's bounds: clamped to [0, n] going forward, to [-1, n - 1] going backward.
        auto bound = [&](const ExprPtr& b, int64_t fallback) {
          if (!b) return fallback;
          int64_t k = as_int(eval(*b), "a slice");
          if (k < 0) k += n;
          return step > 0 ? std::clamp<int64_t>(k, 0, n) : std::clamp<int64_t>(k, -1, n - 1);
        };
        const int64_t lo = bound(e.args[1], step > 0 ? 0 : n - 1), hi = bound(e.args[2], step > 0 ? n : -1);
        if (step == 1) {
          const int64_t end = std::max(lo, hi);
          if (obj.kind == Value::Str) return Value::str(obj.s.substr(size_t(lo), size_t(end - lo)));
          return Value::make_list(List(obj.list->begin() + lo, obj.list->begin() + end));
        }
        std::string chars;
        List items;
        const int64_t stride = std::clamp<int64_t>(step, -(n + 1), n + 1);  // one item past the whole length
        for (int64_t k = lo; stride > 0 ? k < hi : k > hi; k += stride) {
          charge(1);
          if (obj.kind == Value::Str)
            chars += obj.s[size_t(k)];
          else
            items.push_back((*obj.list)[size_t(k)]);
        }
        if (obj.kind == Value::Str) return Value::str(std::move(chars));
        return Value::make_list(std::move(items));
      }
      case Expr::Cond:
        return truthy(eval(*e.args[1])) ? eval(*e.args[0]) : eval(*e.args[2]);
      case Expr::Unary: {
        const Value a = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!truthy(a));
        if (a.kind == Value::Float) return Value::floating(-a.f);
        return Value::integer(wrapping(0, as_int(a, "'-'"), '-'));
      }
      case Expr::Binary:
        return binary(e);
      case Expr::Test: {
        const Value subject = eval(*e.args[0]);
        std::vector<Value> args;
        for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
        return Value::boolean(test(e.name, subject, args) != e.negate);
      }
      case Expr::Filter:
        return filter(e);
      case Expr::Call:
        return call(e);
    }
    return Value();
  }

  Value binary(const Expr& e) {
    if (e.name == "and") {
      const Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    if (e.name == "or") {
      const Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    const Value a = eval(*e.args[0]), b = eval(*e.args[1]);
    if (e.name == "==") return Value::boolean(equal(a, b));
    if (e.name == "!=") return Value::boolean(!equal(a, b));
    if (e.name == "~") {
      std::string left = text(a), right = text(b);
      fits(left.size() + right.size());
      return Value::str(left + right);
    }
    if (e.name == "in") return Value::boolean(contains(b, a));
    if (e.name == "+") {
      if (a.kind == Value::Str && b.kind == Value::Str) {
        fits(a.s.size() + b.s.size());
        return Value::str(a.s + b.s);
      }
      if (a.kind == Value::ListKind && b.kind == Value::ListKind) {
        fits_list(a.list->size() + b.list->size());
        charge(int64_t(a.list->size() + b.list->size()));
        List joined = *a.list;
        joined.insert(joined.end(), b.list->begin(), b.list->end());
        return checked(Value::make_list(std::move(joined)));
      }
      check(a.kind != Value::Str && b.kind != Value::Str,
            "chat template: cannot add " + excerpt(a) + " and " + excerpt(b));
      if (a.kind == Value::Float || b.kind == Value::Float)
        return Value::floating(number(a, "'+'") + number(b, "'+'"));
      return Value::integer(wrapping(as_int(a, "'+'"), as_int(b, "'+'"), '+'));
    }
    if (e.name == "<" || e.name == ">" || e.name == "<=" || e.name == ">=") {
      int cmp;
      if (a.kind == Value::Str && b.kind == Value::Str) {
        cmp = a.s.compare(b.s);
      } else if (a.kind == Value::Float || b.kind == Value::Float) {
        const double x = number(a, "a comparison"), y = number(b, "a comparison");
        cmp = x < y ? -1 : x > y ? 1 : 0;
      } else {
        const int64_t x = as_int(a, "a comparison"), y = as_int(b, "a comparison");
        cmp = x < y ? -1 : x > y ? 1 : 0;
      }
      return Value::boolean(e.name == "<"    ? cmp < 0
                            : e.name == ">"  ? cmp > 0
                            : e.name == "<=" ? cmp <= 0
                                             : cmp >= 0);
    }
    if (e.name == "*" && a.kind == Value::Str) {
      // Checked before the text is made: 'ab' * 65536 * 65536 is an error, not 8 GB.
      const int64_t times = std::max<int64_t>(0, as_int(b, "'*'"));
      if (a.s.empty()) return a;  // '' * 9223372036854775807 is '' (and no loop of that length)
      if (uint64_t(times) > max_bytes_ / a.s.size()) fits(size_t(-1));
      std::string out;
      out.reserve(a.s.size() * size_t(times));
      for (int64_t k = 0; k < times; ++k) out += a.s;
      return Value::str(std::move(out));
    }
    if (a.kind == Value::Float || b.kind == Value::Float || e.name == "/") {
      // Python's float arithmetic; '/' is true division even on integers.
      const double x = number(a, "'" + e.name + "'"), y = number(b, "'" + e.name + "'");
      if (e.name == "-") return Value::floating(x - y);
      if (e.name == "*") return Value::floating(x * y);
      check(y != 0, "chat template: division by zero");
      if (e.name == "/") return Value::floating(x / y);
      if (e.name == "//") return Value::floating(std::floor(x / y));
      const double r = std::fmod(x, y);  // with the sign of the divisor, as Python's
      return Value::floating(r != 0 && (r < 0) != (y < 0) ? r + y : r);
    }
    const int64_t x = as_int(a, "'" + e.name + "'"), y = as_int(b, "'" + e.name + "'");
    if (e.name == "-") return Value::integer(wrapping(x, y, '-'));
    if (e.name == "*") return Value::integer(wrapping(x, y, '*'));
    check(y != 0, "chat template: division by zero");
    if (y == -1) return Value::integer(e.name == "%" ? 0 : wrapping(0, x, '-'));  // INT64_MIN / -1 overflows
    if (e.name == "%") {
      const int64_t r = x % y;  // with the sign of the divisor, as Python's
      return Value::integer(r != 0 && (r < 0) != (y < 0) ? r + y : r);
    }
    const int64_t q = x / y;  // "//": floored, as Python's
    return Value::integer(q * y != x && (x < 0) != (y < 0) ? q - 1 : q);
  }

  static double number(const Value& v, const std::string& what) {
    check(is_number(v), "chat template: " + what + " needs a number, got " + excerpt(v));
    return as_double(v);
  }

  bool test(const std::string& name, const Value& v, const std::vector<Value>& args = {}) {
    auto arg = [&]() -> const Value& {
      check(!args.empty(), "chat template: the test 'is " + name + "' needs an argument");
      return args[0];
    };
    if (name == "defined") return v.kind != Value::Undefined;
    if (name == "undefined") return v.kind == Value::Undefined;
    if (name == "none") return v.kind == Value::None;
    if (name == "string") return v.kind == Value::Str;
    if (name == "number") return is_number(v);  // Python's bools are numbers
    if (name == "integer") return v.kind == Value::Int;
    if (name == "float") return v.kind == Value::Float;
    if (name == "boolean") return v.kind == Value::Bool;
    if (name == "mapping") return v.kind == Value::DictKind;
    if (name == "iterable")
      return v.kind == Value::ListKind || v.kind == Value::Str || v.kind == Value::DictKind;
    // jinja2's sequence: anything with a length and items (dicts too)
    if (name == "sequence")
      return v.kind == Value::ListKind || v.kind == Value::Str || v.kind == Value::DictKind;
    if (name == "callable") return v.kind == Value::Macro;
    if (name == "true") return v.kind == Value::Bool && v.b;
    if (name == "false") return v.kind == Value::Bool && !v.b;
    if (name == "even") return as_int(v, "'even'") % 2 == 0;
    if (name == "odd") return as_int(v, "'odd'") % 2 != 0;
    if (name == "divisibleby") {
      const int64_t d = as_int(arg(), "'divisibleby'");
      return d != 0 && d != -1 ? as_int(v, "'divisibleby'") % d == 0 : d == -1;
    }
    if (name == "lower" || name == "upper") {
      if (v.kind != Value::Str) return false;
      for (char c : v.s)
        if (name == "lower" ? std::isupper(static_cast<unsigned char>(c))
                            : std::islower(static_cast<unsigned char>(c)))
          return false;
      return true;
    }
    if (name == "eq" || name == "equalto" || name == "==") return equal(v, arg());
    if (name == "ne" || name == "!=") return !equal(v, arg());
    if (name == "sameas") {
      const Value& other = arg();
      if (v.kind != other.kind) return false;
      if (v.kind == Value::ListKind) return v.list == other.list;
      if (v.kind == Value::DictKind) return v.dict == other.dict;
      return v.kind == Value::None || v.kind == Value::Undefined || (v.kind == Value::Bool && v.b == other.b);
    }
    if (name == "in") {
      const Value& container = arg();
      return contains(container, v);
    }
    if (name == "lt" || name == "<" || name == "le" || name == "<=" || name == "gt" || name == ">" ||
        name == "ge" || name == ">=") {
      const int c = compare(v, arg(), false);
      return name == "lt" || name == "<"    ? c < 0
             : name == "le" || name == "<=" ? c <= 0
             : name == "gt" || name == ">"  ? c > 0
                                            : c >= 0;
    }
    throw Error("chat template: the test 'is " + name + "' is not supported by canvas's Jinja subset");
  }

  // `needle in container`, Python's way.
  bool contains(const Value& container, const Value& needle) {
    if (container.kind == Value::Str) {
      charge(1, container.s.size());
      check(needle.kind == Value::Str, "chat template: 'in <string>' needs a string, got " + excerpt(needle));
      return container.s.find(needle.s) != std::string::npos;
    }
    if (container.kind == Value::DictKind)
      return needle.kind == Value::Str && container.find(needle.s) != nullptr;
    if (container.kind == Value::ListKind) {
      for (const Value& v : *container.list) {
        charge(1);
        if (equal(needle, v)) return true;
      }
      return false;
    }
    check(container.kind == Value::Undefined || container.kind == Value::None,
          "chat template: cannot look for a value in " + excerpt(container));
    return false;
  }

  // Python's ordering of two values for sort / dictsort / min / comparisons: numbers with numbers, strings
  // with strings (lowercased unless case_sensitive), lists item by item.
  int compare(const Value& a, const Value& b, bool case_sensitive, int level = 0) {
    charge(1);
    if (is_number(a) && is_number(b)) {
      const double x = as_double(a), y = as_double(b);
      if (a.kind != Value::Float && b.kind != Value::Float) {
        const int64_t p = a.kind == Value::Int ? a.i : a.b, q = b.kind == Value::Int ? b.i : b.b;
        return p < q ? -1 : p > q ? 1 : 0;
      }
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.kind == Value::Str && b.kind == Value::Str) {
      charge(0, a.s.size() + b.s.size());
      const int c = case_sensitive ? a.s.compare(b.s) : lowercase(a.s).compare(lowercase(b.s));
      return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.kind == Value::ListKind && b.kind == Value::ListKind) {
      if (level >= kMaxValueDepth) too_deep();
      for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k)
        if (const int c = compare((*a.list)[k], (*b.list)[k], case_sensitive, level + 1)) return c;
      return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
    }
    throw Error("chat template: cannot order " + excerpt(a) + " and " + excerpt(b));
  }

  static std::string lowercase(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  static std::string uppercase(std::string s) {
    for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
    return s;
  }
  static std::string capitalize(const std::string& s) {
    std::string out = lowercase(s);
    if (!out.empty()) out[0] = char(std::toupper(static_cast<unsigned char>(out[0])));
    return out;
  }
  static std::string title(std::string s) {
    bool start = true;
    for (char& c : s) {
      c = char(start ? std::toupper(static_cast<unsigned char>(c))
                     : std::tolower(static_cast<unsigned char>(c)));
      start = !std::isalpha(static_cast<unsigned char>(c));
    }
    return s;
  }
  // Python's len of a str counts code points, not UTF-8 bytes.
  static int64_t code_points(const std::string& s) {
    int64_t n = 0;
    for (unsigned char c : s) n += (c & 0xc0) != 0x80;
    return n;
  }

  // The items a filter walks: a list's, a dict's keys, a string's characters.
  List as_items(const Value& v, const std::string& what) {
    if (v.kind == Value::ListKind) return *v.list;
    List out;
    if (v.kind == Value::DictKind) {
      for (const auto& [k, val] : *v.dict) out.push_back(Value::str(k));
    } else if (v.kind == Value::Str) {
      fits_list(v.s.size());
      for (char c : v.s) out.push_back(Value::str(std::string(1, c)));
    } else {
      check(v.kind == Value::Undefined || v.kind == Value::None,
            "chat template: " + what + " needs a list, got " + excerpt(v));
    }
    charge(int64_t(out.size()));
    return out;
  }

  using Kwargs = std::vector<std::pair<std::string, Value>>;
  static const Value* kwarg(const Kwargs& kwargs, const std::string& name) {
    for (const auto& [k, v] : kwargs)
      if (k == name) return &v;
    return nullptr;
  }
  // A dict's item (attribute=) for map / selectattr / sort, with dotted paths ("function.name").
  static Value attribute_of(const Value& v, const std::string& path) {
    Value at = v;
    size_t from = 0;
    while (true) {
      const size_t dot = path.find('.', from);
      const std::string key = path.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
      const Value* next = at.find(key);
      if (!next) return Value();
      at = *next;
      if (dot == std::string::npos) return at;
      from = dot + 1;
    }
  }

  Value filter(const Expr& e) {
    const Value v = eval(*e.args[0]);
    std::vector<Value> args;
    for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
    Kwargs kwargs;
    for (const auto& [k, x] : e.kwargs) kwargs.emplace_back(k, eval(*x));
    return apply_filter(e.name, v, args, kwargs);
  }

  Value apply_filter(const std::string& f, const Value& v, const std::vector<Value>& args,
                     const Kwargs& kwargs) {
    auto flag = [&](const std::string& name, size_t position, bool fallback) {
      if (const Value* x = kwarg(kwargs, name)) return truthy(*x);
      return position < args.size() ? truthy(args[position]) : fallback;
    };
    if (f == "trim")
      return Value::str(strip(text(v), true, true, args.empty() ? " \t\r\n\v\f" : text(args[0])));
    if (f == "upper") return Value::str(uppercase(text(v)));
    if (f == "lower") return Value::str(lowercase(text(v)));
    if (f == "capitalize") return Value::str(capitalize(text(v)));
    if (f == "title") return Value::str(title(text(v)));
    if (f == "string") return Value::str(text(v));
    if (f == "safe" || f == "escape" || f == "e") return v.kind == Value::Str ? v : Value::str(text(v));
    if (f == "length" || f == "count") {
      if (v.kind == Value::ListKind) return Value::integer(int64_t(v.list->size()));
      if (v.kind == Value::DictKind) return Value::integer(int64_t(v.dict->size()));
      return Value::integer(code_points(text(v)));
    }
    if (f == "default" || f == "d") {
      const bool falsy_too = flag("boolean", 1, false);
      const bool replace = v.kind == Value::Undefined || (falsy_too && !truthy(v));
      return replace
                 ? (args.empty()
                        ? (kwarg(kwargs, "default_value") ? *kwarg(kwargs, "default_value") : Value::str(""))
                        : args[0])
                 : v;
    }
    if (f == "first" || f == "last") {
      if (v.kind == Value::Str)
        return v.s.empty() ? Value() : Value::str(std::string(1, f == "first" ? v.s.front() : v.s.back()));
      const List items = as_items(v, f);
      if (items.empty()) return Value();
      return f == "first" ? items.front() : items.back();
    }
    if (f == "join") {
      const List items = as_items(v, "join");
      const std::string sep = args.empty() ? "" : text(args[0]);
      const Value* attribute = kwarg(kwargs, "attribute");
      BoundedText out = bounded();
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out.add(sep);
        write_text(out, attribute ? attribute_of(items[k], text(*attribute)) : items[k]);
      }
      charge(int64_t(items.size()), out.out.size());
      return Value::str(std::move(out.out));
    }
    if (f == "tojson") {
      BoundedText out = bounded();
      write_json(out, v);
      charge(1, out.out.size());
      return Value::str(std::move(out.out));
    }
    if (f == "list") return Value::make_list(as_items(v, "list"));
    if (f == "items") return items(v);
    if (f == "reverse") {
      if (v.kind == Value::Str) {
        charge(1, v.s.size());
        return Value::str(std::string(v.s.rbegin(), v.s.rend()));
      }
      List items = as_items(v, "reverse");
      std::reverse(items.begin(), items.end());
      return Value::make_list(std::move(items));
    }
    if (f == "dictsort") {
      // (key, value) pairs ordered by key (or by="value"), case-insensitively unless case_sensitive.
      check(v.kind == Value::DictKind, "chat template: dictsort needs a dict, got " + excerpt(v));
      const bool case_sensitive = flag("case_sensitive", 0, false);
      const Value* by = kwarg(kwargs, "by");
      const bool by_value = by ? text(*by) == "value" : args.size() > 1 && text(args[1]) == "value";
      const bool reverse = flag("reverse", 2, false);
      List pairs = *items(v).list;
      std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
        const int c = compare((*a.list)[by_value ? 1 : 0], (*b.list)[by_value ? 1 : 0], case_sensitive);
        return reverse ? c > 0 : c < 0;
      });
      return Value::make_list(std::move(pairs));
    }
    if (f == "sort") {
      List items = as_items(v, "sort");
      const bool reverse = flag("reverse", 0, false), case_sensitive = flag("case_sensitive", 1, false);
      const Value* attribute = kwarg(kwargs, "attribute");
      std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
        const int c = attribute ? compare(attribute_of(a, text(*attribute)),
                                          attribute_of(b, text(*attribute)), case_sensitive)
                                : compare(a, b, case_sensitive);
        return reverse ? c > 0 : c < 0;
      });
      return Value::make_list(std::move(items));
    }
    if (f == "unique") {
      const bool case_sensitive = flag("case_sensitive", 0, false);
      List out;
      for (const Value& item : as_items(v, "unique")) {
        bool seen = false;
        for (const Value& kept : out) {
          charge(1);  // quadratic in the items: each comparison is work
          seen = item.kind == Value::Str && kept.kind == Value::Str && !case_sensitive
                     ? compare(item, kept, false) == 0
                     : equal(item, kept);
          if (seen) break;
        }
        if (!seen) out.push_back(item);
      }
      return Value::make_list(std::move(out));
    }
    if (f == "map") {
      // map('filter', args...) or map(attribute='name', default=...)
      List out;
      const Value* attribute = kwarg(kwargs, "attribute");
      check(attribute || !args.empty(), "chat template: map needs a filter name or attribute=");
      const std::vector<Value> rest(args.empty() ? args.end() : args.begin() + 1, args.end());
      for (const Value& item : as_items(v, "map")) {
        if (attribute) {
          Value x = attribute_of(item, text(*attribute));
          const Value* fallback = kwarg(kwargs, "default");
          out.push_back(x.kind == Value::Undefined && fallback ? *fallback : x);
        } else {
          out.push_back(apply_filter(text(args[0]), item, rest, {}));
        }
      }
      return Value::make_list(std::move(out));
    }
    if (f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr") {
      // select('test', args...), selectattr('attribute', 'test', args...); no test: truthiness
      const bool by_attribute = f == "selectattr" || f == "rejectattr",
                 keep_matches = f == "select" || f == "selectattr";
      const size_t test_at = by_attribute ? 1 : 0;
      check(!by_attribute || !args.empty(), "chat template: " + f + " needs an attribute name");
      const std::vector<Value> rest(args.size() > test_at + 1 ? args.begin() + long(test_at) + 1 : args.end(),
                                    args.end());
      List out;
      for (const Value& item : as_items(v, f)) {
        const Value subject = by_attribute ? attribute_of(item, text(args[0])) : item;
        const bool matches =
            args.size() > test_at ? test(text(args[test_at]), subject, rest) : truthy(subject);
        if (matches == keep_matches) out.push_back(item);
      }
      return Value::make_list(std::move(out));
    }
    if (f == "int") {
      if (v.kind == Value::Float && std::isfinite(v.f) && std::fabs(v.f) < 9.2e18)
        return Value::integer(int64_t(v.f));
      if (v.kind == Value::Int || v.kind == Value::Bool) return Value::integer(as_int(v, "int"));
      int64_t out = 0;
      const std::string s = strip(text(v), true, true);
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
      if (ec == std::errc() && end == s.data() + s.size()) return Value::integer(out);
      return args.empty() ? Value::integer(0) : args[0];
    }
    if (f == "float") {
      if (is_number(v)) return Value::floating(as_double(v));
      const std::string s = strip(text(v), true, true);
      char* end = nullptr;
      const double out = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return Value::floating(out);
      return args.empty() ? Value::floating(0) : args[0];
    }
    if (f == "abs") {
      if (v.kind == Value::Float) return Value::floating(std::fabs(v.f));
      const int64_t x = as_int(v, "abs");
      return Value::integer(x < 0 ? wrapping(0, x, '-') : x);
    }
    if (f == "replace") {
      check(args.size() >= 2, "chat template: replace needs two arguments");
      return replace(text(v), text(args[0]), text(args[1]),
                     args.size() > 2 ? as_int(args[2], "replace") : -1);
    }
    throw Error("chat template: the filter '| " + f + "' is not supported by canvas's Jinja subset");
  }

  // s with `from` replaced by `to` (at most `count` times; negative: all), bounded as the output is.
  Value replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
    if (from.empty()) return Value::str(s);
    BoundedText out = bounded();
    size_t a = 0;
    for (int64_t done = 0; count < 0 || done < count; ++done) {
      const size_t b = s.find(from, a);
      if (b == std::string::npos) break;
      out.add(std::string_view(s).substr(a, b - a));
      out.add(to);
      a = b + from.size();
    }
    out.add(std::string_view(s).substr(a));
    charge(1, out.out.size());
    return Value::str(std::move(out.out));
  }

  Value items(const Value& v) {
    List out;
    if (v.kind == Value::DictKind)
      for (const auto& [k, val] : *v.dict) {
        out.push_back(Value::make_list({Value::str(k), val}));
        out.back().tuple = true;
      }
    return checked(Value::make_list(std::move(out)));
  }

  Value call(const Expr& e) {
    std::vector<Value> args;
    for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
    Kwargs kwargs;
    for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, eval(*v));
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Name) {
      const Value named = lookup(callee.name);
      if (named.kind == Value::Macro) return call_macro(*named.macro, args, kwargs);
      if (callee.name == "raise_exception")
        throw Error("the chat template refused the conversation: " + (args.empty() ? "" : excerpt_text(args[0])));
      if (callee.name == "namespace" || callee.name == "dict") {
        Dict d;
        for (auto& [k, v] : kwargs) d.emplace_back(k, std::move(v));
        return checked(Value::make_dict(std::move(d)));
      }
      if (callee.name == "range") return range(args);
      throw Error("chat template: the function '" + callee.name +
                  "' is not supported by canvas's Jinja subset");
    }
    check(callee.kind == Expr::Attr, "chat template: only functions, macros and methods can be called");
    const Value obj = eval(*callee.args[0]);
    const std::string& m = callee.name;
    if (obj.kind == Value::Str) {
      const std::string& s = obj.s;
      const bool whitespace = args.empty() || args[0].kind == Value::None;
      const std::string chars = whitespace ? " \t\r\n\v\f" : text(args[0]);
      if (m == "strip") return Value::str(strip(s, true, true, chars));
      if (m == "lstrip") return Value::str(strip(s, true, false, chars));
      if (m == "rstrip") return Value::str(strip(s, false, true, chars));
      if (m == "upper") return Value::str(uppercase(s));
      if (m == "lower") return Value::str(lowercase(s));
      if (m == "title") return Value::str(title(s));
      if (m == "capitalize") return Value::str(capitalize(s));
      if (m == "startswith" || m == "endswith") {
        const std::string p = args.empty() ? "" : text(args[0]);
        const bool yes =
            p.size() <= s.size() && (m == "startswith" ? s.compare(0, p.size(), p) == 0
                                                       : s.compare(s.size() - p.size(), p.size(), p) == 0);
        return Value::boolean(yes);
      }
      if (m == "find" || m == "count") {
        const std::string p = args.empty() ? "" : text(args[0]);
        charge(1, s.size());
        if (m == "find") {
          const size_t at = s.find(p);
          return Value::integer(at == std::string::npos ? -1 : int64_t(at));
        }
        if (p.empty()) return Value::integer(code_points(s) + 1);
        int64_t n = 0;
        for (size_t at = s.find(p); at != std::string::npos; at = s.find(p, at + p.size())) ++n;
        return Value::integer(n);
      }
      check(m != "split" || whitespace || !chars.empty(), "chat template: split with an empty separator");
      if (m == "split")
        return split(s, whitespace ? std::string() : chars, args.size() > 1 ? as_int(args[1], "split") : -1);
      if (m == "replace" && args.size() >= 2)
        return replace(s, text(args[0]), text(args[1]), args.size() > 2 ? as_int(args[2], "replace") : -1);
      if (m == "join" && args.size() == 1) return apply_filter("join", args[0], {obj}, {});
    }
    if (obj.kind == Value::DictKind) {
      if (m == "get") {
        const Value* v = args.empty() ? nullptr : obj.find(text(args[0]));
        return v ? *v : (args.size() > 1 ? args[1] : Value::none());
      }
      if (m == "items") return items(obj);
      if (m == "keys" || m == "values") {
        List out;
        for (const auto& [k, v] : *obj.dict) out.push_back(m == "keys" ? Value::str(k) : v);
        charge(int64_t(out.size()));
        return Value::make_list(std::move(out));
      }
    }
    throw Error("chat template: the method '." + m + "()' is not supported by canvas's Jinja subset");
  }

  // range(stop), range(start, stop[, step]), as Python's.
  Value range(const std::vector<Value>& args) {
    check(!args.empty() && args.size() <= 3, "chat template: range takes 1 to 3 arguments");
    const int64_t lo = args.size() >= 2 ? as_int(args[0], "range") : 0;
    const int64_t hi = as_int(args[args.size() >= 2 ? 1 : 0], "range");
    const int64_t step = args.size() == 3 ? as_int(args[2], "range") : 1;
    check(step != 0, "chat template: range's step cannot be zero");
    // The count in unsigned arithmetic: hi - lo may not fit an int64.
    const uint64_t span =
        step > 0 ? (hi > lo ? uint64_t(hi) - uint64_t(lo) : 0) : (lo > hi ? uint64_t(lo) - uint64_t(hi) : 0);
    const uint64_t stride = step > 0 ? uint64_t(step) : uint64_t(0) - uint64_t(step);
    const uint64_t count = span == 0 ? 0 : (span - 1) / stride + 1;
    fits_list(size_t(std::min<uint64_t>(count, uint64_t(kMaxListItems) + 1)));
    charge(int64_t(count));
    List out;
    for (uint64_t k = 0; k < count; ++k)
      out.push_back(Value::integer(int64_t(uint64_t(lo) + k * uint64_t(step))));
    return Value::make_list(std::move(out));
  }

  // str.split: on `sep`, or on runs of whitespace (dropping empty parts) when sep is empty; at most
  // max_splits splits when that is not negative.
  Value split(const std::string& s, const std::string& sep, int64_t max_splits) {
    List parts;
    const std::string spaces = " \t\r\n\v\f";
    size_t a = sep.empty() ? s.find_first_not_of(spaces) : 0;
    while (a != std::string::npos) {
      fits_list(parts.size() + 1);
      const bool last = max_splits >= 0 && int64_t(parts.size()) >= max_splits;
      const size_t b = last ? std::string::npos : sep.empty() ? s.find_first_of(spaces, a) : s.find(sep, a);
      parts.push_back(Value::str(s.substr(a, b == std::string::npos ? std::string::npos : b - a)));
      if (b == std::string::npos) break;
      a = sep.empty() ? s.find_first_not_of(spaces, b) : b + sep.size();
    }
    charge(int64_t(parts.size()), s.size());
    return Value::make_list(std::move(parts));
  }

  std::vector<std::map<std::string, Value>> scopes_;
};

// A JSON value as the template sees it, nested at most kMaxValueDepth deep.
Value from_json(const nlohmann::ordered_json& j, const std::string& source, int level = 0) {
  if (level > kMaxValueDepth)
    throw Error(source + ": an input nested more than " + std::to_string(kMaxValueDepth) + " deep");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      if (j.get<uint64_t>() <= uint64_t(INT64_MAX)) return Value::integer(int64_t(j.get<uint64_t>()));
      return Value::floating(double(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& x : j) items.push_back(from_json(x, source, level + 1));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, x] : j.items()) d.emplace_back(k, from_json(x, source, level + 1));
      return Value::make_dict(std::move(d));
    }
    default:
      return Value::none();
  }
}

}  // namespace

nlohmann::ordered_json ChatMessage::to_json() const {
  nlohmann::ordered_json m = {{"role", role}};
  if (!content_parts.is_null())
    m["content"] = content_parts;
  else
    m["content"] = content;
  if (!reasoning_content.empty()) m["reasoning_content"] = reasoning_content;
  if (!tool_calls.is_null()) m["tool_calls"] = tool_calls;
  if (!tool_call_id.empty()) m["tool_call_id"] = tool_call_id;
  if (!name.empty()) m["name"] = name;
  return m;
}

ChatMessage ChatMessage::from_json(const nlohmann::ordered_json& message, const std::string& origin) {
  check(message.is_object(), origin + ": a message must be an object");
  auto text = [&](const char* key) -> std::string {
    if (!message.contains(key) || message[key].is_null()) return "";
    check(message[key].is_string(), origin + ": a message's \"" + key + "\" must be a string");
    return message[key].get<std::string>();
  };
  ChatMessage m;
  m.role = text("role");
  check(!m.role.empty(), origin + ": a message has no \"role\"");
  if (message.contains("content") && message["content"].is_array()) {
    m.content_parts = message["content"];
    for (const auto& part : m.content_parts)  // the text parts, for front ends that read `content` only
      if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
          part["text"].is_string())
        m.content += part["text"].get<std::string>();
  } else {
    m.content = text("content");
  }
  m.reasoning_content = text("reasoning_content");
  if (message.contains("tool_calls") && !message["tool_calls"].is_null()) {
    check(message["tool_calls"].is_array(), origin + ": a message's \"tool_calls\" must be a list");
    m.tool_calls = message["tool_calls"];
  }
  m.tool_call_id = text("tool_call_id");
  m.name = text("name");
  return m;
}

std::string render_chat_template(const std::string& source, const ChatTemplateInputs& inputs) {
  TemplateParser parser(split_template(source));
  std::string ended;
  const Body body = parser.parse_body({}, &ended);
  List messages;
  for (const ChatMessage& m : inputs.messages) messages.push_back(from_json(m.to_json(), inputs.source));
  std::map<std::string, Value> globals;
  globals["messages"] = Value::make_list(std::move(messages));
  globals["bos_token"] = Value::str(inputs.bos_token);
  globals["eos_token"] = Value::str(inputs.eos_token);
  globals["add_generation_prompt"] = Value::boolean(inputs.add_generation_prompt);
  // transformers passes tools=None when there are none (defined, and false).
  globals["tools"] = inputs.tools.is_null() ? Value::none() : from_json(inputs.tools, inputs.source);
  if (inputs.enable_thinking) globals["enable_thinking"] = Value::boolean(*inputs.enable_thinking);
  Renderer renderer(std::move(globals), inputs);
  BoundedText out;
  out.limit = inputs.max_output_bytes;
  out.source = &inputs.source;
  out.reason = &inputs.max_output_reason;
  renderer.run(body, out);
  return std::move(out.out);
}

}  // namespace canvas
