// NumPy .npy reader (f4/i4, C order, format versions 1-3) and float32 writer (format version 1.0).
#include "io/npy.h"

#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/output_file.h"

namespace canvas {

static_assert(std::endian::native == std::endian::little, ".npy I/O assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;

// At most 80 characters of a header for a message, non-printable bytes as \xNN: a header can be 4 GB of
// anything, and a message should never echo it whole or write control bytes to a terminal.
std::string header_excerpt(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < 80; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  if (text.size() > 80) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

// A parser for the one dict literal an .npy header holds:
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : text_(text), path_(path) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("npy " + path_ + ": bad header (" + what + " at character " + std::to_string(pos_) +
                "): " + header_excerpt(text_));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) fail(std::string("expected '") + c + "'");
  }
  std::string string_literal() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) fail("expected a string");
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string::npos) fail("unterminated string");
    std::string s = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  bool boolean() {
    skip_space();
    for (const char* word : {"True", "False"}) {
      if (text_.compare(pos_, std::strlen(word), word) == 0) {
        pos_ += std::strlen(word);
        return word[0] == 'T';
      }
    }
    fail("expected True or False");
  }
  int64_t integer() {
    skip_space();
    int64_t v = 0;
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text_[pos_] - '0', &v))
        fail("dimension too large");
      ++pos_;
    }
    if (pos_ == start) fail("expected a non-negative integer");
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 long suffix
    return v;
  }
  std::vector<int64_t> shape() {
    expect('(');
    std::vector<int64_t> dims;
    while (!accept(')')) {
      dims.push_back(integer());
      if (!accept(',')) {
        expect(')');
        break;
      }
    }
    return dims;
  }
  bool at_end() {
    skip_space();
    return pos_ == text_.size();
  }

 private:
  const std::string& text_;
  const std::string& path_;
  size_t pos_ = 0;
};

}  // namespace

void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  int64_t count = 1;
  std::string dims;
  for (int64_t d : shape) {
    check(d >= 0, "npy writer " + path + ": negative dimension " + std::to_string(d));
    check(!__builtin_mul_overflow(count, d, &count), "npy writer " + path + ": shape overflows");
    dims += std::to_string(d) + ", ";
  }
  // Python tuple spelling: () and (n,) and (a, b).
  if (!shape.empty()) dims.resize(dims.size() - (shape.size() == 1 ? 1 : 2));
  check(data != nullptr || count == 0, "npy writer " + path + ": no data");
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic (6) + version (2) + header length (2) + header, padded with spaces, ending in '\n', to a
  // multiple of 64 bytes.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  check(header.size() <= 0xffff, "npy writer " + path + ": header too long");

  write_file(path, [&](std::ostream& out) {
    out.write(kMagic, kMagicBytes);
    const char version[2] = {1, 0};
    out.write(version, 2);
    const uint16_t header_len = uint16_t(header.size());
    out.write(reinterpret_cast<const char*>(&header_len), 2);
    out.write(header.data(), std::streamsize(header.size()));
    if (count > 0) out.write(reinterpret_cast<const char*>(data), std::streamsize(count) * 4);
  });
}

NpyArray read_npy(const std::string& path) {
  const std::string where = "npy " + path + ": ";
  // Mapped, not streamed: MappedFile refuses directories, FIFOs and devices (which would block a read
  // forever) before opening them.
  const MappedFile file = MappedFile::open(path, where, ".npy");
  const std::string_view bytes(reinterpret_cast<const char*>(file.data()), size_t(file.size()));

  check(bytes.size() >= 10, where + "truncated: " + std::to_string(bytes.size()) + " bytes is too short for a header");
  check(bytes.compare(0, kMagicBytes, kMagic, kMagicBytes) == 0, where + "bad magic: not a .npy file");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_start = 10;
  uint64_t header_len = 0;
  if (major == 1) {
    uint16_t len;
    std::memcpy(&len, bytes.data() + 8, 2);
    header_len = len;
  } else if (major == 2 || major == 3) {
    check(bytes.size() >= 12, where + "truncated header");
    uint32_t len;
    std::memcpy(&len, bytes.data() + 8, 4);
    header_len = len;
    header_start = 12;
  } else {
    throw Error(where + "unsupported .npy format version " + std::to_string(major));
  }
  check(header_len <= bytes.size() - header_start,
        where + "truncated: header length " + std::to_string(header_len) + " runs past the end of file");
  const std::string header(bytes.substr(header_start, header_len));

  HeaderParser parser(header, path);
  std::string descr;
  bool fortran_order = false, have_descr = false, have_order = false, have_shape = false;
  NpyArray array;
  parser.expect('{');
  while (!parser.accept('}')) {
    const std::string key = parser.string_literal();
    parser.expect(':');
    if (key == "descr") {
      descr = parser.string_literal();
      have_descr = true;
    } else if (key == "fortran_order") {
      fortran_order = parser.boolean();
      have_order = true;
    } else if (key == "shape") {
      array.shape = parser.shape();
      have_shape = true;
    } else {
      parser.fail("unknown key '" + header_excerpt(key) + "'");
    }
    if (!parser.accept(',')) {
      parser.expect('}');
      break;
    }
  }
  if (!parser.at_end()) parser.fail("trailing characters");
  check(have_descr && have_order && have_shape, where + "header lacks descr, fortran_order or shape: " + header_excerpt(header));
  check(descr == "<f4" || descr == "<i4",
        where + "unsupported dtype '" + header_excerpt(descr) + "' (only little-endian float32 '<f4' and int32 '<i4')");
  check(!fortran_order, where + "Fortran-order arrays are not supported (save with a C-order array)");

  int64_t count = 1;
  for (int64_t d : array.shape) check(!__builtin_mul_overflow(count, d, &count), where + "shape overflows");
  const uint64_t data_bytes = bytes.size() - header_start - header_len;
  check(uint64_t(count) <= data_bytes / 4 && uint64_t(count) * 4 == data_bytes,
        where + "data size mismatch: shape needs " + std::to_string(count) + " elements of 4 bytes, file holds " +
            std::to_string(data_bytes) + " bytes");
  const char* src = bytes.data() + header_start + header_len;
  array.data.resize(size_t(count));
  if (descr == "<f4") {
    if (count > 0) std::memcpy(array.data.data(), src, size_t(count) * 4);
  } else {
    for (int64_t k = 0; k < count; ++k) {
      int32_t v;
      std::memcpy(&v, src + k * 4, 4);
      array.data[size_t(k)] = float(v);
    }
  }
  return array;
}

}  // namespace canvas
