// The option tables of train, bench, serve, tokenize, detokenize and the tokenizer subcommands: --help
// lists exactly the flags each command has always had, the parser accepts every spelling --help shows,
// and a misspelt option gets the nearest one.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace canvas {
namespace {

using test::run_canvas;

struct Listed {
  std::string spelling;
  bool takes_value = false;
};

// The option spellings of a --help text: lines "  -m, --model MODEL   help" (the spellings, then an
// optional placeholder, then the help), not the continuation lines indented to the help column.
std::vector<Listed> listed_options(const std::string& help) {
  std::vector<Listed> out;
  std::istringstream lines(help);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos || start < 2 || start > 8 || line[start] != '-') continue;
    // Spellings start with '-'; a placeholder (FILE, N, LIST...) is upper case; then comes the help.
    std::istringstream words(line.substr(start));
    std::vector<std::string> spellings;
    bool value = false;
    for (std::string w; words >> w;) {
      if (w[0] == '-') {
        if (w.back() == ',') w.pop_back();
        spellings.push_back(w);
        continue;
      }
      value = w[0] >= 'A' && w[0] <= 'Z';
      break;
    }
    for (const std::string& w : spellings) out.push_back({w, value});
  }
  return out;
}

struct CommandFlags {
  std::string invocation;  // what comes after "canvas"
  std::set<std::string> flags;
};

// Every spelling each command accepted before its options moved into a table (flags are interfaces).
const std::vector<CommandFlags>& commands() {
  static const std::vector<CommandFlags> all = {
      {"train", {"--config", "--out", "--steps", "--stop-after", "-t", "--threads", "--force"}},
      {"serve", {"-m", "--model", "--host", "--port", "--parallel", "--queue", "--mode", "--api-key", "--device",
                 "--cpu-moe", "--n-cpu-moe", "--allowed-hosts", "--cors", "--max-connections", "--check-weights",
                 "--cost-model", "--draft-datastore"}},
      {"tokenize", {"-m", "--model", "-p", "--prompt", "-f", "--file", "--json", "--bos"}},
      {"detokenize", {"-m", "--model", "--ids"}},
      {"bench",
       {"-m", "--model", "--synthetic", "--type", "--layers", "--list", "--save", "-p", "--n-prompt", "-n", "--n-gen",
        "--modes", "--cache", "--block-length", "--steps", "--threshold", "-t", "--threads", "--warmup",
        "--repeats", "-s", "--seed", "--quick", "--no-roofs", "--json", "--plot", "--train", "--device", "--cpu-moe",
        "--n-cpu-moe", "--profile", "--draft-length"}},
      {"bench --train x.cfg", {"--train", "--steps", "--warmup", "-t", "--threads", "--json"}},
      {"tokenizer train",
       {"--corpus", "--vocab-size", "--out", "--json", "--val-fraction", "--character-coverage",
        "--min-frequency"}},
      {"tokenizer export", {"--tokenizer", "--out"}},
      {"tokenizer eval", {"--tokenizer", "--corpus", "--val-fraction"}},
      {"tokenizer encode", {"--tokenizer", "-p", "--prompt"}},
      {"tokenizer split", {"--corpus", "--val-fraction", "--train", "--held-out"}},
  };
  return all;
}

TEST(CliTables, HelpListsEveryOptionOfTheTableAndTheParserAcceptsIt) {
  for (const CommandFlags& c : commands()) {
    const auto help = run_canvas(c.invocation + " --help", false);
    ASSERT_EQ(help.exit_code, 0) << c.invocation;
    const std::vector<Listed> listed = listed_options(help.output);
    std::set<std::string> shown;
    for (const Listed& l : listed) shown.insert(l.spelling);
    EXPECT_EQ(shown, c.flags) << c.invocation << " --help:\n" << help.output;
    // Each spelling --help shows is one the parser knows: parsing gets past it to the unknown option after
    // it. All of them in one run first (the parser stops at the first option it does not know); where that
    // run ends elsewhere (an option such as bench's --train hands the rest to another command), one by one.
    std::string all = c.invocation;
    for (const Listed& l : listed) all += " " + l.spelling + (l.takes_value ? " 1" : "");
    const auto combined = run_canvas(all + " --zzzzzzzz </dev/null");
    if (combined.exit_code == 1 && combined.output.find("unknown option --zzzzzzzz") != std::string::npos) continue;
    for (const Listed& l : listed) {
      const std::string args = c.invocation + " " + l.spelling + (l.takes_value ? " 1" : "") + " --zzzzzzzz";
      const auto r = run_canvas(args + " </dev/null");
      EXPECT_EQ(r.exit_code, 1) << args;
      EXPECT_NE(r.output.find("unknown option --zzzzzzzz"), std::string::npos) << args << ": " << r.output;
    }
  }
  // canvas tokenizer --help shows every subcommand's options.
  const auto all = run_canvas("tokenizer --help", false);
  EXPECT_EQ(all.exit_code, 0);
  for (const CommandFlags& c : commands())
    if (c.invocation.rfind("tokenizer ", 0) == 0) {
      EXPECT_NE(all.output.find("usage: " + ("canvas " + c.invocation)), std::string::npos) << c.invocation;
      for (const std::string& flag : c.flags)
        EXPECT_TRUE(all.output.find(" " + flag + " ") != std::string::npos ||
                    all.output.find(" " + flag + ",") != std::string::npos)
            << flag << " in " << all.output;
    }
}

TEST(CliTables, UnknownOptionsSuggestTheNearest) {
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"train --config x.cfg --stop-afer 3", "unknown option --stop-afer; did you mean --stop-after?"},
      {"train --confg x.cfg", "did you mean --config?"},
      {"bench --synthetic x --repeets 2", "unknown option --repeets; did you mean --repeats?"},
      {"bench --synthetic x --n-promt 2", "did you mean --n-prompt?"},
      {"bench --train x.cfg --warmpu 1", "did you mean --warmup?"},
      {"serve --prot 8081", "unknown option --prot; did you mean --port?"},
      {"serve --paralel 2", "did you mean --parallel?"},
      {"tokenize -m x --jsn", "did you mean --json?"},
      {"tokenizer train --vocab-sise 9", "did you mean --vocab-size?"},
  };
  for (const Case& c : cases) {
    const auto r = run_canvas(c.args + " </dev/null");
    EXPECT_EQ(r.exit_code, 1) << c.args;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << ": " << r.output;
  }
}

}  // namespace
}  // namespace canvas
