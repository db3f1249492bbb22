// The canvas command line as users of llama.cpp and Hugging Face drive it: option tables, suggestions,
// --version, help, prompts from files and stdin, any -n, streaming, stop strings, seeds, sampling flags,
// chat formats and context overflow, --visual on terminals only, and the installed tree.
#include <fcntl.h>
#include <poll.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/gguf.h"
#include "core/cpu.h"
#include "gguf_copy.h"
#include "test_util.h"

namespace canvas {
namespace {

using test::run_canvas;

std::string llada() {
  return test::fixture("tiny-llada.gguf");
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using test::json_of;
using test::json_tokens;

int64_t json_count(const std::string& out) { return int64_t(json_of(out).value("tokens", nlohmann::json::array()).size()); }

uint64_t reported_seed(const std::string& out) {
  std::smatch m;
  if (std::regex_search(out, m, std::regex("seed\"?:? ?(\\d+)"))) return std::stoull(m[1]);
  return ~uint64_t(0);
}

TEST(CliOptions, VersionExitsZeroWithBuildInfo) {
  const auto r = run_canvas("--version", false);
  EXPECT_EQ(r.exit_code, 0);
  for (const char* part : {"canvas 0.", "built:", "commit:", "cpu:", "cores", "data dir:"})
    EXPECT_TRUE(has(r.output, part)) << part << " missing in " << r.output;
}

TEST(CliOptions, HelpCommandIsCommandDashDashHelp) {
  for (const char* command : {"generate", "chat", "logits", "inspect"}) {
    const auto a = run_canvas(std::string("help ") + command, false);
    const auto b = run_canvas(std::string(command) + " --help", false);
    EXPECT_EQ(a.exit_code, 0) << command;
    EXPECT_EQ(a.output, b.output) << command;
    EXPECT_TRUE(has(a.output, "usage: canvas " + std::string(command))) << a.output;
  }
  for (const char* sub : {"generate", "solve", "eval", "probe"}) {
    const auto r = run_canvas(std::string("sudoku ") + sub + " --help", false);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_TRUE(has(r.output, std::string("usage: canvas sudoku ") + sub)) << r.output;
  }
  const auto all = run_canvas("help", false);
  EXPECT_EQ(all.exit_code, 0);
  EXPECT_TRUE(has(all.output, "generate") && has(all.output, "sudoku")) << all.output;
}

// Every flag the issue asks for is in --help, which is generated from the same table the parser reads:
// each listed spelling is accepted (a misspelt one would be "unknown option").
TEST(CliOptions, HelpListsWhatTheParserAccepts) {
  const auto help = run_canvas("generate --help", false).output;
  for (const char* flag :
       {"-f, --file", "--stop", "--min-p", "--repeat-penalty", "--no-stream", "--visual-delay",
        "--temp, --temperature", "-n, --n-predict", "-r, --reverse-prompt", "(repeatable)", "--presence-penalty",
        "--frequency-penalty", "-l, --logit-bias"})
    EXPECT_TRUE(has(help, flag)) << flag;
  // llama.cpp / Hugging Face spellings of flags canvas has are accepted.
  const auto r =
      run_canvas("generate -m " + llada() +
                     " -p hi --n-predict 4 --temperature 0 -r zzz --reverse-prompt yyy --json -t 1",
                 false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(CliOptions, UnknownOptionsSuggestTheNearestAndNameLlamaCpp) {
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"generate -m " + llada() + " -p hi --tmep 0.5", "unknown option --tmep; did you mean --temp?"},
      {"generate -m " + llada() + " -p hi --top_k 5", "did you mean --top-k?"},
      {"generate -m " + llada() + " -p hi --repeat-penality 1.1", "did you mean --repeat-penalty?"},
      {"generate -m " + llada() + " -p hi -tb 2", "canvas uses -t for everything"},
      {"generate -m " + llada() + " -p hi -ngl 99", "--device cuda"},
      {"generate -m " + llada() + " -p hi --repeat-last-n 32",
       "--repeat-penalty looks at the last 64 tokens"},
      {"chat -m " + llada() + " --sytem hi", "did you mean --system?"},
      {"inspect --al x", "did you mean --all?"},
      {"sudoku solve --veiws 3", "did you mean --views?"},
      {"sudoku eval --data x --lmit 3", "did you mean --limit?"},
      {"score -m x --strid 3", "did you mean --stride?"},
      {"convert --in x --tpye q8_0", "did you mean --type?"},
      {"genrate", "did you mean generate?"},
  };
  for (const Case& c : cases) {
    const auto r = run_canvas(c.args + " </dev/null");
    EXPECT_EQ(r.exit_code, 1) << c.args;
    EXPECT_TRUE(has(r.output, c.message)) << c.args << ": " << r.output;
  }
  const auto far = run_canvas("generate -m " + llada() + " -p hi --zzzzzzzz 1");
  EXPECT_TRUE(has(far.output, "unknown option --zzzzzzzz (see --help)")) << far.output;
}

TEST(CliOptions, ThreadsAboveTheCoreCountWarn) {
  const int cores = usable_cpus();
  const std::string base = "generate -m " + llada() + " -p hi -n 2 --json ";
  const auto over = run_canvas(base + "-t " + std::to_string(cores + 1));
  EXPECT_EQ(over.exit_code, 0) << over.output;
  EXPECT_TRUE(has(over.output, "more threads than the " + std::to_string(cores) + " CPUs this process may use"))
      << over.output;
  const auto fine = run_canvas(base + "-t 1");
  EXPECT_FALSE(has(fine.output, "more threads than")) << fine.output;
}

TEST(CliGenerate, AnyNPadsTheCanvasAndCutsIt) {
  for (int n : {30, 5, 33}) {
    const auto r = run_canvas("generate -m " + llada() + " -p 'In the beginning' -n " + std::to_string(n) +
                                  " --block-length 8 --json -t 1",
                              false);
    ASSERT_EQ(r.exit_code, 0) << n << ": " << r.output;
    EXPECT_EQ(json_count(r.output), n) << r.output;
  }
  // Uniform-state: N is not a multiple of the canvas length.
  const auto u = run_canvas("generate -m " + test::fixture("tiny-diffusion-gemma") +
                                " -p hello -n 21 --block-length 8 --steps 4 -s 1 --json -t 1",
                            false);
  ASSERT_EQ(u.exit_code, 0) << u.output;
  EXPECT_EQ(json_count(u.output), 21) << u.output;
}

TEST(CliGenerate, BeyondTheContextNamesTheLimit) {
  const auto r = run_canvas("generate -m " + llada() + " -p hi -n 300 -t 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.output, "context length 256")) << r.output;
  EXPECT_TRUE(has(r.output, "at most")) << r.output;
  // A padded canvas must fit too: 250 rounds up to 256 in blocks of 32 and, with the prompt, exceeds 256.
  const auto padded = run_canvas("generate -m " + llada() + " -p hi -n 250 --block-length 32 -t 1");
  EXPECT_EQ(padded.exit_code, 1);
  EXPECT_TRUE(has(padded.output, "rounded up to whole blocks")) << padded.output;
  // Without --block-length, the default (32) gives way to one block of N where its padding would not fit.
  const auto one_block = run_canvas("generate -m " + llada() + " -p hi -n 250 -t 1 --json", false);
  EXPECT_EQ(one_block.exit_code, 0) << one_block.output;
  EXPECT_EQ(test::json_of(one_block.output)["passes"], 250) << one_block.output;
}

// Streaming writes the same text as waiting for the end, for every decoding mode.
TEST(CliGenerate, StreamedTextEqualsTheFinishedText) {
  const std::string cases[] = {
      "-m " + llada() + " -p 'In the beginning' -n 24 --block-length 8 --temp 0.9 -s 5",
      "-m " + llada() + " -p 'In the beginning' -n 12 --mode ar",
      "-m " + test::fixture("tiny-dream.gguf") + " -p 'And God said' -n 16 --block-length 4",
      "-m " + test::fixture("tiny-diffusion-gemma") + " -p hello -n 20 --block-length 8 --steps 4 -s 2",
      "-m " + test::source_path("models/text-ar.gguf") + " -p 'And God said' -n 30",
  };
  for (const std::string& c : cases) {
    const auto streamed = run_canvas("generate " + c + " -t 1", false);
    const auto waited = run_canvas("generate " + c + " -t 1 --no-stream", false);
    ASSERT_EQ(streamed.exit_code, 0) << c << streamed.output;
    EXPECT_EQ(streamed.output, waited.output) << c;
    EXPECT_FALSE(streamed.output.empty()) << c;
  }
}

// Streaming is about order, not time: on a terminal (script(1)), stdout and the --visual redraws on
// stderr interleave in one log. Streamed text appears before the last redraw (the last step); with
// --no-stream it comes after it.
// With --visual the frame owns the terminal while it is live: stdout's text comes after the alternate
// screen is left, streamed or not. Without --visual the text streams (StreamedTextEqualsTheFinishedText;
// serve's streaming tests see it arrive in pieces).
TEST(CliGenerate, VisualFrameFirstThenTheText) {
  test::TempDir dir;
  const std::string log = dir.path("tty.log");
  for (const std::string& model_args :
       {"-m " + test::source_path("models/text-ar.gguf") + " -p 'And God said' -n 24",
        "-m " + llada() + " -p 'In the beginning' -n 24 --block-length 8"}) {
    for (bool stream : {true, false}) {
      const std::string cmd = "script -qec \"" + std::string(CANVAS_BINARY) + " generate " + model_args +
                              " -t 1 --visual" + (stream ? "" : " --no-stream") + "\" " + log +
                              " >/dev/null 2>&1";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      const std::string tty = test::read_text(log);
      const size_t entered = tty.find("\x1b[?1049h"), left = tty.rfind("\x1b[?1049l");
      ASSERT_NE(entered, std::string::npos) << tty;
      ASSERT_NE(left, std::string::npos) << tty;
      // The stats line is the last thing on stderr; the text is printed between leaving and it.
      const size_t stats = tty.find(" tokens/s]", left);
      ASSERT_NE(stats, std::string::npos) << tty;
      const std::string between = tty.substr(left + 8, stats - left - 8);
      EXPECT_TRUE(std::any_of(between.begin(), between.end(), [](char ch) { return std::isalpha((unsigned char)ch); }))
          << model_args << ": no text after the frame: " << between;
    }
  }
}

// --visual a person can watch: each frame stays at least --visual-delay ms (default 50) on the alternate
// screen; when the view closes nothing of it stays, and the text follows once (as it does piped).
TEST(CliGenerate, VisualFramesStayOnScreenAndTheTextFollowsOnce) {
  test::TempDir dir;
  const std::string log = dir.path("tty.log");
  auto run = [&](const std::string& extra, double* seconds) {
    const std::string cmd = "script -qec \"" + std::string(CANVAS_BINARY) + " generate -m " + llada() +
                            " -p 'In the beginning' -n 16 --block-length 8 -s 1 -t 1 --visual" + extra + "\" " + log +
                            " >/dev/null 2>&1";
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return test::read_text(log);
  };
  double paced = 0, fast = 0;
  const std::string tty = run("", &paced);
  size_t frames = 0;
  for (size_t at = tty.find("\x1b[H\x1b[J"); at != std::string::npos; at = tty.find("\x1b[H\x1b[J", at + 1)) ++frames;
  EXPECT_GE(frames, 16u) << tty;  // one per step
  EXPECT_GE(paced, 0.05 * double(frames)) << frames << " frames";
  const size_t left = tty.rfind("\x1b[?1049l");
  ASSERT_NE(left, std::string::npos) << tty;
  const std::string after = tty.substr(left);
  EXPECT_EQ(after.find("passes]"), std::string::npos) << "a frame after the view: " << after;
  // The same run's text (the seed is given) up to its first non-ASCII byte (the JSON has U+FFFD where
  // stdout has the model's bytes), with the terminal's line ends.
  std::string text = test::json_of(run_canvas("generate -m " + llada() +
                                              " -p 'In the beginning' -n 16 --block-length 8 -s 1 -t 1 --json",
                                              false).output)["text"];
  text.erase(std::find_if(text.begin(), text.end(), [](char ch) { return (unsigned char)ch >= 0x80; }), text.end());
  ASSERT_FALSE(text.empty());
  for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 2)) text.insert(at, "\r");
  const size_t once = after.find(text);
  EXPECT_NE(once, std::string::npos) << after;
  EXPECT_EQ(after.find(text, once + 1), std::string::npos) << "the text twice: " << after;
  run(" --visual-delay 0", &fast);
  EXPECT_LT(fast, paced);
}

TEST(CliGenerate, PromptFromFileDashAndPipe) {
  test::TempDir dir;
  const std::string file = dir.path("prompt.txt");
  std::ofstream(file) << "In the beginning\n";
  const std::string base = "generate -m " + llada() + " -n 8 --json -t 1";
  const auto given = run_canvas(base + " -p 'In the beginning'", false);
  ASSERT_EQ(given.exit_code, 0) << given.output;
  const std::string want = json_tokens(given.output);
  EXPECT_EQ(json_tokens(run_canvas(base + " -f " + file, false).output), want);
  EXPECT_EQ(json_tokens(run_canvas(base + " --file " + file, false).output), want);
  EXPECT_EQ(json_tokens(run_canvas(base + " -p - < " + file, false).output), want);
  EXPECT_EQ(json_tokens(run_canvas("generate -m " + llada() + " -n 8 --json -t 1 < " + file, false).output),
            want);
  const auto both = run_canvas(base + " -p hi -f " + file);
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_TRUE(has(both.output, "not both")) << both.output;
  const auto none = run_canvas(base + " < /dev/null");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_TRUE(has(none.output, "no prompt given")) << none.output;
  const auto missing = run_canvas(base + " -f /nonexistent/prompt.txt");
  EXPECT_TRUE(has(missing.output, "/nonexistent/prompt.txt")) << missing.output;
}

// Prompt input is bounded (kMaxPromptBytes, 16 MiB): an endless device, a huge sparse file or an endless
// pipe ends at once with an error naming the limit; a directory is named as such; a FIFO is read with a
// notice (and gives the same tokens as the file).
TEST(CliGenerate, PromptInputIsBounded) {
  test::TempDir dir;
  const std::string base = "generate -m " + llada() + " -n 8 --json -t 1";
  const auto started = std::chrono::steady_clock::now();
  const auto zero = run_canvas(base + " -f /dev/zero");
  EXPECT_EQ(zero.exit_code, 1);
  EXPECT_TRUE(has(zero.output, "longer than 16 MiB (kMaxPromptBytes)")) << zero.output;
  EXPECT_TRUE(has(zero.output, "not a regular file")) << zero.output;
  const std::string sparse = dir.path("sparse.txt");
  ASSERT_EQ(truncate((std::ofstream(sparse), sparse.c_str()), off_t(4) << 30), 0);
  const auto huge = run_canvas(base + " -f " + sparse);
  EXPECT_EQ(huge.exit_code, 1);
  EXPECT_TRUE(has(huge.output, "more than 16 MiB (kMaxPromptBytes)")) << huge.output;
  const auto piped = run_canvas("generate -m " + llada() + " -n 8 -t 1 < /dev/zero");
  EXPECT_EQ(piped.exit_code, 1);
  EXPECT_TRUE(has(piped.output, "the prompt on stdin is longer than 16 MiB")) << piped.output;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
  const auto directory = run_canvas(base + " -f " + dir.path(""));
  EXPECT_EQ(directory.exit_code, 1);
  EXPECT_TRUE(has(directory.output, "is a directory")) << directory.output;
  const std::string fifo = dir.path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // A writer in the background (the shell runs it before canvas), canvas reading the FIFO.
  const auto fed = run_canvas(base + " -f " + fifo, true, "(echo 'In the beginning' > " + fifo + ") &");
  EXPECT_TRUE(has(fed.output, "a FIFO: waiting for a writer")) << fed.output;
  EXPECT_EQ(json_tokens(fed.output.substr(fed.output.find('{'))),
            json_tokens(run_canvas(base + " -p 'In the beginning'", false).output));
}

// Training data and Sudoku files are bounded too (kMaxCorpusBytes, 256 MiB): an endless device ends with an
// error naming the limit.
TEST(CliTrain, DataFilesAreBounded) {
  test::TempDir dir;
  std::ofstream(dir.path("z.cfg")) << "task = text\ntext_corpus = /dev/zero\nseq_len = 32\nsteps = 1\n";
  const auto corpus = run_canvas("train --config " + dir.path("z.cfg") + " --out " + dir.path("run"));
  EXPECT_EQ(corpus.exit_code, 1) << corpus.output;
  EXPECT_TRUE(has(corpus.output, "text corpus /dev/zero is longer than 256 MiB (kMaxCorpusBytes)")) << corpus.output;
  const auto sudoku = run_canvas("sudoku eval -m " + test::source_path("models/sudoku-masked.gguf") + " --data /dev/zero");
  EXPECT_EQ(sudoku.exit_code, 1) << sudoku.output;
  EXPECT_TRUE(has(sudoku.output, "Sudoku file /dev/zero is longer than 256 MiB (kMaxCorpusBytes)")) << sudoku.output;
}

TEST(CliGenerate, StopStringEndsTheTextAndTheGeneration) {
  const std::string base =
      "generate -m " + test::source_path("models/text-ar.gguf") + " -p 'And God said' -n 40 -t 1";
  const auto full = run_canvas(base + " --json", false);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const auto text_of = [](const std::string& json) { return json_of(json).value("text", std::string()); };
  const std::string text = text_of(full.output);
  ASSERT_GT(text.size(), 20u) << text;
  const std::string stop = text.substr(12, 4);  // a piece from the middle
  const std::string expected = text.substr(0, text.find(stop));
  const auto stopped = run_canvas(base + " --json --stop '" + stop + "' --stop 'never appears'", false);
  ASSERT_EQ(stopped.exit_code, 0) << stopped.output;
  EXPECT_EQ(text_of(stopped.output), expected);
  EXPECT_LT(json_count(stopped.output), json_count(full.output))
      << "generation went on after the stop string";
  // Streamed: the same text, nothing of the stop string (stdout alone: byte for byte).
  const auto streamed = run_canvas(base + " --stop '" + stop + "'", false);
  EXPECT_EQ(streamed.output, expected);
}

TEST(CliGenerate, MinPAndRepeatPenaltyShapeSampling) {
  const std::string base =
      "generate -m " + llada() + " -p 'In the beginning' -n 16 --block-length 8 --json -t 1";
  const std::string greedy = json_tokens(run_canvas(base, false).output);
  const std::string hot = json_tokens(run_canvas(base + " --temp 50 -s 1", false).output);
  // min-p 1 keeps only the most likely token: sampling at any temperature becomes greedy.
  const std::string hot_min_p = json_tokens(run_canvas(base + " --temp 50 -s 1 --min-p 1", false).output);
  EXPECT_NE(hot, greedy);
  EXPECT_EQ(hot_min_p, greedy);
  const std::string penalised = json_tokens(run_canvas(base + " --repeat-penalty 3", false).output);
  EXPECT_NE(penalised, greedy) << "a strong repetition penalty changes greedy text";
  EXPECT_EQ(json_tokens(run_canvas(base + " --repeat-penalty 1", false).output), greedy);
  const auto bad = run_canvas(base + " --min-p 2");
  EXPECT_TRUE(has(bad.output, "--min-p must be in [0, 1]")) << bad.output;
}

// -l/--logit-bias in llama.cpp's spelling: +100 makes greedy AR write the id everywhere, -inf keeps it out;
// what is not ID(+|-)BIAS, +inf and ids past the vocabulary are clear errors.
TEST(CliGenerate, LogitBiasSpelledAsLlamaCpp) {
  const std::string base =
      "generate -m " + test::source_path("models/text-ar.gguf") + " -p 'And God said' -n 6 --json -t 1 --ignore-eos";
  const nlohmann::json plain = nlohmann::json::parse(run_canvas(base, false).output)["tokens"];
  const std::string first = std::to_string(plain[0].get<int>()), third = std::to_string(plain[2].get<int>());
  const nlohmann::json forced = nlohmann::json::parse(run_canvas(base + " -l " + third + "+100", false).output)["tokens"];
  EXPECT_EQ(forced, nlohmann::json(std::vector<int>(6, plain[2].get<int>())));
  const auto banned = run_canvas(base + " --logit-bias " + first + "-inf -l " + third + "+0.5", false);
  ASSERT_EQ(banned.exit_code, 0) << banned.output;
  const nlohmann::json without = nlohmann::json::parse(banned.output)["tokens"];
  EXPECT_EQ(std::count(without.begin(), without.end(), plain[0]), 0) << without;
  for (const char* bad : {"12", "x+1", "12+", "12+-1", "12*3", "12+1x", "+12"})
    EXPECT_TRUE(has(run_canvas(base + " -l '" + bad + "'").output, "--logit-bias takes TOKEN_ID(+|-)BIAS"))
        << bad;
  EXPECT_TRUE(has(run_canvas(base + " -l 12+inf").output, "+inf is no logit")) << "+inf";
  EXPECT_TRUE(has(run_canvas(base + " -l 999999+1").output, "token id 999999 is outside the vocabulary"));
}

TEST(CliGenerate, RandomSeedIsReportedAndReproduces) {
  const std::string base =
      "generate -m " + llada() + " -p 'In the beginning' -n 16 --block-length 8 --temp 2 -t 1";
  const auto a = run_canvas(base + " --json", false);
  const auto b = run_canvas(base + " --json -s -1", false);
  const uint64_t seed_a = reported_seed(a.output), seed_b = reported_seed(b.output);
  ASSERT_NE(seed_a, ~uint64_t(0)) << a.output;
  ASSERT_NE(seed_b, ~uint64_t(0)) << b.output;
  EXPECT_NE(seed_a, seed_b);
  const auto again = run_canvas(base + " --json -s " + std::to_string(seed_a), false);
  EXPECT_EQ(json_tokens(again.output), json_tokens(a.output));
  EXPECT_EQ(reported_seed(again.output), seed_a);
  // The full stats line names it too.
  const auto stats = run_canvas(base + " -s 77 --verbose");
  EXPECT_TRUE(has(stats.output, "seed 77,")) << stats.output;
}

TEST(CliGenerate, ModeMismatchIsRefusedOrWarned) {
  const auto refused =
      run_canvas("generate -m " + test::source_path("models/text-ar.gguf") + " -p hi --mode diffusion");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(has(refused.output, "without a diffusion objective")) << refused.output;
  const auto warned = run_canvas("generate -m " + llada() + " -p hi -n 4 --mode ar -t 1");
  EXPECT_EQ(warned.exit_code, 0) << warned.output;
  EXPECT_TRUE(has(warned.output, "warning: 'llada' was trained as a masked-diffusion model"))
      << warned.output;
  const auto quiet = run_canvas("generate -m " + llada() + " -p hi -n 4 -t 1");
  EXPECT_FALSE(has(quiet.output, "warning")) << quiet.output;
}

// A file holding the given lines (chat's stdin).
std::string lines_file(const test::TempDir& dir, const std::string& text) {
  const std::string path = dir.path("input.txt");
  std::ofstream(path) << text;
  return path;
}

TEST(CliChat, SystemPromptAndDroppedTurns) {
  test::TempDir dir;
  const std::string input =
      lines_file(dir, "In the beginning\nAnd God said\nLet there be light\nAnd there was light\n");
  // The shipped text model has a context of 128 tokens: the third exchange no longer fits.
  const auto r = run_canvas("chat -m " + test::source_path("models/text-masked.gguf") +
                            " -n 8 -t 1 --verbose --system 'You answer briefly.' < " + input);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "models/text-masked.gguf")) << r.output;
  EXPECT_TRUE(has(r.output, "masked diffusion decoding")) << r.output;
  EXPECT_TRUE(has(r.output, "outgrew the context of 128 tokens: dropped the")) << r.output;
  // One reply (and its stats line) per user line, the overflow notwithstanding.
  const std::regex stats("8 new tokens, finish ");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(r.output.begin(), r.output.end(), stats), std::sregex_iterator()), 4)
      << r.output;
}

