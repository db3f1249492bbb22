// The canvas command line as a user drives it: output formats, help, and clear errors on bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "sudoku/sudoku.h"

namespace canvas {
namespace {

TEST(Cli, GenerateJsonHasEveryField) {
  const auto r = test::run_canvas("generate -m " + test::fixture("tiny-llada.gguf") +
                                      " -p 'In the beginning' -n 16 --block-length 8 --steps 8 --json -t 2",
                                  false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.front(), '{');
  const nlohmann::json j = nlohmann::json::parse(r.output);
  // One schema for every mode (the stats line's fields, by name).
  for (const char* key : {"text", "tokens", "mode", "finish_reason", "prompt_tokens", "new_tokens", "pad_tokens",
                          "passes", "encoder_passes", "tokens_per_pass", "tokens_per_forward", "prompt_ms", "decode_ms",
                          "tokens_per_second", "rows_computed", "seed"})
    EXPECT_TRUE(j.contains(key)) << key << " missing in " << r.output;
  EXPECT_EQ(j["passes"], 8);
  EXPECT_EQ(j["new_tokens"], j["tokens"].size());
  EXPECT_DOUBLE_EQ(j["tokens_per_pass"].get<double>(), double(j["tokens"].size()) / 8.0);
  EXPECT_EQ(j["finish_reason"], j["tokens"].size() == 16 ? "length" : "eos");
}

// --ignore-eos (llama.cpp's flag): the chat model ends its reply to "Hi" with the end of turn after a few
// tokens; with the flag it writes all N, and says the length ended it.
TEST(Cli, IgnoreEosGeneratesAllTokens) {
  const std::string base = "generate -m " + test::source_path("models/text-dg-chat.gguf") +
                           " --chat -p Hi -n 48 --mode ar --json -s 1 -t 1";
  const auto plain = test::run_canvas(base, false);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const nlohmann::json a = nlohmann::json::parse(plain.output);
  ASSERT_EQ(a["finish_reason"], "eos") << plain.output;
  ASSERT_LT(a["new_tokens"].get<int>(), 48);
  const auto all = test::run_canvas(base + " --ignore-eos", false);
  ASSERT_EQ(all.exit_code, 0) << all.output;
  const nlohmann::json b = nlohmann::json::parse(all.output);
  EXPECT_EQ(b["new_tokens"], 48);
  EXPECT_EQ(b["finish_reason"], "length");
  // The tokens before the end of turn are the same: the flag only keeps going.
  for (size_t i = 0; i < a["tokens"].size(); ++i) EXPECT_EQ(a["tokens"][i], b["tokens"][i]) << i;
}

// Options that would be ignored are refused, naming the mode in use; --template works with generate --chat.
TEST(Cli, VerifyOptionsOutsideVerifyAndTemplateWithoutChatAreRefused) {
  const std::string base = "generate -m " + test::source_path("models/text-dg.gguf") + " -p And -n 4 ";
  for (const char* option :
       {"--draft-length 3", "--draft-steps 2", "--overlap", "--draft-lookup 2", "--draft-lookup-length 4"}) {
    for (const char* mode : {"ar", "diffusion"}) {
      const auto r = test::run_canvas(base + "--mode " + mode + " " + option);
      EXPECT_NE(r.exit_code, 0) << option << " " << mode;
      const std::string name = std::string(option).substr(0, std::string(option).find(' '));
      EXPECT_NE(r.output.find(name + " applies to --mode verify, not --mode " + mode), std::string::npos) << r.output;
    }
  }
  const auto lone = test::run_canvas(base + "--mode ar --template gemma");
  EXPECT_NE(lone.exit_code, 0);
  EXPECT_NE(lone.output.find("--template applies with --chat"), std::string::npos) << lone.output;
  const auto chat = test::run_canvas("generate -m " + test::source_path("models/text-dg-chat.gguf") +
                                         " --chat --template gemma4 -p Hi -n 4 --mode ar --json -s 1",
                                     false);
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  // The gemma4 turns around "Hi": more prompt tokens than the two of "Hi" alone.
  EXPECT_GT(nlohmann::json::parse(chat.output)["prompt_tokens"].get<int>(), 4) << chat.output;
}

// tokenize, detokenize, score and bench use the shipped text model without -m, as generate does.
TEST(Cli, ToolsDefaultToTheShippedModel) {
  const auto t = test::run_canvas("tokenize -p 'And God said' --json", false);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const auto ids = nlohmann::json::parse(t.output)["ids"];
  const auto with_m = test::run_canvas("tokenize -m " + test::source_path("models/text-dg.gguf") +
                                           " -p 'And God said' --json",
                                       false);
  ASSERT_EQ(with_m.exit_code, 0) << with_m.output;
  EXPECT_EQ(ids, nlohmann::json::parse(with_m.output)["ids"]);
  std::string list;
  for (const auto& id : ids) list += (list.empty() ? "" : ",") + std::to_string(id.get<int>());
  const auto d = test::run_canvas("detokenize --ids " + list, false);
  ASSERT_EQ(d.exit_code, 0) << d.output;
  EXPECT_EQ(d.output, "And God said\n");
  const auto s = test::run_canvas("score -p 'And God said unto Moses'");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("\"bits_per_byte\""), std::string::npos) << s.output;
  const auto b = test::run_canvas("bench --quick --no-roofs --modes ar");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("text-dg.gguf"), std::string::npos) << b.output;
}

