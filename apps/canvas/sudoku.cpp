// canvas sudoku: the option tables and output of generate, solve, eval and probe (the logic is in
// src/sudoku/sudoku_solver.h and sudoku_generate.h).
#include <signal.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "cli/interrupt.h"
#include "cli/output_paths.h"
#include "cli/progress.h"
#include "commands.h"
#include "core/error.h"
#include "model/model.h"
#include "shipped_models.h"
#include "sudoku/sudoku.h"
#include "sudoku/sudoku_generate.h"
#include "sudoku/sudoku_solver.h"

namespace canvas::cli {
namespace {

const char* kSudokuNotes = R"(MODEL defaults to the shipped masked-diffusion solver, models/sudoku-masked.gguf.
`canvas sudoku SUBCOMMAND --help` shows one subcommand.

The default decoder of solve and eval (models that fill the grid in place): rule-masked threshold
decoding (threshold 0.999) with search (--search 1000). Each pass, the probabilities of the digits
that conflict with a filled cell of the same row, column or box (givens and cells already committed)
are set to zero and each blank cell's distribution is renormalised: the model chooses among the
digits the Sudoku rules still allow (a cell with one digit left is certain), as constrained decoding
masks the tokens a grammar forbids.
Then every blank cell whose constrained probability reaches --threshold (default 0.999) is committed,
at least one per pass; with propagation (default; --no-propagate turns it off) the same probabilities
are renormalised again over the digits these commits leave, and cells reaching the threshold are
committed too, until none does, before the next forward pass. The search: a pass with no cell at the
threshold commits one guess, in a cell with the fewest digits left (--guess fewest, default; of those
the most confident) or in the most confident cell (--guess confident); when a blank cell has no digit
left, the decoder returns to the latest guess (no forward pass: the probabilities there are kept),
rules out the digit it tried and decides again, at most --search N times (default 1000). --search 0
turns it off (a committed cell stays; with --threshold 0.99 that commits the most cells per pass, and
solves fewer puzzles: docs/training.md). --uniform replaces the model's probabilities by 1/9 each: a
baseline showing what the rules and the search do without the model.
--rules is on wherever it applies (diffusion mode, confidence order, no --beam or --freeze) and
combines with --steps, --threshold and --views; --no-rules turns it off (--no-rules --steps 81 is the
first default: one cell per pass, the model's own most probable cell and digit).

Diffusion options: --freeze recomputes only the blank cells and the cells committed by the previous
step (an approximation that cuts work per pass; see docs/performance.md); --freeze-refresh N (implies
--freeze) also recomputes every cell every N steps. --beam W (W > 1) searches instead: one cell per
pass in each of W beams, ranked by the model's log-likelihood of the cells they committed; the
likeliest completed grid wins (W passes per cell; no Sudoku rule is used). --views K (K >= 1) averages
the model over K symmetric presentations of the grid (the identity and K-1 fixed random row, column,
band and digit permutations and transpositions), K forward passes per pass; which cells a pass
commits follows the other options as without --views (the default rule mask and threshold;
--steps 81 for one cell per pass, --no-rules for the model's own choices).
)";

// One option table per subcommand (the overview above is `canvas sudoku --help`).
const Option kModelOption{"-m,--model", "MODEL", "GGUF model (default: the shipped solver, models/sudoku-masked.gguf)"};
const Option kThreadsOption{"-t,--threads", "N", "threads (default: the CPUs this process may use)"};
// The rule mask, the search and --freeze: the same in solve and eval.
const std::vector<Option> kRuleOptions{
    {"--rules", "", "the model chooses among the digits the Sudoku rules still allow (default where it\n"
                    "applies)"},
    {"--no-rules", "", "the model's own choices, no rule mask (with --steps 81: the old greedy default)"},
    {"--search", "N", "with the rule mask and a threshold: return to the latest guess at a dead end, at\n"
                      "most N times (default 1000; 0: never)"},
    {"--propagate", "", "with the search: after a pass's commits, commit every cell that the kept\n"
                        "probabilities, renormalised over the digits the rules then allow, put at or above\n"
                        "the threshold, again and again before the next pass (default with the search)"},
    {"--no-propagate", "", "with the search: one set of commits per forward pass"},
    {"--guess", "RULE", "with the search, where a guess goes: fewest (a cell with the fewest digits left,\n"
                        "the most confident of those; default) | confident (the most confident cell)"},
    {"--uniform", "", "baseline: every digit equally likely instead of the model's probabilities (what\n"
                      "the rules and the search do alone; the passes still run)"},
    {"--freeze", "", "recompute only blank cells and those committed by the previous step"},
    {"--freeze-refresh", "N", "with --freeze (implied): recompute every cell every N steps"},
};

const Command kSudokuGenerate{
    "sudoku generate",
    "canvas sudoku generate -n N [--difficulty D] [--source qqwing|canvas] [--min-clues C] [-s SEED] [--exclude FILE]",
    R"(Writes N lines "PUZZLE SOLUTION DIFFICULTY" (81 digits each, 0 = blank). --source qqwing (default) asks
Debian's qqwing for puzzles rated D; --source canvas uses canvas's own generator (unique solutions, down
to --min-clues givens), rated "generated". Progress (count, rate, ETA) on stderr. Ctrl-C (SIGINT) or
SIGTERM stops it after the puzzle in hand: every line written stays whole, and it says how many it wrote
(exit status 130).)",
    {
        {"-n", "N", "puzzles to write (default 100)"},
        {"--difficulty", "D", "qqwing rating: simple | easy | intermediate | expert | any (default easy)"},
        {"--source", "NAME", "qqwing (Debian's generator, default) | canvas (its own, rated \"generated\")"},
        {"--min-clues", "C", "--source canvas: remove clues down to C givens (default 24, 17..80)"},
        {"-s,--seed", "N", "random seed of --source canvas (default 0)"},
        {"--exclude", "FILE", "skip puzzles present in FILE (held-out sets never overlap training data)", true},
    },
    ""};

const Command kSudokuSolve{
    "sudoku solve",
    "canvas sudoku solve [-m MODEL] [--mode diffusion|ar] [--steps S] [--algorithm A] [--threshold P] [--beam W]\n"
    "                    [--views K] [--rules|--no-rules] [--freeze] [--pretty] [-t N] < PUZZLES",
    "Reads puzzles from stdin, one per line (81 chars, '0' or '.' for blanks; the first field of a line) or as\n"
    "grids of 9 lines of 9 cells ('|', spaces and lines of '-' and '+' between rows are ignored, so --pretty\n"
    "output reads back; blank lines separate grids), writes one 81-digit solution per line (non-digit outputs\n"
    "as 0); progress (count, rate) on stderr. A puzzle whose givens contradict each other (two equal digits in\n"
    "a row, column or box) or that has no solution stops the command with an error naming its line (exit\n"
    "status 1) before the model runs on it.",
    join_options({{
        kModelOption,
        {"--mode", "MODE", "diffusion | ar (default: ar for causal models)"},
        {"--steps", "S", "passes at most (81: one cell per pass; default: --threshold 0.999 with the rule mask)"},
        {"--algorithm", "A", "unmasking order: confidence | margin | entropy | random | origin"},
        {"--threshold", "P", "commit every cell whose (rule-masked) probability reaches P (at least one per pass)"},
        {"--beam", "W", "beam search over commits with W beams"},
        {"--views", "K", "average the model over K symmetric views of the grid"},
    }, kRuleOptions, {
        {"--pretty", "", "write each solution as a 9-line grid in boxes ('.' for a cell left blank), then an empty line"},
        kThreadsOption,
    }}),
    ""};

const Command kSudokuEval{
    "sudoku eval",
    "canvas sudoku eval [-m MODEL] --data FILE [--mode diffusion|ar] [--steps 81,27,9] [--algorithm A,B]\n"
    "                   [--threshold 0.9,0.7] [--beam 1,4] [--views 1,8] [--rules|--no-rules] [--freeze] [--limit N]\n"
    "                   [-t N] [--json]",
    R"(Exact-solve rate and cell accuracy (over the blank cells) per difficulty, per number of denoising steps
(or per --threshold: commit every cell whose probability reaches it, at least one per pass; or per --beam
width, shown as b=W; or per --views count, v=K) and per unmasking order (AR: one row per difficulty),
with forward passes, cells committed per forward pass (cells_per_pass), token rows computed per puzzle,
and whether the rule mask was on; progress (count, rate, ETA) on stderr.)",
    join_options({{
        kModelOption,
        {"--data", "FILE", "puzzle file (lines \"PUZZLE SOLUTION DIFFICULTY\")"},
        {"--mode", "MODE", "diffusion | ar (default: ar for causal models)"},
        {"--steps", "LIST", "comma-separated step counts (default: t=0.999 with the rule mask and search)"},
        {"--algorithm", "LIST", "comma-separated unmasking orders (default confidence)"},
        {"--threshold", "LIST", "comma-separated thresholds, each a row t=P (instead of --steps)"},
        {"--beam", "LIST", "comma-separated beam widths, each a row b=W"},
        {"--views", "LIST", "comma-separated view counts, each a row v=K (with one --threshold P: v=K,t=P)"},
    }, kRuleOptions, {
        {"--limit", "N", "the first N puzzles of the file"},
        kThreadsOption,
        {"--json", "", "print a JSON array of rows"},
    }}),
    ""};

const Command kSudokuProbe{
    "sudoku probe",
    "canvas sudoku probe [-m MODEL] --data FILE [--limit N] [-s SEED] [-t N]",
    R"(How the model reads the states a cell-by-cell decoder goes through when it deduces correctly: along
a random singles path of each puzzle (the givens, then one naked or hidden single filled at a time,
with its solution digit), every blank cell of every state is scored (mean cross-entropy of its solution
digit, and how often it is the argmax), grouped by what decides it: a naked single, a hidden single of a
row, column or box (or several), or neither. Also: how often the state's most probable (cell, digit) is
right, over all states and over those with no naked single left (where a decoder must find a hidden
single). Masked-diffusion models that fill the grid in place only.)",
    {
        kModelOption,
        {"--data", "FILE", "puzzle file (lines \"PUZZLE SOLUTION DIFFICULTY\")"},
        {"--limit", "N", "the first N puzzles of the file"},
        {"-s,--seed", "N", "random seed of the singles paths (default 1)"},
        kThreadsOption,
    },
    ""};

