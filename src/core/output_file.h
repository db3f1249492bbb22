// Writing a whole output file (a checkpoint, a report, an image, an array, a cache) so that no reader ever
// sees half of it, and a kill -9 at any moment leaves the old file or the new one: the bytes go to a
// temporary beside the file (temp_file_for: PATH.PID.tmp, created afresh, never through a link), which is
// flushed to disk and renamed over the file only once every byte is written. A failure at any point
// throws Error naming PATH (with the system's reason) and leaves PATH as it was. After a write, the
// temporaries of PATH that dead processes left (killed mid-write) are removed (remove_dead_scratch). This is the one way canvas
// writes files: every writer goes through it.
#pragma once
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace canvas {

// Who named the file, which decides what is done when PATH is not a regular file.
enum class FileOwner {
  // The user (-o, --out, a checkpoint, a report). A link stays a link and the file it leads to (or will
  // create) is replaced atomically: the temporary is made beside that file. A device or a pipe (/dev/null,
  // a FIFO), or a link through /dev or /proc (/dev/stdout, /proc/self/fd/N), is written through as it is:
  // the user asked for that stream. A directory is an Error.
  User,
  // canvas itself (caches, cost models): whatever is at PATH (a link, a FIFO, a device) is never opened;
  // the temporary is renamed over it, so nothing at that path (in a shared cache folder, someone else's
  // link or pipe) can make canvas write elsewhere or wait. A directory is an Error.
  Canvas,
};

// Writes `bytes` as the whole file at `path`.
void write_file(const std::string& path, std::string_view bytes, FileOwner owner = FileOwner::User);
// Writes what `body` puts into the stream as the whole file at `path` (for outputs too large to hold
// twice in memory, such as logits arrays and checkpoints).
void write_file(const std::string& path, const std::function<void(std::ostream&)>& body,
                FileOwner owner = FileOwner::User);
// The file write_file writes before renaming it over `path`, in this process (PATH.PID.tmp).
std::string temp_file_for(const std::string& path);

// A scratch entry of this process beside `target`, named TARGET + before_pid + PID + after_pid (write_file's
// temporary PATH.PID.tmp, convert's partial checkpoint DIR.canvas-partial-PID).
std::string scratch_path_for(const std::string& target, std::string_view before_pid, std::string_view after_pid);
// Removes the scratch entries of `target` so named (files or folders) whose process is gone: what a kill -9
// left behind (a whole checkpoint, a token cache), so that leftovers do not pile up run after run. Those of
// live processes (still writing) stay; failures are ignored (a leftover that cannot be removed is harmless).
void remove_dead_scratch(const std::string& target, std::string_view before_pid, std::string_view after_pid);

}  // namespace canvas
