// PNG encoding of RgbImage (the format: https://www.w3.org/TR/png/).
#include "report/png.h"

#include <zlib.h>

#include <cstdio>

#include "core/error.h"
#include "core/output_file.h"

namespace canvas::report {

RgbImage::RgbImage(int width, int height, Rgb background) : width_(width), height_(height) {
  check(width > 0 && height > 0 && width <= 16384 && height <= 16384,
        "image size " + std::to_string(width) + "x" + std::to_string(height) + " is out of range");
  bytes_.resize(size_t(width) * size_t(height) * 3);
  for (size_t i = 0; i < bytes_.size(); i += 3) {
    bytes_[i] = background.r;
    bytes_[i + 1] = background.g;
    bytes_[i + 2] = background.b;
  }
}

Rgb RgbImage::at(int x, int y) const {
  check(contains(x, y), "pixel (" + std::to_string(x) + ", " + std::to_string(y) + ") is outside the image");
  const size_t i = (size_t(y) * size_t(width_) + size_t(x)) * 3;
  return {bytes_[i], bytes_[i + 1], bytes_[i + 2]};
}

void RgbImage::set(int x, int y, Rgb colour) {
  if (!contains(x, y)) return;
  const size_t i = (size_t(y) * size_t(width_) + size_t(x)) * 3;
  bytes_[i] = colour.r;
  bytes_[i + 1] = colour.g;
  bytes_[i + 2] = colour.b;
}

namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(char((v >> shift) & 0xff));
}

// length, type, data, then the CRC-32 of type and data (zlib's crc32 is the CRC the format names).
void put_chunk(std::string& out, const char type[4], const std::string& data) {
  put_u32(out, uint32_t(data.size()));
  const size_t type_at = out.size();
  out.append(type, 4);
  out += data;
  const auto* covered = reinterpret_cast<const Bytef*>(out.data() + type_at);
  put_u32(out, uint32_t(crc32(0L, covered, uInt(4 + data.size()))));
}

}  // namespace

std::string encode_png(const RgbImage& image) {
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string header;
  put_u32(header, uint32_t(image.width()));
  put_u32(header, uint32_t(image.height()));
  // 8 bits per channel, truecolour, deflate, adaptive filters, no interlace.
  header += std::string{8, 2, 0, 0, 0};
  put_chunk(png, "IHDR", header);

  // Every row with filter 0 (none): a chart is mostly long runs of one colour, which deflate already
  // squeezes to a few bytes a row, so the per-row filter search buys little here. zlib, not stored
  // blocks, because it is already linked (the server's gzip bodies) and keeps a 960x600 chart
  // at 10-20 KB instead of 1.7 MB.
  const size_t row_bytes = size_t(image.width()) * 3;
  std::string raw;
  raw.reserve((row_bytes + 1) * size_t(image.height()));
  for (int y = 0; y < image.height(); ++y) {
    raw.push_back(0);
    raw.append(reinterpret_cast<const char*>(image.bytes().data()) + size_t(y) * row_bytes, row_bytes);
  }
  uLongf packed_size = compressBound(uLong(raw.size()));
  std::string packed(packed_size, '\0');
  check(compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size,
                  reinterpret_cast<const Bytef*>(raw.data()), uLong(raw.size()), Z_BEST_COMPRESSION) == Z_OK,
        "zlib could not compress the image");
  packed.resize(packed_size);
  put_chunk(png, "IDAT", packed);
  put_chunk(png, "tEXt", std::string("Software") + '\0' + "canvas");
  put_chunk(png, "IEND", "");
  return png;
}

void write_png(const std::string& path, const RgbImage& image) {
  write_file(path, encode_png(image));
}

}  // namespace canvas::report
