// Sudoku data: grids, a fast exact solver, a puzzle generator with unique solutions, validity-preserving
// augmentations, and the token layout the Sudoku models use.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <istream>
#include <string>
#include <vector>

#include "core/rng.h"

namespace canvas {

using SudokuGrid = std::array<uint8_t, 81>;  // row-major, 0 = blank, 1..9 digits

// Parses 81 characters ('1'-'9', '0' or '.' for blank); throws Error naming the problem (quoting at most
// the line's first 60 characters).
SudokuGrid parse_sudoku(const std::string& line);
std::string format_sudoku(const SudokuGrid& grid);  // 81 chars, '0' for blank
// 9 lines of 9 digits ('.' for blank) in boxes: "5 3 . | . 7 . | . . .", a "------+-------+------" line
// after the third and sixth rows; each line ends with '\n'. SudokuReader reads it back.
std::string format_sudoku_pretty(const SudokuGrid& grid);

// Puzzles from a text stream, in either layout: one puzzle a line (81 cells; the line's first field, so
// "PUZZLE SOLUTION" lines work too), or a grid of 9 lines of 9 cells ('|' and spaces ignored, lines of
// '-', '+', '=' and spaces skipped, so format_sudoku_pretty's output reads back). '.' or '0' is a
// blank; blank lines and '#' comment lines separate puzzles. A bad line is an Error naming the origin
// and the line, quoting at most its first 60 characters.
class SudokuReader {
 public:
  SudokuReader(std::istream& in, std::string origin) : in_(in), origin_(std::move(origin)) {}
  // The next puzzle; false at the end of the stream.
  bool next(SudokuGrid& puzzle);
  // "stdin line 4" or "stdin lines 4-12": where the puzzle next() returned was.
  std::string where() const;

