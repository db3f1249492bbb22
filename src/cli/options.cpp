// Option tables: parsing, --help formatting, suggestions for unknown options.
#include "cli/options.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>
#include <type_traits>

#include "core/cpu.h"
#include "core/error.h"

namespace canvas::cli {
namespace {

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= names.size()) {
    size_t j = names.find(',', i);
    if (j == std::string::npos) j = names.size();
    std::string n = names.substr(i, j - i);
    n.erase(0, n.find_first_not_of(' '));
    n.erase(n.find_last_not_of(' ') + 1);
    if (!n.empty()) out.push_back(n);
    i = j + 1;
  }
  return out;
}

// The key of an option: its first "--long" spelling without the dashes (else the first spelling's).
std::string option_key(const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (n.rfind("--", 0) == 0) return n.substr(2);
  return names.empty() ? "" : names[0].substr(names[0].find_first_not_of('-'));
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// llama.cpp (llama-cli, llama-server) flags canvas has no spelling for, and what canvas does instead.
// Flags canvas does have under llama.cpp's name (-n/--n-predict, --temp/--temperature, -f/--file,
// -r/--reverse-prompt, -sys/--system-prompt, -s/--seed, -t/--threads) are accepted directly.
const std::map<std::string, std::string>& llama_cpp_flags() {
  static const std::map<std::string, std::string> flags = {
      {"-ngl", "llama.cpp's GPU offload: canvas runs a model on one device, --device cpu (default) or --device cuda (every layer on the GPU)"},
      {"--n-gpu-layers", "llama.cpp's GPU offload: canvas runs a model on one device, --device cpu (default) or --device cuda (every layer on the GPU)"},
      {"--gpu-layers", "llama.cpp's GPU offload: canvas runs a model on one device, --device cpu (default) or --device cuda (every layer on the GPU)"},
      {"-tb", "llama.cpp's batch threads: canvas uses -t for everything"},
      {"--threads-batch", "llama.cpp's batch threads: canvas uses -t for everything"},
      {"--repeat-last-n",
       "llama.cpp's penalty window: canvas's --repeat-penalty looks at the last 64 tokens"},
      {"-cnv", "llama.cpp's conversation mode: use canvas chat"},
      {"--conversation", "llama.cpp's conversation mode: use canvas chat"},
      {"-i", "llama.cpp's interactive mode: use canvas chat"},
      {"--interactive", "llama.cpp's interactive mode: use canvas chat"},
      {"--mirostat",
       "llama.cpp's mirostat sampler: not in canvas (it has --temp, --top-k, --top-p, --min-p, "
       "--repeat-penalty)"},
      {"--typical",
       "llama.cpp's typical sampling: not in canvas (it has --temp, --top-k, --top-p, --min-p, "
       "--repeat-penalty)"},
      {"-hf",
       "llama.cpp's Hugging Face download: canvas downloads nothing; give -m with a local GGUF or HF "
       "directory"},
      {"--hf-repo",
       "llama.cpp's Hugging Face download: canvas downloads nothing; give -m with a local GGUF or HF "
       "directory"},
      {"--grammar", "llama.cpp's grammars: not in canvas"},
  };
  return flags;
}

// llama.cpp flags that change nothing here, accepted so that scripts carried over run: each is taken with
// its value (none, one, or an optional on|off|auto) and noted once on stderr. --log-disable means --quiet
// where a command has it.
struct HarmlessFlag {
  enum Value { None, Required, Optional } value;
  const char* note;
};
const std::map<std::string, HarmlessFlag>& harmless_llama_cpp_flags() {
  static const char* context = "llama.cpp's context size: canvas takes the context length from the model";
  static const char* batch = "llama.cpp's batch size: canvas processes the prompt in one pass";
  static const char* flash = "llama.cpp's flash attention: canvas's attention is always tiled";
  static const char* conversation = "llama.cpp's conversation switch: generate takes one prompt, chat converses";
  static const std::map<std::string, HarmlessFlag> flags = {
      {"-c", {HarmlessFlag::Required, context}},
      {"--ctx-size", {HarmlessFlag::Required, context}},
      {"-b", {HarmlessFlag::Required, batch}},
      {"--batch-size", {HarmlessFlag::Required, batch}},
      {"-ub", {HarmlessFlag::Required, batch}},
      {"--ubatch-size", {HarmlessFlag::Required, batch}},
      {"-fa", {HarmlessFlag::Optional, flash}},
      {"--flash-attn", {HarmlessFlag::Optional, flash}},
      {"--mlock", {HarmlessFlag::None, "llama.cpp's --mlock: canvas memory-maps the weights"}},
      {"--no-mmap", {HarmlessFlag::None, "llama.cpp's --no-mmap: canvas always memory-maps the weights"}},
      {"--color", {HarmlessFlag::None, "canvas colours only --visual"}},
      {"--jinja", {HarmlessFlag::None, "canvas renders the model's chat template whenever it has one"}},
      {"-no-cnv", {HarmlessFlag::None, conversation}},
      {"--no-conversation", {HarmlessFlag::None, conversation}},
      {"--log-disable", {HarmlessFlag::None, "canvas logs nothing but its stats line (--quiet drops it)"}},
  };
  return flags;
}

std::string wrap_help(const std::string& names_and_value, const std::string& help) {
  constexpr size_t kColumn = 28;
  std::string out = "  " + names_and_value;
  size_t start = 0;
  bool first = true;
  while (start <= help.size()) {
    size_t end = help.find('\n', start);
    if (end == std::string::npos) end = help.size();
    const std::string line = help.substr(start, end - start);
    if (first) {
      if (out.size() + 2 > kColumn) {  // at least two spaces before the help
        out += "\n" + std::string(kColumn, ' ');
      } else {
        out += std::string(kColumn - out.size(), ' ');
      }
      first = false;
    } else {
      out += "\n" + std::string(kColumn, ' ');
    }
    out += line;
    start = end + 1;
  }
  return out + "\n";
}

}  // namespace