using test::with_chat_template;

// The format comes from the model file's tokenizer.chat_template (rendered by the Jinja subset); without
// one, or when the subset cannot render it, the built-in Gemma 4 one.
TEST(CliChat, FormatFromTheModelsChatTemplate) {
  test::TempDir dir;
  const std::string chatml = with_chat_template(
      dir, "chatml.gguf",
      "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
      "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  const std::string hello = " < " + lines_file(dir, "hello\n");
  const auto own = run_canvas("chat -m " + chatml + " -n 4 -t 1 -v" + hello);
  ASSERT_EQ(own.exit_code, 0) << own.output;
  EXPECT_TRUE(has(own.output, "format the model's (tokenizer.chat_template)")) << own.output;
  EXPECT_TRUE(has(own.output, "masked diffusion decoding")) << own.output;
  // The rendered prompt is the template's text: "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
  // in tiny-dream's byte-level tokens, the same count as the built-in chatml format gives.
  const auto builtin = run_canvas("chat -m " + chatml + " --template chatml -n 4 -t 1 -v" + hello);
  EXPECT_TRUE(has(builtin.output, "format chatml (--template)")) << builtin.output;
  std::smatch m1, m2;
  ASSERT_TRUE(std::regex_search(own.output, m1, std::regex("prompt (\\d+) tokens"))) << own.output;
  ASSERT_TRUE(std::regex_search(builtin.output, m2, std::regex("prompt (\\d+) tokens"))) << builtin.output;
  EXPECT_EQ(m1[1], m2[1]);
  const auto fallback = run_canvas("chat -m " + test::fixture("tiny-dream.gguf") + " -n 4 -t 1" + hello);
  EXPECT_TRUE(has(fallback.output, "format gemma4 (built-in (the model has no tokenizer.chat_template))"))
      << fallback.output;
  const std::string caller = with_chat_template(dir, "caller.gguf", "{% call turn() %}{{ m }}{% endcall %}");
  const auto unusable = run_canvas("chat -m " + caller + " -n 4 -t 1" + hello);
  EXPECT_EQ(unusable.exit_code, 0) << unusable.output;
  EXPECT_TRUE(
      has(unusable.output, "format gemma4 (built-in; the model's tokenizer.chat_template was not usable"))
      << unusable.output;
  EXPECT_TRUE(has(unusable.output, "call")) << unusable.output;
  // A template that refuses a conversation (here: any system turn) skips that turn; the chat goes on.
  const std::string strict = with_chat_template(dir, "strict.gguf",
                                                "{% for m in messages %}{% if m.role == 'system' %}{{ "
                                                "raise_exception('System role not supported') }}{% endif "
                                                "%}{{ m.content }}{% endfor %}");
  const auto refused = run_canvas("chat -m " + strict + " --system be -n 4 -t 1" + hello);
  EXPECT_EQ(refused.exit_code, 0) << refused.output;
  EXPECT_TRUE(has(refused.output, "System role not supported; turn skipped")) << refused.output;
  // A Hugging Face checkpoint directory: tokenizer_config.json's chat_template.
  const std::string hf = dir.path("hf");
  std::filesystem::copy(test::fixture("tiny-diffusion-gemma"), hf, std::filesystem::copy_options::recursive);
  std::ofstream(hf + "/tokenizer_config.json")
      << R"({"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"})";
  const auto from_dir = run_canvas("chat -m " + hf + " -n 4 --steps 2 -t 1" + hello);
  EXPECT_EQ(from_dir.exit_code, 0) << from_dir.output;
  EXPECT_TRUE(has(from_dir.output, "format the model's (tokenizer.chat_template)")) << from_dir.output;
  const auto bad = run_canvas("chat -m " + chatml + " --template jinja -n 4" + hello);
  EXPECT_TRUE(has(bad.output, "unknown chat format 'jinja'")) << bad.output;
}

TEST(CliVisual, OnlyOnATerminalWithControlCharactersEscaped) {
  const std::string gen = std::string(CANVAS_BINARY) + " generate -m " +
                          test::fixture("tiny-diffusion-gemma") +
                          " -p hello -n 16 --block-length 8 --steps 3 -s 3 -t 1 --visual";
  // Redirected: no escape codes, and a note why.
  const auto redirected = run_canvas("generate -m " + test::fixture("tiny-diffusion-gemma") +
                                     " -p hello -n 16 --block-length 8 --steps 3 -s 3 -t 1 --visual");
  EXPECT_EQ(redirected.exit_code, 0) << redirected.output;
  EXPECT_FALSE(has(redirected.output, "\x1b[")) << redirected.output;
  EXPECT_TRUE(has(redirected.output, "--visual ignored: stderr is not a terminal")) << redirected.output;
  // On a terminal (script(1) gives the command a pseudo-terminal): the canvas is drawn, and the only
  // control bytes are the view's own escape sequences and line ends.
  test::TempDir dir;
  const std::string log = dir.path("tty.log");
  const std::string cmd = "script -qec \"" + gen + " >/dev/null\" " + log + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string tty = test::read_text(log);
  EXPECT_TRUE(has(tty, "\x1b[?1049h")) << tty;  // the alternate screen
  EXPECT_TRUE(has(tty, "[diffusion: block 0 step 0")) << tty;
  for (unsigned char ch : tty)
    EXPECT_TRUE(ch >= 0x20 || ch == 0x1b || ch == '\n' || ch == '\r') << "raw control byte " << int(ch);
  const auto bad = run_canvas("generate -m " + llada() + " -p hi --visual-delay -5");
  EXPECT_TRUE(has(bad.output, "--visual-delay must be between")) << bad.output;
}

// The view's header names the mode (verify and AR have no blocks to count), the prompt has a style of its
// own (cyan, not the drafts' dim), and a chat's turn is drawn on its own line with the reply below it.
TEST(CliVisual, HeaderNamesTheModeAndAChatTurnStandsApart) {
  test::TempDir dir;
  const std::string log = dir.path("tty.log");
  auto in_terminal = [&](const std::string& args) {
    const std::string cmd = "script -qec \"" + std::string(CANVAS_BINARY) + " " + args + " >/dev/null\" " + log +
                            " >/dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return test::read_text(log);
  };
  const std::string cyan = "\x1b[36m";
  const std::string verify = in_terminal("generate -m " + test::fixture("tiny-diffusion-gemma") +
                                         " -p hello -n 12 --mode verify -s 3 -t 1 --visual --visual-delay 0");
  EXPECT_TRUE(has(verify, "[verify: ")) << verify;
  EXPECT_FALSE(has(verify, "[block ")) << verify;
  EXPECT_TRUE(has(verify, cyan + "hello\x1b[0m")) << verify;
  const std::string ar = in_terminal("generate -m " + test::source_path("models/text-ar.gguf") +
                                     " -p 'And God' -n 4 -t 1 --visual --visual-delay 0");
  EXPECT_TRUE(has(ar, "[ar: 4 tokens, ")) << ar;
  std::ofstream(dir.path("in.txt")) << "In the beginning\n";
  const std::string chat = in_terminal("chat -m " + test::source_path("models/text-masked.gguf") +
                                       " -n 8 -t 1 --visual --visual-delay 0 < " + dir.path("in.txt"));
  EXPECT_TRUE(has(chat, "[diffusion: block 0 step 0")) << chat;
  // The turn, then a line end (the terminal's \r\n) before the reply's first position.
  EXPECT_TRUE(has(chat, cyan + "In the beginning\r\n\x1b[0m")) << chat;
}

// cmake --install puts the binary, the default models and the bash completion in a prefix; the binary
// finds its models there from any directory.
TEST(CliInstall, InstalledBinaryFindsItsModels) {
  test::TempDir dir;
  const std::string prefix = dir.path("prefix");
  const std::string build = std::filesystem::path(CANVAS_BINARY).parent_path().string();
  ASSERT_EQ(std::system(("cmake --install " + build + " --prefix " + prefix + " >/dev/null").c_str()), 0);
  EXPECT_TRUE(std::filesystem::exists(prefix + "/bin/canvas"));
  EXPECT_TRUE(std::filesystem::exists(prefix + "/share/canvas/models/text-masked.gguf"));
  EXPECT_TRUE(std::filesystem::exists(prefix + "/share/canvas/models/text-dg.gguf"));
  EXPECT_TRUE(std::filesystem::exists(prefix + "/share/bash-completion/completions/canvas"));
  const std::string cmd = "cd / && echo hi | " + prefix + "/bin/canvas chat -n 4 -t 1 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, got);
  EXPECT_EQ(pclose(pipe), 0) << out;
  EXPECT_TRUE(has(out, prefix + "/share/canvas/models/text-dg-chat.gguf")) << out;
  // Completion offers the options of the subcommand being typed, read from the binary's own --help.
  const std::string complete = "bash -c 'source " + prefix +
                               "/share/bash-completion/completions/canvas; COMP_WORDS=(" + prefix +
                               "/bin/canvas generate --rep); COMP_CWORD=2; _canvas; echo ${COMPREPLY[@]}'";
  pipe = popen(complete.c_str(), "r");
  out.clear();
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, got);
  pclose(pipe);
  EXPECT_TRUE(has(out, "--repeat-penalty")) << out;
}