 private:
  [[noreturn]] void fail(int64_t line, const std::string& what) const;
  std::istream& in_;
  std::string origin_;
  int64_t line_ = 0, first_ = 0, last_ = 0;
};

// Why no grid can complete a puzzle: two equal givens in one row, column or box (named, 1-based), or no
// solution at all (an exact search of at most a few million steps; a puzzle it cannot settle in that
// budget passes as solvable). "" when the puzzle has a solution.
std::string sudoku_unsolvable_reason(const SudokuGrid& puzzle);

// True when every row, column and box of a full grid holds 1..9 once.
bool is_valid_solution(const SudokuGrid& grid);
// True when the solution is valid and agrees with every given of the puzzle.
bool solves(const SudokuGrid& puzzle, const SudokuGrid& solution);
// Number of solutions, counting no further than `limit`; fills `first` with the first one found. With
// max_nodes > 0, -1 when the search visits that many cells before it can say.
int count_solutions(const SudokuGrid& puzzle, int limit, SudokuGrid* first = nullptr, int64_t max_nodes = 0);
int count_clues(const SudokuGrid& grid);

// A uniformly shuffled valid full grid.
SudokuGrid random_solution(Rng& rng);
// Removes givens in random order while the solution stays unique, down to `min_clues` (or until no
// further given can be removed).
SudokuGrid make_puzzle(const SudokuGrid& solution, int min_clues, Rng& rng);
// A symmetry of the Sudoku group: the transformed grid's cell i holds relabel[digit of cell source[i]]
// (relabel[0] = 0: blanks stay blank). Validity and uniqueness of solutions are preserved.
struct SudokuSymmetry {
  std::array<uint8_t, 81> source{};
  std::array<uint8_t, 10> relabel{};
};
// Uniform over digit relabellings, row swaps within bands, column swaps within stacks, band and stack
// swaps and transposition.
SudokuSymmetry random_symmetry(Rng& rng);
SudokuSymmetry identity_symmetry();
SudokuGrid apply_symmetry(const SudokuSymmetry& s, const SudokuGrid& grid);
// Applies one random symmetry of the Sudoku group (digit relabelling, row swaps within bands, column
// swaps within stacks, band and stack swaps, transposition) to a puzzle and its solution alike.
void augment(SudokuGrid& puzzle, SudokuGrid& solution, Rng& rng);

// What decides a blank cell of a (consistent) grid by the simplest rules: a naked single has one
// candidate digit left; a hidden single is the only place left for some digit in its row, column or
// box (and not a naked single). Filled cells and all other blanks are kNotASingle. `hidden_units`
// (optional) gets, per hidden single, the units that make it one as bits: 1 row, 2 column, 4 box.
enum SingleKind : uint8_t { kNotASingle = 0, kNakedSingle = 1, kHiddenSingle = 2 };
std::array<uint8_t, 81> single_kinds(const SudokuGrid& grid, std::array<uint8_t, 81>* hidden_units = nullptr);

// The blank cells a solver that knows only singles fills, in a random order it could take: each step
// picks uniformly one blank cell that is a naked single (one candidate digit left) or a hidden single
// (the only place left for a digit in its row, column or box) and writes the solution's digit there.
// Stops when no single is left (the rest needs harder deductions) or the grid is full. qqwing's simple
// puzzles need naked singles only, its easy ones hidden singles too (docs/training.md).
std::vector<int> singles_path(const SudokuGrid& puzzle, const SudokuGrid& solution, Rng& rng);

// The digits the Sudoku rules still allow in each cell of a grid: bit d (1..9) is set when no filled
// cell of the same row, column or box holds d. Filled cells get 0.
std::array<uint16_t, 81> sudoku_candidates(const SudokuGrid& grid);

// One pass of a decoder that fills a grid in place. `probs` holds, per cell, the model's probability of
// each digit (81 x 10, index cell * 10 + digit; digit 0 ignored); only blank cells are read. With
// `rules`, each blank cell's digits that conflict with a filled cell of its row, column or box (givens
// and cells committed before, including earlier in this pass) get probability 0 and the rest are
// renormalised over digits 1..9: the model chooses among the digits the rules still allow, so a cell
// with one digit left is certain (probability 1). No search and no backtracking: a cell with no digit
// left (an earlier commit was wrong) is never committed. Without `rules` the probabilities are used as
// given. Each blank cell's most probable digit is its choice and that probability its confidence;
// cells are committed in order of confidence: at least `min_commits` (>= 1), then every one whose
// confidence reaches `threshold` (0: none more). With `rules` a choice that a commit of this pass has
// made conflicting is skipped (it is reconsidered next pass). Writes the commits into `grid` and
// returns how many there were: >= 1 while the grid has a blank, except with `rules` when no blank cell
// has a digit left (0: the decoder is stuck).
int commit_sudoku_cells(SudokuGrid& grid, const std::vector<double>& probs, bool rules, double threshold,
                        int min_commits = 1);

// Rule-masked threshold decoding (commit_sudoku_cells with the rules) made a search: a pass whose best
// cell falls short of `threshold` commits only that cell, a guess, and remembers the state before it
// (with the pass's probabilities, so returning costs no forward pass). When a blank cell has no digit
// left (a dead end, known at once from the rules), the search returns to the latest guess, rules out the
// digit it tried there, and decides that state again with the model's probabilities for the other
// digits. Commits at or above the threshold are not revisited: a wrong one among them can leave the
// search without a way back. A complete grid is a solution (every commit keeps the rules, and a
// puzzle's solution is unique). `probs_of` gives the 81 x 10 digit probabilities of a grid (one or more
// forward passes, counted by the caller). Stops after `max_backtracks` returns (0: never returns, the
// plain decoder) or when no guess is left to revisit, with the grid reached so far.
struct SudokuSearchOptions {
  // After a pass's commits, the same probabilities renormalised over the digits the rules then allow, and
  // every cell reaching the threshold committed too, repeatedly, before the next forward pass (constraint
  // propagation on the kept probabilities: a cell left with one digit is committed without asking the
  // model again). Those cells are counted in SudokuSearchResult::propagated.
  bool propagate = false;
  // A guess goes to a cell with the fewest digits left (of those, the most confident) instead of the most
  // confident cell.
  bool guess_fewest = false;
};
struct SudokuSearchResult {
  SudokuGrid grid{};
  int64_t evaluations = 0;  // calls of probs_of
  int64_t backtracks = 0;   // returns to an earlier guess
  int64_t propagated = 0;   // cells committed by propagation, over the whole search (also those undone)
  bool dead_end = false;    // stopped at a grid with a cell no digit fits
};
SudokuSearchResult search_sudoku(const SudokuGrid& puzzle,
                                 const std::function<std::vector<double>(const SudokuGrid&)>& probs_of,
                                 double threshold, int64_t max_backtracks, const SudokuSearchOptions& options = {});

struct SudokuExample {
  SudokuGrid puzzle, solution;
  std::string difficulty;  // qqwing rating or "generated"
};
// Reads "PUZZLE SOLUTION [DIFFICULTY]" lines (blank lines and '#' comments skipped).
std::vector<SudokuExample> read_sudoku_file(const std::string& path);

// Token layout of canvas's Sudoku models: the puzzle's 81 characters ('0' for blanks) as byte tokens,
// followed by the 81 solution digits. The byte-level vocabulary maps byte b to id b.
constexpr int32_t kSudokuDigitToken = 48;  // id of '0'
std::vector<int32_t> sudoku_prompt_tokens(const SudokuGrid& puzzle);
// Reads a solution from 81 generated tokens; non-digit tokens become 0 (blank, counted wrong).
SudokuGrid sudoku_from_tokens(const std::vector<int32_t>& tokens);

}  // namespace canvas
