// Regex trees over bytes, Thompson construction, subset construction with trimming, and the pattern parser.
#include "text/byte_automaton.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <map>

#include "core/error.h"
#include "core/excerpt.h"

namespace canvas {

namespace {

RegexPtr make(ByteRegex r) {
  return std::make_shared<const ByteRegex>(std::move(r));
}

}  // namespace

RegexPtr re_epsilon() {
  return make(ByteRegex{});
}
RegexPtr re_nothing() {
  ByteRegex r;
  r.kind = ByteRegex::Kind::Nothing;
  return make(std::move(r));
}
RegexPtr re_set(const ByteSet& set) {
  ByteRegex r;
  r.kind = ByteRegex::Kind::Set;
  r.set = set;
  return make(std::move(r));
}
RegexPtr re_byte(uint8_t byte) {
  ByteSet s;
  s.set(byte);
  return re_set(s);
}
RegexPtr re_literal(std::string_view text) {
  std::vector<RegexPtr> parts;
  for (unsigned char ch : text) parts.push_back(re_byte(ch));
  return re_concat(std::move(parts));
}
RegexPtr re_concat(std::vector<RegexPtr> parts) {
  if (parts.empty()) return re_epsilon();
  if (parts.size() == 1) return parts[0];
  ByteRegex r;
  r.kind = ByteRegex::Kind::Concat;
  r.parts = std::move(parts);
  return make(std::move(r));
}
RegexPtr re_alt(std::vector<RegexPtr> parts) {
  if (parts.empty()) return re_nothing();
  if (parts.size() == 1) return parts[0];
  ByteRegex r;
  r.kind = ByteRegex::Kind::Alt;
  r.parts = std::move(parts);
  return make(std::move(r));
}
RegexPtr re_repeat(RegexPtr part, int64_t min, int64_t max) {
  check(min >= 0 && (max < 0 || max >= min),
        "regex repetition {" + std::to_string(min) + "," + std::to_string(max) + "} is empty");
  check(min <= 10000 && max <= 10000, "regex repetition count above 10000");
  ByteRegex r;
  r.kind = ByteRegex::Kind::Repeat;
  r.parts = {std::move(part)};
  r.min = min;
  r.max = max;
  return make(std::move(r));
}
RegexPtr re_optional(RegexPtr part) {
  return re_repeat(std::move(part), 0, 1);
}
RegexPtr re_automaton(std::shared_ptr<const ByteDfa> dfa) {
  ByteRegex r;
  r.kind = ByteRegex::Kind::Automaton;
  r.dfa = std::move(dfa);
  return make(std::move(r));
}
ByteSet byte_range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(size_t(b));
  return s;
}

