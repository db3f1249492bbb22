// The Sudoku training task: puzzles generated on the fly (format, clue range, decoder states, held-out
// sets), the metadata its models carry, and its validation metrics.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "train/task.h"

namespace canvas {

// Registers `task = sudoku` (train/task.h), the default task of a training config: training knows no task
// above it, so a program that trains Sudoku models (canvas, the tests) calls this once before reading a
// config. Keys: sudoku_format, sudoku_min_clues, sudoku_max_clues, sudoku_states, sudoku_hidden_weight,
// held_out (see make_sudoku_source and docs/training.md).
void register_sudoku_task();

// format "sequence": puzzle (81 chars, '0' for blanks) then solution (81 digits), prompt_len 81 (for AR
// and diffusion alike). format "infill": the 81 solution digits with the givens fixed (diffusion
// only: the blanks are the canvas). Training puzzles come
// from canvas's generator with a clue count uniform in [min_clues, max_clues]; any puzzle listed in an
// `exclude` file (held-out sets) is skipped. Validation: n_val puzzles drawn once from `val_seed`.
// states "singles" (infill only): each training example also shows, fixed, the first k cells of a
// singles solver's path (singles_path, k uniform in 0..its length), so training sees the states a
// decoder that deduces cell by cell passes through, and the other blanks are masked with probability t;
// states "decoder" masks every other blank (mask_rate 1): exactly the states of a decoder that has
// committed k deducible cells correctly; with it, hidden_weight multiplies the loss weight of every
// blank that is a hidden single of the state (single_kinds), the deduction a decoder most often misses.
// Validation examples stay plain puzzles.
// What is wrong with that combination of format, states and hidden_weight ("" when nothing is).
std::string sudoku_states_problem(const std::string& format, const std::string& states, float hidden_weight);
std::unique_ptr<train::DataSource> make_sudoku_source(const std::string& format, int min_clues, int max_clues,
                                               const std::vector<std::string>& exclude, int64_t n_val,
                                               uint64_t val_seed, const std::string& states = "random",
                                               float hidden_weight = 1);

}  // namespace canvas
