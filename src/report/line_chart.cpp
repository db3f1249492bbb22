// Layout and drawing of line_chart.h. Sizes are in pixels for text drawn at scale 2 (a 10x14 capital),
// which reads like matplotlib's default 10-point text at 120 dpi.
#include "report/line_chart.h"

#include <algorithm>
#include <cmath>

#include "report/bitmap_font.h"

namespace canvas::report {
namespace {

constexpr int kPad = 10;          // image edge to text
constexpr int kTickLength = 5;    // outside the plot
constexpr int kTickGap = 4;       // tick end to its label
constexpr int kRightMargin = 30;  // room for half the last x label
const Rgb kGrid = blend({176, 176, 176}, kWhite, 0.3);
const Rgb kLegendEdge{204, 204, 204};

// A series point on the axes, or nothing when an axis cannot show it.
bool drawable(const ChartFrame& f, double x, double y) {
  return std::isfinite(f.pixel_x(x)) && std::isfinite(f.pixel_y(y));
}

std::string fitted_title(const std::string& title, int width, int& scale) {
  std::string text = drawable_text(title);
  for (scale = 2; scale >= 1; --scale)
    if (text_width(text, scale) <= width) return text;
  scale = 1;
  while (!text.empty() && text_width(text + "...", 1) > width) text.pop_back();
  return text + "...";
}

struct LegendEntry {
  std::string name;
  Rgb colour;
  int line_width = 0, marker_radius = 0;
  bool dashed = false;
};

std::vector<LegendEntry> legend_entries(const LineChart& chart) {
  std::vector<LegendEntry> out;
  for (const ChartSeries& s : chart.series)
    if (!s.name.empty()) out.push_back({s.name, s.colour, s.line_width, s.marker_radius, false});
  for (const ReferenceLine& r : chart.reference_lines)
    if (!r.name.empty()) out.push_back({r.name, r.colour, r.width, 0, r.dashed});
  return out;
}

// How much of the drawn data a box would hide: points and samples along lines inside it.
int covered(const LineChart& chart, const ChartFrame& f, const PixelRect& box) {
  int n = 0;
  for (const ChartSeries& s : chart.series) {
    bool have_last = false;
    double lx = 0, ly = 0;
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!drawable(f, s.x[i], s.y[i])) {
        have_last = false;
        continue;
      }
      const double px = f.pixel_x(s.x[i]), py = f.pixel_y(s.y[i]);
      n += box.contains(px, py) ? 4 : 0;
      if (have_last && s.line_width > 0)
        for (int k = 1; k < 8; ++k) n += box.contains(lx + (px - lx) * k / 8, ly + (py - ly) * k / 8);
      have_last = true;
      lx = px;
      ly = py;
    }
  }
  for (const ReferenceLine& r : chart.reference_lines) {
    const double py = f.pixel_y(r.y);
    if (std::isfinite(py) && py >= box.top - 2 && py < box.bottom + 2) n += 8;
  }
  return n;
}

void draw_legend(Painter& p, const LineChart& chart, const ChartFrame& f) {
  const std::vector<LegendEntry> entries = legend_entries(chart);
  if (entries.empty()) return;
  const int s = f.text_scale, row = text_height(s) + 6, sample = 16 * s, inset = 10;
  int text_w = 0;
  for (const LegendEntry& e : entries) text_w = std::max(text_w, text_width(e.name, s));
  const int w = 8 + sample + 10 + text_w + 8, h = 6 + row * int(entries.size()) + 2;
  // Matplotlib's "best": the first corner (upper right, upper left, lower left, lower right) hiding least.
  const PixelRect& a = f.plot;
  const PixelRect corners[] = {
      {a.right - inset - w, a.top + inset, a.right - inset, a.top + inset + h},
      {a.left + inset, a.top + inset, a.left + inset + w, a.top + inset + h},
      {a.left + inset, a.bottom - inset - h, a.left + inset + w, a.bottom - inset},
      {a.right - inset - w, a.bottom - inset - h, a.right - inset, a.bottom - inset}};
  PixelRect box = corners[0];
  int least = -1;
  for (const PixelRect& c : corners) {
    const int hidden = covered(chart, f, c);
    if (least < 0 || hidden < least) {
      least = hidden;
      box = c;
    }
  }
  p.fill_rect(box, kWhite);
  p.frame_rect(box, kLegendEdge);
  for (size_t i = 0; i < entries.size(); ++i) {
    const LegendEntry& e = entries[i];
    const int top = box.top + 6 + row * int(i);
    const int mid = top + kGlyphCapRows * s / 2;
    const int x0 = box.left + 8, x1 = x0 + sample;
    if (e.line_width > 0) p.line(x0, mid, x1, mid, e.colour, e.line_width, e.dashed ? 4 * s : 0);
    if (e.marker_radius > 0) p.disc((x0 + x1) / 2.0, mid, e.marker_radius, e.colour);
    p.text(x1 + 10, top, e.name, kBlack, s);
  }
}

}  // namespace

double ChartFrame::pixel_x(double value) const {
  return plot.left + x.fraction(value) * double(plot.right - 1 - plot.left);
}

double ChartFrame::pixel_y(double value) const {
  return double(plot.bottom - 1) - y.fraction(value) * double(plot.bottom - 1 - plot.top);
}

