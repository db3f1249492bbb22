// A built-in 5x7 bitmap font for chart text: printable ASCII, with two rows below the baseline for
// descenders.
#pragma once
#include <cstdint>
#include <string>

namespace canvas::report {

constexpr int kGlyphWidth = 5;    // columns of ink
constexpr int kGlyphAdvance = 6;  // one blank column between characters
constexpr int kGlyphCapRows = 7;  // capitals and digits: rows 0-6, row 6 on the baseline
constexpr int kGlyphRows = 9;     // rows 7-8 hold descenders (g, j, p, q, y, comma)

// Row `row` (0 = top) of the glyph of byte `c`, bit 4 the leftmost column. Bytes outside printable ASCII
// draw as '?'.
uint8_t glyph_row(unsigned char c, int row);

// The text as the font draws it: each UTF-8 character outside ASCII (a CPU name's "(R)" sign, a path's
// accents) and each control byte becomes one '?', so that widths count what is drawn.
std::string drawable_text(const std::string& text);

// Pixels across drawable_text(text) at `scale` pixels per font dot (no trailing gap).
int text_width(const std::string& text, int scale);
inline int text_height(int scale) {
  return kGlyphRows * scale;
}

}  // namespace canvas::report
