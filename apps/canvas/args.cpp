// Argument parsing for the CLI.
#include "args.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace canvas::cli {

Args::Args(int argc, char** argv, int first, const std::map<std::string, std::string>& aliases,
           const std::set<std::string>& value_flags, const std::set<std::string>& switches) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-' || (arg[1] >= '0' && arg[1] <= '9')) {
      positional_.push_back(arg);
      continue;
    }
    std::string value;
    bool has_value = false;
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    auto alias = aliases.find(arg);
    const std::string name = alias != aliases.end() ? alias->second : arg;
    if (switches.count(name)) {
      check(!has_value, "option " + arg + " takes no value");
      values_[name] = "1";
    } else if (value_flags.count(name)) {
      if (!has_value) {
        check(i + 1 < argc, "option " + arg + " needs a value");
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      throw Error("unknown option " + arg + " (see --help)");
    }
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  check(errno == 0 && end != it->second.c_str() && *end == 0, "option " + name + ": '" + it->second + "' is not an integer");
  return v;
}

double Args::get_float(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(it->second.c_str(), &end);
  check(errno == 0 && end != it->second.c_str() && *end == 0, "option " + name + ": '" + it->second + "' is not a number");
  return v;
}

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    check(!item.empty() && errno == 0 && *end == 0 && v >= 0 && v <= INT32_MAX,
          flag + ": '" + item + "' is not a token id");
    ids.push_back(int32_t(v));
    i = j + 1;
  }
  check(!ids.empty(), flag + ": no token ids given");
  return ids;
}

bool wants_help(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return true;
  }
  return false;
}

std::string shipped_model_path(const std::string& name, const std::string& help_command) {
  const std::string relative = "models/" + name;
  for (const std::string& dir : {std::string("."), std::string(CANVAS_SOURCE_DIR)}) {
    const std::string path = dir + "/" + relative;
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      std::fclose(f);
      return path;
    }
  }
  throw Error("no model given (-m FILE.gguf) and the default model " + relative + " was not found in . or " +
              CANVAS_SOURCE_DIR + "; see " + help_command + " --help");
}

}  // namespace canvas::cli
