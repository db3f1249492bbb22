#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace canvas {

MappedFile MappedFile::open(const std::string& path, const std::string& where, const char* kind) {
  // A FIFO or a device would block open() or read() forever: refuse anything but a regular file before
  // opening it, and open non-blocking in case the path is swapped for a FIFO in between.
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) throw Error(where + "cannot open: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(where + "is a directory, not a " + kind + " file");
  if (!S_ISREG(st.st_mode)) throw Error(where + "is not a regular file (a FIFO, socket or device?)");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(where + "cannot open: " + std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }  // the mapping keeps the file alive
  } closer{fd};
  if (::fstat(fd, &st) != 0) throw Error(where + "cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(where + "is not a regular file (a FIFO, socket or device?)");

  MappedFile file;
  if (st.st_size == 0) return file;
  void* map = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) throw Error(where + "cannot mmap: " + std::strerror(errno));
  file.map_ = map;
  file.size_ = uint64_t(st.st_size);
  return file;
}

MappedFile::~MappedFile() {
  if (map_ != nullptr) ::munmap(map_, size_t(size_));
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : map_(std::exchange(other.map_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (map_ != nullptr) ::munmap(map_, size_t(size_));
    map_ = std::exchange(other.map_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

uint8_t* MappedFile::writable(const void* p, uint64_t bytes) {
  const uint8_t* begin = static_cast<const uint8_t*>(p);
  check(begin >= data() && begin + bytes <= data() + size_, "MappedFile::writable: range outside the mapping");
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(begin) / page * page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + bytes + page - 1) / page * page;
  if (::mprotect(reinterpret_cast<void*>(first), last - first, PROT_READ | PROT_WRITE) != 0)
    throw Error(std::string("cannot make mapped pages writable: ") + std::strerror(errno));
  return const_cast<uint8_t*>(begin);
}

}  // namespace canvas
