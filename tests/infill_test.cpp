// Infilling and schema-constrained output: byte automata, token masks checked exhaustively against brute
// force on small vocabularies, the JSON Schema compiler (outputs validated by python3-jsonschema), and
// filling with real models (masked, uniform-state, AR) through the API and the CLI.
#include "decode/infill.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "io/json.h"
#include "model/model.h"
#include "test_util.h"
#include "train/data.h"
#include "train/train_model.h"
#include "train_test_util.h"

namespace canvas {
namespace {

using nlohmann::json;

// ---- vocabularies ---------------------------------------------------------------------------------

// 256 byte tokens, then end-of-text and [MASK] (no piece), as the shipped byte-level models.
TextCodec byte_codec() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, char(b)));
  pieces.push_back("");
  pieces.push_back("");
  TextCodec codec;
  codec.vocabulary = std::make_shared<const TokenVocabulary>(pieces);
  codec.encode = [](const std::string& text) {
    std::vector<int32_t> ids;
    for (unsigned char ch : text) ids.push_back(ch);
    return ids;
  };
  return codec;
}
constexpr int32_t kByteMask = 257;

// A subword vocabulary: printable ASCII plus multi-byte tokens that cross value boundaries, one special.
TextCodec subword_codec() {
  std::vector<std::string> pieces;
  for (int b = 0x20; b < 0x7f; ++b) pieces.push_back(std::string(1, char(b)));
  for (const char* merged : {"\":", "\",\"", "true", "false", "null", "ab", "12", "00", " \"", "\"}", "na",
                             "me", "\":\"", "1,", "],", "{\"", "  ", "a\"", "e\","})
    pieces.push_back(merged);
  pieces.push_back("");  // [MASK]
  TextCodec codec;
  auto vocab = std::make_shared<const TokenVocabulary>(pieces);
  codec.vocabulary = vocab;
  codec.encode = [vocab](const std::string& text) {  // greedy longest match
    std::vector<int32_t> ids;
    size_t at = 0;
    while (at < text.size()) {
      int32_t best = -1;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        const std::string& p = vocab->piece(id);
        if (!p.empty() && text.compare(at, p.size(), p) == 0 &&
            (best < 0 || p.size() > vocab->piece(best).size()))
          best = id;
      }
      if (best < 0) throw Error("subword codec: cannot encode");
      ids.push_back(best);
      at += vocab->piece(best).size();
    }
    return ids;
  };
  return codec;
}

std::shared_ptr<const TokenAutomaton> token_automaton(const RegexPtr& r, const TextCodec& codec) {
  return std::make_shared<const TokenAutomaton>(std::make_shared<const ByteDfa>(ByteDfa::compile(r)),
                                                codec.vocabulary);
}

// ---- an independent validator ---------------------------------------------------------------------

// Validates documents against schemas with Debian's python3-jsonschema (one interpreter for all pairs);
// returns the failures (empty when every document parses and validates).
using SchemaDoc = std::pair<std::string, std::string>;  // schema text, document
std::string python_validate(const std::vector<SchemaDoc>& pairs) {
  // Its own directory: a test's TempDir is named after the test and may be in use by the caller.
  static int calls = 0;
  const std::filesystem::path base =
      std::filesystem::temp_directory_path() /
      ("canvas_validate_" + std::to_string(::getpid()) + "_" + std::to_string(calls++));
  std::filesystem::create_directories(base);
  struct Remove {
    std::filesystem::path p;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  } remove{base};
  struct {
    std::filesystem::path base;
    std::string path(const std::string& name) const { return (base / name).string(); }
  } dir{base};
  {
    std::ofstream out(dir.path("pairs.jsonl"));
    for (const auto& [schema, doc] : pairs) out << json{{"schema", schema}, {"doc", doc}}.dump() << "\n";
  }
  std::ofstream(dir.path("check.py")) << R"(import json, sys
import jsonschema
bad = 0
n = 0
for line in open(sys.argv[1]):
    n += 1
    pair = json.loads(line)
    schema = json.loads(pair["schema"])
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.validate(json.loads(pair["doc"]), schema, cls=jsonschema.Draft202012Validator)
    except Exception as e:
        bad += 1
        print("%r under %s: %s" % (pair["doc"], pair["schema"], str(e).splitlines()[0]))
print("checked %d, invalid %d" % (n, bad))
)";
  const std::string cmd =
      "/usr/bin/python3 " + dir.path("check.py") + " " + dir.path("pairs.jsonl") + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, got);
  const int status = pclose(pipe);
  if (status != 0 || out.find("invalid 0\n") == std::string::npos)
    return out.empty() ? "python3 failed" : out;
  return "";
}
std::string python_validate(const std::string& schema, const std::vector<std::string>& docs) {
  std::vector<SchemaDoc> pairs;
  for (const std::string& d : docs) pairs.push_back({schema, d});
  return python_validate(pairs);
}

// Schemas covering the supported subset (small enough for the shipped models' 128-token context).
const std::vector<std::string>& subset_schemas() {
  static const std::vector<std::string> schemas = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"]})",
      R"({"type":"object","properties":{"ok":{"type":"boolean"},"note":{"type":"null"}},"required":["ok"]})",
      R"({"type":"object","properties":{"color":{"enum":["red","green","blue"]},"n":{"type":"integer","exclusiveMinimum":-5,"exclusiveMaximum":5}},"required":["color","n"]})",
      R"({"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2}-[0-9]{2,3}$"}},"required":["code"]})",
      R"({"type":"object","properties":{"x":{"type":"number","minimum":-2,"maximum":3},"y":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1}},"required":["x","y"]})",
      R"({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string","maxLength":3},"minItems":1,"maxItems":3}},"required":["tags"]})",
      R"({"type":"object","properties":{"p":{"type":"object","properties":{"q":{"type":"integer","minimum":10,"maximum":99},"r":{"type":"boolean"}},"required":["q","r"]}},"required":["p"]})",
      R"({"type":"object","properties":{"v":{"anyOf":[{"type":"integer","minimum":0,"maximum":9},{"type":"string","maxLength":2},{"type":"null"}]}},"required":["v"]})",
      R"({"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":3},"b":{"type":"boolean"},"c":{"type":"string","maxLength":2}}})",
      R"({"type":"array","items":{"type":"integer","minimum":-3,"maximum":3},"minItems":2,"maxItems":2})",
      R"({"type":"object","properties":{"s":{"type":"string","minLength":2,"maxLength":4,"pattern":"^[a-c]+$"},"t":{"type":["integer","null"],"maximum":7,"minimum":1}},"required":["s","t"]})",
      R"({"type":"string","pattern":"ab","maxLength":5})",
      R"({"type":"object","properties":{"k":{"const":"fixed"},"e":{"enum":[1,"two",null,true]}},"required":["k","e"]})",
      R"({"type":"object","properties":{"q":{"type":"string","pattern":"^\"?[\\\\a]{1,3}$"}},"required":["q"]})",
      R"({"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer","minimum":1,"maximum":9}},"required":["id"]},"maxItems":2}},"required":["items"]})",
  };
  return schemas;
}

