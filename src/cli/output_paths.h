// Guards for commands that write files: an output path must never name a file the command reads.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace canvas::cli {

// A path as the user gave it and what it is to the command ("IN", "--tokenizer", "corpus file").
struct NamedPath {
  std::string label;
  std::string path;
};

// Throws Error when `output` is the same file as one of `inputs`, naming both: files are compared by
// identity (device and inode), so "x", "./x", its absolute path, a symlink to it and a hard link to it
// all count. A path that does not exist yet, or an empty one, is nobody's input. Call it before writing
// anything, so that a refused command leaves every file as it was.
void check_output_is_not_input(const NamedPath& output, const std::vector<NamedPath>& inputs);

// True when standard output is the file at `path` (e.g. `cmd --exclude F > F`, where the shell has
// already truncated F before the command starts).
bool stdout_is_file(const std::string& path);
// True when standard output and standard error are one terminal, pipe or file (`2>&1`): what is written
// to either shows up in one stream.
bool stdout_shares_stderr();
// True when standard output was opened for appending (`>>`), so writing to it keeps what the file held.
bool stdout_appends();

}  // namespace canvas::cli
