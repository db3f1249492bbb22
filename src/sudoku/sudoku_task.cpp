// The Sudoku training task: its data source (generated puzzles, solver states), keys and metrics.
#include "sudoku/sudoku_task.h"

#include <set>

#include "core/error.h"
#include "sudoku/sudoku.h"

namespace canvas {
using namespace train;  // the task is one of training's (train/task.h)
namespace {

Example sudoku_example(const SudokuGrid& puzzle, const SudokuGrid& solution, bool infill) {
  Example e;
  if (infill) {
    e.tokens = sudoku_prompt_tokens(solution);
    for (uint8_t given : puzzle) e.fixed.push_back(given ? 1 : 0);
    return e;
  }
  e.tokens = sudoku_prompt_tokens(puzzle);
  const std::vector<int32_t> sol = sudoku_prompt_tokens(solution);
  e.tokens.insert(e.tokens.end(), sol.begin(), sol.end());
  e.prompt_len = 81;
  return e;
}

class SudokuSource : public DataSource {
 public:
  SudokuSource(bool infill, const std::string& states, float hidden_weight, int min_clues, int max_clues,
               std::set<std::string> exclude, int64_t n_val, uint64_t val_seed)
      : infill_(infill),
        states_(states),
        hidden_weight_(hidden_weight),
        min_clues_(min_clues),
        max_clues_(max_clues),
        exclude_(std::move(exclude)) {
    check(min_clues >= 17 && max_clues <= 80 && min_clues <= max_clues,
          "Sudoku clue range must lie in 17..80");
    Rng rng(val_seed);
    std::vector<std::string> keys;
    while (int64_t(validation_.size()) < n_val) {
      SudokuGrid puzzle, solution;
      draw(rng, puzzle, solution);
      keys.push_back(format_sudoku(puzzle));
      validation_.push_back(sudoku_example(puzzle, solution, infill_));
    }
    exclude_.insert(keys.begin(), keys.end());  // training never sees a validation puzzle
  }
  Example sample(Rng& rng) const override {
    SudokuGrid puzzle, solution;
    draw(rng, puzzle, solution);
    Example e = sudoku_example(puzzle, solution, infill_);
    if (states_ != "random") {  // a state a singles solver reaches: the first k cells of its path, fixed
      const std::vector<int> path = singles_path(puzzle, solution, rng);
      const size_t k = size_t(rng.below(path.size() + 1));
      for (size_t i = 0; i < k; ++i) e.fixed[size_t(path[i])] = 1;
      if (states_ == "decoder") e.mask_rate = 1;  // every other blank masked, as the decoder sees it
      if (hidden_weight_ != 1.f && states_ == "decoder") {
        SudokuGrid state{};
        for (size_t i = 0; i < 81; ++i) state[i] = e.fixed[i] ? solution[i] : 0;
        const std::array<uint8_t, 81> kind = single_kinds(state);
        e.weight.assign(81, 1.f);
        for (size_t i = 0; i < 81; ++i)
          if (kind[i] == kHiddenSingle) e.weight[i] = hidden_weight_;
      }
    }
    return e;
  }
  const std::vector<Example>& validation() const override { return validation_; }
  int64_t sequence_length() const override { return infill_ ? 81 : 162; }

 private:
  void draw(Rng& rng, SudokuGrid& puzzle, SudokuGrid& solution) const {
    do {
      solution = random_solution(rng);
      const int clues = min_clues_ + int(rng.below(uint64_t(max_clues_ - min_clues_ + 1)));
      puzzle = make_puzzle(solution, clues, rng);
    } while (exclude_.count(format_sudoku(puzzle)));
  }