// ---- byte automata ---------------------------------------------------------------------------------

TEST(ByteAutomaton, LiteralsRepeatsAndIntersection) {
  const ByteDfa abc = ByteDfa::compile(re_concat({re_literal("ab"), re_repeat(re_byte('c'), 1, 3)}));
  EXPECT_TRUE(abc.matches("abc"));
  EXPECT_TRUE(abc.matches("abccc"));
  EXPECT_FALSE(abc.matches("ab"));
  EXPECT_FALSE(abc.matches("abcccc"));
  EXPECT_EQ(abc.min_length(), 3);
  EXPECT_EQ(abc.max_length(), 5);
  const ByteDfa star = ByteDfa::compile(re_repeat(re_set(byte_range('a', 'c')), 0, -1));
  EXPECT_EQ(star.max_length(), -1);
  const ByteDfa evens = ByteDfa::compile(re_repeat(re_literal("ab"), 0, -1));
  const ByteDfa both = ByteDfa::intersect(star, evens);
  EXPECT_TRUE(both.matches("abab"));
  EXPECT_FALSE(both.matches("aba"));
  EXPECT_TRUE(ByteDfa::compile(re_nothing()).empty());
  EXPECT_THROW(ByteDfa::compile(re_repeat(re_repeat(re_set(~ByteSet()), 0, 40), 0, 40), 50), Error);
}

TEST(ByteAutomaton, PatternSubset) {
  struct Case {
    const char* pattern;
    std::vector<std::string> yes, no;
  };
  // Strings are JSON string bytes (escaped), as the constraint sees them.
  const std::vector<Case> cases = {
      {"^[A-Z]{2}-\\d+$", {"AB-1", "ZZ-0123"}, {"AB-", "ab-1", "ABC-1", "AB-1x"}},
      {"b", {"b", "abc", "xxb"}, {"", "a"}},
      {"^(cat|dog)s?$", {"cat", "dogs"}, {"cats!", "do"}},
      {"^[^a-c]*$", {"", "xyz", "\\\"d"}, {"a", "xa"}},
      {"^a.c$", {"abc", "a c", "a\\\"c", "a\\\\c"}, {"ac", "a\"c"}},
      {"^\\w\\s\\W$", {"a !", "_ ."}, {"a  a", "!  !"}},
      {"^x{2,}?y*$", {"xx", "xxxyy"}, {"x", "y"}},
      {"^(?:ab){1,2}$", {"ab", "abab"}, {"", "aba"}},
  };
  for (const Case& c : cases) {
    const ByteDfa d = ByteDfa::compile(parse_pattern(c.pattern, "test"));
    for (const std::string& s : c.yes) EXPECT_TRUE(d.matches(s)) << c.pattern << " should match " << s;
    for (const std::string& s : c.no) EXPECT_FALSE(d.matches(s)) << c.pattern << " should not match " << s;
  }
  for (const char* bad : {"a(?=b)", "(a)\\1", "\\bword", "a)", "[a-", "é", "a{3,1}"}) {
    try {
      parse_pattern(bad, "schema.json");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("schema.json"), std::string::npos) << e.what();
    }
  }
}

// The message of the Error `fn` throws ("" when it throws none).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Patterns nested past kMaxPatternNesting (issue 33: 20,000 nested groups crashed canvas with a stack
// overflow, in the parser or in the automaton build) are a one-line Error naming the limit and quoting the
// pattern cut short; at 10x the limit and at the sizes that crashed. Stacked quantifiers (40,000 '*',
// 100,000 '+', 50,000 '{1}': a quantifier of a quantifier) are ECMAScript syntax errors, refused at the
// second quantifier, which also keeps a chain of counts (a{11}{9}{11}...) from multiplying into an automaton
// too slow to build. Just under the limit, quantified groups compile.
TEST(ByteAutomaton, DeepPatternsAreOneLineErrors) {
  const int limit = kMaxPatternNesting;
  auto nest = [](size_t n) { return std::string(n, '(') + "a" + std::string(n, ')'); };
  auto stack = [](const std::string& q, size_t n) {
    std::string p = "a";
    for (size_t i = 0; i < n; ++i) p += q;
    return p;
  };
  auto one_line = [](const std::string& error, const std::string& what) {
    EXPECT_NE(error.find("schema.json: pattern '"), std::string::npos) << what << ": " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << what;
    EXPECT_LT(error.size(), 400u) << what << ": " << error;
  };
  for (size_t n : {size_t(10 * limit), size_t(20000), size_t(40000), size_t(100000)}) {
    const std::string deep = nest(n);
    const std::string error = error_of([&] { ByteDfa::compile(parse_pattern(deep, "schema.json")); });
    one_line(error, std::to_string(n) + " groups");
    EXPECT_NE(error.find("nested more than " + std::to_string(limit) + " deep (kMaxPatternNesting)"),
              std::string::npos)
        << error;
    for (const std::string& pattern : {stack("*", n), stack("+", n), stack("{1}", n), stack("?", n)}) {
      const std::string what = pattern.substr(0, 8) + "... (" + std::to_string(pattern.size()) + " bytes)";
      const std::string stacked = error_of([&] { ByteDfa::compile(parse_pattern(pattern, "schema.json")); });
      one_line(stacked, what);
      EXPECT_NE(stacked.find("nothing to repeat"), std::string::npos) << what << ": " << stacked;
    }
  }
  for (const char* chained : {"a{2}{3}", "a**", "a+*", "(a)*+", "a{1}{11}{9}", "a???"})
    EXPECT_NE(error_of([&] { parse_pattern(chained, "test"); }).find("nothing to repeat"), std::string::npos)
        << chained;
  for (const char* lazy : {"^a*?$", "^a+?$", "^a??$", "^a{1,3}?$", "^(a*)*$", "^(a+)?$"})
    EXPECT_TRUE(ByteDfa::compile(parse_pattern(lazy, "test")).matches("a")) << lazy;
  // At the limit: groups, and quantified groups (a group and its quantifier are two levels).
  auto quantified_groups = [](size_t n) { return std::string(n, '(') + "a" + [&] {
    std::string close;
    for (size_t i = 0; i < n; ++i) close += ")*";
    return close;
  }(); };
  for (const std::string& ok : {nest(limit), quantified_groups(size_t(limit / 2))}) {
    const ByteDfa d = ByteDfa::compile(parse_pattern("^" + ok + "$", "test"));
    EXPECT_TRUE(d.matches("a")) << ok;
  }
  for (const std::string& bad : {nest(limit + 1), quantified_groups(size_t(limit / 2 + 1))})
    EXPECT_NE(error_of([&] { parse_pattern(bad, "test"); }).find("kMaxPatternNesting"), std::string::npos) << bad;
}

