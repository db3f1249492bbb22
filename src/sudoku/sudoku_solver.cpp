// Solving, evaluating and probing Sudoku puzzles with canvas's models.
#include "sudoku/sudoku_solver.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/appendf.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "decode/ar.h"
#include "io/gguf.h"
#include "ops/ops.h"

namespace canvas {
namespace {

// The in-place decoder of canvas's own loop (sudoku_forward_grid): each pass runs the model on `views`
// copies of the grid (the first the identity; the others fixed random symmetries: row and column
// permutations within bands, band swaps, transposition, digit relabelling), maps each blank cell's digit
// probabilities back to the original grid and averages them over the views (test-time augmentation:
// averaging cancels errors of the model that depend on the presentation), then commit_sudoku_cells
// commits cells: with `rules` the model chooses among the digits the Sudoku rules still allow; with
// `threshold` every cell whose confidence reaches it; with `steps` < the blanks at least enough cells per
// pass to finish in that many passes. With `search`, search_sudoku decides instead.
SudokuSolution solve_in_place(const Model& model, const SudokuGrid& puzzle, const SudokuSolverSettings& s,
                              ThreadPool* pool) {
  const ModelConfig& c = model.config;
  check(c.mask_token >= 0 && c.vocab > kSudokuDigitToken + 9, "this model has no mask token or digit tokens");
  const int64_t views = std::max<int64_t>(s.views, 1);
  std::vector<SudokuSymmetry> syms{identity_symmetry()};
  Rng rng(0x5eed);  // fixed: every run uses the same views
  while (int64_t(syms.size()) < views) syms.push_back(random_symmetry(rng));
  SudokuSolution out;
  KvCache cache(c, 81);
  std::vector<float> logits;
  // [81][10]: the mean probability of digit d at original cell i over the views.
  auto probs_of = [&](const SudokuGrid& grid) {
    std::vector<double> avg(81 * 10, 0.0);
    for (const SudokuSymmetry& sym : syms) {
      const std::vector<int32_t> rows =
          sudoku_forward_grid(model, cache, apply_symmetry(sym, grid), logits, pool);
      ++out.passes;
      out.rows += 81;
      for (size_t r = 0; r < rows.size(); ++r) {
        const float* x = &logits[r * size_t(c.vocab)];
        const double lse = row_stats(x, c.vocab).logsumexp;
        const size_t cell = sym.source[size_t(rows[r])];
        for (size_t d = 1; d <= 9; ++d)
          avg[cell * 10 + d] +=
              (s.uniform ? 1.0 / 9 : std::exp(double(x[kSudokuDigitToken + sym.relabel[d]]) - lse)) /
              double(views);
      }
    }
    return avg;
  };
  if (s.search > 0) {
    const SudokuSearchResult r = search_sudoku(puzzle, probs_of, s.threshold, s.search, s.search_options);
    out.grid = r.grid;
    out.backtracks = r.backtracks;
    out.propagated = r.propagated;
    return out;
  }
  SudokuGrid grid = puzzle;
  int64_t steps_left = std::max<int64_t>(s.steps, 1);
  for (int64_t blanks = std::count(grid.begin(), grid.end(), 0); blanks > 0;
       blanks = std::count(grid.begin(), grid.end(), 0)) {
    const std::vector<double> avg = probs_of(grid);
    const int64_t min_commits = (blanks + steps_left - 1) / steps_left;  // finish within `steps` passes
    steps_left = std::max<int64_t>(steps_left - 1, 1);
    if (commit_sudoku_cells(grid, avg, s.rules, s.threshold, int(min_commits)) == 0)
      break;  // stuck: blanks stay 0
  }
  out.grid = grid;
  return out;
}

}  // namespace

bool sudoku_fills_in_place(const Model& model) {
  return model.file && model.file->get_string("canvas.sudoku.format", "sequence") == "infill";
}

std::string default_sudoku_mode(const Model& model) {
  return model.config.causal ? "ar" : "diffusion";
}

bool sudoku_rules_apply(const Model& model, const SudokuSolverSettings& s) {
  return s.mode != "ar" && sudoku_fills_in_place(model) && s.order == UnmaskOrder::Confidence &&
         s.beam == 0 && !s.freeze;
}

void apply_sudoku_decoder(const Model& model, const SudokuDecoderChoice& c, SudokuSolverSettings& s) {
  check(!(c.rules && c.no_rules), "--rules and --no-rules contradict each other");
  const bool applies = sudoku_rules_apply(model, s);
  s.rules = c.rules || (applies && !c.no_rules);
  if (!c.decoder_given && applies) s.threshold = kSudokuDefaultThreshold;
  s.search = c.search >= 0 ? c.search : s.rules && s.threshold > 0 ? kSudokuDefaultSearch : 0;
  check(s.search >= 0 && s.search <= 100000, "--search must be in 0..100000");
  check(s.search == 0 || (s.rules && s.threshold > 0),
        "--search needs the rule mask and a --threshold (it searches over rule-masked threshold decoding)");
  check(!(c.propagate && c.no_propagate), "--propagate and --no-propagate contradict each other");
  s.search_options.propagate = s.search > 0 && !c.no_propagate;
  check(c.guess.empty() || c.guess == "fewest" || c.guess == "confident", "--guess must be fewest or confident");
  s.search_options.guess_fewest = c.guess != "confident";
  check(s.search > 0 || !(c.propagate || !c.guess.empty()), "--propagate and --guess need the search");
  s.uniform = c.uniform;
  check(!s.uniform || s.rules, "--uniform needs the rule mask (it is a baseline for the rule-masked decoders)");
}

std::vector<int32_t> sudoku_forward_grid(const Model& model, KvCache& cache, const SudokuGrid& grid,
                                         std::vector<float>& logits, ThreadPool* pool) {
  const ModelConfig& c = model.config;
  const std::vector<int32_t> groups(81, 1);
  std::vector<int32_t> tokens(81);
  ForwardRequest req;
  for (int32_t j = 0; j < 81; ++j) {
    tokens[size_t(j)] = grid[size_t(j)] ? kSudokuDigitToken + grid[size_t(j)] : c.mask_token;
    if (!grid[size_t(j)]) req.logit_rows.push_back(j);
  }
  req.tokens = tokens.data();
  req.n = 81;
  req.groups = groups.data();
  logits.resize(req.logit_rows.size() * size_t(c.vocab));
  req.logits = logits.data();
  forward(model, cache, req, pool);
  return req.logit_rows;
}

SudokuSolution solve_sudoku(const Model& model, const SudokuGrid& puzzle, const SudokuSolverSettings& s,
                            ThreadPool* pool) {
  check(s.mode == "diffusion" || s.mode == "ar",
        "the Sudoku mode must be diffusion or ar, not '" + s.mode + "'");
  const bool in_place = sudoku_fills_in_place(model);
  if (s.views > 0 || s.rules) {
    check(s.mode != "ar" && in_place,
          std::string(s.rules ? "--rules" : "--views") +
              " needs a masked-diffusion Sudoku model that fills the grid in place");
    check(s.order == UnmaskOrder::Confidence && s.beam == 0 && !s.freeze,
          "--rules and --views decode in confidence order, without --beam or --freeze (add --no-rules for "
          "those)");
    return solve_in_place(model, puzzle, s, pool);
  }
  GenerationResult r;
  auto solution = [&r] { return SudokuSolution{sudoku_from_tokens(r.tokens), r.passes, r.rows_computed}; };
  auto masked_params = [&s] {
    MaskedDiffusionParams p;
    p.gen_length = 81;
    p.block_length = 81;
    p.steps = s.steps;
    p.order = s.order;
    p.threshold = s.threshold;
    p.freeze = s.freeze;
    p.freeze_refresh = s.freeze_refresh;
    p.beam_width = s.beam;
    return p;
  };
  if (s.mode != "ar" && in_place) {
    MaskedDiffusionParams p = masked_params();
    p.initial_canvas = sudoku_prompt_tokens(puzzle);
    for (size_t i = 0; i < 81; ++i)
      if (!puzzle[i]) p.initial_canvas[i] = model.config.mask_token;
    r = generate_masked(model, {}, p, pool);
    return solution();
  }
  const std::vector<int32_t> prompt = sudoku_prompt_tokens(puzzle);
  if (s.mode == "ar") {
    ArParams p;
    p.max_new_tokens = 81;
    p.stop_at_eos = false;
    r = generate_ar(model, prompt, p, pool);
  } else {
    MaskedDiffusionParams p = masked_params();
    p.cache = CacheMode::Prefix;
    r = generate_masked(model, prompt, p, pool);
  }
  return solution();
}

void SudokuTally::add(const SudokuExample& e, const SudokuSolution& got, double elapsed_ms) {
  ++n;
  ms += elapsed_ms;
  passes += got.passes;
  rows += got.rows;
  backtracks += got.backtracks;
  propagated += got.propagated;
  solved += solves(e.puzzle, got.grid) ? 1 : 0;
  for (size_t i = 0; i < 81; ++i)
    if (!e.puzzle[i]) {
      ++blanks;
      correct += got.grid[i] == e.solution[i] ? 1 : 0;
      filled += got.grid[i] != 0;  // a stuck decoder leaves blanks
    }
}

double SudokuTally::solved_percent() const { return 100.0 * double(solved) / double(n); }
double SudokuTally::cell_percent() const { return 100.0 * double(correct) / double(std::max<int64_t>(blanks, 1)); }
double SudokuTally::passes_per_puzzle() const { return double(passes) / double(n); }
double SudokuTally::rows_per_puzzle() const { return double(rows) / double(n); }
double SudokuTally::ms_per_puzzle() const { return ms / double(n); }
double SudokuTally::cells_per_pass() const { return double(filled) / double(std::max<int64_t>(passes, 1)); }

void apply_sudoku_eval_setting(const std::string& setting, float views_threshold, SudokuSolverSettings& s) {
  auto number = [&](size_t from) {
    char* end = nullptr;
    const double v = std::strtod(setting.c_str() + from, &end);
    check(end != setting.c_str() + from && *end == 0, "sudoku eval: '" + setting + "' is not a setting");
    return v;
  };
  if (setting.rfind("t=", 0) == 0) {
    s.threshold = float(number(2));
    check(s.threshold > 0 && s.threshold <= 1, "--threshold values must be in (0, 1]");
  } else if (setting.rfind("v=", 0) == 0) {
    s.views = int64_t(number(2));
    check(s.views >= 1 && s.views <= 64, "--views values must be in 1..64");
    s.threshold = views_threshold;
  } else if (setting.rfind("b=", 0) == 0) {
    s.beam = int64_t(number(2));
    check(s.beam >= 1 && s.beam <= 256, "--beam values must be in 1..256");
  } else {
    s.steps = int64_t(number(0));
    check(s.steps >= 1, "--steps values must be >= 1");
  }
}

std::string sudoku_eval_setting_label(const std::string& setting, const SudokuSolverSettings& s) {
  char threshold[32];
  std::snprintf(threshold, sizeof threshold, "t=%g", double(s.threshold));
  if (s.threshold > 0 && s.views == 0) return threshold;
  if (s.views > 0 && s.threshold > 0) return setting + "," + threshold;
  return s.beam > 0 || s.views > 0 ? setting : std::to_string(s.steps);
}

std::string sudoku_eval_json_row(const std::string& difficulty, const std::string& order,
                                 const SudokuSolverSettings& s, bool steps_by_setting, const SudokuTally& t) {
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "{\"difficulty\": \"%s\", \"mode\": \"%s\", \"steps\": %lld, \"threshold\": %g, "
                "\"beam\": %lld, \"views\": %lld, \"order\": \"%s\", \"rules\": %s, \"freeze\": %s, "
                "\"n\": %lld, \"solved\": %.4f, \"cell_accuracy\": %.4f, \"passes_per_puzzle\": %.3f, "
                "\"cells_per_pass\": %.3f, \"rows_per_puzzle\": %.3f, \"ms_per_puzzle\": %.3f, \"search\": %lld, "
                "\"backtracks_per_puzzle\": %.3f, \"propagate\": %s, \"propagated_per_puzzle\": %.3f, "
                "\"guess\": \"%s\", \"uniform\": %s}",
                difficulty.c_str(), s.mode.c_str(), (long long)(steps_by_setting ? 0 : s.steps), double(s.threshold),
                (long long)s.beam, (long long)s.views, order.c_str(), s.rules ? "true" : "false",
                s.freeze ? "true" : "false", (long long)t.n, t.solved_percent() / 100.0, t.cell_percent() / 100.0,
                t.passes_per_puzzle(), t.cells_per_pass(), t.rows_per_puzzle(), t.ms_per_puzzle(), (long long)s.search,
                double(t.backtracks) / double(t.n), s.search_options.propagate ? "true" : "false",
                double(t.propagated) / double(t.n), s.search_options.guess_fewest ? "fewest" : "confident",
                s.uniform ? "true" : "false");
  return buf;
}