namespace {

// Steps of a sort or a map lookup over n items: about log2(n) + 1 comparisons each.
int64_t log2_ceil(size_t n) {
  int64_t bits = 1;
  while (n > 1) n >>= 1, ++bits;
  return bits;
}

// Thompson automaton: states with epsilon moves and byte-set edges.
struct Nfa {
  struct State {
    std::vector<int32_t> eps;
    std::vector<std::pair<ByteSet, int32_t>> edges;
  };
  std::vector<State> states;
  int64_t limit = 0;
  int64_t steps_left = kMaxCompileSteps, bytes_left = kMaxCompileBytes;
  void spend(int64_t steps, int64_t bytes = 0) {
    steps_left -= steps, bytes_left -= bytes;
    check(steps_left >= 0, "the language is too costly to compile (over " + std::to_string(kMaxCompileSteps) +
                               " steps, kMaxCompileSteps): use fewer alternatives or smaller bounds");
    check(bytes_left >= 0, "the language is too large to compile (over " + std::to_string(kMaxCompileBytes >> 20) +
                               " MiB of automaton tables, kMaxCompileBytes): use fewer alternatives or smaller bounds");
  }
  int32_t add() {
    check(int64_t(states.size()) < limit,
          "the language is too large to compile (over " + std::to_string(limit) +
              " automaton states): use smaller bounds (maxLength, maxItems, ranges)");
    states.emplace_back();
    return int32_t(states.size() - 1);
  }
  // Builds r between a fresh entry and exit state; returns {entry, exit}. Recursive over the tree: the
  // trees made here are shallow (parse_pattern holds patterns to kMaxPatternNesting, compile_json_schema
  // schemas to kMaxSchemaNesting).
  std::pair<int32_t, int32_t> build(const ByteRegex& r) {
    using K = ByteRegex::Kind;
    const int32_t in = add(), out = add();
    switch (r.kind) {
      case K::Epsilon:
        states[size_t(in)].eps.push_back(out);
        break;
      case K::Nothing:
        break;
      case K::Set:
        states[size_t(in)].edges.push_back({r.set, out});
        break;
      case K::Concat: {
        int32_t cur = in;
        for (const RegexPtr& p : r.parts) {
          auto [a, b] = build(*p);
          states[size_t(cur)].eps.push_back(a);
          cur = b;
        }
        states[size_t(cur)].eps.push_back(out);
        break;
      }
      case K::Alt:
        for (const RegexPtr& p : r.parts) {
          auto [a, b] = build(*p);
          states[size_t(in)].eps.push_back(a);
          states[size_t(b)].eps.push_back(out);
        }
        break;
      case K::Repeat: {
        int32_t cur = in;
        for (int64_t i = 0; i < r.min; ++i) {
          auto [a, b] = build(*r.parts[0]);
          states[size_t(cur)].eps.push_back(a);
          cur = b;
        }
        if (r.max < 0) {  // a loop: cur -> part -> cur
          auto [a, b] = build(*r.parts[0]);
          states[size_t(cur)].eps.push_back(a);
          states[size_t(b)].eps.push_back(cur);
        } else {
          // Nested optionals: every further copy may be skipped straight to the exit.
          for (int64_t i = r.min; i < r.max; ++i) {
            states[size_t(cur)].eps.push_back(out);
            auto [a, b] = build(*r.parts[0]);
            states[size_t(cur)].eps.push_back(a);
            cur = b;
          }
        }
        states[size_t(cur)].eps.push_back(out);
        break;
      }
      case K::Automaton: {
        const ByteDfa& d = *r.dfa;
        if (d.empty()) break;
        const int32_t base = int32_t(states.size());
        for (int32_t s = 0; s < d.states(); ++s) add();
        for (int32_t s = 0; s < d.states(); ++s) {
          std::map<int32_t, ByteSet> by_target;
          for (int b = 0; b < 256; ++b)
            if (d.next(s, uint8_t(b)) >= 0) by_target[d.next(s, uint8_t(b))].set(size_t(b));
          for (auto& [t, set] : by_target) states[size_t(base + s)].edges.push_back({set, base + t});
          if (d.accepting(s)) states[size_t(base + s)].eps.push_back(out);
        }
        states[size_t(in)].eps.push_back(base + d.start());
        break;
      }
    }
    return {in, out};
  }
  // Marks of the closure being computed: state s is in it when seen[s] == pass. One array for every call,
  // so a closure costs what it visits, not the size of the whole automaton.
  std::vector<uint32_t> seen;
  uint32_t pass = 0;
  std::vector<int32_t> closure(std::vector<int32_t> set) {
    if (seen.size() != states.size()) seen.assign(states.size(), 0), pass = 0;
    if (++pass == 0) std::fill(seen.begin(), seen.end(), 0), pass = 1;
    std::vector<int32_t> stack = set;
    for (int32_t s : set) seen[size_t(s)] = pass;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      spend(1 + int64_t(states[size_t(s)].eps.size()));
      for (int32_t t : states[size_t(s)].eps)
        if (seen[size_t(t)] != pass) {
          seen[size_t(t)] = pass;
          set.push_back(t);
          stack.push_back(t);
        }
    }
    spend(int64_t(set.size()) * log2_ceil(set.size()));  // the sort
    std::sort(set.begin(), set.end());
    return set;
  }
};

}  // namespace

