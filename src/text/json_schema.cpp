// The JSON Schema subset compiler: schema -> regular languages of compact JSON -> template of fixed text
// and holes.
#include "text/json_schema.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "core/excerpt.h"
#include "io/json.h"

namespace canvas {

namespace {

using json = nlohmann::ordered_json;  // properties in the schema's order

const RegexPtr& digit() {
  static const RegexPtr r = re_set(byte_range('0', '9'));
  return r;
}
RegexPtr digits(int64_t min, int64_t max) {
  return re_repeat(digit(), min, max);
}

// Decimal strings of the same length n between a and b (a <= b), leading zeros allowed.
RegexPtr range_same_length(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  if (n == 0) return re_epsilon();
  if (a == b) return re_literal(a);
  if (n == 1) return re_set(byte_range(uint8_t(a[0]), uint8_t(b[0])));
  if (a[0] == b[0]) return re_concat({re_byte(uint8_t(a[0])), range_same_length(a.substr(1), b.substr(1))});
  std::vector<RegexPtr> alts;
  alts.push_back(
      re_concat({re_byte(uint8_t(a[0])), range_same_length(a.substr(1), std::string(n - 1, '9'))}));
  if (b[0] - a[0] > 1)
    alts.push_back(re_concat(
        {re_set(byte_range(uint8_t(a[0] + 1), uint8_t(b[0] - 1))), digits(int64_t(n - 1), int64_t(n - 1))}));
  alts.push_back(
      re_concat({re_byte(uint8_t(b[0])), range_same_length(std::string(n - 1, '0'), b.substr(1))}));
  return re_alt(std::move(alts));
}

int64_t pow10(int64_t k) {
  int64_t r = 1;
  while (k-- > 0) r *= 10;
  return r;
}

// Canonical decimal integers (no leading zeros) in [lo, hi]; hi < 0: unbounded.
RegexPtr uint_range(int64_t lo, int64_t hi) {
  if (hi >= 0 && hi < lo) return re_nothing();
  const int64_t la = int64_t(std::to_string(lo).size());
  std::vector<RegexPtr> alts;
  if (hi < 0) {
    alts.push_back(range_same_length(std::to_string(lo), std::string(size_t(la), '9')));
    alts.push_back(re_concat({re_set(byte_range('1', '9')), digits(la, -1)}));
    return re_alt(std::move(alts));
  }
  const int64_t lb = int64_t(std::to_string(hi).size());
  for (int64_t len = la; len <= lb; ++len) {
    const int64_t a = len == la ? lo : pow10(len - 1);
    const int64_t b = len == lb ? hi : pow10(len) - 1;
    alts.push_back(range_same_length(std::to_string(a), std::to_string(b)));
  }
  return re_alt(std::move(alts));
}

struct Bound {
  bool present = false;
  int64_t value = 0;
  bool exclusive = false;
};

// Unsigned decimals m with lo (<) <= m (<) <= hi; hi.present false: unbounded. Numbers may carry a fraction.
RegexPtr magnitude(Bound lo, Bound hi, bool fraction) {
  if (!fraction) {
    const int64_t a = lo.value + (lo.exclusive ? 1 : 0);
    const int64_t b = hi.present ? hi.value - (hi.exclusive ? 1 : 0) : -1;
    if (hi.present && b < a) return re_nothing();
    return uint_range(a, b);
  }
  const RegexPtr frac = re_optional(re_concat({re_byte('.'), digits(1, -1)}));
  const RegexPtr zero_frac = re_optional(re_concat({re_byte('.'), re_repeat(re_byte('0'), 1, -1)}));
  const RegexPtr nonzero_frac =
      re_concat({re_byte('.'), digits(0, -1), re_set(byte_range('1', '9')), digits(0, -1)});
  const std::string lo_text = std::to_string(lo.value);
  if (hi.present && hi.value == lo.value)
    return (!lo.exclusive && !hi.exclusive) ? re_concat({re_literal(lo_text), zero_frac}) : re_nothing();
  if (hi.present && hi.value < lo.value) return re_nothing();
  std::vector<RegexPtr> alts;
  alts.push_back(re_concat({re_literal(lo_text), lo.exclusive ? nonzero_frac : frac}));
  if (!hi.present)
    alts.push_back(re_concat({uint_range(lo.value + 1, -1), frac}));
  else if (hi.value - 1 >= lo.value + 1)
    alts.push_back(re_concat({uint_range(lo.value + 1, hi.value - 1), frac}));
  if (hi.present && !hi.exclusive)
    alts.push_back(re_concat({re_literal(std::to_string(hi.value)), zero_frac}));
  return re_alt(std::move(alts));
}

// Integers or decimals (no exponent) between the bounds.
RegexPtr signed_range(Bound lo, Bound hi, bool fraction) {
  std::vector<RegexPtr> alts;
  if (!hi.present || hi.value > 0 || (hi.value == 0 && !hi.exclusive)) {
    Bound m_lo;
    m_lo.present = true;
    if (lo.present && lo.value >= 0) m_lo = lo;
    alts.push_back(magnitude(m_lo, hi, fraction));
  }
  if (!lo.present || lo.value < 0) {
    Bound m_hi;
    if (lo.present) m_hi = {true, -lo.value, lo.exclusive};
    Bound m_lo{true, 0, false};
    if (hi.present && hi.value <= 0) m_lo = {true, -hi.value, hi.exclusive};
    if (!fraction && m_lo.value == 0 && !m_lo.exclusive) m_lo.value = 1;  // 0 is the non-negative part's
    alts.push_back(re_concat({re_byte('-'), magnitude(m_lo, m_hi, fraction)}));
  }
  return re_alt(std::move(alts));
}

class Compiler {
 public:
  explicit Compiler(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    // Property names may be long: the path is shown cut short, so the message stays one readable line.
    constexpr size_t kShown = 160;
    const std::string where = path.size() > kShown ? path.substr(0, kShown) + "..." : path;
    throw Error(origin_ + ": " + what + " at " + (where.empty() ? "the root" : where));
  }

