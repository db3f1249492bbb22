// The loss curves of a training run (OUT/curves.png), drawn from its train.csv.
#pragma once
#include <string>

#include "report/line_chart.h"

namespace canvas::train {

// Training loss per step (a thin, light line) and validation loss on the rows that have one (markers
// joined by a line), on a log loss axis; titled with the CSV's path. Throws Error naming the file and
// line when the log is not a canvas train.csv.
report::LineChart training_chart(const std::string& csv_path);
void write_training_plot(const std::string& csv_path, const std::string& png_path);

}  // namespace canvas::train
