// Minimal command-line parsing for the canvas subcommands: flags with values, switches, clear errors.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace canvas::cli {

class Args {
 public:
  // value_flags take a value ("-m FILE" or "--model=FILE"); switches do not. Aliases map to one name.
  Args(int argc, char** argv, int first, const std::map<std::string, std::string>& aliases,
       const std::set<std::string>& value_flags, const std::set<std::string>& switches);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_float(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

// True when argv[2..] holds -h or --help (a subcommand then prints its usage and exits 0).
bool wants_help(int argc, char** argv);

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag);

// A model shipped under models/ (e.g. "text-masked.gguf"), looked up in ./models and in the source
// tree's models/; throws an error pointing at `help_command` --help when neither has it.
std::string shipped_model_path(const std::string& name, const std::string& help_command);

}  // namespace canvas::cli
