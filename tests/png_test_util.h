// A PNG reader for tests, written from the format's specification independently of src/report/png.cpp:
// it checks the signature and every chunk's CRC, inflates the IDAT stream with zlib and undoes all five
// row filters, so that a test can compare what canvas wrote pixel by pixel.
#pragma once
#include <zlib.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace canvas::test {

struct DecodedPng {
  std::string error;  // empty when the file decoded
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;                 // 3 bytes a pixel, rows top to bottom
  std::map<std::string, std::string> text;  // tEXt keyword -> value
  std::vector<std::string> chunk_types;     // in file order
  std::array<uint8_t, 3> at(int x, int y) const {
    const size_t i = (size_t(y) * size_t(width) + size_t(x)) * 3;
    return {rgb[i], rgb[i + 1], rgb[i + 2]};
  }
};

inline uint32_t png_u32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 |
         uint32_t(uint8_t(s[at + 2])) << 8 | uint32_t(uint8_t(s[at + 3]));
}

// Decodes an 8-bit RGB, non-interlaced PNG (what canvas writes); anything else is an error.
inline DecodedPng decode_png(const std::string& file) {
  DecodedPng out;
  auto fail = [&](const std::string& why) {
    out.error = why;
    return out;
  };
  if (file.size() < 8 || file.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) != 0)
    return fail("no PNG signature");
  std::string idat;
  bool ended = false;
  for (size_t at = 8; at < file.size();) {
    if (at + 12 > file.size()) return fail("truncated chunk header");
    const uint32_t length = png_u32(file, at);
    if (length > file.size() - at - 12) return fail("chunk longer than the file");
    const std::string type = file.substr(at + 4, 4);
    const std::string data = file.substr(at + 8, length);
    const uint32_t crc = png_u32(file, at + 8 + length);
    const auto* covered = reinterpret_cast<const Bytef*>(file.data() + at + 4);
    if (uint32_t(crc32(0L, covered, uInt(4 + length))) != crc) return fail("bad CRC in " + type);
    out.chunk_types.push_back(type);
    if (type == "IHDR") {
      if (length != 13) return fail("IHDR is not 13 bytes");
      out.width = int(png_u32(data, 0));
      out.height = int(png_u32(data, 4));
      if (data[8] != 8 || data[9] != 2 || data[10] != 0 || data[11] != 0 || data[12] != 0)
        return fail("not 8-bit RGB, deflate, adaptive filters, no interlace");
    } else if (type == "IDAT") {
      idat += data;
    } else if (type == "tEXt") {
      const size_t zero = data.find('\0');
      if (zero == std::string::npos) return fail("tEXt without a keyword");
      out.text[data.substr(0, zero)] = data.substr(zero + 1);
    } else if (type == "IEND") {
      ended = at + 12 == file.size();
      if (!ended) return fail("bytes after IEND");
    }
    at += 12 + length;
  }
  if (out.chunk_types.empty() || out.chunk_types.front() != "IHDR")
    return fail("IHDR is not the first chunk");
  if (!ended) return fail("no IEND at the end");
  if (out.width <= 0 || out.height <= 0) return fail("empty image");
  const size_t stride = size_t(out.width) * 3;
  std::vector<uint8_t> raw((stride + 1) * size_t(out.height));
  uLongf raw_size = uLongf(raw.size());
  if (uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), uLong(idat.size())) !=
          Z_OK ||
      raw_size != raw.size())
    return fail("IDAT does not inflate to height x (1 + 3 x width) bytes");
  out.rgb.resize(stride * size_t(out.height));
  for (size_t y = 0; y < size_t(out.height); ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    uint8_t* row = &out.rgb[y * stride];
    const uint8_t* up = y > 0 ? &out.rgb[(y - 1) * stride] : nullptr;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= 3 ? row[i - 3] : 0, b = up ? up[i] : 0, c = (up && i >= 3) ? up[i - 3] : 0;
      int predicted = 0;
      switch (filter) {
        case 0:
          predicted = 0;
          break;
        case 1:
          predicted = a;
          break;
        case 2:
          predicted = b;
          break;
        case 3:
          predicted = (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predicted = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default:
          return fail("unknown row filter " + std::to_string(filter));
      }
      row[i] = uint8_t(in[i] + predicted);
    }
  }
  return out;
}

}  // namespace canvas::test