  // The size limits (json_schema.h), checked over the whole schema before anything is compiled; the
  // compiling walks (value, emit) follow the same keys, so their recursion is bounded too.
  void check_size(const json& s, const std::string& path, int depth, int64_t& properties) const {
    if (depth > kMaxSchemaNesting)
      fail(path, "schemas nested more than " + std::to_string(kMaxSchemaNesting) + " deep (kMaxSchemaNesting)");
    if (!s.is_object()) return;  // what is wrong with it is reported by the compiling walk
    if (s.contains("properties") && s["properties"].is_object()) {
      const json& props = s["properties"];
      properties += int64_t(props.size());
      if (properties > kMaxSchemaProperties)
        fail(path, "more than " + std::to_string(kMaxSchemaProperties) +
                       " properties in the schema (kMaxSchemaProperties): too large to compile");
      for (auto it = props.begin(); it != props.end(); ++it)
        check_size(it.value(), path + "/properties/" + it.key(), depth + 1, properties);
    }
    if (s.contains("items")) check_size(s["items"], path + "/items", depth + 1, properties);
    if (s.contains("anyOf") && s["anyOf"].is_array())
      for (size_t i = 0; i < s["anyOf"].size(); ++i)
        check_size(s["anyOf"][i], path + "/anyOf/" + std::to_string(i), depth + 1, properties);
  }

  void check_keywords(const json& s, const std::string& path) const {
    static const std::set<std::string> known = {
        "type",    "properties", "required",         "additionalProperties",
        "items",   "minItems",   "maxItems",         "enum",
        "const",   "pattern",    "maxLength",        "minLength",
        "minimum", "maximum",    "exclusiveMinimum", "exclusiveMaximum",
        "anyOf",   "title",      "description",      "$schema",
        "$id",     "default",    "examples",         "$comment"};
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!known.count(it.key()))
        fail(path,
             "unsupported JSON Schema feature '" + it.key() +
                 "' (supported: type, properties, required, items, minItems, maxItems, enum, const, pattern, "
                 "minLength, maxLength, minimum, maximum, exclusiveMinimum, exclusiveMaximum, anyOf)");
  }