// "wrote ...: N tensors: a f32, b q8_0" must be exactly what the file holds (inspect's dtype column).
std::string summary_from_inspect(const std::string& gguf) {
  const auto r = run_canvas("inspect " + gguf, false);
  std::map<std::string, int64_t> counts;
  int64_t total = 0;
  std::istringstream in(r.output.substr(r.output.find("\ntensors (")));
  std::string line;
  std::getline(in, line);
  std::getline(in, line);
  std::getline(in, line);  // the header row
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name, type;
    if (!(fields >> name >> type) || line.empty() || line.find("parameters") != std::string::npos) break;
    ++counts[type];
    ++total;
  }
  std::string out = std::to_string(total) + " tensors:";
  bool first = true;
  for (const auto& [type, n] : counts) {
    out += (first ? " " : ", ") + std::to_string(n) + " " + type;
    first = false;
  }
  return out;
}

TEST(CliFiles, QuantizeReportsExactlyWhatItWroteAndEveryFallback) {
  test::TempDir dir;
  const std::string out = dir.path("q.gguf");
  for (const char* type : {"q8_0", "q4_k", "f16"}) {
    const auto r = run_canvas("quantize " + llada() + " " + out + " " + type);
    ASSERT_EQ(r.exit_code, 0) << type << ": " << r.output;
    EXPECT_TRUE(
        has(r.output, "wrote " + out + ": " + summary_from_inspect(out) + " (requested " + type + ")"))
        << type << ": " << r.output << "\ninspect says " << summary_from_inspect(out);
    EXPECT_TRUE(has(r.output, "[" + std::to_string(std::stoi(summary_from_inspect(out))) + " tensors in"))
        << r.output;
    // general.file_type as llama.cpp writes it (enum llama_ftype: MOSTLY_Q8_0 7, MOSTLY_Q4_K_S 14, MOSTLY_F16
    // 1).
    const std::string file_type = std::string(type) == "q8_0"   ? "7"
                                  : std::string(type) == "q4_k" ? "14"
                                                                : "1";
    EXPECT_TRUE(std::regex_search(run_canvas("inspect " + out, false).output,
                                  std::regex("general\\.file_type +uint32 +" + file_type + "\n")))
        << type;
    const auto gen = run_canvas("generate -m " + out + " -p hi -n 4 -t 1");
    EXPECT_EQ(gen.exit_code, 0) << type << ": " << gen.output;
  }
  // tiny-llada's rows (64 values) are not whole 256-blocks: every matrix falls back to q8_0, each listed.
  const auto k = run_canvas("quantize " + llada() + " " + out + " q4_k");
  EXPECT_TRUE(has(k.output, "token_embd.weight: q8_0 instead of q4_k (rows of")) << k.output;
  EXPECT_TRUE(has(k.output, "q8_0's 32-value blocks fit")) << k.output;
  const auto q8 = run_canvas("quantize " + llada() + " " + out + " q8_0");
  EXPECT_FALSE(has(q8.output, "instead of")) << q8.output;
  // A quantized file is re-quantized only with --allow-requantize (as llama-quantize asks); its own type is
  // a copy, no re-quantizing.
  const std::string again = out + ".q4_0.gguf";
  const auto refused = run_canvas("quantize " + out + " " + again + " q4_0");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_TRUE(has(refused.output, "is already quantized (")) << refused.output;
  EXPECT_TRUE(has(refused.output, "q8_0 matrices): re-quantizing to q4_0 compounds")) << refused.output;
  EXPECT_FALSE(std::filesystem::exists(again));
  EXPECT_EQ(run_canvas("quantize " + out + " " + again + " q4_0 --allow-requantize").exit_code, 0);
  EXPECT_EQ(run_canvas("quantize " + out + " " + again + " q8_0").exit_code, 0);
  EXPECT_EQ(run_canvas("quantize " + out + " " + again + " f16").exit_code, 1);  // f16 rounds q8_0's values
  EXPECT_EQ(run_canvas("quantize " + out + " " + again + " f32").exit_code, 0);  // f32 holds them exactly
  for (const std::string& bad :
       {"quantize " + llada() + " " + out + " q3_xs", "quantize " + llada() + " " + out,
        "quantize " + llada() + " " + llada() + " q8_0"}) {
    const auto r = run_canvas(bad);
    EXPECT_EQ(r.exit_code, 1) << bad << ": " << r.output;
  }
}

