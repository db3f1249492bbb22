// Bounded reads of input files.
#include "io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace canvas {

namespace {

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

std::string read_bounded(std::istream& in, size_t max_bytes, const std::string& what, const std::string& limit_name) {
  std::string text;
  std::vector<char> chunk(size_t(1) << 16);
  while (in) {
    in.read(chunk.data(), std::streamsize(chunk.size()));
    const size_t got = size_t(in.gcount());
    check(text.size() + got <= max_bytes,
          what + " is longer than " + mib(max_bytes) + " (" + limit_name + "): not read further");
    text.append(chunk.data(), got);
  }
  check(!in.bad(), what + ": read error");
  return text;
}

namespace {

// A regular file's bytes, checked on the descriptor it is read from (RegularFileReader), to its end (a
// file that grew since it was opened, /proc's files of size 0), at most max_bytes.
std::string read_regular(const std::string& path, size_t max_bytes, const std::string& what,
                         const std::string& limit_name) {
  RegularFileReader file(path, max_bytes, what, limit_name);
  std::string text;
  text.reserve(size_t(file.size()));
  std::vector<char> chunk(size_t(1) << 16);
  for (;;) {
    const size_t n = file.read_some(chunk.data(), chunk.size());
    if (n == 0) return text;
    check(text.size() + n <= max_bytes,
          what + " " + path + " is longer than " + mib(max_bytes) + " (" + limit_name + "): not read further");
    text.append(chunk.data(), n);
  }
}

// Reads `path` after checking what it is: a directory or a missing file is an Error; a regular file larger
// than max_bytes too; anything else is an Error unless `streams` (then read up to the bound, after a notice).
std::string read_checked(const std::string& path, size_t max_bytes, const std::string& what,
                         const std::string& limit_name, bool streams) {
  if (!streams) return read_regular(path, max_bytes, what, limit_name);
  struct stat st {};
  check(::stat(path.c_str(), &st) == 0, "cannot open " + what + " " + path + ": it does not exist or cannot be read");
  check(!S_ISDIR(st.st_mode), what + " " + path + " is a directory, not a file");
  const char* kind = S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket" : "a device";
  if (S_ISREG(st.st_mode)) {
    check(uint64_t(st.st_size) <= max_bytes, what + " " + path + " has " + std::to_string(st.st_size) +
                                                 " bytes, more than " + mib(max_bytes) + " (" + limit_name + ")");
  } else if (streams) {
    std::fprintf(stderr, "canvas: %s %s is not a regular file (%s); reading it as a stream, at most %s\n",
                 what.c_str(), path.c_str(), S_ISFIFO(st.st_mode) ? "a FIFO: waiting for a writer" : "a device or socket",
                 mib(max_bytes).c_str());
  } else {
    throw Error(what + " " + path + " is not a regular file (" + kind + ")");
  }
  std::ifstream in(path, std::ios::binary);
  check(bool(in), "cannot open " + what + " " + path);
  return read_bounded(in, max_bytes, what + " " + path, limit_name);
}

}  // namespace

// Opened without waiting (O_NONBLOCK: a FIFO's open returns at once, and is then refused) and checked on the
// descriptor it is read from, so that nothing swapped in at the path after a check is read.
RegularFileReader::RegularFileReader(const std::string& path, size_t max_bytes, const std::string& what,
                                     const std::string& limit_name)
    : path_(path), what_(what) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  check(fd_ >= 0, "cannot open " + what + " " + path + ": it does not exist or cannot be read");
  struct stat st {};
  const bool stat_ok = ::fstat(fd_, &st) == 0;
  const std::string reason = stat_ok ? "" : std::strerror(errno);
  try {
    check(stat_ok, "cannot open " + what + " " + path + ": " + reason);
    check(!S_ISDIR(st.st_mode), what + " " + path + " is a directory, not a file");
    if (!S_ISREG(st.st_mode))
      throw Error(what + " " + path + " is not a regular file (" +
                  (S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket" : "a device") + ")");
    check(uint64_t(st.st_size) <= max_bytes, what + " " + path + " has " + std::to_string(st.st_size) +
                                                 " bytes, more than " + mib(max_bytes) + " (" + limit_name + ")");
  } catch (...) {
    ::close(fd_);
    throw;
  }
  size_ = uint64_t(st.st_size);
}

RegularFileReader::~RegularFileReader() { ::close(fd_); }

size_t RegularFileReader::read_some(void* to, size_t bytes) {
  for (;;) {
    const ssize_t n = ::read(fd_, to, bytes);
    if (n < 0 && errno == EINTR) continue;
    check(n >= 0, what_ + " " + path_ + ": read error: " + std::strerror(errno));
    return size_t(n);
  }
}

bool RegularFileReader::read_exact(void* to, size_t bytes) {
  auto* at = static_cast<char*>(to);
  while (bytes > 0) {
    const size_t n = read_some(at, bytes);
    if (n == 0) return false;
    at += n;
    bytes -= n;
  }
  return true;
}

std::string read_file_bounded(const std::string& path, size_t max_bytes, const std::string& what,
                              const std::string& limit_name) {
  return read_checked(path, max_bytes, what, limit_name, true);
}

std::string read_regular_file_bounded(const std::string& path, size_t max_bytes, const std::string& what,
                                      const std::string& limit_name) {
  return read_checked(path, max_bytes, what, limit_name, false);
}

}  // namespace canvas
