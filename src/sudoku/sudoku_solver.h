// Solving Sudoku puzzles with canvas's models (the in-place rule-masked decoder with its search, masked
// diffusion, AR), evaluating solve rates over a puzzle file, and probing how a model reads the states of a
// deducing solver: the logic of `canvas sudoku solve | eval | probe`.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "decode/masked.h"
#include "model/model.h"
#include "sudoku/sudoku.h"

namespace canvas {

// How a model solves a puzzle. The defaults are one cell per pass in confidence order, no rule mask.
struct SudokuSolverSettings {
  std::string mode = "diffusion";  // "diffusion" | "ar"
  int64_t steps = 81;              // passes at most (the fewest commits per pass that finish in time)
  UnmaskOrder order = UnmaskOrder::Confidence;
  float threshold = 0;  // > 0: commit every cell whose probability reaches it, at least one per pass
  int64_t beam = 0;     // > 1: beam search (generate_masked_beam)
  int64_t views = 0;    // > 0: average over this many symmetric views of the grid
  bool freeze = false;  // compute-aware decoding (MaskedDiffusionParams::freeze)
  int64_t freeze_refresh = 0;
  bool rules = false;  // the model chooses among the digits the Sudoku rules still allow
  int64_t search = 0;  // > 0: search_sudoku with at most this many returns to an earlier guess
  SudokuSearchOptions search_options;  // propagation, where guesses go
  bool uniform = false;                // baseline: every digit 1/9 instead of the model's probabilities
};

// The default decoder of solve and eval (the most puzzles solved, docs/training.md): the rule mask,
// every cell whose constrained probability reaches this threshold committed each pass, and the search
// with at most this many returns to an earlier guess. Without the search, 0.99 commits more cells a pass.
constexpr float kSudokuDefaultThreshold = 0.999f;
constexpr int64_t kSudokuDefaultSearch = 1000;

// Models trained by canvas record their layout (canvas.sudoku.format): "infill" models fill the blanks
// of the 81 cells in place; "sequence" models (AR, and the default for other files) read the puzzle,
// then write 81 digits.
bool sudoku_fills_in_place(const Model& model);
// "ar" for causal models, else "diffusion".
std::string default_sudoku_mode(const Model& model);
// Whether the rule mask can apply to `s` on `model`: an in-place model decoded by diffusion in confidence
// order, without beam search or freezing.
bool sudoku_rules_apply(const Model& model, const SudokuSolverSettings& s);

// The decoder options of solve and eval as given (false, -1 or "": not given).
struct SudokuDecoderChoice {
  bool rules = false, no_rules = false;  // --rules, --no-rules
  bool decoder_given = false;            // --steps, --threshold or --beam: how many cells a pass commits
  int64_t search = -1;                   // --search N
  bool propagate = false, no_propagate = false;
  std::string guess;  // "" | "fewest" | "confident"
  bool uniform = false;
};
// The default decoder on top of `s`'s other settings: the rule mask wherever it applies
// (sudoku_rules_apply) unless no_rules, with kSudokuDefaultThreshold when no decoder option was given; the
// search (kSudokuDefaultSearch returns) with propagation and fewest-digit guesses where the mask and a
// threshold are on. Throws Error naming the options for contradictions and for an option that needs what
// is off (--rules where the mask cannot apply is the solver's error).
void apply_sudoku_decoder(const Model& model, const SudokuDecoderChoice& c, SudokuSolverSettings& s);

struct SudokuSolution {
  SudokuGrid grid{};
  int64_t passes = 0, rows = 0;  // forward passes and token rows they computed
  int64_t backtracks = 0;        // the search's returns to an earlier guess
  int64_t propagated = 0;        // cells committed by propagation
};

// Solves one puzzle: the rule mask or views run canvas's in-place loop (commit_sudoku_cells, or
// search_sudoku with `search`); otherwise masked diffusion (in place or after the puzzle as a prompt)
// or AR decoding. Cells the decoder could not fill stay 0; non-digit outputs are 0.
SudokuSolution solve_sudoku(const Model& model, const SudokuGrid& puzzle, const SudokuSolverSettings& s,
                            ThreadPool* pool);

// One pass of an in-place Sudoku model over a grid: blanks become the mask token; returns the blank
// cells (in order) and fills `logits` with one row of the model's vocabulary per blank.
std::vector<int32_t> sudoku_forward_grid(const Model& model, KvCache& cache, const SudokuGrid& grid,
                                         std::vector<float>& logits, ThreadPool* pool);

// Totals of solving a set of puzzles (eval's rows); cell counts are over the puzzles' blank cells.
struct SudokuTally {
  int64_t n = 0, solved = 0, blanks = 0, correct = 0, filled = 0, passes = 0, rows = 0, backtracks = 0,
          propagated = 0;
  double ms = 0;
  void add(const SudokuExample& e, const SudokuSolution& got, double ms);
  // Eval's figures: percentages of the puzzles solved and of the blank cells right, means per puzzle, and
  // cells committed per forward pass.
  double solved_percent() const;
  double cell_percent() const;
  double passes_per_puzzle() const;
  double rows_per_puzzle() const;
  double ms_per_puzzle() const;
  double cells_per_pass() const;
};

// Solves every example with `s`; tallies per difficulty and over "all". `on_puzzle` (optional) is called
// after each puzzle.
std::map<std::string, SudokuTally> evaluate_sudoku(const Model& model, const std::vector<SudokuExample>& data,
                                                   const SudokuSolverSettings& s, ThreadPool* pool,
                                                   const std::function<void()>& on_puzzle = {});

// One setting of `canvas sudoku eval`'s list, in the decoder fields of `s`: "S" (passes), "t=P" (threshold),
// "b=W" (beam width) or "v=K" (views, committing every cell that reaches views_threshold). Throws Error for
// a value that is not a number or out of range.
void apply_sudoku_eval_setting(const std::string& setting, float views_threshold, SudokuSolverSettings& s);
// The steps column of eval's table for that setting: the passes, "t=P", the setting itself, or "v=K,t=P".
std::string sudoku_eval_setting_label(const std::string& setting, const SudokuSolverSettings& s);

// One row of `canvas sudoku eval --json` as a JSON object on one line: the difficulty, the decoder settings
// (`order` as eval names it: an unmasking order, or "ar"; steps 0 where `steps_by_setting`, a row named by its
// threshold, beam width or views) and the tally's figures (fractions, not percentages).
std::string sudoku_eval_json_row(const std::string& difficulty, const std::string& order,
                                 const SudokuSolverSettings& s, bool steps_by_setting, const SudokuTally& t);
// eval's table: the header line, and one row (the steps column is `label`, sudoku_eval_setting_label's).
std::string sudoku_eval_table_header();
std::string sudoku_eval_table_row(const std::string& difficulty, const std::string& label, const std::string& order,
                                  const SudokuSolverSettings& s, const SudokuTally& t);

// How a model reads the states of a solver that deduces by singles (probe_sudoku): blank cells grouped by
// what decides them: 0 a naked single, 1..7 a hidden single by its unit bits (row 1, column 2, box 4),
// 8 neither.
struct SudokuProbeGroup {
  double ce = 0;             // summed cross-entropy of the solution digit
  int64_t n = 0, right = 0;  // cells, and cells whose most probable digit is the solution's
};
struct SudokuProbe {
  static constexpr int kGroups = 9;
  static const char* group_name(int group);              // "naked single", "hidden: row", ..., "neither"
  std::array<SudokuProbeGroup, kGroups> all{}, stuck{};  // stuck: states with no naked single left
  int64_t puzzles = 0, states = 0, top_right = 0;        // top: the most probable (cell, digit)
  int64_t stuck_states = 0, stuck_top_right = 0, stuck_top_hidden = 0;
};
// Along a random singles path of each puzzle (singles_path with an Rng seeded by `seed`), scores every
// blank cell of every state. Needs an in-place masked-diffusion model.
SudokuProbe probe_sudoku(const Model& model, const std::vector<SudokuExample>& data, uint64_t seed,
                         ThreadPool* pool);
// `canvas sudoku probe`'s report: the states probed, a table of the groups (cells, mean cross-entropy,
// argmax %, over all states and over the stuck ones), and how often the most probable (cell, digit) is
// right.
std::string sudoku_probe_report(const SudokuProbe& probe);

}  // namespace canvas