// The puzzles of --data, the first --limit of them when given.
std::vector<SudokuExample> read_data(const Args& args) {
  std::vector<SudokuExample> data = read_sudoku_file(args.get("data", ""));
  const int64_t limit = args.get_int("limit", 0);
  if (limit > 0 && int64_t(data.size()) > limit) data.resize(size_t(limit));
  check(!data.empty(), "no puzzles in " + args.get("data", ""));
  return data;
}

int sudoku_generate(int argc, char** argv) {
  if (print_help_if_asked(kSudokuGenerate, argc, argv, 3)) return 0;
  Args args(kSudokuGenerate, argc, argv, 3);
  SudokuGenerateOptions options;
  options.count = args.get_int("n", 100);
  check(options.count > 0, "-n must be positive");
  options.source = args.get("source", "qqwing");
  options.difficulty = args.get("difficulty", "easy");
  options.min_clues = int(args.get_int("min-clues", 24));
  options.seed = uint64_t(args.get_int("seed", 0));
  for (const std::string& file : args.get_all("exclude")) {
    // `generate --exclude F > F`: the shell emptied F before canvas started, so nothing would be excluded
    // and F would end up holding only the new puzzles. Appending (>> F) keeps F and is fine.
    check(!stdout_is_file(file) || stdout_appends(),
          "standard output is --exclude file " + file + ", which the shell's '>' has just emptied; write the "
          "puzzles to another file (or append with '>>')");
    const std::set<std::string> more = read_sudoku_puzzle_set(file);
    options.exclude.insert(more.begin(), more.end());
  }
  // Ctrl-C ends a long run cleanly: every line written so far stays whole, and the count is reported.
  const InterruptRequest interrupt;
  Progress progress("puzzles", options.count);
  const int64_t written = generate_sudoku(
      options,
      [&progress](const SudokuExample& e) {
        std::printf("%s %s %s\n", format_sudoku(e.puzzle).c_str(), format_sudoku(e.solution).c_str(),
                    e.difficulty.c_str());
        progress.add();
      },
      &InterruptRequest::requested);
  progress.finish();
  check(std::fflush(stdout) == 0, "writing the puzzles to standard output failed");
  if (written < options.count) {
    std::fprintf(stderr, "interrupted: wrote %lld of %lld puzzles\n", (long long)written, (long long)options.count);
    return 130;  // the shell's status for a command ended by SIGINT
  }
  return 0;
}