  // The type a schema describes: its "type", else inferred from its keywords ("" when any value).
  std::string type_of(const json& s, const std::string& path) const {
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        const std::string name = t.get<std::string>();
        static const std::set<std::string> types = {"object", "array",   "string", "integer",
                                                    "number", "boolean", "null"};
        if (!types.count(name)) fail(path, "unknown type '" + name + "'");
        return name;
      }
      if (t.is_array()) return "list";
      fail(path, "'type' must be a string or an array of strings");
    }
    if (s.contains("properties") || s.contains("required")) return "object";
    if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return "array";
    if (s.contains("pattern") || s.contains("maxLength") || s.contains("minLength")) return "string";
    if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
        s.contains("exclusiveMaximum"))
      return "number";
    return "";
  }

  int64_t count(const json& s, const char* key, int64_t fallback, const std::string& path) const {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 4096)
      fail(path, std::string("'") + key + "' must be an integer in [0, 4096]");
    return v.get<int64_t>();
  }

  Bound bound(const json& s, const char* inclusive, const char* exclusive, bool lower, bool integer,
              const std::string& path) const {
    Bound b;
    auto read = [&](const char* key, bool excl) {
      if (!s.contains(key)) return;
      const json& v = s[key];
      if (v.is_boolean())
        fail(path, std::string("boolean '") + key + "' (draft 4) is unsupported: give the bound as a number");
      if (!v.is_number()) fail(path, std::string("'") + key + "' must be a number");
      const double x = v.get<double>();
      if (!(std::fabs(x) < 1e15)) fail(path, std::string("'") + key + "' is out of range (|x| < 1e15)");
      Bound nb{true, 0, excl};
      if (x != std::floor(x)) {
        if (!integer) fail(path, std::string("a non-integer '") + key + "' on a number is unsupported");
        nb = {true, int64_t(lower ? std::ceil(x) : std::floor(x)), false};  // integers strictly past x
      } else {
        nb.value = int64_t(x);
      }
      const bool tighter =
          !b.present || (lower ? (nb.value > b.value || (nb.value == b.value && nb.exclusive))
                               : (nb.value < b.value || (nb.value == b.value && nb.exclusive)));
      if (tighter) b = nb;
    };
    read(inclusive, false);
    read(exclusive, true);
    return b;
  }

  RegexPtr string_content(const json& s, const std::string& path) const {
    const int64_t min_len = count(s, "minLength", 0, path);
    const int64_t max_len = count(s, "maxLength", -1, path);
    if (max_len >= 0 && max_len < min_len) fail(path, "maxLength < minLength");
    const RegexPtr chars = json_string_chars(printable_ascii());
    RegexPtr length = re_repeat(chars, min_len, max_len);
    if (!s.contains("pattern")) return length;
    if (!s["pattern"].is_string()) fail(path, "'pattern' must be a string");
    const std::string& text = s["pattern"].get_ref<const std::string&>();
    const RegexPtr parsed = parse_pattern(text, origin_ + " at " + (path.empty() ? "the root" : path));
    // Compiled here, alone, so that a pattern past the compile bounds is named in the error.
    std::shared_ptr<const ByteDfa> pattern;
    try {
      pattern = std::make_shared<const ByteDfa>(ByteDfa::compile(parsed));
    } catch (const Error& e) {
      fail(path, "pattern " + quoted_excerpt(text) + ": " + e.what());
    }
    if (min_len == 0 && max_len < 0) return re_automaton(pattern);
    auto both = std::make_shared<const ByteDfa>(ByteDfa::intersect(*pattern, ByteDfa::compile(length)));
    if (both->empty()) fail(path, "no string matches both the pattern and the length bounds");
    return re_automaton(both);
  }

  RegexPtr enum_values(const json& s, const std::string& path) const {
    std::vector<RegexPtr> alts;
    if (s.contains("const")) alts.push_back(re_literal(s["const"].dump()));
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail(path, "'enum' must be a non-empty array");
      for (const json& v : s["enum"]) alts.push_back(re_literal(v.dump()));
    }
    return re_alt(std::move(alts));
  }

  static std::string key_text(const std::string& key) { return json(key).dump() + ":"; }

  // The schema's "properties" (an empty object when absent).
  static const json& properties_of(const json& s) {
    static const json none = json::object();
    return s.contains("properties") ? s["properties"] : none;
  }

  // Required property names in properties order; checks that each is listed.
  std::vector<std::string> required_of(const json& s, const std::string& path) const {
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(path, "'required' must be an array");
      for (const json& r : s["required"]) {
        if (!r.is_string()) fail(path, "'required' must hold strings");
        required.insert(r.get<std::string>());
      }
    }
    const json& props = properties_of(s);
    if (!props.is_object()) fail(path, "'properties' must be an object");
    for (const std::string& r : required)
      if (!props.contains(r))
        fail(path,
             "required property '" + r + "' is not in 'properties' (its schema is needed to generate it)");
    std::vector<std::string> out;
    for (auto it = props.begin(); it != props.end(); ++it)
      if (required.count(it.key())) out.push_back(it.key());
    return out;
  }

  RegexPtr optional_list(const std::vector<RegexPtr>& items) const {
    // Empty, or item i followed by any subset of the later items in order, comma-separated.
    std::vector<RegexPtr> alts{re_epsilon()};
    for (size_t i = 0; i < items.size(); ++i) {
      std::vector<RegexPtr> parts{items[i]};
      for (size_t j = i + 1; j < items.size(); ++j)
        parts.push_back(re_optional(re_concat({re_byte(','), items[j]})));
      alts.push_back(re_concat(std::move(parts)));
    }
    return re_alt(std::move(alts));
  }

  RegexPtr any_value(int depth) const {
    const RegexPtr str =
        re_concat({re_byte('"'), re_repeat(json_string_chars(printable_ascii()), 0, -1), re_byte('"')});
    std::vector<RegexPtr> alts{str, signed_range({}, {}, true), re_literal("true"), re_literal("false"),
                               re_literal("null")};
    if (depth > 0) {
      const RegexPtr v = any_value(depth - 1);
      alts.push_back(re_concat({re_byte('['),
                                re_optional(re_concat({v, re_repeat(re_concat({re_byte(','), v}), 0, -1)})),
                                re_byte(']')}));
      const RegexPtr member = re_concat({str, re_byte(':'), v});
      alts.push_back(
          re_concat({re_byte('{'),
                     re_optional(re_concat({member, re_repeat(re_concat({re_byte(','), member}), 0, -1)})),
                     re_byte('}')}));
    }
    return re_alt(std::move(alts));
  }

  // The inside of an object with any members: string keys, shallow values.
  RegexPtr any_members() const {
    const RegexPtr key =
        re_concat({re_byte('"'), re_repeat(json_string_chars(printable_ascii()), 0, -1), re_byte('"')});
    const RegexPtr member = re_concat({key, re_byte(':'), any_value(1)});
    return re_optional(re_concat({member, re_repeat(re_concat({re_byte(','), member}), 0, -1)}));
  }

  RegexPtr value(const json& s, const std::string& path) {
    if (s.is_boolean()) fail(path, "boolean schemas (true / false) are unsupported");
    if (!s.is_object()) fail(path, "a schema must be an object");
    check_keywords(s, path);
    if (s.contains("enum") || s.contains("const")) return enum_values(s, path);
    if (s.contains("anyOf")) {
      const json& any = s["anyOf"];
      if (!any.is_array() || any.empty()) fail(path, "'anyOf' must be a non-empty array");
      if (s.contains("type") || s.contains("properties") || s.contains("items"))
        fail(path, "'anyOf' beside type / properties / items is unsupported: put them inside each branch");
      std::vector<RegexPtr> alts;
      for (size_t i = 0; i < any.size(); ++i)
        alts.push_back(value(any[i], path + "/anyOf/" + std::to_string(i)));
      return re_alt(std::move(alts));
    }
    const std::string type = type_of(s, path);
    if (type == "list") {
      std::vector<RegexPtr> alts;
      for (const json& t : s["type"]) {
        if (!t.is_string()) fail(path, "'type' must be a string or an array of strings");
        json one = s;
        one["type"] = t;
        alts.push_back(value(one, path));
      }
      return re_alt(std::move(alts));
    }
    if (type == "") return any_value(1);
    if (type == "null") return re_literal("null");
    if (type == "boolean") return re_alt({re_literal("true"), re_literal("false")});
    if (type == "integer" || type == "number") {
      const bool integer = type == "integer";
      return signed_range(bound(s, "minimum", "exclusiveMinimum", true, integer, path),
                          bound(s, "maximum", "exclusiveMaximum", false, integer, path), !integer);
    }
    if (type == "string") return re_concat({re_byte('"'), string_content(s, path), re_byte('"')});
    if (type == "array") {
      const int64_t lo = count(s, "minItems", 0, path), hi = count(s, "maxItems", -1, path);
      if (hi >= 0 && hi < lo) fail(path, "maxItems < minItems");
      if (hi == 0) return re_literal("[]");
      const RegexPtr item = s.contains("items") ? value(s["items"], path + "/items") : any_value(1);
      const RegexPtr more =
          re_repeat(re_concat({re_byte(','), item}), std::max<int64_t>(lo - 1, 0), hi < 0 ? -1 : hi - 1);
      const RegexPtr list = re_concat({item, more});
      return re_concat({re_byte('['), lo == 0 ? re_optional(list) : list, re_byte(']')});
    }
    // object
    const std::vector<std::string> required = required_of(s, path);
    const std::set<std::string> is_required(required.begin(), required.end());
    const json& props = properties_of(s);
    std::vector<RegexPtr> parts{re_byte('{')};
    for (size_t i = 0; i < required.size(); ++i) {
      if (i) parts.push_back(re_byte(','));
      parts.push_back(re_literal(key_text(required[i])));
      parts.push_back(value(props[required[i]], path + "/properties/" + required[i]));
    }
    std::vector<RegexPtr> optional;
    for (auto it = props.begin(); it != props.end(); ++it)
      if (!is_required.count(it.key()))
        optional.push_back(
            re_concat({re_literal(key_text(it.key())), value(it.value(), path + "/properties/" + it.key())}));
    if (!required.empty()) {
      for (const RegexPtr& o : optional) parts.push_back(re_optional(re_concat({re_byte(','), o})));
    } else if (!optional.empty()) {
      parts.push_back(optional_list(optional));
    }
    parts.push_back(re_byte('}'));
    return re_concat(std::move(parts));
  }

  // Segments: what can be fixed is fixed text, the rest holes.
  void emit(const json& s, const std::string& path, JsonTemplate& out) {
    if (s.is_object()) check_keywords(s, path);
    const std::string type =
        s.is_object() && !s.contains("enum") && !s.contains("const") && !s.contains("anyOf")
            ? type_of(s, path)
            : "";
    if (type == "object") {
      const std::vector<std::string> required = required_of(s, path);
      const std::set<std::string> is_required(required.begin(), required.end());
      const json& props = properties_of(s);
      fixed("{", out);
      for (size_t i = 0; i < required.size(); ++i) {
        fixed((i ? "," : "") + key_text(required[i]), out);
        emit(props[required[i]], path + "/properties/" + required[i], out);
      }
      std::vector<RegexPtr> optional;
      for (auto it = props.begin(); it != props.end(); ++it)
        if (!is_required.count(it.key()))
          optional.push_back(re_concat(
              {re_literal(key_text(it.key())), value(it.value(), path + "/properties/" + it.key())}));
      if (!required.empty()) {
        for (const RegexPtr& o : optional) hole(re_optional(re_concat({re_byte(','), o})), path, out);
      } else if (!optional.empty()) {
        hole(optional_list(optional), path, out);
      }
      fixed("}", out);
      return;
    }
    if (type == "array") {
      const int64_t lo = count(s, "minItems", 0, path), hi = count(s, "maxItems", -1, path);
      if (lo == hi && s.contains("items")) {  // a fixed count: brackets and commas are fixed text
        fixed("[", out);
        for (int64_t i = 0; i < lo; ++i) {
          if (i) fixed(",", out);
          emit(s["items"], path + "/items/" + std::to_string(i), out);
        }
        fixed("]", out);
        return;
      }
    }
    if (type == "string") {
      fixed("\"", out);
      hole(re_concat({string_content(s, path), re_byte('"')}), path, out);
      return;
    }
    if (type == "null") {
      fixed("null", out);
      return;
    }
    hole(value(s, path), path, out);
  }

  static void fixed(const std::string& text, JsonTemplate& out) {
    if (!out.segments.empty() && !out.segments.back().is_hole()) {
      out.segments.back().fixed += text;
      return;
    }
    JsonSegment seg;
    seg.fixed = text;
    out.segments.push_back(std::move(seg));
  }

  void hole(const RegexPtr& language, const std::string& path, JsonTemplate& out) const {
    auto dfa = std::make_shared<const ByteDfa>(ByteDfa::compile(language));
    if (dfa->empty()) fail(path, "no value satisfies this schema");
    if (dfa->max_length() == 0) {  // only the empty string: nothing to fill
      return;
    }
    if (dfa->min_length() == dfa->max_length()) {
      // One length; a single string is fixed text.
      std::string only;
      int32_t state = dfa->start();
      bool unique = true;
      while (!dfa->accepting(state) || only.size() < size_t(dfa->max_length())) {
        int found = -1;
        for (int b = 0; b < 256; ++b)
          if (dfa->next(state, uint8_t(b)) >= 0) {
            if (found >= 0) unique = false;
            found = b;
          }
        if (!unique || found < 0) break;
        only += char(found);
        state = dfa->next(state, uint8_t(found));
      }
      if (unique && dfa->matches(only)) {
        fixed(only, out);
        return;
      }
    }
    JsonSegment seg;
    seg.language = dfa;
    seg.min_bytes = dfa->min_length();
    seg.max_bytes = dfa->max_length();
    out.segments.push_back(std::move(seg));
  }

 private:
  std::string origin_;
};

}  // namespace