std::vector<Option> join_options(std::initializer_list<std::vector<Option>> lists) {
  std::vector<Option> all;
  for (const std::vector<Option>& list : lists) all.insert(all.end(), list.begin(), list.end());
  return all;
}

std::string format_help(const Command& command) {
  std::string out = "usage: " + command.synopsis + "\n";
  if (!command.about.empty()) out += "\n" + command.about + (command.about.back() == '\n' ? "" : "\n");
  if (!command.options.empty()) out += "\n";
  for (const Option& o : command.options) {
    if (o.hidden) continue;
    if (o.names.empty()) {
      out += o.help + "\n";
      continue;
    }
    std::string spelled;
    const std::vector<std::string> names = split_names(o.names);
    // Short spellings line up under each other: "  -m, --model" and "      --steps".
    if (names[0].rfind("--", 0) != 0) {
      for (size_t i = 0; i < names.size(); ++i) spelled += (i ? ", " : "") + names[i];
    } else {
      spelled = "    ";
      for (size_t i = 0; i < names.size(); ++i) spelled += (i ? ", " : "") + names[i];
    }
    if (!o.value.empty()) spelled += " " + o.value;
    std::string help = o.help;
    if (o.repeatable) help += " (repeatable)";
    out += wrap_help(spelled, help);
  }
  if (!command.notes.empty()) out += "\n" + command.notes + (command.notes.back() == '\n' ? "" : "\n");
  return out;
}