std::string sudoku_eval_table_header() {
  std::string out;
  appendf(out, "%-13s %-10s %-11s %-5s %6s %9s %9s %9s %10s %9s %9s\n", "difficulty", "steps", "order", "rules", "n",
          "solved%", "cells%", "passes", "cells/pass", "rows", "ms/puzzle");
  return out;
}

std::string sudoku_eval_table_row(const std::string& difficulty, const std::string& label, const std::string& order,
                                  const SudokuSolverSettings& s, const SudokuTally& t) {
  std::string out;
  appendf(out, "%-13s %-10s %-11s %-5s %6lld %9.2f %9.2f %9.1f %10.2f %9.1f %9.2f\n", difficulty.c_str(),
          label.c_str(), order.c_str(), s.rules ? "yes" : "no", (long long)t.n, t.solved_percent(), t.cell_percent(),
          t.passes_per_puzzle(), t.cells_per_pass(), t.rows_per_puzzle(), t.ms_per_puzzle());
  return out;
}

std::map<std::string, SudokuTally> evaluate_sudoku(const Model& model, const std::vector<SudokuExample>& data,
                                                   const SudokuSolverSettings& s, ThreadPool* pool,
                                                   const std::function<void()>& on_puzzle) {
  std::map<std::string, SudokuTally> tallies;
  for (const SudokuExample& e : data) {
    const double t0 = now_ms();
    const SudokuSolution got = solve_sudoku(model, e.puzzle, s, pool);
    const double ms = now_ms() - t0;
    if (on_puzzle) on_puzzle();
    for (const std::string& key : {e.difficulty, std::string("all")}) tallies[key].add(e, got, ms);
  }
  return tallies;
}