// --set writes metadata keys: an existing key keeps its type (a value that does not parse as it is an
// error naming the key), a new key takes the first type its text parses as.
TEST(CliFiles, QuantizeSetsMetadataKeys) {
  test::TempDir dir;
  const std::string out = dir.path("s.gguf");
  const auto r = run_canvas("quantize " + llada() + " " + out +
                            " f16 --set general.name=renamed --set diffusion.eb_entropy_bound=1.5 "
                            "--set diffusion.eb_max_steps=12 --set canvas.flag=true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string meta = run_canvas("inspect " + out, false).output;
  EXPECT_TRUE(std::regex_search(meta, std::regex("general\\.name +string +\"renamed\"\n"))) << meta;
  EXPECT_TRUE(std::regex_search(meta, std::regex("diffusion\\.eb_entropy_bound +float32 +1\\.5\n"))) << meta;
  EXPECT_TRUE(std::regex_search(meta, std::regex("diffusion\\.eb_max_steps +uint32 +12\n"))) << meta;
  EXPECT_TRUE(std::regex_search(meta, std::regex("canvas\\.flag +bool +true\n"))) << meta;
  // An existing float key refuses text; a missing '=' is an error.
  const auto bad = run_canvas("quantize " + out + " " + dir.path("t.gguf") + " f16 --set diffusion.eb_entropy_bound=abc");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(has(bad.output, "--set diffusion.eb_entropy_bound: 'abc' is not a finite number")) << bad.output;
  const auto no_eq = run_canvas("quantize " + llada() + " " + dir.path("t.gguf") + " f16 --set general.name");
  EXPECT_EQ(no_eq.exit_code, 1) << no_eq.output;
  EXPECT_TRUE(has(no_eq.output, "expected KEY=VALUE")) << no_eq.output;
}

TEST(CliFiles, ConvertReportsExactlyWhatItWrote) {
  test::TempDir dir;
  const std::string out = dir.path("c.gguf");
  const auto r =
      run_canvas("convert --in " + test::fixture("tiny-diffusion-gemma") + " --out " + out + " --type q4_k");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, summary_from_inspect(out) + " (requested q4_k)"))
      << r.output << "\ninspect says " << summary_from_inspect(out);
  EXPECT_TRUE(has(r.output, "instead of q4_k")) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\\[\\d+ tensors in [0-9.]+ s"))) << r.output;  // progress
}

