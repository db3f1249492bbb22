// report/: PNG encoding read back by an independent decoder, the bitmap font, axis ticks, and charts
// checked pixel by pixel; the bench and training charts built from their data.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include "bench/plot.h"
#include "core/error.h"
#include "png_test_util.h"
#include "report/bitmap_font.h"
#include "report/line_chart.h"
#include "report/png.h"
#include "core/output_file.h"
#include "test_util.h"
#include "train/curves.h"

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
  EXPECT_FALSE(std::filesystem::exists(temp_file_for(dir.path("a.png"))));
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
  ASSERT_GE(f.y.ticks.size(), 2u);
  EXPECT_EQ(pixel((f.x.ticks[0] + f.x.ticks[1]) / 2, (f.y.ticks[f.y.ticks.size() - 2] + f.y.ticks.back()) / 2), report::kWhite);
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

TEST(BenchPlot, ChartHasAMarkerSeriesPerCacheAndArAsALine) {
  bench::BenchReport r;
  r.model_info.source = "synthetic llada:8b";
  r.footprint.weight_type = DType::Q4_0;
  r.config.n_layers = 32;
  r.machine.cpu = "AMD EPYC";
  auto row = [](const char* mode, const char* cache, int64_t steps, double tpp, double speed) {
    bench::BenchRow b;
    b.mode = mode;
    b.cache = cache;
    b.block_length = 32;
    b.steps = steps;
    b.threads = 2;
    b.tokens_per_forward = tpp;
    b.decode_tokens_per_s = speed;
    return b;
  };
  r.rows = {row("ar", "", 0, 1, 11.1), row("diffusion", "prefix", 2, 16, 30),
            row("diffusion", "prefix", 4, 8, 15.7), row("diffusion", "dual", 8, 4, 7.8),
            row("diffusion", "none", 8, 4, NAN)};
  r.rows.back().threshold = 0.9f;
  const report::LineChart c = bench::bench_chart(r);
  EXPECT_EQ(c.title, "synthetic llada:8b (q4_0, 32 layers) on AMD EPYC");
  EXPECT_EQ(c.x.label, "tokens fixed per pass");
  EXPECT_EQ(c.y.label, "decode tokens/s");
  EXPECT_EQ(c.x.min, 0);
  EXPECT_DOUBLE_EQ(c.x.max, 16 * 1.15);
  EXPECT_EQ(c.y.min, 0);
  ASSERT_EQ(c.series.size(), 2u);  // the row without a speed draws nothing
  EXPECT_EQ(c.series[0].name, "diffusion, cache prefix");
  EXPECT_EQ(c.series[0].colour, report::kBlue);
  EXPECT_EQ(c.series[0].line_width, 0);
  EXPECT_EQ(c.series[0].point_labels, (std::vector<std::string>{"B=32 s=2", "B=32 s=4"}));
  EXPECT_EQ(c.series[1].colour, report::kGreen);
  ASSERT_EQ(c.reference_lines.size(), 1u);
  EXPECT_EQ(c.reference_lines[0].name, "AR (2 threads)");
  EXPECT_DOUBLE_EQ(c.reference_lines[0].y, 11.1);

  r.rows.back().decode_tokens_per_s = 5;  // the threshold row, and a second thread count
  r.rows[1].threads = 4;
  const report::LineChart t = bench::bench_chart(r);
  EXPECT_EQ(t.series.back().point_labels, (std::vector<std::string>{"B=32 thr=0.90 t=2"}));
  EXPECT_EQ(t.series.back().colour, report::kRed);
}

TEST(TrainingCurves, ChartReadsTrainCsvAndNamesABadLine) {
  test::TempDir dir;
  const std::string csv = dir.path("train.csv");
  std::ofstream(csv) << "step,lr,loss,grad_norm,val_loss,tokens_per_second,elapsed_s,accuracy\n"
                        "1,0.001,2.5,1,,100,0.1,\n"
                        "2,0.001,2.0,1,2.2,100,0.2,0.1\n"
                        "3,0.001,1.5,1,,100,0.3,\n";
  const report::LineChart c = train::training_chart(csv);
  EXPECT_EQ(c.title, csv);
  EXPECT_TRUE(c.y.log);
  EXPECT_EQ(c.x.label, "step");
  EXPECT_EQ(c.y.label, "loss (nats per scored token)");
  ASSERT_EQ(c.series.size(), 2u);
  EXPECT_EQ(c.series[0].x, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(c.series[0].y, (std::vector<double>{2.5, 2.0, 1.5}));
  EXPECT_EQ(c.series[1].name, "validation loss");
  EXPECT_EQ(c.series[1].y, (std::vector<double>{2.2}));
  train::write_training_plot(csv, dir.path("curves.png"));
  const test::DecodedPng png = test::decode_png(test::read_text(dir.path("curves.png")));
  ASSERT_EQ(png.error, "");
  EXPECT_EQ(png.width, 880);
  EXPECT_EQ(png.height, 495);

  std::ofstream(csv, std::ios::app) << "4,0.001,oops,1,,100,0.4,\n";
  try {
    train::training_chart(csv);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(train::training_chart(dir.path("missing.csv")), Error);
}

}  // namespace
}  // namespace canvas
