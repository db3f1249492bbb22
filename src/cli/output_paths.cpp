// Output-path guards: identity comparisons of output and input files.
#include "cli/output_paths.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "core/error.h"

namespace canvas::cli {

void check_output_is_not_input(const NamedPath& output, const std::vector<NamedPath>& inputs) {
  if (output.path.empty()) return;
  for (const NamedPath& input : inputs) {
    if (input.path.empty()) continue;
    std::error_code ec;  // set when either path does not exist: then they are not the same file
    if (!std::filesystem::equivalent(output.path, input.path, ec) || ec) continue;
    throw Error(output.label + " " + output.path + " is the same file as " + input.label + " " + input.path +
                ": writing it would destroy the input; choose another output path");
  }
}

namespace {
bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }
}  // namespace

bool stdout_is_file(const std::string& path) {
  struct stat out{}, file{};
  return ::fstat(STDOUT_FILENO, &out) == 0 && ::stat(path.c_str(), &file) == 0 && same_file(out, file);
}

bool stdout_shares_stderr() {
  struct stat out{}, err{};
  return ::fstat(STDOUT_FILENO, &out) == 0 && ::fstat(STDERR_FILENO, &err) == 0 && same_file(out, err);
}

bool stdout_appends() {
  const int flags = ::fcntl(STDOUT_FILENO, F_GETFL);
  return flags >= 0 && (flags & O_APPEND) != 0;
}

}  // namespace canvas::cli
