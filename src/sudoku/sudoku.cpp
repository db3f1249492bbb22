// Sudoku grids, solver, generator and augmentation.
#include "sudoku/sudoku.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "io/input_file.h"
#include "core/excerpt.h"

namespace canvas {
namespace {

inline int box_of(int cell) { return (cell / 27) * 3 + (cell % 9) / 3; }

// Bitmask search with the most-constrained-cell heuristic.
struct Solver {
  uint16_t rows[9] = {}, cols[9] = {}, boxes[9] = {};
  SudokuGrid grid{};
  int solutions = 0, limit = 1;
  SudokuGrid first{};
  int64_t nodes = 0, max_nodes = 0;  // max_nodes > 0: give up (out_of_budget) after that many
  bool out_of_budget = false;

  // The digits still possible in blank cell c, as bits 1..9.
  uint16_t candidates(int c) const { return uint16_t(~(rows[c / 9] | cols[c % 9] | boxes[box_of(c)]) & 0x3fe); }
  void set(int c, int d) {
    const uint16_t bit = uint16_t(1u << d);
    grid[size_t(c)] = uint8_t(d);
    rows[c / 9] |= bit, cols[c % 9] |= bit, boxes[box_of(c)] |= bit;
  }
  void clear(int c) {
    const uint16_t keep = uint16_t(~(1u << grid[size_t(c)]));
    grid[size_t(c)] = 0;
    rows[c / 9] &= keep, cols[c % 9] &= keep, boxes[box_of(c)] &= keep;
  }

  bool place_givens(const SudokuGrid& puzzle) {
    grid = puzzle;
    for (int c = 0; c < 81; ++c) {
      const int d = puzzle[size_t(c)];
      if (!d) continue;
      if (!(candidates(c) & (1u << d))) return false;
      set(c, d);
    }
    return true;
  }

  void search() {
    if (max_nodes > 0 && ++nodes > max_nodes) {
      out_of_budget = true;
      return;
    }
    int best = -1, best_count = 10;
    uint16_t best_free = 0;
    for (int c = 0; c < 81; ++c) {
      if (grid[size_t(c)]) continue;
      const uint16_t free = candidates(c);
      const int count = __builtin_popcount(free);
      if (count < best_count) {
        best = c, best_count = count, best_free = free;
        if (count <= 1) break;
      }
    }
    if (best < 0) {
      if (solutions++ == 0) first = grid;
      return;
    }
    for (int d = 1; d <= 9 && solutions < limit && !out_of_budget; ++d) {
      if (!(best_free & (1u << d))) continue;
      set(best, d);
      search();
      clear(best);
    }
  }
};

// Cell k (0..8) of unit u: rows 0..8, columns 9..17, boxes 18..26.
inline int unit_cell(int u, int k) {
  if (u < 9) return u * 9 + k;
  if (u < 18) return k * 9 + (u - 9);
  const int b = u - 18;
  return (b / 3) * 27 + (b % 3) * 3 + (k / 3) * 9 + k % 3;
}

template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[size_t(rng.below(i))]);
}

bool is_cell(char ch) { return ch == '.' || (ch >= '0' && ch <= '9'); }

}  // namespace

SudokuGrid parse_sudoku(const std::string& line) {
  check(line.size() == 81, "a Sudoku needs 81 characters, got " + std::to_string(line.size()) + ": " + quoted_excerpt(line));
  SudokuGrid g{};
  for (size_t i = 0; i < 81; ++i) {
    const char ch = line[i];
    if (ch == '.' || ch == '0') continue;
    check(ch >= '1' && ch <= '9', "invalid Sudoku character " + quoted_excerpt(std::string(1, ch)) + " at position " + std::to_string(i));
    g[i] = uint8_t(ch - '0');
  }
  return g;
}

std::string format_sudoku(const SudokuGrid& grid) {
  std::string s(81, '0');
  for (size_t i = 0; i < 81; ++i) s[i] = char('0' + grid[i]);
  return s;
}

