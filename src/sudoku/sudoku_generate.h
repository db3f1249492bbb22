// Generating puzzle sets: canvas's own generator (unique solutions down to a clue count) or Debian's
// qqwing (rated puzzles), never repeating a puzzle of an exclude set; the logic of `canvas sudoku generate`.
#pragma once
#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "sudoku/sudoku.h"

namespace canvas {

struct SudokuGenerateOptions {
  int64_t count = 100;              // puzzles to produce
  std::string source = "qqwing";    // "qqwing" (rated by qqwing) | "canvas" (rated "generated")
  std::string difficulty = "easy";  // qqwing: simple | easy | intermediate | expert | any
  int min_clues = 24;               // canvas: remove clues down to this many givens (17..80)
  uint64_t seed = 0;                // canvas: random seed
  std::set<std::string> exclude;    // puzzles (format_sudoku) never produced
};

// Produces `options.count` distinct puzzles with their solutions, handing each to `emit` as soon as it is
// made, until all are made or `stop` (optional, polled at least every 100 ms, also while qqwing runs)
// returns true; returns how many were emitted. A qqwing that cannot run or fails is an Error.
int64_t generate_sudoku(const SudokuGenerateOptions& options,
                        const std::function<void(const SudokuExample&)>& emit,
                        const std::function<bool()>& stop = {});

// The puzzles of a "PUZZLE SOLUTION [DIFFICULTY]" file, as format_sudoku strings (an exclude set).
std::set<std::string> read_sudoku_puzzle_set(const std::string& path);

}  // namespace canvas
