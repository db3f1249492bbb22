// The chart of a bench report (`canvas bench --plot`): decode tokens/s against tokens fixed per pass.
#pragma once
#include <string>

#include "bench/harness.h"
#include "report/line_chart.h"

namespace canvas::bench {

// One marker per diffusion grid point (a colour per cache kind: none red, prefix blue, dual green),
// labelled with its block length and steps or threshold (and threads when the report has several thread
// counts); each thread count's AR decode speed as a dashed horizontal line. x runs from 0 so that one
// token per pass, AR's rate, sits inside the axis; y from 0.
report::LineChart bench_chart(const BenchReport& report);
void write_bench_plot(const BenchReport& report, const std::string& png_path);

}  // namespace canvas::bench