TEST(CliScore, LongTextIsScoredInWindows) {
  test::TempDir dir;
  const std::string file = dir.path("long.txt");
  {
    std::ofstream f(file);
    for (int i = 0; i < 12; ++i)
      f << "In the beginning God created the heaven and the earth. And the earth was void. ";
  }
  const std::string base = "score -m " + test::source_path("models/text-ar.gguf") + " -f " + file + " -t 1";
  const auto half = run_canvas(base);
  ASSERT_EQ(half.exit_code, 0) << half.output;
  EXPECT_TRUE(has(half.output, "exceed the context of 128: scoring in")) << half.output;
  EXPECT_TRUE(has(half.output, "stride 64")) << half.output;
  EXPECT_TRUE(has(half.output, "windows in")) << half.output;
  const std::string fine = run_canvas(base + " --stride 16", false).output;
  const std::string coarse = run_canvas(base + " --stride 127", false).output;
  std::smatch m;
  auto field = [&](const std::string& out, const std::string& key) {
    return std::regex_search(out, m, std::regex("\"" + key + "\": ([0-9.]+)")) ? std::stod(m[1]) : -1.0;
  };
  EXPECT_EQ(field(fine, "tokens"), field(coarse, "tokens"))
      << "each token is scored once whatever the stride";
  EXPECT_EQ(field(half.output, "tokens"), field(coarse, "tokens"));
  EXPECT_GT(field(fine, "windows"), field(coarse, "windows"));
  EXPECT_EQ(field(fine, "stride"), 16);
  // More context per token (a smaller stride) predicts this repetitive text better.
  EXPECT_LT(field(fine, "nats_per_token"), field(coarse, "nats_per_token"));
  const auto short_text =
      run_canvas("score -m " + test::source_path("models/text-ar.gguf") + " -p 'In the beginning'", false);
  EXPECT_TRUE(has(short_text.output, "\"windows\": 1, \"stride\": 0")) << short_text.output;
  const auto bad = run_canvas(base + " --stride 500");
  EXPECT_TRUE(has(bad.output, "--stride must be between 1 and the context length - 1 (127)")) << bad.output;
}

