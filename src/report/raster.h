// Drawing on an RgbImage: lines (solid or dashed, any width), filled rectangles and discs, and text in the
// built-in bitmap font, all clipped to a rectangle.
#pragma once
#include <string>

#include "report/png.h"

namespace canvas::report {

// `alpha` of `over` on top of `under` (what a translucent line looks like on the background).
Rgb blend(Rgb over, Rgb under, double alpha);

struct PixelRect {
  int left = 0, top = 0, right = 0, bottom = 0;  // right and bottom exclusive
  bool contains(double x, double y) const { return x >= left && x < right && y >= top && y < bottom; }
};

class Painter {
 public:
  explicit Painter(RgbImage& image) : image_(image), clip_{0, 0, image.width(), image.height()} {}
  // Later drawing stays inside `clip` (and the image).
  void clip_to(const PixelRect& clip);
  void unclip() { clip_ = {0, 0, image_.width(), image_.height()}; }

  void pixel(int x, int y, Rgb colour);
  void fill_rect(const PixelRect& rect, Rgb colour);
  // Rectangle outline, 1 pixel, on the rectangle's own edge pixels.
  void frame_rect(const PixelRect& rect, Rgb colour);
  // A line between pixel centres, `width` pixels thick (Bresenham, a width x width square at each step).
  // dash > 0 draws `dash` steps on, then dash * 2 / 3 off, counted along the longer axis.
  void line(double x0, double y0, double x1, double y1, Rgb colour, int width = 1, int dash = 0);
  void disc(double cx, double cy, double radius, Rgb colour);
  // Text with its top-left corner at (x, y), `scale` pixels per font dot; rotated draws it turned a
  // quarter left (reading upwards, as a y-axis label), the box then being text_height wide and
  // text_width tall from (x, y).
  void text(int x, int y, const std::string& text, Rgb colour, int scale, bool rotated = false);

 private:
  RgbImage& image_;
  PixelRect clip_;
};

}  // namespace canvas::report
