// Reading whole input files (prompts, corpora) with a bound: no file, stream or device can make canvas
// allocate without limit or wait without a word.
#pragma once
#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>

namespace canvas {

// The most bytes a prompt may have (-f FILE, -p -, stdin): 16 MiB, some 4 million tokens of text, far
// beyond any context canvas runs.
inline constexpr size_t kMaxPromptBytes = size_t(16) << 20;
// The most bytes one training data file may have (text_corpus, each file of a corpus folder, Sudoku
// files): 256 MiB, some 60 times the King James Bible.
inline constexpr size_t kMaxCorpusBytes = size_t(256) << 20;
// The most bytes a JSON file canvas reads whole may have (tokenizer.json, config.json, a schema): 256 MiB,
// some eight times the largest released tokenizer.json.
inline constexpr size_t kMaxJsonBytes = size_t(256) << 20;

// Reads `in` to its end, at most max_bytes; more throws Error naming `what` and the limit (`limit_name`,
// e.g. "kMaxPromptBytes").
std::string read_bounded(std::istream& in, size_t max_bytes, const std::string& what, const std::string& limit_name);

// Reads the file at `path` with that bound. A regular file larger than max_bytes is refused before it is
// read; a directory or a missing file is an Error naming it; anything else (a FIFO, /dev/stdin, a device)
// is read as a stream up to the bound, after a notice on stderr that says so (a FIFO waits for a writer).
std::string read_file_bounded(const std::string& path, size_t max_bytes, const std::string& what,
                              const std::string& limit_name);

// The same for a file that must be a regular file (a JSON file, a saved conversation): anything else (a
// FIFO, a device, a socket) is refused, naming it, before it is opened, so that no read waits or runs on.
std::string read_regular_file_bounded(const std::string& path, size_t max_bytes, const std::string& what,
                                      const std::string& limit_name);

// A regular file opened with the same checks (anything else refused before it is opened, the size bounded
// before a byte is read), for a reader that puts its bytes straight into their structures instead of
// holding the whole file in a string too (a cache of hundreds of megabytes).
class RegularFileReader {
 public:
  RegularFileReader(const std::string& path, size_t max_bytes, const std::string& what, const std::string& limit_name);
  ~RegularFileReader();
  RegularFileReader(const RegularFileReader&) = delete;
  RegularFileReader& operator=(const RegularFileReader&) = delete;
  uint64_t size() const { return size_; }  // when opened
  // Up to `bytes` more bytes into `to`: how many (0 at the end). Throws Error on a read error.
  size_t read_some(void* to, size_t bytes);
  // Exactly `bytes` more bytes: false when the file ends first.
  bool read_exact(void* to, size_t bytes);

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_, what_;
};

}  // namespace canvas
