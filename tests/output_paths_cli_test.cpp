// Commands that write files never overwrite one they read (issue 35): `canvas quantize in.gguf ./in.gguf`
// used to replace its input, as the check compared path strings. Every output is compared by identity
// (device and inode) with the command's inputs: the same path, another spelling, a symlink and a hard
// link are refused before anything is written, leaving the input as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace canvas {
namespace {

namespace fs = std::filesystem;

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// `original` and the names it is known by in dir: itself, ./ and ../ spellings, a symlink, a hard link.
std::vector<std::string> aliases(const test::TempDir& dir, const std::string& name) {
  const std::string original = dir.path(name);
  fs::create_directories(dir.path("sub"));
  fs::create_symlink(original, dir.path("symlink-to-" + name));
  fs::create_hard_link(original, dir.path("hardlink-to-" + name));
  return {original, dir.path("./" + name), dir.path("sub/../" + name), dir.path("symlink-to-" + name),
          dir.path("hardlink-to-" + name)};
}

// Runs `args`, which must fail naming the clash, and checks that `input` still holds `before` and that
// no temporary file was left next to it.
void expect_refused(const std::string& args, const std::string& input, const std::string& before,
                    const std::string& env = "") {
  const test::CommandResult r = test::run_canvas(args, true, env);
  EXPECT_EQ(r.exit_code, 1) << args << ": " << r.output;
  EXPECT_NE(r.output.find("is the same file as"), std::string::npos) << args << ": " << r.output;
  EXPECT_NE(r.output.find("would destroy the input"), std::string::npos) << args << ": " << r.output;
  EXPECT_EQ(bytes_of(input), before) << args << ": the input changed";
  for (const auto& entry : fs::directory_iterator(fs::path(input).parent_path()))
    EXPECT_NE(entry.path().extension(), ".tmp") << args << " left " << entry.path();
}

TEST(OutputPathsCli, QuantizeNeverWritesOverItsInput) {
  test::TempDir dir;
  fs::copy_file(test::fixture("tiny-llada.gguf"), dir.path("in.gguf"));
  const std::string before = bytes_of(dir.path("in.gguf"));
  for (const std::string& out : aliases(dir, "in.gguf"))
    expect_refused("quantize " + dir.path("in.gguf") + " " + out + " q8_0", dir.path("in.gguf"), before);
  // Relative spellings from the input's directory, as in the issue.
  expect_refused("quantize in.gguf ./in.gguf q8_0", dir.path("in.gguf"), before, "cd " + dir.path("") + " &&");
  const test::CommandResult ok = test::run_canvas("quantize " + dir.path("in.gguf") + " " + dir.path("out.gguf") + " q8_0");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(bytes_of(dir.path("in.gguf")), before);
}

TEST(OutputPathsCli, ConvertNeverWritesOverTheCheckpoint) {
  test::TempDir dir;
  fs::copy(test::fixture("tiny-llada-hf"), dir.path("hf"), fs::copy_options::recursive);
  for (const char* name : {"model.safetensors", "config.json", "tokenizer.json"}) {
    const std::string file = dir.path(std::string("hf/") + name), before = bytes_of(file);
    expect_refused("convert --in " + dir.path("hf") + " --out " + file, file, before);
    fs::create_symlink(file, dir.path(std::string("link-") + name + ".gguf"));
    expect_refused("convert " + dir.path("hf") + " " + dir.path(std::string("link-") + name + ".gguf"), file, before);
  }
  // --to hf: the files written into DIR must not be the input GGUF.
  fs::copy_file(test::fixture("tiny-llada.gguf"), dir.path("model.gguf"));
  const std::string gguf_before = bytes_of(dir.path("model.gguf"));
  fs::create_directories(dir.path("out"));
  fs::create_symlink(dir.path("model.gguf"), dir.path("out/config.json"));
  expect_refused("convert --in " + dir.path("model.gguf") + " --out " + dir.path("out") + " --to hf",
                 dir.path("model.gguf"), gguf_before);
}

TEST(OutputPathsCli, TokenizerCommandsNeverWriteOverTheirInputs) {
  test::TempDir dir;
  fs::copy_file(test::source_path("models/tokenizer-kjv.gguf"), dir.path("vocab.gguf"));
  const std::string vocab = bytes_of(dir.path("vocab.gguf"));
  for (const std::string& out : aliases(dir, "vocab.gguf"))
    expect_refused("tokenizer export --tokenizer " + dir.path("vocab.gguf") + " --out " + out, dir.path("vocab.gguf"),
                   vocab);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "In the beginning was the word, paragraph " + std::to_string(i) + ".\n\n";
  std::ofstream(dir.path("corpus.txt")) << text;
  const std::string corpus = dir.path("corpus.txt");
  fs::create_hard_link(corpus, dir.path("corpus-link.txt"));
  expect_refused("tokenizer train --corpus kjv," + corpus + " --vocab-size 300 --out " + dir.path("corpus-link.txt"),
                 corpus, text);
  expect_refused("tokenizer train --corpus " + corpus + " --vocab-size 300 --out " + dir.path("v.gguf") + " --json " +
                     dir.path("./corpus.txt"),
                 corpus, text);
  expect_refused("tokenizer split --corpus " + corpus + " --train " + dir.path("sub/../corpus.txt"), corpus, text);
  expect_refused("tokenizer split --corpus " + corpus + " --held-out " + dir.path("corpus-link.txt"), corpus, text);
  // Two outputs that are one file would lose the first.
  std::ofstream(dir.path("both.txt")) << "keep";
  const test::CommandResult both = test::run_canvas("tokenizer split --corpus " + corpus + " --train " +
                                                    dir.path("both.txt") + " --held-out " + dir.path("./both.txt"));
  EXPECT_EQ(both.exit_code, 1) << both.output;
  EXPECT_NE(both.output.find("--held-out " + dir.path("./both.txt") + " is the same file as --train"), std::string::npos)
      << both.output;
  EXPECT_EQ(bytes_of(dir.path("both.txt")), "keep");
}

TEST(OutputPathsCli, BenchTrainJsonNeverWritesOverTheConfig) {
  test::TempDir dir;
  fs::copy_file(test::source_path("configs/bench-train-256.cfg"), dir.path("bench.cfg"));
  const std::string before = bytes_of(dir.path("bench.cfg"));
  for (const std::string& out : aliases(dir, "bench.cfg"))
    expect_refused("bench --train " + dir.path("bench.cfg") + " --json " + out, dir.path("bench.cfg"), before);
}

// bench writes --json and --plot after the run: both are checked against -m first.
TEST(OutputPathsCli, BenchJsonAndPlotNeverWriteOverTheModel) {
  test::TempDir dir;
  fs::copy_file(test::fixture("tiny-llada.gguf"), dir.path("in.gguf"));
  const std::string before = bytes_of(dir.path("in.gguf"));
  const std::vector<std::string> outputs = aliases(dir, "in.gguf");
  for (const char* flag : {" --json ", " --plot "})
    for (const std::string& out : outputs)
      expect_refused("bench -m " + dir.path("in.gguf") + " --quick --no-roofs" + flag + out, dir.path("in.gguf"), before);
}

// `sudoku generate --exclude F > F`: the shell empties F before canvas starts, so nothing would be
// excluded; refused. Appending (>> F) keeps F and works.
TEST(OutputPathsCli, SudokuGenerateRefusesAnExcludeFileEmptiedByItsOwnRedirect) {
  test::TempDir dir;
  const std::string held = dir.path("held.txt"), err = dir.path("err.txt");
  const std::string generate = std::string(CANVAS_BINARY) + " sudoku generate --source canvas -n 2 --exclude " + held;
  ASSERT_EQ(std::system((generate.substr(0, generate.find(" --exclude")) + " > " + held).c_str()), 0);
  const std::string puzzles = bytes_of(held);
  ASSERT_EQ(std::count(puzzles.begin(), puzzles.end(), '\n'), 2);
  const int status = std::system((generate + " > " + held + " 2> " + err).c_str());
  EXPECT_NE(status, 0);
  EXPECT_NE(bytes_of(err).find("standard output is --exclude file " + held), std::string::npos) << bytes_of(err);
  EXPECT_EQ(std::system((generate.substr(0, generate.find(" --exclude")) + " > " + held).c_str()), 0);
  EXPECT_EQ(std::system((generate + " -s 1 >> " + held + " 2> " + err).c_str()), 0) << bytes_of(err);
  const std::string appended = bytes_of(held);
  EXPECT_EQ(std::count(appended.begin(), appended.end(), '\n'), 4) << appended;
}

}  // namespace
}  // namespace canvas
