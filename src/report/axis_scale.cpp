// Axis ranges and ticks for line_chart.h: "nice" linear steps (1, 2, 2.5, 5 x 10^k) and log ticks at
// decades (and 2 and 5, or every digit, when a range spans too few decades to show three).
#include "report/axis_scale.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "report/bitmap_font.h"

namespace canvas::report {

double AxisScale::fraction(double value) const {
  if (!log) return (value - lo) / (hi - lo);
  if (!(value > 0)) return std::numeric_limits<double>::quiet_NaN();
  return (std::log10(value) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
}

namespace {

// The fewest decimals that write `step` exactly (to 1e-9 of it): 2.5 -> 1, 0.25 -> 2, 20 -> 0.
int decimals_for(double step) {
  for (int d = 0; d < 10; ++d) {
    const double scaled = step * std::pow(10.0, d);
    if (std::fabs(scaled - std::round(scaled)) < 1e-6 * std::max(1.0, scaled)) return d;
  }
  return 10;
}

std::string format_fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find_first_not_of("-0.") == std::string::npos)
    s = decimals > 0 ? "0." + std::string(size_t(decimals), '0') : "0";
  return s;
}

// The next nice step above `step` (mantissas 1, 2, 2.5, 5).
double next_nice(double step) {
  const double magnitude = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double m = step / magnitude;
  for (double nice : {2.0, 2.5, 5.0, 10.0})
    if (m < nice - 1e-9) return nice * magnitude;
  return 20 * magnitude;
}

double nice_at_least(double raw) {
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double nice : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (nice * magnitude >= raw * (1 - 1e-9)) return nice * magnitude;
  return 10 * magnitude;
}

// Whether adjacent labels stay apart along the axis: side by side on a horizontal axis, stacked on a
// vertical one.
bool labels_fit(const AxisScale& s, int pixels, bool horizontal, int text_scale) {
  for (size_t i = 1; i < s.ticks.size(); ++i) {
    const double gap = std::fabs(s.fraction(s.ticks[i]) - s.fraction(s.ticks[i - 1])) * pixels;
    const double need =
        horizontal
            ? (text_width(s.labels[i], text_scale) + text_width(s.labels[i - 1], text_scale)) / 2.0 + 12
            : text_height(text_scale) + 6;
    if (gap < need) return false;
  }
  return true;
}

void linear_ticks(AxisScale& s, int pixels, bool horizontal, int text_scale) {
  const double span = s.hi - s.lo;
  if (!std::isfinite(span) || !(span > 0)) return;
  const double target = std::max(2.0, pixels / (horizontal ? 100.0 : 60.0));
  for (double step = nice_at_least(span / target);; step = next_nice(step)) {
    s.ticks.clear();
    s.labels.clear();
    const int decimals = decimals_for(step);
    for (double k = std::ceil(s.lo / step - 1e-9); k * step <= s.hi + step * 1e-9; ++k) {
      s.ticks.push_back(k * step);
      s.labels.push_back(format_fixed(k * step, decimals));
    }
    if (s.ticks.size() <= 2 || labels_fit(s, pixels, horizontal, text_scale)) return;
  }
}

std::string format_log(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void log_ticks(AxisScale& s, int pixels, bool horizontal, int text_scale) {
  const int first = int(std::floor(std::log10(s.lo))), last = int(std::ceil(std::log10(s.hi)));
  auto ticks_with = [&](const std::vector<int>& mantissas, int decade_stride) {
    AxisScale out = s;
    out.ticks.clear();
    out.labels.clear();
    for (int d = first; d <= last; ++d) {
      if ((d - first) % decade_stride != 0) continue;
      for (int m : mantissas) {
        const double v = m * std::pow(10.0, d);
        if (v < s.lo * (1 - 1e-9) || v > s.hi * (1 + 1e-9)) continue;
        out.ticks.push_back(v);
        out.labels.push_back(format_log(v));
      }
    }
    return out;
  };
  // The sparsest set that shows three ticks and fits; else the densest that fits; else every n-th decade.
  const std::vector<std::vector<int>> sets = {{1}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
  AxisScale chosen;
  bool have = false;
  for (const auto& set : sets) {
    AxisScale candidate = ticks_with(set, 1);
    if (!labels_fit(candidate, pixels, horizontal, text_scale)) break;
    chosen = candidate;
    have = true;
    if (candidate.ticks.size() >= 3) break;
  }
  for (int stride = 2; !have; ++stride) {
    chosen = ticks_with({1}, stride);
    have = chosen.ticks.size() <= 2 || labels_fit(chosen, pixels, horizontal, text_scale);
  }
  s = chosen;
}

}  // namespace

AxisScale make_axis_scale(const ChartAxis& axis, const std::vector<double>& values, int pixels,
                          bool horizontal, int text_scale) {
  AxisScale s;
  s.log = axis.log;
  // Work in the space the axis is drawn in (log10 on a log axis), so that the margin looks the same.
  auto to_space = [&](double v) { return axis.log ? std::log10(v) : v; };
  auto from_space = [&](double v) { return axis.log ? std::pow(10.0, v) : v; };
  double a = std::numeric_limits<double>::infinity(), b = -a;
  for (double v : values)
    if (std::isfinite(v) && (!axis.log || v > 0)) {
      a = std::min(a, to_space(v));
      b = std::max(b, to_space(v));
    }
  if (a > b) {  // no data: the unit range
    a = 0;
    b = 1;
  }
  if (a == b) {
    const double half = axis.log ? 0.5 : std::max(std::fabs(a) * 0.1, 0.5);
    a -= half;
    b += half;
  }
  const double margin = 0.05 * (b - a);
  s.lo = std::isnan(axis.min) ? from_space(a - margin) : axis.min;
  s.hi = std::isnan(axis.max) ? from_space(b + margin) : axis.max;
  if (axis.log && !(s.lo > 0)) s.lo = from_space(a - margin);
  if (!(s.hi > s.lo)) s.hi = axis.log ? s.lo * 10 : s.lo + 1;
  if (axis.log)
    log_ticks(s, pixels, horizontal, text_scale);
  else
    linear_ticks(s, pixels, horizontal, text_scale);
  return s;
}

}  // namespace canvas::report
