#include "core/output_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace canvas {

void write_file(const std::string& path, const std::function<void(std::ostream&)>& body) {
  check(!path.empty(), "no output file name given");
  // A link, a device or a pipe (/dev/stdout, /dev/null, /proc/self/fd/N, a FIFO) is written through as it
  // is: renaming a file over it would replace it. A directory is opened as one too, and refused there
  // (EISDIR).
  struct stat st {};
  const bool special = ::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
  const std::string target = special ? path : temp_file_for(path);
  const auto fail = [&](const std::string& what, int error) {
    if (!special) std::remove(target.c_str());
    throw Error(what + " " + path + (error ? std::string(": ") + std::strerror(error) : std::string()));
  };
  {
    errno = 0;
    std::ofstream out(target, std::ios::binary | std::ios::trunc);
    if (!out) fail("cannot write", errno);
    errno = 0;
    try {
      body(out);
    } catch (...) {
      out.close();
      if (!special) std::remove(target.c_str());
      throw;
    }
    if (!out) fail("error writing", errno);  // the reason of the write that failed (a full disk)
    errno = 0;
    out.close();
    if (!out) fail("error writing", errno);
  }
  if (!special && std::rename(target.c_str(), path.c_str()) != 0) fail("cannot write", errno);
}

std::string temp_file_for(const std::string& path) { return path + "." + std::to_string(::getpid()) + ".tmp"; }

void write_file(const std::string& path, std::string_view bytes) {
  write_file(path, [bytes](std::ostream& out) { out.write(bytes.data(), std::streamsize(bytes.size())); });
}

}  // namespace canvas