std::string format_group_help(const CommandGroup& group) {
  std::string out = "usage: " + group.synopsis + "\n";
  if (!group.about.empty()) out += "\n" + group.about + (group.about.back() == '\n' ? "" : "\n");
  for (const CommandGroup::Sub& sub : group.subcommands) {
    Command shown = *sub.command;
    shown.notes.clear();
    const std::string text = format_help(shown);
    out += "\n";
    for (size_t i = 0; i < text.size();) {  // indented under the overview
      size_t j = text.find('\n', i);
      if (j == std::string::npos) j = text.size();
      out += (j > i ? "  " : "") + text.substr(i, j - i) + "\n";
      i = j + 1;
    }
  }
  if (!group.notes.empty()) out += "\n" + group.notes + (group.notes.back() == '\n' ? "" : "\n");
  return out;
}

int run_command_group(const CommandGroup& group, int argc, char** argv) {
  const std::string sub = argc >= 3 ? argv[2] : "";
  if (sub.empty() || sub == "-h" || sub == "--help") {
    std::fputs(format_group_help(group).c_str(), sub.empty() ? stderr : stdout);
    return sub.empty() ? 1 : 0;
  }
  std::string names;
  for (const CommandGroup::Sub& s : group.subcommands) {
    if (s.command->name == group.name + " " + sub) return s.run(argc, argv);
    names += (names.empty() ? "" : ", ") + s.command->name.substr(group.name.size() + 1);
  }
  if (wants_help(argc, argv)) {
    std::fputs(format_group_help(group).c_str(), stdout);
    return 0;
  }
  throw Error("unknown " + group.name + " command '" + sub + "' (" + names + "); see canvas " + group.name +
              " --help");
}

std::string unknown_option_message(const std::string& option, const std::vector<std::string>& known) {
  std::string message = "unknown option " + option;
  auto llama = llama_cpp_flags().find(option);
  if (llama != llama_cpp_flags().end()) return message + " (" + llama->second + ")";
  std::string best;
  size_t best_distance = std::string::npos;
  for (const std::string& k : known) {
    // Prefix matches ("--temperat" for "--temperature") count as close.
    const size_t d = (k.rfind(option, 0) == 0 && option.size() >= 4) ? 1 : edit_distance(option, k);
    if (d < best_distance) {
      best_distance = d;
      best = k;
    }
  }
  const size_t allowed = std::max<size_t>(2, option.size() / 3);
  if (!best.empty() && best_distance <= allowed) return message + "; did you mean " + best + "? (see --help)";
  return message + " (see --help)";
}

Args::Args(const Command& command, int argc, char** argv, int first) {
  std::map<std::string, std::string> aliases;
  std::set<std::string> value_flags, switches, repeatable;
  for (const Option& o : command.options) {
    if (o.names.empty()) continue;
    const std::vector<std::string> names = split_names(o.names);
    const std::string key = option_key(names);
    for (const std::string& n : names) aliases[n] = key;
    (o.value.empty() ? switches : value_flags).insert(key);
    if (o.repeatable) repeatable.insert(key);
  }
  parse(argc, argv, first, aliases, value_flags, switches);
  for (const auto& [key, values] : values_) {
    if (repeatable.count(key) || values.size() < 2) continue;
    for (const std::string& v : values)
      check(v == values[0],
            "option --" + key + " given twice with different values ('" + values[0] + "' and '" + v + "')");
  }
}