TEST(CliProgress, SudokuEvalAndSolveReportCountRateAndEta) {
  const std::string data = test::source_path("data/sudoku/heldout-easy.txt");
  const auto eval = run_canvas("sudoku eval --data " + data + " --limit 4 --steps 20 -t 1");
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_TRUE(has(eval.output, "/4 puzzles,")) << eval.output;
  EXPECT_TRUE(has(eval.output, "ETA")) << eval.output;
  EXPECT_TRUE(has(eval.output, "[4 puzzles in")) << eval.output;
  test::TempDir dir;
  const std::string three = dir.path("three.txt");
  {
    std::ifstream in(data);
    std::ofstream out(three);
    std::string line;
    for (int i = 0; i < 3 && std::getline(in, line); ++i) out << line << "\n";
  }
  const auto solve = run_canvas("sudoku solve --steps 20 -t 1 < " + three);
  ASSERT_EQ(solve.exit_code, 0) << solve.output;
  EXPECT_TRUE(
      std::regex_search(solve.output, std::regex("\\[\\d+ puzzles in [0-9.]+ s, [0-9.]+ puzzles/s\\]")))
      << solve.output.substr(solve.output.size() - 300);
}

TEST(CliProgress, BenchAndQuantizeReportCountRateAndEta) {
  const auto bench = run_canvas("bench -m " + llada() + " --quick --no-roofs --cache prefix -t 1");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_TRUE(std::regex_search(bench.output, std::regex("1/\\d+ runs, [0-9.]+ runs/s, ETA \\d+ s")))
      << bench.output;
  test::TempDir dir;
  const auto quantize = run_canvas("quantize " + llada() + " " + dir.path("q.gguf") + " q8_0");
  EXPECT_TRUE(std::regex_search(quantize.output, std::regex("/\\d+ tensors, [0-9.]+ tensors/s, ETA \\d+ s")))
      << quantize.output;
}