ByteDfa ByteDfa::trimmed(std::vector<std::array<int32_t, 256>> next, std::vector<char> accepting,
                         int32_t start) {
  const size_t n = accepting.size();
  // Live: can reach acceptance (reverse search).
  std::vector<std::vector<int32_t>> reverse(n);
  for (size_t s = 0; s < n; ++s)
    for (int b = 0; b < 256; ++b)
      if (next[s][size_t(b)] >= 0) reverse[size_t(next[s][size_t(b)])].push_back(int32_t(s));
  std::vector<char> live(n, 0);
  std::vector<int32_t> stack;
  for (size_t s = 0; s < n; ++s)
    if (accepting[s]) {
      live[s] = 1;
      stack.push_back(int32_t(s));
    }
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t p : reverse[size_t(s)])
      if (!live[size_t(p)]) {
        live[size_t(p)] = 1;
        stack.push_back(p);
      }
  }
  ByteDfa d;
  if (start < 0 || !live[size_t(start)]) return d;
  // Renumber the live states reachable from the start, in breadth-first order.
  std::vector<int32_t> id(n, -1);
  std::deque<int32_t> queue{start};
  id[size_t(start)] = 0;
  std::vector<int32_t> order{start};
  while (!queue.empty()) {
    const int32_t s = queue.front();
    queue.pop_front();
    for (int b = 0; b < 256; ++b) {
      const int32_t t = next[size_t(s)][size_t(b)];
      if (t >= 0 && live[size_t(t)] && id[size_t(t)] < 0) {
        id[size_t(t)] = int32_t(order.size());
        order.push_back(t);
        queue.push_back(t);
      }
    }
  }
  d.next_.resize(order.size());
  d.accepting_.resize(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t s = order[i];
    d.accepting_[i] = accepting[size_t(s)];
    for (int b = 0; b < 256; ++b) {
      const int32_t t = next[size_t(s)][size_t(b)];
      d.next_[i][size_t(b)] = (t >= 0 && live[size_t(t)]) ? id[size_t(t)] : -1;
    }
  }
  d.start_ = 0;
  return d;
}

ByteDfa ByteDfa::compile(const RegexPtr& regex, int64_t max_states) {
  Nfa nfa;
  nfa.limit = std::max<int64_t>(max_states * 8, 1 << 16);
  const auto built = nfa.build(*regex);
  const int32_t in = built.first, out = built.second;
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  std::vector<std::array<int32_t, 256>> next;
  std::vector<char> accepting;
  auto intern = [&](std::vector<int32_t> set) -> int32_t {
    if (set.empty()) return -1;
    nfa.spend(int64_t(set.size()) * log2_ceil(sets.size()));  // the lookup compares subsets
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    check(int64_t(sets.size()) < max_states,
          "the language is too large to compile (over " + std::to_string(max_states) +
              " automaton states): use smaller bounds (maxLength, maxItems, ranges)");
    // Each subset is held twice (ids' key and sets), with its row of 256 moves.
    nfa.spend(int64_t(set.size()), int64_t(set.size() * 2 * sizeof(int32_t) + sizeof(next[0]) + 128));
    const int32_t id = int32_t(sets.size());
    ids.emplace(set, id);
    accepting.push_back(std::binary_search(set.begin(), set.end(), out) ? 1 : 0);
    sets.push_back(std::move(set));
    next.emplace_back();
    return id;
  };
  const int32_t start = intern(nfa.closure({in}));
  std::array<std::vector<int32_t>, 256> targets;
  for (size_t i = 0; i < sets.size(); ++i) {
    for (auto& t : targets) t.clear();
    for (int32_t s : sets[i]) {
      nfa.spend(1 + 16 * int64_t(nfa.states[size_t(s)].edges.size()));
      for (const auto& [set, to] : nfa.states[size_t(s)].edges)
        for (int b = 0; b < 256; ++b)
          if (set.test(size_t(b))) targets[size_t(b)].push_back(to);
    }
    // Bytes with the same target set share one closure computation.
    std::map<std::vector<int32_t>, int32_t> done;
    for (int b = 0; b < 256; ++b) {
      auto& t = targets[size_t(b)];
      nfa.spend(int64_t(t.size()) * (log2_ceil(t.size()) + log2_ceil(done.size())));  // the sort and the lookup
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      int32_t id = -1;
      if (!t.empty()) {
        auto it = done.find(t);
        if (it != done.end()) {
          id = it->second;
        } else {
          id = intern(nfa.closure(t));
          done.emplace(t, id);
        }
      }
      next[i][size_t(b)] = id;
    }
  }
  return trimmed(std::move(next), std::move(accepting), start);
}

