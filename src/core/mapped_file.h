// A read-only memory mapping of a whole file (RAII, move-only), shared by the GGUF and safetensors
// readers so that opening, checking and mapping a file is written once.
#pragma once
#include <cstdint>
#include <string>

namespace canvas {

class MappedFile {
 public:
  // Opens and maps `path`. Throws Error starting with `where` (e.g. "gguf model.gguf: ") when the file
  // cannot be opened or stat'ed, is a directory ("is a directory, not a <kind> file"), is not a regular
  // file, or cannot be mapped. A zero-byte file is not mapped (data() is nullptr, size() is 0): callers
  // reject sizes they cannot use with their own message.
  static MappedFile open(const std::string& path, const std::string& where, const char* kind);

  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return static_cast<const uint8_t*>(map_); }
  // Makes [p, p + bytes) (inside this mapping) writable and returns it. The mapping is private: writes
  // go to this process's copy of those pages and never reach the file.
  uint8_t* writable(const void* p, uint64_t bytes);
  uint64_t size() const { return size_; }

 private:
  void* map_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace canvas