RegexPtr JsonTemplate::document() const {
  std::vector<RegexPtr> parts;
  for (const JsonSegment& s : segments)
    parts.push_back(s.is_hole() ? re_automaton(s.language) : re_literal(s.fixed));
  return re_concat(std::move(parts));
}

int64_t JsonTemplate::holes() const {
  return std::count_if(segments.begin(), segments.end(), [](const JsonSegment& s) { return s.is_hole(); });
}

JsonTemplate compile_json_schema(const nlohmann::ordered_json& schema, const std::string& origin) {
  Compiler compiler(origin);
  int64_t properties = 0;
  compiler.check_size(schema, "", 0, properties);
  JsonTemplate t;
  compiler.emit(schema, "", t);
  return t;
}

JsonTemplate json_object_template() {
  Compiler compiler("json_object");
  JsonTemplate t;
  Compiler::fixed("{", t);
  compiler.hole(compiler.any_members(), "", t);
  Compiler::fixed("}", t);
  return t;
}

}  // namespace canvas

namespace canvas {

JsonTemplate compile_json_schema(const nlohmann::json& schema, const std::string& origin) {
  return compile_json_schema(nlohmann::ordered_json(schema), origin);
}

JsonTemplate compile_json_schema_text(std::string_view text, const std::string& origin) {
  return compile_json_schema(parse_json_ordered(text, origin), origin);
}

}  // namespace canvas