ByteDfa ByteDfa::intersect(const ByteDfa& a, const ByteDfa& b, int64_t max_states) {
  if (a.empty() || b.empty()) return ByteDfa{};
  std::map<std::pair<int32_t, int32_t>, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> pairs;
  std::vector<std::array<int32_t, 256>> next;
  std::vector<char> accepting;
  auto intern = [&](int32_t x, int32_t y) -> int32_t {
    if (x < 0 || y < 0) return -1;
    auto it = ids.find({x, y});
    if (it != ids.end()) return it->second;
    check(int64_t(pairs.size()) < max_states,
          "the language is too large to compile (over " + std::to_string(max_states) + " automaton states)");
    const int32_t id = int32_t(pairs.size());
    ids.emplace(std::make_pair(x, y), id);
    pairs.push_back({x, y});
    accepting.push_back(a.accepting(x) && b.accepting(y));
    next.emplace_back();
    return id;
  };
  const int32_t start = intern(a.start(), b.start());
  for (size_t i = 0; i < pairs.size(); ++i)
    for (int c = 0; c < 256; ++c) {
      const auto [x, y] = pairs[i];
      next[i][size_t(c)] = intern(a.next(x, uint8_t(c)), b.next(y, uint8_t(c)));
    }
  return trimmed(std::move(next), std::move(accepting), start);
}

int32_t ByteDfa::walk(int32_t state, std::string_view bytes) const {
  for (unsigned char ch : bytes) {
    if (state < 0) return -1;
    state = next_[size_t(state)][ch];
  }
  return state;
}

bool ByteDfa::matches(std::string_view text) const {
  if (empty()) return false;
  const int32_t s = walk(start_, text);
  return s >= 0 && accepting(s);
}

std::vector<int32_t> ByteDfa::min_bytes_to_accept() const {
  const int32_t n = states();
  auto reverse = std::vector<std::vector<int32_t>>(size_t(n));
  for (int32_t s = 0; s < n; ++s)
    for (int b = 0; b < 256; ++b)
      if (next_[size_t(s)][size_t(b)] >= 0) reverse[size_t(next_[size_t(s)][size_t(b)])].push_back(s);
  std::vector<int32_t> dist(size_t(n), -1);
  std::deque<int32_t> queue;
  for (int32_t s = 0; s < n; ++s)
    if (accepting(s)) {
      dist[size_t(s)] = 0;
      queue.push_back(s);
    }
  while (!queue.empty()) {
    const int32_t s = queue.front();
    queue.pop_front();
    for (int32_t p : reverse[size_t(s)])
      if (dist[size_t(p)] < 0) {
        dist[size_t(p)] = dist[size_t(s)] + 1;
        queue.push_back(p);
      }
  }
  return dist;
}

int64_t ByteDfa::min_length() const {
  return empty() ? -1 : min_bytes_to_accept()[size_t(start_)];
}

int64_t ByteDfa::max_length() const {
  if (empty()) return -1;
  // Trimmed, so any cycle makes the language infinite; else the longest path in a DAG.
  const int32_t n = states();
  std::vector<int64_t> longest(size_t(n), -2);  // -2 unvisited, -3 on the stack
  bool cyclic = false;
  std::vector<std::pair<int32_t, int>> stack{{start_, 0}};
  longest[size_t(start_)] = -3;
  while (!stack.empty() && !cyclic) {
    auto& [s, b] = stack.back();
    if (b == 256) {
      int64_t best = 0;
      for (int c = 0; c < 256; ++c) {
        const int32_t t = next_[size_t(s)][size_t(c)];
        if (t >= 0) best = std::max(best, longest[size_t(t)] + 1);
      }
      longest[size_t(s)] = best;
      stack.pop_back();
      continue;
    }
    const int32_t t = next_[size_t(s)][size_t(b++)];
    if (t < 0) continue;
    if (longest[size_t(t)] == -3) cyclic = true;
    if (longest[size_t(t)] == -2) {
      longest[size_t(t)] = -3;
      stack.push_back({t, 0});
    }
  }
  return cyclic ? -1 : longest[size_t(start_)];
}

ByteSet printable_ascii() {
  return byte_range(0x20, 0x7e);
}

RegexPtr json_string_chars(const ByteSet& chars) {
  ByteSet plain = chars & printable_ascii();
  std::vector<RegexPtr> alts;
  const bool quote = plain.test('"'), backslash = plain.test('\\');
  plain.reset('"');
  plain.reset('\\');
  if (plain.any()) alts.push_back(re_set(plain));
  if (quote) alts.push_back(re_literal("\\\""));
  if (backslash) alts.push_back(re_literal("\\\\"));
  return re_alt(std::move(alts));
}

