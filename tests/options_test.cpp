// The option tables of src/cli, called directly: parsing (spellings, --key=value, switches, repeats,
// numbers), the errors and suggestions for unknown options, --help's layout, and comma lists.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/options.h"
#include "core/error.h"

namespace canvas::cli {
namespace {

const Command kTool{"tool",
                    "canvas tool [options]",
                    "Does a thing.",
                    {
                        {"-m,--model", "FILE", "the model"},
                        {"-n,--n-predict", "N", "tokens to write"},
                        {"--temp,--temperature", "T", "sampling temperature"},
                        heading("Extras:"),
                        {"--stop", "TEXT", "stop string", true},
                        {"--verbose", "", "say more"},
                        {"--legacy", "X", "an old spelling", false, true},
                    },
                    "Notes here."};

// Args over argv = {"canvas", "tool", words...}, options from index 2.
Args parse(std::vector<std::string> words) {
  std::vector<std::string> all = {"canvas", "tool"};
  all.insert(all.end(), words.begin(), words.end());
  std::vector<char*> argv;
  for (std::string& w : all) argv.push_back(w.data());
  return Args(kTool, int(argv.size()), argv.data(), 2);
}

// The message of the Error parse throws ("" when it parses).
std::string parse_error(std::vector<std::string> words) {
  try {
    parse(std::move(words));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Options, SpellingsValuesAndSwitches) {
  const Args a = parse({"-m", "x.gguf", "--temperature=0.5", "--verbose", "--stop", "a", "--stop", "b", "-", "-3"});
  EXPECT_EQ(a.get("model", ""), "x.gguf");
  EXPECT_DOUBLE_EQ(a.get_float("temp", 1), 0.5);  // keyed by the first --long spelling
  EXPECT_TRUE(a.has("verbose"));
  EXPECT_FALSE(a.has("n-predict"));
  EXPECT_EQ(a.get_int("n-predict", 64), 64);
  EXPECT_EQ(a.get_all("stop"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(a.positional(), (std::vector<std::string>{"-", "-3"}));  // stdin and negative numbers
  EXPECT_EQ(parse({"-n", "7", "-n", "7"}).get_int("n-predict", 0), 7);  // the same value twice is fine
  EXPECT_EQ(parse({"--legacy", "y"}).get("legacy", ""), "y");            // hidden, yet accepted
}

TEST(Options, ErrorsNameTheOptionAndSuggest) {
  EXPECT_NE(parse_error({"-n", "7", "-n", "8"}).find("given twice with different values"), std::string::npos);
  EXPECT_NE(parse_error({"--verbose=1"}).find("takes no value"), std::string::npos);
  EXPECT_NE(parse_error({"-m"}).find("needs a value"), std::string::npos);
  EXPECT_NE(parse_error({"--temprature", "1"}).find("did you mean --temperature?"), std::string::npos);
  EXPECT_NE(parse_error({"--mod", "x"}).find("did you mean --model?"), std::string::npos);
  EXPECT_EQ(parse_error({"--zzzzzzzz"}), "unknown option --zzzzzzzz (see --help)");
  // llama.cpp's flags say what canvas does instead.
  EXPECT_NE(parse_error({"-ngl", "99"}).find("--device cuda"), std::string::npos);
  // ... and those that change nothing here are taken with their value (a note on stderr).
  EXPECT_EQ(parse({"-c", "4096", "-n", "7"}).get_int("n-predict", 0), 7);
  EXPECT_EQ(parse({"-fa", "-n", "7"}).get_int("n-predict", 0), 7);
  EXPECT_TRUE(parse({"-fa", "off"}).positional().empty());
  EXPECT_THROW(parse({"-n", "seven"}).get_int("n-predict", 0), Error);
  EXPECT_THROW(parse({"-n", "7x"}).get_int("n-predict", 0), Error);
  EXPECT_THROW(parse({"--temp", "hot"}).get_float("temp", 0), Error);
}

TEST(Options, HelpListsTheTable) {
  const std::string help = format_help(kTool);
  EXPECT_EQ(help.rfind("usage: canvas tool [options]\n\nDoes a thing.\n\n", 0), 0u) << help;
  EXPECT_NE(help.find("  -m, --model FILE          the model\n"), std::string::npos) << help;
  EXPECT_NE(help.find("      --temp, --temperature T\n                            sampling temperature\n"),
            std::string::npos)
      << help;  // too long for the column: the help goes on the next line
  EXPECT_NE(help.find("Extras:\n"), std::string::npos);
  EXPECT_NE(help.find("stop string (repeatable)"), std::string::npos);
  EXPECT_EQ(help.find("--legacy"), std::string::npos);  // hidden
  EXPECT_EQ(help.substr(help.size() - 13), "\nNotes here.\n");
  std::vector<std::string> words = {"canvas", "tool", "-x", "--help"};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  EXPECT_TRUE(wants_help(int(argv.size()), argv.data(), 2));
  EXPECT_FALSE(wants_help(3, argv.data(), 2));
}

const Command kGroupA{"tool a", "canvas tool a [-n N]", "Does a.", {{"-n,--n-predict", "N", "count"}},
                      "A's own notes."};
const Command kGroupB{"tool b", "canvas tool b", "Does b.", {}, ""};
int run_a(int, char**) { return 7; }
int run_b(int, char**) { return 8; }

int run_group(std::vector<std::string> words) {
  static const CommandGroup group{"tool", "canvas tool <a|b> [options]", "Two things.",
                                  {{&kGroupA, run_a}, {&kGroupB, run_b}}, "Group notes."};
  words.insert(words.begin(), {"canvas", "tool"});
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return run_command_group(group, int(argv.size()), argv.data());
}

// A command of subcommands: its help shows each subcommand's (indented, without their notes), then its own
// notes; the dispatcher runs the named one and names the known ones for any other.
TEST(Options, CommandGroupsHelpAndDispatch) {
  const CommandGroup group{"tool", "canvas tool <a|b> [options]", "Two things.",
                           {{&kGroupA, run_a}, {&kGroupB, run_b}}, "Group notes."};
  const std::string help = format_group_help(group);
  EXPECT_EQ(help.rfind("usage: canvas tool <a|b> [options]\n\nTwo things.\n\n  usage: canvas tool a [-n N]\n", 0), 0u)
      << help;
  EXPECT_NE(help.find("\n    -n, --n-predict N         count\n"), std::string::npos) << help;
  EXPECT_NE(help.find("  usage: canvas tool b\n\n  Does b.\n"), std::string::npos) << help;
  EXPECT_EQ(help.find("A's own notes."), std::string::npos) << help;
  EXPECT_EQ(help.substr(help.size() - 14), "\nGroup notes.\n");
  EXPECT_EQ(run_group({"a", "-n", "3"}), 7);
  EXPECT_EQ(run_group({"b"}), 8);
  try {
    run_group({"c"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "unknown tool command 'c' (a, b); see canvas tool --help");
  }
  EXPECT_EQ(join_options({{{"-a", "", "x"}}, {}, {{"-b", "", "y"}, {"-c", "", "z"}}}).size(), 3u);
}

TEST(Options, CommaLists) {
  EXPECT_EQ(parse({"-n", "8, 16,32"}).get_int_list("n-predict", {1}), (std::vector<int64_t>{8, 16, 32}));
  EXPECT_EQ(parse({}).get_int_list("n-predict", {1}), std::vector<int64_t>{1});
  EXPECT_EQ(parse({"--temp", "0.5,1"}).get_float_list("temp"), (std::vector<float>{0.5f, 1.f}));
  EXPECT_TRUE(parse({}).get_float_list("temp").empty());
  EXPECT_THROW(parse({"-n", "8,x"}).get_int_list("n-predict", {}), Error);
  EXPECT_THROW(parse({"-n", ","}).get_int_list("n-predict", {}), Error);
  EXPECT_THROW(parse({"--temp", "0.5,hot"}).get_float_list("temp"), Error);
  EXPECT_EQ(split_list("81, 27,,9 "), (std::vector<std::string>{"81", "27", "9"}));
  EXPECT_EQ(split_lists({"a,b", " c ", ""}), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(parse_id_list("1,106", "--stop-ids"), (std::vector<int32_t>{1, 106}));
  EXPECT_THROW(parse_id_list("1,-2", "--stop-ids"), Error);
  EXPECT_THROW(parse_id_list("", "--stop-ids"), Error);
  EXPECT_THROW(parse_id_list("1,,2", "--stop-ids"), Error);
}

}  // namespace
}  // namespace canvas::cli