// The decoder options as given (apply_sudoku_decoder applies the defaults).
SudokuDecoderChoice decoder_choice(const Args& args) {
  SudokuDecoderChoice c;
  c.rules = args.has("rules");
  c.no_rules = args.has("no-rules");
  // Options that set how many cells a pass commits (--views only changes how the probabilities are made).
  c.decoder_given = args.has("steps") || args.has("threshold") || args.has("beam");
  c.search = args.get_int("search", -1);
  check(!args.has("search") || c.search >= 0, "--search must be in 0..100000");
  c.propagate = args.has("propagate");
  c.no_propagate = args.has("no-propagate");
  c.guess = args.get("guess", "");
  c.uniform = args.has("uniform");
  return c;
}

SudokuSolverSettings solve_settings(const Args& args, const Model& model) {
  SudokuSolverSettings s;
  s.mode = args.get("mode", default_sudoku_mode(model));
  check(s.mode == "diffusion" || s.mode == "ar", "--mode must be diffusion or ar");
  s.steps = args.get_int("steps", 81);
  check(s.steps >= 1, "--steps must be >= 1");
  s.order = parse_unmask_order(args.get("algorithm", "confidence"));
  s.threshold = float(args.get_float("threshold", 0));
  check(s.threshold >= 0 && s.threshold <= 1, "--threshold must be in [0, 1]");
  s.freeze = args.has("freeze") || args.has("freeze-refresh");
  s.freeze_refresh = args.get_int("freeze-refresh", 0);
  check(s.freeze_refresh >= 0, "--freeze-refresh must be >= 0");
  s.beam = args.get_int("beam", 0);
  check(s.beam >= 0 && s.beam <= 256, "--beam must be in 0..256");
  s.views = args.get_int("views", 0);
  check(s.views >= 0 && s.views <= 64, "--views must be in 0..64");
  check(s.beam == 0 || (s.threshold == 0 && s.views == 0), "--beam is a separate decoder: not with --threshold or --views");
  apply_sudoku_decoder(model, decoder_choice(args), s);
  return s;
}

