// RGB images and their PNG encoding (8-bit truecolour, deflated with zlib).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace canvas::report {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

// A width x height picture, rows top to bottom, 3 bytes per pixel. Writes outside it are dropped, so that
// drawing code can clip by doing nothing.
class RgbImage {
 public:
  RgbImage(int width, int height, Rgb background = {255, 255, 255});
  int width() const { return width_; }
  int height() const { return height_; }
  bool contains(int x, int y) const { return x >= 0 && y >= 0 && x < width_ && y < height_; }
  Rgb at(int x, int y) const;
  void set(int x, int y, Rgb colour);
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  int width_, height_;
  std::vector<uint8_t> bytes_;
};

// The PNG file of `image`: signature, IHDR, one IDAT, a tEXt "Software" chunk naming canvas, IEND.
std::string encode_png(const RgbImage& image);
// Writes encode_png(image) to `path` (through a temporary file renamed into place, so that a reader never
// sees half a picture); throws Error naming the path when it cannot.
void write_png(const std::string& path, const RgbImage& image);

}  // namespace canvas::report
