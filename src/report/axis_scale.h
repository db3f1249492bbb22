// A chart axis: what the caller asks for (label, log or linear, fixed ends) and what is drawn (range,
// tick positions and their labels).
#pragma once
#include <limits>
#include <string>
#include <vector>

namespace canvas::report {

struct ChartAxis {
  std::string label;
  bool log = false;
  // Fixed ends; NaN takes that end from the data with a 5% margin.
  double min = std::numeric_limits<double>::quiet_NaN();
  double max = std::numeric_limits<double>::quiet_NaN();
};

struct AxisScale {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;
  std::vector<std::string> labels;
  // 0 at lo, 1 at hi (log-spaced on a log axis); NaN for a value a log axis cannot show.
  double fraction(double value) const;
};

// The drawn axis for `values` (those not finite, or not positive on a log axis, are ignored) along
// `pixels` pixels, with as many ticks as fit labels drawn at `text_scale` without touching.
AxisScale make_axis_scale(const ChartAxis& axis, const std::vector<double>& values, int pixels,
                          bool horizontal, int text_scale);

}  // namespace canvas::report
