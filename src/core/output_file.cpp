// write_file: a temporary beside the file, flushed to disk, renamed over it.
#include "core/output_file.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <streambuf>
#include <vector>

#include "core/error.h"

namespace canvas {

namespace {

// An output stream buffer over a file descriptor (std::ofstream cannot open with O_EXCL | O_NOFOLLOW, nor
// fsync). The first failed write's errno is kept; writes after it are dropped.
class FdOutput : public std::streambuf {
 public:
  explicit FdOutput(int fd) : fd_(fd), buffer_(size_t(1) << 16) { setp(buffer_.data(), buffer_.data() + buffer_.size()); }
  int error() const { return error_; }
  // Writes what is buffered; false (error() says why) when a write failed.
  bool flush() { return sync() == 0; }

 protected:
  int_type overflow(int_type ch) override {
    if (sync() != 0) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  int sync() override {
    const char* p = pbase();
    size_t left = size_t(pptr() - pbase());
    while (left > 0 && error_ == 0) {
      const ssize_t wrote = ::write(fd_, p, left);
      if (wrote < 0 && errno == EINTR) continue;
      if (wrote <= 0) error_ = wrote < 0 ? errno : EIO;
      else p += wrote, left -= size_t(wrote);
    }
    setp(buffer_.data(), buffer_.data() + buffer_.size());
    return error_ == 0 ? 0 : -1;
  }

 private:
  int fd_;
  std::vector<char> buffer_;
  int error_ = 0;
};

bool under_special_tree(const std::string& path) {
  return path.rfind("/dev/", 0) == 0 || path.rfind("/proc/", 0) == 0;
}

// Where a user's link leads: the last path of its chain, or "" when the chain passes through /dev or /proc
// (/dev/stdout -> /proc/self/fd/1 -> the shell's file: replacing that file would detach the process's own
// stdout) or loops.
std::string link_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path at = fs::absolute(path, ec);
  for (int hop = 0; hop < 40; ++hop) {
    if (under_special_tree(at.lexically_normal().string())) return "";
    if (!fs::is_symlink(at, ec)) return at.lexically_normal().string();
    const fs::path next = fs::read_symlink(at, ec);
    if (ec) return "";
    at = next.is_absolute() ? next : at.parent_path() / next;
  }
  return "";
}

}  // namespace

void write_file(const std::string& path, const std::function<void(std::ostream&)>& body, FileOwner owner) {
  check(!path.empty(), "no output file name given");
  const auto fail = [&](const std::string& what, int error, const std::string& remove) {
    if (!remove.empty()) ::unlink(remove.c_str());
    throw Error(what + " " + path + (error ? std::string(": ") + std::strerror(error) : std::string()));
  };
  // Where the renamed temporary lands ("" to write through `path` as it is).
  std::string target = path;
  struct stat st {};
  const bool exists = ::lstat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) fail("cannot write", EISDIR, "");
  if (exists && !S_ISREG(st.st_mode) && owner == FileOwner::User) {
    target = S_ISLNK(st.st_mode) ? link_target(path) : "";
    struct stat at {};
    if (!target.empty() && ::lstat(target.c_str(), &at) == 0 && S_ISDIR(at.st_mode)) fail("cannot write", EISDIR, "");
    if (!target.empty() && ::lstat(target.c_str(), &at) == 0 && !S_ISREG(at.st_mode)) target.clear();
  }
  const std::string temp = target.empty() ? "" : temp_file_for(target);
  int fd = -1;
  if (target.empty()) {  // a device or a pipe the user named: written as it is
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  } else {
    // A leftover of an earlier process of this pid is removed; O_EXCL | O_NOFOLLOW: never through a link
    // someone put at the temporary's name.
    ::unlink(temp.c_str());
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  }
  if (fd < 0) fail("cannot write", errno, "");
  FdOutput buffer(fd);
  int error = 0;
  {
    std::ostream out(&buffer);
    try {
      body(out);
    } catch (...) {
      ::close(fd);
      if (!temp.empty()) ::unlink(temp.c_str());
      throw;
    }
    if (!buffer.flush() || !out) error = buffer.error() ? buffer.error() : EIO;
  }
  // On disk before the rename: a crash after it never finds the new name holding a file still empty.
  if (error == 0 && !temp.empty() && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0 && errno != EINTR) error = errno;
  if (error != 0) fail("error writing", error, temp);  // the reason of the write that failed (a full disk)
  if (!temp.empty() && std::rename(temp.c_str(), target.c_str()) != 0) fail("cannot write", errno, temp);
  if (!temp.empty()) remove_dead_scratch(target, ".", ".tmp");
}

std::string temp_file_for(const std::string& path) { return scratch_path_for(path, ".", ".tmp"); }

std::string scratch_path_for(const std::string& target, std::string_view before_pid, std::string_view after_pid) {
  return target + std::string(before_pid) + std::to_string(::getpid()) + std::string(after_pid);
}

void remove_dead_scratch(const std::string& target, std::string_view before_pid, std::string_view after_pid) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path file(target);
  const std::string prefix = file.filename().string() + std::string(before_pid);
  const fs::path folder = file.has_parent_path() ? file.parent_path() : fs::path(".");
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() + after_pid.size() || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - after_pid.size(), after_pid.size(), after_pid) != 0)
      continue;
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - after_pid.size());
    if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    const pid_t pid = pid_t(std::stol(digits));
    // ESRCH: no such process (EPERM means one lives, another user's).
    if (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove_all(entry.path(), ignored);  // a link is removed, never followed
    }
  }
}

void write_file(const std::string& path, std::string_view bytes, FileOwner owner) {
  write_file(path, [bytes](std::ostream& out) { out.write(bytes.data(), std::streamsize(bytes.size())); }, owner);
}

}  // namespace canvas