ChartFrame chart_frame(const LineChart& chart) {
  ChartFrame f;
  const int s = f.text_scale, th = text_height(s);
  f.plot.top = chart.title.empty() ? 2 * kPad : kPad + th + kPad;
  f.plot.bottom = chart.height - (kTickLength + kTickGap + th + (chart.x.label.empty() ? 0 : 8 + th) + kPad);
  std::vector<double> xs, ys;
  for (const ChartSeries& series : chart.series) {
    xs.insert(xs.end(), series.x.begin(), series.x.end());
    ys.insert(ys.end(), series.y.begin(), series.y.end());
  }
  for (const ReferenceLine& r : chart.reference_lines) ys.push_back(r.y);
  // y first: its labels' width sets the left margin, and with it the x axis's length.
  f.y = make_axis_scale(chart.y, ys, std::max(f.plot.bottom - f.plot.top, 1), false, s);
  int label_w = 0;
  for (const std::string& l : f.y.labels) label_w = std::max(label_w, text_width(l, s));
  f.plot.left = kPad + (chart.y.label.empty() ? 0 : th + 8) + label_w + kTickGap + kTickLength;
  f.plot.right = chart.width - kRightMargin;
  f.plot.right = std::max(f.plot.right, f.plot.left + 2);
  f.plot.bottom = std::max(f.plot.bottom, f.plot.top + 2);
  f.x = make_axis_scale(chart.x, xs, f.plot.right - f.plot.left, true, s);
  return f;
}

RgbImage render_chart(const LineChart& chart) {
  RgbImage image(chart.width, chart.height);
  const ChartFrame f = chart_frame(chart);
  const PixelRect& a = f.plot;
  const int s = f.text_scale, th = text_height(s);
  Painter p(image);

  // Grid, then what it frames, clipped to the plot area.
  p.clip_to(a);
  for (double t : f.x.ticks) p.line(f.pixel_x(t), a.top, f.pixel_x(t), a.bottom - 1, kGrid);
  for (double t : f.y.ticks) p.line(a.left, f.pixel_y(t), a.right - 1, f.pixel_y(t), kGrid);
  for (const ReferenceLine& r : chart.reference_lines)
    p.line(a.left, f.pixel_y(r.y), a.right - 1, f.pixel_y(r.y), r.colour, r.width,
           r.dashed ? 6 * r.width : 0);
  for (const ChartSeries& series : chart.series) {
    const size_t n = std::min(series.x.size(), series.y.size());
    if (series.line_width > 0)
      for (size_t i = 1; i < n; ++i)
        if (drawable(f, series.x[i - 1], series.y[i - 1]) && drawable(f, series.x[i], series.y[i]))
          p.line(f.pixel_x(series.x[i - 1]), f.pixel_y(series.y[i - 1]), f.pixel_x(series.x[i]),
                 f.pixel_y(series.y[i]), series.colour, series.line_width);
    if (series.marker_radius > 0)
      for (size_t i = 0; i < n; ++i)
        if (drawable(f, series.x[i], series.y[i]))
          p.disc(f.pixel_x(series.x[i]), f.pixel_y(series.y[i]), series.marker_radius, series.colour);
  }
  p.unclip();
  // Point labels: small, up and to the right of their point, for the points inside the plot.
  const int label_scale = std::max(1, s / 2);
  for (const ChartSeries& series : chart.series)
    for (size_t i = 0; i < std::min({series.x.size(), series.y.size(), series.point_labels.size()}); ++i) {
      if (!drawable(f, series.x[i], series.y[i])) continue;
      const double px = f.pixel_x(series.x[i]), py = f.pixel_y(series.y[i]);
      if (!a.contains(px, py)) continue;
      p.text(int(px) + 7, int(py) - 7 - kGlyphCapRows * label_scale, series.point_labels[i], kBlack,
             label_scale);
    }

  // The frame, ticks and their labels.
  p.frame_rect(a, kBlack);
  for (size_t i = 0; i < f.x.ticks.size(); ++i) {
    const int px = int(std::lround(f.pixel_x(f.x.ticks[i])));
    p.line(px, a.bottom, px, a.bottom + kTickLength - 1, kBlack);
    p.text(px - text_width(f.x.labels[i], s) / 2, a.bottom + kTickLength + kTickGap, f.x.labels[i], kBlack,
           s);
  }
  for (size_t i = 0; i < f.y.ticks.size(); ++i) {
    const int py = int(std::lround(f.pixel_y(f.y.ticks[i])));
    p.line(a.left - kTickLength, py, a.left - 1, py, kBlack);
    p.text(a.left - kTickLength - kTickGap - text_width(f.y.labels[i], s), py - kGlyphCapRows * s / 2,
           f.y.labels[i], kBlack, s);
  }
  // Axis labels centred on the plot, the title centred on the image.
  if (!chart.x.label.empty())
    p.text((a.left + a.right - text_width(chart.x.label, s)) / 2, a.bottom + kTickLength + kTickGap + th + 8,
           chart.x.label, kBlack, s);
  if (!chart.y.label.empty())
    p.text(kPad, (a.top + a.bottom - text_width(chart.y.label, s)) / 2, chart.y.label, kBlack, s, true);
  if (!chart.title.empty()) {
    int title_scale = s;
    const std::string title = fitted_title(chart.title, chart.width - 2 * kPad, title_scale);
    p.text((chart.width - text_width(title, title_scale)) / 2, kPad + (th - text_height(title_scale)), title,
           kBlack, title_scale);
  }
  draw_legend(p, chart, f);
  return image;
}

}  // namespace canvas::report