bool is_valid_solution(const SudokuGrid& grid) {
  uint16_t rows[9] = {}, cols[9] = {}, boxes[9] = {};
  for (int c = 0; c < 81; ++c) {
    const int d = grid[size_t(c)];
    if (d < 1 || d > 9) return false;
    const uint16_t bit = uint16_t(1u << d);
    if ((rows[c / 9] | cols[c % 9] | boxes[box_of(c)]) & bit) return false;
    rows[c / 9] |= bit, cols[c % 9] |= bit, boxes[box_of(c)] |= bit;
  }
  return true;
}

bool solves(const SudokuGrid& puzzle, const SudokuGrid& solution) {
  if (!is_valid_solution(solution)) return false;
  for (size_t i = 0; i < 81; ++i)
    if (puzzle[i] && puzzle[i] != solution[i]) return false;
  return true;
}

int count_solutions(const SudokuGrid& puzzle, int limit, SudokuGrid* first, int64_t max_nodes) {
  Solver s;
  s.limit = limit;
  s.max_nodes = max_nodes;
  if (!s.place_givens(puzzle)) return 0;
  s.search();
  if (first && s.solutions > 0) *first = s.first;
  return s.out_of_budget && s.solutions < limit ? -1 : s.solutions;
}

std::string sudoku_unsolvable_reason(const SudokuGrid& puzzle) {
  static const char* kUnit[3] = {"row", "column", "box"};
  for (int u = 0; u < 27; ++u) {
    int at[10] = {};  // digit -> 1 + its cell's index in the unit
    for (int k = 0; k < 9; ++k) {
      const int d = puzzle[size_t(unit_cell(u, k))];
      if (!d) continue;
      if (at[d])
        return std::string(kUnit[u / 9]) + " " + std::to_string(u % 9 + 1) + " holds two " + std::to_string(d) +
               "s (cells " + std::to_string(at[d]) + " and " + std::to_string(k + 1) + " of that " + kUnit[u / 9] +
               ")";
      at[d] = k + 1;
    }
  }
  // Bitmask search with the fewest-candidates rule settles real puzzles in far fewer steps than this.
  constexpr int64_t kMaxNodes = 2000000;
  if (count_solutions(puzzle, 1, nullptr, kMaxNodes) == 0) return "it has no solution";
  return "";
}

std::string format_sudoku_pretty(const SudokuGrid& grid) {
  std::string out;
  for (int r = 0; r < 9; ++r) {
    if (r == 3 || r == 6) out += "------+-------+------\n";
    for (int c = 0; c < 9; ++c) {
      if (c) out += (c == 3 || c == 6) ? " | " : " ";
      const int d = grid[size_t(r * 9 + c)];
      out += d ? char('0' + d) : '.';
    }
    out += '\n';
  }
  return out;
}

void SudokuReader::fail(int64_t line, const std::string& what) const {
  throw Error(origin_ + " line " + std::to_string(line) + ": " + what);
}

std::string SudokuReader::where() const {
  return origin_ + (first_ == last_ ? " line " + std::to_string(first_)
                                    : " lines " + std::to_string(first_) + "-" + std::to_string(last_));
}

