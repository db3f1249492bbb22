// The Sudoku library behind `canvas sudoku` called directly: solving, evaluating and probing with the
// shipped solver (src/sudoku/sudoku_solver.h), and generating puzzle sets that stop when asked
// (src/sudoku/sudoku_generate.h).
#include "sudoku/sudoku_solver.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "test_util.h"
#include "sudoku/sudoku.h"
#include "sudoku/sudoku_generate.h"

namespace canvas {
namespace {

const Model& shipped_solver() {
  static const Model model = Model::load(test::source_path("models/sudoku-masked.gguf"));
  return model;
}

std::vector<SudokuExample> held_out(const std::string& rating, size_t n) {
  std::vector<SudokuExample> data =
      read_sudoku_file(test::source_path("data/sudoku/heldout-" + rating + ".txt"));
  if (data.size() > n) data.resize(n);
  return data;
}

// The CLI's default decoder: the rule mask, the default threshold and the search with propagation,
// guesses where the fewest digits are left.
SudokuSolverSettings default_settings() {
  SudokuSolverSettings s;
  s.rules = true;
  s.threshold = kSudokuDefaultThreshold;
  s.search = kSudokuDefaultSearch;
  s.search_options.propagate = true;
  s.search_options.guess_fewest = true;
  return s;
}

// The shipped solver fills the grid in place; with the default decoder it solves held-out easy puzzles,
// committing several cells per forward pass.
TEST(SudokuSolver, ShippedModelSolvesEasyPuzzles) {
  const Model& model = shipped_solver();
  EXPECT_TRUE(sudoku_fills_in_place(model));
  EXPECT_EQ(default_sudoku_mode(model), "diffusion");
  const SudokuSolverSettings s = default_settings();
  EXPECT_TRUE(sudoku_rules_apply(model, s));
  SudokuSolverSettings beam = s;
  beam.beam = 4;
  EXPECT_FALSE(sudoku_rules_apply(model, beam));
  ThreadPool pool(2);
  int solved = 0;
  for (const SudokuExample& e : held_out("easy", 4)) {
    const SudokuSolution got = solve_sudoku(model, e.puzzle, s, &pool);
    solved += solves(e.puzzle, got.grid);
    const int blanks = 81 - count_clues(e.puzzle);
    EXPECT_GT(got.passes, 0);
    EXPECT_LT(got.passes, blanks);  // several cells per pass
    EXPECT_EQ(got.rows, 81 * got.passes);
  }
  EXPECT_GE(solved, 3);
}

// Without the rules, one cell per pass: as many passes as blanks; the greedy decoder keeps the givens.
TEST(SudokuSolver, OneCellPerPassWithoutRules) {
  const Model& model = shipped_solver();
  ThreadPool pool(2);
  const SudokuExample e = held_out("easy", 1)[0];
  SudokuSolverSettings s;  // steps 81, confidence order, no rules
  const SudokuSolution got = solve_sudoku(model, e.puzzle, s, &pool);
  EXPECT_EQ(got.passes, 81 - count_clues(e.puzzle));
  for (size_t i = 0; i < 81; ++i) {
    if (e.puzzle[i]) {
      EXPECT_EQ(got.grid[i], e.puzzle[i]) << "cell " << i;
    }
  }
  s.mode = "ar";
  s.rules = true;
  EXPECT_THROW(solve_sudoku(model, e.puzzle, s, &pool), Error);  // the rule mask is an in-place decoder
  s.mode = "sideways";
  EXPECT_THROW(solve_sudoku(model, e.puzzle, s, &pool), Error);
}

// evaluate_sudoku tallies per difficulty and over "all"; its counts agree with solving one by one.
TEST(SudokuSolver, EvaluateTalliesEveryPuzzle) {
  const Model& model = shipped_solver();
  ThreadPool pool(2);
  std::vector<SudokuExample> data = held_out("easy", 3);
  data[2].difficulty = "other";
  int64_t calls = 0;
  const auto tallies = evaluate_sudoku(model, data, default_settings(), &pool, [&calls] { ++calls; });
  EXPECT_EQ(calls, 3);
  ASSERT_EQ(tallies.size(), 3u);  // "all", the file's rating and "other"
  const SudokuTally& all = tallies.at("all");
  EXPECT_EQ(all.n, 3);
  EXPECT_EQ(tallies.at("other").n, 1);
  int64_t blanks = 0, solved = 0;
  for (const SudokuExample& e : data) {
    blanks += 81 - count_clues(e.puzzle);
    solved += solves(e.puzzle, solve_sudoku(model, e.puzzle, default_settings(), &pool).grid);
  }
  EXPECT_EQ(all.blanks, blanks);
  EXPECT_EQ(all.solved, solved);  // the decoder is deterministic
  EXPECT_LE(all.correct, all.filled);
  EXPECT_GT(all.passes, 0);
}

// Eval's figures of a tally and its --json row: percentages, means per puzzle and per pass; steps 0 in a
// row named by its setting.
// The default decoder: rule mask, threshold 0.999 and the search where they apply; the options that turn
// parts off, and the contradictions.
TEST(SudokuSolver, DefaultDecoderAndItsOptions) {
  const Model& model = shipped_solver();
  SudokuSolverSettings s;
  apply_sudoku_decoder(model, {}, s);
  EXPECT_TRUE(s.rules);
  EXPECT_FLOAT_EQ(s.threshold, kSudokuDefaultThreshold);
  EXPECT_EQ(s.search, kSudokuDefaultSearch);
  EXPECT_TRUE(s.search_options.propagate);
  EXPECT_TRUE(s.search_options.guess_fewest);
  SudokuDecoderChoice off;
  off.no_rules = true;
  SudokuSolverSettings greedy;
  apply_sudoku_decoder(model, off, greedy);
  EXPECT_FALSE(greedy.rules);  // the threshold stays (--no-rules --steps 81 is one cell per pass)
  EXPECT_FLOAT_EQ(greedy.threshold, kSudokuDefaultThreshold);
  EXPECT_EQ(greedy.search, 0);
  SudokuDecoderChoice steps;  // --steps 27: the mask stays, no default threshold, so no search
  steps.decoder_given = true;
  SudokuSolverSettings stepped;
  stepped.steps = 27;
  apply_sudoku_decoder(model, steps, stepped);
  EXPECT_TRUE(stepped.rules);
  EXPECT_EQ(stepped.threshold, 0.f);
  EXPECT_EQ(stepped.search, 0);
  SudokuDecoderChoice bad;
  bad.rules = bad.no_rules = true;
  EXPECT_THROW(apply_sudoku_decoder(model, bad, s), Error);
  bad = off;
  bad.search = 10;  // the search needs the mask
  EXPECT_THROW(apply_sudoku_decoder(model, bad, s), Error);
  bad = off;
  bad.uniform = true;
  EXPECT_THROW(apply_sudoku_decoder(model, bad, s), Error);
  bad = steps;
  bad.guess = "confident";  // no search to guess in
  SudokuSolverSettings t;
  EXPECT_THROW(apply_sudoku_decoder(model, bad, t), Error);
  bad = {};
  bad.guess = "random";
  EXPECT_THROW(apply_sudoku_decoder(model, bad, t), Error);
}

TEST(SudokuSolver, EvalFiguresAndJsonRowOfATally) {
  SudokuTally t;
  t.n = 4;
  t.solved = 3;
  t.blanks = 200;
  t.correct = 150;
  t.filled = 180;
  t.passes = 60;
  t.rows = 400;
  t.ms = 10;
  t.backtracks = 2;
  t.propagated = 8;
  EXPECT_DOUBLE_EQ(t.solved_percent(), 75.0);
  EXPECT_DOUBLE_EQ(t.cell_percent(), 75.0);
  EXPECT_DOUBLE_EQ(t.passes_per_puzzle(), 15.0);
  EXPECT_DOUBLE_EQ(t.rows_per_puzzle(), 100.0);
  EXPECT_DOUBLE_EQ(t.ms_per_puzzle(), 2.5);
  EXPECT_DOUBLE_EQ(t.cells_per_pass(), 3.0);
  SudokuSolverSettings s;
  s.steps = 27;
  s.threshold = 0.9f;
  s.rules = true;
  s.search = 5;
  s.search_options.propagate = true;
  EXPECT_EQ(sudoku_eval_json_row("easy", "confidence", s, true, t),
            "{\"difficulty\": \"easy\", \"mode\": \"diffusion\", \"steps\": 0, \"threshold\": 0.9, \"beam\": 0, "
            "\"views\": 0, \"order\": \"confidence\", \"rules\": true, \"freeze\": false, \"n\": 4, \"solved\": 0.7500, "
            "\"cell_accuracy\": 0.7500, \"passes_per_puzzle\": 15.000, \"cells_per_pass\": 3.000, "
            "\"rows_per_puzzle\": 100.000, \"ms_per_puzzle\": 2.500, \"search\": 5, \"backtracks_per_puzzle\": 0.500, "
            "\"propagate\": true, \"propagated_per_puzzle\": 2.000, \"guess\": \"confident\", \"uniform\": false}");
  EXPECT_NE(sudoku_eval_json_row("all", "ar", s, false, t).find("\"steps\": 27,"), std::string::npos);
  // The table: one header and one row of the same widths.
  const std::string header = sudoku_eval_table_header(), row = sudoku_eval_table_row("easy", "t=0.9", "confidence", s, t);
  EXPECT_EQ(header.size(), row.size()) << header << row;
  EXPECT_EQ(row, "easy          t=0.9      confidence  yes        4     75.00     75.00      15.0       3.00     100.0      2.50\n");
}

// eval's list items: passes, a threshold, a beam width or a number of views (with the views' threshold),
// each shown in the table's steps column as it was asked for.
TEST(SudokuSolver, EvalSettingsAndTheirLabels) {
  struct Case {
    std::string setting;
    float views_threshold;
    std::string label;
    int64_t steps, beam, views;
    float threshold;
  };
  const Case cases[] = {{"27", 0, "27", 27, 0, 0, 0},
                        {"t=0.9", 0, "t=0.9", 81, 0, 0, 0.9f},
                        {"b=4", 0, "b=4", 81, 4, 0, 0},
                        {"v=8", 0.95f, "v=8,t=0.95", 81, 0, 8, 0.95f}};
  for (const Case& c : cases) {
    SudokuSolverSettings s;
    apply_sudoku_eval_setting(c.setting, c.views_threshold, s);
    EXPECT_EQ(sudoku_eval_setting_label(c.setting, s), c.label);
    EXPECT_EQ(std::make_tuple(s.steps, s.beam, s.views), std::make_tuple(c.steps, c.beam, c.views)) << c.setting;
    EXPECT_FLOAT_EQ(s.threshold, c.threshold) << c.setting;
  }
  for (const char* bad : {"t=0", "t=1.5", "b=0", "v=65", "x", "t=", "0"}) {
    SudokuSolverSettings b;
    EXPECT_THROW(apply_sudoku_eval_setting(bad, 0.9f, b), Error) << bad;
  }
}

// probe_sudoku scores every blank cell of every state along a singles path: the groups' cells add up to
// the blanks of those states, and the shipped model reads most naked singles right.
TEST(SudokuSolver, ProbeCountsEveryStateOfTheSinglesPath) {
  const Model& model = shipped_solver();
  ThreadPool pool(2);
  const std::vector<SudokuExample> data = held_out("easy", 2);
  const SudokuProbe r = probe_sudoku(model, data, 1, &pool);
  EXPECT_EQ(r.puzzles, 2);
  int64_t states = 0, cells = 0;
  Rng rng(1);
  for (const SudokuExample& e : data) {
    const std::vector<int> path = singles_path(e.puzzle, e.solution, rng);
    states += int64_t(path.size());
    for (size_t k = 0; k < path.size(); ++k) cells += 81 - count_clues(e.puzzle) - int64_t(k);
  }
  EXPECT_EQ(r.states, states);
  int64_t grouped = 0;
  for (const SudokuProbeGroup& g : r.all) grouped += g.n;
  EXPECT_EQ(grouped, cells);
  ASSERT_GT(r.all[0].n, 0);
  EXPECT_GT(double(r.all[0].right) / double(r.all[0].n), 0.5);
  EXPECT_STREQ(SudokuProbe::group_name(0), "naked single");
  const std::string report = sudoku_probe_report(r);
  EXPECT_EQ(report.rfind("2 puzzles, " + std::to_string(states) + " states along singles paths\n", 0), 0u) << report;
  EXPECT_NE(report.find("\nnaked single       " ), std::string::npos) << report;
  EXPECT_NE(report.find("most probable (cell, digit) right: "), std::string::npos) << report;
  EXPECT_STREQ(SudokuProbe::group_name(8), "neither");
}

// canvas's generator: valid puzzles with unique solutions and at least min_clues givens, the same for the
// same seed, never one of the exclude set, and it stops as soon as `stop` says so.
TEST(SudokuGenerate, CanvasSourceIsValidRepeatableAndStops) {
  SudokuGenerateOptions o;
  o.source = "canvas";
  o.count = 6;
  o.min_clues = 30;
  o.seed = 3;
  std::vector<SudokuExample> first, second;
  EXPECT_EQ(generate_sudoku(o, [&](const SudokuExample& e) { first.push_back(e); }), 6);
  for (const SudokuExample& e : first) {
    EXPECT_TRUE(solves(e.puzzle, e.solution));
    EXPECT_EQ(count_solutions(e.puzzle, 2), 1);
    EXPECT_GE(count_clues(e.puzzle), 30);
    EXPECT_EQ(e.difficulty, "generated");
  }
  o.exclude = {format_sudoku(first[0].puzzle)};
  EXPECT_EQ(generate_sudoku(o, [&](const SudokuExample& e) { second.push_back(e); }), 6);
  EXPECT_EQ(format_sudoku(second[0].puzzle), format_sudoku(first[1].puzzle));  // the same stream, one skipped
  for (const SudokuExample& e : second) EXPECT_NE(format_sudoku(e.puzzle), format_sudoku(first[0].puzzle));

  o.count = 1000000;
  int64_t emitted = 0;
  const int64_t n = generate_sudoku(
      o, [&](const SudokuExample&) { ++emitted; }, [&] { return emitted >= 4; });
  EXPECT_EQ(n, 4);
  EXPECT_EQ(emitted, 4);
  o.min_clues = 10;
  EXPECT_THROW(generate_sudoku(o, [](const SudokuExample&) {}), Error);
  o.source = "elsewhere";
  EXPECT_THROW(generate_sudoku(o, [](const SudokuExample&) {}), Error);
}

// qqwing's puzzles come as qqwing writes them, rated; a stop request ends qqwing at once instead of
// waiting for the rest of its batch of up to 500 puzzles.
TEST(SudokuGenerate, QqwingSourceStreamsAndStopsAtOnce) {
  if (std::system("command -v qqwing > /dev/null 2>&1") != 0) GTEST_SKIP() << "qqwing is not installed";
  SudokuGenerateOptions o;
  o.count = 3;
  o.difficulty = "any";
  std::vector<SudokuExample> got;
  EXPECT_EQ(generate_sudoku(o, [&](const SudokuExample& e) { got.push_back(e); }), 3);
  std::set<std::string> distinct;
  for (const SudokuExample& e : got) {
    EXPECT_TRUE(solves(e.puzzle, e.solution));
    EXPECT_FALSE(e.difficulty.empty());
    distinct.insert(format_sudoku(e.puzzle));
  }
  EXPECT_EQ(distinct.size(), 3u);
  // "simple" is qqwing's slowest rating (a few puzzles a second): a batch of 500 would take minutes.
  o.count = 500;
  o.difficulty = "simple";
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::steady_clock::now() - start; };
  const int64_t n = generate_sudoku(
      o, [](const SudokuExample&) {}, [&] { return elapsed() > std::chrono::milliseconds(300); });
  EXPECT_LT(n, 500);
  EXPECT_LT(elapsed(), std::chrono::seconds(3));
}

}  // namespace
}  // namespace canvas
