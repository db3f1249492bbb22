// Data sources for training.
#include "train/data.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/gguf.h"
#include "io/tokenizer.h"
#include "train/sudoku.h"

namespace canvas::train {

std::vector<std::pair<std::string, GgufValue>> byte_tokenizer_metadata(bool with_mask_token) {
  // GPT-2's byte-to-unicode alphabet, then the two specials.
  const auto& alphabet = gpt2_byte_to_unicode();
  std::vector<std::string> tokens(alphabet.begin(), alphabet.end());
  tokens.push_back("<|endoftext|>");
  tokens.push_back("<|mdm_mask|>");
  std::vector<int64_t> types(256, 1);
  types.push_back(3);
  types.push_back(3);
  std::vector<std::pair<std::string, GgufValue>> metadata = {
      {"tokenizer.ggml.model", GgufValue::string("gpt2")},
      {"tokenizer.ggml.pre", GgufValue::string("gpt-2")},  // llama.cpp's name ("gpt2" is refused there)
      {"tokenizer.ggml.tokens", GgufValue::string_array(tokens)},
      {"tokenizer.ggml.token_type", GgufValue::int_array(GgufType::Int32, types)},
      {"tokenizer.ggml.merges", GgufValue::string_array({})},
      {"tokenizer.ggml.eos_token_id", GgufValue::u32(uint32_t(kByteEos))},
      {"tokenizer.ggml.add_bos_token", GgufValue::boolean(false)},
  };
  if (with_mask_token) metadata.emplace_back("tokenizer.ggml.mask_token_id", GgufValue::u32(uint32_t(kByteMask)));
  return metadata;
}

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
      : infill_(infill), states_(states), hidden_weight_(hidden_weight), min_clues_(min_clues), max_clues_(max_clues), exclude_(std::move(exclude)) {
    check(min_clues >= 17 && max_clues <= 80 && min_clues <= max_clues, "Sudoku clue range must lie in 17..80");
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

class TextSource : public DataSource {
 public:
  TextSource(const std::string& text, int64_t seq_len, double val_fraction, int64_t n_val) : seq_len_(seq_len) {
    check(seq_len >= 2, "sequence length must be at least 2");
    const size_t split = size_t(double(text.size()) * (1.0 - val_fraction));
    check(split > size_t(seq_len) * 2 && text.size() - split >= size_t(seq_len),
          "text corpus of " + std::to_string(text.size()) + " bytes is too small for sequences of " +
              std::to_string(seq_len));
    for (size_t i = 0; i < split; ++i) train_.push_back(int32_t(static_cast<unsigned char>(text[i])));
    for (size_t at = split; at + size_t(seq_len) <= text.size() && int64_t(validation_.size()) < n_val; at += size_t(seq_len)) {
      Example e;
      for (size_t i = at; i < at + size_t(seq_len); ++i) e.tokens.push_back(int32_t(static_cast<unsigned char>(text[i])));
      validation_.push_back(std::move(e));
    }
  }
  Example sample(Rng& rng) const override {
    const size_t start = size_t(rng.below(uint64_t(train_.size() - size_t(seq_len_))));
    Example e;
    e.tokens.assign(train_.begin() + int64_t(start), train_.begin() + int64_t(start) + seq_len_);
    return e;
  }
  const std::vector<Example>& validation() const override { return validation_; }
  int64_t sequence_length() const override { return seq_len_; }

 private:
  int64_t seq_len_;
  std::vector<int32_t> train_;
  std::vector<Example> validation_;
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
                                               uint64_t val_seed, const std::string& states, float hidden_weight) {
  check(format == "infill" || format == "sequence", "Sudoku format must be infill or sequence, got '" + format + "'");
  const std::string problem = sudoku_states_problem(format, states, hidden_weight);
  check(problem.empty(), problem);
  std::set<std::string> excluded;
  for (const std::string& path : exclude)
    for (const SudokuExample& e : read_sudoku_file(path)) excluded.insert(format_sudoku(e.puzzle));
  return std::make_unique<SudokuSource>(format == "infill", states, hidden_weight, min_clues, max_clues,
                                        std::move(excluded), n_val, val_seed);
}

std::unique_ptr<DataSource> make_text_source(const std::string& text, int64_t seq_len, double val_fraction,
                                             int64_t n_val) {
  return std::make_unique<TextSource>(text, seq_len, val_fraction, n_val);
}

std::string load_text_corpus(const std::string& name) {
  if (name == "bible") {
    FILE* pipe = popen("bible -f 'Gen1:1-Rev22:21' 2>/dev/null", "r");
    check(pipe != nullptr, "cannot run `bible` (install Debian's bible-kjv package)");
    std::string text;
    char buf[8192];
    while (std::fgets(buf, sizeof buf, pipe)) {
      std::string line(buf);
      const size_t space = line.find(' ');  // drop the "Gen1:1 " reference
      if (space != std::string::npos) text += line.substr(space + 1);
    }
    const int status = pclose(pipe);
    check(status == 0 && text.size() > 1000000, "`bible` printed too little text (is bible-kjv installed?)");
    return text;
  }
  std::ifstream in(name, std::ios::binary);
  check(bool(in), "cannot open text corpus " + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace canvas::train