bool SudokuReader::next(SudokuGrid& puzzle) {
  std::string cells;  // of a 9-line grid read so far
  std::string line;
  while (std::getline(in_, line)) {
    ++line_;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (line.empty() || line[0] == '#') {
      if (cells.empty()) continue;
      fail(line_, "a grid needs 9 rows of 9 cells; this one ends after " + std::to_string(cells.size() / 9) +
                      " rows (it began on line " + std::to_string(first_) + ")");
    }
    if (line.find_first_not_of("-+=| ") == std::string::npos) continue;  // a box separator
    std::string row;  // the line without the separators a grid row may hold
    for (char ch : line)
      if (ch != ' ' && ch != '|' && ch != '\t') row += ch;
    const std::string field = line.substr(0, line.find(' '));
    if (cells.empty() && (field.size() == 81 || row.size() == 81)) {  // a one-line puzzle
      first_ = last_ = line_;
      try {
        puzzle = parse_sudoku(field.size() == 81 ? field : row);
      } catch (const Error& e) {
        fail(line_, e.what());
      }
      return true;
    }
    if (row.size() != 9)
      fail(line_, "expected a puzzle of 81 cells on one line, or a row of 9 cells of a 9-line grid; got " +
                      std::to_string(row.size()) + " characters: " + quoted_excerpt(line));
    for (size_t i = 0; i < 9; ++i)
      if (!is_cell(row[i]))
        fail(line_, "invalid Sudoku character " + quoted_excerpt(std::string(1, row[i])) + " in row " +
                        quoted_excerpt(line) + " ('1'-'9', or '.' or '0' for a blank)");
    if (cells.empty()) first_ = line_;
    cells += row;
    if (cells.size() == 81) {
      last_ = line_;
      puzzle = parse_sudoku(cells);
      return true;
    }
  }
  if (!cells.empty())
    fail(line_, "a grid needs 9 rows of 9 cells; the input ends after " + std::to_string(cells.size() / 9) +
                    " rows (it began on line " + std::to_string(first_) + ")");
  return false;
}

int count_clues(const SudokuGrid& grid) {
  return int(std::count_if(grid.begin(), grid.end(), [](uint8_t d) { return d != 0; }));
}

SudokuGrid random_solution(Rng& rng) {
  // Solve an empty grid with shuffled first row; then apply a random symmetry for uniformity.
  SudokuGrid puzzle{};
  std::vector<int> digits{1, 2, 3, 4, 5, 6, 7, 8, 9};
  shuffle(digits, rng);
  for (int i = 0; i < 9; ++i) puzzle[size_t(i)] = uint8_t(digits[size_t(i)]);
  SudokuGrid solution{};
  count_solutions(puzzle, 1, &solution);
  SudokuGrid dummy = solution;
  augment(dummy, solution, rng);
  return solution;
}

SudokuGrid make_puzzle(const SudokuGrid& solution, int min_clues, Rng& rng) {
  SudokuGrid puzzle = solution;
  std::vector<int> order(81);
  std::iota(order.begin(), order.end(), 0);
  shuffle(order, rng);
  int clues = 81;
  for (int cell : order) {
    if (clues <= min_clues) break;
    const uint8_t keep = puzzle[size_t(cell)];
    puzzle[size_t(cell)] = 0;
    if (count_solutions(puzzle, 2) != 1) {
      puzzle[size_t(cell)] = keep;
    } else {
      --clues;
    }
  }
  return puzzle;
}

