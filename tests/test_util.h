// Shared helpers for tests: fixture paths, running the canvas binary, comparing arrays.
#pragma once
#include <ctime>
#include <sys/wait.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define CANVAS_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CANVAS_TEST_SANITIZED 1
#endif
#endif

namespace canvas::test {

// What a test's time bound is multiplied by: the sanitizer builds (scripts/ci-sanitize.sh) run several
// times slower than a release build.
#ifdef CANVAS_TEST_SANITIZED
inline constexpr double kTimeScale = 5.0;
#else
inline constexpr double kTimeScale = 1.0;
#endif

// CPU seconds the calling thread has used so far. A bound on work (a compile, a render) is checked on it
// rather than on wall time, which stretches with whatever else the machine runs.
inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// `^(?:[ab]|... k copies)*a(?:[ab]|... k copies){count}$`: few automaton states, but subsets of thousands
// of states each (issue 61 B): the pattern compile's work budget ends it.
inline std::string many_alternatives_pattern(int k, int count) {
  std::string alt = "(?:[ab]";
  for (int i = 1; i < k; ++i) alt += "|[ab]";
  alt += ")";
  return "^" + alt + "*a" + alt + "{" + std::to_string(count) + "}$";
}

inline std::string source_path(const std::string& relative) { return std::string(CANVAS_SOURCE_DIR) + "/" + relative; }
inline std::string fixture(const std::string& name) { return source_path("tests/fixtures/" + name); }

// The message of the exception `fn` throws ("(no error)" when it throws none).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The process's peak resident memory so far (VmHWM), in KiB: a test bounds what a step took by the rise.
inline int64_t peak_rss_kb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  return 0;
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout (stderr too when merge_stderr)
};

// Runs the canvas binary with the given argument string through the shell; `env` (e.g.
// "CANVAS_SIMD=avx2") is set for that command only.
inline CommandResult run_canvas(const std::string& args, bool merge_stderr = true, const std::string& env = "") {
  const std::string cmd = (env.empty() ? "" : env + " ") + std::string(CANVAS_BINARY) + " " + args +
                          (merge_stderr ? " 2>&1" : " 2>/dev/null");
  CommandResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t got;
  while ((got = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), got);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A training config's text with `settings` ("key = value" lines) in place of the lines of `base` that set
// the same keys, appended at the end (a config refuses a key set twice).
inline std::string with_settings(const std::string& base, const std::string& settings) {
  auto key_of = [](const std::string& line) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) return std::string();
    std::string key = line.substr(0, eq);
    while (!key.empty() && key.back() == ' ') key.pop_back();
    return key;
  };
  std::vector<std::string> replaced;
  std::istringstream new_lines(settings);
  for (std::string line; std::getline(new_lines, line);)
    if (!key_of(line).empty()) replaced.push_back(key_of(line));
  std::string out;
  std::istringstream old_lines(base);
  for (std::string line; std::getline(old_lines, line);)
    if (std::find(replaced.begin(), replaced.end(), key_of(line)) == replaced.end() || key_of(line).empty())
      out += line + "\n";
  return out + settings;
}

// max |a - b| / max |b|: the error relative to the reference's scale.
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// A fresh directory per test (named after the test, and `suffix` for a second one alive at the same
// time), removed with everything in it at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& suffix = "") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() / ("canvas_test_" + std::to_string(::getpid()) + "_" +
                                                     info->test_suite_name() + "_" + info->name() + suffix);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

// The JSON object of a `canvas generate --json` run (an empty object when the output holds none).
inline nlohmann::json json_of(const std::string& out) {
  const size_t a = out.find('{');
  if (a == std::string::npos) return nlohmann::json::object();
  try {
    return nlohmann::json::parse(out.substr(a, out.rfind('}') + 1 - a));
  } catch (const std::exception&) {
    return nlohmann::json::object();
  }
}
// Its "tokens" list as text ("" when absent), and a number field as text ("" when absent).
inline std::string json_tokens(const std::string& out) {
  const nlohmann::json j = json_of(out);
  return j.contains("tokens") ? j["tokens"].dump() : "";
}
inline std::string json_number(const std::string& out, const std::string& key) {
  const nlohmann::json j = json_of(out);
  return j.contains(key) && j[key].is_number() ? j[key].dump() : "";
}

inline std::string temp_path(const std::string& name) {
  return "/tmp/canvas_test_" + std::to_string(::getpid()) + "_" + name;
}

}  // namespace canvas::test
