// Line and scatter charts drawn to an RgbImage: axes with numeric ticks (linear or log), grid, title, axis
// labels, several series, dashed horizontal reference lines, point labels and a legend.
#pragma once
#include <string>
#include <vector>

#include "report/axis_scale.h"
#include "report/png.h"
#include "report/raster.h"

namespace canvas::report {

// Matplotlib's default cycle, so that charts read like the ones people know.
constexpr Rgb kBlue{31, 119, 180}, kOrange{255, 127, 14}, kGreen{44, 160, 44}, kRed{214, 39, 40},
    kGray{128, 128, 128}, kBlack{0, 0, 0}, kWhite{255, 255, 255};

struct ChartSeries {
  std::string name;  // the legend entry; "" leaves the series out of the legend
  Rgb colour = kBlue;
  std::vector<double> x, y;  // pairs; a pair that is not finite (or not positive on a log axis) is skipped
  int line_width = 2;        // 0: no line (a scatter)
  int marker_radius = 0;     // 0: no markers
  std::vector<std::string> point_labels;  // empty, or a small label per point, drawn up and right of it
};

// A horizontal line across the whole plot at y (a baseline to compare the series with).
struct ReferenceLine {
  std::string name;  // legend entry
  double y = 0;
  Rgb colour = kGray;
  int width = 2;
  bool dashed = true;
};

struct LineChart {
  int width = 960, height = 600;
  std::string title;
  ChartAxis x, y;
  std::vector<ChartSeries> series;
  std::vector<ReferenceLine> reference_lines;
};

// Where the plot area lies in the image and how data maps into it.
struct ChartFrame {
  PixelRect plot;
  AxisScale x, y;
  int text_scale = 2;
  double pixel_x(double value) const;
  double pixel_y(double value) const;
};

ChartFrame chart_frame(const LineChart& chart);
RgbImage render_chart(const LineChart& chart);

}  // namespace canvas::report