  bool infill_;
  std::string states_;
  float hidden_weight_;
  int min_clues_, max_clues_;
  std::set<std::string> exclude_;
  std::vector<Example> validation_;
};

// `task = sudoku`.
class SudokuTask : public Task {
 public:
  std::string name() const override { return "sudoku"; }
  bool set(const std::string& key, const std::string& value, const std::string& where) override {
    if (key == "sudoku_min_clues") {
      min_clues_ = int(config_int(value, where, key, 17, 80));
    } else if (key == "sudoku_max_clues") {
      max_clues_ = int(config_int(value, where, key, 17, 80));
    } else if (key == "sudoku_format") {
      format_ = value;
    } else if (key == "sudoku_states") {
      states_ = value;
    } else if (key == "sudoku_hidden_weight") {
      hidden_weight_ = float(config_number(value, where, key, 0, 1000, true));
    } else if (key == "held_out") {
      for (const std::string& item : config_list(value))
        if (!item.empty()) held_out_.push_back(item);
    } else {
      return false;
    }
    return true;
  }
  void finish(const std::string& objective, const std::string& origin) override {
    if (format_.empty()) format_ = objective == "ar" ? "sequence" : "infill";
    check(format_ == "infill" || format_ == "sequence",
          origin + ": sudoku_format must be infill or sequence");
    check(!(objective == "ar" && format_ == "infill"),
          origin + ": an AR model needs sudoku_format = sequence");
    check(min_clues_ <= max_clues_, origin + ": sudoku_min_clues (" + std::to_string(min_clues_) +
                                        ") is above sudoku_max_clues (" + std::to_string(max_clues_) + ")");
    const std::string problem = sudoku_states_problem(format_, states_, hidden_weight_);
    check(problem.empty(), origin + ": " + problem);
  }
  std::vector<std::pair<std::string, std::string>> settings() const override {
    std::string held_out;
    for (const std::string& path : held_out_) held_out += (held_out.empty() ? "" : ",") + path;
    return {{"sudoku_format", format_},
            {"sudoku_min_clues", std::to_string(min_clues_)},
            {"sudoku_max_clues", std::to_string(max_clues_)},
            {"sudoku_states", states_},
            {"sudoku_hidden_weight", format_setting(hidden_weight_)},
            {"held_out", held_out}};
  }
  std::unique_ptr<DataSource> make_source(const TaskContext& context) const override {
    return make_sudoku_source(format_, min_clues_, max_clues_, held_out_, context.eval_examples,
                              context.seed + 77, states_, hidden_weight_);
  }
  // `canvas sudoku` reads the token layout from here.
  std::vector<std::pair<std::string, GgufValue>> model_metadata() const override {
    return {{"canvas.sudoku.format", GgufValue::string(format_)}};
  }
  // cell_accuracy: scored cells whose most likely digit is the solution's; grid_accuracy: validation
  // puzzles with every scored cell right (with the masked objective, given the cells left unmasked).
  std::vector<std::string> metric_names() const override { return {"cell_accuracy", "grid_accuracy"}; }
  std::vector<TaskMetric> validation_metrics(const std::vector<ScoredSequence>& scored) const override {
    int64_t grids_right = 0;
    for (const ScoredSequence& s : scored) grids_right += s.predicted == s.targets;
    return {{"cell_accuracy", scored_accuracy(scored)},
            {"grid_accuracy", scored.empty() ? 0.0 : double(grids_right) / double(scored.size())}};
  }

 private:
  std::string format_;  // infill | sequence; empty until finish: infill for diffusion, sequence for AR
  int min_clues_ = 22, max_clues_ = 50;
  std::string states_ = "random";
  float hidden_weight_ = 1;
  std::vector<std::string> held_out_;  // Sudoku files whose puzzles training must never see
};

}  // namespace

std::string sudoku_states_problem(const std::string& format, const std::string& states, float hidden_weight) {
  if (!(states == "random" || ((states == "singles" || states == "decoder") && format == "infill")))
    return "Sudoku states must be random, or singles or decoder with the infill format, got '" + states + "'";
  if (!(hidden_weight > 0 && (hidden_weight == 1.f || states == "decoder")))
    return "a Sudoku hidden-single weight must be positive, and other than 1 only with decoder states";
  return "";
}

std::unique_ptr<DataSource> make_sudoku_source(const std::string& format, int min_clues, int max_clues,
                                               const std::vector<std::string>& exclude, int64_t n_val,
                                               uint64_t val_seed, const std::string& states,
                                               float hidden_weight) {
  check(format == "infill" || format == "sequence",
        "Sudoku format must be infill or sequence, got '" + format + "'");
  const std::string problem = sudoku_states_problem(format, states, hidden_weight);
  check(problem.empty(), problem);
  std::set<std::string> excluded;
  for (const std::string& path : exclude)
    for (const SudokuExample& e : read_sudoku_file(path)) excluded.insert(format_sudoku(e.puzzle));
  return std::make_unique<SudokuSource>(format == "infill", states, hidden_weight, min_clues, max_clues,
                                        std::move(excluded), n_val, val_seed);
}

void register_sudoku_task() {
  register_task("sudoku", [] { return std::unique_ptr<Task>(std::make_unique<SudokuTask>()); });
}

}  // namespace canvas