// --device: cpu is the default; an unknown name is refused; cuda either runs (a build with the backend on a
// machine with a GPU) or says why not (no backend in this build, or no usable device), never a crash.
TEST(CliDevice, UnknownDevicesAreRefusedAndCudaSaysWhyNot) {
  const auto tpu = run_canvas("generate -m " + llada() + " -p hi -n 2 --device tpu");
  EXPECT_EQ(tpu.exit_code, 1);
  EXPECT_NE(tpu.output.find("--device: unknown device 'tpu' (cpu or cuda)"), std::string::npos) << tpu.output;
  const auto cpu = run_canvas("generate -m " + llada() + " -p hi -n 2 --device cpu -t 1");
  EXPECT_EQ(cpu.exit_code, 0) << cpu.output;
  for (const std::string& command : {"generate -m " + llada() + " -p hi -n 2", "score -m " + llada() + " -p hello",
                                     "bench -m " + llada() + " --quick --no-roofs"}) {
    const auto cuda = run_canvas(command + " --device cuda -t 1");
    if (cuda.exit_code == 0) continue;  // a GPU is here
    EXPECT_EQ(cuda.exit_code, 1) << command << ": " << cuda.output;
    const size_t at = cuda.output.find("--device cuda: ");
    ASSERT_NE(at, std::string::npos) << command << ": " << cuda.output;
    EXPECT_GT(cuda.output.find('\n', at), at + 16) << "no reason given: " << cuda.output;
  }
}

}  // namespace
}  // namespace canvas