namespace {

int first_byte(const ByteSet& set) {
  for (int b = 0; b < 256; ++b)
    if (set.test(size_t(b))) return b;
  return -1;
}

// A parsed piece of a pattern and how many levels of groups and quantifiers it nests.
struct Parsed {
  RegexPtr re;
  int depth = 0;
};

// Recursive-descent parser of the pattern subset; builds character sets over printable ASCII and turns
// them into JSON string bytes as it goes. Recursion follows open groups only, and both they and the
// depth of the tree built are held to kMaxPatternNesting.
class PatternParser {
 public:
  PatternParser(std::string_view text, const std::string& origin) : s_(text), origin_(origin) {}

  RegexPtr parse() {
    bool anchored_start = false, anchored_end = false;
    if (!s_.empty() && s_[0] == '^') {
      anchored_start = true;
      ++i_;
    }
    RegexPtr body = alternation().re;
    if (i_ < s_.size() && s_[i_] == '$') {
      anchored_end = true;
      ++i_;
    }
    if (i_ != s_.size()) fail(std::string("unexpected '") + s_[i_] + "'");
    const RegexPtr any = re_repeat(json_string_chars(printable_ascii()), 0, -1);
    std::vector<RegexPtr> parts;
    if (!anchored_start) parts.push_back(any);
    parts.push_back(body);
    if (!anchored_end) parts.push_back(any);
    return re_concat(std::move(parts));
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(
        origin_ + ": pattern " + quoted_excerpt(s_) + ": " + what + " at offset " + std::to_string(i_) +
        " (supported: literals, ., \\d \\w \\s, [classes], groups, |, * + ? {n,m}, ^ and $ at the ends)");
  }
  void check_depth(int depth) const {
    if (depth > kMaxPatternNesting)
      fail("groups and quantifiers nested more than " + std::to_string(kMaxPatternNesting) +
           " deep (kMaxPatternNesting)");
  }
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }

