// report/: PNG encoding read back by an independent decoder, the bitmap font, axis ticks, and charts
// checked pixel by pixel.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include "core/error.h"
#include "png_test_util.h"
#include "report/bitmap_font.h"
#include "report/line_chart.h"
#include "report/png.h"
#include "test_util.h"

namespace canvas {
namespace {

using report::Rgb;

std::array<uint8_t, 3> bytes_of(Rgb c) {
  return {c.r, c.g, c.b};
}

TEST(Png, EncodedImageDecodesToTheSamePixels) {
  // Odd sizes and every byte value, so that row lengths and the filter bytes are exercised.
  report::RgbImage image(37, 23);
  for (int y = 0; y < image.height(); ++y)
    for (int x = 0; x < image.width(); ++x)
      image.set(x, y, {uint8_t(x * 7 + y), uint8_t(255 - x * y), uint8_t((x ^ y) * 11)});
  const std::string file = report::encode_png(image);
  const test::DecodedPng png = test::decode_png(file);
  ASSERT_EQ(png.error, "");
  EXPECT_EQ(png.width, 37);
  EXPECT_EQ(png.height, 23);
  EXPECT_EQ(png.chunk_types, (std::vector<std::string>{"IHDR", "IDAT", "tEXt", "IEND"}));
  EXPECT_EQ(png.text.at("Software"), "canvas");
  ASSERT_EQ(png.rgb, image.bytes());
  for (int y = 0; y < image.height(); ++y)
    for (int x = 0; x < image.width(); ++x)
      EXPECT_EQ(png.at(x, y), bytes_of(image.at(x, y))) << x << "," << y;

  // The reader catches a flipped bit: the CRCs are real.
  std::string corrupt = file;
  corrupt[40] = char(corrupt[40] ^ 1);
  EXPECT_NE(test::decode_png(corrupt).error, "");
}

TEST(Png, WritesTheFileAndNamesAPathItCannotWrite) {
  test::TempDir dir;
  report::RgbImage image(4, 3, {1, 2, 3});
  report::write_png(dir.path("a.png"), image);
  const test::DecodedPng png = test::decode_png(test::read_text(dir.path("a.png")));
  ASSERT_EQ(png.error, "");
  EXPECT_EQ(png.at(3, 2), (std::array<uint8_t, 3>{1, 2, 3}));
  EXPECT_FALSE(std::filesystem::exists(dir.path("a.png.tmp")));
  try {
    report::write_png(dir.path("no/such/dir/a.png"), image);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/dir/a.png"), std::string::npos) << e.what();
  }
  EXPECT_THROW(report::RgbImage(0, 5), Error);
}

TEST(BitmapFont, EveryPrintableCharacterHasItsOwnGlyph) {
  std::set<std::vector<uint8_t>> seen;
  for (int c = 33; c <= 126; ++c) {
    std::vector<uint8_t> rows;
    for (int r = 0; r < report::kGlyphRows; ++r) rows.push_back(report::glyph_row(uint8_t(c), r));
    EXPECT_NE(rows, std::vector<uint8_t>(size_t(report::kGlyphRows), 0)) << char(c) << " is blank";
    EXPECT_TRUE(seen.insert(rows).second) << char(c) << " looks like another character";
    for (uint8_t bits : rows) EXPECT_LT(bits, 1u << report::kGlyphWidth);
  }
  // Outside ASCII: one '?' per character, so that widths count what is drawn.
  EXPECT_EQ(report::drawable_text("Xeon\xc2\xae 8480+\n"), "Xeon? 8480+?");
  EXPECT_EQ(report::text_width("ab", 2), (2 * report::kGlyphAdvance - 1) * 2);
  EXPECT_EQ(report::text_width("", 2), 0);
}

TEST(AxisScale, LinearTicksAreNiceNumbersInsideTheRange) {
  report::ChartAxis axis;
  axis.min = 0;
  axis.max = 18.4;
  const report::AxisScale s = report::make_axis_scale(axis, {}, 800, true, 2);
  ASSERT_GE(s.ticks.size(), 4u);
  EXPECT_EQ(s.ticks.front(), 0);
  EXPECT_LE(s.ticks.back(), 18.4);
  const double step = s.ticks[1] - s.ticks[0];
  EXPECT_TRUE(step == 2 || step == 2.5 || step == 5) << step;
  EXPECT_EQ(s.labels[1], step == 2.5 ? "2.5" : step == 2 ? "2" : "5");

  // From the data with a 5% margin; labels written with the decimals the step needs.
  report::ChartAxis auto_axis;
  const report::AxisScale d = report::make_axis_scale(auto_axis, {0.1, 0.3, NAN}, 400, false, 2);
  EXPECT_NEAR(d.lo, 0.09, 1e-12);
  EXPECT_NEAR(d.hi, 0.31, 1e-12);
  for (const std::string& l : d.labels) EXPECT_EQ(l.substr(0, 2), "0.") << l;
}

TEST(AxisScale, LogTicksShowAtLeastThreeValuesWithinADecade) {
  report::ChartAxis axis;
  axis.log = true;
  const report::AxisScale s = report::make_axis_scale(axis, {0.4, 2.7, -1, 0}, 400, false, 2);
  EXPECT_GT(s.lo, 0);
  EXPECT_EQ(s.labels, (std::vector<std::string>{"0.5", "1", "2"}));
  EXPECT_NEAR(s.fraction(s.lo), 0, 1e-12);
  EXPECT_NEAR(s.fraction(s.hi), 1, 1e-12);
  EXPECT_TRUE(std::isnan(s.fraction(-1)));
  // Many decades: decades only.
  const report::AxisScale wide = report::make_axis_scale(axis, {1e-3, 1e3}, 400, false, 2);
  EXPECT_EQ(wide.labels.front(), "0.001");
  EXPECT_EQ(wide.labels.back(), "1000");
}

// A red diagonal and a dashed gray reference line on fixed 0..10 axes, no legend.
report::LineChart diagonal_chart() {
  report::LineChart chart;
  chart.width = 400;
  chart.height = 300;
  chart.title = "diagonal";
  chart.x = {"x", false, 0, 10};
  chart.y = {"y", false, 0, 10};
  report::ChartSeries line;
  line.colour = report::kRed;
  line.x = {0, 10};
  line.y = {0, 10};
  chart.series.push_back(line);
  chart.reference_lines.push_back({"", 7, report::kGray, 2, false});
  return chart;
}

TEST(LineChart, SeriesPixelsLieOnTheLineAndBackgroundElsewhere) {
  const report::LineChart chart = diagonal_chart();
  const report::ChartFrame f = report::chart_frame(chart);
  const report::RgbImage image = report::render_chart(chart);
  auto pixel = [&](double x, double y) {
    return image.at(int(std::lround(f.pixel_x(x))), int(std::lround(f.pixel_y(y))));
  };
  for (double v : {1.0, 2.5, 5.0, 7.5, 9.0}) EXPECT_EQ(pixel(v, v), report::kRed) << v;
  EXPECT_EQ(pixel(1.3, 7), report::kGray);  // the reference line, solid here
  // Between grid lines, away from the lines drawn: background.
  const double x_mid = (f.x.ticks[f.x.ticks.size() - 2] + f.x.ticks.back()) / 2;
  const double y_mid = (f.y.ticks[0] + f.y.ticks[1]) / 2;
  EXPECT_EQ(pixel(x_mid, y_mid), report::kWhite);
  EXPECT_EQ(pixel((f.x.ticks[0] + f.x.ticks[1]) / 2, (f.y.ticks[3] + f.y.ticks[4]) / 2), report::kWhite);
  // Nothing of the series outside the plot area (clipped), the frame black at its corner.
  for (int x = 0; x < image.width(); ++x) EXPECT_NE(image.at(x, f.plot.top - 1), report::kRed) << x;
  EXPECT_EQ(image.at(f.plot.left, f.plot.top), report::kBlack);
  // Some ink in the title band and left of the plot (tick labels, the rotated axis label).
  auto ink_in = [&](int x0, int y0, int x1, int y1) {
    int n = 0;
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) n += image.at(x, y) == report::kBlack;
    return n;
  };
  EXPECT_GT(ink_in(0, 0, image.width(), f.plot.top), 20);
  EXPECT_GT(ink_in(0, f.plot.top, 30, f.plot.bottom), 20);  // "y", rotated
  EXPECT_EQ(ink_in(f.plot.right + 1, f.plot.top, image.width(), f.plot.bottom), 0);
}

TEST(LineChart, LegendGoesWhereItHidesLeastAndPointsCarryLabels) {
  report::LineChart chart = diagonal_chart();
  chart.series[0].name = "rising";
  const report::ChartFrame f = report::chart_frame(chart);
  const report::RgbImage image = report::render_chart(chart);
  // The diagonal runs from lower left to upper right: the legend takes the upper left corner, whose
  // inside is white with black text.
  int black = 0;
  for (int y = f.plot.top + 12; y < f.plot.top + 40; ++y)
    for (int x = f.plot.left + 12; x < f.plot.left + 150; ++x) black += image.at(x, y) == report::kBlack;
  EXPECT_GT(black, 30);

  report::LineChart scatter;
  scatter.x = {"", false, 0, 10};
  scatter.y = {"", false, 0, 10};
  report::ChartSeries points;
  points.line_width = 0;
  points.marker_radius = 4;
  points.colour = report::kGreen;
  points.x = {3};
  points.y = {3};
  points.point_labels = {"B=32"};
  scatter.series.push_back(points);
  const report::ChartFrame sf = report::chart_frame(scatter);
  const report::RgbImage dots = report::render_chart(scatter);
  const int px = int(std::lround(sf.pixel_x(3))), py = int(std::lround(sf.pixel_y(3)));
  EXPECT_EQ(dots.at(px, py), report::kGreen);
  EXPECT_EQ(dots.at(px + 3, py), report::kGreen);
  EXPECT_EQ(dots.at(px + 20, py + 20), report::kWhite);
  int label_ink = 0;
  for (int y = py - 20; y < py; ++y)
    for (int x = px + 5; x < px + 40; ++x) label_ink += dots.at(x, y) == report::kBlack;
  EXPECT_GT(label_ink, 10);
}

}  // namespace
}  // namespace canvas
