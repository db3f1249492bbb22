// Writing a whole output file (a report, an image, an array, a tokenizer) so that no reader ever sees half
// of it: the bytes go to PATH.PID.tmp (temp_file_for: two processes writing one PATH do not share it),
// which is renamed over PATH only once every byte is written. A failure
// at any point throws Error naming PATH (with the system's reason) and leaves PATH as it was. A PATH that
// is a link, a device or a pipe (/dev/stdout, /dev/null, a FIFO) is written through directly; a directory
// is an Error.
#pragma once
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace canvas {

// Writes `bytes` as the whole file at `path`.
void write_file(const std::string& path, std::string_view bytes);
// Writes what `body` puts into the stream as the whole file at `path` (for outputs too large to hold
// twice in memory, such as logits arrays).
void write_file(const std::string& path, const std::function<void(std::ostream&)>& body);
// The file write_file writes before renaming it over `path`, in this process.
std::string temp_file_for(const std::string& path);

}  // namespace canvas
