// Regular languages over bytes: a small regex tree, its compilation to a deterministic automaton
// (ByteDfa) and an ECMAScript-pattern subset parser. The constraint layer (constraint.h) lifts these
// automata from bytes to the token ids of a model's vocabulary.
#pragma once
#include <array>
#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace canvas {

class ByteDfa;
struct ByteRegex;
using RegexPtr = std::shared_ptr<const ByteRegex>;
using ByteSet = std::bitset<256>;

// A regular expression over bytes, built with the re_* functions below (immutable, shared).
struct ByteRegex {
  enum class Kind { Epsilon, Nothing, Set, Concat, Alt, Repeat, Automaton };
  Kind kind = Kind::Epsilon;
  ByteSet set;                         // Set: one byte from it
  std::vector<RegexPtr> parts;         // Concat, Alt; Repeat: parts[0]
  int64_t min = 0, max = -1;           // Repeat: min..max copies (max -1: unbounded)
  std::shared_ptr<const ByteDfa> dfa;  // Automaton: an already compiled language
};

RegexPtr re_epsilon();  // the empty string
RegexPtr re_nothing();  // the empty language
RegexPtr re_set(const ByteSet& set);
RegexPtr re_byte(uint8_t byte);
RegexPtr re_literal(std::string_view text);
RegexPtr re_concat(std::vector<RegexPtr> parts);
RegexPtr re_alt(std::vector<RegexPtr> parts);
RegexPtr re_repeat(RegexPtr part, int64_t min, int64_t max);  // max -1: unbounded
RegexPtr re_optional(RegexPtr part);
RegexPtr re_automaton(std::shared_ptr<const ByteDfa> dfa);
ByteSet byte_range(uint8_t lo, uint8_t hi);

// A deterministic automaton over bytes, trimmed: every state is reachable from the start and can reach
// an accepting state; a transition to nowhere is -1. An empty language has no states (start -1).
// What compiling one language may spend besides its states: steps of work (automaton states, moves and
// bytes visited) and bytes of subset tables. A pattern of thousands of alternatives under a star has few
// states but subsets of thousands of states each (issue 61: a 20 KB pattern took a minute, a 50 KB one
// 3 GB); these keep any one compilation under about a second and kMaxCompileBytes.
inline constexpr int64_t kMaxCompileSteps = int64_t(64) << 20;
inline constexpr int64_t kMaxCompileBytes = int64_t(128) << 20;

class ByteDfa {
 public:
  // Subset construction from the regex's Thompson automaton. Throws Error when it would need more than
  // max_states states, kMaxCompileSteps steps or kMaxCompileBytes of tables (the message says the schema
  // or pattern is too large, naming the bound).
  static ByteDfa compile(const RegexPtr& regex, int64_t max_states = 20000);
  // The product automaton: strings both accept.
  static ByteDfa intersect(const ByteDfa& a, const ByteDfa& b, int64_t max_states = 20000);

  int32_t start() const { return start_; }
  int32_t states() const { return int32_t(accepting_.size()); }
  int32_t next(int32_t state, uint8_t byte) const { return next_[size_t(state)][byte]; }
  bool accepting(int32_t state) const { return accepting_[size_t(state)] != 0; }
  bool empty() const { return start_ < 0; }
  // Follows bytes from state; -1 as soon as the path leaves the automaton.
  int32_t walk(int32_t state, std::string_view bytes) const;
  bool matches(std::string_view text) const;
  // Fewest bytes from each state to acceptance.
  std::vector<int32_t> min_bytes_to_accept() const;
  // Longest accepted string from the start, or -1 when the language is infinite.
  int64_t max_length() const;
  int64_t min_length() const;

 private:
  static ByteDfa trimmed(std::vector<std::array<int32_t, 256>> next, std::vector<char> accepting,
                         int32_t start);
  std::vector<std::array<int32_t, 256>> next_;
  std::vector<char> accepting_;
  int32_t start_ = -1;
};

// The characters a JSON string may hold unescaped and that patterns range over here: printable ASCII
// (0x20-0x7e). A character set of them as JSON string bytes: '"' and '\' become their two-byte escapes.
ByteSet printable_ascii();
RegexPtr json_string_chars(const ByteSet& chars);

// How deep a pattern may nest: groups inside groups and quantifiers stacked on one atom (`a**`,
// `a{1}{1}`) each add a level along a path. Real patterns nest a handful of levels; the bound keeps the
// parser and every recursive walk of the tree it builds (compilation, destruction) off the end of the
// stack, whatever the pattern holds.
inline constexpr int kMaxPatternNesting = 100;

// An ECMAScript regular expression (the JSON Schema `pattern` dialect) over printable ASCII, as the JSON
// string bytes of every string it matches (unanchored unless written ^...$, as JSON Schema says).
// Supported: literals, '.', escapes \d \D \w \W \s \S and escaped punctuation, classes [...] with
// ranges and negation, groups (...) and (?:...), '|', quantifiers * + ? {n} {n,} {n,m} (a trailing '?'
// for laziness is accepted and ignored), ^ at the start and $ at the end. Anything else (backreferences,
// lookaround, \b, non-ASCII) and nesting deeper than kMaxPatternNesting throw a one-line Error naming
// the construct and `origin`, quoting at most the pattern's first 60 characters.
RegexPtr parse_pattern(std::string_view pattern, const std::string& origin);

}  // namespace canvas