const char* SudokuProbe::group_name(int group) {
  static const char* names[kGroups] = {"naked single",    "hidden: row",       "hidden: column",
                                       "hidden: row+col", "hidden: box",       "hidden: row+box",
                                       "hidden: col+box", "hidden: all three", "neither"};
  return group >= 0 && group < kGroups ? names[group] : "?";
}

SudokuProbe probe_sudoku(const Model& model, const std::vector<SudokuExample>& data, uint64_t seed,
                         ThreadPool* pool) {
  const ModelConfig& c = model.config;
  check(sudoku_fills_in_place(model) && c.mask_token >= 0,
        "sudoku probe needs a masked-diffusion model that fills the grid in place");
  Rng rng(seed);
  SudokuProbe out;
  out.puzzles = int64_t(data.size());
  KvCache cache(c, 81);
  std::vector<float> logits;
  for (const SudokuExample& e : data) {
    const std::vector<int> path = singles_path(e.puzzle, e.solution, rng);
    SudokuGrid grid = e.puzzle;
    for (size_t k = 0; k < path.size(); grid[size_t(path[k])] = e.solution[size_t(path[k])], ++k) {
      std::array<uint8_t, 81> units{};
      const std::array<uint8_t, 81> kind = single_kinds(grid, &units);
      const bool no_naked = std::find(kind.begin(), kind.end(), uint8_t(kNakedSingle)) == kind.end();
      const std::vector<int32_t> blanks = sudoku_forward_grid(model, cache, grid, logits, pool);
      double best_p = -1;
      int best_cell = 0, best_digit = 0;
      for (size_t r = 0; r < blanks.size(); ++r) {
        const float* x = &logits[r * size_t(c.vocab)];
        const double lse = row_stats(x, c.vocab).logsumexp;
        const size_t cell = size_t(blanks[r]);
        int argmax = 1;
        for (int d = 1; d <= 9; ++d) {
          if (x[kSudokuDigitToken + d] > x[kSudokuDigitToken + argmax]) argmax = d;
          const double p = std::exp(double(x[kSudokuDigitToken + d]) - lse);
          if (p > best_p) best_p = p, best_cell = int(cell), best_digit = d;
        }
        const size_t g = kind[cell] == kNakedSingle ? 0 : kind[cell] == kHiddenSingle ? units[cell] : 8;
        const double ce = lse - double(x[kSudokuDigitToken + e.solution[cell]]);
        for (auto* groups : {&out.all, no_naked ? &out.stuck : nullptr})
          if (groups) {
            SudokuProbeGroup& group = (*groups)[g];
            group.ce += ce;
            ++group.n;
            group.right += argmax == e.solution[cell];
          }
      }
      const bool right = e.solution[size_t(best_cell)] == best_digit;
      ++out.states;
      out.top_right += right;
      if (no_naked) {
        ++out.stuck_states;
        out.stuck_top_right += right;
        out.stuck_top_hidden += kind[size_t(best_cell)] == kHiddenSingle;
      }
    }
  }
  return out;
}

