// Drawing primitives of raster.h.
#include "report/raster.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "report/bitmap_font.h"

namespace canvas::report {

Rgb blend(Rgb over, Rgb under, double alpha) {
  auto mix = [&](uint8_t a, uint8_t b) { return uint8_t(std::lround(alpha * a + (1 - alpha) * b)); };
  return {mix(over.r, under.r), mix(over.g, under.g), mix(over.b, under.b)};
}

void Painter::clip_to(const PixelRect& clip) {
  clip_ = {std::max(clip.left, 0), std::max(clip.top, 0), std::min(clip.right, image_.width()),
           std::min(clip.bottom, image_.height())};
}

void Painter::pixel(int x, int y, Rgb colour) {
  if (x >= clip_.left && x < clip_.right && y >= clip_.top && y < clip_.bottom) image_.set(x, y, colour);
}

void Painter::fill_rect(const PixelRect& rect, Rgb colour) {
  for (int y = std::max(rect.top, clip_.top); y < std::min(rect.bottom, clip_.bottom); ++y)
    for (int x = std::max(rect.left, clip_.left); x < std::min(rect.right, clip_.right); ++x)
      image_.set(x, y, colour);
}

void Painter::frame_rect(const PixelRect& rect, Rgb colour) {
  fill_rect({rect.left, rect.top, rect.right, rect.top + 1}, colour);
  fill_rect({rect.left, rect.bottom - 1, rect.right, rect.bottom}, colour);
  fill_rect({rect.left, rect.top, rect.left + 1, rect.bottom}, colour);
  fill_rect({rect.right - 1, rect.top, rect.right, rect.bottom}, colour);
}

void Painter::line(double x0, double y0, double x1, double y1, Rgb colour, int width, int dash) {
  if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(x1) || !std::isfinite(y1)) return;
  // Far-off ends (a point at 1e30 on a log axis) are pulled in first, so that the loop stays short.
  const double limit = 4.0 * std::max(image_.width(), image_.height());
  if (std::fabs(x0) > limit || std::fabs(y0) > limit || std::fabs(x1) > limit || std::fabs(y1) > limit) {
    const double t0 = 0, t1 = 1;
    double lo = t0, hi = t1;
    // Keep the part of the segment inside [-limit, limit]^2 (Liang-Barsky).
    const double dx = x1 - x0, dy = y1 - y0;
    const double p[4] = {-dx, dx, -dy, dy}, q[4] = {x0 + limit, limit - x0, y0 + limit, limit - y0};
    for (int i = 0; i < 4; ++i) {
      if (p[i] == 0) {
        if (q[i] < 0) return;
        continue;
      }
      const double t = q[i] / p[i];
      if (p[i] < 0)
        lo = std::max(lo, t);
      else
        hi = std::min(hi, t);
    }
    if (lo > hi) return;
    const double nx0 = x0 + lo * dx, ny0 = y0 + lo * dy;
    x1 = x0 + hi * dx;
    y1 = y0 + hi * dy;
    x0 = nx0;
    y0 = ny0;
  }
  int x = int(std::lround(x0)), y = int(std::lround(y0));
  const int xe = int(std::lround(x1)), ye = int(std::lround(y1));
  const int dx = std::abs(xe - x), dy = -std::abs(ye - y);
  const int sx = x < xe ? 1 : -1, sy = y < ye ? 1 : -1;
  const int off = dash > 0 ? std::max(1, dash * 2 / 3) : 0;
  const int half = (width - 1) / 2;
  int err = dx + dy;
  for (int step = 0;; ++step) {
    if (dash <= 0 || step % (dash + off) < dash)
      for (int oy = -half; oy < width - half; ++oy)
        for (int ox = -half; ox < width - half; ++ox) pixel(x + ox, y + oy, colour);
    if (x == xe && y == ye) break;
    const int e2 = 2 * err;
    if (e2 >= dy) {
      err += dy;
      x += sx;
    }
    if (e2 <= dx) {
      err += dx;
      y += sy;
    }
  }
}

void Painter::disc(double cx, double cy, double radius, Rgb colour) {
  const int x0 = int(std::floor(cx - radius)), x1 = int(std::ceil(cx + radius));
  const int y0 = int(std::floor(cy - radius)), y1 = int(std::ceil(cy + radius));
  for (int y = y0; y <= y1; ++y)
    for (int x = x0; x <= x1; ++x)
      if ((x - cx) * (x - cx) + (y - cy) * (y - cy) <= radius * radius + 0.25) pixel(x, y, colour);
}

void Painter::text(int x, int y, const std::string& text, Rgb colour, int scale, bool rotated) {
  const std::string drawn = drawable_text(text);
  const int width = text_width(drawn, scale);
  for (size_t i = 0; i < drawn.size(); ++i)
    for (int row = 0; row < kGlyphRows; ++row) {
      const uint8_t bits = glyph_row(static_cast<unsigned char>(drawn[i]), row);
      for (int col = 0; col < kGlyphWidth; ++col) {
        if (!(bits & (1u << (kGlyphWidth - 1 - col)))) continue;
        // (u, v): the dot's pixel in the unrotated text box.
        const int u = (int(i) * kGlyphAdvance + col) * scale, v = row * scale;
        for (int a = 0; a < scale; ++a)
          for (int b = 0; b < scale; ++b) {
            if (rotated)
              pixel(x + v + b, y + width - 1 - (u + a), colour);
            else
              pixel(x + u + a, y + v + b, colour);
          }
      }
    }
}

}  // namespace canvas::report