void Args::parse(int argc, char** argv, int first, const std::map<std::string, std::string>& aliases,
                 const std::set<std::string>& value_flags, const std::set<std::string>& switches) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    // "-" alone (stdin) and negative numbers are positional.
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
      values_[name].push_back("1");
    } else if (value_flags.count(name)) {
      if (!has_value) {
        check(i + 1 < argc, "option " + arg + " needs a value");
        value = argv[++i];
      }
      values_[name].push_back(value);
    } else if (auto harmless = harmless_llama_cpp_flags().find(arg); harmless != harmless_llama_cpp_flags().end()) {
      const HarmlessFlag& flag = harmless->second;
      const auto optional = [](const std::string& v) {
        return v == "on" || v == "off" || v == "auto" || v == "1" || v == "0" || v == "true" || v == "false";
      };
      if (!has_value && (flag.value == HarmlessFlag::Required || (flag.value == HarmlessFlag::Optional && i + 1 < argc &&
                                                                  optional(argv[i + 1])))) {
        check(i + 1 < argc, "option " + arg + " needs a value");
        value = argv[++i];
        has_value = true;
      }
      if (arg == "--log-disable" && switches.count("quiet")) values_["quiet"].push_back("1");
      std::fprintf(stderr, "canvas: note: %s%s ignored (%s)\n", arg.c_str(), has_value ? (" " + value).c_str() : "",
                   flag.note);
    } else {
      std::vector<std::string> known;
      for (const auto& [spelling, key] : aliases) known.push_back(spelling);
      for (const std::string& k : value_flags) known.push_back("--" + k);
      for (const std::string& k : switches) known.push_back("--" + k);
      throw Error(unknown_option_message(arg, known));
    }
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.back();
}

void Args::check_no_positional(const std::string& hint) const {
  check(positional_.empty(),
        "unexpected argument '" + (positional_.empty() ? "" : positional_[0]) + "'" + hint);
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback) const {
  if (!has(name)) return fallback;
  const std::string text = get(name, "");
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  check(errno == 0 && end != text.c_str() && *end == 0,
        "option " + name + ": '" + text + "' is not an integer");
  return v;
}

double Args::get_float(const std::string& name, double fallback) const {
  if (!has(name)) return fallback;
  const std::string text = get(name, "");
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  check(errno == 0 && end != text.c_str() && *end == 0,
        "option " + name + ": '" + text + "' is not a number");
  return v;
}

namespace {

// The items of a comma-separated option value as numbers (strtoll or strtod); Error names the bad item.
template <class T>
std::vector<T> parse_numbers(const std::string& name, const std::string& text) {
  constexpr bool kInteger = std::is_integral_v<T>;
  std::vector<T> out;
  for (const std::string& item : split_list(text)) {
    char* end = nullptr;
    errno = 0;
    const T v = kInteger ? T(std::strtoll(item.c_str(), &end, 10)) : T(std::strtod(item.c_str(), &end));
    check(errno == 0 && end != item.c_str() && *end == 0,
          "--" + name + ": '" + item + "' is not " + (kInteger ? "an integer" : "a number"));
    out.push_back(v);
  }
  check(!out.empty(), "--" + name + " needs at least one value");
  return out;
}

}  // namespace

std::vector<int64_t> Args::get_int_list(const std::string& name, std::vector<int64_t> fallback) const {
  return has(name) ? parse_numbers<int64_t>(name, get(name, "")) : fallback;
}

std::vector<float> Args::get_float_list(const std::string& name, std::vector<float> fallback) const {
  return has(name) ? parse_numbers<float>(name, get(name, "")) : fallback;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<std::string> split_lists(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const std::string& value : values) {
    const std::vector<std::string> items = split_list(value);
    out.insert(out.end(), items.begin(), items.end());
  }
  return out;
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

bool wants_help(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return true;
  }
  return false;
}

bool print_help_if_asked(const Command& command, int argc, char** argv, int first) {
  if (!wants_help(argc, argv, first)) return false;
  std::fputs(format_help(command).c_str(), stdout);
  return true;
}

int thread_count(const Args& args) {
  const int64_t threads = args.get_int("threads", 0);
  check(threads >= 0 && threads <= 1024, "--threads must be between 0 and 1024");
  const int64_t cores = usable_cpus();
  if (threads > cores)
    std::fprintf(
        stderr,
        "canvas: warning: -t %lld is more threads than the %lld CPUs this process may use (its affinity and "
        "CPU quota); every pass waits for descheduled threads (use -t %lld or leave -t out)\n",
        (long long)threads, (long long)cores, (long long)cores);
  return int(threads);
}

}  // namespace canvas::cli
