// The first hour with canvas as a llama.cpp user spends it (issue 59): replies that run to the end of the
// turn, llama.cpp's harmless flags, a stats line that can be turned off, a model's sampling and base-model
// notices in chat, and the small edges (-m FOLDER, -n past the context).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "gguf_copy.h"
#include "test_util.h"

namespace canvas::test {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
std::string model(const std::string& name) { return source_path("models/" + name); }

// The new tokens of each full stats line (--verbose: "... N new tokens, finish R ...") with its finish reason.
std::vector<std::pair<int, std::string>> replies(const std::string& output) {
  std::vector<std::pair<int, std::string>> out;
  static const std::regex line(R"((\d+) new tokens, finish (\w+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line); it != std::sregex_iterator(); ++it)
    out.emplace_back(std::stoi((*it)[1]), (*it)[2]);
  return out;
}

TEST(FirstHourCli, ChatRunsToTheEndOfTheTurnNotSixtyFourTokens) {
  TempDir dir;
  std::ofstream(dir.path("in.txt")) << "In the beginning\n";
  // With EOS ignored the reply can only end at the context (128 tokens for text-ar): past 64.
  const auto r = run_canvas("chat -m " + model("text-ar.gguf") + " --ignore-eos -t 1 -v < " + dir.path("in.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto stats = replies(r.output);
  ASSERT_EQ(stats.size(), 1u) << r.output;
  EXPECT_GT(stats[0].first, 64) << r.output;
  EXPECT_EQ(stats[0].second, "context") << r.output;
  // -n still caps it; generate keeps its documented default of 64.
  const auto capped = run_canvas("chat -m " + model("text-ar.gguf") + " --ignore-eos -n 5 -t 1 -v < " + dir.path("in.txt"));
  EXPECT_EQ(replies(capped.output).at(0).first, 5) << capped.output;
  const auto generated = run_canvas("generate -m " + model("text-ar.gguf") + " -p 'And God' --ignore-eos -t 1 --json", false);
  EXPECT_EQ(json_of(generated.output)["new_tokens"], 64) << generated.output;
}

TEST(FirstHourCli, ChatSamplesAPretrainedModelAndSaysWhenItLooksLikeABaseModel) {
  TempDir dir;
  std::ofstream(dir.path("in.txt")) << "In the beginning\n";
  // text-ar without canvas's training keys: a pretrained base model as far as chat can tell.
  const std::string base = pretrained_ar_model(dir, "base.gguf");
  const auto r = run_canvas("chat -m " + base + " -n 4 -t 1 < " + dir.path("in.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "[sampling: temp 0.8, top-k 40, top-p 0.95, min-p 0.05 (llama.cpp's defaults)"))
      << r.output;
  EXPECT_TRUE(has(r.output, "it looks like a base model")) << r.output;
  // --temp 0 is greedy (no sampling line); the shipped chat model is neither sampled nor a base model.
  const auto greedy = run_canvas("chat -m " + base + " -n 4 --temp 0 -t 1 < " + dir.path("in.txt"));
  EXPECT_FALSE(has(greedy.output, "[sampling:")) << greedy.output;
  const auto shipped = run_canvas("chat -m " + model("text-dg-chat.gguf") + " -n 4 --mode ar -t 1 < " + dir.path("in.txt"));
  ASSERT_EQ(shipped.exit_code, 0) << shipped.output;
  EXPECT_FALSE(has(shipped.output, "[sampling:")) << shipped.output;
  EXPECT_FALSE(has(shipped.output, "base model")) << shipped.output;
}

TEST(FirstHourCli, LlamaCppHarmlessFlagsAreNotedAndTheRunGoesOn) {
  const auto r = run_canvas("generate -m " + model("text-ar.gguf") +
                            " -p hi -n 2 -c 4096 -b 512 -ub 256 -fa on --mlock --no-mmap --color --jinja -no-cnv "
                            "--flash-attn --ctx-size=2048 -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* note : {"canvas: note: -c 4096 ignored (llama.cpp's context size", "-b 512 ignored", "-ub 256 ignored",
                           "-fa on ignored", "--mlock ignored", "--no-mmap ignored", "--color ignored", "--jinja ignored",
                           "-no-cnv ignored", "--flash-attn ignored", "--ctx-size 2048 ignored"})
    EXPECT_TRUE(has(r.output, note)) << note << "\n" << r.output;
  // -fa without a value does not take the next option's.
  EXPECT_EQ(run_canvas("generate -m " + model("text-ar.gguf") + " -fa -p hi -n 2 -t 1").exit_code, 0);
  EXPECT_EQ(run_canvas("generate -m " + model("text-ar.gguf") + " -p hi -n 2 -t 1 -c").exit_code, 1);
}

// One short stats line by default (the mode, tokens, tokens/s), the full one with --verbose, none with --quiet.
// stdout holds the text byte for byte; a newline ends its line only where stderr's line follows in the same
// stream (a pipe or file holding both; on a terminal too), so the stats line is never glued to the text.
TEST(FirstHourCli, ShortStatsLineOnALineOfItsOwnAndTheTextByteForByte) {
  TempDir dir;
  const std::string run = "generate -m " + model("text-ar.gguf") + " -p 'And God' -n 8 -t 1";
  const std::string text = json_of(run_canvas(run + " --json", false).output)["text"];
  ASSERT_FALSE(text.empty());
  ASSERT_NE(text.back(), '\n');  // the case where a newline must be added
  // stdout and stderr on one pipe, and on one file: the text, a newline, then the short line.
  const auto loud = run_canvas(run);
  ASSERT_EQ(loud.exit_code, 0) << loud.output;
  EXPECT_TRUE(std::regex_search(loud.output, std::regex(R"(\n\[ar \(auto\): 8 tokens, [0-9.]+ tokens/s\]\n$)")))
      << loud.output;
  EXPECT_EQ(loud.output.rfind(text + "\n[ar (auto): 8 tokens, ", 0), 0u) << loud.output;
  ASSERT_EQ(std::system((CANVAS_BINARY + std::string(" ") + run + " > " + dir.path("both.txt") + " 2>&1").c_str()), 0);
  EXPECT_EQ(read_text(dir.path("both.txt")).rfind(text + "\n[ar (auto): 8 tokens, ", 0), 0u)
      << read_text(dir.path("both.txt"));
  // stdout alone: exactly the text (--json's), no newline added.
  EXPECT_EQ(run_canvas(run + " 2>/dev/null", false).output, text);
  // --verbose: the full line, the finish reason and the rest.
  const auto verbose = run_canvas(run + " --verbose");
  EXPECT_TRUE(has(verbose.output, "\n[ar (auto: an autoregressive model), 8 new tokens, finish length, "))
      << verbose.output;
  // --quiet: no stats line, and so nothing added to the text even on a shared pipe.
  EXPECT_EQ(run_canvas(run + " --quiet").output, text);
  const auto noted = run_canvas(run + " --log-disable");  // llama.cpp's spelling (noted on stderr)
  ASSERT_EQ(noted.exit_code, 0) << noted.output;
  EXPECT_FALSE(has(noted.output, " tokens")) << noted.output;
}

TEST(FirstHourCli, ModelFolderWithoutConfigSaysWhatEachCommandTakes) {
  for (const char* command : {"generate -p hi", "chat"}) {
    const auto r = run_canvas(std::string(command) + " -m " + source_path("models") + " </dev/null");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(has(r.output, "is a folder without config.json")) << r.output;
    EXPECT_TRUE(has(r.output, "text-dg.gguf")) << r.output;
    EXPECT_TRUE(has(r.output, "canvas serve -m FOLDER serves every GGUF in a folder")) << r.output;
  }
}

TEST(FirstHourCli, NBeyondTheContextIsRefusedBeforeAutoTimesThePasses) {
  TempDir dir;
  const auto r = run_canvas("generate -m " + model("text-dg.gguf") + " -p hi -n 100000 -t 1 --cost-model " +
                            dir.path("cost.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "exceed the model's context length 4096")) << r.output;
  EXPECT_FALSE(has(r.output, "timing this model's passes")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.path("cost.json")));
}

}  // namespace
}  // namespace canvas::test
