// Sudoku data: solver, generator uniqueness, augmentation validity, parsing errors.
#include <gtest/gtest.h>

#include <array>
#include <numeric>
#include <set>
#include <string>

#include "core/error.h"
#include "test_util.h"
#include "train/data.h"
#include "train/sudoku.h"

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

// sudoku_states = singles: the same puzzle as the plain source (same generator draws), with the givens
// and the first k cells of a singles path fixed; k varies, so some examples show more than the givens.
TEST(Sudoku, SinglesStatesFixPartOfTheSolversPath) {
  const auto plain = train::make_sudoku_source("infill", 24, 30, {}, 2, 1, "random");
  const auto singles = train::make_sudoku_source("infill", 24, 30, {}, 2, 1, "singles");
  int more = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    Rng a(seed), b(seed);
    const train::Example p = plain->sample(a), q = singles->sample(b);
    ASSERT_EQ(p.tokens, q.tokens);
    for (size_t i = 0; i < 81; ++i) EXPECT_GE(q.fixed[i], p.fixed[i]);
    more += std::accumulate(q.fixed.begin(), q.fixed.end(), 0) > std::accumulate(p.fixed.begin(), p.fixed.end(), 0);
  }
  EXPECT_GE(more, 5);
  EXPECT_THROW(train::make_sudoku_source("sequence", 24, 30, {}, 2, 1, "singles"), Error);
}

}  // namespace
}  // namespace canvas
