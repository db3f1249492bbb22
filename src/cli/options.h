// Command-line options: one declarative table per (sub)command drives both parsing and --help; unknown
// options get the nearest known spelling, and llama.cpp's flags what canvas does instead.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace canvas::cli {

// One row of a subcommand's option table. Adding a flag is one such line.
struct Option {
  std::string
      names;  // comma-separated spellings, e.g. "-m,--model"; the first --long one is the key ("model")
  std::string value;        // the value's placeholder ("FILE"); empty: a switch
  std::string help;         // shown in --help; '\n' starts an indented continuation line
  bool repeatable = false;  // may be given more than once (Args::get_all)
  bool hidden = false;      // accepted (e.g. a llama.cpp spelling) but not listed in --help
};

// The option lists one after another (tables that share a run of options).
std::vector<Option> join_options(std::initializer_list<std::vector<Option>> lists);

// A row with empty names is a heading line in --help (its help text), e.g. "Masked diffusion only:".
inline Option heading(const std::string& text) {
  return Option{"", "", text};
}

struct Command {
  std::string name;      // "generate" ("sudoku solve" for nested commands)
  std::string synopsis;  // the usage line(s) after "usage: "
  std::string about;     // paragraphs between the usage line and the options
  std::vector<Option> options;
  std::string notes;  // text after the options
};

// The --help text of a command: usage, about, the option table (aligned, wrapped by hand) and notes.
std::string format_help(const Command& command);

// A command made of subcommands ("canvas sudoku <generate|solve|eval|probe>"), each with its own table.
struct CommandGroup {
  std::string name;      // "tokenizer"
  std::string synopsis;  // "canvas tokenizer <train|export|...> [options]"
  std::string about;
  struct Sub {
    const Command* command;  // its name is "GROUP SUB"
    int (*run)(int argc, char** argv);
  };
  std::vector<Sub> subcommands;
  std::string notes;  // after the subcommands
};
// The group's --help: usage and about, then every subcommand's help (without its notes) indented, then
// the notes.
std::string format_group_help(const CommandGroup& group);
// `canvas GROUP SUB ...`: runs SUB (argv[2]); without one, prints the group's help to stderr and returns
// 1; -h, --help or `GROUP --help` prints it to stdout; an unknown SUB throws Error naming the known ones.
int run_command_group(const CommandGroup& group, int argc, char** argv);

class Args {
 public:
  // Parses argv[first..] against the command's table. Throws Error for an unknown option (naming the
  // nearest known one, and llama.cpp's spelling when the user typed one), a missing value, a value given
  // to a switch, or a non-repeatable option given twice with different values.
  Args(const Command& command, int argc, char** argv, int first);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback) const;  // the last value given
  std::vector<std::string> get_all(const std::string& name) const;              // every value, in order
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_float(const std::string& name, double fallback) const;
  // A comma-separated list of numbers ("--steps 8,16,32"): `fallback` when the option is absent; an item that
  // is not a number, or a list without items, is an Error.
  std::vector<int64_t> get_int_list(const std::string& name, std::vector<int64_t> fallback) const;
  std::vector<float> get_float_list(const std::string& name, std::vector<float> fallback = {}) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // For commands that take none: throws Error "unexpected argument 'X'" (then `hint`) for the first one.
  void check_no_positional(const std::string& hint = "") const;

 private:
  // Value flags take a value ("-m FILE" or "--model=FILE"); switches do not; aliases map each spelling
  // to its key.
  void parse(int argc, char** argv, int first, const std::map<std::string, std::string>& aliases,
             const std::set<std::string>& value_flags, const std::set<std::string>& switches);
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

// True when argv[first..] holds -h or --help (a subcommand then prints its usage and exits 0).
bool wants_help(int argc, char** argv, int first = 2);

// Prints format_help(command) to stdout and returns true when argv[first..] asks for help.
bool print_help_if_asked(const Command& command, int argc, char** argv, int first = 2);

// "unknown option X" with the nearest of `known` ("did you mean --temp?") and, for a llama.cpp flag,
// what canvas does instead.
std::string unknown_option_message(const std::string& option, const std::vector<std::string>& known);

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag);

// The items of a comma-separated option value ("81,27,9"), spaces around them trimmed, empty items skipped.
std::vector<std::string> split_list(const std::string& text);
// The items of every value of a repeatable option ("--cors a,b --cors c" -> a, b, c).
std::vector<std::string> split_lists(const std::vector<std::string>& values);

// Thread count of -t/--threads (0 or absent: all cores), range-checked; warns on stderr when it exceeds
// the machine's cores (oversubscribed threads make every pass wait on descheduled workers).
int thread_count(const Args& args);

}  // namespace canvas::cli