// Through the schema compiler: a deep pattern and schemas nested past kMaxSchemaNesting are one-line
// errors naming their limit, also for a document built in memory (not limited by the JSON reader).
TEST(JsonSchema, DeepPatternsAndSchemasAreOneLineErrors) {
  const json deep_pattern = {{"type", "string"}, {"pattern", std::string(20000, '(') + "a" + std::string(20000, ')')}};
  const std::string error = error_of([&] { compile_json_schema(deep_pattern, "s.json"); });
  EXPECT_NE(error.find("s.json at the root: pattern '(((("), std::string::npos) << error;
  EXPECT_NE(error.find("kMaxPatternNesting"), std::string::npos) << error;
  EXPECT_LT(error.size(), 400u) << error;
  for (const char* key : {"items", "properties", "anyOf"}) {
    json schema = {{"type", "integer"}};
    for (int i = 0; i < 10 * kMaxSchemaNesting; ++i) {
      if (std::string(key) == "items") schema = {{"type", "array"}, {"items", schema}};
      if (std::string(key) == "properties") schema = {{"type", "object"}, {"properties", {{"p", schema}}}};
      if (std::string(key) == "anyOf") schema = {{"anyOf", json::array({schema})}};
    }
    const std::string e = error_of([&] { compile_json_schema(schema, "s.json"); });
    EXPECT_NE(e.find("schemas nested more than " + std::to_string(kMaxSchemaNesting) + " deep (kMaxSchemaNesting)"),
              std::string::npos)
        << key << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << key;
    EXPECT_LT(e.size(), 400u) << key << ": " << e;
  }
  json ok = {{"type", "integer"}};
  for (int i = 0; i < kMaxSchemaNesting; ++i) ok = {{"type", "array"}, {"items", ok}, {"maxItems", 1}};
  EXPECT_NO_THROW(compile_json_schema(ok, "s.json"));
}

// Issue 61 B: `^(?:[ab]|... K copies)*a(?:[ab]|... K copies){12}$` has few automaton states but subsets of
// thousands of states each: K = 2000 (a 20 KB body) took 58 s on serve's event loop, K = 5000 40 s and
// 3.1 GB. The compile is bounded in steps and bytes: each ends within about a second with a one-line error
// naming the pattern and the bound, and takes well under kMaxCompileBytes more memory; a small K compiles.
std::string many_alternatives(int k, int count) { return test::many_alternatives_pattern(k, count); }

TEST(JsonSchema, PatternsOfManyAlternativesAreBoundedInWorkAndMemory) {
  const int64_t rss_before = test::peak_rss_kb();
  for (const int k : {2000, 5000}) {
    const json schema = {{"type", "string"}, {"pattern", many_alternatives(k, 12)}};
    const double start = test::thread_cpu_seconds();
    const std::string e = error_of([&] { compile_json_schema(schema, "response_format"); });
    const double seconds = test::thread_cpu_seconds() - start;  // the compile's own work, not the machine's load
    EXPECT_LT(seconds, 1.5 * test::kTimeScale) << "K = " << k << ": " << e;
    EXPECT_NE(e.find("response_format: pattern '^(?:[ab]|[ab]"), std::string::npos) << e;
    EXPECT_TRUE(e.find("kMaxCompileSteps") != std::string::npos || e.find("kMaxCompileBytes") != std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos);
    EXPECT_LT(e.size(), 400u) << e;
  }
#ifndef CANVAS_TEST_SANITIZED  // ASan's shadow memory and quarantine count in the resident set
  EXPECT_LT(test::peak_rss_kb() - rss_before, 2 * (kMaxCompileBytes >> 10));
#endif
  // The same shape, small, compiles and means what it says.
  const JsonTemplate small = compile_json_schema(json{{"type", "string"}, {"pattern", many_alternatives(4, 3)}}, "ok");
  const ByteDfa d = ByteDfa::compile(small.document());
  EXPECT_TRUE(d.matches("\"babab\""));
  EXPECT_FALSE(d.matches("\"bbbb\""));
}