// tokenize -f reads its file with the prompt's bound: a 300 MB file (it ran out of memory) is refused by its
// size before it is read, naming the file, its size and the limit; a file within the bound tokenizes.
TEST(Cli, TokenizeFileIsBounded) {
  test::TempDir dir;
  const std::string huge = dir.path("huge.txt");
  ASSERT_EQ(truncate((std::ofstream(huge), huge.c_str()), off_t(300) << 20), 0);  // sparse: no disk
  const auto refused = test::run_canvas("tokenize -f " + huge);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.output.find("text file " + huge + " has 314572800 bytes, more than 16 MiB (kMaxPromptBytes)"),
            std::string::npos)
      << refused.output;
  const std::string small = dir.path("small.txt");
  std::ofstream(small) << "And God said";
  const auto t = test::run_canvas("tokenize -f " + small + " --json", false);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_EQ(nlohmann::json::parse(t.output)["ids"],
            nlohmann::json::parse(test::run_canvas("tokenize -p 'And God said' --json", false).output)["ids"]);
}

TEST(Cli, GenerateTextThenStatsLine) {
  for (const char* extra : {"--mode ar", "--cache none", "--cache dual --algorithm margin", "--threshold 0.5",
                            "--temp 0.8 --top-k 10 --top-p 0.9 -s 3", "--visual"}) {
    const auto r = test::run_canvas("generate -m " + test::fixture("tiny-dream.gguf") + " -p 'And God said' -n 8 " +
                                    extra);
    ASSERT_EQ(r.exit_code, 0) << extra << ": " << r.output;
    EXPECT_NE(r.output.find(" tokens, "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(" tokens/s]\n"), std::string::npos) << r.output;
  }
}

TEST(Cli, BadInputGivesClearErrors) {
  struct Case {
    std::string args, message;
  };
  const std::string model = test::fixture("tiny-llada.gguf");
  const Case cases[] = {
      {"generate -m /nonexistent/model.gguf -p hi", "cannot open"},
      {"generate -m /nonexistent.gguf -p hi", "/nonexistent.gguf"},
      {"generate -m " + model + " -p hi --cache sideways", "unknown cache mode"},
      {"generate -m " + model + " -p hi --algorithm best", "unknown unmasking order"},
      {"generate -m " + model + " -p hi -n 32 --block-length 8 --steps 6", "multiple of the number of blocks"},
      {"generate -m " + model + " -p hi -n 100000", "context length"},
      {"generate -m " + model + " -p hi --bogus", "unknown option --bogus"},
      {"generate -m " + model + " -p hi -n abc", "not an integer"},
      {"generate -m " + model + " -p hi --temp inf", "--temp must be between 0 and 100"},
      {"generate -m " + model + " -p hi --temp 1e3", "--temp must be between 0 and 100"},
      {"logits -m " + model + " --ids 1,x --out /tmp/x.npy", "not a token id"},
      {"logits -m " + model + " --ids 1,999999 --out /tmp/x.npy", "outside the vocabulary"},
      {"inspect " + test::fixture("tiny-llada.ids.txt"), "tiny-llada.ids.txt"},
      {"frobnicate", "unknown command"},
  };
  for (const Case& c : cases) {
    const auto r = test::run_canvas(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << ": " << r.output;
  }
}

TEST(Cli, HelpListsTheOptions) {
  const auto r = test::run_canvas("generate --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--steps", "--block-length", "--algorithm", "--threshold", "--cache", "--mode", "--temp",
                           "--top-k", "--top-p", "--seed", "--threads", "--visual", "--json"})
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
}

TEST(Cli, InspectPrintsMetadataAndTensors) {
  const auto r = test::run_canvas("inspect " + test::fixture("tiny-dream.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"general.architecture", "\"dream\"", "tokenizer.ggml.tokens", "blk.0.attn_q.bias",
                        "token_embd.weight", "parameters"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s;
}

// README's first command: no -m means the shipped default model, which must be a trained text model.
TEST(Cli, GenerateWithoutModelUsesTheShippedTextModel) {
  const auto r = canvas::test::run_canvas("generate -p 'And God said' -n 16 -t 1 --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"text\":"), std::string::npos) << r.output;
  const auto inspect = canvas::test::run_canvas("inspect " + canvas::test::source_path("models/text-masked.gguf"));
  EXPECT_NE(inspect.output.find("training.step"), std::string::npos) << inspect.output;
}

// canvas sudoku solve without -m uses the shipped solver, which solves held-out simple puzzles (its
// default decoder solves 98.5% of data/sudoku/heldout-simple.txt, the first 10 among them; docs/training.md).
TEST(Cli, SudokuSolveWithoutModelUsesTheShippedSolver) {
  const std::string data = canvas::test::source_path("data/sudoku/heldout-simple.txt");
  const auto r = canvas::test::run_canvas("sudoku solve -t 1 < " + data + " 2>&1 | head -10", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream file(data);
  std::istringstream got(r.output);
  std::string line, puzzle, solution, rating, answer;
  int n = 0;
  while (n < 10 && std::getline(file, line)) {
    std::istringstream fields(line);
    fields >> puzzle >> solution >> rating;
    ASSERT_TRUE(std::getline(got, answer)) << r.output;
    EXPECT_EQ(answer, solution) << "puzzle " << n << ": " << puzzle;
    ++n;
  }
  EXPECT_EQ(n, 10);
}

// sudoku probe on simple puzzles (naked singles finish them): every state of a full path is scored, so
// puzzle i with B_i blanks has B_i states and B_i + (B_i - 1) + ... + 1 scored cells, and the shipped
// solver, which has learned naked singles, gets every one of them and every state's top choice right.
TEST(Cli, SudokuProbeScoresEveryStateOfTheSinglesPath) {
  const std::string simple = canvas::test::source_path("data/sudoku/heldout-simple.txt");
  const auto r = canvas::test::run_canvas("sudoku probe --data " + simple + " --limit 3 -t 2", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<SudokuExample> data = read_sudoku_file(simple);
  int64_t states = 0, cells = 0;
  for (size_t i = 0; i < 3; ++i) {
    const int64_t blanks = 81 - count_clues(data[i].puzzle);
    states += blanks;
    cells += blanks * (blanks + 1) / 2;
  }
  EXPECT_NE(r.output.find("3 puzzles, " + std::to_string(states) + " states"), std::string::npos) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  int64_t scored = 0;
  while (std::getline(lines, line)) {
    for (const std::string name : {"naked single", "hidden: ", "neither"})
      if (line.rfind(name, 0) == 0) scored += std::stoll(line.substr(18));
    if (line.rfind("naked single", 0) == 0) {
      EXPECT_NE(line.find(" 100.00 |"), std::string::npos) << line;
    }
  }
  EXPECT_EQ(scored, cells) << r.output;
  EXPECT_NE(r.output.find("most probable (cell, digit) right: 100.00% of " + std::to_string(states)), std::string::npos)
      << r.output;
}

// Decoding over symmetric views: one view is the default decoder (the same commits, so the same
// scores), and eight views still solve the simple puzzles the shipped solver solves.
TEST(Cli, SudokuViewsOneIsGreedyAndEightSolve) {
  const std::string data = canvas::test::source_path("data/sudoku/heldout-easy.txt");
  const auto greedy = canvas::test::run_canvas("sudoku eval --data " + data + " --limit 12 -t 2 --json", false);
  const auto one = canvas::test::run_canvas("sudoku eval --data " + data + " --limit 12 --views 1 -t 2 --json", false);
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto field = [](const std::string& out, const std::string& key) {
    const size_t at = out.find("\"" + key + "\": ");
    return at == std::string::npos ? std::string("missing") : out.substr(at, out.find(',', at) - at);
  };
  EXPECT_EQ(field(greedy.output, "solved"), field(one.output, "solved"));
  EXPECT_EQ(field(greedy.output, "cell_accuracy"), field(one.output, "cell_accuracy"));
  const std::string simple = canvas::test::source_path("data/sudoku/heldout-simple.txt");
  const auto r = canvas::test::run_canvas("sudoku solve --views 8 -t 2 < " + simple + " 2>&1 | head -3", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream file(simple);
  std::istringstream got(r.output);
  std::string line, puzzle, solution, answer;
  for (int n = 0; n < 3; ++n) {
    ASSERT_TRUE(std::getline(file, line));
    std::istringstream(line) >> puzzle >> solution;
    ASSERT_TRUE(std::getline(got, answer)) << r.output;
    EXPECT_EQ(answer, solution) << "puzzle " << n;
  }
}

}  // namespace
}  // namespace canvas

namespace canvas {

TEST(Cli, VocabularyOnlyGgufAsModelIsNamedAsSuch) {
  const auto r = test::run_canvas("generate -m " + test::source_path("models/tokenizer-kjv.gguf") + " -p hi -n 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("vocabulary-only GGUF"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--tokenizer"), std::string::npos) << r.output;
}

TEST(Cli, InspectAllPrintsWholeStrings) {
  const std::string out = test::temp_path("long-name.gguf");
  const std::string name(300, 'x');
  const auto q = test::run_canvas("quantize " + test::source_path("models/text-ar.gguf") + " " + out +
                                  " f32 --set general.name=" + name);
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EXPECT_NE(test::run_canvas("inspect " + out + " --all").output.find(name), std::string::npos);
  EXPECT_EQ(test::run_canvas("inspect " + out).output.find(name), std::string::npos);  // abbreviated by default
  std::filesystem::remove(out);
}

}  // namespace canvas

namespace canvas {

// --visual through a pseudo-terminal (util-linux `script`): the frame lives on the alternate screen, which
// is left at the end and on SIGINT; the text and the stats come after it; the redraw pauses are not
// counted as decoding time.
TEST(VisualCli, AlternateScreenIsLeftAndPausesAreNotDecodingTime) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no `script` to make a terminal";
  auto in_terminal = [](const std::string& args) {
    const std::string cmd = "script -qec \"" + std::string(CANVAS_BINARY) + " " + args + "\" /dev/null 2>&1";
    std::string out;
    FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) return out;
    char buf[4096];
    for (size_t got; (got = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, got);
    pclose(pipe);
    return out;
  };
  const std::string enter = "\x1b[?1049h", leave = "\x1b[?1049l";
  const std::string out = in_terminal("generate -p 'And God said' -n 16 --visual --visual-delay 50 --json -t 1");
  ASSERT_NE(out.find(enter), std::string::npos) << out;
  const size_t left = out.rfind(leave);
  ASSERT_NE(left, std::string::npos) << out;
  EXPECT_EQ(out.find("{\"text\""), out.find("{\"text\"", left)) << "the JSON is printed after the frame, not inside it";
  const nlohmann::json j = test::json_of(out.substr(left));
  ASSERT_TRUE(j.contains("passes")) << out;
  EXPECT_LT(j["decode_ms"].get<double>(), 50.0 * j["passes"].get<double>()) << "the redraw pauses were counted";
  // The shell starts the run in the background with SIGINT ignored until canvas's first frame installs its
  // handler, so the signal comes well after that frame even on a loaded machine (3 s), and well before the
  // run's end (about 15 frames of 500 ms).
  const std::string interrupted =
      in_terminal("generate -p 'And God said' -n 64 --visual --visual-delay 500 -t 1 & sleep 3; kill -INT \\$!; wait");
  ASSERT_NE(interrupted.find(enter), std::string::npos) << interrupted;
  EXPECT_GT(interrupted.rfind(leave), interrupted.rfind(enter)) << "the alternate screen was left on SIGINT";
  EXPECT_EQ(interrupted.find(" tokens/s]"), std::string::npos) << "the run was not interrupted: " << interrupted;
}

}  // namespace canvas