// -m MODEL, else the shipped solver.
Model load_solver(const Args& args) {
  return Model::load(model_or_shipped(args, "sudoku-masked.gguf", "canvas sudoku"));
}

int sudoku_solve(int argc, char** argv) {
  if (print_help_if_asked(kSudokuSolve, argc, argv, 3)) return 0;
  Args args(kSudokuSolve, argc, argv, 3);
  const Model model = load_solver(args);
  const SudokuSolverSettings s = solve_settings(args, model);
  const bool pretty = args.has("pretty");
  ThreadPool pool(thread_count(args));
  SudokuReader reader(std::cin, "stdin");
  SudokuGrid puzzle;
  Progress progress("puzzles", 0);  // stdin: the total is unknown
  while (reader.next(puzzle)) {
    // The decoders would search for long and then print a grid that breaks the rules: say why instead.
    const std::string reason = sudoku_unsolvable_reason(puzzle);
    check(reason.empty(), reader.where() + ": the puzzle cannot be solved: " + reason);
    const SudokuGrid solution = solve_sudoku(model, puzzle, s, &pool).grid;
    if (pretty)
      std::printf("%s\n", format_sudoku_pretty(solution).c_str());
    else
      std::printf("%s\n", format_sudoku(solution).c_str());
    std::fflush(stdout);
    progress.add();
  }
  progress.finish();
  return 0;
}