SudokuSymmetry random_symmetry(Rng& rng) {
  std::vector<int> relabel{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<int> tail(relabel.begin() + 1, relabel.end());
  shuffle(tail, rng);
  std::copy(tail.begin(), tail.end(), relabel.begin() + 1);
  // Row permutation: bands shuffled, rows within each band shuffled; the same for columns.
  auto line_permutation = [&]() {
    std::vector<int> bands{0, 1, 2};
    shuffle(bands, rng);
    std::vector<int> perm;
    for (int b : bands) {
      std::vector<int> within{0, 1, 2};
      shuffle(within, rng);
      for (int w : within) perm.push_back(b * 3 + w);
    }
    return perm;
  };
  const std::vector<int> row_perm = line_permutation(), col_perm = line_permutation();
  const bool transpose = rng.below(2) == 1;
  SudokuSymmetry s;
  for (int d = 0; d < 10; ++d) s.relabel[size_t(d)] = uint8_t(relabel[size_t(d)]);
  for (int r = 0; r < 9; ++r)
    for (int c = 0; c < 9; ++c) {
      const int sr = row_perm[size_t(r)], sc = col_perm[size_t(c)];
      s.source[size_t(r * 9 + c)] = uint8_t(transpose ? sc * 9 + sr : sr * 9 + sc);
    }
  return s;
}

SudokuSymmetry identity_symmetry() {
  SudokuSymmetry s;
  for (size_t i = 0; i < 81; ++i) s.source[i] = uint8_t(i);
  for (size_t d = 0; d < 10; ++d) s.relabel[d] = uint8_t(d);
  return s;
}

SudokuGrid apply_symmetry(const SudokuSymmetry& s, const SudokuGrid& g) {
  SudokuGrid out{};
  for (size_t i = 0; i < 81; ++i) out[i] = s.relabel[g[s.source[i]]];
  return out;
}

void augment(SudokuGrid& puzzle, SudokuGrid& solution, Rng& rng) {
  const SudokuSymmetry s = random_symmetry(rng);
  puzzle = apply_symmetry(s, puzzle);
  solution = apply_symmetry(s, solution);
}

namespace {

// The blank cells' kinds of single (SingleKind) given the solver's candidate masks; `units` (optional)
// gets each hidden single's units as bits (1 row, 2 column, 4 box).
std::array<uint8_t, 81> kinds_of(const Solver& s, std::array<uint8_t, 81>* units = nullptr) {
  std::array<uint16_t, 81> candidates{};
  std::array<uint8_t, 81> kind{};
  for (int c = 0; c < 81; ++c)
    if (!s.grid[size_t(c)]) {
      candidates[size_t(c)] = s.candidates(c);
      if (__builtin_popcount(candidates[size_t(c)]) == 1) kind[size_t(c)] = kNakedSingle;
    }
  for (int u = 0; u < 27; ++u)  // a digit with one place left in a row, column or box: hidden single
    for (int d = 1; d <= 9; ++d) {
      int count = 0, where = -1;
      for (int k = 0; k < 9; ++k)
        if (candidates[size_t(unit_cell(u, k))] & (1u << d)) ++count, where = unit_cell(u, k);
      if (count == 1 && kind[size_t(where)] != kNakedSingle) {
        kind[size_t(where)] = kHiddenSingle;
        if (units) (*units)[size_t(where)] |= uint8_t(1 << (u / 9));
      }
    }
  return kind;
}

}  // namespace

std::array<uint8_t, 81> single_kinds(const SudokuGrid& grid, std::array<uint8_t, 81>* hidden_units) {
  Solver s;
  check(s.place_givens(grid), "single_kinds: the grid contradicts itself");
  if (hidden_units) hidden_units->fill(0);
  return kinds_of(s, hidden_units);
}

std::vector<int> singles_path(const SudokuGrid& puzzle, const SudokuGrid& solution, Rng& rng) {
  Solver s;
  check(s.place_givens(puzzle), "singles_path: the puzzle contradicts itself");
  std::vector<int> path, ready;
  for (;;) {
    const std::array<uint8_t, 81> kind = kinds_of(s);
    ready.clear();
    for (int c = 0; c < 81; ++c)
      if (kind[size_t(c)] != kNotASingle) ready.push_back(c);
    if (ready.empty()) return path;
    const int c = ready[size_t(rng.below(ready.size()))];
    s.set(c, solution[size_t(c)]);
    path.push_back(c);
  }
}

std::array<uint16_t, 81> sudoku_candidates(const SudokuGrid& grid) {
  uint16_t rows[9] = {}, cols[9] = {}, boxes[9] = {};
  for (int c = 0; c < 81; ++c)
    if (const int d = grid[size_t(c)]) {
      const uint16_t bit = uint16_t(1u << d);
      rows[c / 9] |= bit, cols[c % 9] |= bit, boxes[box_of(c)] |= bit;
    }
  std::array<uint16_t, 81> out{};
  for (int c = 0; c < 81; ++c)
    if (!grid[size_t(c)]) out[size_t(c)] = uint16_t(~(rows[c / 9] | cols[c % 9] | boxes[box_of(c)]) & 0x3fe);
  return out;
}

namespace {
// A digit conflicts with a filled cell of c's row, column or box.
bool conflicts(const SudokuGrid& grid, int c, int d) {
  for (int k = 0; k < 9; ++k)
    if (grid[size_t(unit_cell(c / 9, k))] == d || grid[size_t(unit_cell(9 + c % 9, k))] == d ||
        grid[size_t(unit_cell(18 + box_of(c), k))] == d)
      return true;
  return false;
}

struct Choice {
  int cell, digit;
  double p;
};

// Each blank cell's most probable digit and its confidence, most confident first (commit_sudoku_cells).
// With `allowed` (the rules' candidates, less any digits a search ruled out) only those digits count and
// the probabilities are renormalised over them; a cell with none is left out.
std::vector<Choice> ranked_choices(const SudokuGrid& grid, const std::vector<double>& probs,
                                   const std::array<uint16_t, 81>* allowed) {
  check(probs.size() == 81 * 10, "commit_sudoku_cells: probs must hold 81 x 10 values");
  std::vector<Choice> choices;
  for (int c = 0; c < 81; ++c) {
    if (grid[size_t(c)]) continue;
    const uint16_t mask = allowed ? (*allowed)[size_t(c)] : uint16_t(0x3fe);
    if (!mask) continue;  // no digit left: never committed (a dead end)
    double total = 0, best_p = -1;
    int best = 0;
    for (int d = 1; d <= 9; ++d) {
      if (!(mask & (1u << d))) continue;
      const double p = std::max(probs[size_t(c * 10 + d)], 0.0);
      total += p;
      if (p > best_p) best_p = p, best = d;
    }
    // With one digit left the renormalised probability is 1 whatever the model says.
    // Without the mask the confidence is the model's probability as given.
    const double p = !allowed                        ? best_p
                     : __builtin_popcount(mask) == 1 ? 1.0
                     : total > 0                     ? best_p / total
                                                     : 0.0;
    choices.push_back({c, best, p});
  }
  std::stable_sort(choices.begin(), choices.end(), [](const Choice& a, const Choice& b) { return a.p > b.p; });
  return choices;
}

// Commits ranked choices: at least min_commits, then every one at or above threshold (0: none more);
// with `rules` a choice that an earlier commit of this call made conflicting is skipped.
int commit_choices(SudokuGrid& grid, const std::vector<Choice>& choices, bool rules, double threshold, int min_commits) {
  int committed = 0;
  for (const Choice& ch : choices) {
    if (committed >= std::max(min_commits, 1) && !(threshold > 0 && ch.p >= threshold)) break;
    if (rules && conflicts(grid, ch.cell, ch.digit)) continue;  // made conflicting by this pass's commits
    grid[size_t(ch.cell)] = uint8_t(ch.digit);
    ++committed;
  }
  return committed;
}
}  // namespace

int commit_sudoku_cells(SudokuGrid& grid, const std::vector<double>& probs, bool rules, double threshold,
                        int min_commits) {
  const std::array<uint16_t, 81> allowed = rules ? sudoku_candidates(grid) : std::array<uint16_t, 81>{};
  return commit_choices(grid, ranked_choices(grid, probs, rules ? &allowed : nullptr), rules, threshold, min_commits);
}

SudokuSearchResult search_sudoku(const SudokuGrid& puzzle,
                                 const std::function<std::vector<double>(const SudokuGrid&)>& probs_of,
                                 double threshold, int64_t max_backtracks, const SudokuSearchOptions& options) {
  check(threshold > 0 && threshold <= 1, "search_sudoku: the threshold must be in (0, 1]");
  struct State {
    SudokuGrid grid{};
    std::array<uint16_t, 81> ruled_out{};  // digits a return to this state excluded, per cell
    std::vector<double> probs;             // the model's probabilities at this grid (empty: not computed)
  };
  SudokuSearchResult out;
  State state{puzzle, {}, {}};
  std::vector<State> guesses;  // the states before each guess, the guessed digit already ruled out
  // The digits each blank cell may still take (the rules, less what returns ruled out), and whether the
  // grid has a blank and whether some blank has no digit left.
  std::array<uint16_t, 81> allowed{};
  bool blank = false, dead = false;
  auto update_allowed = [&] {
    allowed = sudoku_candidates(state.grid);
    blank = dead = false;
    for (int c = 0; c < 81; ++c) {
      if (state.grid[size_t(c)]) continue;
      blank = true;
      allowed[size_t(c)] &= uint16_t(~state.ruled_out[size_t(c)]);
      dead = dead || !allowed[size_t(c)];
    }
  };
  for (;;) {
    update_allowed();
    if (!blank) break;
    if (dead) {
      if (guesses.empty() || out.backtracks >= max_backtracks) {
        out.dead_end = true;
        break;
      }
      state = std::move(guesses.back());
      guesses.pop_back();
      ++out.backtracks;
      continue;
    }
    if (state.probs.empty()) {
      state.probs = probs_of(state.grid);
      ++out.evaluations;
    }
    std::vector<Choice> choices = ranked_choices(state.grid, state.probs, &allowed);
    if (choices.front().p < threshold && options.guess_fewest) {
      // A guess in a cell with the fewest digits left (the most confident such cell): the model picks
      // among two or three digits there, and a wrong pick is found soon.
      const auto fewest = std::min_element(choices.begin(), choices.end(), [&](const Choice& a, const Choice& b) {
        const int na = __builtin_popcount(allowed[size_t(a.cell)]), nb = __builtin_popcount(allowed[size_t(b.cell)]);
        return na != nb ? na < nb : a.p > b.p;
      });
      std::rotate(choices.begin(), fewest, fewest + 1);
    }
    if (choices.front().p < threshold && max_backtracks > 0) {
      State before = state;  // a guess: remember the state with this digit ruled out there
      before.ruled_out[size_t(choices.front().cell)] |= uint16_t(1u << choices.front().digit);
      guesses.push_back(std::move(before));
    }
    commit_choices(state.grid, choices, true, threshold, 1);
    // Propagation: the same probabilities, renormalised over the digits the rules allow after these
    // commits, until no cell reaches the threshold (a cell left with one digit is certain).
    while (options.propagate) {
      update_allowed();
      if (!blank || dead) break;
      const std::vector<Choice> more = ranked_choices(state.grid, state.probs, &allowed);
      if (more.front().p < threshold) break;
      out.propagated += commit_choices(state.grid, more, true, threshold, 1);
    }
    state.probs.clear();
  }
  out.grid = state.grid;
  return out;
}

std::vector<SudokuExample> read_sudoku_file(const std::string& path) {
  std::istringstream in(read_file_bounded(path, kMaxCorpusBytes, "Sudoku file", "kMaxCorpusBytes"));
  std::vector<SudokuExample> out;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string puzzle, solution, difficulty;
    fields >> puzzle >> solution >> difficulty;
    try {
      SudokuExample e;
      e.puzzle = parse_sudoku(puzzle);
      e.solution = parse_sudoku(solution);
      e.difficulty = difficulty.empty() ? "unrated" : difficulty;
      check(solves(e.puzzle, e.solution), "the solution does not solve the puzzle");
      out.push_back(e);
    } catch (const Error& err) {
      throw Error(path + ":" + std::to_string(line_no) + ": " + err.what());
    }
  }
  return out;
}

std::vector<int32_t> sudoku_prompt_tokens(const SudokuGrid& puzzle) {
  std::vector<int32_t> tokens(81);
  for (size_t i = 0; i < 81; ++i) tokens[i] = kSudokuDigitToken + puzzle[i];
  return tokens;
}

SudokuGrid sudoku_from_tokens(const std::vector<int32_t>& tokens) {
  SudokuGrid g{};
  for (size_t i = 0; i < 81 && i < tokens.size(); ++i) {
    const int32_t d = tokens[i] - kSudokuDigitToken;
    g[i] = (d >= 1 && d <= 9) ? uint8_t(d) : 0;
  }
  return g;
}

}  // namespace canvas