std::string sudoku_probe_report(const SudokuProbe& r) {
  std::string out;
  appendf(out, "%lld puzzles, %lld states along singles paths\n%-18s %9s %9s %9s | %-24s\n", (long long)r.puzzles,
          (long long)r.states, "blank cell", "cells", "CE", "argmax%", "no naked single left:");
  const auto pct = [](int64_t part, int64_t whole) { return whole ? 100.0 * double(part) / double(whole) : 0.0; };
  for (int g = 0; g < SudokuProbe::kGroups; ++g) {
    const SudokuProbeGroup &all = r.all[size_t(g)], &stuck = r.stuck[size_t(g)];
    if (!all.n) continue;
    appendf(out, "%-18s %9lld %9.4f %9.2f | %9lld %9.4f %9.2f\n", SudokuProbe::group_name(g), (long long)all.n,
            all.ce / double(all.n), pct(all.right, all.n), (long long)stuck.n,
            stuck.n ? stuck.ce / double(stuck.n) : 0.0, pct(stuck.right, stuck.n));
  }
  appendf(out,
          "most probable (cell, digit) right: %.2f%% of %lld states; with no naked single left %.2f%% of %lld "
          "(a hidden single in %.2f%%)\n",
          pct(r.top_right, r.states), (long long)r.states, pct(r.stuck_top_right, r.stuck_states),
          (long long)r.stuck_states, pct(r.stuck_top_hidden, r.stuck_states));
  return out;
}

}  // namespace canvas
