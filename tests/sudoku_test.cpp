// Sudoku data: solver, generator uniqueness, augmentation validity, parsing errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "train/data.h"
#include "sudoku/sudoku.h"
#include "sudoku/sudoku_task.h"

namespace canvas {
namespace {

const char* kPuzzle = "25....3...........64.........2756..4....1.7...654..1...18543.....42.8.5....1.....";
const char* kSolution = "251974386893621547647835219132756894489312765765489123918543672374268951526197438";

TEST(Sudoku, SolverFindsTheUniqueSolution) {
  const SudokuGrid puzzle = parse_sudoku(kPuzzle);
  SudokuGrid solution{};
  EXPECT_EQ(count_solutions(puzzle, 2, &solution), 1);
  EXPECT_EQ(format_sudoku(solution), kSolution);
  EXPECT_TRUE(solves(puzzle, solution));
  SudokuGrid wrong = solution;
  std::swap(wrong[0], wrong[1]);
  EXPECT_FALSE(solves(puzzle, wrong));
  EXPECT_FALSE(is_valid_solution(puzzle));
  EXPECT_EQ(count_solutions(SudokuGrid{}, 2), 2);  // the empty grid has many
}

TEST(Sudoku, GeneratedPuzzlesAreUniqueAndAugmentationKeepsValidity) {
  Rng rng(7);
  for (int i = 0; i < 20; ++i) {
    const SudokuGrid solution = random_solution(rng);
    ASSERT_TRUE(is_valid_solution(solution));
    SudokuGrid puzzle = make_puzzle(solution, 24, rng);
    EXPECT_EQ(count_solutions(puzzle, 2), 1);
    EXPECT_GE(count_clues(puzzle), 24);
    EXPECT_LT(count_clues(puzzle), 40);
    SudokuGrid aug_puzzle = puzzle, aug_solution = solution;
    augment(aug_puzzle, aug_solution, rng);
    EXPECT_TRUE(solves(aug_puzzle, aug_solution));
    EXPECT_EQ(count_clues(aug_puzzle), count_clues(puzzle));
    EXPECT_EQ(count_solutions(aug_puzzle, 2), 1);
  }
}

// A symmetry is a permutation of the cells and of the digits (blank fixed), and it maps a puzzle and
// its solution to a puzzle and its solution.
TEST(Sudoku, SymmetriesPermuteCellsAndDigits) {
  Rng rng(11);
  const SudokuGrid puzzle = parse_sudoku(kPuzzle), solution = parse_sudoku(kSolution);
  bool moved = false;
  for (int i = 0; i < 20; ++i) {
    const SudokuSymmetry s = random_symmetry(rng);
    std::array<int, 81> cells{};
    std::array<int, 10> digits{};
    for (uint8_t src : s.source) ++cells[src];
    for (uint8_t d : s.relabel) ++digits[d];
    for (int n : cells) EXPECT_EQ(n, 1);
    for (int n : digits) EXPECT_EQ(n, 1);
    EXPECT_EQ(s.relabel[0], 0);
    const SudokuGrid p = apply_symmetry(s, puzzle), q = apply_symmetry(s, solution);
    EXPECT_TRUE(solves(p, q));
    EXPECT_EQ(count_solutions(p, 2), 1);
    moved = moved || p != puzzle;
  }
  EXPECT_TRUE(moved);
}

TEST(Sudoku, TokensRoundTrip) {
  const SudokuGrid puzzle = parse_sudoku(kPuzzle);
  const std::vector<int32_t> tokens = sudoku_prompt_tokens(puzzle);
  ASSERT_EQ(tokens.size(), 81u);
  EXPECT_EQ(tokens[0], '2');
  EXPECT_EQ(tokens[2], '0');
  EXPECT_EQ(format_sudoku(sudoku_from_tokens(sudoku_prompt_tokens(parse_sudoku(kSolution)))), kSolution);
}

TEST(Sudoku, BadLinesAreClearErrors) {
  EXPECT_THROW(parse_sudoku("123"), Error);
  EXPECT_THROW(parse_sudoku(std::string(80, '1') + "x"), Error);
  EXPECT_EQ(format_sudoku(parse_sudoku(std::string(81, '.'))), std::string(81, '0'));
  // A huge line is quoted cut short, not whole (issue 35: an 8 MB line became an 8 MB message).
  try {
    parse_sudoku(std::string(8 << 20, '7') + "\x01");
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_LT(what.size(), 200u) << what.substr(0, 300);
    EXPECT_NE(what.find("got 8388609: '" + std::string(60, '7') + "'... (8388609 characters)"), std::string::npos) << what;
  }
}

// One-line puzzles and 9-line grids, '.' or '0' for blanks, read alike; format_sudoku_pretty reads back;
// bad lines name their line and quote at most 60 characters of it.
TEST(SudokuReader, ReadsOneLineAndNineLineGrids) {
  const SudokuGrid puzzle = parse_sudoku(kPuzzle);
  std::string grid;  // the puzzle as 9 rows of 9, '0' for blanks, spaces between some cells
  for (int r = 0; r < 9; ++r) {
    for (int c = 0; c < 9; ++c) grid += std::string(c == 4 ? " " : "") + char('0' + puzzle[size_t(r * 9 + c)]);
    grid += "\n";
  }
  std::istringstream in(std::string(kPuzzle) + "\n\n" + grid + "\n" + format_sudoku_pretty(puzzle) + "\n# comment\n" +
                        std::string(kPuzzle) + " " + kSolution + " easy\r\n");
  SudokuReader reader(in, "stdin");
  std::vector<std::string> where;
  SudokuGrid got;
  int n = 0;
  while (reader.next(got)) {
    EXPECT_EQ(got, puzzle) << reader.where();
    where.push_back(reader.where());
    ++n;
  }
  EXPECT_EQ(n, 4);
  EXPECT_EQ(where, (std::vector<std::string>{"stdin line 1", "stdin lines 3-11", "stdin lines 13-23", "stdin line 26"}));
  const std::string pretty = format_sudoku_pretty(parse_sudoku(kSolution));
  EXPECT_EQ(pretty.substr(0, 44), "2 5 1 | 9 7 4 | 3 8 6\n8 9 3 | 6 2 1 | 5 4 7\n");
  EXPECT_EQ(std::count(pretty.begin(), pretty.end(), '\n'), 11);
  EXPECT_NE(pretty.find("------+-------+------\n"), std::string::npos);
  EXPECT_NE(format_sudoku_pretty(puzzle).find(". . . | . . ."), std::string::npos);  // row 2 is blank

  auto error_of = [](const std::string& text) {
    std::istringstream bad(text);
    SudokuReader reader(bad, "stdin");
    SudokuGrid g;
    try {
      while (reader.next(g)) {
      }
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string five_rows = error_of(grid.substr(0, 55) + "\n" + kPuzzle + "\n");  // rows are 11 bytes
  EXPECT_NE(five_rows.find("stdin line 6: a grid needs 9 rows of 9 cells; this one ends after 5 rows (it began on line 1)"),
            std::string::npos)
      << five_rows;
  EXPECT_NE(error_of(grid.substr(0, 33)).find("the input ends after 3 rows"), std::string::npos);
  EXPECT_NE(error_of("123456789\n12345678x\n").find("stdin line 2: invalid Sudoku character 'x'"), std::string::npos);
  const std::string long_line = error_of(std::string(8 << 20, '5') + "\n");
  EXPECT_NE(long_line.find("stdin line 1: expected a puzzle of 81 cells"), std::string::npos) << long_line.substr(0, 300);
  EXPECT_NE(long_line.find("'... (8388608 characters)"), std::string::npos) << long_line.substr(0, 300);
  EXPECT_LT(long_line.size(), 300u);
  EXPECT_NE(error_of(std::string(80, '1') + "\x1b\n").find("'\\x1b'"), std::string::npos) << error_of(std::string(80, '1') + "\x1b\n");
}

// Contradictory givens are named (unit, digit, cells); a puzzle without contradictions but no solution
// is told apart; a solvable one passes.
TEST(Sudoku, UnsolvablePuzzlesAreExplained) {
  EXPECT_EQ(sudoku_unsolvable_reason(parse_sudoku(kPuzzle)), "");
  EXPECT_EQ(sudoku_unsolvable_reason(SudokuGrid{}), "");
  std::string row = kPuzzle;
  row[5] = '5';  // row 1 already has 5 in its 2nd cell
  EXPECT_EQ(sudoku_unsolvable_reason(parse_sudoku(row)), "row 1 holds two 5s (cells 2 and 6 of that row)");
  std::string column(81, '.');
  column[4] = '3', column[76] = '3';  // column 5, rows 1 and 9
  EXPECT_EQ(sudoku_unsolvable_reason(parse_sudoku(column)), "column 5 holds two 3s (cells 1 and 9 of that column)");
  std::string box(81, '.');
  box[0] = '8', box[20] = '8';  // box 1: its cells 1 and 9
  EXPECT_EQ(sudoku_unsolvable_reason(parse_sudoku(box)), "box 1 holds two 8s (cells 1 and 9 of that box)");
  // Row 1 holds 1-8, column 9 a 9 further down: the last cell of row 1 has no digit left.
  std::string stuck = "12345678." + std::string(72, '.');
  stuck[9 * 5 + 8] = '9';
  EXPECT_EQ(sudoku_unsolvable_reason(parse_sudoku(stuck)), "it has no solution");
}

// qqwing's ratings (docs/training.md): singles (naked and hidden) solve every held-out simple and easy
// puzzle and no intermediate or expert one; a path writes each blank at most once. Detecting too few
// singles leaves easy puzzles unfinished, too many finishes harder ones.
TEST(Sudoku, SinglesPathSolvesSimpleAndEasyOnly) {
  Rng rng(3);
  for (const std::string rating : {"simple", "easy", "intermediate", "expert"}) {
    const std::vector<SudokuExample> data =
        read_sudoku_file(test::source_path("data/sudoku/heldout-" + rating + ".txt"));
    int complete = 0;
    for (size_t i = 0; i < 20; ++i) {
      const SudokuExample& e = data[i];
      const std::vector<int> path = singles_path(e.puzzle, e.solution, rng);
      EXPECT_EQ(std::set<int>(path.begin(), path.end()).size(), path.size());
      for (int c : path) EXPECT_EQ(e.puzzle[size_t(c)], 0) << rating << " " << i;
      complete += int(path.size()) == 81 - count_clues(e.puzzle);
    }
    EXPECT_EQ(complete, rating == "simple" || rating == "easy" ? 20 : 0) << rating;
  }
}

// single_kinds against a direct reading of the rules: a naked single's peers (row, column, box) show
// eight distinct digits; a hidden single is not naked and is the one blank of some row, column or box
// whose peers do not show its solution digit. Checked over held-out easy puzzles, each also part-filled.
TEST(Sudoku, SingleKindsFollowTheRules) {
  const auto peers = [](int a, int b) {
    return a != b && (a / 9 == b / 9 || a % 9 == b % 9 || (a / 27 == b / 27 && a % 9 / 3 == b % 9 / 3));
  };
  const std::vector<SudokuExample> data = read_sudoku_file(test::source_path("data/sudoku/heldout-easy.txt"));
  Rng rng(5);
  int naked = 0, hidden = 0;
  for (size_t i = 0; i < 10; ++i)
    for (const int filled : {0, 15}) {
      SudokuGrid g = data[i].puzzle;
      const std::vector<int> path = singles_path(g, data[i].solution, rng);
      for (int k = 0; k < filled && k < int(path.size()); ++k) g[size_t(path[size_t(k)])] = data[i].solution[size_t(path[size_t(k)])];
      const std::array<uint8_t, 81> kind = single_kinds(g);
      for (int c = 0; c < 81; ++c) {
        std::set<int> seen;
        for (int p = 0; p < 81; ++p)
          if (peers(c, p) && g[size_t(p)]) seen.insert(g[size_t(p)]);
        const bool is_naked = !g[size_t(c)] && seen.size() == 8;
        bool is_hidden = false;  // the digit d fits nowhere else in one of c's units
        for (int unit = 0; unit < 3 && !g[size_t(c)] && !is_naked; ++unit)
          for (int d = 1; d <= 9; ++d) {
            const auto fits = [&](int x) {
              for (int p = 0; p < 81; ++p)
                if (peers(x, p) && g[size_t(p)] == d) return false;
              return !g[size_t(x)];
            };
            if (!fits(c)) continue;
            bool elsewhere = false;
            for (int x = 0; x < 81; ++x) {
              const bool same = unit == 0 ? x / 9 == c / 9 : unit == 1 ? x % 9 == c % 9 : (x / 27 == c / 27 && x % 9 / 3 == c % 9 / 3);
              if (same && x != c && fits(x)) elsewhere = true;
            }
            if (!elsewhere) is_hidden = true;
          }
        const uint8_t want = is_naked ? kNakedSingle : is_hidden ? kHiddenSingle : kNotASingle;
        EXPECT_EQ(kind[size_t(c)], want) << i << " " << filled << " " << c;
        naked += want == kNakedSingle;
        hidden += want == kHiddenSingle;
      }
    }
  EXPECT_GT(naked, 0);
  EXPECT_GT(hidden, 0);
}

// sudoku_states = decoder with sudoku_hidden_weight: the hidden singles of each state, and only they,
// carry the weight in the batch.
TEST(Sudoku, HiddenSinglesCarryTheirWeight) {
  const auto decoder = make_sudoku_source("infill", 24, 30, {}, 2, 1, "decoder", 10.f);
  Rng rng(4);
  std::vector<train::Example> examples;
  for (int n = 0; n < 8; ++n) examples.push_back(decoder->sample(rng));
  const train::ObjectiveBatch batch = train::masked_diffusion_batch(examples, train::kByteMask, 1e-3f, rng);
  int weighted = 0;
  for (size_t s = 0; s < examples.size(); ++s) {
    SudokuGrid state{};
    for (size_t i = 0; i < 81; ++i) state[i] = examples[s].fixed[i] ? uint8_t(examples[s].tokens[i] - kSudokuDigitToken) : 0;
    const std::array<uint8_t, 81> kind = single_kinds(state);
    for (size_t i = 0; i < 81; ++i) {
      const float want = examples[s].fixed[i] ? 0.f : kind[i] == kHiddenSingle ? 10.f : 1.f;
      EXPECT_EQ(batch.weights[s * 81 + i], want) << s << " " << i;
      weighted += want == 10.f;
    }
  }
  EXPECT_GT(weighted, 0);
  EXPECT_THROW(make_sudoku_source("infill", 24, 30, {}, 2, 1, "singles", 10.f), Error);
}

// sudoku_states = singles: the same puzzle as the plain source (same generator draws), with the givens
// and the first k cells of a singles path fixed; k varies, so some examples show more than the givens.
TEST(Sudoku, SinglesStatesFixPartOfTheSolversPath) {
  const auto plain = make_sudoku_source("infill", 24, 30, {}, 2, 1, "random");
  const auto singles = make_sudoku_source("infill", 24, 30, {}, 2, 1, "singles");
  int more = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    Rng a(seed), b(seed);
    const train::Example p = plain->sample(a), q = singles->sample(b);
    ASSERT_EQ(p.tokens, q.tokens);
    for (size_t i = 0; i < 81; ++i) EXPECT_GE(q.fixed[i], p.fixed[i]);
    more += std::accumulate(q.fixed.begin(), q.fixed.end(), 0) > std::accumulate(p.fixed.begin(), p.fixed.end(), 0);
  }
  EXPECT_GE(more, 5);
  EXPECT_THROW(make_sudoku_source("sequence", 24, 30, {}, 2, 1, "singles"), Error);
}

// sudoku_states = decoder: the singles states again, with every other blank masked and scored with
// weight 1 (t = 1), which is what a decoder that committed those cells sees; plain examples keep a random t.
TEST(Sudoku, DecoderStatesMaskEveryOtherBlank) {
  const auto singles = make_sudoku_source("infill", 24, 30, {}, 2, 1, "singles");
  const auto decoder = make_sudoku_source("infill", 24, 30, {}, 2, 1, "decoder");
  std::vector<train::Example> examples;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    Rng a(seed), b(seed);
    const train::Example p = singles->sample(a), q = decoder->sample(b);
    EXPECT_EQ(p.fixed, q.fixed);
    EXPECT_EQ(p.mask_rate, 0.f);
    EXPECT_EQ(q.mask_rate, 1.f);
    examples.push_back(q);
  }
  Rng rng(3);
  const train::ObjectiveBatch batch = train::masked_diffusion_batch(examples, train::kByteMask, 1e-3f, rng);
  for (size_t s = 0; s < examples.size(); ++s)
    for (size_t i = 0; i < 81; ++i) {
      const size_t r = s * 81 + i;
      const bool blank = !examples[s].fixed[i];
      EXPECT_EQ(batch.input.tokens[r] == train::kByteMask, blank) << s << " " << i;
      EXPECT_EQ(batch.weights[r], blank ? 1.f : 0.f) << s << " " << i;
    }
  EXPECT_THROW(make_sudoku_source("sequence", 24, 30, {}, 2, 1, "decoder"), Error);
}

// True when no row, column or box of the grid holds a digit twice (blanks ignored).
bool consistent(const SudokuGrid& g) {
  for (int u = 0; u < 27; ++u) {
    int seen[10] = {};
    for (int k = 0; k < 9; ++k) {
      const int c = u < 9 ? u * 9 + k : u < 18 ? k * 9 + (u - 9) : ((u - 18) / 3) * 27 + ((u - 18) % 3) * 3 + (k / 3) * 9 + k % 3;
      if (g[size_t(c)] && ++seen[g[size_t(c)]] > 1) return false;
    }
  }
  return true;
}

// The candidates are the digits no filled cell of the row, column or box holds: checked cell by cell
// against a brute-force scan, and the solution's digit is always among them.
TEST(SudokuRules, CandidatesAreTheDigitsTheRulesAllow) {
  const SudokuGrid puzzle = parse_sudoku(kPuzzle), solution = parse_sudoku(kSolution);
  const std::array<uint16_t, 81> cand = sudoku_candidates(puzzle);
  for (int c = 0; c < 81; ++c) {
    if (puzzle[size_t(c)]) {
      EXPECT_EQ(cand[size_t(c)], 0) << c;
      continue;
    }
    EXPECT_TRUE(cand[size_t(c)] & (1u << solution[size_t(c)])) << c;
    for (int d = 1; d <= 9; ++d) {
      bool clash = false;
      for (int o = 0; o < 81; ++o)
        if (o != c && puzzle[size_t(o)] == d &&
            (o / 9 == c / 9 || o % 9 == c % 9 || (o / 27 == c / 27 && (o % 9) / 3 == (c % 9) / 3)))
          clash = true;
      EXPECT_EQ(bool(cand[size_t(c)] & (1u << d)), !clash) << "cell " << c << " digit " << d;
    }
  }
  EXPECT_EQ(sudoku_candidates(solution), (std::array<uint16_t, 81>{}));
}

// Adversarial "model" probabilities that put most of the mass on a digit a filled cell of the same row
// already holds: with the rule mask no pass ever commits a conflict (not even among the several cells
// one threshold pass commits), and each pass commits at least one cell until the grid is full or no
// blank cell has a digit left (the decoder is stuck, as wrong earlier commits can leave it);
// without the mask the same probabilities do commit conflicts (the mask is what prevents them).
TEST(SudokuRules, TheRuleMaskNeverCommitsAConflict) {
  Rng rng(5);
  int unmasked_conflicts = 0, stuck = 0, filled = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const SudokuGrid solution = random_solution(rng);
    const SudokuGrid puzzle = make_puzzle(solution, 26, rng);
    for (const bool rules : {true, false}) {
      SudokuGrid grid = puzzle;
      const double threshold = trial % 2 ? 0.3 : 0.0;
      int passes = 0;
      while (std::count(grid.begin(), grid.end(), 0) > 0) {
        std::vector<double> probs(81 * 10, 0.0);
        for (int c = 0; c < 81; ++c) {
          if (grid[size_t(c)]) continue;
          int bad = 0;  // a digit of a filled cell of c's row
          for (int k = 0; k < 9 && !bad; ++k) bad = grid[size_t(c / 9 * 9 + k)];
          for (int d = 1; d <= 9; ++d) probs[size_t(c * 10 + d)] = 0.05 * rng.uniform();
          if (bad) probs[size_t(c * 10 + bad)] = 0.6;
        }
        const int blanks = int(std::count(grid.begin(), grid.end(), 0));
        const int n = commit_sudoku_cells(grid, probs, rules, threshold);
        if (n == 0) {  // stuck: with the mask only, and only when no blank cell has a digit left
          ASSERT_TRUE(rules);
          const std::array<uint16_t, 81> cand = sudoku_candidates(grid);
          for (int c = 0; c < 81; ++c) ASSERT_TRUE(grid[size_t(c)] || !cand[size_t(c)]) << c;
          ++stuck;
          break;
        }
        ASSERT_EQ(int(std::count(grid.begin(), grid.end(), 0)), blanks - n);
        ++passes;
        if (rules) {
          filled += std::count(grid.begin(), grid.end(), 0) == 0;
          ASSERT_TRUE(consistent(grid)) << "trial " << trial << " pass " << passes << ": " << format_sudoku(grid);
        } else if (!consistent(grid)) {
          ++unmasked_conflicts;
          break;
        }
      }
    }
  }
  EXPECT_GE(unmasked_conflicts, 10);
  EXPECT_EQ(stuck + filled, 20);
}

// Commits per pass: at least min_commits (and at least one, even when nothing reaches the threshold),
// every cell reaching the threshold, in order of confidence; a cell with one digit left is certain
// (probability 1 after renormalisation) whatever the model gives it.
TEST(SudokuRules, ThresholdCommitsAndCertainSingles) {
  const SudokuGrid solution = parse_sudoku(kSolution);
  SudokuGrid puzzle = parse_sudoku(kPuzzle);
  for (int c = 0, filled = 0; c < 81 && filled < 25; ++c)  // 25 more givens: some naked singles appear
    if (!puzzle[size_t(c)]) puzzle[size_t(c)] = solution[size_t(c)], ++filled;
  const std::array<uint16_t, 81> cand = sudoku_candidates(puzzle);
  std::vector<double> probs(81 * 10, 0.0);
  int naked = 0;
  for (int c = 0; c < 81; ++c)
    if (!puzzle[size_t(c)]) {
      for (int d = 1; d <= 9; ++d) probs[size_t(c * 10 + d)] = 0.1;  // uniform
      probs[size_t(c * 10 + solution[size_t(c)])] = 0.1 + 0.001 * c;  // slightly preferred
      naked += __builtin_popcount(cand[size_t(c)]) == 1;
    }
  ASSERT_GE(naked, 1);
  int last = 80;  // the most confident cell: the last blank one
  while (puzzle[size_t(last)]) --last;
  SudokuGrid one = puzzle;  // no threshold: exactly one commit, the most confident cell
  EXPECT_EQ(commit_sudoku_cells(one, probs, false, 0.0), 1);
  SudokuGrid expected = puzzle;
  expected[size_t(last)] = solution[size_t(last)];
  EXPECT_EQ(format_sudoku(one), format_sudoku(expected));
  SudokuGrid several = puzzle;
  EXPECT_EQ(commit_sudoku_cells(several, probs, false, 0.0, 5), 5);
  SudokuGrid none_sure = puzzle;  // nothing reaches 0.99 without the mask: still one commit
  EXPECT_EQ(commit_sudoku_cells(none_sure, probs, false, 0.99), 1);
  SudokuGrid masked = puzzle;  // with the mask every naked single is certain
  const int n = commit_sudoku_cells(masked, probs, true, 0.99);
  EXPECT_EQ(n, naked);  // the others keep several digits: about 1/k each, below 0.99
  for (int c = 0; c < 81; ++c)
    if (!puzzle[size_t(c)] && __builtin_popcount(cand[size_t(c)]) == 1) {
      EXPECT_EQ(masked[size_t(c)], solution[size_t(c)]) << c;
    }
  EXPECT_TRUE(consistent(masked));
  EXPECT_THROW(commit_sudoku_cells(masked, std::vector<double>(10), true, 0.5), Error);
}


// The search (search_sudoku) on a model that is sure of nothing and always prefers a wrong digit: it
// prefers the correct digit least among those the rules allow. Without returns the rule-masked decoder
// reaches a dead end; with them the search is a depth-first search over its guesses (naked singles are
// certain, so committed between passes) and must reach the unique solution, with every pass counted.
TEST(SudokuSearch, ReturnsToGuessesUntilSolvedAndCountsEveryPass) {
  Rng rng(11);
  int solved_plain = 0;
  for (int trial = 0; trial < 8; ++trial) {
    const SudokuGrid solution = random_solution(rng);
    const SudokuGrid puzzle = make_puzzle(solution, 28, rng);
    int64_t calls = 0;
    auto wrong_first = [&](const SudokuGrid& grid) {
      ++calls;
      std::vector<double> probs(81 * 10, 0.0);
      for (int c = 0; c < 81; ++c)
        if (!grid[size_t(c)])
          for (int d = 1; d <= 9; ++d) probs[size_t(c * 10 + d)] = d == solution[size_t(c)] ? 0.01 : 0.1 + 0.01 * d;
      return probs;
    };
    const SudokuSearchResult plain = search_sudoku(puzzle, wrong_first, 0.99, 0);
    EXPECT_EQ(plain.backtracks, 0);
    EXPECT_EQ(plain.evaluations, calls);
    solved_plain += solves(puzzle, plain.grid);
    if (!solves(puzzle, plain.grid)) {
      EXPECT_TRUE(plain.dead_end);
    }
    calls = 0;
    const SudokuSearchResult found = search_sudoku(puzzle, wrong_first, 0.99, 1000000);
    ASSERT_TRUE(solves(puzzle, found.grid)) << "trial " << trial << ": " << format_sudoku(found.grid);
    EXPECT_FALSE(found.dead_end);
    EXPECT_EQ(found.evaluations, calls);
    EXPECT_EQ(format_sudoku(found.grid), format_sudoku(solution));
    // Each stretch between returns commits at least one cell per pass.
    EXPECT_LE(found.evaluations, (found.backtracks + 1) * std::count(puzzle.begin(), puzzle.end(), 0));
    if (!solves(puzzle, plain.grid)) {
      EXPECT_GT(found.backtracks, 0);
    }
  }
  EXPECT_LT(solved_plain, 8);  // the wrong-first model does mislead the plain decoder
}

// A model that is right and sure needs neither guesses nor returns: the search is the plain decoder.
TEST(SudokuSearch, ASureCorrectModelNeverReturns) {
  const SudokuGrid solution = parse_sudoku(kSolution);
  const SudokuGrid puzzle = parse_sudoku(kPuzzle);
  auto oracle = [&](const SudokuGrid& grid) {
    std::vector<double> probs(81 * 10, 0.0);
    for (int c = 0; c < 81; ++c)
      if (!grid[size_t(c)]) probs[size_t(c * 10 + solution[size_t(c)])] = 1.0;
    return probs;
  };
  const SudokuSearchResult r = search_sudoku(puzzle, oracle, 0.99, 100);
  EXPECT_EQ(format_sudoku(r.grid), format_sudoku(solution));
  EXPECT_EQ(r.backtracks, 0);
  EXPECT_EQ(r.evaluations, 1);  // every blank is sure on the first pass
  EXPECT_THROW(search_sudoku(puzzle, oracle, 0.0, 1), Error);
}

// One wave of naked singles: fills every blank cell with one candidate left; returns how many it filled.
int fill_naked_singles(SudokuGrid& g) {
  const std::array<uint16_t, 81> cand = sudoku_candidates(g);
  int filled = 0;
  for (int c = 0; c < 81; ++c)
    if (!g[size_t(c)] && __builtin_popcount(cand[size_t(c)]) == 1)
      g[size_t(c)] = uint8_t(__builtin_ctz(cand[size_t(c)])), ++filled;
  return filled;
}

// Naked-single waves: how many rounds of fill_naked_singles complete the grid (0: they do not).
int naked_single_waves(SudokuGrid g) {
  for (int wave = 1; fill_naked_singles(g) > 0; ++wave)
    if (std::count(g.begin(), g.end(), 0) == 0) return wave;
  return 0;
}

TEST(SudokuSearch, PropagationCommitsWhatTheRulesForceWithoutAnotherPass) {
  Rng rng(5);
  SudokuGrid solution{}, puzzle{};
  int waves = 0;
  while (waves < 3) {  // a puzzle that naked singles solve, in several waves
    solution = random_solution(rng);
    puzzle = make_puzzle(solution, 40, rng);
    waves = naked_single_waves(puzzle);
  }
  auto uniform = [](const SudokuGrid&) { return std::vector<double>(81 * 10, 1.0 / 9); };  // knows nothing
  const SudokuSearchResult plain = search_sudoku(puzzle, uniform, 0.999, 0);
  EXPECT_EQ(format_sudoku(plain.grid), format_sudoku(solution));
  EXPECT_EQ(plain.evaluations, waves);  // one pass per wave: only the rules are sure
  EXPECT_EQ(plain.propagated, 0);
  const SudokuSearchResult propagated = search_sudoku(puzzle, uniform, 0.999, 0, {.propagate = true});
  EXPECT_EQ(format_sudoku(propagated.grid), format_sudoku(solution));
  EXPECT_EQ(propagated.evaluations, 1);  // every later wave follows from the rules without a pass
  SudokuGrid first_wave = puzzle;
  const int blanks = int(std::count(puzzle.begin(), puzzle.end(), 0));
  EXPECT_EQ(propagated.propagated, blanks - fill_naked_singles(first_wave));  // all but the pass's own commits
  EXPECT_EQ(propagated.backtracks, 0);
}

TEST(SudokuSearch, GuessFewestGuessesInACellWithTheFewestDigitsLeft) {
  Rng rng(7);
  SudokuGrid solution{}, puzzle{};
  std::array<uint16_t, 81> cand{};
  int fewest = 0, most = 0, most_cell = -1;
  do {  // no naked single, and cells with more and fewer digits left
    solution = random_solution(rng);
    puzzle = make_puzzle(solution, 24, rng);
    cand = sudoku_candidates(puzzle);
    fewest = 10, most = 0;
    for (int c = 0; c < 81; ++c) {
      if (puzzle[size_t(c)]) continue;
      const int n = __builtin_popcount(cand[size_t(c)]);
      fewest = std::min(fewest, n);
      if (n > most) most = n, most_cell = c;
    }
  } while (fewest == 1 || fewest == most);
  // A model that is fairly sure (0.9, below the threshold) of the right digit in the cell with the most
  // digits left, and knows nothing elsewhere.
  std::vector<SudokuGrid> seen;
  auto model = [&](const SudokuGrid& grid) {
    seen.push_back(grid);
    std::vector<double> probs(81 * 10, 0.01);
    probs[size_t(most_cell * 10 + solution[size_t(most_cell)])] = 0.9;
    return probs;
  };
  auto first_guess = [&](const SudokuSearchOptions& options) {
    seen.clear();
    search_sudoku(puzzle, model, 0.999, 1000, options);
    for (int c = 0; c < 81; ++c)
      if (seen.size() > 1 && seen[1][size_t(c)] != puzzle[size_t(c)]) return c;
    return -1;
  };
  EXPECT_EQ(first_guess({}), most_cell);  // the most confident cell
  const int c = first_guess({.guess_fewest = true});
  ASSERT_GE(c, 0);
  EXPECT_EQ(__builtin_popcount(cand[size_t(c)]), fewest);
}
}  // namespace
}  // namespace canvas