  Parsed alternation() {
    Parsed first = sequence();
    int depth = first.depth;
    std::vector<RegexPtr> alts{std::move(first.re)};
    while (at('|')) {
      ++i_;
      Parsed next = sequence();
      depth = std::max(depth, next.depth);
      alts.push_back(std::move(next.re));
    }
    return {re_alt(std::move(alts)), depth};
  }
  Parsed sequence() {
    std::vector<RegexPtr> parts;
    int depth = 0;
    while (i_ < s_.size() && !at('|') && !at(')')) {
      if (at('$') && i_ + 1 == s_.size()) break;
      Parsed part = quantified();
      depth = std::max(depth, part.depth);
      parts.push_back(std::move(part.re));
    }
    return {re_concat(std::move(parts)), depth};
  }
  int64_t number() {
    const size_t begin = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (begin == i_ || i_ - begin > 5) fail("bad repetition count");
    return std::stoll(std::string(s_.substr(begin, i_ - begin)));
  }
  bool at_quantifier() const {
    return at('*') || at('+') || at('?') ||
           (at('{') && i_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_ + 1])));
  }
  // An atom and at most one quantifier (ECMAScript: a quantifier of a quantifier, a{2}{3} or a**, is a
  // syntax error; a product of chained counts would also build automata far beyond what the text shows).
  Parsed quantified() {
    Parsed p = atom();
    for (bool quantified_once = false;; quantified_once = true) {
      if (quantified_once && at_quantifier()) fail("nothing to repeat (a quantifier after a quantifier)");
      int64_t lo = -1, hi = -1;
      if (at('*'))
        lo = 0, hi = -1, ++i_;
      else if (at('+'))
        lo = 1, hi = -1, ++i_;
      else if (at('?'))
        lo = 0, hi = 1, ++i_;
      else if (at('{') && i_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_ + 1]))) {
        ++i_;
        lo = number();
        hi = lo;
        if (at(',')) {
          ++i_;
          hi = at('}') ? -1 : number();
        }
        if (!at('}')) fail("unterminated {n,m}");
        ++i_;
        if (hi >= 0 && hi < lo) fail("{n,m} with m < n");
      } else {
        return p;
      }
      if (at('?')) ++i_;  // lazy: the same language
      check_depth(++p.depth);
      p.re = re_repeat(p.re, lo, hi);
    }
  }
  ByteSet escape_set(char c) {
    ByteSet set;
    switch (c) {
      case 'd':
        return byte_range('0', '9');
      case 'D':
        return printable_ascii() & ~byte_range('0', '9');
      case 'w':
        return byte_range('0', '9') | byte_range('a', 'z') | byte_range('A', 'Z') | byte_range('_', '_');
      case 'W':
        return printable_ascii() & ~escape_set('w');
      case 's':
        set.set(' ');
        return set;  // tab and newlines are not printable: only the space is produced
      case 'S':
        return printable_ascii() & ~byte_range(' ', ' ');
      default:
        break;
    }
    if (std::isalnum(static_cast<unsigned char>(c))) fail(std::string("unsupported escape \\") + c);
    if (c < 0x20 || c > 0x7e) fail("non-ASCII character");
    set.set(size_t(uint8_t(c)));
    return set;
  }
  Parsed atom() {
    if (i_ >= s_.size()) fail("unexpected end");
    const char c = s_[i_];
    if (c == '(') {
      check_depth(++open_groups_);  // before recursing: the parser's own stack is what this guards
      ++i_;
      if (at('?')) {
        if (i_ + 1 < s_.size() && s_[i_ + 1] == ':')
          i_ += 2;
        else
          fail("lookaround and named groups are unsupported");
      }
      Parsed inner = alternation();
      if (!at(')')) fail("unbalanced '('");
      ++i_;
      --open_groups_;
      check_depth(++inner.depth);
      return inner;
    }
    if (c == '[') return {json_string_chars(char_class()), 0};
    if (c == '.') {
      ++i_;
      return {json_string_chars(printable_ascii()), 0};
    }
    if (c == '\\') {
      if (i_ + 1 >= s_.size()) fail("trailing backslash");
      const char e = s_[i_ + 1];
      if (e == 'b' || e == 'B') fail("word boundaries are unsupported");
      if (std::isdigit(static_cast<unsigned char>(e)) && e != '0') fail("backreferences are unsupported");
      i_ += 2;
      return {json_string_chars(escape_set(e)), 0};
    }
    if (c == '^' || c == '$') fail("anchors are supported only at the ends");
    if (c == '*' || c == '+' || c == '?' || c == ')')
      fail(std::string("nothing to repeat before '") + c + "'");
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e)
      fail("non-ASCII character");
    ++i_;
    ByteSet set;
    set.set(size_t(uint8_t(c)));
    return {json_string_chars(set), 0};
  }
  ByteSet char_class() {
    ++i_;  // '['
    bool negate = false;
    if (at('^')) {
      negate = true;
      ++i_;
    }
    ByteSet set;
    bool first = true;
    while (i_ < s_.size() && (!at(']') || first)) {
      first = false;
      ByteSet item;
      int lo = -1;
      if (at('\\')) {
        if (i_ + 1 >= s_.size()) fail("trailing backslash");
        item = escape_set(s_[i_ + 1]);
        if (item.count() == 1) lo = first_byte(item);
        i_ += 2;
      } else {
        const unsigned char ch = static_cast<unsigned char>(s_[i_]);
        if (ch < 0x20 || ch > 0x7e) fail("non-ASCII character");
        lo = ch;
        item.set(ch);
        ++i_;
      }
      if (lo >= 0 && at('-') && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
        ++i_;
        int hi;
        if (at('\\')) {
          const ByteSet e = escape_set(s_[i_ + 1]);
          if (e.count() != 1) fail("bad class range");
          hi = first_byte(e);
          i_ += 2;
        } else {
          hi = static_cast<unsigned char>(s_[i_++]);
        }
        if (hi < lo) fail("class range out of order");
        item = byte_range(uint8_t(lo), uint8_t(hi));
      }
      set |= item;
    }
    if (!at(']')) fail("unterminated '['");
    ++i_;
    set &= printable_ascii();
    return negate ? (printable_ascii() & ~set) : set;
  }

  std::string_view s_;
  std::string origin_;
  size_t i_ = 0;
  int open_groups_ = 0;  // groups entered and not yet closed: the parser's recursion depth
};

}  // namespace

RegexPtr parse_pattern(std::string_view pattern, const std::string& origin) {
  return PatternParser(pattern, origin).parse();
}

}  // namespace canvas