// Issue 34: a schema of 100,000 properties ran for minutes (nlohmann's callback parser rescanned the
// properties object each time a member closed, and the compiler's optional-property list is quadratic).
// Read from text as `--json-schema` reads it, it must end within 5 s with a one-line error naming
// kMaxSchemaProperties; at the limit it compiles.
TEST(JsonSchema, ManyPropertiesLongInputsAreFast) {
  auto schema_text = [](int n, bool required) {
    std::string props, names;
    for (int i = 0; i < n; ++i) {
      props += std::string(i ? "," : "") + "\"p" + std::to_string(i) + "\":{\"type\":\"integer\"}";
      names += std::string(i ? "," : "") + "\"p" + std::to_string(i) + "\"";
    }
    return "{\"type\":\"object\",\"properties\":{" + props + "}" + (required ? ",\"required\":[" + names + "]" : "") + "}";
  };
  for (bool required : {false, true}) {
    const std::string text = schema_text(100000, required);
    const auto start = std::chrono::steady_clock::now();
    const std::string e = error_of([&] { compile_json_schema(parse_json(text, "big.json"), "big.json"); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 5.0) << (required ? "required" : "optional");
    EXPECT_NE(e.find("big.json: more than " + std::to_string(kMaxSchemaProperties) + " properties"), std::string::npos) << e;
    EXPECT_NE(e.find("(kMaxSchemaProperties)"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
  const JsonTemplate at_limit = compile_json_schema(parse_json(schema_text(int(kMaxSchemaProperties), true), "ok.json"), "ok.json");
  EXPECT_EQ(at_limit.holes(), kMaxSchemaProperties);
  EXPECT_NE(error_of([&] { compile_json_schema(parse_json(schema_text(int(kMaxSchemaProperties) + 1, true), "x"), "x"); })
                .find("kMaxSchemaProperties"),
            std::string::npos);
}

// ---- numbers ---------------------------------------------------------------------------------------

std::shared_ptr<const ByteDfa> value_dfa(const std::string& schema) {
  const JsonTemplate t = compile_json_schema(json::parse(schema), "test");
  return std::make_shared<const ByteDfa>(ByteDfa::compile(t.document()));
}

TEST(JsonSchemaNumbers, IntegerRangesAreExact) {
  struct Bounds {
    const char* keys;
    std::function<bool(long)> in;
  };
  const std::vector<Bounds> bounds = {
      {R"("minimum":0,"maximum":120)", [](long x) { return x >= 0 && x <= 120; }},
      {R"("minimum":-37,"maximum":205)", [](long x) { return x >= -37 && x <= 205; }},
      {R"("exclusiveMinimum":-5,"exclusiveMaximum":5)", [](long x) { return x > -5 && x < 5; }},
      {R"("minimum":18)", [](long x) { return x >= 18; }},
      {R"("maximum":-12)", [](long x) { return x <= -12; }},
      {R"("minimum":1.5,"maximum":99.5)", [](long x) { return x >= 2 && x <= 99; }},
      {R"("exclusiveMaximum":0)", [](long x) { return x < 0; }},
      {"", [](long) { return true; }},
  };
  for (const Bounds& b : bounds) {
    const auto d = value_dfa(std::string(R"({"type":"integer")") + (*b.keys ? "," : "") + b.keys + "}");
    for (long x = -300; x <= 300; ++x)
      EXPECT_EQ(d->matches(std::to_string(x)), b.in(x)) << b.keys << " at " << x;
    EXPECT_FALSE(d->matches("007"));
    EXPECT_FALSE(d->matches("1.0"));
  }
}

TEST(JsonSchemaNumbers, NumberRangesWithFractions) {
  struct Bounds {
    const char* keys;
    std::function<bool(double)> in;
  };
  const std::vector<Bounds> bounds = {
      {R"("minimum":-2,"maximum":3)", [](double x) { return x >= -2 && x <= 3; }},
      {R"("exclusiveMinimum":0,"exclusiveMaximum":1)", [](double x) { return x > 0 && x < 1; }},
      {R"("exclusiveMinimum":-3,"maximum":0)", [](double x) { return x > -3 && x <= 0; }},
      {R"("minimum":10)", [](double x) { return x >= 10; }},
  };
  for (const Bounds& b : bounds) {
    const auto d = value_dfa(std::string(R"({"type":"number",)") + b.keys + "}");
    for (int whole = -15; whole <= 15; ++whole)
      for (const char* frac : {"", ".0", ".00", ".5", ".01", ".99"}) {
        const std::string text = (whole < 0 ? "-" : "") + std::to_string(std::abs(whole)) + frac;
        EXPECT_EQ(d->matches(text), b.in(std::stod(text))) << b.keys << " at " << text;
      }
    EXPECT_FALSE(d->matches("1e3"));
    EXPECT_FALSE(d->matches("01"));
    EXPECT_FALSE(d->matches("1."));
  }
}

// ---- token masks, exhaustively ---------------------------------------------------------------------

// All assignments of the masked positions of `canvas` to usable tokens, as texts with their tokens.
void completions(std::vector<int32_t>& canvas, size_t at, int32_t mask, const TokenVocabulary& vocab,
                 const std::function<void(const std::vector<int32_t>&)>& visit) {
  if (at == canvas.size()) {
    visit(canvas);
    return;
  }
  if (canvas[at] != mask) {
    completions(canvas, at + 1, mask, vocab, visit);
    return;
  }
  for (int32_t t : vocab.by_piece()) {
    canvas[at] = t;
    completions(canvas, at + 1, mask, vocab, visit);
  }
  canvas[at] = mask;
}

std::string text_of(const TokenVocabulary& vocab, const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += vocab.piece(id);
  return s;
}

// For every partial canvas over `canvases`, the constraint's allowed sets equal brute force: a token
// is allowed at a masked position exactly when some completion with it there is in the language.
void check_exhaustively(const TextCodec& codec, int32_t mask, const RegexPtr& language, int64_t length,
                        const std::vector<std::vector<int32_t>>& canvases) {
  const TokenVocabulary& vocab = *codec.vocabulary;
  auto lang = token_automaton(language, codec);
  CanvasConstraint constraint({{0, length, lang}}, length, mask, vocab.size());
  int64_t checked = 0;
  for (std::vector<int32_t> canvas : canvases) {
    const std::vector<int32_t> partial = canvas;
    auto brute = std::vector<std::set<int32_t>>(size_t(length));
    bool any = false;
    completions(canvas, 0, mask, vocab, [&](const std::vector<int32_t>& full) {
      if (!lang->dfa().matches(text_of(vocab, full))) return;
      any = true;
      for (int64_t i = 0; i < length; ++i)
        if (partial[size_t(i)] == mask) brute[size_t(i)].insert(full[size_t(i)]);
    });
    constraint.update(canvas);
    ASSERT_EQ(constraint.feasible(), any);
    for (int64_t i = 0; i < length; ++i) {
      if (canvas[size_t(i)] != mask) continue;
      for (int32_t t = 0; t < vocab.size(); ++t) {
        ASSERT_EQ(constraint.allows(i, t), brute[size_t(i)].count(t) > 0)
            << "position " << i << " token '" << vocab.piece(t) << "'";
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(TokenConstraint, ExhaustiveOnASmallSubwordVocabulary) {
  std::vector<std::string> pieces = {"a", "b", "ab", "\"", "\"a", "a\"", "1", "12", "2", " ", "", "0"};
  TextCodec codec;
  codec.vocabulary = std::make_shared<const TokenVocabulary>(pieces);
  const int32_t mask = 10;  // the empty piece
  const RegexPtr spaces = re_repeat(re_byte(' '), 0, -1);
  const std::vector<RegexPtr> languages = {
      re_concat({re_repeat(re_set(byte_range('a', 'b')), 0, 2), re_byte('"'),
                 spaces}),  // string content, maxLength 2
      re_concat({re_automaton(value_dfa(R"({"type":"integer","minimum":0,"maximum":12})")), spaces}),
      re_concat({re_automaton(value_dfa(R"({"enum":["a","ab"]})")), spaces}),
  };
  for (const RegexPtr& language : languages) {
    std::vector<std::vector<int32_t>> canvases;
    for (int32_t x = 0; x < 12; ++x)
      for (int32_t y = 0; y < 12; ++y)
        for (int32_t z = 0; z < 12; ++z) canvases.push_back({x, y, z});  // 10 is the mask
    check_exhaustively(codec, mask, language, 3, canvases);
  }
}

TEST(TokenConstraint, ExhaustiveOnTheByteVocabulary) {
  const TextCodec codec = byte_codec();
  std::vector<std::vector<int32_t>> canvases = {{kByteMask, kByteMask}};
  for (int32_t t = 0; t < 256; t += 5) {
    canvases.push_back({t, kByteMask});
    canvases.push_back({kByteMask, t});
  }
  for (const char* schema : {R"({"type":"integer","minimum":-9,"maximum":42})", R"({"type":"boolean"})",
                             R"({"type":"string","pattern":"^[x-z]$"})"})
    check_exhaustively(codec, kByteMask,
                       re_concat({re_automaton(value_dfa(schema)), re_repeat(re_byte(' '), 0, -1)}), 2,
                       canvases);
}

TEST(TokenConstraint, PrefixMasksKeepTheDocumentFinishableInBudget) {
  std::vector<std::string> pieces = {"{", "}", "\"", "a", "ab", "\"}", ":", "1", "12", "", "{\"a"};
  TextCodec codec;
  codec.vocabulary = std::make_shared<const TokenVocabulary>(pieces);
  const TokenVocabulary& vocab = *codec.vocabulary;
  auto lang = token_automaton(
      re_concat({re_literal("{\"a"), re_repeat(re_set(byte_range('a', 'b')), 0, 3), re_literal("\":"),
                 re_repeat(re_set(byte_range('1', '2')), 1, 2), re_byte('}')}),
      codec);
  const PrefixConstraint constraint(lang);
  // Brute force: the language's strings reachable within budget from a prefix.
  std::function<bool(const std::string&, int64_t)> finishable = [&](const std::string& text, int64_t budget) {
    if (lang->dfa().matches(text)) return true;
    if (budget == 0) return false;
    for (int32_t t : vocab.by_piece())
      if (lang->dfa().walk(lang->dfa().start(), text + vocab.piece(t)) >= 0 &&
          finishable(text + vocab.piece(t), budget - 1))
        return true;
    return false;
  };
  std::vector<char> allowed;
  int64_t checked = 0;
  std::function<void(const std::string&, int32_t, int)> walk = [&](const std::string& text, int32_t state,
                                                                   int depth) {
    for (int64_t remaining = 1; remaining <= 5; ++remaining) {
      constraint.allowed(state, remaining, allowed);
      for (int32_t t = 0; t < vocab.size(); ++t) {
        const bool live =
            !vocab.piece(t).empty() && lang->dfa().walk(lang->dfa().start(), text + vocab.piece(t)) >= 0;
        ASSERT_EQ(allowed[size_t(t)] != 0, live && finishable(text + vocab.piece(t), remaining - 1))
            << "after '" << text << "' with " << remaining << " left, token '" << vocab.piece(t) << "'";
        ++checked;
      }
    }
    if (depth == 3) return;
    for (const TokenAutomaton::Move& m : lang->moves(state))
      walk(text + vocab.piece(m.token), m.next, depth + 1);
  };
  walk("", constraint.start(), 0);
  EXPECT_GT(checked, 500);
  EXPECT_TRUE(constraint.fits(5));  // {"a + " + : + 1 + }
  EXPECT_FALSE(constraint.fits(4));
}

// ---- the schema compiler ---------------------------------------------------------------------------

TEST(JsonSchema, ScaffoldIsFixedTextAndValuesAreHoles) {
  const JsonTemplate t = compile_json_schema(json::parse(subset_schemas()[0]), "test");
  // nlohmann orders keys: "age" before "name".
  ASSERT_EQ(t.segments.size(), 5u);
  EXPECT_EQ(t.segments[0].fixed, "{\"age\":");
  EXPECT_TRUE(t.segments[1].is_hole());
  EXPECT_EQ(t.segments[2].fixed, ",\"name\":\"");
  EXPECT_TRUE(t.segments[3].is_hole());
  EXPECT_EQ(t.segments[3].max_bytes, 13);  // up to 6 characters (2 bytes when escaped) and the closing quote
  EXPECT_EQ(t.segments[4].fixed, "}");
}

TEST(JsonSchema, UnsupportedFeaturesNameTheKeyword) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"oneOf":[{"type":"integer"}]})", "'oneOf'"},
      {R"({"type":"string","format":"email"})", "'format'"},
      {R"({"type":"object","properties":{"a":{"$ref":"#/defs/a"}}})", "'$ref'"},
      {R"({"type":"number","minimum":0.5})", "non-integer 'minimum'"},
      {R"x({"type":"string","pattern":"(?=a)"})x", "lookaround"},
      {R"({"type":"integer","multipleOf":2})", "'multipleOf'"},
      {R"({"type":"object","required":["x"]})", "required property 'x'"},
      {R"({"type":"widget"})", "unknown type 'widget'"},
      {R"({"type":"string","minLength":3,"maxLength":2})", "maxLength < minLength"},
      {R"(true)", "boolean schemas"},
  };
  for (const auto& [schema, message] : cases) {
    try {
      compile_json_schema(json::parse(schema), "s.json");
      ADD_FAILURE() << schema << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << schema << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("s.json"), std::string::npos) << e.what();
    }
  }
}

// Random any-order fills (the diffusion decoder's rule: commit an allowed token at a random masked
// position, re-checking after each commit) and random left-to-right walks (the AR rule) on two
// vocabularies; every document must validate under python3-jsonschema.
TEST(JsonSchema, RandomFillsValidateWithJsonschema) {
  Rng rng(7);
  std::vector<SchemaDoc> all;
  for (const TextCodec& codec : {byte_codec(), subword_codec()}) {  // NOLINT
    const int32_t mask = codec.vocabulary->size() - 1;
    for (const std::string& schema_text : subset_schemas()) {
      const JsonTemplate t = compile_json_schema(json::parse(schema_text), "test");
      std::vector<std::string> docs;
      for (int rep = 0; rep < 12; ++rep) {
        const FillPlan plan = plan_json(t, {}, codec, mask, 60 + 10 * (rep % 3), 6 + rep);
        CanvasConstraint constraint(plan.holes, int64_t(plan.canvas.size()), mask, codec.vocabulary->size());
        std::vector<int32_t> canvas = plan.canvas;
        for (;;) {
          std::vector<int64_t> masked;
          for (size_t i = 0; i < canvas.size(); ++i)
            if (canvas[i] == mask) masked.push_back(int64_t(i));
          if (masked.empty()) break;
          constraint.update(canvas);
          const int64_t p = masked[size_t(rng.uniform() * double(masked.size())) % masked.size()];
          std::vector<int32_t> ok;
          const std::vector<char>& allowed = constraint.allowed(p);
          for (int32_t v = 0; v < int32_t(allowed.size()); ++v)
            if (allowed[size_t(v)]) ok.push_back(v);
          ASSERT_FALSE(ok.empty()) << schema_text;
          canvas[size_t(p)] = ok[size_t(rng.uniform() * double(ok.size())) % ok.size()];
        }
        docs.push_back(codec_text(codec, canvas));
        // Left to right within a budget.
        const PrefixConstraint ar(token_automaton(t.document(), codec));
        int32_t state = ar.start();
        std::vector<int32_t> ids;
        const int64_t budget = 60;
        std::vector<char> allowed;
        while (!ar.finished(state)) {
          ar.allowed(state, budget - int64_t(ids.size()), allowed);
          std::vector<int32_t> ok;
          for (int32_t v = 0; v < int32_t(allowed.size()); ++v)
            if (allowed[size_t(v)]) ok.push_back(v);
          if (ar.complete(state) && (ok.empty() || rng.uniform() < 0.3)) break;
          ASSERT_FALSE(ok.empty()) << schema_text;
          const int32_t token = ok[size_t(rng.uniform() * double(ok.size())) % ok.size()];
          ids.push_back(token);
          state = ar.advance(state, token);
        }
        EXPECT_LE(int64_t(ids.size()), budget);
        docs.push_back(codec_text(codec, ids));
      }
      for (const std::string& d : docs) all.push_back({schema_text, d});
    }
  }
  EXPECT_EQ(all.size(), 2 * subset_schemas().size() * 24);
  EXPECT_EQ(python_validate(all), "");
}

// OpenAI's response_format json_object: any object (shallow values), filled in random order.
TEST(JsonSchema, JsonObjectModeGivesObjects) {
  const JsonTemplate t = json_object_template();
  const TextCodec codec = byte_codec();
  Rng rng(3);
  std::vector<SchemaDoc> docs;
  for (int rep = 0; rep < 20; ++rep) {
    const FillPlan plan = plan_json(t, {}, codec, kByteMask, 40);
    CanvasConstraint constraint(plan.holes, int64_t(plan.canvas.size()), kByteMask, codec.vocabulary->size());
    std::vector<int32_t> canvas = plan.canvas;
    for (;;) {
      std::vector<int64_t> masked;
      for (size_t i = 0; i < canvas.size(); ++i)
        if (canvas[i] == kByteMask) masked.push_back(int64_t(i));
      if (masked.empty()) break;
      constraint.update(canvas);
      const int64_t p = masked[rng.below(masked.size())];
      std::vector<int32_t> ok;
      const std::vector<char>& allowed = constraint.allowed(p);
      for (int32_t v = 0; v < int32_t(allowed.size()); ++v)
        if (allowed[size_t(v)]) ok.push_back(v);
      ASSERT_FALSE(ok.empty());
      canvas[size_t(p)] = ok[rng.below(ok.size())];
    }
    docs.push_back({R"({"type":"object"})", codec_text(codec, canvas)});
  }
  EXPECT_EQ(python_validate(docs), "");
}

// ---- holes in text ----------------------------------------------------------------------------------

TEST(Infill, ParseHoles) {
  const auto pieces = parse_holes("A<|hole:3|>B<|hole:12|>");
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].text, "A");
  EXPECT_EQ(pieces[1].hole_tokens, 3);
  EXPECT_EQ(pieces[2].text, "B");
  EXPECT_EQ(pieces[3].hole_tokens, 12);
  for (const char* bad : {"a<|hole:x|>", "<|hole:0|>", "<|hole:5", "<|hole:99999|>"}) {
    try {
      parse_holes(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("<|hole:"), std::string::npos) << e.what();
    }
  }
  const FillPlan plan =
      plan_text_infill(parse_holes("ab<|hole:2|>cd<|hole:1|>"), {}, byte_codec(), kByteMask);
  EXPECT_EQ(plan.prompt, (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(plan.canvas, (std::vector<int32_t>{kByteMask, kByteMask, 'c', 'd', kByteMask}));
  ASSERT_EQ(plan.holes.size(), 2u);
  EXPECT_EQ(plan.holes[1].start, 4);
  EXPECT_THROW(plan_text_infill(parse_holes("no holes"), {}, byte_codec(), kByteMask), Error);
}

const std::string& shipped(const char* name) {
  static std::map<std::string, std::string> paths;
  auto& p = paths[name];
  if (p.empty()) p = test::source_path(std::string("models/") + name);
  return p;
}

TEST(Infill, MaskedModelFillsHolesAndKeepsTheGivens) {
  const Model model = Model::load(shipped("text-masked.gguf"));
  ThreadPool pool(2);
  const TextCodec codec = byte_codec();
  const FillPlan plan =
      plan_text_infill(parse_holes("And God said, Let <|hole:5|> be light: and there <|hole:3|> light."), {},
                       codec, model.config.mask_token);
  FillParams params;
  const FillResult r = fill(model, plan, params, codec, &pool);
  ASSERT_EQ(r.canvas.size(), plan.canvas.size());
  for (size_t i = 0; i < plan.canvas.size(); ++i) {
    if (plan.canvas[i] != plan.mask_id) {
      EXPECT_EQ(r.canvas[i], plan.canvas[i]) << i;
    }
  }
  ASSERT_EQ(r.fills.size(), 2u);
  EXPECT_EQ(r.fills[0].size(), 5u);  // byte tokens, none special
  EXPECT_EQ(r.fills[1].size(), 3u);
  EXPECT_EQ(r.passes, 8);  // one token per pass by default
  // Schema-constrained with several tokens per step (threshold decoding re-checks each commit).
  std::vector<SchemaDoc> docs;
  for (const std::string& schema_text : subset_schemas()) {
    const JsonTemplate t = compile_json_schema(json::parse(schema_text), "test");
    for (const auto& [threshold, steps] : std::vector<std::pair<float, int64_t>>{{0.f, 0}, {0.3f, 0}, {0.f, 2}}) {
      // Threshold decoding and a 2-step schedule commit several tokens per step (each re-checked).
      params.masked.threshold = threshold;
      params.masked.steps = steps;
      const FillPlan jp = plan_json(t, {'{'}, codec, model.config.mask_token, 100);
      const FillResult r = fill(model, jp, params, codec, &pool);
      EXPECT_EQ(std::count(r.canvas.begin(), r.canvas.end(), model.config.mask_token), 0);
      docs.push_back({schema_text, r.text});
    }
  }
  EXPECT_EQ(python_validate(docs), "");
}

TEST(Infill, AutoregressiveModelsRefuseHolesButFollowSchemas) {
  const Model model = Model::load(shipped("text-ar.gguf"));
  ThreadPool pool(2);
  const TextCodec codec = byte_codec();
  const FillPlan plan = plan_text_infill(parse_holes("a<|hole:2|>b"), {}, codec, -1);
  try {
    fill(model, plan, FillParams{}, codec, &pool);
    ADD_FAILURE() << "an AR model filled a hole";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("autoregressive"), std::string::npos) << e.what();
  }
  std::vector<SchemaDoc> docs;
  for (const std::string& schema_text : subset_schemas()) {
    const JsonTemplate t = compile_json_schema(json::parse(schema_text), "test");
    ArParams p;
    p.max_new_tokens = 90;
    p.stop_ids = {model.config.eos_token};
    const ConstrainedArResult r = generate_constrained_ar(model, {'A', 'n', 'd'}, t, codec, p, &pool);
    EXPECT_LE(int64_t(r.tokens.size()), 90);
    docs.push_back({schema_text, r.text});
  }
  EXPECT_EQ(python_validate(docs), "");
}

// A random uniform-state byte model, as canvas train saves them.
std::string save_uniform_byte_model(const test::TempDir& dir) {
  ModelConfig c = test::tiny_llada_config(train::kByteVocab, "uniform infill test");
  c.uniform_state = true;
  c.eos_token = train::kByteEos;
  train::InitOptions init;
  init.seed = 5;
  init.std = 0.3f;
  train::TrainModel tm(c, init);
  const std::string path = dir.path("uniform.gguf");
  tm.save_gguf(path, train::byte_tokenizer_metadata(false));
  return path;
}

// Uniform-state filling: pinned givens, schema values that validate.
TEST(Infill, UniformStateModelFillsHolesAndSchemas) {
  test::TempDir dir;
  const Model model = Model::load(save_uniform_byte_model(dir));
  ThreadPool pool(2);
  const TextCodec codec = byte_codec();
  FillParams params;
  params.uniform.max_denoising_steps = 6;
  params.uniform.eos_ids = {model.config.eos_token};
  params.uniform.pad_id = model.config.eos_token;
  const FillPlan plan = plan_text_infill(parse_holes("ab<|hole:4|>cd<|hole:2|>"), {}, codec, -1);
  const FillResult r = fill(model, plan, params, codec, &pool);
  ASSERT_EQ(r.canvas.size(), plan.canvas.size());
  EXPECT_EQ(r.canvas[4], 'c');
  EXPECT_EQ(r.canvas[5], 'd');
  for (const std::string& f : r.fills)
    for (char ch : f) EXPECT_NE(ch, '\0');
  std::vector<SchemaDoc> docs;
  for (const std::string& schema_text : subset_schemas()) {
    const JsonTemplate t = compile_json_schema(json::parse(schema_text), "test");
    const FillPlan jp = plan_json(t, {'x'}, codec, -1, 60);
    docs.push_back({schema_text, fill(model, jp, params, codec, &pool).text});
  }
  EXPECT_EQ(python_validate(docs), "");
}

// ---- the CLI -----------------------------------------------------------------------------------------

TEST(InfillCli, SuffixAndHolesOnTheShippedModel) {
  auto r = test::run_canvas("generate -m " + shipped("text-masked.gguf") + " -p 'In the beginning God ' --suffix ' the earth.' -n 12 -t 2", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("In the beginning God ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find(" the earth.\n"), std::string::npos) << r.output;
  // 12 tokens of bytes, less the spaces that would double at a seam.
  EXPECT_LE(r.output.size(), std::string("In the beginning God  the earth.\n").size() + 12) << r.output;
  EXPECT_EQ(r.output.find("  "), std::string::npos) << r.output;
  r = test::run_canvas("generate -m " + shipped("text-masked.gguf") + " -p 'And <|hole:4|> said, Let <|hole:5|> be light' --json -t 2", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = json::parse(r.output);
  ASSERT_EQ(j["fills"].size(), 2u);
  EXPECT_EQ(j["fills"][0].get<std::string>().size(), 4u);
  EXPECT_EQ(j["passes"].get<int>(), 9);
  r = test::run_canvas("generate -m " + shipped("text-ar.gguf") + " -p 'In the' --suffix 'earth' -n 4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("autoregressive"), std::string::npos) << r.output;
  r = test::run_canvas("generate -p 'a<|hole:zz|>'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("<|hole:zz|>"), std::string::npos) << r.output;
}

// Seams: a space written before a hole is not doubled by the fill's own leading space, nor one after it by
// the fill's trailing space; JSON values carry no padding and properties come in the schema's order.
TEST(InfillCli, SeamsAndSchemaOrderAsWritten) {
  for (const char* model : {"text-dg.gguf", "text-masked.gguf"})
    for (int seed : {1, 2, 3}) {
      const auto r = test::run_canvas("generate -m " + shipped(model) +
                                          " -p 'And God said, <|hole:6|> there be light: and <|hole:5|> was light.' --json -t 2 -s " +
                                          std::to_string(seed),
                                      false);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const std::string text = json::parse(r.output)["text"].get<std::string>();
      EXPECT_EQ(text.rfind("And God said, ", 0), 0u) << text;
      EXPECT_EQ(text.find("  "), std::string::npos) << model << " seed " << seed << ": " << text;
      EXPECT_NE(text.find(" there be light: and "), std::string::npos) << text;
    }
  test::TempDir dir;
  std::ofstream(dir.path("p.json"))
      << R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer",)"
         R"("minimum":0,"maximum":120},"hobbies":{"type":"array","items":{"type":"string","maxLength":8},)"
         R"("maxItems":3}},"required":["name","age","hobbies"]})";
  for (const char* model : {"text-masked.gguf", "text-dg.gguf"}) {
    const auto r = test::run_canvas("generate -m " + shipped(model) + " -p 'Record: ' --json-schema " +
                                        dir.path("p.json") + " -n 80 -t 2 -s 1",
                                    false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string doc = r.output.substr(0, r.output.find('\n'));
    const size_t name = doc.find("\"name\":"), age = doc.find("\"age\":"), hobbies = doc.find("\"hobbies\":");
    ASSERT_NE(hobbies, std::string::npos) << doc;
    EXPECT_LT(name, age) << doc;
    EXPECT_LT(age, hobbies) << doc;
    // No padding: outside strings the document has no whitespace.
    bool in_string = false, escaped = false;
    for (char c : doc) {
      if (in_string) {
        in_string = escaped || c != '"';
        escaped = !escaped && c == '\\';
      } else {
        in_string = c == '"';
        EXPECT_NE(c, ' ') << model << ": " << doc;
      }
    }
    EXPECT_NO_THROW(json::parse(doc)) << doc;
  }
}

TEST(InfillCli, JsonSchemaOutputIsTheJsonAlone) {
  test::TempDir dir;
  const std::string schema = subset_schemas()[0];
  std::ofstream(dir.path("s.json")) << schema;
  std::vector<std::string> docs;
  for (const std::string& model : {shipped("text-masked.gguf"), shipped("text-ar.gguf")})
    for (const char* extra : {"", " --mode ar", " --temp 0.8 -s 3"}) {
      if (model == shipped("text-ar.gguf") && std::string(extra) == " --mode ar") continue;
      const auto r = test::run_canvas(
          "generate -m " + model + " -p 'Name: ' --json-schema " + dir.path("s.json") + " -n 60 -t 2" + extra,
          false);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      ASSERT_EQ(r.output.back(), '\n');
      docs.push_back(r.output.substr(0, r.output.size() - 1));
      EXPECT_EQ(docs.back().find('\n'), std::string::npos) << r.output;
    }
  EXPECT_EQ(python_validate(schema, docs), "");
  std::ofstream(dir.path("bad.json"))
      << R"({"type":"object","properties":{"a":{"type":"string","format":"date"}}})";
  auto r = test::run_canvas("generate -p x --json-schema " + dir.path("bad.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unsupported JSON Schema feature 'format'"), std::string::npos) << r.output;
  r = test::run_canvas("generate -p x --json-schema " + dir.path("s.json") + " -n 5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("needs at least"), std::string::npos) << r.output;
}

TEST(InfillCli, UniformStateModel) {
  test::TempDir dir;
  const std::string model = save_uniform_byte_model(dir);
  auto r = test::run_canvas("generate -m " + model + " -p 'ab<|hole:4|>cd' --steps 4 --json -t 2", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = json::parse(r.output);
  const std::string text = j["text"].get<std::string>();
  EXPECT_EQ(text.substr(0, 2), "ab") << r.output;
  EXPECT_EQ(text.substr(text.size() - 2), "cd") << r.output;
  ASSERT_EQ(j["tokens"].size(), 6u) << r.output;  // the canvas: 4 filled, then the given "cd"
  EXPECT_EQ(j["tokens"][4].get<int>(), 'c');
  EXPECT_EQ(j["tokens"][5].get<int>(), 'd');
  const std::string schema = subset_schemas()[2];
  std::ofstream(dir.path("s.json")) << schema;
  r = test::run_canvas("generate -m " + model + " -p 'x' --steps 4 -t 2 --json-schema " + dir.path("s.json"),
                       false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(python_validate(schema, {r.output.substr(0, r.output.size() - 1)}), "") << r.output;
}

}  // namespace
}  // namespace canvas