namespace canvas {

// --think sets the template's enable_thinking (here it writes a longer prompt); a template without the switch
// says that --think does nothing. A template with Gemma 4's channels shows the reply split (the tiny model
// writes no markers: all of it is the answer).
TEST(CliChat, ThinkSetsTheTemplatesSwitch) {
  test::TempDir dir;
  const std::string switched = with_chat_template(
      dir, "think.gguf",
      "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if enable_thinking %} think step by step, then check every step twice before you answer{% endif %}"
      "{{ '<|channel>thought\\n<channel|>' if not enable_thinking | default(false) }}");
  const std::string hello = " < " + lines_file(dir, "hello\n");
  const auto plain = run_canvas("chat -m " + switched + " -n 4 -t 1 -v" + hello);
  const auto thinking = run_canvas("chat -m " + switched + " --think -n 4 -t 1 -v" + hello);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(thinking.exit_code, 0) << thinking.output;
  std::smatch m1, m2;
  ASSERT_TRUE(std::regex_search(plain.output, m1, std::regex("prompt (\\d+) tokens"))) << plain.output;
  ASSERT_TRUE(std::regex_search(thinking.output, m2, std::regex("prompt (\\d+) tokens"))) << thinking.output;
  EXPECT_GT(std::stoi(m2[1]), std::stoi(m1[1]));
  EXPECT_FALSE(has(thinking.output, "--think does nothing")) << thinking.output;
  EXPECT_FALSE(has(plain.output, "[thinking]")) << plain.output;
  const std::string plain_template = with_chat_template(dir, "plain.gguf", "{% for m in messages %}{{ m['content'] }}{% endfor %}");
  const auto ignored = run_canvas("chat -m " + plain_template + " --think -n 4 -t 1" + hello);
  ASSERT_EQ(ignored.exit_code, 0) << ignored.output;
  EXPECT_TRUE(has(ignored.output, "--think does nothing")) << ignored.output;
}

TEST(CliChat, SlashCommandsSaveLoadAndHelp) {
  test::TempDir dir;
  const std::string saved = dir.path("conversation.json");
  const std::string input = dir.path("input.txt");
  std::ofstream(input) << "/help\n/system Be brief.\nIn the beginning\n/save " + saved + "\n/bogus\n/reset\n/load " +
                              saved + "\n/exit\nnever read\n";
  const auto r = test::run_canvas("chat -m " + test::source_path("models/text-masked.gguf") + " -n 4 -t 1 -v < " + input);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n') > 0, true);
  EXPECT_NE(r.output.find("[system prompt set]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[saved 3 messages to"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[loaded 3 messages from"), std::string::npos) << r.output;
  // /help and the unknown command print the commands; neither goes to the model (one reply in all).
  size_t helps = 0;
  for (size_t at = r.output.find("commands: /help"); at != std::string::npos; at = r.output.find("commands: /help", at + 1))
    ++helps;
  EXPECT_EQ(helps, 2u) << r.output;
  EXPECT_NE(r.output.find("unknown command /bogus\n"), std::string::npos) << r.output;
  size_t replies = 0;
  for (size_t at = r.output.find("new tokens, finish"); at != std::string::npos; at = r.output.find("new tokens, finish", at + 1))
    ++replies;
  EXPECT_EQ(replies, 1u) << r.output;
  const nlohmann::json messages = nlohmann::json::parse(test::read_text(saved));
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[0]["role"], "system");
  EXPECT_EQ(messages[1]["content"], "In the beginning");
}

// Ctrl-C during a reply ends that reply and the chat goes on with the next line. The interrupt is sent once
// the reply's first text has reached stdout, so that it lands inside the reply however loaded the machine is.
TEST(CliChat, InterruptEndsTheReplyNotTheChat) {
  int in[2], out[2], err[2];
  ASSERT_EQ(pipe(in), 0);
  ASSERT_EQ(pipe(out), 0);
  ASSERT_EQ(pipe(err), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(in[1]);
    close(out[0]);
    close(err[0]);
    const std::string model = test::source_path("models/text-dg.gguf");
    // Seed 2: a reply that runs to the 3,000-token limit (several seconds), so the interrupt lands inside it.
    execl(CANVAS_BINARY, CANVAS_BINARY, "chat", "-m", model.c_str(), "-n", "3000", "-t", "1", "-s", "2",
          "--verbose", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  std::string log, text;
  // Reads both pipes (neither may fill and stall the chat) until `done` holds, or both have ended (false).
  auto read_until = [&](const std::function<bool()>& done) {
    bool out_open = true, err_open = true;
    while (!done()) {
      if (!out_open && !err_open) return false;
      pollfd fds[2] = {{out_open ? out[0] : -1, POLLIN, 0}, {err_open ? err[0] : -1, POLLIN, 0}};
      if (poll(fds, 2, 60000) <= 0) return false;
      char buf[4096];
      for (int i = 0; i < 2; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
        const ssize_t got = read(fds[i].fd, buf, sizeof buf);
        if (got <= 0) (i == 0 ? out_open : err_open) = false;
        else (i == 0 ? text : log).append(buf, size_t(got));
      }
    }
    return true;
  };
  ASSERT_TRUE(read_until([&] { return log.find("[chat:") != std::string::npos; })) << log;
  ASSERT_EQ(write(in[1], "In the beginning\n", 17), 17);
  ASSERT_TRUE(read_until([&] { return !text.empty(); })) << log;
  kill(pid, SIGINT);
  ASSERT_TRUE(read_until([&] { return log.find("[interrupted]") != std::string::npos; })) << log;
  const std::string next = "And God said\n/exit\n";
  ASSERT_EQ(write(in[1], next.data(), next.size()), ssize_t(next.size()));
  close(in[1]);
  read_until([] { return false; });  // to the end of both
  close(out[0]);
  close(err[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;
  size_t replies = 0;
  for (size_t at = log.find("new tokens, finish"); at != std::string::npos; at = log.find("new tokens, finish", at + 1))
    ++replies;
  EXPECT_EQ(replies, 2u) << log;  // the interrupted one and the next
}

// --canvas-length names the uniform-state canvas; --block-length stays its old name there (same tokens),
// and a model without a uniform-state canvas refuses it instead of reading it as a block length.
// Masked diffusion's --threshold and --cache none|dual are refused where they would be ignored, naming the
// mode in use; --suffix with verify names verify.
TEST(CliOptions, MaskedOptionsAreRefusedOutsideMaskedDiffusion) {
  const std::string dg = test::source_path("models/text-dg.gguf");
  auto r = run_canvas("generate -m " + dg + " -p 'And God said' -n 8 --threshold 0.9 --cost-model none");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "--threshold is masked diffusion's (Fast-dLLM), not uniform-state diffusion's")) << r.output;
  r = run_canvas("generate -m " + dg + " -p 'And God said' -n 8 --cache dual --mode ar");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "--cache none|dual is masked diffusion's; --mode ar keeps")) << r.output;
  r = run_canvas("generate -m " + dg + " -p 'And God said' -n 8 --suffix x --mode verify");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "need diffusion decoding, not --mode verify")) << r.output;
  r = run_canvas("generate -m " + llada() + " -p 'And God said' -n 8 --threshold 0.9 --cache dual");
  EXPECT_EQ(r.exit_code, 0) << r.output;  // masked diffusion's own
}

TEST(CliOptions, CanvasLengthNamesTheUniformStateCanvas) {
  const std::string dg = test::source_path("models/text-dg.gguf");
  const auto canvas = run_canvas("generate -m " + dg + " -p 'And God said' -n 24 --canvas-length 16 --seed 3 --json");
  const auto block = run_canvas("generate -m " + dg + " -p 'And God said' -n 24 --block-length 16 --seed 3 --json");
  const auto model = run_canvas("generate -m " + dg + " -p 'And God said' -n 24 --seed 3 --mode diffusion --json");
  ASSERT_EQ(canvas.exit_code, 0) << canvas.output;
  ASSERT_EQ(block.exit_code, 0) << block.output;
  EXPECT_EQ(json_tokens(canvas.output), json_tokens(block.output));
  // Two canvases of 16 rather than the model's one of 64: a canvas is encoded between them.
  EXPECT_GE(json_of(canvas.output)["steps_per_canvas"].size(), 2u) << canvas.output;
  EXPECT_EQ(json_of(model.output)["steps_per_canvas"].size(), 1u) << model.output;
  const auto masked = run_canvas("generate -m " + llada() + " -p 'And God said' -n 8 --canvas-length 16");
  EXPECT_EQ(masked.exit_code, 1) << masked.output;
  EXPECT_TRUE(has(masked.output, "--canvas-length is the canvas of uniform-state diffusion")) << masked.output;
  const auto both = run_canvas("generate -m " + dg + " -p 'And God said' -n 8 --canvas-length 16 --block-length 8");
  EXPECT_EQ(both.exit_code, 1) << both.output;
  EXPECT_TRUE(has(both.output, "disagree")) << both.output;
}

}  // namespace canvas