int sudoku_eval(int argc, char** argv) {
  if (print_help_if_asked(kSudokuEval, argc, argv, 3)) return 0;
  Args args(kSudokuEval, argc, argv, 3);
  check(args.has("data"), "no puzzle file given (--data FILE)");
  const Model model = load_solver(args);
  const std::vector<SudokuExample> data = read_data(args);
  const std::string mode = args.get("mode", default_sudoku_mode(model));
  check(mode == "diffusion" || mode == "ar", "--mode must be diffusion or ar");
  std::vector<std::string> steps_list = split_list(args.get("steps", "81"));
  std::vector<std::string> orders = split_list(args.get("algorithm", "confidence"));
  // Another decoder replaces the step counts: each threshold, beam width or number of views is one
  // configuration, "t=P", "b=W" or "v=K".
  // --views with one --threshold value: each views row commits every cell reaching it.
  const bool views_threshold = args.has("views") && args.has("threshold");
  float views_p = 0;
  if (views_threshold) {
    check(split_list(args.get("threshold", "")).size() == 1, "with --views, --threshold takes one value");
    views_p = float(args.get_float("threshold", 0));
    check(views_p > 0 && views_p <= 1, "--threshold values must be in (0, 1]");
  }
  check(args.has("threshold") + args.has("beam") + args.has("views") <= 1 + views_threshold,
        "eval compares one list at a time: give one of --threshold, --beam and --views");
  for (const auto& [option, prefix] : {std::pair{"threshold", "t="}, {"beam", "b="}, {"views", "v="}}) {
    if (!args.has(option) || (views_threshold && std::string(option) == "threshold")) continue;
    steps_list.clear();
    for (const std::string& value : split_list(args.get(option, ""))) steps_list.push_back(prefix + value);
  }
  if (mode == "ar") steps_list = {"81"}, orders = {"ar"};
  const bool freeze = args.has("freeze") || args.has("freeze-refresh");
  const int64_t freeze_refresh = args.get_int("freeze-refresh", 0);
  check(freeze_refresh >= 0, "--freeze-refresh must be >= 0");
  ThreadPool pool(thread_count(args));
  Progress progress("puzzles", int64_t(steps_list.size() * orders.size() * data.size()));

  const bool json = args.has("json");
  if (!json) std::fputs(sudoku_eval_table_header().c_str(), stdout);
  std::string json_rows;
  for (const std::string& steps_text : steps_list)
    for (const std::string& order : orders) {
      SudokuSolverSettings s;
      s.mode = mode;
      s.freeze = freeze;
      s.freeze_refresh = freeze_refresh;
      apply_sudoku_eval_setting(steps_text, views_p, s);
      if (mode != "ar") s.order = parse_unmask_order(order);
      apply_sudoku_decoder(model, decoder_choice(args), s);
      const std::map<std::string, SudokuTally> tallies =
          evaluate_sudoku(model, data, s, &pool, [&progress] { progress.add(); });
      const bool by_setting = s.threshold > 0 || s.beam > 0 || s.views > 0;  // rows named by their setting
      for (const auto& [difficulty, t] : tallies) {
        if (json)
          json_rows += (json_rows.empty() ? "" : ", ") + sudoku_eval_json_row(difficulty, order, s, by_setting, t);
        else
          std::fputs(sudoku_eval_table_row(difficulty, sudoku_eval_setting_label(steps_text, s), order, s, t).c_str(),
                     stdout);
      }
      std::fflush(stdout);
    }
  progress.finish();
  if (json) std::printf("[%s]\n", json_rows.c_str());
  return 0;
}

int sudoku_probe(int argc, char** argv) {
  if (print_help_if_asked(kSudokuProbe, argc, argv, 3)) return 0;
  Args args(kSudokuProbe, argc, argv, 3);
  check(args.has("data"), "no puzzle file given (--data FILE)");
  const Model model = load_solver(args);
  check(sudoku_fills_in_place(model) && model.config.mask_token >= 0,
        "sudoku probe needs a masked-diffusion model that fills the grid in place");
  const std::vector<SudokuExample> data = read_data(args);
  ThreadPool pool(thread_count(args));
  const SudokuProbe r = probe_sudoku(model, data, uint64_t(args.get_int("seed", 1)), &pool);
  std::fputs(sudoku_probe_report(r).c_str(), stdout);
  return 0;
}

}  // namespace

int cmd_sudoku(int argc, char** argv) {
  static const CommandGroup group{"sudoku", "canvas sudoku <generate|solve|eval|probe> [options]", "",
                                  {{&kSudokuGenerate, sudoku_generate},
                                   {&kSudokuSolve, sudoku_solve},
                                   {&kSudokuEval, sudoku_eval},
                                   {&kSudokuProbe, sudoku_probe}},
                                  kSudokuNotes};
  return run_command_group(group, argc, argv);
}

}  // namespace canvas::cli
