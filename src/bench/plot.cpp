// bench_chart: the report's rows as a report::LineChart.
#include "bench/plot.h"

#include <cmath>
#include <cstdio>
#include <set>

#include "report/png.h"

namespace canvas::bench {

report::LineChart bench_chart(const BenchReport& report) {
  report::LineChart chart;
  chart.title = report.model_info.source + " (" + dtype_name(report.footprint.weight_type) + ", " +
                std::to_string(report.config.n_layers) + " layers) on " + report.machine.cpu;
  chart.x.label = "tokens fixed per pass";
  chart.y.label = "decode tokens/s";
  chart.y.min = 0;
  std::set<int> thread_counts;
  double most = 1;
  for (const BenchRow& row : report.rows) {
    thread_counts.insert(row.threads);
    if (std::isfinite(row.tokens_per_forward)) most = std::max(most, row.tokens_per_forward);
  }
  chart.x.min = 0;
  chart.x.max = most * 1.15;

  for (const BenchRow& row : report.rows) {
    if (!std::isfinite(row.decode_tokens_per_s)) continue;
    if (row.mode == "ar") {
      chart.reference_lines.push_back(
          {"AR (" + std::to_string(row.threads) + " threads)", row.decode_tokens_per_s});
      continue;
    }
    if (row.mode != "diffusion" || !std::isfinite(row.tokens_per_forward)) continue;
    report::ChartSeries* series = nullptr;
    const std::string name = "diffusion, cache " + row.cache;
    for (report::ChartSeries& s : chart.series)
      if (s.name == name) series = &s;
    if (!series) {
      report::ChartSeries s;
      s.name = name;
      s.colour = row.cache == "none"     ? report::kRed
                 : row.cache == "prefix" ? report::kBlue
                 : row.cache == "dual"   ? report::kGreen
                                         : report::kBlack;
      s.line_width = 0;
      s.marker_radius = 5;
      chart.series.push_back(s);
      series = &chart.series.back();
    }
    char tag[96];
    if (row.threshold > 0)
      std::snprintf(tag, sizeof tag, "B=%lld thr=%.2f", (long long)row.block_length, row.threshold);
    else
      std::snprintf(tag, sizeof tag, "B=%lld s=%lld", (long long)row.block_length, (long long)row.steps);
    std::string label = tag;
    if (thread_counts.size() > 1) label += " t=" + std::to_string(row.threads);
    series->x.push_back(row.tokens_per_forward);
    series->y.push_back(row.decode_tokens_per_s);
    series->point_labels.push_back(label);
  }
  return chart;
}

void write_bench_plot(const BenchReport& report, const std::string& png_path) {
  report::write_png(png_path, report::render_chart(bench_chart(report)));
}

}  // namespace canvas::bench
