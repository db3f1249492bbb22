// A small interpreter for the Jinja subset of Hugging Face chat templates (see chat_template.h).
#include "decode/chat_template.h"

#include <algorithm>
#include <cctype>
#include <charconv>
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
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, as Python dicts

struct Value {
  enum Kind { Undefined, None, Bool, Int, Str, ListKind, DictKind } kind = Undefined;
  bool b = false;
  int64_t i = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // shared: a namespace() is changed through any copy of it

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
    case Value::Str:
      return !v.s.empty();
    case Value::ListKind:
      return !v.list->empty();
    case Value::DictKind:
      return !v.dict->empty();
  }
  return false;
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

void write_quoted(BoundedText& t, const std::string& s) {
  t.add("'");
  size_t from = 0;
  for (size_t q = s.find('\''); q != std::string::npos; from = q + 1, q = s.find('\'', from)) {
    t.add(std::string_view(s).substr(from, q - from));
    t.add("\\'");
  }
  t.add(std::string_view(s).substr(from));
  t.add("'");
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
    case Value::Str:
      return repr ? write_quoted(t, v.s) : t.add(v.s);
    case Value::ListKind:
      t.add("[");
      for (size_t k = 0; k < v.list->size() && !t.full; ++k) {
        if (k) t.add(", ");
        write_text(t, (*v.list)[k], true, level + 1);
      }
      return t.add("]");
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
      return t.add("null");
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
        } else if (c == '\n') {
          std::snprintf(buf, sizeof buf, "\\n");
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
      while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
      check(j >= src.size() || src[j] != '.', "chat template: floating-point numbers are not supported");
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
      } else if (at_name("is")) {
        ++pos_;
        bool negate = false;
        if (at_name("not")) {
          ++pos_;
          negate = true;
        }
        ExprPtr t = node(Expr::Test, expect_name(), {a});
        t->negate = negate;
        a = t;
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
  ExprPtr unary() {
    const DepthGuard guard(depth_, kMaxTemplateNesting, "expressions");
    if (at_op("-")) {
      ++pos_;
      return node(Expr::Unary, "-", {unary()});
    }
    return filtered();
  }
  ExprPtr filtered() {
    ExprPtr a = postfix();
    while (at_op("|")) {
      ++pos_;
      ExprPtr f = node(Expr::Filter, expect_name(), {a});
      if (at_op("(")) call_arguments(*f);
      a = f;
    }
    return a;
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
        ExprPtr lo, hi;
        if (!at_op(":")) lo = parse();
        if (at_op(":")) {
          ++pos_;
          if (!at_op("]")) hi = parse();
          expect_op("]");
          a = node(Expr::Slice, "", {a, lo, hi});
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

struct Node;
using Body = std::vector<std::shared_ptr<Node>>;
struct Node {
  enum Kind { Text, Output, If, For, Set } kind;
  std::string text;                                // Text
  ExprPtr expr;                                    // Output, For (iterable), Set (value)
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (condition, body), else as a null condition
  std::vector<std::string> vars;                   // For: loop variables; Set: target (name [, attribute])
  Body body, else_body;                            // For
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
    n->expr = p.parse();
    check(!p.at_name("recursive"), "chat template: recursive loops are not supported");
    p.expect_end();
    std::string ended;
    n->body = parse_body({"else", "endfor"}, &ended);
    if (ended == "else") n->else_body = parse_body({"endfor"}, &ended);
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
    check(p.at_op("="), "chat template: block {% set %} ... {% endset %} is not supported");
    p.next();
    n->expr = p.parse();
    p.expect_end();
    return n;
  }

  std::vector<Piece> pieces_;
  size_t pos_ = 0;
  std::string statement_;  // the statement that ended the last body
  int depth_ = 0;
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

  void run(const Body& body, BoundedText& out) {
    for (const auto& n : body) {
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
        case Node::Set: {
          const Value v = eval(*n->expr);
          if (n->vars.size() == 1) {
            scopes_.back()[n->vars[0]] = v;
          } else {
            Value target = lookup(n->vars[0]);
            check(target.kind == Value::DictKind,
                  "chat template: {% set " + n->vars[0] + "." + n->vars[1] + " %} needs a namespace()");
            checked(v, target.dict.get(), 1);
            bool found = false;
            for (auto& [k, old] : *target.dict)
              if (k == n->vars[1]) {
                old = v;
                found = true;
              }
            if (!found) target.dict->emplace_back(n->vars[1], v);
          }
          break;
        }
        case Node::For:
          run_for(*n, out);
          break;
      }
    }
  }

 private:
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
    const List& items = seq.kind == Value::ListKind ? *seq.list : listed;
    if (seq.kind == Value::DictKind) {
      for (const auto& [k, v] : *seq.dict) listed.push_back(Value::str(k));
    } else if (seq.kind == Value::Str) {
      for (char c : seq.s) listed.push_back(Value::str(std::string(1, c)));
    } else if (seq.kind != Value::ListKind) {
      check(seq.kind == Value::Undefined || seq.kind == Value::None,
            "chat template: cannot loop over " + excerpt(seq));
    }
    if (items.empty()) {
      run(n.else_body, out);
      return;
    }
    const int64_t count = int64_t(items.size());
    for (int64_t k = 0; k < count; ++k) {
      // Nested loops multiply: a template from a model file must not run for hours.
      if (++iterations_ > kMaxLoopIterations)
        throw Error(source_ + ": loops ran more than " + std::to_string(kMaxLoopIterations) + " iterations in all");
      std::map<std::string, Value> scope;
      const Value& item = items[size_t(k)];
      if (n.vars.size() == 1) {
        scope[n.vars[0]] = item;
      } else {
        check(item.kind == Value::ListKind && item.list->size() == n.vars.size(),
              "chat template: cannot unpack " + excerpt(item) + " into " + std::to_string(n.vars.size()) +
                  " names");
        for (size_t v = 0; v < n.vars.size(); ++v) scope[n.vars[v]] = (*item.list)[v];
      }
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
    }
  }

  // == on values, Python's way; each element compared is a step of work (shared lists can make many).
  bool equal(const Value& a, const Value& b, int level = 0) {
    if ((a.kind == Value::Int || a.kind == Value::Bool) && (b.kind == Value::Int || b.kind == Value::Bool))
      return (a.kind == Value::Int ? a.i : a.b) == (b.kind == Value::Int ? b.i : b.b);
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
        return a.dict == b.dict;
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
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value();
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
        auto bound = [&](const ExprPtr& b, int64_t fallback) {
          if (!b) return fallback;
          int64_t k = as_int(eval(*b), "a slice");
          if (k < 0) k += n;
          return std::clamp<int64_t>(k, 0, n);
        };
        const int64_t lo = bound(e.args[1], 0), hi = std::max(lo, bound(e.args[2], n));
        if (obj.kind == Value::Str) return Value::str(obj.s.substr(size_t(lo), size_t(hi - lo)));
        return Value::make_list(List(obj.list->begin() + lo, obj.list->begin() + hi));
      }
      case Expr::Cond:
        return truthy(eval(*e.args[1])) ? eval(*e.args[0]) : eval(*e.args[2]);
      case Expr::Unary: {
        const Value a = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!truthy(a));
        return Value::integer(wrapping(0, as_int(a, "'-'"), '-'));
      }
      case Expr::Binary:
        return binary(e);
      case Expr::Test:
        return Value::boolean(test(e.name, eval(*e.args[0])) != e.negate);
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
    if (e.name == "in") {
      if (b.kind == Value::Str) {
        charge(1, b.s.size());
        return Value::boolean(b.s.find(text(a)) != std::string::npos);
      }
      if (b.kind == Value::DictKind) return Value::boolean(b.find(text(a)) != nullptr);
      if (b.kind == Value::ListKind) {
        for (const Value& v : *b.list)
          if (equal(a, v)) return Value::boolean(true);
      }
      return Value::boolean(false);
    }
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
      return Value::integer(wrapping(as_int(a, "'+'"), as_int(b, "'+'"), '+'));
    }
    if (e.name == "<" || e.name == ">" || e.name == "<=" || e.name == ">=") {
      int cmp;
      if (a.kind == Value::Str && b.kind == Value::Str)
        cmp = a.s.compare(b.s);
      else {
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
    const int64_t x = as_int(a, "'" + e.name + "'"), y = as_int(b, "'" + e.name + "'");
    if (e.name == "-") return Value::integer(wrapping(x, y, '-'));
    if (e.name == "*") return Value::integer(wrapping(x, y, '*'));
    check(y != 0, "chat template: division by zero");
    if (y == -1) return Value::integer(e.name == "%" ? 0 : wrapping(0, x, '-'));  // INT64_MIN / -1 overflows
    if (e.name == "%") {
      const int64_t r = x % y;  // with the sign of the divisor, as Python's
      return Value::integer(r != 0 && (r < 0) != (y < 0) ? r + y : r);
    }
    return Value::integer(x / y);  // "/" and "//" on integers
  }

  static bool test(const std::string& name, const Value& v) {
    if (name == "defined") return v.kind != Value::Undefined;
    if (name == "undefined") return v.kind == Value::Undefined;
    if (name == "none") return v.kind == Value::None;
    if (name == "string") return v.kind == Value::Str;
    if (name == "number" || name == "integer") return v.kind == Value::Int;
    if (name == "boolean") return v.kind == Value::Bool;
    if (name == "mapping") return v.kind == Value::DictKind;
    if (name == "iterable")
      return v.kind == Value::ListKind || v.kind == Value::Str || v.kind == Value::DictKind;
    if (name == "sequence") return v.kind == Value::ListKind || v.kind == Value::Str;
    if (name == "true") return v.kind == Value::Bool && v.b;
    if (name == "false") return v.kind == Value::Bool && !v.b;
    if (name == "even") return as_int(v, "'even'") % 2 == 0;
    if (name == "odd") return as_int(v, "'odd'") % 2 != 0;
    throw Error("chat template: the test 'is " + name + "' is not supported by canvas's Jinja subset");
  }

  Value filter(const Expr& e) {
    const Value v = eval(*e.args[0]);
    std::vector<Value> args;
    for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
    const std::string& f = e.name;
    if (f == "trim") return Value::str(strip(text(v), true, true));
    if (f == "upper" || f == "lower") {
      std::string s = text(v);
      for (char& c : s)
        c = char(f == "upper" ? std::toupper(static_cast<unsigned char>(c))
                              : std::tolower(static_cast<unsigned char>(c)));
      return Value::str(s);
    }
    if (f == "length" || f == "count") {
      if (v.kind == Value::ListKind) return Value::integer(int64_t(v.list->size()));
      if (v.kind == Value::DictKind) return Value::integer(int64_t(v.dict->size()));
      return Value::integer(int64_t(text(v).size()));
    }
    if (f == "default" || f == "d")
      return v.kind == Value::Undefined ? (args.empty() ? Value::str("") : args[0]) : v;
    if (f == "first" || f == "last") {
      if (v.kind != Value::ListKind || v.list->empty()) return Value();
      return f == "first" ? v.list->front() : v.list->back();
    }
    if (f == "join") {
      check(v.kind == Value::ListKind, "chat template: join needs a list");
      const std::string sep = args.empty() ? "" : text(args[0]);
      BoundedText out = bounded();
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out.add(sep);
        write_text(out, (*v.list)[k]);
      }
      charge(int64_t(v.list->size()), out.out.size());
      return Value::str(std::move(out.out));
    }
    if (f == "string") return Value::str(text(v));
    if (f == "tojson") {
      BoundedText out = bounded();
      write_json(out, v);
      charge(1, out.out.size());
      return Value::str(std::move(out.out));
    }
    if (f == "list") return v.kind == Value::ListKind ? v : Value::make_list();
    if (f == "items") return items(v);
    throw Error("chat template: the filter '| " + f + "' is not supported by canvas's Jinja subset");
  }

  Value items(const Value& v) {
    List out;
    if (v.kind == Value::DictKind)
      for (const auto& [k, val] : *v.dict) out.push_back(Value::make_list({Value::str(k), val}));
    return checked(Value::make_list(std::move(out)));
  }

  Value call(const Expr& e) {
    std::vector<Value> args;
    for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Name) {
      if (callee.name == "raise_exception")
        throw Error("the chat template refused the conversation: " + (args.empty() ? "" : excerpt_text(args[0])));
      if (callee.name == "namespace") {
        Dict d;
        for (const auto& [k, v] : e.kwargs) d.emplace_back(k, eval(*v));
        return checked(Value::make_dict(std::move(d)));
      }
      if (callee.name == "range") {
        check(!args.empty() && args.size() <= 2, "chat template: range takes 1 or 2 arguments");
        const int64_t lo = args.size() == 2 ? as_int(args[0], "range") : 0;
        const int64_t hi = as_int(args.back(), "range");
        if (hi > lo) fits_list(uint64_t(hi) - uint64_t(lo));
        charge(hi > lo ? hi - lo : 0);
        List out;
        for (int64_t k = lo; k < hi; ++k) out.push_back(Value::integer(k));
        return Value::make_list(std::move(out));
      }
      throw Error("chat template: the function '" + callee.name +
                  "' is not supported by canvas's Jinja subset");
    }
    check(callee.kind == Expr::Attr, "chat template: only functions and methods can be called");
    const Value obj = eval(*callee.args[0]);
    const std::string& m = callee.name;
    if (obj.kind == Value::Str) {
      const std::string& s = obj.s;
      const std::string chars = args.empty() ? " \t\r\n" : text(args[0]);
      if (m == "strip") return Value::str(strip(s, true, true, chars));
      if (m == "lstrip") return Value::str(strip(s, true, false, chars));
      if (m == "rstrip") return Value::str(strip(s, false, true, chars));
      if (m == "upper" || m == "lower") {
        std::string t = s;
        for (char& c : t)
          c = char(m == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
        return Value::str(t);
      }
      if (m == "title") {
        std::string t = s;
        bool start = true;
        for (char& c : t) {
          c = char(start ? std::toupper(static_cast<unsigned char>(c))
                         : std::tolower(static_cast<unsigned char>(c)));
          start = !std::isalpha(static_cast<unsigned char>(c));
        }
        return Value::str(t);
      }
      if (m == "startswith" || m == "endswith") {
        const std::string p = args.empty() ? "" : text(args[0]);
        const bool yes =
            p.size() <= s.size() && (m == "startswith" ? s.compare(0, p.size(), p) == 0
                                                       : s.compare(s.size() - p.size(), p.size(), p) == 0);
        return Value::boolean(yes);
      }
      if (m == "split") {
        List parts;
        const std::string sep = args.empty() ? " " : text(args[0]);
        check(!sep.empty(), "chat template: split with an empty separator");
        size_t a = 0;
        while (true) {
          const size_t b = s.find(sep, a);
          fits_list(parts.size() + 1);
          parts.push_back(Value::str(s.substr(a, b == std::string::npos ? std::string::npos : b - a)));
          if (b == std::string::npos) break;
          a = b + sep.size();
        }
        return Value::make_list(std::move(parts));
      }
      if (m == "replace" && args.size() == 2) {
        const std::string from = text(args[0]), to = text(args[1]);
        if (from.empty()) return obj;
        BoundedText out = bounded();
        size_t a = 0;
        while (true) {
          const size_t b = s.find(from, a);
          out.add(std::string_view(s).substr(a, b == std::string::npos ? std::string::npos : b - a));
          if (b == std::string::npos) break;
          out.add(to);
          a = b + from.size();
        }
        charge(1, out.out.size());
        return Value::str(std::move(out.out));
      }
    }
    if (obj.kind == Value::DictKind) {
      if (m == "get") {
        const Value* v = args.empty() ? nullptr : obj.find(text(args[0]));
        return v ? *v : (args.size() > 1 ? args[1] : Value::none());
      }
      if (m == "items") return items(obj);
      if (m == "keys") {
        List out;
        for (const auto& [k, v] : *obj.dict) out.push_back(Value::str(k));
        return Value::make_list(std::move(out));
      }
    }
    throw Error("chat template: the method '." + m + "()' is not supported by canvas's Jinja subset");
  }

  std::vector<std::map<std::string, Value>> scopes_;
};

}  // namespace

std::string render_chat_template(const std::string& source, const ChatTemplateInputs& inputs) {
  TemplateParser parser(split_template(source));
  std::string ended;
  const Body body = parser.parse_body({}, &ended);
  List messages;
  for (const ChatMessage& m : inputs.messages)
    messages.push_back(Value::make_dict({{"role", Value::str(m.role)}, {"content", Value::str(m.content)}}));
  std::map<std::string, Value> globals;
  globals["messages"] = Value::make_list(std::move(messages));
  globals["bos_token"] = Value::str(inputs.bos_token);
  globals["eos_token"] = Value::str(inputs.eos_token);
  globals["add_generation_prompt"] = Value::boolean(inputs.add_generation_prompt);
  Renderer renderer(std::move(globals), inputs);
  BoundedText out;
  out.limit = inputs.max_output_bytes;
  out.source = &inputs.source;
  out.reason = &inputs.max_output_reason;
  renderer.run(body, out);
  return std::move(out.out);
}

}  // namespace canvas
